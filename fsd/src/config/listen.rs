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
    /// it counts only where `pod_network_tokens` names the listener (or is `true` for the one
    /// there is), and the start logs a warning. Nothing
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

/// `pod_network_tokens`: the `http+pod:` listeners on which bearer tokens count. The operator
/// opts in per listener: `true` names the one `http+pod:` listener there is (with several it
/// would be a blanket opt-in, so it is refused: name them), a list names each by its spelling.
/// Only where it means something: every entry an `http+pod:` listener of this daemon, and a token
/// to accept (a key that would do nothing is a mistake, said at start).
pub(super) fn pod_network_tokens(
    listen: &[Listen],
    value: Option<super::file::PodNetworkTokens>,
    tokens: &[crate::identity::TokenEntry],
) -> Result<Vec<std::net::SocketAddr>, ConfigError> {
    use super::file::PodNetworkTokens;
    let pods: Vec<std::net::SocketAddr> =
        listen.iter().filter_map(|l| if let Listen::HttpPod(a) = l { Some(*a) } else { None }).collect();
    let chosen = match value {
        None | Some(PodNetworkTokens::All(false)) => return Ok(Vec::new()),
        Some(PodNetworkTokens::All(true)) => match pods.as_slice() {
            [] => {
                return Err(ConfigError::PodNetworkTokens(
                    "it applies to http+pod: listeners and there is none",
                ));
            }
            [one] => vec![*one],
            _ => {
                return Err(ConfigError::PodNetworkTokens(
                    "true is for a daemon with one http+pod: listener; with several, list those that take tokens: [\"http+pod:IP:PORT\"]",
                ));
            }
        },
        Some(PodNetworkTokens::Listeners(names)) => {
            if names.is_empty() {
                return Err(ConfigError::PodNetworkTokens(
                    "an empty list opts in nowhere: leave the key out, or name http+pod: listeners",
                ));
            }
            let mut chosen = Vec::new();
            for name in names {
                let addr = match Listen::parse(&name) {
                    Ok(Listen::HttpPod(addr)) => addr,
                    _ => return Err(ConfigError::PodNetworkListener(name, "expected http+pod:IP:PORT")),
                };
                if !pods.contains(&addr) {
                    return Err(ConfigError::PodNetworkListener(
                        name,
                        "this daemon has no such http+pod: listener",
                    ));
                }
                if !chosen.contains(&addr) {
                    chosen.push(addr);
                }
            }
            chosen
        }
    };
    if tokens.is_empty() {
        return Err(ConfigError::PodNetworkTokens("no token to accept: add [tokens.NAME]"));
    }
    Ok(chosen)
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
