//! Many daemons from one client: a fleet file (TOML, camelCase) names targets, each an endpoint
//! with its credentials, and a fleet session runs JSON lines against any of them, one `Session`
//! (observations, cwd) per target over one reused connection each.
//!
//! ```toml
//! [targets.alpha]
//! endpoint = "tcp:10.0.0.5:7443"
//! ca = "ca.pem"                # the CA that signed the daemon's certificate: TLS
//! cert = "client.pem"          # this client's certificate and key: mutual TLS
//! key = "client.key"
//! tokenFile = "alpha.token"    # or tokenEnv = "VAR": a bearer token, over TLS only
//! serverName = "fsd-alpha"     # the name the daemon's certificate carries (default: the host)
//! cwd = "/workspace"           # the session's starting directory on that daemon
//!
//! [targets.sb1]                # a sandbox behind the Kubernetes agent-sandbox router
//! endpoint = "http://127.0.0.1:8080"   # the router (gRPC-Web over HTTP/1.1)
//! sandboxId = "sb1"            # X-Sandbox-ID, -Namespace and -Port: which pod it forwards to
//! sandboxNamespace = "agents"
//! sandboxPort = 8080
//! headers = { "X-Team" = "a" } # any other header every call carries
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::ClientConfig;
use crate::connect::{self, ConnectError, Credentials, Endpoint, LinkState, TlsCredentials};
use crate::failure::ToolError;
use crate::jsonl;
use crate::tools::{Session, ToolResult, Tools};

/// The environment variable naming the fleet file when `--fleet` is absent.
pub const FLEET_ENV: &str = "FSD_FLEET";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    #[serde(default)]
    targets: BTreeMap<String, TargetFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TargetFile {
    endpoint: String,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    server_name: Option<String>,
    cwd: Option<PathBuf>,
    sandbox_id: Option<String>,
    sandbox_namespace: Option<String>,
    sandbox_port: Option<u16>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Where a token comes from: never the fleet file itself, which is often shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    File(PathBuf),
    Env(String),
}

/// One daemon of the fleet, as the file describes it (paths resolved against the file's folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub endpoint: Endpoint,
    pub ca: Option<PathBuf>,
    /// Client certificate chain and key (PEM).
    pub identity: Option<(PathBuf, PathBuf)>,
    pub token: Option<TokenSource>,
    pub server_name: Option<String>,
    pub cwd: Option<PathBuf>,
    /// Extra headers of an `http://` target: the router's sandbox route, then `headers`.
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("no fleet file: pass --fleet FILE, set {FLEET_ENV}, or create {0}")]
    NoFile(String),
    #[error("cannot read fleet file {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    #[error("invalid fleet file {0}: {1}")]
    Parse(PathBuf, #[source] toml::de::Error),
    #[error("fleet target {target:?}: {reason}")]
    Target { target: String, reason: String },
    #[error("no target {0:?} in the fleet file (targets: {1})")]
    Unknown(String, String),
    #[error("fleet target {target:?}: cannot read {path}: {source}")]
    Credential { target: String, path: PathBuf, source: std::io::Error },
    #[error("fleet target {target:?}: environment variable {var} is not set")]
    TokenEnv { target: String, var: String },
    #[error("fleet target {target:?}: {source}")]
    Connect { target: String, source: ConnectError },
}

/// The fleet file when none is named: `$FSD_FLEET`, else `$XDG_CONFIG_HOME/fsd/fleet.toml`, else
/// `~/.config/fsd/fleet.toml`.
pub fn default_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(FLEET_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(config.join("fsd").join("fleet.toml"))
}

/// The targets of one fleet file.
#[derive(Debug, Clone)]
pub struct Fleet {
    targets: BTreeMap<String, Target>,
}

impl Fleet {
    /// Loads `path`, or the default path when `None`.
    pub fn load(path: Option<&Path>) -> Result<Fleet, FleetError> {
        let path = match path {
            Some(path) => path.to_owned(),
            None => {
                let default = default_path();
                let shown = default
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "~/.config/fsd/fleet.toml".into());
                match default.filter(|p| p.is_file()) {
                    Some(path) => path,
                    None => return Err(FleetError::NoFile(shown)),
                }
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|e| FleetError::Read(path.clone(), e))?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        Fleet::parse(&text, &base).map_err(|e| match e {
            ParseError::Toml(e) => FleetError::Parse(path.clone(), e),
            ParseError::Fleet(e) => e,
        })
    }

    /// Parses a fleet file's text; relative paths are taken from `base`.
    fn parse(text: &str, base: &Path) -> Result<Fleet, ParseError> {
        let file: FleetFile = toml::from_str(text).map_err(ParseError::Toml)?;
        let mut targets = BTreeMap::new();
        for (name, t) in file.targets {
            let bad = |reason: &str| {
                ParseError::Fleet(FleetError::Target { target: name.clone(), reason: reason.to_owned() })
            };
            let endpoint = Endpoint::parse(&t.endpoint).map_err(|e| bad(&e.to_string()))?;
            let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
            let identity = match (t.cert, t.key) {
                (Some(cert), Some(key)) => Some((resolve(cert), resolve(key))),
                (None, None) => None,
                _ => return Err(bad("cert and key go together")),
            };
            let token = match (t.token_file, t.token_env) {
                (Some(file), None) => Some(TokenSource::File(resolve(file))),
                (None, Some(var)) => Some(TokenSource::Env(var)),
                (None, None) => None,
                (Some(_), Some(_)) => return Err(bad("set tokenFile or tokenEnv, not both")),
            };
            let web = matches!(endpoint, Endpoint::Web(_));
            let mut headers = Vec::new();
            match (t.sandbox_id, web) {
                (Some(id), true) => {
                    let route =
                        crate::web::SandboxRoute { id, namespace: t.sandbox_namespace, port: t.sandbox_port };
                    headers.extend(route.headers());
                }
                (None, _) if t.sandbox_namespace.is_some() || t.sandbox_port.is_some() => {
                    return Err(bad("sandboxNamespace and sandboxPort need sandboxId"));
                }
                (Some(_), false) => return Err(bad("sandboxId needs an http:// endpoint (a router)")),
                (None, _) => {}
            }
            if !t.headers.is_empty() && !web {
                return Err(bad("headers need an http:// endpoint"));
            }
            for (key, value) in t.headers {
                if crate::web::parse_header(&format!("{key}: {value}")).is_none() {
                    return Err(bad(&format!("invalid header {key:?}")));
                }
                headers.push((key, value));
            }
            if web {
                if t.ca.is_some() || identity.is_some() || t.server_name.is_some() {
                    return Err(bad(
                        "an http:// endpoint is plain gRPC-Web: ca, cert, key and serverName do not apply",
                    ));
                }
                if token.is_some() && !endpoint.is_local() {
                    return Err(bad("a token over plain http:// must stay on this host (a loopback router)"));
                }
            } else if t.ca.is_none() {
                if identity.is_some() || token.is_some() || t.server_name.is_some() {
                    return Err(bad("cert, key, tokens and serverName need TLS: set ca"));
                }
                if !endpoint.is_local() {
                    return Err(bad(
                        "a remote endpoint needs TLS: set ca (the daemon refuses plaintext off loopback)",
                    ));
                }
            } else if matches!(endpoint, Endpoint::Unix(_)) {
                return Err(bad("TLS (ca) is for tcp: endpoints; a Unix socket authenticates by uid"));
            }
            let cwd = match t.cwd {
                Some(cwd) if !cwd.is_absolute() => {
                    return Err(bad("cwd must be an absolute path on the daemon's host"));
                }
                cwd => cwd,
            };
            let target = Target {
                name: name.clone(),
                endpoint,
                ca: t.ca.map(resolve),
                identity,
                token,
                server_name: t.server_name,
                cwd,
                headers,
            };
            targets.insert(name, target);
        }
        Ok(Fleet { targets })
    }

    pub fn target(&self, name: &str) -> Result<&Target, FleetError> {
        self.targets.get(name).ok_or_else(|| {
            FleetError::Unknown(name.to_owned(), self.targets.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.targets.keys().map(String::as_str)
    }
}

enum ParseError {
    Toml(toml::de::Error),
    Fleet(FleetError),
}

impl Target {
    /// Reads the target's credential files (and token) now, when connecting.
    pub fn credentials(&self) -> Result<Credentials, FleetError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| FleetError::Credential {
                target: self.name.clone(),
                path: path.to_owned(),
                source,
            })
        };
        let tls = match &self.ca {
            None => None,
            Some(ca) => Some(TlsCredentials {
                ca_pem: read(ca)?,
                identity: match &self.identity {
                    Some((cert, key)) => Some((read(cert)?, read(key)?)),
                    None => None,
                },
                server_name: self.server_name.clone(),
            }),
        };
        let token = match &self.token {
            None => None,
            Some(TokenSource::File(path)) => Some(String::from_utf8_lossy(&read(path)?).trim().to_owned()),
            Some(TokenSource::Env(var)) => Some(
                std::env::var(var)
                    .map_err(|_| FleetError::TokenEnv { target: self.name.clone(), var: var.clone() })?
                    .trim()
                    .to_owned(),
            ),
        };
        Ok(Credentials { tls, token, headers: self.headers.clone() })
    }

    /// Connects a session to this target. `cwd` overrides the target's own.
    pub async fn session(
        &self,
        config: ClientConfig,
        cwd: Option<&Path>,
    ) -> Result<(Session, LinkState), FleetError> {
        let credentials = self.credentials()?;
        let (client, hello, link) = connect::open(&self.endpoint, &credentials)
            .await
            .map_err(|source| FleetError::Connect { target: self.name.clone(), source })?;
        let cwd = match cwd.or(self.cwd.as_deref()) {
            Some(cwd) => cwd.to_owned(),
            // No better guess on a remote host: its first root.
            None => hello
                .writable_roots
                .first()
                .or(hello.readable_roots.first())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/")),
        };
        Ok((Session::new(Tools::new(config), client, hello, cwd), link))
    }
}

/// A JSON-lines session over several targets. A line may carry `"target": NAME`; without it the
/// default target answers. Each target has its own session (observations and cwd), connected on
/// first use and kept; after the daemon of a target restarted, the call that found out fails
/// with UNAVAILABLE and the session starts over there (`Session`), so files must be read again.
#[derive(Debug)]
pub struct FleetSession {
    fleet: Fleet,
    config: ClientConfig,
    default_target: String,
    cwd: Option<PathBuf>,
    sessions: HashMap<String, (Session, LinkState)>,
}

impl FleetSession {
    /// Connects the default target now, so a wrong endpoint or credential fails at start.
    pub async fn open(
        fleet: Fleet,
        config: ClientConfig,
        default_target: &str,
        cwd: Option<PathBuf>,
    ) -> Result<FleetSession, FleetError> {
        let first = fleet.target(default_target)?.session(config.clone(), cwd.as_deref()).await?;
        let mut sessions = HashMap::new();
        sessions.insert(default_target.to_owned(), first);
        Ok(FleetSession { fleet, config, default_target: default_target.to_owned(), cwd, sessions })
    }

    /// The session of `name`, connecting it on first use.
    async fn session(&mut self, name: &str) -> Result<&mut (Session, LinkState), ToolError> {
        if !self.sessions.contains_key(name) {
            let target =
                self.fleet.target(name).map_err(|e| ToolError::new("INVALID_REQUEST", e.to_string()))?;
            let cwd = if name == self.default_target { self.cwd.as_deref() } else { None };
            let opened = target.session(self.config.clone(), cwd).await.map_err(|e| {
                ToolError::new("UNAVAILABLE", format!("the file service is unavailable: {e}"))
            })?;
            self.sessions.insert(name.to_owned(), opened);
        }
        self.sessions.get_mut(name).ok_or_else(|| {
            ToolError::new("UNAVAILABLE", format!("the file service is unavailable: target {name:?} lost"))
        })
    }

    /// Handles one input line: routes it by its `target` and answers with `meta.target` set.
    pub async fn handle_line(&mut self, line: &str) -> Value {
        let mut request: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            // Worded as the single-target session words it.
            Err(e) => {
                let error = ToolError::new("INVALID_REQUEST", format!("request is not valid JSON: {e}"));
                return jsonl::result_json(Value::Null, &ToolResult::error(error));
            }
        };
        let target = match request.as_object_mut().map(|o| o.remove("target")) {
            Some(Some(Value::String(name))) => name,
            Some(None) | None => self.default_target.clone(),
            Some(Some(_)) => {
                let id = request.get("id").cloned().unwrap_or(Value::Null);
                return jsonl::result_json(
                    id,
                    &ToolResult::error(ToolError::new("INVALID_REQUEST", "target must be a string")),
                );
            }
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let mut reply = match self.session(&target).await {
            Ok((session, _)) => jsonl::handle_line(session, &request.to_string()).await,
            Err(e) => jsonl::result_json(id, &ToolResult::error(e)),
        };
        if let Some(meta) = reply.get_mut("meta").and_then(Value::as_object_mut) {
            meta.insert("target".into(), json!(target));
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Fleet, String> {
        Fleet::parse(text, Path::new("/etc/fsd")).map_err(|e| match e {
            ParseError::Toml(e) => e.to_string(),
            ParseError::Fleet(e) => e.to_string(),
        })
    }

    #[test]
    fn fleet_files_parse_and_check_their_transport() {
        let fleet = parse(
            "[targets.a]\nendpoint = \"tcp:10.0.0.5:7443\"\nca = \"ca.pem\"\ncert = \"/abs/c.pem\"\nkey = \"c.key\"\ntokenEnv = \"T\"\nserverName = \"fsd-a\"\ncwd = \"/ws\"\n\
             [targets.local]\nendpoint = \"unix:/run/fsd.sock\"\n",
        );
        let fleet = match fleet {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(fleet.names().collect::<Vec<_>>(), ["a", "local"]);
        let a = fleet.target("a").map_err(|e| e.to_string());
        assert_eq!(
            a.cloned(),
            Ok(Target {
                name: "a".into(),
                endpoint: Endpoint::Tcp("10.0.0.5:7443".into()),
                ca: Some("/etc/fsd/ca.pem".into()),
                identity: Some(("/abs/c.pem".into(), "/etc/fsd/c.key".into())),
                token: Some(TokenSource::Env("T".into())),
                server_name: Some("fsd-a".into()),
                cwd: Some("/ws".into()),
                headers: Vec::new(),
            })
        );
        let routed = parse(
            "[targets.sb]\nendpoint = \"http://router.local:8080\"\nsandboxId = \"sb-1\"\nsandboxNamespace = \"team\"\n\
             sandboxPort = 8080\nheaders = { \"X-Extra\" = \"1\" }\n",
        )
        .map_err(|e| e.to_string());
        let routed =
            routed.as_ref().map(|f| f.target("sb").map(|t| (t.endpoint.clone(), t.headers.clone())).ok());
        let want: Vec<(String, String)> = [
            ("X-Sandbox-ID", "sb-1"),
            ("X-Sandbox-Namespace", "team"),
            ("X-Sandbox-Port", "8080"),
            ("X-Extra", "1"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .into();
        assert_eq!(routed, Ok(Some((Endpoint::Web("router.local:8080".into()), want))));
        assert_eq!(
            fleet.target("b").map(|_| ()).map_err(|e| e.to_string()),
            Err("no target \"b\" in the fleet file (targets: a, local)".into())
        );
        let refused = [
            ("[targets.x]\nendpoint = \"tcp:10.0.0.5:1\"", "a remote endpoint needs TLS"),
            ("[targets.x]\nendpoint = \"tcp:127.0.0.1:1\"\ntokenEnv = \"T\"", "need TLS: set ca"),
            ("[targets.x]\nendpoint = \"unix:/s\"\nca = \"ca.pem\"", "TLS (ca) is for tcp: endpoints"),
            ("[targets.x]\nendpoint = \"tcp:h:1\"\nca = \"c\"\ncert = \"c\"", "cert and key go together"),
            (
                "[targets.x]\nendpoint = \"tcp:h:1\"\nca = \"c\"\ntokenEnv = \"A\"\ntokenFile = \"f\"",
                "not both",
            ),
            (
                "[targets.x]\nendpoint = \"tcp:h:1\"\nca = \"c\"\ncwd = \"rel\"",
                "cwd must be an absolute path",
            ),
            ("[targets.x]\nendpoint = \"h:1\"", "invalid endpoint"),
            ("[targets.x]\nendpoint = \"tcp:h:1\"\ntoken = \"inline\"", "unknown field `token`"),
            (
                "[targets.x]\nendpoint = \"tcp:h:1\"\nca = \"c\"\nsandboxId = \"s\"",
                "sandboxId needs an http://",
            ),
            ("[targets.x]\nendpoint = \"http://h:1\"\nsandboxPort = 1", "need sandboxId"),
            ("[targets.x]\nendpoint = \"http://10.0.0.9:1\"\ntokenEnv = \"T\"", "must stay on this host"),
            ("[targets.x]\nendpoint = \"http://h:1\"\nca = \"c\"", "plain gRPC-Web"),
            ("[targets.x]\nendpoint = \"http://h:1\"\nheaders = { \"bad name\" = \"v\" }", "invalid header"),
        ];
        for (text, want) in refused {
            let got = parse(text).map(|_| ()).err().unwrap_or_default();
            assert!(got.contains(want), "{text}: {got}");
        }
    }
}
