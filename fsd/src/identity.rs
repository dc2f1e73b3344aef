//! Who a client is: the Unix peer uid, the names of a verified client certificate, or a bearer
//! token checked against its stored hash. The identity keys the per-client maximum mode
//! (`client_max_modes`); it never widens anything by itself. Pure logic, no I/O.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::op::Mode;

/// A key of `client_max_modes`: `uid:1000` (or a bare `1000`), `cert:NAME`, `token:NAME`,
/// `tcp` (every client of a plaintext loopback TCP listener), or `pod` (every caller of an
/// `http+pod:` listener: the agent-sandbox router and whatever else the pod network lets in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum ClientKey {
    Uid(u32),
    Cert(String),
    Token(String),
    Tcp,
    Pod,
}

/// The highest mode of a plaintext loopback TCP client without a `tcp` entry: any local user,
/// and any container sharing the network namespace, can connect, so the 0660 socket's
/// protection does not apply.
pub const TCP_DEFAULT_MAX: Mode = Mode::ReadOnly;

/// The highest mode of an `http+pod:` caller without a `pod` entry: whoever the pod network
/// lets through (the router's callers, in-cluster clients) is nobody in particular.
pub const POD_DEFAULT_MAX: Mode = Mode::ReadOnly;

impl ClientKey {
    pub fn parse(text: &str) -> Option<ClientKey> {
        // Bare numbers are uids: the form configs used before certificates and tokens existed.
        if let Ok(uid) = text.parse::<u32>() {
            return Some(ClientKey::Uid(uid));
        }
        if text == "tcp" {
            return Some(ClientKey::Tcp);
        }
        if text == "pod" {
            return Some(ClientKey::Pod);
        }
        let (kind, name) = text.split_once(':')?;
        if name.is_empty() {
            return None;
        }
        match kind {
            "uid" => name.parse().ok().map(ClientKey::Uid),
            "cert" => Some(ClientKey::Cert(name.to_owned())),
            "token" => Some(ClientKey::Token(name.to_owned())),
            _ => None,
        }
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::Uid(uid) => write!(f, "uid:{uid}"),
            ClientKey::Cert(name) => write!(f, "cert:{name}"),
            ClientKey::Token(name) => write!(f, "token:{name}"),
            ClientKey::Tcp => f.write_str("tcp"),
            ClientKey::Pod => f.write_str("pod"),
        }
    }
}

/// What the transport established about the caller of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The Unix peer uid (`SO_PEERCRED`), on a Unix socket.
    pub uid: Option<u32>,
    /// The names of a client certificate the TLS handshake verified: URI SANs, DNS SANs, then
    /// the subject CN. Empty without one.
    pub cert_names: Vec<String>,
    /// The name of the bearer token the call presented and that was accepted.
    pub token: Option<String>,
    /// The call came over a plaintext (loopback) TCP listener: no credential at all.
    pub tcp: bool,
    /// The call came over an `http+pod:` listener (plaintext, the pod network): no credential
    /// but, where the operator allowed it, a bearer token.
    pub pod: bool,
}

impl Identity {
    /// The client's name in logs and audit records: the most specific credential.
    pub fn label(&self) -> String {
        if let Some(token) = &self.token {
            return format!("token:{token}");
        }
        if let Some(name) = self.cert_names.first() {
            return format!("cert:{name}");
        }
        if self.pod {
            return "pod".to_owned();
        }
        match self.uid {
            Some(uid) => format!("uid:{uid}"),
            None => "tcp".to_owned(),
        }
    }

    /// This client's entry in `client_max_modes`, if it has one. A token's entry wins (it is a
    /// grant made for that token); then the certificate's names, the narrowest entry when
    /// several names have one (a certificate must not gain by carrying more names); then the
    /// listener's own identity (`pod`, `tcp`: capped even without an entry); then the uid.
    pub fn max_mode(&self, table: &BTreeMap<ClientKey, Mode>) -> Option<Mode> {
        if let Some(mode) = self.token.as_ref().and_then(|t| table.get(&ClientKey::Token(t.clone()))) {
            return Some(*mode);
        }
        let by_cert = self.cert_names.iter().filter_map(|n| table.get(&ClientKey::Cert(n.clone()))).min();
        if let Some(mode) = by_cert {
            return Some(*mode);
        }
        if self.pod {
            return Some(table.get(&ClientKey::Pod).copied().unwrap_or(POD_DEFAULT_MAX));
        }
        if self.tcp {
            return Some(table.get(&ClientKey::Tcp).copied().unwrap_or(TCP_DEFAULT_MAX));
        }
        self.uid.and_then(|uid| table.get(&ClientKey::Uid(uid)).copied())
    }
}

/// A configured bearer token: its SHA-256 (the token itself is never stored) and, optionally,
/// the certificate name it is bound to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenEntry {
    pub name: String,
    pub sha256: [u8; 32],
    /// When set, the token is accepted only on a connection whose verified client certificate
    /// carries this name: a token copied to another client's connection is refused.
    pub cert: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the bearer token is not valid for this daemon")]
    Unknown,
    #[error("the bearer token {token:?} is bound to another client certificate")]
    WrongConnection { token: String },
    #[error("the authorization header is not \"Bearer <token>\"")]
    Malformed,
}

/// Parses a 64-digit hex SHA-256.
pub fn parse_sha256(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The hex SHA-256 of a token, as `tokens.NAME.sha256` expects it.
pub fn token_sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks an `authorization` header value against the configured tokens. Every entry is compared
/// in constant time, so the time taken does not tell how close a guess came.
pub fn verify_bearer(
    header: &str,
    tokens: &[TokenEntry],
    cert_names: &[String],
) -> Result<String, TokenError> {
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(TokenError::Malformed)?;
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut found: Option<&TokenEntry> = None;
    for entry in tokens {
        if bool::from(entry.sha256.ct_eq(&digest)) && found.is_none() {
            found = Some(entry);
        }
    }
    let entry = found.ok_or(TokenError::Unknown)?;
    match &entry.cert {
        Some(bound) if !cert_names.iter().any(|n| n == bound) => {
            Err(TokenError::WrongConnection { token: entry.name.clone() })
        }
        _ => Ok(entry.name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(ClientKey::parse("1000"), Some(ClientKey::Uid(1000)));
        assert_eq!(ClientKey::parse("uid:0"), Some(ClientKey::Uid(0)));
        assert_eq!(ClientKey::parse("cert:agent-a"), Some(ClientKey::Cert("agent-a".into())));
        assert_eq!(
            ClientKey::parse("cert:spiffe://fleet/agent"),
            Some(ClientKey::Cert("spiffe://fleet/agent".into()))
        );
        assert_eq!(ClientKey::parse("token:ci"), Some(ClientKey::Token("ci".into())));
        assert_eq!(ClientKey::parse("tcp"), Some(ClientKey::Tcp));
        assert_eq!(ClientKey::Tcp.to_string(), "tcp");
        assert_eq!(ClientKey::parse("pod"), Some(ClientKey::Pod));
        assert_eq!(ClientKey::Pod.to_string(), "pod");
        for bad in ["alice", "uid:alice", "cert:", "group:1", "", "tcp:1", "TCP", "pod:1", "POD"] {
            assert_eq!(ClientKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn max_mode_prefers_token_then_narrowest_cert_then_uid() {
        let table: BTreeMap<ClientKey, Mode> = [
            (ClientKey::Uid(7), Mode::DangerFullAccess),
            (ClientKey::Cert("a".into()), Mode::WorkspaceWrite),
            (ClientKey::Cert("b".into()), Mode::ReadOnly),
            (ClientKey::Token("t".into()), Mode::DangerFullAccess),
        ]
        .into_iter()
        .collect();
        let id = |uid, names: &[&str], token: Option<&str>| Identity {
            uid,
            cert_names: names.iter().map(|s| (*s).to_owned()).collect(),
            token: token.map(str::to_owned),
            tcp: false,
            pod: false,
        };
        assert_eq!(id(Some(7), &[], None).max_mode(&table), Some(Mode::DangerFullAccess));
        assert_eq!(id(None, &["a"], None).max_mode(&table), Some(Mode::WorkspaceWrite));
        assert_eq!(id(None, &["a", "b"], None).max_mode(&table), Some(Mode::ReadOnly));
        assert_eq!(id(None, &["b"], Some("t")).max_mode(&table), Some(Mode::DangerFullAccess));
        assert_eq!(id(None, &["zz"], Some("other")).max_mode(&table), None);
        assert_eq!(id(None, &["a"], None).label(), "cert:a");
        assert_eq!(id(None, &["a"], Some("t")).label(), "token:t");
        assert_eq!(id(None, &[], None).label(), "tcp");
        // Plaintext loopback TCP: read-only unless `tcp` is configured.
        let tcp = Identity { tcp: true, ..Identity::default() };
        assert_eq!(tcp.label(), "tcp");
        assert_eq!(tcp.max_mode(&table), Some(Mode::ReadOnly));
        let with_tcp: BTreeMap<ClientKey, Mode> =
            [(ClientKey::Tcp, Mode::WorkspaceWrite)].into_iter().collect();
        assert_eq!(tcp.max_mode(&with_tcp), Some(Mode::WorkspaceWrite));
    }

    /// An `http+pod:` caller is `pod`, capped by its own entry (read-only without one) and never
    /// by `tcp`'s; a token the operator let count there keeps its own entry first.
    #[test]
    fn a_pod_network_caller_is_its_own_identity() {
        let pod = Identity { pod: true, ..Identity::default() };
        let with_token = Identity { pod: true, token: Some("router".into()), ..Identity::default() };
        let table = |entries: &[(ClientKey, Mode)]| entries.iter().cloned().collect::<BTreeMap<_, _>>();
        let cases = [
            (&pod, table(&[]), Some(Mode::ReadOnly)),
            (&pod, table(&[(ClientKey::Tcp, Mode::DangerFullAccess)]), Some(Mode::ReadOnly)),
            (&pod, table(&[(ClientKey::Pod, Mode::WorkspaceWrite)]), Some(Mode::WorkspaceWrite)),
            (&with_token, table(&[(ClientKey::Pod, Mode::ReadOnly)]), Some(Mode::ReadOnly)),
            (
                &with_token,
                table(&[
                    (ClientKey::Pod, Mode::ReadOnly),
                    (ClientKey::Token("router".into()), Mode::WorkspaceWrite),
                ]),
                Some(Mode::WorkspaceWrite),
            ),
        ];
        for (who, table, want) in cases {
            assert_eq!(who.max_mode(&table), want, "{who:?} {table:?}");
        }
        assert_eq!(pod.label(), "pod");
        assert_eq!(with_token.label(), "token:router");
    }

    #[test]
    fn bearer_tokens_are_checked_by_hash_and_binding() {
        let entry = |name: &str, token: &str, cert: Option<&str>| TokenEntry {
            name: name.into(),
            sha256: parse_sha256(&token_sha256_hex(token)).unwrap_or_default(),
            cert: cert.map(str::to_owned),
        };
        let tokens = vec![entry("ci", "s3cret", None), entry("alice", "alice-token", Some("agent-a"))];
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(verify_bearer("Bearer s3cret", &tokens, &[]), Ok("ci".into()));
        assert_eq!(verify_bearer("Bearer nope", &tokens, &[]), Err(TokenError::Unknown));
        assert_eq!(verify_bearer("s3cret", &tokens, &[]), Err(TokenError::Malformed));
        assert_eq!(verify_bearer("Bearer alice-token", &tokens, &names(&["agent-a"])), Ok("alice".into()));
        assert_eq!(
            verify_bearer("Bearer alice-token", &tokens, &names(&["agent-b"])),
            Err(TokenError::WrongConnection { token: "alice".into() })
        );
        assert_eq!(
            verify_bearer("Bearer alice-token", &tokens, &[]),
            Err(TokenError::WrongConnection { token: "alice".into() })
        );
        assert_eq!(parse_sha256("zz"), None);
    }
}
