//! A test PKI made with rcgen inside the test: a CA, server certificates (DNS and IP SANs) and
//! client certificates (identity in the subject CN), written as PEM files.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate authority and the folder its files go to.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    /// The CA certificate (PEM file).
    pub cert: PathBuf,
}

/// A certificate and its key (PEM files).
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let cert = dir.join(format!("{name}.pem"));
        std::fs::write(&cert, issuer.pem()).expect("write CA");
        Ca { issuer, dir: dir.to_owned(), cert }
    }

    fn issue(&self, file: &str, params: CertificateParams) -> Pair {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let pair =
            Pair { cert: self.dir.join(format!("{file}.pem")), key: self.dir.join(format!("{file}.key")) };
        std::fs::write(&pair.cert, cert.pem()).expect("write cert");
        std::fs::write(&pair.key, key.serialize_pem()).expect("write key");
        pair
    }

    /// A server certificate for `dns` names and `ips`.
    pub fn server(&self, file: &str, dns: &[&str], ips: &[IpAddr]) -> Pair {
        let mut params =
            CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>()).expect("params");
        params.subject_alt_names.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.distinguished_name.push(DnType::CommonName, dns.first().copied().unwrap_or("fsd"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(file, params)
    }

    /// A server certificate for `dns` names with this serial number (a rotation test tells the
    /// certificates apart by it).
    pub fn server_serial(&self, file: &str, dns: &[&str], serial: u64) -> Pair {
        let mut params =
            CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, dns.first().copied().unwrap_or("fsd"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        self.issue(file, params)
    }

    /// A client certificate whose identity (subject CN) is `name`.
    pub fn client(&self, file: &str, name: &str) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(file, params)
    }
}

/// The hex SHA-256 of a token, as the daemon's `tokens.NAME.sha256` wants it.
pub fn sha256_hex(token: &str) -> String {
    fsd::identity::token_sha256_hex(token)
}
