//! TLS for TCP listeners: the rustls server configuration (TLS 1.3 only, ALPN h2, ring), built
//! from PEM files the network process reads before it confines itself, and the names of a
//! verified client certificate, which become the caller's identity.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, RootCertStore, server::WebPkiClientVerifier};

/// Whether a TLS listener asks for a client certificate, and what it does without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ClientCerts {
    /// No client certificate is requested: every call needs a bearer token.
    None,
    /// The handshake fails without a certificate signed by the client CA.
    Required,
    /// A certificate is verified when offered; without one, a bearer token is needed.
    Optional,
}

/// The TLS part of the daemon's configuration (paths only; read by `server_config`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub client_certs: ClientCerts,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The config key that names the file, its path, and why it could not be read.
    #[error("cannot read {0} {1}: {2}")]
    Pem(&'static str, PathBuf, String),
    #[error("{0} {1} holds no certificate")]
    NoCertificate(&'static str, PathBuf),
    #[error("tls_key {0} holds no private key")]
    NoKey(PathBuf),
    /// The usual slip: the key of another certificate (the client's, the CA's, an old one).
    #[error("tls_key {key} is not the key of the certificate in tls_cert {cert}")]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("invalid tls_client_ca {0}: {1}")]
    ClientCa(PathBuf, String),
    #[error("invalid TLS certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The certificates of the PEM file `path`, which the config key `key` names.
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Pem(key, path.to_owned(), e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(key, path.to_owned()));
    }
    Ok(certs)
}

/// Reads the certificate chain, key and client CA and builds the server configuration. Runs in
/// the network process before `confine::network`, which takes away every filesystem right.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("tls_cert", &tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey(tls.key.clone()),
        e => TlsError::Pem("tls_key", tls.key.clone(), e.to_string()),
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match (&tls.client_ca, tls.client_certs) {
        (Some(ca), ClientCerts::Required | ClientCerts::Optional) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("tls_client_ca", ca)? {
                roots.add(cert).map_err(|e| TlsError::ClientCa(ca.clone(), e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if tls.client_certs == ClientCerts::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier.build().map_err(|e| TlsError::ClientCa(ca.clone(), e.to_string()))?,
            )
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            TlsError::KeyMismatch { key: tls.key.clone(), cert: tls.cert.clone() }
        }
        e => TlsError::Rustls(e),
    })?;
    // gRPC is HTTP/2 only.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The names a client certificate answers to, most specific first: URI SANs (SPIFFE IDs), DNS
/// SANs, e-mail SANs, then the subject CNs. Called only on a certificate the handshake verified.
pub fn cert_names(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    let mut uris = Vec::new();
    let mut dns = Vec::new();
    let mut mail = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(u) => uris.push((*u).to_owned()),
                GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                GeneralName::RFC822Name(m) => mail.push((*m).to_owned()),
                _ => {}
            }
        }
    }
    let cns = cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok().map(str::to_owned));
    let mut names: Vec<String> = uris.into_iter().chain(dns).chain(mail).chain(cns).collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}
