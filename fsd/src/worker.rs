//! A worker process: opens its roots, confines itself for one mode, then serves calls from the
//! network process over its socket, one at a time, making every filesystem syscall of them.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crate::backend::{Backend, Fence, Guard, Locking};

use crate::config::Config;
use crate::error::FsError;
use crate::ipc_messages::{self, FromWorker, IpcError, ToWorker};
use crate::op::Mode;
use crate::sys;

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Start(#[from] crate::backend::StartError),
    #[error(transparent)]
    Identity(#[from] crate::config::ConfigError),
    #[error("confinement failed: {0}")]
    Confine(#[from] crate::sys::confine::ConfineError),
    #[error("ipc: {0}")]
    Ipc(#[from] IpcError),
    #[error("cannot ignore SIGXFSZ: {0}")]
    Signal(#[source] crate::sys::Errno),
    #[error("cannot duplicate the ipc socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("approver_public_key: {0}")]
    Approvals(String),
}

/// Locks taken from the network process: ask, wait for the grant; released there when the
/// call's reply arrives. A key this call already holds is not asked for again: the router would
/// wait for this very call's reply to grant it (a call that walks again, see
/// `backend::write::parent_vanished`, locks its target a second time).
#[derive(Debug)]
struct RemoteLocks {
    socket: UnixStream,
    /// The keys granted to the current call.
    held: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl RemoteLocks {
    /// A new call: it holds nothing yet (the router released the last call's keys with its reply).
    fn new_call(&self) {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

impl Locking for RemoteLocks {
    fn lock(&self, keys: &[&str]) -> Result<Guard, FsError> {
        let lost = || FsError::Aborted;
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let keys: Vec<String> =
            keys.iter().filter(|k| !held.contains(**k)).map(|k| (*k).to_owned()).collect();
        if keys.is_empty() {
            return Ok(Guard::remote());
        }
        held.extend(keys.iter().cloned());
        ipc_messages::send(&self.socket, &FromWorker::Lock { keys }, None).map_err(|_| lost())?;
        match ipc_messages::recv::<ToWorker>(&self.socket) {
            Ok((ToWorker::LockGranted, _)) => Ok(Guard::remote()),
            _ => Err(lost()),
        }
    }
}

/// `vouch_key`: the workers' own key (`ipc_messages::Start::vouch_key`).
pub fn run(
    config: &Config,
    mode: Mode,
    socket: UnixStream,
    vouch_key: Option<[u8; crate::digest::KEY_BYTES]>,
) -> Result<(), WorkerError> {
    let locks = Arc::new(RemoteLocks {
        socket: socket.try_clone().map_err(WorkerError::Socket)?,
        held: Default::default(),
    });
    let fence = Fence {
        protected: &config.protected_names,
        read_denied: &config.read_denied,
        submounts: &config.allow_submounts,
        allow_backslash: config.allow_backslash,
        host_root: mode == Mode::DangerFullAccess,
    };
    // The intent records of transactions, in the state directory the supervisor made (which the
    // worker's Landlock grant covers, see `role_confinement::grants`).
    let intents =
        config.state_dir.as_ref().and_then(|dir| sys::open_dir(&dir.join(crate::backend::txn::INTENTS)).ok());
    // The change record, for the modes that change files (`backend::record`).
    let record = match (&config.state_dir, &config.record) {
        (Some(dir), Some(settings)) if mode != Mode::ReadOnly => {
            match crate::backend::record::Store::open(dir, settings.clone()) {
                Ok(store) => Some(store),
                Err(errno) => {
                    tracing::warn!(%errno, "the change record cannot be opened: changes go unrecorded");
                    None
                }
            }
        }
        _ => None,
    };
    let backend = Backend::new(&config.roots, &fence, config.limits, locks.clone())?
        .with_intents(intents)
        .with_record(record);
    let backend = if mode == Mode::ReadOnly { backend.without_journal() } else { backend };
    sys::ignore_file_size_signal().map_err(WorkerError::Signal)?;
    // Read before seccomp forbids asking: EFBIG replies name the limit.
    let _ = sys::file_size_limit();
    // Read before confinement like the rest of the config: the approver's key this worker
    // checks the approvals of its changes with.
    // Under signed trust a mode wider than the daemon's default changes nothing unsigned.
    let signed = config.escalation == crate::config::Escalation::Signed && mode > config.default_mode;
    let approvals = signed
        .then(|| {
            let vouch_key = vouch_key.ok_or("no vouching key in the start frame")?;
            crate::escalation::WorkerCheck::new(config.approver_public_key.as_deref(), vouch_key)
        })
        .transpose()
        .map_err(WorkerError::Approvals)?;
    // Compiled before this worker's own filter, for its approved calls' processes to load.
    let filter =
        if mode == Mode::DangerFullAccess { Some(sys::confine::compile_approved_call()?) } else { None };
    let identity = config.worker_identity()?;
    let confinement = crate::role_confinement::worker(config, mode, identity)?;
    tracing::debug!(mode = mode.as_str(), fence = confinement.describe(), "worker ready");
    let ready = FromWorker::Ready { mode, enforcement: confinement.describe().to_owned() };
    match ipc_messages::send(&socket, &ready, None) {
        // The network process stopped before this worker came up (a daemon stopping early):
        // nothing to serve, nothing to report.
        Err(IpcError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        sent => sent?,
    }
    loop {
        let (message, fd) = match ipc_messages::recv::<ToWorker>(&socket) {
            Ok(received) => received,
            // The network process is gone: so is our reason to exist.
            Err(IpcError::Closed) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if matches!(message, ToWorker::Call(_)) {
            locks.new_call();
        }
        // An approved call's walks are held to what its approver was shown, for this call only.
        let mut signed_approval = None;
        let mut vouched = Vec::new();
        let mut for_whom = None;
        let (message, bindings, named) = match message {
            ToWorker::Call(request) => {
                // Who the call changes things for, until the next call (`backend::record`).
                let (request, author) = request.unrecord();
                backend.set_author(author);
                let crate::op::Unbound { request, bindings, approval, made, requester } = request.unbind();
                // Whom an approved call is for: held by this worker's own walk, whatever the
                // network process checked; an approval's signed word on it wins over its.
                let signed = approvals.as_ref().zip(approval.as_ref()).and_then(|(c, a)| c.requester(a));
                for_whom = signed.or(requester).map(|r| crate::backend::ForWhom::of(&request, r));
                // A change (or an escalated read) this worker's mode makes only with an
                // approval: checked here, by the process that makes it, not taken on the
                // network process's word.
                match unsigned(approvals.as_ref(), &request, &bindings, approval.as_ref()) {
                    Ok(named) => {
                        // What earlier calls of the same approval made, as their workers
                        // vouched: only what this worker's key proves.
                        if let Some(check) = &approvals {
                            vouched = check.vouched(approval.as_ref(), made);
                        }
                        signed_approval = approval;
                        (ToWorker::Call(request), bindings, named)
                    }
                    Err(failure) => {
                        ipc_messages::send(&socket, &FromWorker::Reply(Err(failure)), None)?;
                        continue;
                    }
                }
            }
            ToWorker::OpenStream { path, bindings, approval, requester } => {
                let read = crate::op::Request::ReadText { path, max_bytes: 0 };
                let signed = approvals.as_ref().zip(approval.as_ref()).and_then(|(c, a)| c.requester(a));
                match unsigned(approvals.as_ref(), &read, &bindings, approval.as_ref()) {
                    Ok(named) => {
                        for_whom = signed.or(requester).map(|r| crate::backend::ForWhom::of(&read, r));
                        let path = read.path().to_owned();
                        let open = ToWorker::OpenStream {
                            path,
                            bindings: Vec::new(),
                            approval: None,
                            requester: None,
                        };
                        (open, bindings, named)
                    }
                    Err(failure) => {
                        ipc_messages::send(&socket, &FromWorker::Stream(Err(failure)), None)?;
                        continue;
                    }
                }
            }
            other => (other, Vec::new(), Vec::new()),
        };
        let vouching = approvals.as_ref().zip(signed_approval.as_ref());
        let call = Call { backend: &backend, mode, socket: &socket, filter: filter.as_ref(), vouching };
        if mode == Mode::DangerFullAccess && !bindings.is_empty() {
            // An approved call outside the roots, or a preview its approval lets read: in a
            // process of its own that keeps only the authority its kind of call needs on the
            // approved objects.
            call.in_own_process(config, message, Approved { bindings, named, vouched, for_whom }, fd)?;
        } else if mode == Mode::DangerFullAccess && approvals.is_some() && reads_content(&message) {
            // Under signed trust, a read of content no approval binds (the checks and previews
            // before anyone is asked): no more than a read-only worker could read.
            call.as_reader(config, identity, message, fd)?;
        } else {
            let _bound = backend.bind_named(bindings, named, vouched, for_whom);
            call.serve(message, fd, None)?;
        }
    }
}

/// Whether `message` reads a file's or a directory's content (a stat and a write check read
/// metadata only; a change is never unbound at a mode that needs approvals).
fn reads_content(message: &ToWorker) -> bool {
    use crate::op::Request;
    match message {
        ToWorker::Call(request) => matches!(
            request,
            Request::ReadText { .. }
                | Request::ReadBytes { .. }
                | Request::ListDir { .. }
                | Request::Check { .. }
        ),
        ToWorker::OpenStream { .. } => true,
        _ => false,
    }
}

/// What an approved call's process confines itself by: its kind, its source path (whose final
/// link it follows or not), whether it removes a tree, its worker's pid, and whether Landlock is
/// required.
#[derive(Debug, Clone, Copy)]
struct Shape<'a> {
    kind: crate::escalation::authority::Kind,
    source: &'a str,
    follows: bool,
    tree: bool,
    worker: u32,
    required: bool,
}

/// What an approved call's walks are held to: the objects its approver was shown, the names
/// its approval lists, the directories earlier calls of it made, and whom it is made for.
struct Approved {
    bindings: crate::op::Bindings,
    named: crate::escalation::Named,
    vouched: Vec<crate::op::Made>,
    for_whom: Option<crate::backend::ForWhom>,
}

/// One call's exchange with the network process, served by `backend` at `mode`.
struct Call<'a> {
    backend: &'a Backend,
    mode: Mode,
    socket: &'a UnixStream,
    /// A danger-full-access worker's: the filter its approved calls' processes load.
    filter: Option<&'a sys::confine::ApprovedCallFilter>,
    /// An approved call's (signed trust): this worker's check and the approval, with which it
    /// vouches for the directories the call made.
    vouching: Option<(&'a crate::escalation::WorkerCheck, &'a crate::op::SignedApproval)>,
}

impl Call<'_> {
    /// Serves `message` and sends its reply (after the temporary files it stranded).
    /// `approved`: for an approved call in its own confined process, the capabilities it holds.
    fn serve(
        &self,
        message: ToWorker,
        fd: Option<std::os::fd::OwnedFd>,
        approved: Option<rustix::thread::CapabilitySet>,
    ) -> Result<(), IpcError> {
        let (backend, mode, socket) = (self.backend, self.mode, self.socket);
        #[cfg(not(feature = "fault-injection"))]
        let _ = approved;
        match message {
            ToWorker::Call(crate::op::Request::WriteBytes { path, mode: file_mode, guard }) => {
                let reply = match fd {
                    Some(body) => {
                        let mut progress = |bytes| {
                            let _ = ipc_messages::send(socket, &FromWorker::Progress { bytes }, None);
                        };
                        backend.write_bytes(mode, &path, file_mode, guard, body.into(), &mut progress)
                    }
                    None => Err(crate::error::Failure::new(FsError::Truncated, path)),
                };
                hand_on_stranded(socket)?;
                ipc_messages::send(
                    socket,
                    &FromWorker::Reply(reply.map_err(crate::error::Failure::into_wire)),
                    None,
                )?;
            }
            ToWorker::Call(request) => {
                #[cfg(feature = "fault-injection")]
                if let Some(failure) = fault(&request, approved) {
                    ipc_messages::send(socket, &FromWorker::Reply(Err(failure)), None)?;
                    return Ok(());
                }
                let reply = backend.handle(mode, request).map_err(crate::error::Failure::into_wire);
                // The directories an approved call made, vouched for: its approval's next call
                // may stand in them (two new files in one new directory).
                let made = backend.take_made().filter(|_| reply.is_ok());
                let reply = match (reply, made, self.vouching) {
                    (Ok(outcome), Some((below, dirs)), Some((check, approval))) => {
                        Ok(crate::op::Outcome::Vouched {
                            outcome: Box::new(outcome),
                            made: check.vouch(approval, below, dirs),
                        })
                    }
                    (reply, ..) => reply,
                };
                hand_on_stranded(socket)?;
                ipc_messages::send(socket, &FromWorker::Reply(reply), None)?;
            }
            ToWorker::OpenStream { path, .. } => match backend.open_stream(mode, &path) {
                Ok((header, file)) => {
                    ipc_messages::send(socket, &FromWorker::Stream(Ok(header)), Some(file.as_fd()))?
                }
                Err(failure) => {
                    ipc_messages::send(socket, &FromWorker::Stream(Err(failure.into_wire())), None)?
                }
            },
            // A grant with no request pending: the router lost track; nothing to do.
            ToWorker::LockGranted => {}
            #[cfg(feature = "fault-injection")]
            ToWorker::RawOpen { path, write } => {
                let result = std::fs::OpenOptions::new()
                    .read(!write)
                    .write(write)
                    .create(write)
                    .truncate(false)
                    .open(&path)
                    .map(drop)
                    .map_err(|e| e.to_string());
                ipc_messages::send(socket, &FromWorker::RawOpened(result), None)?;
            }
            #[cfg(feature = "fault-injection")]
            ToWorker::RawMetadata { path } => {
                use std::os::unix::fs::PermissionsExt;
                let chmod = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
                let chown = std::os::unix::fs::chown(&path, Some(0), Some(0));
                let result = match (chmod, chown) {
                    (Err(a), Err(b)) => Err(format!("chmod: {a}; chown: {b}")),
                    (Ok(()), _) => Err("chmod by path succeeded".to_owned()),
                    (_, Ok(())) => Err("chown by path succeeded".to_owned()),
                };
                ipc_messages::send(socket, &FromWorker::RawOpened(result), None)?;
            }
        }
        Ok(())
    }

    /// Serves an approved call in a process of its own (`sys::call`), which confines itself to
    /// the approved objects (`role_confinement::approved_call`), replies itself and exits; this worker
    /// waits for it and keeps its own authority for the next call. A process that ended without
    /// replying is replied for.
    fn in_own_process(
        &self,
        config: &Config,
        message: ToWorker,
        approved: Approved,
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<(), IpcError> {
        let Approved { bindings, named, vouched, for_whom } = approved;
        let path = path_of(&message);
        let worker = std::process::id();
        let shape = Shape {
            kind: match &message {
                ToWorker::Call(request) => crate::escalation::authority::Kind::of(request),
                _ => crate::escalation::authority::Kind::Read,
            },
            source: &path,
            follows: match &message {
                ToWorker::Call(request) => request.op().follows_link(),
                _ => true,
            },
            tree: matches!(message, ToWorker::Call(crate::op::Request::Remove { recursive: true, .. })),
            worker,
            required: config.landlock == crate::config::LandlockPolicy::Required,
        };
        // Held in the forked process (a copy of this one); cleared here once it ended.
        let _bound = self.backend.bind_named(bindings.clone(), named, vouched, for_whom);
        let changes = shape.kind == crate::escalation::authority::Kind::Change;
        self.forked(message, fd, changes, || self.confined(&shape, &bindings))
    }

    /// Serves a read no approval binds (a danger-full-access worker's, under signed trust: the
    /// checks and previews made before anyone is asked) in a process of its own with a
    /// read-only worker's authority (`role_confinement::reader`): the worker identity, no capability,
    /// reading beneath the roots only. What it returns, the network process could have read
    /// through a read-only worker anyway.
    fn as_reader(
        &self,
        config: &Config,
        identity: crate::config::WorkerIdentity,
        message: ToWorker,
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<(), IpcError> {
        let required = config.landlock == crate::config::LandlockPolicy::Required;
        let worker = std::process::id();
        self.forked(message, fd, false, || {
            let roots = self.backend.root_descriptors().map_err(FsError::Metadata)?;
            let rules: Vec<_> = roots.into_iter().map(|fd| (fd, sys::confine::Grant::Read)).collect();
            let Some(filter) = self.filter else { return Err(FsError::Aborted) };
            crate::role_confinement::reader(&rules, identity, worker, required, filter)
                .map(|(_, held)| held)
                .map_err(|e| {
                    tracing::warn!(%e, "a preview's process cannot confine itself");
                    FsError::Aborted
                })
        })
    }

    /// Serves `message` in a process forked for it, confined by `confine` first (a refusal is
    /// its reply); this worker waits for it and replies for a process that ended without
    /// replying. `changes`: the call may change files, which this worker records for it from
    /// the carrier it hands the process (`backend::record`: the process cannot reach the record).
    fn forked(
        &self,
        message: ToWorker,
        fd: Option<std::os::fd::OwnedFd>,
        changes: bool,
        confine: impl FnOnce() -> Result<rustix::thread::CapabilitySet, FsError>,
    ) -> Result<(), IpcError> {
        let path = path_of(&message);
        let stream = matches!(message, ToWorker::OpenStream { .. });
        let failed = |error: FsError| {
            let wire = crate::error::Failure::new(error, path.clone()).into_wire();
            let reply = if stream { FromWorker::Stream(Err(wire)) } else { FromWorker::Reply(Err(wire)) };
            ipc_messages::send(self.socket, &reply, None)
        };
        let carrier = if changes { self.backend.record_carrier() } else { None };
        // Without the handshake the change is still recorded, only maybe after the reply.
        let handshake = carrier.as_ref().and_then(|_| {
            #[cfg(feature = "fault-injection")]
            if std::env::var_os("FSD_FAULT_NO_HANDSHAKE").is_some() {
                return None;
            }
            sys::call::handshake()
                .inspect_err(
                    |errno| tracing::warn!(%errno, "an approved call's change may be listed after its reply"),
                )
                .ok()
        });
        let (process_side, worker_side) = handshake.map_or((None, None), |(p, w)| (Some(p), Some(w)));
        match sys::call::fork() {
            Ok(sys::call::Forked::Child) => {
                drop(worker_side);
                // Its Landlock domain holds the approved objects (or the roots, read) only,
                // not the change record: its change goes to this worker in the carrier.
                self.backend.forget_record(carrier.map(|(write, _)| (write, process_side)));
                let served = match confine() {
                    Ok(held) => self.serve(message, fd, Some(held)),
                    Err(failure) => failed(failure),
                };
                sys::call::exit_now(if served.is_ok() { 0 } else { 1 })
            }
            Ok(sys::call::Forked::Parent(pid)) => {
                drop(fd);
                drop(process_side);
                // Recorded before the process may reply: a listing made on its answer has it.
                // Without the handshake, once the process has ended (its carrier is complete).
                let ended = match &worker_side {
                    Some(worker_side) => {
                        worker_side.wait_carried();
                        None
                    }
                    None => Some(sys::call::wait(pid)),
                };
                if let Some((_, carried)) = &carrier {
                    #[cfg(feature = "fault-injection")]
                    slow_record(&path);
                    self.backend.record_carried(carried);
                }
                if let Some(worker_side) = worker_side {
                    worker_side.recorded();
                }
                match ended.unwrap_or_else(|| sys::call::wait(pid)) {
                    Ok(sys::call::Ended::Exited(0)) => Ok(()),
                    ended => {
                        tracing::warn!(?ended, %path, "an approved call's process ended without its reply");
                        failed(FsError::Aborted)
                    }
                }
            }
            Err(errno) => {
                tracing::warn!(%errno, %path, "cannot start an approved call's process");
                failed(FsError::Aborted)
            }
        }
    }

    /// Confines this (the approved call's) process: the approved objects opened by the call's
    /// own bound walk, then `role_confinement::approved_call`. An object that is not the approved one is
    /// `not_approved_object`; a confinement that fails refuses the call.
    fn confined(
        &self,
        shape: &Shape<'_>,
        bindings: &crate::op::Bindings,
    ) -> Result<rustix::thread::CapabilitySet, FsError> {
        use crate::escalation::authority::{self, Kind, Owned};
        let Shape { kind, source, follows, tree, worker, required } = *shape;
        let mut rules = Vec::new();
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        for (path, binding) in bindings {
            let (scope, grant) = kind.grant(binding);
            let follow = if path == source { follows } else { true };
            let fd =
                self.backend.approved_object(self.mode, path, binding, follow, scope).map_err(|f| f.error)?;
            let meta = sys::meta(fd.as_fd()).map_err(FsError::Metadata)?;
            dirs.push(Owned { uid: meta.uid, gid: meta.gid, mode: meta.mode & 0o7777 });
            if let crate::op::Last::Is(_, shown) = binding.last {
                files.push(Owned { uid: shown.uid, gid: shown.gid, mode: shown.mode & 0o7777 });
            }
            rules.push((fd, grant));
        }
        // A change's temporary files are journaled as its worker's are (where its user may
        // write there); a look, read or listing makes none and gets no right there.
        if kind == Kind::Change {
            rules.extend(
                self.backend.journal_dirs().into_iter().map(|fd| (fd, crate::sys::confine::Grant::Write)),
            );
        }
        // A change runs as the one user who owns all it changes, where the daemon may become
        // that user; a tree's removal may meet anyone's files below it, so it keeps root.
        let owner = (kind == Kind::Change && !tree && sys::effective_ids().0 == 0)
            .then(|| authority::owner(&dirs, &files))
            .flatten();
        let Some(filter) = self.filter else { return Err(FsError::Aborted) };
        match crate::role_confinement::approved_call(&rules, kind, owner, worker, required, filter) {
            Ok((_, held)) => Ok(held),
            Err(e) => {
                tracing::warn!(%e, "an approved call's process cannot confine itself");
                Err(FsError::Aborted)
            }
        }
    }
}

/// The refusal of a call this worker may make only with its approver's signature and was
/// handed without a valid one (`escalation::WorkerCheck`); else the names a bound read's walks
/// are held to.
fn unsigned(
    approvals: Option<&crate::escalation::WorkerCheck>,
    request: &crate::op::Request,
    bindings: &crate::op::Bindings,
    approval: Option<&crate::op::SignedApproval>,
) -> Result<crate::escalation::Named, fsd_proto::WireError> {
    let Some(approvals) = approvals else { return Ok(Vec::new()) };
    approvals.check(request, bindings, approval).map_err(|why| {
        tracing::warn!(path = request.path(), %why, "an escalated call without a valid approval is refused");
        let denied = FsError::Denied(crate::error::Denial::Unsigned);
        crate::error::Failure::new(denied, request.path().to_owned()).into_wire()
    })
}

/// The path a message names, for its failures.
fn path_of(message: &ToWorker) -> String {
    match message {
        ToWorker::Call(request) => request.path().to_owned(),
        ToWorker::OpenStream { path, .. } => path.clone(),
        _ => String::new(),
    }
}

/// Hands the temporary files the call could not remove to the network process, which passes
/// them on to the supervisor, before the call's reply.
fn hand_on_stranded(socket: &UnixStream) -> Result<(), IpcError> {
    for (stranded, dir) in crate::backend::stranded::take() {
        ipc_messages::send(socket, &FromWorker::Stranded(stranded), Some(dir.as_fd()))?;
    }
    Ok(())
}

/// Test hooks on the final path component (asked by a worker and by a direct read thread alike):
/// `fsd-fault-hang` makes a stat or read never return, as a worker stuck on a dead NFS server
/// would; `fsd-fault-hold` makes one wait until a file `fsd-fault-release` appears beside it,
/// as a filesystem that recovers would; `fsd-fault-slow` makes one take half a
/// second, then go on; `fsd-fault-hang-write` does the same as `fsd-fault-hang` for a write;
/// `fsd-fault-io-error` fails a write with EIO before touching the disk; an approved read or
/// write of `fsd-fault-reach` tries, from inside the call, what its authority must refuse
/// ([`reach`]) and fails with the report.
#[cfg(feature = "fault-injection")]
pub(crate) fn fault(
    request: &crate::op::Request,
    approved: Option<rustix::thread::CapabilitySet>,
) -> Option<fsd_proto::WireError> {
    use crate::op::Request;
    let hang = || loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    };
    match request {
        Request::Stat { path, .. } | Request::ReadText { path, .. } if path.ends_with("/fsd-fault-hang") => {
            hang()
        }
        Request::Stat { path, .. } | Request::ReadText { path, .. } if path.ends_with("/fsd-fault-hold") => {
            let release = std::path::Path::new(path).with_file_name("fsd-fault-release");
            while !release.exists() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            None
        }
        Request::Stat { path, .. } | Request::ReadText { path, .. } if path.ends_with("/fsd-fault-slow") => {
            std::thread::sleep(std::time::Duration::from_millis(500));
            None
        }
        Request::ReadText { path, .. } | Request::WriteText { path, .. }
            if let Some(held) = approved
                && path.ends_with("/fsd-fault-reach") =>
        {
            Some(fsd_proto::WireError::new(fsd_proto::ErrorCode::IoError, path.clone(), reach(path, held)))
        }
        Request::WriteText { path, .. } if path.ends_with("/fsd-fault-hang-write") => hang(),
        Request::WriteText { path, .. } if path.ends_with("/fsd-fault-io-error") => {
            let error = crate::error::FsError::Rename(crate::sys::Errno::IO);
            Some(crate::error::Failure::new(error, path.clone()).into_wire())
        }
        _ => None,
    }
}

/// Test hook: the worker of an approved change of `fsd-fault-slow-record` waits half a second
/// before it records the change, so a test can see whether the call's reply waited for it.
/// (`FSD_FAULT_NO_HANDSHAKE` in the daemon's environment makes every handshake fail to start,
/// as `pipe2` past the descriptor limit would.)
#[cfg(feature = "fault-injection")]
fn slow_record(path: &str) {
    if path.ends_with("/fsd-fault-slow-record") {
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// What an approved call of `path` could do beyond its object: read or open for writing the
/// file `fsd-fault-sibling` beside it, read the file `FSD_FAULT_REACH_ELSEWHERE` names (in
/// another directory) and create `fsd-fault-created` beside that; and the capabilities it holds
/// (`held`). Plain `open(2)` by path, as code gone wrong inside the call would.
#[cfg(feature = "fault-injection")]
fn reach(path: &str, held: rustix::thread::CapabilitySet) -> String {
    let outcome = |result: std::io::Result<()>| match result {
        Ok(()) => "done".to_owned(),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => "denied".to_owned(),
        Err(e) => e.to_string(),
    };
    let dir = std::path::Path::new(path).parent().unwrap_or(std::path::Path::new("/"));
    let sibling = dir.join("fsd-fault-sibling");
    let elsewhere =
        std::path::PathBuf::from(std::env::var_os("FSD_FAULT_REACH_ELSEWHERE").unwrap_or_default());
    let created = elsewhere.parent().unwrap_or(std::path::Path::new("/")).join("fsd-fault-created");
    let mut names: Vec<&str> = held.iter_names().map(|(name, _)| name).collect();
    names.sort_unstable();
    let caps = names.join(",");
    let attempts = [
        ("sibling-read", outcome(std::fs::read(&sibling).map(drop))),
        ("sibling-write", outcome(std::fs::OpenOptions::new().write(true).open(&sibling).map(drop))),
        ("other-dir-read", outcome(std::fs::read(&elsewhere).map(drop))),
        (
            "other-dir-create",
            outcome(std::fs::OpenOptions::new().write(true).create_new(true).open(&created).map(drop)),
        ),
        ("caps", caps),
        ("uid", sys::effective_ids().0.to_string()),
    ];
    let report: Vec<String> = attempts.iter().map(|(what, got)| format!("{what}={got}")).collect();
    format!("reach: {}", report.join(" "))
}
