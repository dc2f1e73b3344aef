//! The supervisor: the small privileged process that starts everything else by re-exec (the
//! network process and per-mode pools of workers), replaces workers that die, kills the ones the
//! network process reports hung, and on shutdown stops the network process first (in-flight
//! calls finish), then the workers, then removes the socket files.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::backend::journal;
use crate::config::{Config, Listen};
use crate::daemon::DaemonError;
use crate::ipc_messages::{self, Control, ControlRequest};
use crate::op::Mode;
use crate::sys;

/// How this process was started (not configuration).
#[derive(Debug, Default, Clone)]
pub struct RunOptions {
    /// Exit when standard input reaches EOF, and remove the socket's directory at exit: the
    /// embedded mode, where the parent holds the other end of that pipe.
    pub parent_pipe: bool,
}

/// Which child a wait belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Network,
    Worker(Mode),
}

/// A worker dying this soon after its start counts toward giving up on its mode.
const QUICK_DEATH: Duration = Duration::from_secs(2);
const MAX_QUICK_DEATHS: u32 = 5;
/// How long a network process that reported a start failure gets to exit.
const START_FAILURE_REAP: Duration = Duration::from_secs(1);
/// How long workers may outlive the network process during a stop.
const WORKER_LINGER: Duration = Duration::from_millis(500);

struct Supervisor {
    config: Config,
    exe: PathBuf,
    control: UnixStream,
    children: JoinSet<(Role, u32, Instant, std::io::Result<ExitStatus>)>,
    quick_deaths: std::collections::HashMap<Mode, u32>,
    given_up: Vec<Mode>,
    /// Children started and not yet reaped.
    alive: std::collections::HashSet<u32>,
    /// Workers killed for overrunning a deadline, and the ones that would not die.
    hung: crate::hung::HungWorkers,
    /// The content digests' key, drawn at start, for every child (`backend::digest`).
    digest_key: [u8; crate::digest::KEY_BYTES],
    /// The workers' own key (`ipc_messages::Start::vouch_key`), never handed to the network process.
    vouch_key: [u8; crate::digest::KEY_BYTES],
    /// The audit log's checkpoint key (`ipc_messages::Start::audit_key`), for the network
    /// process only.
    audit_key: Option<[u8; 32]>,
}

impl Supervisor {
    /// Starts one child of this binary with `inherit` as its IPC descriptor. Its command line
    /// names its role and the log format only: the configuration follows in its first frame
    /// (`ipc_messages::Start`), never from the flags or the file.
    fn spawn(&mut self, role: Role, inherit: &UnixStream) -> Result<u32, DaemonError> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(inherit);
        let mut command = tokio::process::Command::new(&self.exe);
        command.arg("--log-format").arg(self.config.log_format.as_str()).arg("--ipc-fd").arg(fd.to_string());
        match role {
            Role::Network => command.arg("--role").arg("network"),
            Role::Worker(mode) => command.arg("--role").arg("worker").arg("--worker-mode").arg(mode.as_str()),
        };
        // Own process group: a terminal's Ctrl-C reaches only the supervisor, which then stops
        // the others in order.
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit()).process_group(0);
        // Workers tag their temporary-file journal entries with this daemon's instance.
        command.env(journal::INSTANCE_ENV, journal::instance());
        let name = format!("{role:?}");
        let spawn_err = |source| DaemonError::Spawn { role: name.clone(), source };
        // Single-threaded: nothing else can spawn while the descriptor is inheritable.
        sys::ipc::set_inheritable(inherit.as_fd(), true).map_err(|e| spawn_err(e.into()))?;
        let spawned = command.spawn();
        sys::ipc::set_inheritable(inherit.as_fd(), false).map_err(|e| spawn_err(e.into()))?;
        let mut child = spawned.map_err(spawn_err)?;
        let pid = child.id().unwrap_or(0);
        let started = Instant::now();
        self.alive.insert(pid);
        self.children.spawn(async move { (role, pid, started, child.wait().await) });
        Ok(pid)
    }

    fn spawn_worker(&mut self, mode: Mode) -> Result<(), DaemonError> {
        let (ours, theirs) = sys::ipc::pair().map_err(|e| DaemonError::Runtime(e.into()))?;
        let pid = self.spawn(Role::Worker(mode), &theirs)?;
        drop(theirs);
        // Ahead of every frame the network process will send on this socket. A worker that
        // died already cannot take it: its exit is reaped (and replaced) like any death at birth.
        if let Err(e) = ipc_messages::send(&ours, &self.start(Some(self.vouch_key), None), None) {
            tracing::warn!(pid, mode = mode.as_str(), error = %e, "worker gone before its start");
        }
        self.hung.started(pid, mode);
        ipc_messages::send(&self.control, &Control::Worker { mode, pid }, Some(ours.as_fd()))?;
        Ok(())
    }

    /// What every child reads first; `vouch_key` for workers only, `audit_key` for the network
    /// process only.
    fn start(
        &self,
        vouch_key: Option<[u8; crate::digest::KEY_BYTES]>,
        audit_key: Option<[u8; 32]>,
    ) -> ipc_messages::Start {
        ipc_messages::Start { digest_key: self.digest_key, config: self.config.clone(), vouch_key, audit_key }
    }

    fn give_up(&mut self, mode: Mode, reason: String) -> Result<(), DaemonError> {
        self.given_up.push(mode);
        if self.config.served_modes().iter().all(|m| self.given_up.contains(m)) {
            return Err(DaemonError::NothingServed(format!("{}: {reason}", mode.as_str())));
        }
        tracing::error!(mode = mode.as_str(), %reason, "not serving this mode");
        ipc_messages::send(&self.control, &Control::Unavailable { mode, reason }, None)?;
        Ok(())
    }

    /// A worker died: replace it, unless its mode keeps dying at birth.
    /// `failed_itself`: the worker exited with an error of its own (a confinement step failed),
    /// as opposed to being killed (a hung call, an operator, the OOM killer), which says nothing
    /// about the next worker.
    fn replace(
        &mut self,
        mode: Mode,
        started: Instant,
        failed_itself: bool,
        status: &str,
    ) -> Result<(), DaemonError> {
        if self.given_up.contains(&mode) {
            return Ok(());
        }
        let quick = failed_itself && started.elapsed() < QUICK_DEATH;
        let count = self.quick_deaths.entry(mode).or_insert(0);
        *count = if quick { *count + 1 } else { 0 };
        if *count >= MAX_QUICK_DEATHS {
            return self
                .give_up(mode, format!("workers keep exiting at start ({status}); see the daemon log"));
        }
        self.spawn_worker(mode)
    }

    /// Waits for every child to exit, until `deadline`; then kills what is left. Once the
    /// network process is gone, workers get `WORKER_LINGER` at most: they have nothing left to
    /// do, and one that does not exit is stuck. Returns the network process's exit status, if
    /// it exited in this wait.
    async fn reap(&mut self, deadline: Instant, network_running: bool) -> Option<ExitStatus> {
        let mut network_status = None;
        let mut until = if network_running { deadline } else { deadline.min(Instant::now() + WORKER_LINGER) };
        loop {
            tokio::select! {
                next = self.children.join_next() => match next {
                    None => return network_status,
                    Some(Ok((role, pid, _, status))) => {
                        self.alive.remove(&pid);
                        if role == Role::Network {
                            network_status = status.ok();
                            until = until.min(Instant::now() + WORKER_LINGER);
                        }
                    }
                    Some(Err(_)) => {}
                },
                _ = tokio::time::sleep_until(until.into()) => {
                    if !self.alive.is_empty() {
                        tracing::warn!(children = self.alive.len(), "children did not stop in time; killing them");
                    }
                    for pid in &self.alive {
                        let _ = sys::ipc::signal(*pid, true);
                    }
                    // The kills are immediate; collect the exits so nothing is left a zombie.
                    let collect = async { while self.children.join_next().await.is_some() {} };
                    let _ = tokio::time::timeout(Duration::from_millis(200), collect).await;
                    self.children.abort_all();
                    return network_status;
                }
            }
        }
    }
}

pub fn run(config: Config, options: RunOptions) -> Result<(), DaemonError> {
    // Before any child: a cause found here is one line, not a crash loop behind a "serving".
    crate::start_checks::check(&config)?;
    let exe = std::env::current_exe().map_err(DaemonError::Runtime)?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(DaemonError::Runtime)?;
    runtime.block_on(supervise(config, exe, options))
}

async fn supervise(config: Config, exe: PathBuf, options: RunOptions) -> Result<(), DaemonError> {
    // Refuse to start, with the reason, when the workers' identity cannot be decided (writable
    // roots of different owners); every worker would fail the same way at birth.
    let identity = config.worker_identity()?;
    let (mut sigterm, mut sigint, mut sighup) = stop_signals()?;
    let (control, network_end) = sys::ipc::pair().map_err(|e| DaemonError::Runtime(e.into()))?;
    let requests = control.try_clone().map_err(DaemonError::Runtime)?;
    let sockets: Vec<PathBuf> = config
        .listen
        .iter()
        .filter_map(|l| match l {
            Listen::Unix(path) | Listen::HttpUnix(path) => Some(path.clone()),
            Listen::Tcp(_) | Listen::Http(_) | Listen::HttpPlain(_) | Listen::HttpPod(_) => None,
        })
        .collect();
    let config_max_abandoned = config.max_abandoned_workers;
    let digest_key = crate::digest::new_key().map_err(DaemonError::NoDigestKey)?;
    let vouch_key = crate::digest::new_key().map_err(DaemonError::NoDigestKey)?;
    let mut sup = Supervisor {
        config,
        exe,
        control,
        children: JoinSet::new(),
        quick_deaths: Default::default(),
        given_up: Vec::new(),
        alive: Default::default(),
        hung: crate::hung::HungWorkers::new(config_max_abandoned, crate::hung::KILL_GRACE),
        digest_key,
        vouch_key,
        audit_key: None,
    };
    if let Some(dir) = &sup.config.state_dir {
        recover_state_dir(dir, &sup.config.roots, identity)?;
    }
    // After state_dir exists, where the daemon's own key is kept when none is configured.
    let audit_key = crate::audit::signing_key(&sup.config)?;
    sup.audit_key = audit_key.as_ref().map(|(key, _)| key.to_bytes());
    let sweeper = journal::Sweeper::start(&sup.config.roots, (identity.uid, identity.gid));
    // Before the network process reads the TLS files: any change after its read is seen.
    let mut tls_watch = sup.config.tls.clone().map(crate::tls::watch::Watch::new);
    let mut tls_poll = tokio::time::interval(crate::tls::watch::POLL);
    tls_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (network_pid, requests) = sup.start_network(network_end, requests).await?;
    if let Some((key, source)) = &audit_key {
        crate::audit::announce(key, source);
    }
    // The roots another daemon serves are said only now: a start that fails (another daemon on
    // the socket, serving these very roots) is the one line naming its cause.
    sweeper.report_shared();
    sup.start_workers(identity)?;
    let mut kill_rx = read_requests(requests)?;

    let parent_gone = async {
        if options.parent_pipe {
            wait_for_stdin_eof().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(parent_gone);
    let mut outcome = Ok(());
    let mut network_alive = true;
    // The network process said it is stopping though the supervisor did not ask (it was
    // signalled itself): its workers exit next, and are not replaced.
    let mut network_stopping = false;
    loop {
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: stopping (fsd does not reload its configuration: start it again)");
                break;
            }
            _ = &mut parent_gone => { tracing::info!("parent pipe closed: stopping"); break; }
            _ = tls_poll.tick(), if tls_watch.is_some() => {
                if let Some(change) = tls_watch.as_mut().and_then(crate::tls::watch::Watch::poll) {
                    hand_over_tls(&sup.control, change);
                }
            }
            Some(request) = kill_rx.recv() => {
                let ControlRequest::Kill { pid } = request else {
                    network_stopping = true;
                    // The network process closes its workers' sockets only once it has this.
                    if let Err(e) = ipc_messages::send(&sup.control, &Control::StopSeen, None) {
                        tracing::debug!(error = %e, "cannot confirm the network process's stop");
                    }
                    continue;
                };
                sup.kill_requested(pid, network_pid);
            }
            pid = sup.hung.next_check() => sup.check_overdue(pid),
            Some(done) = sup.children.join_next() => {
                let Ok((role, pid, started, status)) = done else { continue };
                sup.alive.remove(&pid);
                let status_text = match &status { Ok(s) => s.to_string(), Err(e) => e.to_string() };
                match role {
                    Role::Network => {
                        // Unasked, even with status 0 (a SIGTERM sent to it rather than to the
                        // supervisor): the daemon no longer serves, which must not read as a
                        // clean stop to `Restart=on-failure`. Reported once, by main.
                        network_alive = false;
                        outcome = Err(match status {
                            Ok(status) if !status.success() => DaemonError::NetworkExited(status),
                            _ => DaemonError::NetworkStopped { status: status_text, supervisor: std::process::id() },
                        });
                        break;
                    }
                    Role::Worker(mode) => {
                        let exit = WorkerExit { pid, mode, started, status, status_text };
                        if let Some(stop) = sup.worker_exited(&sweeper, exit, network_stopping) {
                            outcome = Err(stop);
                            break;
                        }
                    }
                }
            }
        }
    }
    sup.stop(network_pid, network_alive, outcome, &sockets, options.parent_pipe).await
}

/// The stop signals, taken before any child: a SIGTERM as soon as the socket answers is a stop,
/// not a killed daemon.
fn stop_signals() -> Result<
    (tokio::signal::unix::Signal, tokio::signal::unix::Signal, tokio::signal::unix::Signal),
    DaemonError,
> {
    let sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(DaemonError::Signal)?;
    let sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(DaemonError::Signal)?;
    // A closed terminal or an operator expecting a reload: stopped in order rather than by the
    // default action, which left the socket file and logged nothing. (There is no reload.)
    let sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(DaemonError::Signal)?;
    Ok((sigterm, sigint, sighup))
}

/// Before any worker exists, and before the socket answers: settle the transactions a killed
/// daemon left (backend::txn: rolled back, or finished), then remove the temporary files it
/// left (backend::journal), the rolled-back transactions' staged files among them.
fn recover_state_dir(
    dir: &std::path::Path,
    roots: &[crate::op::RootSpec],
    identity: crate::config::WorkerIdentity,
) -> Result<(), DaemonError> {
    prepare_state_dir(dir, roots, identity)?;
    let report = crate::backend::txn::recover(dir, roots, |_| true);
    if report.records > 0 {
        tracing::warn!(
            state_dir = %dir.display(),
            records = report.records,
            finished = report.finished,
            rolled_back = report.rolled_back,
            undone = report.undone,
            unreadable = report.unreadable,
            "transaction recovery done: transactions a killed daemon left were settled"
        );
    } else {
        tracing::info!(state_dir = %dir.display(), "transaction recovery done: none to settle");
    }
    Ok(())
}

/// Kill requests from the network process arrive on a plain thread (the socket is blocking).
fn read_requests(
    requests: UnixStream,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<ControlRequest>, DaemonError> {
    let (kill_tx, kill_rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("fsd-kill-requests".into())
        .spawn(move || {
            while let Ok((request, fd)) = ipc_messages::recv::<ControlRequest>(&requests) {
                if let ControlRequest::RemoveStranded(stranded) = &request {
                    remove_stranded(stranded, fd);
                    continue;
                }
                if matches!(request, ControlRequest::Kill { .. } | ControlRequest::Stopping)
                    && kill_tx.send(request).is_err()
                {
                    return;
                }
            }
        })
        .map_err(DaemonError::Runtime)?;
    Ok(kill_rx)
}

/// A worker's exit, as the supervisor saw it.
struct WorkerExit {
    pid: u32,
    mode: Mode,
    started: Instant,
    status: std::io::Result<ExitStatus>,
    status_text: String,
}

impl Supervisor {
    /// Starts the network process and waits until it says it listens. Returns its pid and the
    /// control socket's reading end.
    async fn start_network(
        &mut self,
        network_end: UnixStream,
        requests: UnixStream,
    ) -> Result<(u32, UnixStream), DaemonError> {
        let network_pid = self.spawn(Role::Network, &network_end)?;
        drop(network_end);
        // A network process that died already is reported below, by its silence and exit status.
        if let Err(e) = ipc_messages::send(&self.control, &self.start(None, self.audit_key), None) {
            tracing::debug!(error = %e, "network process gone before its start");
        }
        // Workers start once the network process has bound its listeners: a listener that cannot
        // bind is reported here, once, and no worker ever starts.
        let (requests, first) = tokio::task::spawn_blocking(move || {
            let first = ipc_messages::recv::<ControlRequest>(&requests);
            (requests, first)
        })
        .await
        .map_err(|e| DaemonError::Runtime(std::io::Error::other(e)))?;
        match first {
            Ok((ControlRequest::Listening, _)) => {}
            Ok((ControlRequest::StartFailed { reason }, _)) => {
                self.reap(Instant::now() + START_FAILURE_REAP, true).await;
                return Err(DaemonError::NetworkStart(reason));
            }
            Ok((other, _)) => {
                self.reap(Instant::now() + START_FAILURE_REAP, true).await;
                return Err(DaemonError::NetworkStart(format!("unexpected first message {other:?}")));
            }
            // It died without a word (killed, or a crash): its exit status is all there is.
            Err(_) => {
                let status = self.reap(Instant::now() + START_FAILURE_REAP, true).await;
                return Err(match status {
                    Some(status) => DaemonError::NetworkExited(status),
                    None => DaemonError::NetworkStart("the network process stopped before listening".into()),
                });
            }
        }
        Ok((network_pid, requests))
    }

    /// Every served mode's workers, then the lines that say what the daemon serves.
    fn start_workers(&mut self, identity: crate::config::WorkerIdentity) -> Result<(), DaemonError> {
        let abi = sys::landlock_abi();
        // The kernel's fence and link protection were settled by the preflight: a mode that could
        // not be served stopped the start there.
        for mode in self.config.served_modes() {
            for _ in 0..self.config.workers_per_mode {
                self.spawn_worker(mode)?;
            }
        }
        // One line per root: log fields are scalars, so JSON logs carry them as JSON values.
        for root in &self.config.roots {
            tracing::info!(root = %root.path.display(), writable = root.writable, "root");
        }
        tracing::info!(
            default_mode = self.config.default_mode.as_str(),
            max_mode = self.config.max_mode.as_str(),
            landlock_abi = abi,
            worker_uid = identity.uid,
            worker_gid = identity.gid,
            "fsd {} serving",
            env!("CARGO_PKG_VERSION")
        );
        Ok(())
    }

    /// The network process asked for a worker to be killed.
    fn kill_requested(&mut self, pid: u32, network_pid: u32) {
        // Only a live worker of this daemon: the network process faces clients, and a
        // pid it names that is no worker of ours (reaped, perhaps reused since, or
        // never ours) is not signalled by this privileged process.
        if pid == network_pid {
            tracing::warn!(pid, "the network process asked to be killed; not signalled");
            return;
        }
        if !self.alive.contains(&pid) {
            tracing::debug!(pid, "asked to kill a process that is no live worker; not signalled");
            return;
        }
        if unkillable_hook() {
            tracing::warn!(pid, "test hook: treating the worker as unkillable");
        } else if let Err(e) = sys::ipc::signal(pid, true) {
            tracing::warn!(pid, error = %e, "cannot kill worker");
        }
        self.hung.killed(pid);
    }

    /// A killed worker's time to exit is up: replaced if it is still there, or its mode stopped
    /// when too many were abandoned.
    fn check_overdue(&mut self, pid: u32) {
        let alive = self.alive.contains(&pid);
        let overdue = self.hung.overdue(pid, alive);
        if let Some(crate::hung::Overdue::Replace(mode) | crate::hung::Overdue::Stop { mode, .. }) = overdue {
            let abandoned = ipc_messages::Control::Abandoned { mode };
            if let Err(e) = ipc_messages::send(&self.control, &abandoned, None) {
                tracing::error!(error = %e, "cannot tell the network process");
            }
        }
        match overdue {
            None => {}
            Some(crate::hung::Overdue::Replace(mode)) => {
                tracing::error!(
                    pid,
                    mode = mode.as_str(),
                    "worker survived its kill (stuck in the kernel); abandoned and replaced"
                );
                if let Err(e) = self.spawn_worker(mode) {
                    tracing::error!(error = %e, "cannot replace an abandoned worker");
                }
            }
            Some(crate::hung::Overdue::Stop { mode, abandoned }) => {
                tracing::error!(
                    pid,
                    mode = mode.as_str(),
                    abandoned,
                    "too many abandoned workers: mode stopped until they exit"
                );
                let stuck = ipc_messages::Control::Stuck { mode, abandoned };
                if let Err(e) = ipc_messages::send(&self.control, &stuck, None) {
                    tracing::error!(error = %e, "cannot tell the network process");
                }
            }
        }
    }

    /// A worker exited: settled, and replaced unless it was abandoned or the network process is
    /// stopping.
    /// Returns why the daemon must stop, when no mode is left to serve.
    fn worker_exited(
        &mut self,
        sweeper: &journal::Sweeper,
        exit: WorkerExit,
        network_stopping: bool,
    ) -> Option<DaemonError> {
        let WorkerExit { pid, mode, started, status, status_text } = exit;
        match self.hung.exited(pid) {
            crate::hung::Exited::Abandoned => {
                tracing::warn!(pid, mode = mode.as_str(), "an abandoned worker finally exited");
                settle(sweeper, self, pid);
            }
            crate::hung::Exited::Recovered { mode, owed } => {
                tracing::warn!(
                    pid,
                    mode = mode.as_str(),
                    "an abandoned worker exited; serving the mode again"
                );
                settle(sweeper, self, pid);
                for _ in 0..owed {
                    if let Err(e) = self.spawn_worker(mode) {
                        tracing::error!(error = %e, "cannot start a worker");
                    }
                }
                if let Err(e) = ipc_messages::send(&self.control, &Control::Available { mode }, None) {
                    tracing::error!(error = %e, "cannot tell the network process");
                }
            }
            crate::hung::Exited::Ordinary if network_stopping => {
                tracing::debug!(pid, mode = mode.as_str(), "worker exited with the network process");
                settle(sweeper, self, pid);
            }
            crate::hung::Exited::Ordinary => {
                tracing::warn!(pid, mode = mode.as_str(), status = %status_text, "worker exited; replacing it");
                settle(sweeper, self, pid);
                let failed_itself = status.as_ref().is_ok_and(|s| s.code().is_some_and(|c| c != 0));
                match self.replace(mode, started, failed_itself, &status_text) {
                    Err(stop @ DaemonError::NothingServed(_)) => return Some(stop),
                    Err(e) => tracing::error!(error = %e, "cannot replace worker"),
                    Ok(()) => {}
                }
            }
        }
        None
    }

    /// The stop, in order: the network process first (in-flight calls finish), then the
    /// workers, then the socket files.
    async fn stop(
        &mut self,
        network_pid: u32,
        network_alive: bool,
        mut outcome: Result<(), DaemonError>,
        sockets: &[PathBuf],
        parent_pipe: bool,
    ) -> Result<(), DaemonError> {
        // Abandoned workers will not exit on their own: kill them again, now for good.
        for pid in self.hung.abandoned() {
            let _ = sys::ipc::signal(pid, true);
        }
        // The network process first: it finishes in-flight calls (within its share of the grace),
        // then its worker sockets close and the workers exit on their own. The whole stop is
        // bounded by `shutdown_grace`: whatever is left then (a worker stuck in a syscall) is killed.
        if network_alive {
            // The stop is ours: the network process need not wait to be heard.
            let _ = ipc_messages::send(&self.control, &Control::StopSeen, None);
            let _ = sys::ipc::signal(network_pid, false);
        }
        if let Some(status) = self.reap(Instant::now() + self.config.shutdown_grace, network_alive).await
            && !status.success()
            && outcome.is_ok()
        {
            // SIGTERM'd cleanly exits 0; anything else is worth reporting.
            outcome = Err(DaemonError::NetworkExited(status));
        }
        for path in sockets {
            if let Err(e) = std::fs::remove_file(path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "could not remove socket");
            }
            if parent_pipe && let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        tracing::info!("stopped");
        outcome
    }
}

/// A worker died: its transaction, if it was committing one, is rolled back (or finished) before
/// its temporary files are swept, and only then does the network process release the locks it
/// kept for that transaction (`Control::Recovered`): no call sees it half-committed.
fn settle(sweeper: &journal::Sweeper, sup: &Supervisor, pid: u32) {
    if let Some(dir) = &sup.config.state_dir {
        let owner = journal::owner_of(pid);
        let report = crate::backend::txn::recover(dir, &sup.config.roots, |o| o == owner);
        if report.records > 0 {
            tracing::warn!(
                pid,
                finished = report.finished,
                rolled_back = report.rolled_back,
                undone = report.undone,
                "recovered the transaction of a dead worker"
            );
        }
    }
    sweeper.worker_died(pid);
    if let Err(e) = ipc_messages::send(&sup.control, &Control::Recovered { pid }, None) {
        tracing::debug!(error = %e, "cannot tell the network process a worker was settled");
    }
}

/// Makes `state_dir` and its intent-record directory (mode 0700), owned by the workers'
/// identity, which writes the records, and refuses one inside a root.
fn prepare_state_dir(
    dir: &std::path::Path,
    roots: &[crate::op::RootSpec],
    identity: crate::config::WorkerIdentity,
) -> Result<(), DaemonError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let failed = |source| DaemonError::StateDir { path: dir.to_owned(), source };
    // Inside a root, a worker could reach the records through its walk; the config refused the
    // lexical case, this is the one through links.
    let canonical = |path: &std::path::Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let intents = dir.join(crate::backend::txn::INTENTS);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&intents).map_err(failed)?;
    let state = canonical(dir);
    if roots
        .iter()
        .map(|r| canonical(&r.path))
        .any(|root| state.starts_with(&root) || root.starts_with(&state))
    {
        return Err(failed(std::io::Error::other("it is inside a root, or holds one")));
    }
    // The change record's directory and its before-images (`backend::record`), the same way.
    let record = dir.join(crate::backend::record::DIR);
    let blobs = record.join(crate::backend::record::BLOBS);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&blobs).map_err(failed)?;
    for made in [&intents, &record, &blobs] {
        std::fs::set_permissions(made, std::fs::Permissions::from_mode(0o700)).map_err(failed)?;
        if crate::sys::effective_ids() != (identity.uid, identity.gid) {
            std::os::unix::fs::chown(made, Some(identity.uid), Some(identity.gid)).map_err(failed)?;
        }
    }
    Ok(())
}

/// Hands rotated TLS files to the network process, or says in one line why the certificate in
/// use stays.
fn hand_over_tls(control: &UnixStream, change: crate::tls::watch::Change) {
    use crate::tls::watch::Change;
    match change {
        Change::Loaded(files, certificate) => match ipc_messages::send(control, &Control::Tls(files), None) {
            Ok(()) => tracing::info!(
                serial = %certificate.serial,
                not_after = %certificate.expires(),
                "TLS files changed: handed to the network process for new handshakes"
            ),
            Err(e) => tracing::error!(error = %e, "TLS files changed but cannot reach the network process"),
        },
        Change::Refused { error, serving } => tracing::error!(
            error = %error,
            serial = %serving.as_ref().map_or("", |c| c.serial.as_str()),
            "TLS files changed but do not load; keeping the certificate in use"
        ),
    }
}

/// Removes a temporary file a worker emptied but could not remove (its directory left the
/// fence mid-write; Landlock keeps the worker out of it now). Only what the worker made and
/// emptied goes: a name of fsd's temporary form, in the directory the worker held, that is still
/// the worker's inode, a regular file, empty and with no permission bit. Anything else at the
/// name is left alone.
fn remove_stranded(stranded: &ipc_messages::Stranded, dir: Option<std::os::fd::OwnedFd>) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(&stranded.name);
    let ours = name
        .to_str()
        .and_then(|n| n.strip_prefix(crate::op::TEMP_PREFIX))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    let Some(dir) = dir.filter(|_| ours) else {
        tracing::warn!(?name, "refused to remove a stranded file: not a temporary name with its directory");
        return;
    };
    match sys::meta_at(dir.as_fd(), name) {
        Ok(meta)
            if meta.kind == sys::Kind::File
                && (meta.dev, meta.ino) == (stranded.dev, stranded.ino)
                && meta.size == 0
                && meta.mode & 0o7777 == 0 =>
        {
            match sys::remove(dir.as_fd(), name) {
                Ok(()) => tracing::info!(?name, "removed a temporary file left outside the fence"),
                Err(errno) => {
                    tracing::warn!(?name, %errno, "cannot remove a temporary file left outside the fence")
                }
            }
        }
        Ok(_) => tracing::warn!(?name, "a stranded name holds something else now; left alone"),
        Err(errno) => tracing::debug!(?name, %errno, "a stranded file is gone already"),
    }
}

/// Test hook (cargo feature `fault-injection`, `FSD_FAULT_UNKILLABLE_WORKERS=1`): kill requests
/// for hung workers are not carried out, as if each worker were stuck where no signal reaches.
fn unkillable_hook() -> bool {
    cfg!(feature = "fault-injection")
        && std::env::var_os("FSD_FAULT_UNKILLABLE_WORKERS").is_some_and(|v| v == "1")
}

/// Resolves when standard input reaches EOF (or fails).
async fn wait_for_stdin_eof() {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
