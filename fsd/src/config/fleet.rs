//! The fleet keys, resolved together because they constrain one another: TLS for the TCP
//! listeners, bearer tokens (and where plaintext ones count), and the plaintext health listener.

use std::path::PathBuf;

use super::{ConfigError, Listen, TokenFile};

/// The fleet keys of the file, resolved together: they constrain one another.
pub(super) struct FleetFile {
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) tls_client_ca: Option<PathBuf>,
    pub(super) tls_client_cert: Option<String>,
    pub(super) tokens: Option<std::collections::BTreeMap<String, TokenFile>>,
    pub(super) health_listen: Option<String>,
    pub(super) pod_network_tokens: Option<super::file::PodNetworkTokens>,
}

pub(super) struct Fleet {
    pub(super) tls: Option<crate::tls::TlsConfig>,
    pub(super) tokens: Vec<crate::identity::TokenEntry>,
    pub(super) health_listen: Option<std::net::SocketAddr>,
    pub(super) pod_network_tokens: Vec<std::net::SocketAddr>,
}

pub(super) fn fleet_settings(listen: &[Listen], file: FleetFile) -> Result<Fleet, ConfigError> {
    use crate::tls::{ClientCerts, TlsConfig};
    let mut tokens = Vec::new();
    for (name, token) in file.tokens.unwrap_or_default() {
        let sha256 = crate::identity::parse_sha256(&token.sha256).ok_or(ConfigError::Token(
            name.clone(),
            "sha256 must be 64 hex digits (sha256sum of the token)",
        ))?;
        if token.cert.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::Token(name, "cert must name a client certificate"));
        }
        tokens.push(crate::identity::TokenEntry { name, sha256, cert: token.cert });
    }
    let tls = match (file.tls_cert, file.tls_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let client_certs = match (file.tls_client_ca.is_some(), file.tls_client_cert.as_deref()) {
                (false, None) => ClientCerts::None,
                (false, Some(_)) => return Err(ConfigError::Tls("tls_client_cert needs tls_client_ca")),
                (true, None | Some("required")) => ClientCerts::Required,
                (true, Some("optional")) => ClientCerts::Optional,
                (true, Some(_)) => {
                    return Err(ConfigError::Tls("tls_client_cert must be \"required\" or \"optional\""));
                }
            };
            if client_certs != ClientCerts::Required && tokens.is_empty() {
                // Otherwise a client without a certificate could never authenticate.
                return Err(ConfigError::Tls(
                    "TLS without required client certificates (no tls_client_ca, or tls_client_cert = \"optional\") needs bearer tokens ([tokens.NAME]): no client could authenticate",
                ));
            }
            Some(TlsConfig { cert, key, client_ca: file.tls_client_ca.clone(), client_certs })
        }
        _ => return Err(ConfigError::Tls("tls_cert and tls_key go together")),
    };
    if tls.is_none() && (file.tls_client_ca.is_some() || file.tls_client_cert.is_some()) {
        return Err(ConfigError::Tls("tls_client_ca needs tls_cert and tls_key"));
    }
    let pod_network_tokens = super::listen::pod_network_tokens(listen, file.pod_network_tokens, &tokens)?;
    if tls.is_none() && !tokens.is_empty() && pod_network_tokens.is_empty() {
        return Err(ConfigError::Tls("bearer tokens are accepted only over TLS: set tls_cert and tls_key"));
    }
    for l in listen {
        if let Listen::Tcp(addr) | Listen::Http(addr) = l
            && !addr.ip().is_loopback()
            && tls.is_none()
        {
            return Err(ConfigError::NeedsTls(l.to_string()));
        }
    }
    let health_listen = match file.health_listen {
        None => None,
        Some(text) => Some(
            text.strip_prefix("tcp:")
                .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
                .ok_or(ConfigError::HealthListen(text))?,
        ),
    };
    Ok(Fleet { tls, tokens, health_listen, pod_network_tokens })
}
