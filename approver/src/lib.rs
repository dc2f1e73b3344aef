//! fsd-approver: the program that holds the approver's Ed25519 private key, separate from the
//! agent and its client. The daemon sends it its canonical description of an escalation
//! (`serve`); it decides (a person at a terminal, or a rule file for unattended fleets), logs the
//! decision and returns the signature over exactly those bytes. The daemon has only the public
//! key, so a compromised client can neither forge an approval nor read the description.
#![forbid(unsafe_code)]

mod config;
mod front;
mod limit;
mod link;
mod rules;
mod serve;
mod web;
mod webhook;

use fsd_proto::chain::KeyError;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ed25519_dalek::{Signer, SigningKey};

pub use config::parses as config_parses;
pub use rules::{Decision, Rule, Rules, allows, decide, explain, glob, unbound};

#[derive(Debug, Parser)]
#[command(
    name = "fsd-approver",
    version,
    about = "Approves fsd escalations by signing the daemon's description"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a key pair: DIR/approver.key (private, 0600) and DIR/approver.pub (for the daemon).
    Keygen {
        /// The directory to write the two files in (created when missing; existing files are
        /// never overwritten).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Serve approvals over gRPC (fsd.approver.v1) to the daemon (its approver_endpoint).
    Serve {
        /// The private key (approver.key from keygen, mode 0600), never the .pub.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// unix:PATH or tcp:HOST:PORT.
        #[arg(long, value_name = "ADDR")]
        listen: String,
        /// Decide by these rules; without them each request is asked on this terminal.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// Permissions of the Unix socket (octal), so only the daemon's user or group connects.
        #[arg(long, value_name = "OCTAL", default_value = "0600")]
        socket_mode: String,
        /// Group of the Unix socket (a name from /etc/group or a number).
        #[arg(long, value_name = "GROUP")]
        socket_group: Option<String>,
        /// Append one JSON line per decision here (a hash chain with checkpoints signed by --key).
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        /// Decisions between two signed checkpoints of the log (one is also written at exit).
        #[arg(long, value_name = "N", default_value_t = fsd_proto::chain::DEFAULT_EVERY,
              value_parser = clap::value_parser!(u64).range(1..))]
        checkpoint_every: u64,
        /// The page people approve from, the people, the daemons and the webhook (TOML; see
        /// docs/approvals.md).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// The process of serve that speaks to the network (started by serve itself).
    #[command(hide = true)]
    Front,
    /// Check a decision log's hash chain and signed checkpoints; name the first broken record
    /// (exit 1), or say it is intact (exit 0).
    VerifyLog {
        /// The decision log (serve --log).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The approver's public key: 64 hex digits, or a file holding them (approver.pub).
        /// Without it, each checkpoint is checked against the key it names.
        #[arg(long, value_name = "KEY")]
        public_key: Option<String>,
        /// A checkpoint's hash (as serve logged it, kept off this host) the log must hold;
        /// repeatable. Finds a log cut back to an earlier checkpoint, which otherwise verifies.
        #[arg(long, value_name = "HASH")]
        expect_checkpoint: Vec<String>,
    },
    /// Print a shell completion script for fsd-approver.
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the fsd-approver(1) manual page (roff).
    Man,
}

#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error("{0} does not hold a key (64 hex digits)")]
    BadKey(PathBuf),
    #[error(
        "{0} already exists: keygen never replaces a key (daemons may trust its public key); remove it first or pass another --dir"
    )]
    KeyExists(PathBuf),
    #[error("no randomness available")]
    Random,
    #[error("invalid rules {0}: {1}")]
    Rules(PathBuf, #[source] toml::de::Error),
    #[error("cannot ask on the terminal: {0}")]
    Tty(#[source] std::io::Error),
    #[error("invalid listen address {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    Listen(String),
    #[error(
        "--listen {0}: plain gRPC only on a loopback address; give --config a [grpc] table (tls_cert, tls_key) so daemons connect over TLS (their approver_ca_file)"
    )]
    PlainListen(String),
    #[error("cannot serve: {0}")]
    Serve(String),
    #[error("{0} is the public key: --key takes the private key (approver.key, mode 0600)")]
    PublicKey(PathBuf),
    #[error("{0} is readable by other users: a private key must be mode 0600")]
    OpenKey(PathBuf),
    #[error(
        "nobody would decide: pass --rules FILE, a --config with a [web] page, or run serve on a terminal ({0})"
    )]
    NoDecider(String),
    #[error("invalid --socket-mode {0:?}: expected octal such as 0660")]
    SocketMode(String),
    #[error("unknown --socket-group {0:?}")]
    SocketGroup(String),
    /// The log or the key could not be read (not a broken log: that is exit 1).
    #[error("{0}")]
    Verify(String),
    #[error("invalid config {0}: {1}")]
    Config(PathBuf, String),
    /// Why the front process could not serve, in its own words.
    #[error("{0}")]
    Front(String),
}

/// Writes a new key pair; the public key is also returned (hex).
pub fn keygen(dir: &Path) -> Result<String, ApproverError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|_| ApproverError::Random)?;
    let key = SigningKey::from_bytes(&seed);
    let public = hex::encode(key.verifying_key().to_bytes());
    std::fs::create_dir_all(dir).map_err(|e| ApproverError::Io(dir.to_owned(), e))?;
    let private_path = dir.join("approver.key");
    write_private(&private_path, &hex::encode(seed))?;
    let public_path = dir.join("approver.pub");
    std::fs::write(&public_path, format!("{public}\n")).map_err(|e| ApproverError::Io(public_path, e))?;
    Ok(public)
}

fn write_private(path: &Path, text: &str) -> Result<(), ApproverError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ApproverError::KeyExists(path.to_owned()),
            _ => ApproverError::Io(path.to_owned(), e),
        },
    )?;
    writeln!(file, "{text}").map_err(|e| ApproverError::Io(path.to_owned(), e))
}

/// Loads the private key, refusing what is plainly the public one (a `.pub` file, the text
/// of the `approver.pub` beside it) or a private key others can read.
pub fn load_key(path: &Path) -> Result<SigningKey, ApproverError> {
    // A copy of `approver.pub` passed as the key is named as the public key it is; the rest of
    // what makes a private key file (64 hex digits, mode 0600) is checked in one place for both
    // logs' signers (`fsd_proto::chain::read_signing_key`).
    let sibling = path.with_file_name("approver.pub");
    if sibling != path
        && let (Ok(text), Ok(public)) = (std::fs::read_to_string(path), std::fs::read_to_string(&sibling))
        && public.trim() == text.trim()
    {
        return Err(ApproverError::PublicKey(path.to_owned()));
    }
    fsd_proto::chain::read_signing_key(path).map_err(|e| match e {
        KeyError::Io(path, e) => ApproverError::Io(path, e),
        KeyError::Public(path) => ApproverError::PublicKey(path),
        KeyError::Open(path) => ApproverError::OpenKey(path),
        KeyError::NotAKey(path) => ApproverError::BadKey(path),
        KeyError::NotAPublicKey(given) => ApproverError::BadKey(given.into()),
    })
}

/// Civil UTC time of a Unix timestamp, `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(secs: u64) -> String {
    format!("{} UTC", fsd_proto::time::Civil::from_unix(secs).format(' '))
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// What a person is told under a write or an edit whose content the description does not bind
/// (the daemon sends none; a description that has one says so before anyone approves it).
pub const UNBOUND_WARNING: &str = "  content: NOT BOUND: approving lets this call write any content";

/// The description as a person reads it: the expiry as a time, not an epoch, and a change whose
/// content is not bound marked as such.
pub fn for_people(description: &str, now: u64) -> String {
    let unbound = unbound(description);
    let mut op = 0;
    let mut out = Vec::new();
    for line in description.lines() {
        match line.strip_prefix("expires: ").and_then(|t| t.parse::<u64>().ok()) {
            Some(at) => out.push(format!("expires: {} (in {} s)", utc(at), at.saturating_sub(now))),
            None => out.push(line.to_owned()),
        }
        if line.starts_with("op ") {
            op += 1;
            if unbound.contains(&op) {
                out.push(UNBOUND_WARNING.to_owned());
            }
        }
    }
    out.join("\n")
}

/// Signs exactly the description's bytes.
pub fn signature(key: &SigningKey, description: &str) -> [u8; 64] {
    key.sign(description.as_bytes()).to_bytes()
}

/// Escapes anything a terminal could interpret, line by line, with the one escaper of
/// person-facing text (`fsd_proto::names::for_people`); the daemon already escaped the
/// description, this is the second wall against one that tries to rewrite the screen.
pub(crate) fn printable(text: &str) -> String {
    text.split('\n').map(fsd_proto::names::for_people).collect::<Vec<_>>().join("\n")
}

/// What the person at the terminal reads before `Approve? [y/N] `: the description as the
/// daemon made it (each path as the daemon will act on it, the caller's spelling beside it as
/// `requested-as:` only where it differs), the expiry as a time, nothing a terminal interprets.
pub fn prompt_text(description: &str, now: u64) -> String {
    format!(
        "An fsd client asks to run these calls at a wider mode:\n\n{}\n",
        printable(&for_people(description, now))
    )
}

/// Shows the description on the controlling terminal and asks; a refusal may carry a reason.
pub(crate) fn ask(description: &str) -> Result<(bool, String), ApproverError> {
    let tty =
        std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").map_err(ApproverError::Tty)?;
    let mut out = &tty;
    write!(out, "{}", prompt_text(description, now_secs())).map_err(ApproverError::Tty)?;
    write!(out, "Approve? [y/N] ").map_err(ApproverError::Tty)?;
    out.flush().map_err(ApproverError::Tty)?;
    let mut reader = std::io::BufReader::new(&tty);
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(ApproverError::Tty)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
        return Ok((true, String::new()));
    }
    write!(out, "Reason (optional, shown to the agent): ").map_err(ApproverError::Tty)?;
    out.flush().map_err(ApproverError::Tty)?;
    let mut reason = String::new();
    reader.read_line(&mut reason).map_err(ApproverError::Tty)?;
    Ok((false, reason.trim().to_owned()))
}

/// Writes generated text to stdout; a closed stdout (`| head`) is not a failure.
fn print_quietly(text: &[u8]) -> bool {
    let mut out = std::io::stdout();
    let _ = out.write_all(text).and_then(|()| out.flush());
    true
}

fn run(cli: Cli) -> Result<bool, ApproverError> {
    match cli.command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "fsd-approver",
                &mut script,
            );
            Ok(print_quietly(&script))
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut page)
                .map_err(|e| ApproverError::Serve(e.to_string()))?;
            Ok(print_quietly(&page))
        }
        Command::Keygen { dir } => {
            let public = keygen(&dir)?;
            // The key files are written; a closed stdout only loses this copy of the public key.
            let _ = writeln!(std::io::stdout(), "{public}");
            Ok(true)
        }
        Command::VerifyLog { file, public_key, expect_checkpoint } => {
            use fsd_proto::chain::{LogKind, Verdict, verify_file};
            match verify_file(&file, LogKind::Decisions, public_key.as_deref(), &expect_checkpoint) {
                Verdict::Intact(line) => {
                    let _ = writeln!(std::io::stdout(), "{line}");
                    Ok(true)
                }
                Verdict::Broken(line) => {
                    let _ = writeln!(std::io::stdout(), "{line}");
                    Ok(false)
                }
                Verdict::Failed(reason) => Err(ApproverError::Verify(reason)),
            }
        }
        Command::Front => {
            front::main()?;
            Ok(true)
        }
        Command::Serve { key, listen, rules, socket_mode, socket_group, log, checkpoint_every, config } => {
            let key = load_key(&key)?;
            let rules = rules
                .map(|path| {
                    let rules = Rules::load(&path)?;
                    // Decisions name the file by the path it was loaded from, made absolute.
                    let path = std::path::absolute(&path).unwrap_or(path);
                    Ok::<_, ApproverError>((path, rules))
                })
                .transpose()?;
            let config = config.map(|path| config::Config::load(&path)).transpose()?.unwrap_or_default();
            // Without a rule file a person decides: on the page, at this terminal, or both.
            let terminal = rules.is_none()
                && match std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty") {
                    Ok(_) => true,
                    Err(_) if config.web.is_some() => false,
                    Err(e) => return Err(ApproverError::NoDecider(e.to_string())),
                };
            let socket = serve::Socket::parse(&socket_mode, socket_group.as_deref())?;
            serve::run(serve::Options {
                key,
                listen,
                rules,
                socket,
                log,
                checkpoint_every,
                config,
                terminal,
            })?;
            Ok(true)
        }
    }
}

pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "fsd-approver: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The person's prompt, whole: the path the daemon acts on in the operation's line, the
    /// caller's spelling of it only beside it, the expiry as a time, a hidden character escaped.
    #[test]
    fn the_prompt_shows_the_path_acted_on_and_the_requested_one_beside_it() {
        let description = "fsd escalation v1\nid: 0a\nnonce: 0b\nsession: s1\nclient: uid:1000\nmode: danger-full-access\njustification: the user asked\nexpires: 1780000120\nop 1: writeText /etc/passwd\n  requested-as: /\\x65tc/./passwd\n  target: host:etc/passwd\n  current: 1:2:3\n  content-sha256: 00ff\n  diff:\n    @@ -1 +1 @@\n    -root:x:0:0\n    +root:x:0:0\u{1b}[2J\nop 2: readText /etc/hosts\n  target: host:etc/hosts\n  current: 4:5:6\n";
        assert_eq!(
            prompt_text(description, 1_780_000_000),
            "An fsd client asks to run these calls at a wider mode:\n\nfsd escalation v1\nid: 0a\nnonce: 0b\nsession: s1\nclient: uid:1000\nmode: danger-full-access\njustification: the user asked\nexpires: 2026-05-28 20:28:40 UTC (in 120 s)\nop 1: writeText /etc/passwd\n  requested-as: /\\x65tc/./passwd\n  target: host:etc/passwd\n  current: 1:2:3\n  content-sha256: 00ff\n  diff:\n    @@ -1 +1 @@\n    -root:x:0:0\n    +root:x:0:0\\u{1b}[2J\nop 2: readText /etc/hosts\n  target: host:etc/hosts\n  current: 4:5:6\n"
        );
    }

    /// A partial preview reaches the person as the daemon said it: what is not shown is said,
    /// and a character the daemon left raw (it escapes them all) is escaped here again.
    #[test]
    fn the_prompt_says_what_a_partial_preview_leaves_out() {
        let description = "fsd escalation v1\nmode: danger-full-access\njustification: why\u{202e}\njustification-not-shown: 20 more bytes\nop 1: writeText /etc/x\n  target: host:etc/x\n  current: absent\n  content-sha256: 00\n  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n    +a\u{1b}]0;title\u{7}\n    ! diff line 1: 99 more bytes not shown\n    ! 7 more diff lines not shown\n";
        assert_eq!(
            prompt_text(description, 0),
            "An fsd client asks to run these calls at a wider mode:\n\nfsd escalation v1\nmode: danger-full-access\njustification: why\\u{202e}\njustification-not-shown: 20 more bytes\nop 1: writeText /etc/x\n  target: host:etc/x\n  current: absent\n  content-sha256: 00\n  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n    +a\\u{1b}]0;title\\u{7}\n    ! diff line 1: 99 more bytes not shown\n    ! 7 more diff lines not shown\n"
        );
    }

    /// A change whose content the description does not bind is marked in front of the person.
    #[test]
    fn the_prompt_marks_a_change_whose_content_is_not_bound() {
        let description = "fsd escalation v1\nmode: danger-full-access\nop 1: readText /etc/a\n  target: host:etc/a\nop 2: writeText /etc/x\n  target: host:etc/x\n  current: absent\nop 3: writeText /etc/y\n  target: host:etc/y\n  content-sha256: 00\n";
        assert_eq!(
            prompt_text(description, 0),
            "An fsd client asks to run these calls at a wider mode:\n\nfsd escalation v1\nmode: danger-full-access\nop 1: readText /etc/a\n  target: host:etc/a\nop 2: writeText /etc/x\n  content: NOT BOUND: approving lets this call write any content\n  target: host:etc/x\n  current: absent\nop 3: writeText /etc/y\n  target: host:etc/y\n  content-sha256: 00\n"
        );
    }
}
