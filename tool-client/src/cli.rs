//! The `fsd-tools` command line: `schemas`, `guidance`, `call`, `session` and `mcp`, as CONTRACT
//! fixes them, plus `doctor`, `completions` and `man` for people. Exit codes: 0 success, 1 a tool
//! error, 2 usage or an unreachable daemon. A closed standard output ends the process quietly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use serde_json::Value;

use crate::config::ClientConfig;
use crate::connect::{self, Endpoint};
use crate::embedded::EmbeddedDaemon;
use crate::jsonl;
use crate::tools::{Session, Tools};

#[derive(Debug, Parser)]
#[command(name = "fsd-tools", version, about = "Model-facing file tools over an fsd daemon")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the JSON schemas of the visible tools.
    Schemas {
        /// Client configuration (TOML, camelCase keys): which tools are visible.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the guidance paragraphs of the visible tools.
    Guidance {
        /// Client configuration (TOML, camelCase keys): which tools are visible.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Run one tool call and print its model-facing text.
    Call {
        /// The tool name (read, write, edit, ...).
        tool: String,
        /// The arguments: JSON, @FILE, or - for stdin.
        args: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Run tool calls from JSON lines on stdin, one result line each.
    Session {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Name a point in the daemon's change record and print its id (docs/rewind.md).
    Checkpoint {
        /// A label for the point.
        #[arg(default_value = "")]
        label: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// List the changes the daemon recorded after a point, who made each, and each file's diff.
    Changes {
        /// The point (a checkpoint's id); default: every change the record keeps.
        #[arg(long, default_value_t = 0)]
        since: u64,
        /// Another identity's changes (`*`: every identity's): only for an identity the
        /// daemon's change_operators names.
        #[arg(long, value_name = "IDENTITY")]
        identity: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Restore every file the changes after a point changed to its content then, as one
    /// transaction; a file changed since by someone the daemon did not record is left as it is
    /// and reported, unless --keep-checkpoint.
    Rewind {
        /// The point (a checkpoint's id).
        #[arg(long)]
        since: u64,
        /// Another identity's changes (`*`: every identity's): only for change_operators.
        #[arg(long, value_name = "IDENTITY")]
        identity: Option<String>,
        /// Restore a file changed by someone the daemon did not record too (that version is
        /// kept in the record).
        #[arg(long)]
        keep_checkpoint: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Serve the tools as an MCP server over stdio (one session per process).
    Mcp {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Say what a daemon serves (version, modes and their fences, limits, escalation) and check
    /// a client configuration against it.
    Doctor {
        /// The daemon: unix:PATH, tcp:HOST:PORT (plaintext: a TLS listener is asked over the
        /// daemon's Unix socket instead) or http://HOST:PORT.
        endpoint: String,
        /// A client configuration (TOML, camelCase keys) to check.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(flatten)]
        web: WebArgs,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of fsd-tools.
    Man,
}

#[derive(Debug, Args)]
struct TargetArgs {
    /// The daemon: unix:PATH, tcp:HOST:PORT, or http://HOST:PORT (gRPC-Web over HTTP/1.1, to a
    /// daemon's http: listener or a router in front of it).
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["root", "target"])]
    endpoint: Option<String>,
    #[command(flatten)]
    web: WebArgs,
    /// A daemon of the fleet file, by name (its endpoint and credentials come from the file).
    #[arg(long, value_name = "NAME", conflicts_with = "root")]
    target: Option<String>,
    /// The fleet file for --target (default: $FSD_FLEET, else ~/.config/fsd/fleet.toml).
    #[arg(long, value_name = "FILE", requires = "target")]
    fleet: Option<PathBuf>,
    /// Start a private fsd for DIR (the embedded default).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The session's working directory for relative paths (default: this process's when it is
    /// inside a root of the daemon, else the daemon's first root).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Client configuration (TOML, camelCase keys).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The fsd binary for --root (default: beside fsd-tools, else on PATH).
    #[arg(long, value_name = "PATH")]
    fsd_bin: Option<PathBuf>,
}

/// What an `http://` endpoint's calls carry.
#[derive(Debug, Args)]
struct WebArgs {
    /// An extra header on every call, `NAME: VALUE` (http:// endpoints; repeatable).
    #[arg(long = "header", value_name = "HEADER", requires = "endpoint")]
    headers: Vec<String>,
    /// The sandbox behind an agent-sandbox router: sent as X-Sandbox-ID.
    #[arg(long, value_name = "ID", requires = "endpoint")]
    sandbox_id: Option<String>,
    /// X-Sandbox-Namespace (default: the router's, `default`).
    #[arg(long, value_name = "NS", requires = "sandbox_id")]
    sandbox_namespace: Option<String>,
    /// X-Sandbox-Port: the sandbox pod's port of fsd's http: listener.
    #[arg(long, value_name = "PORT", requires = "sandbox_id")]
    sandbox_port: Option<u16>,
    /// An environment variable holding a bearer token, sent as `x-fsd-authorization` (routers
    /// strip `authorization`); only to a loopback http:// endpoint.
    #[arg(long, value_name = "VAR", requires = "endpoint")]
    token_env: Option<String>,
}

impl WebArgs {
    fn credentials(&self, endpoint: &Endpoint) -> Result<connect::Credentials, Fatal> {
        let mut headers = Vec::new();
        let given = !self.headers.is_empty() || self.sandbox_id.is_some() || self.token_env.is_some();
        if given && !matches!(endpoint, Endpoint::Web(_)) {
            return Err(Fatal::Message(
                "--header, --sandbox-id and --token-env need an http:// endpoint".into(),
            ));
        }
        if let Some(id) = &self.sandbox_id {
            let route = crate::web::SandboxRoute {
                id: id.clone(),
                namespace: self.sandbox_namespace.clone(),
                port: self.sandbox_port,
            };
            headers.extend(route.headers());
        }
        for text in &self.headers {
            headers.push(
                crate::web::parse_header(text).ok_or_else(|| {
                    Fatal::Message(format!("invalid --header {text:?}: expected NAME: VALUE"))
                })?,
            );
        }
        let token = match &self.token_env {
            Some(var) => Some(
                std::env::var(var)
                    .map_err(|_| {
                        Fatal::Message(format!("--token-env: environment variable {var} is not set"))
                    })?
                    .trim()
                    .to_owned(),
            ),
            None => None,
        };
        Ok(connect::Credentials { tls: None, token, headers })
    }
}

/// Why the command stops early: a usage or connection failure (printed, exit 2), or a standard
/// output nobody reads any more (quiet: the reader chose to stop, as `head` does).
#[derive(Debug)]
enum Fatal {
    Message(String),
    OutputClosed,
}

impl<E: std::fmt::Display> From<E> for Fatal {
    fn from(e: E) -> Fatal {
        Fatal::Message(e.to_string())
    }
}

/// Writes `text` and a newline to standard output, flushed. A closed pipe is `OutputClosed`.
fn emit(out: &mut impl Write, text: &str) -> Result<(), Fatal> {
    writeln!(out, "{text}").and_then(|()| out.flush()).map_err(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Fatal::OutputClosed,
        _ => Fatal::Message(format!("cannot write to standard output: {e}")),
    })
}

/// One line on standard error; a closed stderr loses the line, never panics.
fn complain(message: &str) {
    let _ = writeln!(std::io::stderr(), "fsd-tools: {message}");
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            complain(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(2);
        }
    };
    let mut daemon = None;
    let result = runtime.block_on(run(cli, &mut daemon));
    // Connections close with the runtime; only then is the private daemon told to stop, so its
    // graceful shutdown finds no client still attached.
    drop(runtime);
    drop(daemon);
    match result {
        Ok(code) => code,
        Err(Fatal::OutputClosed) => ExitCode::SUCCESS,
        Err(Fatal::Message(message)) => {
            complain(&message);
            ExitCode::from(2)
        }
    }
}

fn load_config(path: Option<&PathBuf>, one_shot: bool) -> Result<ClientConfig, Fatal> {
    let Some(path) = path else {
        // `call` is one-shot: nothing was read before it, so the policy is off unless asked for.
        return Ok(ClientConfig { observation_policy: !one_shot, ..ClientConfig::default() });
    };
    let mut config = ClientConfig::load(path)?;
    if one_shot {
        let text = std::fs::read_to_string(path)?;
        let explicit =
            toml::from_str::<toml::Table>(&text).ok().is_some_and(|t| t.contains_key("observationPolicy"));
        if !explicit {
            config.observation_policy = false;
        }
    }
    Ok(config)
}

/// Connects a session; for --root, `daemon` receives the private daemon, which the caller stops
/// after the session's connections are gone.
async fn open(
    target: &TargetArgs,
    config: ClientConfig,
    daemon: &mut Option<EmbeddedDaemon>,
) -> Result<Session, Fatal> {
    if let Some(name) = &target.target {
        let fleet = crate::fleet::Fleet::load(target.fleet.as_deref())?;
        let cwd = target.cwd.as_deref().map(std::path::absolute).transpose()?;
        let (session, _link) = fleet.target(name)?.session(config, cwd.as_deref()).await?;
        return Ok(session);
    }
    let endpoint = match (&target.endpoint, &target.root) {
        (Some(e), None) => Endpoint::parse(e)?,
        (None, Some(root)) => {
            let started = EmbeddedDaemon::start(root, target.fsd_bin.as_deref())?;
            let endpoint = started.endpoint();
            *daemon = Some(started);
            endpoint
        }
        _ => {
            return Err(Fatal::Message(
                "pass --endpoint unix:PATH|tcp:HOST:PORT|http://HOST:PORT, --target NAME or --root DIR"
                    .into(),
            ));
        }
    };
    // A Link: one reused connection, reconnected with backoff, pinned to the daemon instance.
    let credentials = target.web.credentials(&endpoint)?;
    let (client, hello, _link) = connect::open(&endpoint, &credentials).await?;
    let roots: Vec<&str> =
        hello.writable_roots.iter().chain(&hello.readable_roots).map(String::as_str).collect();
    let cwd = session_cwd(target.cwd.as_deref(), &std::env::current_dir()?, &roots)?;
    // The operator's hint, on stderr (the model reads only the seed's denial): a daemon with
    // writable roots that caps this client at read-only refuses every write.
    let modes = crate::daemon::Hello::from(hello.clone());
    if modes.max_mode == Some(crate::daemon::Mode::ReadOnly) && !modes.writable_roots.is_empty() {
        let who = if matches!(endpoint, Endpoint::Tcp(_)) && credentials.tls.is_none() {
            "plaintext TCP callers are the identity tcp, read-only unless the daemon's client_max_modes names it"
        } else {
            "the daemon's client_max_modes caps this client"
        };
        eprintln!("fsd-tools: note: this client may only read at {endpoint} ({who}); writes will be refused");
    }
    Ok(Session::new(Tools::new(config), client, hello, cwd))
}

/// The one rule for relative paths, for `call`, `session` and `mcp` alike: `--cwd` when given;
/// else this process's directory when it lies inside a root of the daemon; else the daemon's
/// first writable root (or first readable one). An agent host that starts the tools from
/// elsewhere (`/`, its home) still resolves `src/main.rs` in the workspace.
/// `roots`: the daemon's writable roots, then its readable ones, as hello names them.
pub fn session_cwd(explicit: Option<&Path>, here: &Path, roots: &[&str]) -> std::io::Result<PathBuf> {
    if let Some(cwd) = explicit {
        return std::path::absolute(cwd);
    }
    // Roots arrive canonical; so must the directory compared with them.
    let here = std::fs::canonicalize(here).unwrap_or_else(|_| here.to_owned());
    let mut roots = roots.iter().map(PathBuf::from);
    if roots.clone().any(|root| here.starts_with(&root)) {
        return Ok(here);
    }
    Ok(roots.next().unwrap_or(here))
}

/// Standard input as lines read off the runtime's thread: while a session waits for its next
/// line, its connections still answer HTTP/2 pings and see a daemon's GOAWAY.
fn stdin_lines() -> tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>> {
    use tokio::io::AsyncBufReadExt;
    tokio::io::BufReader::new(tokio::io::stdin()).lines()
}

fn read_args(args: &str) -> Result<Value, Fatal> {
    let text = if args == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else if let Some(file) = args.strip_prefix('@') {
        std::fs::read_to_string(file).map_err(|e| Fatal::Message(format!("cannot read {file}: {e}")))?
    } else {
        args.to_owned()
    };
    serde_json::from_str(&text).map_err(|e| Fatal::Message(format!("arguments are not valid JSON: {e}")))
}

async fn run(cli: Cli, daemon: &mut Option<EmbeddedDaemon>) -> Result<ExitCode, Fatal> {
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Schemas { config } => {
            let tools = Tools::new(load_config(config.as_ref(), false)?);
            emit(&mut out, &serde_json::to_string_pretty(&tools.schemas())?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Guidance { config } => {
            let tools = Tools::new(load_config(config.as_ref(), false)?);
            emit(&mut out, &tools.guidance())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Call { tool, args, target } => {
            let args = read_args(&args)?;
            let config = load_config(target.config.as_ref(), true)?;
            let mut session = open(&target, config, daemon).await?;
            let result = session.call(&tool, args).await;
            emit(&mut out, &result.text())?;
            Ok(if result.is_error { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Checkpoint { label, target } => {
            let config = load_config(target.config.as_ref(), false)?;
            let mut session = open(&target, config, daemon).await?;
            let result = crate::record_commands::checkpoint(&mut session, &label).await;
            emit(&mut out, &result.text())?;
            Ok(if result.is_error { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Changes { since, identity, target } => {
            let config = load_config(target.config.as_ref(), false)?;
            let mut session = open(&target, config, daemon).await?;
            let query = crate::daemon::ChangesQuery { since, this_session: false, identity };
            let result = crate::record_commands::changes(&mut session, &query).await;
            emit(&mut out, &result.text())?;
            Ok(if result.is_error { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Rewind { since, identity, keep_checkpoint, target } => {
            let config = load_config(target.config.as_ref(), false)?;
            let mut session = open(&target, config, daemon).await?;
            let query = crate::daemon::ChangesQuery { since, this_session: false, identity };
            let result = crate::record_commands::rewind(&mut session, &query, keep_checkpoint).await;
            emit(&mut out, &result.text())?;
            Ok(if result.is_error { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Session { target } if target.target.is_some() => {
            // A fleet session: lines may name any target of the fleet file.
            let config = load_config(target.config.as_ref(), false)?;
            let fleet = crate::fleet::Fleet::load(target.fleet.as_deref())?;
            let cwd = target.cwd.as_deref().map(std::path::absolute).transpose()?;
            let name = target.target.as_deref().unwrap_or_default();
            let mut session = crate::fleet::FleetSession::open(fleet, config, name, cwd).await?;
            let mut lines = stdin_lines();
            while let Some(line) = lines.next_line().await? {
                if line.trim().is_empty() {
                    continue;
                }
                let reply = session.handle_line(&line).await;
                emit(&mut out, &reply.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Session { target } => {
            let config = load_config(target.config.as_ref(), false)?;
            let mut session = match open(&target, config, daemon).await {
                Ok(session) => session,
                // The embedded daemon did not start: a program that reads only stdout learns
                // why too, from the reply to each of its lines.
                Err(Fatal::Message(reason)) if target.root.is_some() => {
                    complain(&reason);
                    let mut lines = stdin_lines();
                    while let Some(line) = lines.next_line().await? {
                        if !line.trim().is_empty() {
                            emit(&mut out, &jsonl::unavailable(&line, &reason).to_string())?;
                        }
                    }
                    return Ok(ExitCode::from(2));
                }
                Err(e) => return Err(e),
            };
            let mut lines = stdin_lines();
            while let Some(line) = lines.next_line().await? {
                if line.trim().is_empty() {
                    continue;
                }
                let reply = jsonl::handle_line(&mut session, &line).await;
                emit(&mut out, &reply.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp { target } => {
            let config = load_config(target.config.as_ref(), false)?;
            drop(out);
            match open(&target, config.clone(), daemon).await {
                Ok(session) => {
                    crate::mcp::McpServer::new(session).serve_stdio().await?;
                    Ok(ExitCode::SUCCESS)
                }
                // The embedded daemon did not start. MCP hosts hide stderr, and a server that
                // exits before `initialize` is only "failed" there: it answers, and every call
                // returns why (`mcp::Unavailable`).
                Err(Fatal::Message(reason)) if target.root.is_some() => {
                    complain(&reason);
                    crate::mcp::Unavailable::new(Tools::new(config), reason).serve_stdio().await?;
                    Ok(ExitCode::from(2))
                }
                Err(e) => Err(e),
            }
        }
        Command::Doctor { endpoint, config, web } => {
            let endpoint = Endpoint::parse(&endpoint)?;
            let config = match &config {
                Some(path) => Some(ClientConfig::load(path)?),
                None => None,
            };
            // The path `call` takes, so a daemon that is not there or a server that is not fsd
            // reads the same here (an `http://` endpoint's status and body included).
            let (_, hello, _) = connect::open(&endpoint, &web.credentials(&endpoint)?).await?;
            emit(&mut out, &crate::doctor::report(&endpoint, &hello, config.as_ref()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "fsd-tools", &mut script);
            emit(&mut out, String::from_utf8_lossy(&script).trim_end())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            emit(&mut out, String::from_utf8_lossy(&page).trim_end())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_one_rule() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let base = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"));
        let (ws, sub, other) = (base.join("ws"), base.join("ws/src"), base.join("elsewhere"));
        for d in [&sub, &other] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir: {e}"));
        }
        let (writable, readable) = (ws.display().to_string(), other.join("ro").display().to_string());
        let roots = [writable.as_str(), readable.as_str()];
        let check = |explicit: Option<&Path>, here: &Path, expected: &Path| {
            let got = session_cwd(explicit, here, &roots).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got, expected, "explicit {explicit:?}, here {}", here.display());
        };
        // --cwd always wins.
        check(Some(&other), &sub, &other);
        // Inside a root: this process's directory.
        check(None, &sub, &sub);
        check(None, &ws, &ws);
        // Outside every root: the first writable root.
        check(None, &other, &ws);
        check(None, Path::new("/"), &ws);
        let read_only = other.display().to_string();
        assert_eq!(session_cwd(None, &sub, &[read_only.as_str()]).ok(), Some(other.clone()));
    }
}
