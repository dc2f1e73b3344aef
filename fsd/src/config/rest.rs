//! The REST face's settings: the root its paths are relative to, and the metadata it may serve.

use std::path::{Path, PathBuf};

use super::ConfigError;
use crate::op::RootSpec;

/// The REST face's settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rest {
    /// The absolute directory request paths are joined to (one of the roots).
    pub root: PathBuf,
    pub metadata_env_prefix: String,
    pub metadata_env: Vec<String>,
    /// `http_allowed_hosts` and `http_allowed_origins` (`crate::rest::host`).
    pub allowed: Allowed,
}

/// The names and origins the operator allows (lower case; hosts without a port), which
/// `crate::rest::host` judges requests by.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Allowed {
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
}

impl Rest {
    /// The environment variables `/v1/metadata` serves: only those the config names.
    pub fn metadata(
        &self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> std::collections::BTreeMap<String, String> {
        vars.filter(|(name, _)| {
            (!self.metadata_env_prefix.is_empty() && name.starts_with(&self.metadata_env_prefix))
                || self.metadata_env.contains(name)
        })
        .collect()
    }
}

/// The REST face's root (one of the roots, canonical) and the metadata it may serve.
pub(super) fn rest_settings(
    roots: &[RootSpec],
    root: Option<PathBuf>,
    prefix: Option<String>,
    names: Option<Vec<String>>,
    (hosts, origins): (Option<Vec<String>>, Option<Vec<String>>),
) -> Result<Rest, ConfigError> {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let root = match root {
        Some(root) => {
            let wanted = canonical(&root);
            if !roots.iter().any(|r| canonical(&r.path) == wanted) {
                return Err(ConfigError::RestRoot(root));
            }
            wanted
        }
        None => {
            let first =
                roots.iter().find(|r| r.writable).or_else(|| roots.first()).ok_or(ConfigError::NoRoots)?;
            canonical(&first.path)
        }
    };
    Ok(Rest {
        root,
        metadata_env_prefix: prefix.unwrap_or_else(|| "SANDBOX_".to_owned()),
        metadata_env: names.unwrap_or_default(),
        allowed: Allowed {
            hosts: allowed_list("http_allowed_hosts", hosts, valid_host)?,
            origins: allowed_list("http_allowed_origins", origins, valid_origin)?,
        },
    })
}

/// A list of names, lower case, each checked by `valid`.
fn allowed_list(
    key: &'static str,
    values: Option<Vec<String>>,
    valid: fn(&str) -> bool,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for value in values.unwrap_or_default() {
        let lower = value.trim_end_matches(['.', '/']).to_ascii_lowercase();
        if !valid(&lower) {
            return Err(ConfigError::AllowedName { key, value });
        }
        out.push(lower);
    }
    Ok(out)
}

/// A host name or an IP address, without a port.
fn valid_host(host: &str) -> bool {
    host.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }))
}

/// `scheme://host[:port]`, as a browser sends it in `Origin`.
fn valid_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => (host, port),
        _ => (rest, "0"),
    };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    matches!(scheme, "http" | "https") && port.parse::<u16>().is_ok() && valid_host(host)
}
