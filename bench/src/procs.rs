//! The servers under test, as child processes: the release `fsd` (one Unix socket and one
//! loopback TCP listener over a temporary root) and the bench's own bare tonic echo server with
//! the same listeners. Both stop when their stdin pipe closes, so neither outlives the bench; the
//! shared kit (`fsd-testkit`) starts them, waits for both listeners and stops them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fsd_tool_client::connect::Endpoint;

use crate::Res;

/// The two transports every per-call figure is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Tcp,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Unix, Transport::Tcp];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Unix => "Unix socket",
            Transport::Tcp => "TCP loopback",
        }
    }
}

/// Where the daemon serves plain reads: in its network process on the runtime thread that
/// received them (`direct_reads` and `inline_reads`, the defaults), in its network process on its
/// direct read threads (`inline_reads = false`), or in its workers. The benchmarks measure all
/// three in the same run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    Direct,
    Threads,
    Workers,
}

impl Reads {
    pub const ALL: [Reads; 3] = [Reads::Direct, Reads::Threads, Reads::Workers];

    pub fn name(self) -> &'static str {
        match self {
            Reads::Direct => "direct",
            Reads::Threads => "threads",
            Reads::Workers => "workers",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Reads::Direct => "direct_reads = true\n",
            Reads::Threads => "direct_reads = true\ninline_reads = false\n",
            Reads::Workers => "direct_reads = false\n",
        }
    }
}

/// A child server with a Unix socket and a TCP port, started and stopped by the shared kit.
#[derive(Debug)]
pub struct Server {
    process: fsd_testkit::Daemon,
    socket: PathBuf,
    tcp: String,
    /// Holds the socket directory until the server is gone (declared after the process, so it
    /// drops after it).
    _dir: tempfile::TempDir,
}

/// A loopback port nobody listens on now (the server binds it a moment later).
pub fn free_port() -> Res<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Server {
    /// Starts the release `fsd` with `root` as its writable root; plaintext loopback TCP, which
    /// is read-only unless configured, may write too (the TCP rows write).
    pub fn fsd(bin_dir: &Path, root: &Path) -> Res<Server> {
        Server::fsd_started(bin_dir, root, &[], Some("client_max_modes = { tcp = \"workspace-write\" }\n"))
    }

    /// [`Server::fsd`] with a call rate above what it can serve: 64 callers in flight for
    /// seconds make more calls than the default `calls_per_second` budget (5000, burst 10000)
    /// lets one identity make, and this measures throughput, not the budget.
    pub fn fsd_unmetered(bin_dir: &Path, root: &Path) -> Res<Server> {
        let config = "client_max_modes = { tcp = \"workspace-write\" }\n\
                      [budgets]\ncalls_per_second = 1000000\ncall_burst = 1000000\n";
        Server::fsd_started(bin_dir, root, &[], Some(config))
    }

    /// [`Server::fsd`] with its reads served as `reads` says (`direct_reads`).
    pub fn fsd_reads(bin_dir: &Path, root: &Path, reads: Reads) -> Res<Server> {
        let config = format!("client_max_modes = {{ tcp = \"workspace-write\" }}\n{}", reads.config());
        Server::fsd_started(bin_dir, root, &[], Some(&config))
    }

    /// [`Server::fsd_unmetered`] with its reads served as `reads` says.
    pub fn fsd_unmetered_reads(bin_dir: &Path, root: &Path, reads: Reads) -> Res<Server> {
        let config = format!(
            "client_max_modes = {{ tcp = \"workspace-write\" }}\n{}\
             [budgets]\ncalls_per_second = 1000000\ncall_burst = 1000000\n",
            reads.config()
        );
        Server::fsd_started(bin_dir, root, &[], Some(&config))
    }

    /// [`Server::fsd_unmetered`] with `config` added to its config file.
    pub fn fsd_unmetered_with(bin_dir: &Path, root: &Path, config: &str) -> Res<Server> {
        let config = format!(
            "client_max_modes = {{ tcp = \"workspace-write\" }}\n{config}\n\
             [budgets]\ncalls_per_second = 1000000\ncall_burst = 1000000\n"
        );
        Server::fsd_started(bin_dir, root, &[], Some(&config))
    }

    /// [`Server::fsd`] with this config body instead of its own.
    pub fn fsd_config(bin_dir: &Path, root: &Path, config: &str) -> Res<Server> {
        Server::fsd_started(bin_dir, root, &[], Some(config))
    }

    /// [`Server::fsd`] with more arguments (a config, another listener) instead of its config.
    pub fn fsd_with(bin_dir: &Path, root: &Path, args: &[std::ffi::OsString]) -> Res<Server> {
        Server::fsd_started(bin_dir, root, args, None)
    }

    fn fsd_started(
        bin_dir: &Path,
        root: &Path,
        args: &[std::ffi::OsString],
        config: Option<&str>,
    ) -> Res<Server> {
        let bins = fsd_testkit::Bins::fsd_in(bin_dir)
            .map_err(|e| format!("{e} (the bench wants a release build: `cargo build --release`)"))?;
        let launch = fsd_testkit::Launch::fsd(&bins).writable_root(root).parent_pipe().args(args);
        Server::start(launch, "fsd", config)
    }

    /// Starts this binary's bare tonic echo server.
    pub fn echo() -> Res<Server> {
        let launch =
            fsd_testkit::Launch::server("echo", &std::env::current_exe()?).arg("echo-server").stdin_pipe();
        Server::start(launch, "echo", None)
    }

    fn start(mut launch: fsd_testkit::Launch, what: &str, config: Option<&str>) -> Res<Server> {
        let dir = tempfile::Builder::new().prefix("fsd-bench-sock-").tempdir()?;
        if let Some(config) = config {
            launch = launch.config(dir.path().join(format!("{what}.toml")), config);
        }
        let socket = dir.path().join(format!("{what}.sock"));
        let tcp = format!("127.0.0.1:{}", free_port()?);
        let process = launch.unix(&socket).tcp(tcp.as_str()).timeout(Duration::from_secs(20)).start()?;
        Ok(Server { process, socket, tcp, _dir: dir })
    }

    pub fn endpoint(&self, transport: Transport) -> Endpoint {
        match transport {
            Transport::Unix => Endpoint::Unix(self.socket.clone()),
            Transport::Tcp => Endpoint::Tcp(self.tcp.clone()),
        }
    }

    /// The server's process and all its descendants (for fsd: the supervisor, the network
    /// process and the workers), as they are now.
    pub fn pids(&self) -> Vec<u32> {
        self.process.pids()
    }

    /// CPU seconds spent so far by the process tree.
    pub fn cpu_seconds(&self) -> f64 {
        fsd_testkit::procs::cpu_seconds(&self.pids())
    }

    /// Peak resident memory in KiB, VmHWM summed over the process tree: an upper bound of the
    /// whole server's peak (the processes need not peak at the same moment). Also the count.
    pub fn peak_rss_kib(&self) -> (u64, usize) {
        self.process.peak_rss_kib()
    }
}
