//! The `fsd` binary: parses flags and runs the process role it was started as (the supervisor by
//! default; the network process and workers are re-executions of this binary by the supervisor).
#![forbid(unsafe_code)]

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fsd::config::{Config, LogFormat, Overrides};
use fsd::daemon::DaemonError;
use fsd::op::Mode;
use fsd::supervisor::RunOptions;

#[cfg(feature = "fault-injection")]
macro_rules! fault_injection {
    () => {
        " (fault-injection)"
    };
}
#[cfg(not(feature = "fault-injection"))]
macro_rules! fault_injection {
    () => {
        ""
    };
}
#[cfg(feature = "unhashed-streams")]
macro_rules! unhashed_streams {
    () => {
        " (unhashed-streams: no content digest on streamed reads)"
    };
}
#[cfg(not(feature = "unhashed-streams"))]
macro_rules! unhashed_streams {
    () => {
        ""
    };
}
#[cfg(feature = "no-telemetry")]
macro_rules! no_telemetry {
    () => {
        " (no-telemetry: no metrics or traces)"
    };
}
#[cfg(not(feature = "no-telemetry"))]
macro_rules! no_telemetry {
    () => {
        ""
    };
}

/// The version line; a build with the test-only hooks says so, so tests can insist on it, and
/// so do the benchmark's builds without the stream digest or without telemetry, so no operator
/// runs one unawares (and the benchmark can check it was given the build it compares with).
const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), fault_injection!(), unhashed_streams!(), no_telemetry!());

/// fsd: the file daemon that owns the disk of one sandbox and serves fsd.v1 over gRPC.
// Without a command it runs the daemon. A command never takes the daemon's flags (nor the
// internal `--role`), so it cannot be taken for a role the supervisor starts, and children get
// only flags, never a command.
#[derive(Debug, Parser)]
#[command(name = "fsd", version = VERSION, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Where to listen (repeatable): unix:PATH or tcp:IP:PORT (gRPC), http:IP:PORT, http+unix:PATH or
    /// http+plain:127.0.0.1:PORT (REST and gRPC-Web); a non-loopback IP needs TLS (tls_cert, tls_key).
    #[arg(long, value_name = "ADDR")]
    listen: Vec<String>,
    /// A directory the daemon may read and write (repeatable).
    #[arg(long, value_name = "DIR")]
    writable_root: Vec<PathBuf>,
    /// A directory the daemon may only read (repeatable).
    #[arg(long, value_name = "DIR")]
    readable_root: Vec<PathBuf>,
    /// TOML configuration file (snake_case keys); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format on stderr (the level comes from FSD_LOG, default info).
    #[arg(long, value_name = "human|json")]
    log_format: Option<String>,
    /// The mode calls run at unless they ask for a narrower one: read-only, workspace-write (the
    /// default) or danger-full-access.
    #[arg(long, value_name = "MODE")]
    default_mode: Option<String>,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) and exit.
    #[arg(long, value_name = "SHELL", value_enum, exclusive = true)]
    completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit.
    #[arg(long, exclusive = true)]
    man: bool,
    /// Exit when stdin reaches EOF and remove the socket directory (used by fsd-tools --root).
    #[arg(long, hide = true)]
    parent_pipe: bool,
    /// Internal: the process role.
    #[arg(long, hide = true, value_enum, default_value_t = Role::Supervisor)]
    role: Role,
    /// Internal: the inherited IPC descriptor of a network process or worker.
    #[arg(long, hide = true)]
    ipc_fd: Option<i32>,
    /// Internal: a worker's mode.
    #[arg(long, hide = true, value_parser = worker_mode)]
    worker_mode: Option<Mode>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// The audit log (audit_log).
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Check an audit log's hash chain and signed checkpoints; name the first broken record
    /// (exit 1), or say it is intact (exit 0).
    Verify {
        /// The audit log (JSON lines).
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The public key of the key that signs the checkpoints (audit_signing_key's, or the
        /// daemon's own: state_dir/audit-key/audit.pub, logged at start): 64 hex digits, or a file
        /// holding them. Without it, each checkpoint is checked against the key it names.
        #[arg(long, value_name = "KEY")]
        public_key: Option<String>,
        /// A checkpoint's hash (as the daemon logged it, kept off this host) the log must hold;
        /// repeatable. Finds a log cut back to an earlier checkpoint, which otherwise verifies.
        #[arg(long, value_name = "HASH")]
        expect_checkpoint: Vec<String>,
    },
}

/// `fsd audit verify`: the verdict on stdout, exit 0 (intact), 1 (broken) or 2 (unreadable).
fn audit_command(command: &AuditCommand) -> ExitCode {
    use std::io::Write;
    let AuditCommand::Verify { file, public_key, expect_checkpoint } = command;
    let log = fsd_proto::chain::LogKind::Audit;
    match fsd_proto::chain::verify_file(file, log, public_key.as_deref(), expect_checkpoint) {
        fsd_proto::chain::Verdict::Intact(line) => {
            let _ = writeln!(std::io::stdout(), "{line}");
            ExitCode::SUCCESS
        }
        fsd_proto::chain::Verdict::Broken(line) => {
            let _ = writeln!(std::io::stdout(), "{line}");
            ExitCode::from(1)
        }
        fsd_proto::chain::Verdict::Failed(reason) => {
            let _ = writeln!(std::io::stderr(), "fsd: {reason}");
            ExitCode::from(2)
        }
    }
}

/// The process roles of this binary: the supervisor is the one an operator starts; it starts
/// the others by re-executing this binary with `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Role {
    Supervisor,
    Network,
    Worker,
}

fn worker_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text).ok_or_else(|| "expected read-only, workspace-write or danger-full-access".to_owned())
}

/// Whether a configuration flag is set (every flag but the log format, which the supervisor
/// passes its children so that they report a failed start in the configured format).
fn configured_by_flags(args: &Args) -> bool {
    !args.listen.is_empty()
        || !args.writable_root.is_empty()
        || !args.readable_root.is_empty()
        || args.config.is_some()
        || args.default_mode.is_some()
        || args.parent_pipe
}

/// How long a child waits for the supervisor's first frame.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The child's socket to its parent, once the supervisor's first frame (`ipc_messages::Start`) is read
/// from it and its digest key applied, and the configuration that frame carries.
fn ipc_socket(args: &Args) -> Result<(UnixStream, fsd::ipc_messages::Start), DaemonError> {
    let raw = args.ipc_fd.ok_or(DaemonError::Inherited(-1, fsd::sys::Errno::BADF))?;
    let fd = fsd::sys::ipc::inherited(raw).map_err(|e| DaemonError::Inherited(raw, e))?;
    let socket = UnixStream::from(fd);
    // The supervisor writes it as soon as the child exists: one that waits longer was not
    // started by a supervisor, and says so rather than hang.
    socket.set_read_timeout(Some(START_WAIT)).map_err(DaemonError::Runtime)?;
    let (start, _) = fsd::ipc_messages::recv::<fsd::ipc_messages::Start>(&socket)?;
    socket.set_read_timeout(None).map_err(DaemonError::Runtime)?;
    if !fsd::digest::set_key(&start.digest_key) {
        return Err(DaemonError::DigestKeyTooLate);
    }
    Ok((socket, start))
}

/// A process the supervisor starts.
#[derive(Debug, Clone, Copy)]
enum Child {
    Network,
    Worker(Mode),
}

/// A network process or a worker: everything it serves comes from the supervisor's first frame.
fn run_child(args: &Args, child: Child) -> Result<(), DaemonError> {
    fsd::sys::ipc::die_with_parent().map_err(|e| DaemonError::Inherited(-1, e))?;
    match child {
        Child::Network => {
            let (socket, start) = ipc_socket(args)?;
            fsd::network::run(start.config, socket, start.audit_key)
        }
        Child::Worker(mode) => {
            // Test hook: workers of these modes (a comma-separated list) fail at start, as with
            // a fence step the kernel refuses, so the supervisor gives the mode up while the
            // daemon runs (or stops, when no mode is left).
            #[cfg(feature = "fault-injection")]
            if std::env::var("FSD_FAULT_WORKER_FAILS").is_ok_and(|m| m.split(',').any(|m| m == mode.as_str()))
            {
                return Err(DaemonError::Runtime(std::io::Error::other(
                    "fault injection: this worker fails at start",
                )));
            }
            let (socket, start) = ipc_socket(args)?;
            Ok(fsd::worker::run(&start.config, mode, socket, start.vouch_key)?)
        }
    }
}

/// The supervisor: the one process that reads the configuration (file and flags).
fn run_supervisor(args: &Args) -> ExitCode {
    let overrides = Overrides {
        listen: args.listen.clone(),
        writable_roots: args.writable_root.clone(),
        readable_roots: args.readable_root.clone(),
        log_format: args.log_format.clone(),
        default_mode: args.default_mode.clone(),
    };
    #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
    let mut config = match Config::load(args.config.as_deref(), overrides) {
        Ok(config) => config,
        Err(e) => {
            let _ = fsd::daemon::init_logging(failed_config_log_format(args));
            return fatal(&e);
        }
    };
    // Test hook: the whole test suite run with the direct read path off, as `direct_reads =
    // false` turns it off (`FSD_FAULT_DIRECT_READS_OFF=1 cargo test ...`).
    #[cfg(feature = "fault-injection")]
    if std::env::var_os("FSD_FAULT_DIRECT_READS_OFF").is_some() {
        config.direct_reads = false;
    }
    if let Err(e) = fsd::daemon::init_logging(config.log_format) {
        return fatal(&e);
    }
    exit(fsd::supervisor::run(config, RunOptions { parent_pipe: args.parent_pipe }))
}

fn exit(outcome: Result<(), DaemonError>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // A child told the supervisor, which reports it once.
        Err(DaemonError::Reported) => ExitCode::from(2),
        Err(e) => fatal(&e),
    }
}

/// Reports why the process stops, as one log line in the configured format, and exits 2.
fn fatal(error: &dyn std::fmt::Display) -> ExitCode {
    tracing::error!("{error}");
    ExitCode::from(2)
}

/// `--completions SHELL` and `--man`: generated from these very flags. A closed stdout is quiet.
fn print_generated(args: &Args) -> Option<ExitCode> {
    use std::io::Write;
    let mut text = Vec::new();
    if let Some(shell) = args.completions {
        clap_complete::generate(shell, &mut <Args as clap::CommandFactory>::command(), "fsd", &mut text);
    } else if args.man {
        if let Err(e) = clap_mangen::Man::new(<Args as clap::CommandFactory>::command()).render(&mut text) {
            let _ = writeln!(std::io::stderr(), "fsd: cannot render the man page: {e}");
            return Some(ExitCode::from(2));
        }
    } else {
        return None;
    }
    let _ = std::io::stdout().write_all(&text);
    Some(ExitCode::SUCCESS)
}

/// The log format of a configuration that failed to load: the flag's, else the file's
/// `log_format` when the file is still readable TOML (a bad value elsewhere in it is reported in
/// the format the operator asked for), else human.
fn failed_config_log_format(args: &Args) -> LogFormat {
    let said = match &args.log_format {
        Some(flag) => Some(flag.clone()),
        None => args
            .config
            .as_deref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| text.parse::<toml::Table>().ok())
            .and_then(|table| table.get("log_format")?.as_str().map(str::to_owned)),
    };
    if said.as_deref() == Some("json") { LogFormat::Json } else { LogFormat::Human }
}

fn main() -> ExitCode {
    // Before anything is read or opened (`sys::confine::undumpable`).
    if let Err(e) = fsd::sys::confine::undumpable() {
        eprintln!("fsd: {e}");
        return ExitCode::from(2);
    }
    let args = Args::parse();
    if let Some(Command::Audit(command)) = &args.command {
        return audit_command(command);
    }
    if let Some(code) = print_generated(&args) {
        return code;
    }
    let child = match (args.role, args.worker_mode) {
        (Role::Supervisor, _) => return run_supervisor(&args),
        (Role::Network, _) => Child::Network,
        (Role::Worker, Some(mode)) => Child::Worker(mode),
        (Role::Worker, None) => {
            usage_error(clap::error::ErrorKind::MissingRequiredArgument, "a worker needs --worker-mode")
        }
    };
    if configured_by_flags(&args) {
        usage_error(
            clap::error::ErrorKind::ArgumentConflict,
            "the network process and workers take their configuration from the supervisor's first frame, never from flags or a file",
        );
    }
    // Before the configuration arrives: the supervisor passes the resolved format as a flag, so a
    // child that cannot read its first frame says so in that format.
    let format = if args.log_format.as_deref() == Some("json") { LogFormat::Json } else { LogFormat::Human };
    if let Err(e) = fsd::daemon::init_logging(format) {
        return fatal(&e);
    }
    exit(run_child(&args, child))
}

/// Exits as clap does for a command line it refuses.
fn usage_error(kind: clap::error::ErrorKind, message: &str) -> ! {
    <Args as clap::CommandFactory>::command().error(kind, message).exit()
}
