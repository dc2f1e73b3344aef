//! fsd-approver: the program that holds the approver's Ed25519 private key, separate from the
//! agent and its client. It reads the daemon's canonical description of an escalation, decides
//! (a person at a terminal, or a rule file for unattended fleets) and prints the signature over
//! exactly those bytes. The daemon has only the public key, so a compromised client cannot
//! forge an approval.
#![forbid(unsafe_code)]

mod rules;
mod serve;

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ed25519_dalek::{Signer, SigningKey};

pub use rules::{Decision, Rule, Rules, allows, decide, glob};

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
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Serve approvals over gRPC (fsd.approver.v1) so the key lives away from the agent.
    Serve {
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// unix:PATH or tcp:HOST:PORT.
        #[arg(long, value_name = "ADDR")]
        listen: String,
        /// Decide by these rules; without them each request is asked on this terminal.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
    },
    /// Read a description on stdin; print its signature (hex) on approval (exit 0), else exit 1.
    Sign {
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Decide by these rules instead of asking on the terminal.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    #[error("{0} does not hold a key (64 hex digits)")]
    BadKey(PathBuf),
    #[error("no randomness available")]
    Random,
    #[error("invalid rules {0}: {1}")]
    Rules(PathBuf, #[source] toml::de::Error),
    #[error("cannot read the description: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("cannot ask on the terminal: {0}")]
    Tty(#[source] std::io::Error),
    #[error("invalid listen address {0:?}: expected unix:PATH or tcp:HOST:PORT")]
    Listen(String),
    #[error("cannot serve: {0}")]
    Serve(String),
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
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ApproverError::Io(path.to_owned(), e))?;
    writeln!(file, "{text}").map_err(|e| ApproverError::Io(path.to_owned(), e))
}

pub fn load_key(path: &Path) -> Result<SigningKey, ApproverError> {
    let text = std::fs::read_to_string(path).map_err(|e| ApproverError::Io(path.to_owned(), e))?;
    let bytes = hex::decode(text.trim()).map_err(|_| ApproverError::BadKey(path.to_owned()))?;
    let seed: [u8; 32] = bytes.try_into().map_err(|_| ApproverError::BadKey(path.to_owned()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Signs exactly the description's bytes.
pub fn signature(key: &SigningKey, description: &str) -> [u8; 64] {
    key.sign(description.as_bytes()).to_bytes()
}

/// The signature as hex, as `sign` prints it.
pub fn sign(key: &SigningKey, description: &str) -> String {
    hex::encode(signature(key, description))
}

/// Escapes anything a terminal could interpret; the daemon already escaped paths, this is the
/// second wall against a description that tries to rewrite the screen.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '\n' || c.is_ascii_graphic() || c == ' ' {
                c.to_string()
            } else {
                c.escape_unicode().to_string()
            }
        })
        .collect()
}

/// Shows the description on the controlling terminal and asks.
pub(crate) fn ask(description: &str) -> Result<bool, ApproverError> {
    let tty =
        std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").map_err(ApproverError::Tty)?;
    let mut out = &tty;
    writeln!(out, "An fsd client asks to run these calls at a wider mode:\n").map_err(ApproverError::Tty)?;
    writeln!(out, "{}", printable(description)).map_err(ApproverError::Tty)?;
    write!(out, "Approve? [y/N] ").map_err(ApproverError::Tty)?;
    out.flush().map_err(ApproverError::Tty)?;
    let mut answer = String::new();
    std::io::BufReader::new(&tty).read_line(&mut answer).map_err(ApproverError::Tty)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

fn run(cli: Cli) -> Result<bool, ApproverError> {
    match cli.command {
        Command::Keygen { dir } => {
            let public = keygen(&dir)?;
            // The key files are written; a closed stdout only loses this copy of the public key.
            let _ = writeln!(std::io::stdout(), "{public}");
            Ok(true)
        }
        Command::Serve { key, listen, rules } => {
            let key = load_key(&key)?;
            let rules = rules.map(|path| Rules::load(&path)).transpose()?;
            serve::run(key, &listen, rules)?;
            Ok(true)
        }
        Command::Sign { key, rules } => {
            let key = load_key(&key)?;
            let mut description = String::new();
            std::io::stdin().read_to_string(&mut description).map_err(ApproverError::Stdin)?;
            let approved = match rules {
                Some(path) => {
                    let rules = Rules::load(&path)?;
                    decide(&rules, &description) == Decision::Allow
                }
                None => ask(&description)?,
            };
            if approved {
                // A signature nobody received approves nothing: exit 1, as for a denial.
                let mut out = std::io::stdout();
                return Ok(writeln!(out, "{}", sign(&key, &description)).and_then(|()| out.flush()).is_ok());
            }
            let _ = writeln!(std::io::stderr(), "fsd-approver: denied");
            Ok(false)
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
