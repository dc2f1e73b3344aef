//! TLS for TCP listeners: the rustls server configuration (TLS 1.3 only, ALPN h2, ring), built
//! from PEM files the network process reads before it confines itself and the supervisor reads
//! again when they change (`watch`), the holder that swaps it for new handshakes, and the names
//! of a verified client certificate, which become the caller's identity.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, RootCertStore, server::WebPkiClientVerifier};

pub mod watch;

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

/// The TLS part of the daemon's configuration (paths only; read by [`TlsFiles::read`]).
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
    /// The file was read, but what it holds is not PEM (a half-written or garbled file).
    #[error("{0} {1} is not valid PEM: {2}")]
    BadPem(&'static str, PathBuf, String),
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

/// The certificates of the PEM bytes `pem`, read from `path`, which the config key `key` names.
fn certificates(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem(key, path.to_owned(), e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(key, path.to_owned()));
    }
    Ok(certs)
}

/// The contents of the TLS files. The network process reads them itself before it confines
/// itself; after that the supervisor reads them whenever they change (`tls::watch`) and hands
/// them over in a [`crate::ipc_messages::Control::Tls`] frame.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct TlsFiles {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// Read only when client certificates are asked for.
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key into a log.
        f.debug_struct("TlsFiles").finish_non_exhaustive()
    }
}

impl TlsFiles {
    pub fn read(tls: &TlsConfig) -> Result<TlsFiles, TlsError> {
        let read = |key: &'static str, path: &Path| {
            std::fs::read(path).map_err(|e| {
                TlsError::Pem(key, path.to_owned(), rustls_pki_types::pem::Error::Io(e).to_string())
            })
        };
        let client_ca = match (&tls.client_ca, tls.client_certs) {
            (Some(ca), ClientCerts::Required | ClientCerts::Optional) => Some(read("tls_client_ca", ca)?),
            _ => None,
        };
        Ok(TlsFiles { cert: read("tls_cert", &tls.cert)?, key: read("tls_key", &tls.key)?, client_ca })
    }
}

/// What `hello` and `doctor` say of the certificate the TCP listeners present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The serial number: lowercase hex of its DER bytes, as `openssl x509 -serial` prints it
    /// (in upper case).
    pub serial: String,
    /// The end of its validity, in seconds since the Unix epoch.
    pub not_after: i64,
}

impl CertInfo {
    /// `not_after` as RFC 3339, for the logs.
    pub fn expires(&self) -> String {
        match u64::try_from(self.not_after) {
            Ok(secs) => format!("{}Z", fsd_proto::time::Civil::from_unix(secs).format('T')),
            Err(_) => self.not_after.to_string(),
        }
    }

    fn of(key: &'static str, path: &Path, der: &CertificateDer<'_>) -> Result<CertInfo, TlsError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| TlsError::BadPem(key, path.to_owned(), e.to_string()))?;
        Ok(CertInfo {
            serial: hex::encode(cert.raw_serial()),
            not_after: cert.validity().not_after.timestamp(),
        })
    }
}

/// The server configurations made from one set of TLS files: the gRPC listeners' (ALPN h2) and
/// the HTTP listeners' (h2 and HTTP/1.1: REST, gRPC-Web through proxies).
#[derive(Debug)]
pub struct Served {
    pub grpc: Arc<rustls::ServerConfig>,
    pub http: Arc<rustls::ServerConfig>,
    pub certificate: CertInfo,
}

/// Parses the files' contents and builds the server configurations; the paths only name the
/// files in errors. Every check is here, so the supervisor refuses a bad rotation with the same
/// words the network process refuses a bad start with.
pub fn build(tls: &TlsConfig, files: &TlsFiles) -> Result<Served, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("tls_cert", &tls.cert, &files.cert)?;
    let certificate = CertInfo::of("tls_cert", &tls.cert, &chain[0])?;
    let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey(tls.key.clone()),
        e => TlsError::BadPem("tls_key", tls.key.clone(), e.to_string()),
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match (&tls.client_ca, &files.client_ca, tls.client_certs) {
        (Some(ca), Some(pem), ClientCerts::Required | ClientCerts::Optional) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("tls_client_ca", ca, pem)? {
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
    let mut grpc = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            TlsError::KeyMismatch { key: tls.key.clone(), cert: tls.cert.clone() }
        }
        e => TlsError::Rustls(e),
    })?;
    // gRPC is HTTP/2 only.
    grpc.alpn_protocols = vec![b"h2".to_vec()];
    let mut http = grpc.clone();
    http.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Served { grpc: Arc::new(grpc), http: Arc::new(http), certificate })
}

/// The TLS configuration of the next handshake, shared by every TCP listener. Swapped whole when
/// the supervisor hands over rotated files: a connection keeps the configuration it shook hands
/// with, and a new one gets the new certificate, client CAs and session cache (a session of
/// the old configuration is never resumed under the new client CAs).
#[derive(Debug, Clone)]
pub struct Current(Arc<RwLock<Arc<Served>>>);

impl Current {
    pub fn new(served: Served) -> Current {
        Current(Arc::new(RwLock::new(Arc::new(served))))
    }

    pub fn get(&self) -> Arc<Served> {
        // The lock guards a plain swap that cannot panic halfway: a poisoned one holds a whole value.
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn replace(&self, served: Served) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(served);
    }

    /// The acceptor of a gRPC listener (`http` false) or an HTTP one.
    pub fn acceptor(&self, http: bool) -> Acceptor {
        Acceptor { current: self.clone(), http }
    }
}

/// A listener's view of [`Current`]: each handshake takes the configuration in use at its start.
#[derive(Debug, Clone)]
pub struct Acceptor {
    current: Current,
    http: bool,
}

impl Acceptor {
    pub fn get(&self) -> TlsAcceptor {
        let served = self.current.get();
        TlsAcceptor::from(if self.http { served.http.clone() } else { served.grpc.clone() })
    }
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
