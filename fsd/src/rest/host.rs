//! Who may address the HTTP face, by name (DNS rebinding) and by page (a browser's `Origin`).
//!
//! A web page in a developer's browser can make the browser send requests to a loopback listener:
//! directly (a cross-origin request names the page in `Origin`), or through DNS rebinding (a name
//! of the attacker's that now resolves to 127.0.0.1: the request's `Host` is that name). A
//! loopback plaintext listener therefore accepts only loopback names and addresses as `Host`, plus
//! the names the operator lists (`http_allowed_hosts`). A plaintext listener on another network
//! (a pod's, behind the agent-sandbox router) accepts the listed names and IP literals: an
//! address is never a rebound name. A TLS listener is not checked by name: a rebound name does
//! not match its certificate. On every TCP listener a request with an `Origin` is refused unless
//! that origin is listed (`http_allowed_origins`): no fsd client sends one, every browser does.

use tonic::codegen::http;

pub use crate::config::Allowed;

/// What reaches a listener, which decides the names it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Plaintext TCP on a loopback address: what a browser on this host reaches.
    LoopbackPlain,
    /// Plaintext TCP on another address (a pod network behind a router).
    NetworkPlain,
    /// TCP with TLS: the certificate names the server.
    Tls,
    /// A Unix socket: no browser connects to one.
    Unix,
}

impl Reach {
    /// The reach of a TCP listener on `addr`.
    pub fn tcp(addr: std::net::SocketAddr, tls: bool) -> Reach {
        match (tls, addr.ip().is_loopback()) {
            (true, _) => Reach::Tls,
            (false, true) => Reach::LoopbackPlain,
            (false, false) => Reach::NetworkPlain,
        }
    }
}

/// Why a request was refused before anything else looked at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` (or `:authority`) names something this listener does not answer to.
    Host(String),
    /// The request came from a web page whose origin is not listed.
    Origin(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Host(host) => write!(f, "host {host:?} is not a name this listener answers to"),
            Refusal::Origin(origin) => write!(f, "requests from origin {origin:?} are not accepted"),
        }
    }
}

/// The host part of an authority (`name`, `name:port`, `[v6]:port`), lower case, without a
/// trailing dot.
fn host_of(authority: &str) -> String {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => authority,
        },
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Allowed {
    /// Whether `request` may be served on a listener of `reach`.
    pub fn check<B>(&self, reach: Reach, request: &http::Request<B>) -> Result<(), Refusal> {
        if reach == Reach::Unix {
            return Ok(());
        }
        if let Some(origin) = request.headers().get(http::header::ORIGIN) {
            let text = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            let lower = text.trim_end_matches('/').to_ascii_lowercase();
            if !self.origins.contains(&lower) {
                return Err(Refusal::Origin(text));
            }
        }
        if reach == Reach::Tls {
            return Ok(());
        }
        // HTTP/2 names the authority in the URI, HTTP/1.1 in `Host`: each one given must be
        // accepted, and a request naming neither is refused like a wrong name.
        let mut names = Vec::new();
        if let Some(authority) = request.uri().authority() {
            names.push(authority.as_str().to_owned());
        }
        if let Some(host) = request.headers().get(http::header::HOST) {
            names.push(String::from_utf8_lossy(host.as_bytes()).into_owned());
        }
        if names.is_empty() {
            names.push(String::new());
        }
        for authority in names {
            let host = host_of(&authority);
            let accepted = is_loopback_name(&host)
                || self.hosts.contains(&host)
                || (reach == Reach::NetworkPlain && host.parse::<std::net::IpAddr>().is_ok());
            if !accepted {
                return Err(Refusal::Host(authority));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>, origin: Option<&str>) -> http::Request<()> {
        let mut builder = http::Request::builder().uri("/v1/files/a");
        if let Some(host) = host {
            builder = builder.header(http::header::HOST, host);
        }
        if let Some(origin) = origin {
            builder = builder.header(http::header::ORIGIN, origin);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn hosts_and_origins_are_judged_by_reach_and_config() {
        let allowed = Allowed {
            hosts: vec!["sandbox.agents.svc".into()],
            origins: vec!["https://console.example".into()],
        };
        let none = Allowed::default();
        use Reach::*;
        type Case<'a> = (&'a Allowed, Reach, Option<&'a str>, Option<&'a str>, bool);
        let cases: &[Case] = &[
            (&none, LoopbackPlain, Some("127.0.0.1:8080"), None, true),
            (&none, LoopbackPlain, Some("localhost:8080"), None, true),
            (&none, LoopbackPlain, Some("LOCALHOST."), None, true),
            (&none, LoopbackPlain, Some("[::1]:8080"), None, true),
            (&none, LoopbackPlain, Some("127.3.4.5"), None, true),
            (&none, LoopbackPlain, Some("app.localhost:1"), None, true),
            (&none, LoopbackPlain, Some("attacker.example:8080"), None, false),
            (&none, LoopbackPlain, Some("localhost.attacker.example"), None, false),
            (&none, LoopbackPlain, Some("10.0.0.5:8080"), None, false),
            (&none, LoopbackPlain, None, None, false),
            (&none, LoopbackPlain, Some("127.0.0.1:8080"), Some("http://attacker.example"), false),
            (&none, LoopbackPlain, Some("127.0.0.1:8080"), Some("null"), false),
            (&allowed, LoopbackPlain, Some("sandbox.agents.svc:80"), None, true),
            (&allowed, LoopbackPlain, Some("127.0.0.1"), Some("https://console.example"), true),
            (&allowed, LoopbackPlain, Some("127.0.0.1"), Some("https://Console.example/"), true),
            (&allowed, LoopbackPlain, Some("127.0.0.1"), Some("https://console.example:444"), false),
            (&none, NetworkPlain, Some("10.0.0.5:8080"), None, true),
            (&none, NetworkPlain, Some("[fd00::5]:8080"), None, true),
            (&none, NetworkPlain, Some("sandbox.agents.svc:8080"), None, false),
            (&allowed, NetworkPlain, Some("sandbox.agents.svc:8080"), None, true),
            (&none, Tls, Some("fsd.example"), None, true),
            (&none, Tls, Some("fsd.example"), Some("http://attacker.example"), false),
            (&none, Unix, Some("attacker.example"), Some("http://attacker.example"), true),
        ];
        for (allowed, reach, host, origin, ok) in cases {
            let got = allowed.check(*reach, &request(*host, *origin));
            assert_eq!(got.is_ok(), *ok, "{reach:?} host {host:?} origin {origin:?}: {got:?}");
        }
    }

    #[test]
    fn an_http2_authority_is_the_host() {
        let request = http::Request::builder().uri("http://attacker.example:80/v1/files/a").body(()).unwrap();
        let refused = Allowed::default().check(Reach::LoopbackPlain, &request);
        assert_eq!(refused, Err(Refusal::Host("attacker.example:80".into())));
        let request = http::Request::builder().uri("http://127.0.0.1:80/v1/files/a").body(()).unwrap();
        assert_eq!(Allowed::default().check(Reach::LoopbackPlain, &request), Ok(()));
    }
}
