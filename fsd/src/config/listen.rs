//! Where the daemon listens, who may open its Unix sockets, and the limits of its connections.

use std::path::PathBuf;

use super::ConfigError;

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
    /// The REST face (KEP-539.2 filesystem API) and gRPC-Web, over HTTP/1.1 or HTTP/2.
    Http(std::net::SocketAddr),
    /// The same face in plaintext even when TLS is configured, on loopback only: for the other
    /// containers of a pod (they share its network namespace) beside a TLS listener for the rest.
    HttpPlain(std::net::SocketAddr),
    /// The same face in plaintext on any address, declared for a pod network behind the
    /// agent-sandbox router (which only ever speaks plain HTTP to a pod): its callers are the
    /// identity `pod` (read-only unless `client_max_modes` says otherwise), a bearer token over
    /// it counts only with `pod_network_tokens = true`, and the start logs a warning. Nothing
    /// but a NetworkPolicy keeps others off it; the template ships one.
    HttpPod(std::net::SocketAddr),
    HttpUnix(PathBuf),
}

impl Listen {
    /// Parses `unix:PATH`, `tcp:HOST:PORT`, `http:HOST:PORT`, `http+plain:HOST:PORT`,
    /// `http+pod:HOST:PORT` or `http+unix:PATH`.
    pub fn parse(text: &str) -> Result<Listen, ConfigError> {
        if let Some(addr) = text.strip_prefix("http+pod:") {
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|_| ConfigError::Listen(text.to_owned(), "expected http+pod:IP:PORT"))?;
            return Ok(Listen::HttpPod(addr));
        }
        if let Some(addr) = text.strip_prefix("http+plain:") {
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|_| ConfigError::Listen(text.to_owned(), "expected http+plain:IP:PORT"))?;
            if !addr.ip().is_loopback() {
                return Err(ConfigError::Listen(text.to_owned(), "a plaintext listener must be on loopback"));
            }
            return Ok(Listen::HttpPlain(addr));
        }
        if let Some(path) = text.strip_prefix("http+unix:") {
            if path.is_empty() {
                return Err(ConfigError::Listen(text.to_owned(), "empty socket path"));
            }
            return Ok(Listen::HttpUnix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("http:") {
            let addr: std::net::SocketAddr =
                addr.parse().map_err(|_| ConfigError::Listen(text.to_owned(), "expected http:IP:PORT"))?;
            return Ok(Listen::Http(addr));
        }
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ConfigError::Listen(text.to_owned(), "empty socket path"));
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = text.strip_prefix("tcp:") {
            let addr: std::net::SocketAddr =
                addr.parse().map_err(|_| ConfigError::Listen(text.to_owned(), "expected tcp:IP:PORT"))?;
            // Whether a non-loopback address is allowed depends on TLS: checked in `resolve`.
            return Ok(Listen::Tcp(addr));
        }
        Err(ConfigError::Listen(
            text.to_owned(),
            "expected unix:PATH, tcp:IP:PORT, http:IP:PORT, http+plain:IP:PORT, http+pod:IP:PORT or http+unix:PATH",
        ))
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
            Listen::Tcp(addr) => write!(f, "tcp:{addr}"),
            Listen::Http(addr) => write!(f, "http:{addr}"),
            Listen::HttpPlain(addr) => write!(f, "http+plain:{addr}"),
            Listen::HttpPod(addr) => write!(f, "http+pod:{addr}"),
            Listen::HttpUnix(path) => write!(f, "http+unix:{}", path.display()),
        }
    }
}

/// `pod_network_tokens`: whether bearer tokens count on the `http+pod:` listeners. Only an
/// explicit `true` turns it on, and only where it means something: an `http+pod:` listener to
/// accept them on and a token to accept (a key that would do nothing is a mistake, said at start).
pub(super) fn pod_network_tokens(
    listen: &[Listen],
    value: Option<bool>,
    tokens: &[crate::identity::TokenEntry],
) -> Result<bool, ConfigError> {
    if value != Some(true) {
        return Ok(false);
    }
    if !listen.iter().any(|l| matches!(l, Listen::HttpPod(_))) {
        return Err(ConfigError::PodNetworkTokens("it applies to http+pod: listeners and there is none"));
    }
    if tokens.is_empty() {
        return Err(ConfigError::PodNetworkTokens("no token to accept: add [tokens.NAME]"));
    }
    Ok(true)
}

/// `socket_mode` (octal text, at most 0777; default 0660: owner and group) and `socket_group`.
pub(super) fn socket_access(
    mode: Option<&str>,
    group: Option<&str>,
) -> Result<crate::sys::socket::SocketAccess, ConfigError> {
    let mode = match mode {
        None => 0o660,
        Some(text) => {
            let digits = text.strip_prefix("0o").unwrap_or(text);
            match u32::from_str_radix(digits, 8) {
                Ok(bits) if bits <= 0o777 && !digits.is_empty() && !digits.starts_with('+') => bits,
                _ => return Err(ConfigError::SocketMode(text.to_owned())),
            }
        }
    };
    let gid = match group {
        None => None,
        Some(text) => Some(match text.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_id(text).ok_or_else(|| ConfigError::SocketGroup(text.to_owned()))?,
        }),
    };
    Ok(crate::sys::socket::SocketAccess { mode, gid })
}

/// A group's id from /etc/group (`name:x:gid:members`).
fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name)).then(|| fields.nth(1)?.parse().ok()).flatten()
    })
}

/// Connection limits (HTTP/2 and TCP) of the daemon's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Transport {
    /// Open connections per TCP listener; more are closed at accept.
    pub max_connections: usize,
    /// Open connections per Unix-socket listener, and per peer uid on one.
    pub max_unix_connections: usize,
    pub max_unix_connections_per_uid: usize,
    /// HTTP/2 streams a connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Calls of one connection served at once; the rest wait their turn.
    pub max_calls_per_connection: usize,
    pub keepalive_interval: std::time::Duration,
    pub keepalive_timeout: std::time::Duration,
    /// A TLS handshake not finished within this is dropped.
    pub handshake_timeout: std::time::Duration,
    /// A TCP connection without a call for this long is closed.
    pub idle_timeout: std::time::Duration,
    /// TLS handshakes in progress at once per listener, and per source address.
    pub max_handshakes: usize,
    pub max_handshakes_per_source: usize,
    /// A TCP connection without a completed authenticated call after this long is closed.
    pub unauthenticated_idle: std::time::Duration,
}
