//! The REST face's settings: the root its paths are relative to, and the metadata it may serve.

use std::path::{Path, PathBuf};

use super::ConfigError;
use crate::backend::RootSpec;

/// The REST face's settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rest {
    /// The absolute directory request paths are joined to (one of the roots).
    pub root: PathBuf,
    pub metadata_env_prefix: String,
    pub metadata_env: Vec<String>,
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
    })
}
