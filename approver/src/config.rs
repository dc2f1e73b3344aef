//! `fsd-approver serve --config FILE`: the web page people approve from, the people who may log
//! in to it, the daemons that may ask, and the webhook told when a request waits. Everything is
//! read and checked once at start; the page's process gets the resolved result in its first
//! message, so a mistake is one line before anything listens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ApproverError;

/// The file as written (`serve --config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    web: Option<WebFile>,
    grpc: Option<GrpcFile>,
    #[serde(default)]
    person: Vec<PersonFile>,
    #[serde(default)]
    daemon: Vec<DaemonFile>,
    webhook: Option<WebhookFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebFile {
    listen: String,
    url: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    login_failures: Option<u32>,
    login_window_secs: Option<u64>,
}

/// The daemons' listener (`serve --listen tcp:`): its TLS, and the CA of daemons' certificates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrpcFile {
    tls_cert: PathBuf,
    tls_key: PathBuf,
    client_ca: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PersonFile {
    name: String,
    token_file: Option<PathBuf>,
    certificate: Option<String>,
    #[serde(default)]
    clients: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaemonFile {
    sandbox: String,
    token_file: Option<PathBuf>,
    certificate: Option<String>,
    #[serde(default)]
    require_another_person: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookFile {
    url: String,
    attempts: Option<u32>,
    ca_file: Option<PathBuf>,
}

/// A bearer token: compared in constant time, never printed.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Whether `given` is this token, in time that does not depend on where they differ.
    pub fn is(&self, given: &str) -> bool {
        use subtle::ConstantTimeEq;
        self.0.len() == given.len() && bool::from(self.0.as_bytes().ct_eq(given.as_bytes()))
    }
}

/// The resolved configuration (the page's process receives it whole).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Config {
    pub web: Option<Web>,
    /// TLS of the daemons' listener, when `--listen` is `tcp:`.
    pub grpc: Option<Grpc>,
    pub people: Vec<Person>,
    pub daemons: Vec<Daemon>,
    pub webhook: Option<Webhook>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Web {
    pub listen: SocketAddr,
    /// The page's address as people reach it, without a trailing slash (links in webhooks).
    pub url: String,
    /// The certificate chain and the key (PEM): HTTPS. Without them, a loopback address only.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// The CA of people's client certificates (PEM), when people may log in with one.
    pub client_ca: Option<Vec<u8>>,
    /// Failed logins allowed per source address and per person in `login_window_secs`.
    pub login_failures: u32,
    pub login_window_secs: u64,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct Grpc {
    /// The certificate chain and the key (PEM) the daemons' listener serves TLS with.
    pub tls: (Vec<u8>, Vec<u8>),
    /// The CA of daemons' client certificates (PEM), when a daemon may be named by one.
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for Grpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grpc").field("client_ca", &self.client_ca.is_some()).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Person {
    pub name: String,
    /// Their bearer token, when they log in with one.
    pub token: Option<Token>,
    /// The name their client certificate answers to (a SAN or the subject CN), when they log
    /// in with one (HTTPS with `client_ca`).
    pub certificate: Option<String>,
    /// The daemons' names for this person's agents (`client:` of a description, e.g.
    /// `uid:1000`): a request that requires another person is not theirs to decide.
    pub clients: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Daemon {
    pub sandbox: String,
    /// Its bearer token, when it presents one.
    pub token: Option<Token>,
    /// The name its client certificate answers to (a SAN or the subject CN), when it presents
    /// one (`[grpc] client_ca`).
    pub certificate: Option<String>,
    pub require_another_person: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    pub url: String,
    pub attempts: u32,
    /// Trusted roots for an https webhook (PEM).
    pub roots: Vec<u8>,
}

/// Where an https webhook's roots come from when `ca_file` is not set.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Failed logins allowed per address and per person in a window, when not set.
pub const DEFAULT_LOGIN_FAILURES: u32 = 5;
/// The login window (seconds), when not set.
pub const DEFAULT_LOGIN_WINDOW_SECS: u64 = 60;
/// The longest login window: a day.
const MAX_LOGIN_WINDOW_SECS: u64 = 86_400;
/// Tries of one notification when `attempts` is not set.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// The most tries `attempts` may ask for: a notification is never worth a queue of retries.
pub const MAX_ATTEMPTS: u32 = 10;

fn invalid(path: &Path, what: String) -> ApproverError {
    ApproverError::Config(path.to_owned(), what)
}

/// A token file's token: one line of at least 16 characters that can travel in a cookie and a
/// header unchanged (letters, digits, `-._~`).
fn token(config: &Path, file: &Path) -> Result<Token, ApproverError> {
    let text = std::fs::read_to_string(file).map_err(|e| ApproverError::Io(file.to_owned(), e))?;
    let token = text.trim();
    let fits = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
    if token.len() < 16 || !token.chars().all(fits) {
        return Err(invalid(
            config,
            format!(
                "{}: a token is one line of at least 16 letters, digits, '-', '.', '_' or '~'",
                file.display()
            ),
        ));
    }
    Ok(Token(token.to_owned()))
}

/// A name shown on the page and in the log: letters, digits, `-._@`, 1 to 64 of them.
fn name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "-._@".contains(c))
}

/// Whether `text` is an approver config as written (its keys and their types; the files it
/// names are not read): for checking examples.
pub fn parses(text: &str) -> Result<(), String> {
    toml::from_str::<File>(text).map(drop).map_err(|e| e.to_string())
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ApproverError> {
        let text = std::fs::read_to_string(path).map_err(|e| ApproverError::Io(path.to_owned(), e))?;
        let file: File = toml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
        let web = file.web.map(|w| web(path, w)).transpose()?;
        let grpc = file.grpc.map(grpc).transpose()?;
        let mut people = Vec::new();
        for p in file.person {
            if !name_ok(&p.name) || people.iter().any(|q: &Person| q.name == p.name) {
                return Err(invalid(
                    path,
                    format!("person name {:?}: unique, 1-64 of letters, digits, -._@", p.name),
                ));
            }
            let by_certificate = p.certificate.is_some();
            if !by_certificate && p.token_file.is_none() {
                return Err(invalid(path, format!("person {:?} needs token_file or certificate", p.name)));
            }
            if by_certificate && web.as_ref().is_none_or(|w| w.client_ca.is_none()) {
                return Err(invalid(
                    path,
                    format!("person {:?} has a certificate: [web] needs client_ca", p.name),
                ));
            }
            let token = p.token_file.as_deref().map(|file| token(path, file)).transpose()?;
            people.push(Person { token, certificate: p.certificate, name: p.name, clients: p.clients });
        }
        let mut daemons = Vec::new();
        for d in file.daemon {
            if !name_ok(&d.sandbox) || daemons.iter().any(|e: &Daemon| e.sandbox == d.sandbox) {
                return Err(invalid(
                    path,
                    format!("sandbox {:?}: unique, 1-64 of letters, digits, -._@", d.sandbox),
                ));
            }
            if d.certificate.is_none() && d.token_file.is_none() {
                return Err(invalid(path, format!("daemon {:?} needs token_file or certificate", d.sandbox)));
            }
            if let Some(name) = &d.certificate {
                if grpc.as_ref().is_none_or(|g| g.client_ca.is_none()) {
                    return Err(invalid(
                        path,
                        format!("daemon {:?} has a certificate: [grpc] needs client_ca", d.sandbox),
                    ));
                }
                if daemons.iter().any(|e| e.certificate.as_ref() == Some(name)) {
                    return Err(invalid(
                        path,
                        format!("certificate {name:?}: two daemons answer to it; each needs its own"),
                    ));
                }
            }
            daemons.push(Daemon {
                token: d.token_file.as_deref().map(|file| token(path, file)).transpose()?,
                certificate: d.certificate,
                sandbox: d.sandbox,
                require_another_person: d.require_another_person,
            });
        }
        let tokens: Vec<&Token> = people
            .iter()
            .filter_map(|p| p.token.as_ref())
            .chain(daemons.iter().filter_map(|d| d.token.as_ref()))
            .collect();
        if tokens.iter().enumerate().any(|(i, t)| tokens[..i].contains(t)) {
            return Err(invalid(path, "two people or daemons share a token: each needs its own".into()));
        }
        if web.is_some() && people.is_empty() {
            return Err(invalid(path, "[web] needs at least one [[person]] to log in".into()));
        }
        let webhook = file.webhook.map(|h| webhook(path, h)).transpose()?;
        Ok(Config { web, grpc, people, daemons, webhook })
    }

    /// Whether the daemons' listener `listen` (`serve --listen`) may serve as configured: TLS
    /// (`[grpc]`) only on `tcp:`, and a `tcp:` address off loopback only with TLS, since
    /// descriptions (paths, diffs) and tokens must not cross a network in the clear.
    pub fn check_listen(&self, listen: &str) -> Result<(), ApproverError> {
        if let Some(addr) = listen.strip_prefix("tcp:") {
            use std::net::ToSocketAddrs;
            // A name that does not resolve fails to bind anyway; it is not known to be loopback.
            let loopback = addr.to_socket_addrs().is_ok_and(|mut a| a.all(|a| a.ip().is_loopback()));
            if self.grpc.is_none() && !loopback {
                return Err(ApproverError::PlainListen(listen.to_owned()));
            }
        } else if self.grpc.is_some() {
            return Err(ApproverError::Serve(format!(
                "[grpc] serves TLS on a tcp: listener; --listen {listen} is guarded by its mode and group instead: remove [grpc] or listen on tcp:"
            )));
        }
        Ok(())
    }
}

fn grpc(g: GrpcFile) -> Result<Grpc, ApproverError> {
    let read = |file: PathBuf| std::fs::read(&file).map_err(|e| ApproverError::Io(file, e));
    Ok(Grpc { tls: (read(g.tls_cert)?, read(g.tls_key)?), client_ca: g.client_ca.map(read).transpose()? })
}

fn web(path: &Path, w: WebFile) -> Result<Web, ApproverError> {
    let listen: SocketAddr = w
        .listen
        .strip_prefix("tcp:")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| invalid(path, format!("[web] listen {:?}: expected tcp:IP:PORT", w.listen)))?;
    let tls = match (w.tls_cert, w.tls_key) {
        (Some(cert), Some(key)) => Some((
            std::fs::read(&cert).map_err(|e| ApproverError::Io(cert, e))?,
            std::fs::read(&key).map_err(|e| ApproverError::Io(key, e))?,
        )),
        (None, None) => None,
        _ => return Err(invalid(path, "[web] needs both tls_cert and tls_key, or neither".into())),
    };
    let client_ca = match w.client_ca {
        Some(_) if tls.is_none() => {
            return Err(invalid(path, "[web] client_ca needs HTTPS (tls_cert and tls_key)".into()));
        }
        Some(file) => Some(std::fs::read(&file).map_err(|e| ApproverError::Io(file, e))?),
        None => None,
    };
    // Tokens and descriptions never cross a network in the clear: plain HTTP is for loopback.
    if tls.is_none() && !listen.ip().is_loopback() {
        return Err(invalid(
            path,
            format!("[web] listen {listen}: plain HTTP only on a loopback address; set tls_cert and tls_key"),
        ));
    }
    let login_failures = w.login_failures.unwrap_or(DEFAULT_LOGIN_FAILURES);
    let login_window_secs = w.login_window_secs.unwrap_or(DEFAULT_LOGIN_WINDOW_SECS);
    if login_failures == 0 || !(1..=MAX_LOGIN_WINDOW_SECS).contains(&login_window_secs) {
        return Err(invalid(
            path,
            format!(
                "[web] login_failures {login_failures}, login_window_secs {login_window_secs}: at least 1 failure per 1 to {MAX_LOGIN_WINDOW_SECS} s"
            ),
        ));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = w.url.unwrap_or_else(|| format!("{scheme}://{listen}")).trim_end_matches('/').to_owned();
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(invalid(path, format!("[web] url {url:?}: expected http:// or https://")));
    }
    Ok(Web { listen, url, tls, client_ca, login_failures, login_window_secs })
}

fn webhook(path: &Path, h: WebhookFile) -> Result<Webhook, ApproverError> {
    let attempts = h.attempts.unwrap_or(DEFAULT_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&attempts) {
        return Err(invalid(path, format!("[webhook] attempts {attempts}: 1 to {MAX_ATTEMPTS}")));
    }
    let roots = if h.url.starts_with("https://") {
        let file = h.ca_file.unwrap_or_else(|| PathBuf::from(SYSTEM_ROOTS));
        std::fs::read(&file).map_err(|e| ApproverError::Io(file, e))?
    } else if h.url.starts_with("http://") {
        Vec::new()
    } else {
        return Err(invalid(path, format!("[webhook] url {:?}: expected http:// or https://", h.url)));
    };
    Ok(Webhook { url: h.url, attempts, roots })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file and its token files in a fresh directory; the loaded result.
    fn load(body: &str, tokens: &[(&str, &str)]) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        for (name, token) in tokens {
            std::fs::write(dir.path().join(name), format!("{token}\n")).unwrap();
        }
        let path = dir.path().join("approver.toml");
        std::fs::write(&path, body.replace("DIR", &dir.path().display().to_string())).unwrap();
        Config::load(&path).map_err(|e| e.to_string().replace(&dir.path().display().to_string(), "DIR"))
    }

    const PEOPLE: &str = "[[person]]\nname = \"alice\"\ntoken_file = \"DIR/a\"\nclients = [\"uid:1000\"]\n";
    const GOOD: &str = "alice-token-0123456789";

    #[test]
    fn a_config_is_read_whole_or_refused_with_its_reason() {
        let config =
            load(&format!("[web]\nlisten = \"tcp:127.0.0.1:8080\"\n{PEOPLE}"), &[("a", GOOD)]).unwrap();
        let web = config.web.unwrap();
        assert_eq!((web.url.as_str(), web.tls.is_none()), ("http://127.0.0.1:8080", true));
        let token = config.people[0].token.as_ref().unwrap();
        assert!(token.is(GOOD) && !token.is("alice-token-012345678X"));
        assert_eq!(format!("{token:?}"), "Token(..)");
        let refused = [
            (
                format!("[web]\nlisten = \"tcp:0.0.0.0:8080\"\n{PEOPLE}"),
                "invalid config DIR/approver.toml: [web] listen 0.0.0.0:8080: plain HTTP only on a loopback address; set tls_cert and tls_key",
            ),
            (
                "[web]\nlisten = \"tcp:127.0.0.1:8080\"\n".to_owned(),
                "invalid config DIR/approver.toml: [web] needs at least one [[person]] to log in",
            ),
            (
                "[[person]]\nname = \"bob\"\ntoken_file = \"DIR/short\"\n".to_owned(),
                "invalid config DIR/approver.toml: DIR/short: a token is one line of at least 16 letters, digits, '-', '.', '_' or '~'",
            ),
            (
                format!("{PEOPLE}[[daemon]]\nsandbox = \"s\"\ntoken_file = \"DIR/a\"\n"),
                "invalid config DIR/approver.toml: two people or daemons share a token: each needs its own",
            ),
            (
                format!("{PEOPLE}[[daemon]]\nsandbox = \"a b\"\ntoken_file = \"DIR/b\"\n"),
                "invalid config DIR/approver.toml: sandbox \"a b\": unique, 1-64 of letters, digits, -._@",
            ),
            (
                "[[person]]\nname = \"carol\"\ncertificate = \"carol\"\n".to_owned(),
                "invalid config DIR/approver.toml: person \"carol\" has a certificate: [web] needs client_ca",
            ),
            (
                "[[person]]\nname = \"dave\"\n".to_owned(),
                "invalid config DIR/approver.toml: person \"dave\" needs token_file or certificate",
            ),
            (
                format!("[web]\nlisten = \"tcp:127.0.0.1:1\"\nclient_ca = \"DIR/a\"\n{PEOPLE}"),
                "invalid config DIR/approver.toml: [web] client_ca needs HTTPS (tls_cert and tls_key)",
            ),
            (
                format!("[web]\nlisten = \"tcp:127.0.0.1:1\"\nlogin_failures = 0\n{PEOPLE}"),
                "invalid config DIR/approver.toml: [web] login_failures 0, login_window_secs 60: at least 1 failure per 1 to 86400 s",
            ),
            (
                "[[daemon]]\nsandbox = \"s\"\n".to_owned(),
                "invalid config DIR/approver.toml: daemon \"s\" needs token_file or certificate",
            ),
            (
                "[[daemon]]\nsandbox = \"s\"\ncertificate = \"s.example.org\"\n".to_owned(),
                "invalid config DIR/approver.toml: daemon \"s\" has a certificate: [grpc] needs client_ca",
            ),
            (
                "[grpc]\ntls_cert = \"DIR/a\"\ntls_key = \"DIR/a\"\nclient_ca = \"DIR/a\"\n\
                 [[daemon]]\nsandbox = \"s\"\ncertificate = \"n\"\n[[daemon]]\nsandbox = \"t\"\ncertificate = \"n\"\n"
                    .to_owned(),
                "invalid config DIR/approver.toml: certificate \"n\": two daemons answer to it; each needs its own",
            ),
            (
                "[webhook]\nurl = \"http://h/x\"\nattempts = 11\n".to_owned(),
                "invalid config DIR/approver.toml: [webhook] attempts 11: 1 to 10",
            ),
            (
                "[webhook]\nurl = \"ftp://h/x\"\n".to_owned(),
                "invalid config DIR/approver.toml: [webhook] url \"ftp://h/x\": expected http:// or https://",
            ),
        ];
        for (body, expected) in refused {
            let tokens = [("a", GOOD), ("b", "beta-token-0123456789"), ("short", "short")];
            assert_eq!(load(&body, &tokens).unwrap_err(), expected, "{body}");
        }
    }

    /// The daemons' listener: plain gRPC on loopback or a Unix socket only; TLS only on tcp:.
    #[test]
    fn the_daemons_listener_is_plain_only_on_loopback() {
        let plain = Config::default();
        let tls = Config {
            grpc: Some(Grpc { tls: (Vec::new(), Vec::new()), client_ca: None }),
            ..Config::default()
        };
        let cases = [
            (&plain, "tcp:127.0.0.1:7443", None),
            (&plain, "tcp:[::1]:7443", None),
            (&plain, "unix:/run/a.sock", None),
            (
                &plain,
                "tcp:0.0.0.0:7443",
                Some(
                    "--listen tcp:0.0.0.0:7443: plain gRPC only on a loopback address; give --config a [grpc] table (tls_cert, tls_key) so daemons connect over TLS (their approver_ca_file)",
                ),
            ),
            (&tls, "tcp:0.0.0.0:7443", None),
            (
                &tls,
                "unix:/run/a.sock",
                Some(
                    "cannot serve: [grpc] serves TLS on a tcp: listener; --listen unix:/run/a.sock is guarded by its mode and group instead: remove [grpc] or listen on tcp:",
                ),
            ),
        ];
        for (config, listen, expected) in cases {
            let got = config.check_listen(listen).err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), expected, "{listen}");
        }
    }
}
