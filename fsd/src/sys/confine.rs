//! Confinement primitives: user and group ids, capabilities, no_new_privs, Landlock rulesets and
//! the seccomp allowlist. The order they run in is decided by `crate::role_confinement`, one linear
//! function per process role; this file only knows how to do each step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::thread::{CapabilitySet, CapabilitySets};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Why a confinement step failed; a process that cannot confine itself does not serve.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot change group ids: {0}")]
    Groups(#[source] rustix::io::Errno),
    #[error("cannot change user id: {0}")]
    User(#[source] rustix::io::Errno),
    #[error("cannot set capabilities: {0}")]
    Capabilities(#[source] rustix::io::Errno),
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(#[source] rustix::io::Errno),
    #[error("cannot make the process undumpable: {0}")]
    Undumpable(#[source] rustix::io::Errno),
    #[error("landlock: {0}")]
    Landlock(String),
    #[error("landlock ruleset not enforced: the kernel lacks ABI {0} or Landlock is disabled")]
    LandlockNotEnforced(u32),
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("the thread that checks the worker identity's access failed")]
    AccessCheck,
    #[error("cannot tie the approved call's process to its worker: {0}")]
    ParentDeath(#[source] rustix::io::Errno),
    #[error("cannot start the approver's connector thread: {0}")]
    Connector(#[source] std::io::Error),
    #[error("the approver's connector thread ended before it was confined")]
    ConnectorLost,
}

/// What a worker needs of a root's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootUse {
    /// Search it (every call beneath it).
    Enter,
    /// Also create and remove names in it (a write's temporary file).
    Create,
}

/// Asks the kernel whether a worker of `uid:gid` (its groups and no capability, as
/// [`switch_ids`] and the confinement leave it) may use each directory as said: `faccessat`
/// with `AT_EACCESS`, so ACLs, read-only mounts and the worker's own ids all count. Asked on a
/// thread of its own that takes that identity and then ends: in the kernel a thread's ids and
/// capabilities are its own (rustix makes the raw calls, not libc's process-wide ones), so the
/// rest of the process keeps its own.
pub fn worker_may(
    uid: u32,
    gid: u32,
    dirs: Vec<(PathBuf, RootUse)>,
) -> Result<Vec<Result<(), rustix::io::Errno>>, ConfineError> {
    let check = move || -> Result<Vec<Result<(), rustix::io::Errno>>, ConfineError> {
        switch_ids(uid, gid, false)?;
        let current = rustix::thread::capabilities(None).map_err(ConfineError::Capabilities)?;
        let none = CapabilitySets { effective: CapabilitySet::empty(), ..current };
        rustix::thread::set_capabilities(None, none).map_err(ConfineError::Capabilities)?;
        Ok(dirs
            .iter()
            .map(|(dir, want)| {
                let access = match want {
                    RootUse::Enter => rustix::fs::Access::EXEC_OK,
                    RootUse::Create => rustix::fs::Access::EXEC_OK | rustix::fs::Access::WRITE_OK,
                };
                rustix::fs::accessat(rustix::fs::CWD, dir, access, rustix::fs::AtFlags::EACCESS)
            })
            .collect())
    };
    std::thread::Builder::new()
        .name("fsd-worker-access".into())
        .spawn(check)
        .map_err(|_| ConfineError::AccessCheck)?
        .join()
        .map_err(|_| ConfineError::AccessCheck)?
}

/// Drops supplementary groups and switches real, effective and saved ids. Keeps capabilities
/// across a switch away from root only if `keep_caps`, so the next step can choose them.
pub fn switch_ids(uid: u32, gid: u32, keep_caps: bool) -> Result<(), ConfineError> {
    let (euid, egid) = super::effective_ids();
    if (euid, egid) == (uid, gid) {
        return Ok(());
    }
    if keep_caps {
        rustix::thread::set_keep_capabilities(true).map_err(ConfineError::Capabilities)?;
    }
    rustix::thread::set_thread_groups(&[]).map_err(ConfineError::Groups)?;
    let gid = rustix::fs::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(ConfineError::Groups)?;
    let uid = rustix::fs::Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(ConfineError::User)?;
    undumpable()
}

/// Takes `uid` and `gid` as this thread's effective ids (so its filesystem ids: every permission
/// check is theirs) and `uid`'s groups (none), keeping the real and saved uid. The kernel lets a
/// process signal another only when the sender's real or effective uid is the target's real or
/// saved one: a process running as `uid` (an agent the workers share a uid with) cannot signal
/// this thread, nor read its /proc files. Unlike [`switch_ids`] the way back (a `setresuid` to
/// the real uid) stays open to the thread itself: its seccomp list must not allow the id calls
/// (the network and direct read lists do not), and the capability sets must be emptied after,
/// since a real uid of 0 keeps the permitted set through the switch.
pub fn act_as(uid: u32, gid: u32) -> Result<(), ConfineError> {
    let (euid, egid) = super::effective_ids();
    if (euid, egid) == (uid, gid) {
        return Ok(());
    }
    rustix::thread::set_thread_groups(&[]).map_err(ConfineError::Groups)?;
    let gid = rustix::fs::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(ConfineError::Groups)?;
    let real = rustix::process::getuid();
    rustix::thread::set_thread_res_uid(real, rustix::fs::Uid::from_raw(uid), real)
        .map_err(ConfineError::User)?;
    undumpable()
}

/// Puts the process out of its own uid's reach: no ptrace attach, no reading its memory or
/// environment through /proc, no core dump. Every fsd process holds what that uid must not have
/// (the digest, vouch and audit keys, descriptors of the roots, a wider mode's rights), and
/// that uid is often the agent's: the workers take the workspace owner's, an unprivileged daemon
/// shares its user's. The kernel sets this flag back to `fs.suid_dumpable` whenever a thread's
/// effective ids change, and that setting may be 1: so each id change here asserts it again,
/// and `main` asserts it first, for a process that changes none.
pub fn undumpable() -> Result<(), ConfineError> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(ConfineError::Undumpable)
}

/// Whether `switch_ids(uid, gid, ..)` can succeed in this process: nothing to switch, or the
/// capabilities the kernel asks for (CAP_SETUID for another uid, CAP_SETGID for another gid or
/// to drop supplementary groups). Asked before any worker starts, so a worker identity the daemon
/// cannot take is a start-up error, not a crash loop.
pub fn can_switch_ids(uid: u32, gid: u32) -> bool {
    let (euid, egid) = super::effective_ids();
    if (euid, egid) == (uid, gid) {
        return true;
    }
    let Ok(current) = rustix::thread::capabilities(None) else { return false };
    let needs_uid = uid != euid;
    (!needs_uid || current.effective.contains(CapabilitySet::SETUID))
        && current.effective.contains(CapabilitySet::SETGID)
}

/// The capabilities a confined root worker keeps: enough to keep owners and modes of files it
/// replaces, nothing that changes the system.
pub fn worker_capabilities() -> CapabilitySet {
    CapabilitySet::CHOWN | CapabilitySet::FOWNER | CapabilitySet::DAC_OVERRIDE
}

/// Removes every capability but `keep` from the bounding set, so no exec can regain them.
/// Without CAP_SETPCAP (an unprivileged daemon) there is nothing to regain: the kernel refuses
/// and the step is moot.
pub fn drop_bounding_set(keep: CapabilitySet) -> Result<(), ConfineError> {
    let current = rustix::thread::capabilities(None).map_err(ConfineError::Capabilities)?;
    if !current.effective.contains(CapabilitySet::SETPCAP) {
        return Ok(());
    }
    for bit in CapabilitySet::all().iter() {
        if !keep.contains(bit) {
            match rustix::thread::remove_capability_from_bounding_set(bit) {
                // A capability this kernel does not know is already absent.
                Ok(()) | Err(rustix::io::Errno::INVAL) => {}
                Err(e) => return Err(ConfineError::Capabilities(e)),
            }
        }
    }
    Ok(())
}

/// Keeps exactly `keep` (of what is still permitted) in the effective and permitted sets, none
/// inheritable.
pub fn set_capabilities(keep: CapabilitySet) -> Result<(), ConfineError> {
    let current = rustix::thread::capabilities(None).map_err(ConfineError::Capabilities)?;
    let keep = keep & current.permitted;
    let sets = CapabilitySets { effective: keep, permitted: keep, inheritable: CapabilitySet::empty() };
    rustix::thread::set_capabilities(None, sets).map_err(ConfineError::Capabilities)
}

/// The capabilities this thread holds in effect now.
pub fn effective_capabilities() -> Result<CapabilitySet, ConfineError> {
    Ok(rustix::thread::capabilities(None).map_err(ConfineError::Capabilities)?.effective)
}

pub fn no_new_privs() -> Result<(), ConfineError> {
    rustix::thread::set_no_new_privs(true).map_err(ConfineError::NoNewPrivs)
}

/// Landlock rights a grant gives beneath a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Read,
    /// Read one file (a rule on the file itself: nothing beside it).
    ReadFile,
    /// Read, write, truncate, make regular files and directories, remove them, and refer
    /// (rename across directories). Never symlinks, devices, FIFOs, sockets or execute.
    Write,
}

fn rights(grant: Grant) -> BitFlags<AccessFs> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match grant {
        Grant::Read => read,
        Grant::ReadFile => AccessFs::ReadFile.into(),
        Grant::Write => {
            read | AccessFs::WriteFile
                | AccessFs::Truncate
                | AccessFs::MakeReg
                | AccessFs::MakeDir
                | AccessFs::RemoveFile
                | AccessFs::RemoveDir
                | AccessFs::Refer
        }
    }
}

/// The ABI below which a fence is not a fence: ABI 3 adds TRUNCATE (before it, `O_TRUNC` on a
/// read-only path is unrestricted) and ABI 2 adds REFER.
pub const LANDLOCK_FLOOR: u32 = 3;

/// How a Landlock ruleset ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    Partial,
    None,
}

/// A ruleset that handles every filesystem right the running ABI knows (the floor rights a hard
/// requirement when `required`; newer rights and scopes best effort), with no rule yet.
fn ruleset(required: bool) -> Result<landlock::RulesetCreated, ConfineError> {
    let err = |e: &dyn std::fmt::Display| ConfineError::Landlock(e.to_string());
    let floor = if required { CompatLevel::HardRequirement } else { CompatLevel::BestEffort };
    Ruleset::default()
        .set_compatibility(floor)
        .handle_access(AccessFs::from_all(ABI::V3))
        .map_err(|e| err(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V6))
        .map_err(|e| err(&e))?
        .scope(Scope::from_all(ABI::V6))
        .map_err(|e| err(&e))?
        .create()
        .map_err(|e| err(&e))
}

/// Restricts this (single-threaded) process to `grants`: every filesystem right the running
/// ABI knows is handled, so anything not granted is denied. The floor rights are a hard
/// requirement when `required`; newer rights and scopes are best effort.
pub fn landlock(grants: &[(PathBuf, Grant)], required: bool) -> Result<Enforcement, ConfineError> {
    let err = |e: &dyn std::fmt::Display| ConfineError::Landlock(e.to_string());
    let mut created = ruleset(required)?;
    for (path, grant) in grants {
        let fd = PathFd::new(path).map_err(|e| err(&e))?;
        created = created.add_rule(PathBeneath::new(fd, rights(*grant))).map_err(|e| err(&e))?;
    }
    enforced(created.restrict_self().map_err(|e| err(&e))?, required)
}

/// Restricts this process further (a Landlock domain nests in the one it has) to `rules`: each
/// an object already open (`O_PATH`) and the rights kept on it and, for a directory, below it.
/// Every right the ABI knows is handled; the process is refused everything else.
pub fn landlock_objects(
    rules: &[(std::os::fd::OwnedFd, Grant)],
    required: bool,
) -> Result<Enforcement, ConfineError> {
    let err = |e: &dyn std::fmt::Display| ConfineError::Landlock(e.to_string());
    let mut created = ruleset(required)?;
    for (fd, grant) in rules {
        created = created.add_rule(PathBeneath::new(fd, rights(*grant))).map_err(|e| err(&e))?;
    }
    enforced(created.restrict_self().map_err(|e| err(&e))?, required)
}

/// How a restriction ended up; not enforced at all is an error where it is required.
fn enforced(status: landlock::RestrictionStatus, required: bool) -> Result<Enforcement, ConfineError> {
    let enforcement = match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    };
    if required && enforcement == Enforcement::None {
        return Err(ConfineError::LandlockNotEnforced(LANDLOCK_FLOOR));
    }
    Ok(enforcement)
}

/// One system call an allowlist lets through, and why the role makes it.
#[derive(Debug, Clone, Copy)]
pub struct Allowed {
    pub nr: i64,
    /// The `libc` constant's name (`SYS_read`).
    pub name: &'static str,
    pub why: &'static str,
}

/// A call allowed only when argument `arg` (its low 32 bits) is one of `values`.
#[derive(Debug, Clone, Copy)]
pub struct AllowedIf {
    pub nr: i64,
    pub name: &'static str,
    pub arg: u8,
    pub values: &'static [Value],
    pub why: &'static str,
}

/// A value an argument must have.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Is(u64),
    /// The confined process's own pid, known only when its filter is built.
    OwnPid,
}

macro_rules! allowed {
    ($($name:ident: $why:literal,)*) => {
        &[$(Allowed { nr: libc::$name, name: stringify!($name), why: $why },)*]
    };
}

/// Calls both confined roles make: their sockets' frames, memory, threads' waits, signals' plumbing,
/// time and exit.
const BASE: &[Allowed] = allowed! {
    SYS_read: "socket frames (IPC, HTTP/2), files read through a descriptor",
    SYS_write: "socket frames, files written through a descriptor, log lines on stderr",
    SYS_readv: "vectored socket and file reads (std, tokio)",
    SYS_writev: "vectored socket and file writes (std, tokio, the log)",
    SYS_pread64: "reading a file at an offset: the content digest's pread, a stream's chunks",
    SYS_lseek: "a file descriptor's position (std's read_to_end and seek)",
    SYS_close: "closing descriptors",
    SYS_fstat: "a descriptor's metadata (std's metadata of an open file)",
    SYS_fsync: "durability of a written file (worker) or of the audit log (network)",
    SYS_fdatasync: "durability of data without metadata (std's sync_data)",
    SYS_fcntl: "descriptor flags: CLOEXEC, non-blocking sockets, F_DUPFD_CLOEXEC; the change record's open-file-description lock (F_OFD_SETLKW)",
    SYS_dup: "duplicating a descriptor (std's try_clone)",
    SYS_sendto: "socket writes without a message header (std's send)",
    SYS_recvfrom: "socket reads without a message header (std's recv)",
    SYS_sendmsg: "IPC frames with SCM_RIGHTS (descriptors passed between processes)",
    SYS_recvmsg: "IPC frames with SCM_RIGHTS",
    SYS_poll: "waiting on a descriptor with a deadline (std's blocking reads with a timeout)",
    SYS_ppoll: "poll with a signal mask (glibc's poll on some architectures)",
    SYS_mmap: "the allocator's memory",
    SYS_munmap: "the allocator's memory",
    SYS_mremap: "the allocator growing a mapping",
    SYS_mprotect: "the allocator and thread stacks' guard pages",
    SYS_brk: "the allocator's heap",
    SYS_madvise: "the allocator returning memory",
    SYS_futex: "locks and condition variables",
    SYS_sched_yield: "spin loops of locks and channels",
    SYS_rt_sigprocmask: "signal masks around thread starts and waits",
    SYS_rt_sigaction: "signal dispositions (SIGPIPE, SIGXFSZ ignored)",
    SYS_rt_sigreturn: "returning from a signal handler",
    SYS_sigaltstack: "std's stack overflow handler, per thread",
    SYS_getrandom: "hash map seeds, temporary file names, nonces",
    SYS_clock_gettime: "deadlines and timestamps (vDSO fallback)",
    SYS_clock_nanosleep: "sleeps (std's thread::sleep)",
    SYS_nanosleep: "sleeps (older glibc)",
    SYS_getpid: "the process id, for logs and the network's own-thread signals",
    SYS_gettid: "thread ids (locks, thread names)",
    SYS_getuid: "the identity, reported in logs",
    SYS_geteuid: "the identity, reported in logs",
    SYS_getgid: "the identity, reported in logs",
    SYS_getegid: "the identity, reported in logs",
    SYS_restart_syscall: "the kernel's restart of a call a signal interrupted",
    SYS_exit: "a thread's end",
    SYS_exit_group: "the process's end",
};

/// What a worker adds: the descriptor-relative file calls of its one request at a time.
const WORKER: &[Allowed] = allowed! {
    SYS_pwrite64: "writing a file at an offset (a journal entry, a change record, a temporary file)",
    SYS_openat: "the walk: one component at a time, relative to a root's descriptor",
    SYS_openat2: "the walk with RESOLVE_BENEATH and RESOLVE_NO_MAGICLINKS",
    SYS_newfstatat: "a component's metadata relative to its directory's descriptor",
    SYS_statx: "versions (mount id, birth time, change time) of an open file",
    SYS_fchmod: "a replaced file's mode kept on its temporary file, by descriptor",
    SYS_fchown: "a replaced file's owner kept on its temporary file, by descriptor",
    SYS_ftruncate: "emptying a temporary file whose name cannot be removed (sys::empty_file)",
    SYS_fsetxattr: "a replaced file's ACL and user attributes kept on its temporary file, by descriptor only",
    SYS_fgetxattr: "a replaced file's ACL and user attributes read, by descriptor only",
    SYS_flistxattr: "a replaced file's attribute names, by descriptor only",
    SYS_renameat2: "the atomic replace (RENAME_EXCHANGE) and moves (RENAME_NOREPLACE)",
    SYS_renameat: "rename where renameat2's flags are not needed",
    SYS_unlinkat: "removals and temporary files, relative to a directory's descriptor",
    SYS_mkdirat: "the parent directories a write makes, relative to a descriptor",
    SYS_getdents64: "listDir and tree removal",
    SYS_readlinkat: "a link's target, for stat and listings",
    SYS_tgkill: "std's abort on a panic, to itself (a worker has no other process's pid)",
};

/// What a danger-full-access worker adds: the process of its own that each approved call runs
/// in, which confines itself to the approved objects before it acts
/// (`crate::role_confinement::approved_call`), then loads the plain worker's filter over this one.
const DANGER: &[Allowed] = allowed! {
    SYS_wait4: "waiting for an approved call's process to end",
    SYS_set_robust_list: "glibc's fork registering the child's robust futex list",
    SYS_landlock_create_ruleset: "an approved call's process confining itself to the approved objects",
    SYS_landlock_add_rule: "the rights an approved call keeps on each approved object",
    SYS_landlock_restrict_self: "an approved call's process entering its narrower Landlock domain",
    SYS_capget: "the capabilities an approved call's process holds, before it drops the rest",
    SYS_capset: "an approved call's process dropping every capability its kind of call does not need",
    SYS_setresuid: "an approved change's process taking the uid of the one user who owns all it changes",
    SYS_setresgid: "the same change's process taking that user's group",
    SYS_setgroups: "the same change's process dropping root's supplementary groups",
    SYS_getppid: "an approved call's process checking its worker is still its parent",
    SYS_pipe2: "the handshake with an approved call's process: its change is recorded before it replies",
};

/// What the network process adds: its listeners and clients, tokio's epoll, eventfd and threads.
/// Nothing that opens, creates, changes or runs a path.
const NETWORK: &[Allowed] = allowed! {
    SYS_dup3: "replacing a descriptor (tokio's signal pipe)",
    SYS_socket: "the approver's connection and the OTLP trace exporter's (after confinement)",
    SYS_connect: "the approver's connection and the OTLP trace exporter's (to an address resolved before confinement)",
    SYS_accept: "accepting clients on a listener",
    SYS_accept4: "accepting clients with CLOEXEC and non-blocking",
    SYS_shutdown: "closing a connection's direction (HTTP/2, TLS close_notify)",
    SYS_getsockopt: "a socket's error and peer credentials (SO_PEERCRED: who calls)",
    SYS_setsockopt: "keepalive, TCP_NODELAY, buffer sizes",
    SYS_getsockname: "a listener's bound address (port 0), logged",
    SYS_getpeername: "a client's address, for per-source handshake caps",
    SYS_sendmmsg: "batched socket writes (DNS-free hyper paths, tokio)",
    SYS_recvmmsg: "batched socket reads",
    SYS_socketpair: "internal wakeups of tokio and the worker channels",
    SYS_pipe2: "tokio's signal pipe and stream bodies handed to workers",
    SYS_epoll_create1: "tokio's event loop",
    SYS_epoll_ctl: "tokio's event loop",
    SYS_epoll_wait: "tokio's event loop",
    SYS_epoll_pwait: "tokio's event loop (glibc's epoll_wait on some architectures)",
    SYS_epoll_pwait2: "tokio's event loop with a nanosecond timeout",
    SYS_eventfd2: "tokio's waker",
    SYS_clone: "threads: tokio's workers and blocking pool, the check and reader pools (clone3 answers ENOSYS)",
    SYS_set_robust_list: "a new thread's futex list (glibc)",
    SYS_rseq: "a new thread's restartable sequences (glibc)",
    SYS_sched_getaffinity: "how many threads to start (available_parallelism)",
    SYS_clock_getres: "timer resolution (tokio's time driver)",
    SYS_getppid: "whether the supervisor is still its parent",
    SYS_uname: "the kernel release, for hello and logs",
    SYS_prlimit64: "reading its descriptor limit (no raise: it is set before confinement)",
};

/// What a direct read thread of the network process adds (`dispatch::direct`): the walk and the
/// read of one plain read at a time, descriptor-relative. Its Landlock domain grants reading
/// beneath the roots and nothing else, so the `openat` here can open nothing for writing and
/// nothing outside them; none of the calls changes a name, a mode, an owner or an attribute.
const DIRECT: &[Allowed] = allowed! {
    SYS_openat: "the walk: one component at a time, relative to a root's descriptor (Landlock: read only, beneath the roots)",
    SYS_newfstatat: "a component's metadata relative to its directory's descriptor",
    SYS_statx: "versions (mount id, birth time, change time) of an open file",
    SYS_getdents64: "listDir",
    SYS_readlinkat: "a link's target, for stat and listings",
};

/// `FS_IOC_GETVERSION`: an inode's generation, part of a version.
const FS_IOC_GETVERSION: u64 = 0x8008_7601;
/// `FIONBIO`: std's `set_nonblocking` on a socket.
const FIONBIO: u64 = 0x5421;
/// `FIONREAD`, asked of sockets by some readers.
const FIONREAD: u64 = 0x541b;
/// `AT_EMPTY_PATH`.
const AT_EMPTY_PATH: u64 = 0x1000;

/// Calls both roles make with one argument fixed: the second filter's load.
const BASE_IF: &[AllowedIf] = &[AllowedIf {
    nr: libc::SYS_prctl,
    name: "SYS_prctl",
    arg: 0,
    values: &[Value::Is(libc::PR_SET_NO_NEW_PRIVS as u64)],
    why: "loading the clone3 filter after the allowlist (no_new_privs is set already: it narrows nothing)",
}];

const WORKER_IF: &[AllowedIf] = &[AllowedIf {
    nr: libc::SYS_ioctl,
    name: "SYS_ioctl",
    arg: 1,
    values: &[Value::Is(FS_IOC_GETVERSION)],
    why: "an inode's generation for its version; the only ioctl a worker makes",
}];

/// `clone` flags of glibc's `fork`: a new process, never a thread (no `CLONE_VM`, no
/// `CLONE_THREAD`).
const FORK_FLAGS: u64 = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;

const DANGER_IF: &[AllowedIf] = &[
    AllowedIf {
        nr: libc::SYS_clone,
        name: "SYS_clone",
        arg: 0,
        values: &[Value::Is(FORK_FLAGS)],
        why: "fork: a process of its own per approved call (glibc's fork flags only: never a thread)",
    },
    AllowedIf {
        nr: libc::SYS_prctl,
        name: "SYS_prctl",
        arg: 0,
        values: &[
            Value::Is(libc::PR_SET_KEEPCAPS as u64),
            Value::Is(libc::PR_SET_PDEATHSIG as u64),
            Value::Is(libc::PR_SET_DUMPABLE as u64),
        ],
        why: "an approved change's process keeping DAC_READ_SEARCH across its switch to the owner's uid; \
              an approved call's process dying with its worker, and undumpable again after its switch \
              (which resets the flag to fs.suid_dumpable)",
    },
];

const NETWORK_IF: &[AllowedIf] = &[
    AllowedIf {
        nr: libc::SYS_ioctl,
        name: "SYS_ioctl",
        arg: 1,
        values: &[Value::Is(FIONBIO), Value::Is(FIONREAD)],
        why: "non-blocking sockets (std's set_nonblocking) and bytes ready to read",
    },
    AllowedIf {
        nr: libc::SYS_prctl,
        name: "SYS_prctl",
        arg: 0,
        values: &[Value::Is(libc::PR_SET_NAME as u64), Value::Is(libc::PR_GET_NAME as u64)],
        why: "naming tokio's `fsd-net` threads, reading a name",
    },
    AllowedIf {
        nr: libc::SYS_newfstatat,
        name: "SYS_newfstatat",
        arg: 3,
        values: &[Value::Is(AT_EMPTY_PATH)],
        // A caller that passes a path with the flag still resolves the path (seccomp cannot
        // read strings): a stat leaks metadata, never content, and Landlock refuses every open.
        why: "glibc's fstat is newfstatat(fd, \"\", AT_EMPTY_PATH) (tokio's pipe check, std's metadata fallback)",
    },
    AllowedIf {
        nr: libc::SYS_tgkill,
        name: "SYS_tgkill",
        arg: 0,
        values: &[Value::OwnPid],
        why: "signals to its own threads only: never the supervisor or the workers, which may share its uid",
    },
];

const DIRECT_IF: &[AllowedIf] = &[
    AllowedIf {
        nr: libc::SYS_ioctl,
        name: "SYS_ioctl",
        arg: 1,
        values: &[Value::Is(FS_IOC_GETVERSION)],
        why: "an inode's generation for its version; the only ioctl a direct read makes",
    },
    AllowedIf {
        nr: libc::SYS_tgkill,
        name: "SYS_tgkill",
        arg: 0,
        values: &[Value::OwnPid],
        why: "std's abort on a panic, to its own process only",
    },
];

/// The confinements an allowlist belongs to: two processes, and the direct read threads of the
/// network process, which load theirs on each thread before the rest of it confines itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filtered {
    Worker,
    /// A danger-full-access worker: a worker that forks a process per approved call.
    DangerWorker,
    Network,
    Direct,
    /// The network process while the direct read path serves: its own calls and a direct read's,
    /// so a read runs on the runtime thread that received the call (`dispatch::inline`).
    NetworkReader,
}

impl Filtered {
    /// The calls it makes with any arguments: the base and its own.
    pub fn allowed(self) -> impl Iterator<Item = &'static Allowed> {
        let (own, more): (_, &[Allowed]) = match self {
            Filtered::Worker => (WORKER, &[]),
            Filtered::DangerWorker => (WORKER, DANGER),
            Filtered::Network => (NETWORK, &[]),
            Filtered::Direct => (DIRECT, &[]),
            Filtered::NetworkReader => (NETWORK, DIRECT),
        };
        BASE.iter().chain(own).chain(more)
    }

    /// The calls it makes with one argument fixed.
    pub fn allowed_if(self) -> impl Iterator<Item = &'static AllowedIf> {
        let (own, more): (_, &[AllowedIf]) = match self {
            Filtered::Worker => (WORKER_IF, &[]),
            Filtered::DangerWorker => (WORKER_IF, DANGER_IF),
            Filtered::Network => (NETWORK_IF, &[]),
            Filtered::Direct => (DIRECT_IF, &[]),
            Filtered::NetworkReader => (NETWORK_IF, DIRECT_IF),
        };
        // A call one list allows with any arguments is not narrowed by another's condition (the
        // network's fstat-only `newfstatat` under the direct read's walk).
        let free: Vec<i64> = self.allowed().map(|a| a.nr).collect();
        BASE_IF.iter().chain(own).chain(more).filter(move |a| !free.contains(&a.nr))
    }

    /// Its filters, in load order: the allowlist (everything else fails with EPERM), then one
    /// that answers clone3 with ENOSYS, so a library that starts a thread falls back to clone
    /// instead of failing outright. `own_pid` is the confined process's.
    pub fn programs(self, own_pid: u32) -> Result<[seccompiler::BpfProgram; 2], ConfineError> {
        let err = seccomp_err;
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = self.allowed().map(|a| (a.nr, vec![])).collect();
        // The second filter's load: seccomp(2) can only narrow what the process may do.
        rules.insert(libc::SYS_seccomp, vec![]);
        for allowed in self.allowed_if() {
            for value in allowed.values {
                let value = match value {
                    Value::Is(v) => *v,
                    Value::OwnPid => u64::from(own_pid),
                };
                let arg =
                    SeccompCondition::new(allowed.arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
                        .map_err(|e| err(&e))?;
                rules.entry(allowed.nr).or_default().push(SeccompRule::new(vec![arg]).map_err(|e| err(&e))?);
            }
        }
        let allow = SeccompFilter::new(
            rules,
            SeccompAction::Errno(libc::EPERM as u32),
            SeccompAction::Allow,
            arch()?,
        )
        .map_err(|e| err(&e))?;
        let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, vec![])].into_iter().collect();
        let enosys = SeccompFilter::new(
            clone3,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch()?,
        )
        .map_err(|e| err(&e))?;
        let compile = |filter: SeccompFilter| -> Result<seccompiler::BpfProgram, ConfineError> {
            filter.try_into().map_err(|e: seccompiler::BackendError| err(&e))
        };
        Ok([compile(allow)?, compile(enosys)?])
    }

    /// Loads its filters on the calling thread (and the threads it starts later).
    fn load(self) -> Result<(), ConfineError> {
        for program in self.programs(std::process::id())? {
            seccompiler::apply_filter(&program).map_err(|e| seccomp_err(&e))?;
        }
        Ok(())
    }
}

fn arch() -> Result<TargetArch, ConfineError> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| ConfineError::Seccomp(e.to_string()))
}

/// Loads the worker's allowlist: descriptor-relative file operations, memory, its IPC socket,
/// time and exit ([`BASE`], [`WORKER`], [`WORKER_IF`]); a danger-full-access worker's adds the
/// process per approved call ([`DANGER`], [`DANGER_IF`]).
pub fn seccomp_worker(danger: bool) -> Result<(), ConfineError> {
    if danger { Filtered::DangerWorker.load() } else { Filtered::Worker.load() }
}

/// The plain worker's filters, compiled once by a danger-full-access worker at its start (before
/// its own filter), for each approved call's process to load ([`seccomp_approved_call`]).
pub struct ApprovedCallFilter([seccompiler::BpfProgram; 2]);

impl std::fmt::Debug for ApprovedCallFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovedCallFilter").finish_non_exhaustive()
    }
}

pub fn compile_approved_call() -> Result<ApprovedCallFilter, ConfineError> {
    // The plain worker's lists fix no argument to the process's own pid: the child's is fine.
    Ok(ApprovedCallFilter(Filtered::Worker.programs(std::process::id())?))
}

/// Loads the plain worker's allowlist over a danger-full-access worker's, in an approved call's
/// process once it confined itself: filters stack, so the call can no longer fork, change its
/// Landlock domain, its capabilities or its ids.
pub fn seccomp_approved_call(filter: &ApprovedCallFilter) -> Result<(), ConfineError> {
    for program in &filter.0 {
        seccompiler::apply_filter(program).map_err(|e| seccomp_err(&e))?;
    }
    Ok(())
}

/// Loads the network process's allowlist ([`BASE`], [`NETWORK`], [`NETWORK_IF`]): its sockets
/// (accepting, the approver's connection, the workers' and the supervisor's socket pairs with
/// descriptor passing), reading the files workers pass it for streams, the audit log's
/// descriptor, tokio's epoll, eventfd and threads, memory, time and signals to itself. Nothing
/// that opens, creates, changes or runs a path (open, exec, unlink, chmod, statx ...), no mounts,
/// namespaces, ptrace, bpf, io_uring, keyrings or signals to other processes: a compromised
/// network process is left with the descriptors it holds.
pub fn seccomp_network() -> Result<(), ConfineError> {
    Filtered::Network.load()
}

/// Loads the network process's allowlist with a direct read's calls ([`NETWORK`] and [`DIRECT`]
/// with their conditional lists): for a network process whose Landlock domain grants reading
/// beneath the roots and nothing else, which runs plain reads on its runtime threads.
pub fn seccomp_network_reader() -> Result<(), ConfineError> {
    Filtered::NetworkReader.load()
}

/// Loads a direct read thread's allowlist on the calling thread only ([`BASE`], [`DIRECT`],
/// [`DIRECT_IF`]): the descriptor-relative calls of a walk and a read, memory, futexes, time and
/// exit. No socket, no thread, nothing that changes a path.
pub fn seccomp_direct() -> Result<(), ConfineError> {
    Filtered::Direct.load()
}

fn seccomp_err(e: &dyn std::fmt::Display) -> ConfineError {
    ConfineError::Seccomp(e.to_string())
}

/// The running kernel's Landlock ABI as a number (0: none).
pub fn landlock_abi() -> u32 {
    super::landlock_abi()
}

/// Each role's filters checked the way Firecracker checks its own: loaded in a process of their
/// own (this test binary again, so no test thread of the caller is confined), every listed call
/// made and let through, every other refused. Each call is made with arguments it refuses
/// (descriptor -1, bad flags, a null length), so none acts: the kernel's own error (EBADF,
/// EFAULT, EINVAL...) proves the filter let it through, EPERM that the filter refused it.
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    use super::*;

    /// Set in the spawned copy: the role whose filters it loads.
    const CHILD_ROLE: &str = "FSD_TEST_SECCOMP_ROLE";
    /// The spawned copy's exit status when every check held (its exit_group is the last check).
    const CHILD_OK: i32 = 42;

    /// Arguments a call refuses without acting; `u64::MAX` (descriptor -1, a pointer no page
    /// holds, flags no kernel knows) unless the call needs others to fail harmlessly.
    fn refused_args(nr: i64) -> [u64; 6] {
        match nr {
            // A zero length.
            libc::SYS_mmap => [0, 0, 0, 0, u64::MAX, 0],
            // A new mount namespace sharing the filesystem context: always EINVAL.
            libc::SYS_clone => [(libc::CLONE_NEWNS | libc::CLONE_FS) as u64, 0, 0, 0, 0, 0],
            // No such process, and no signal.
            libc::SYS_kill => [0x7fff_fff0, 0, 0, 0, 0, 0],
            _ => [u64::MAX; 6],
        }
    }

    /// Makes the call; the errno it failed with, if it failed.
    fn call(nr: i64, args: [u64; 6]) -> Option<i32> {
        // SAFETY: every argument makes the kernel refuse the call before it acts (see
        // `refused_args`) or names no memory it writes; the raw call takes integers only.
        let rc = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) };
        (rc == -1).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// Calls no role makes, and the other roles' own.
    fn outside(role: Filtered) -> Vec<(i64, &'static str)> {
        let own: Vec<i64> = role.allowed().map(|a| a.nr).collect();
        let others = [
            Filtered::Worker,
            Filtered::DangerWorker,
            Filtered::Network,
            Filtered::Direct,
            Filtered::NetworkReader,
        ];
        let never = [
            (libc::SYS_execve, "SYS_execve"),
            (libc::SYS_kill, "SYS_kill"),
            (libc::SYS_ptrace, "SYS_ptrace"),
            (libc::SYS_mount, "SYS_mount"),
            (libc::SYS_unshare, "SYS_unshare"),
            (libc::SYS_chdir, "SYS_chdir"),
            (libc::SYS_bpf, "SYS_bpf"),
            (libc::SYS_io_uring_setup, "SYS_io_uring_setup"),
        ];
        let mut listed: Vec<(i64, &'static str)> =
            others.iter().filter(|r| **r != role).flat_map(|r| r.allowed()).map(|a| (a.nr, a.name)).collect();
        listed.sort();
        listed.dedup();
        let mut calls: Vec<(i64, &'static str)> = listed
            .into_iter()
            .chain(never)
            .filter(|(nr, _)| !own.contains(nr) && *nr != libc::SYS_newfstatat && *nr != libc::SYS_tgkill)
            .collect();
        calls.sort_unstable();
        calls.dedup();
        calls
    }

    /// A raw clone with `flags` and its own stack copied (a fork): the child ends at once with
    /// exit_group; the parent reaps it. `None` when the call failed.
    fn forked(flags: u64) -> Option<()> {
        // SAFETY: without CLONE_VM the child runs on a copy of this stack and only calls
        // exit_group; the parent only waits for it.
        let rc = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
        if rc == 0 {
            call(libc::SYS_exit_group, [0; 6]);
        }
        if rc < 0 {
            return None;
        }
        let mut status = 0;
        // SAFETY: `status` is a valid int for the call's duration.
        unsafe { libc::waitpid(rc as i32, &mut status, 0) };
        Some(())
    }

    static HANDLED: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_usr1(_: libc::c_int) {
        HANDLED.store(true, Ordering::SeqCst);
    }

    /// The spawned copy: loads `role`'s filters on every thread, checks, reports on stderr, and
    /// ends with exit_group (`CHILD_OK` when every check held).
    fn confined_checks(role: Filtered) -> ! {
        let pid = std::process::id();
        let programs = role.programs(pid).expect("the filters compile");
        // A thread that will end with a bare `exit` once confined: the call ends a thread only.
        static EXITER: AtomicI32 = AtomicI32::new(0);
        static GO: AtomicBool = AtomicBool::new(false);
        static EXIT_REFUSED: AtomicI32 = AtomicI32::new(0);
        std::thread::spawn(|| {
            // SAFETY: gettid takes no argument.
            EXITER.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::SeqCst);
            while !GO.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            let errno = call(libc::SYS_exit, [0; 6]).unwrap_or(-1);
            EXIT_REFUSED.store(errno, Ordering::SeqCst);
        });
        while EXITER.load(Ordering::SeqCst) == 0 {
            std::hint::spin_loop();
        }
        // SAFETY: `on_usr1` only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(libc::SIGUSR1, on_usr1 as *const () as libc::sighandler_t) };
        for program in &programs {
            seccompiler::apply_filter_all_threads(program).expect("the filters load");
        }

        let mut failures = Vec::new();
        let special = [libc::SYS_exit, libc::SYS_exit_group, libc::SYS_rt_sigreturn];
        for allowed in role.allowed().filter(|a| !special.contains(&a.nr)) {
            if call(allowed.nr, refused_args(allowed.nr)) == Some(libc::EPERM) {
                failures.push(format!("{} is listed but refused", allowed.name));
            }
        }
        for allowed in role.allowed_if() {
            for value in allowed.values {
                let mut args = refused_args(allowed.nr);
                args[usize::from(allowed.arg)] = match value {
                    Value::Is(v) => *v,
                    Value::OwnPid => u64::from(pid),
                };
                if allowed.nr == libc::SYS_clone {
                    // Fork's flags act whatever the other arguments: a real fork, whose child
                    // ends at once and is reaped.
                    let child = forked(args[0]);
                    if child.is_none() {
                        failures.push("clone with fork's flags is refused".to_owned());
                    }
                } else if call(allowed.nr, args) == Some(libc::EPERM) {
                    failures.push(format!(
                        "{} with argument {} = {value:?} is refused",
                        allowed.name, allowed.arg
                    ));
                }
                // Any other value of that argument is refused.
                args[usize::from(allowed.arg)] = 0x7fff_0001;
                if call(allowed.nr, args) != Some(libc::EPERM) {
                    failures.push(format!(
                        "{} with argument {} = 0x7fff0001 is let through",
                        allowed.name, allowed.arg
                    ));
                }
            }
        }
        for (nr, name) in outside(role) {
            if call(nr, refused_args(nr)) != Some(libc::EPERM) {
                failures.push(format!("{name} is not listed but let through"));
            }
        }
        if call(libc::SYS_seccomp, [u64::MAX; 6]) == Some(libc::EPERM) {
            failures.push("seccomp (the second filter's load) is refused".to_owned());
        }
        if call(libc::SYS_clone3, [0; 6]) != Some(libc::ENOSYS) {
            failures.push("clone3 does not answer ENOSYS".to_owned());
        }
        // rt_sigreturn: a handler's return goes through it (refused, the process would crash).
        // SAFETY: SIGUSR1 to this very thread, whose handler was installed above.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
        call(libc::SYS_tgkill, [u64::from(pid), tid, libc::SIGUSR1 as u64, 0, 0, 0]);
        if !HANDLED.load(Ordering::SeqCst) {
            failures.push("SIGUSR1 was not handled".to_owned());
        }
        // exit: the other thread ends (tgkill with signal 0 then finds no such thread).
        GO.store(true, Ordering::SeqCst);
        let exiter = u64::from(EXITER.load(Ordering::SeqCst) as u32);
        loop {
            if EXIT_REFUSED.load(Ordering::SeqCst) != 0 {
                failures.push("exit is refused".to_owned());
                break;
            }
            if call(libc::SYS_tgkill, [u64::from(pid), exiter, 0, 0, 0, 0]) == Some(libc::ESRCH) {
                break;
            }
            std::hint::spin_loop();
        }
        for failure in &failures {
            eprintln!("{role:?}: {failure}");
        }
        let status = if failures.is_empty() { CHILD_OK } else { 1 };
        call(libc::SYS_exit_group, [status as u64, 0, 0, 0, 0, 0]);
        unreachable!("exit_group returned: it is refused");
    }

    /// Runs this test again in a process of its own, as the confined copy of `role`.
    fn check_in_own_process(role: Filtered, test: &str) {
        if let Ok(child) = std::env::var(CHILD_ROLE) {
            assert_eq!(child, format!("{role:?}"), "spawned for another role");
            confined_checks(role);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ROLE, format!("{role:?}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(CHILD_OK), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn the_worker_filter_lets_its_list_through_and_refuses_every_other_call() {
        check_in_own_process(
            Filtered::Worker,
            "sys::confine::tests::the_worker_filter_lets_its_list_through_and_refuses_every_other_call",
        );
    }

    #[test]
    fn the_danger_worker_filter_lets_its_list_through_and_refuses_every_other_call() {
        check_in_own_process(
            Filtered::DangerWorker,
            "sys::confine::tests::the_danger_worker_filter_lets_its_list_through_and_refuses_every_other_call",
        );
    }

    #[test]
    fn the_network_filter_lets_its_list_through_and_refuses_every_other_call() {
        check_in_own_process(
            Filtered::Network,
            "sys::confine::tests::the_network_filter_lets_its_list_through_and_refuses_every_other_call",
        );
    }

    #[test]
    fn the_direct_read_filter_lets_its_list_through_and_refuses_every_other_call() {
        check_in_own_process(
            Filtered::Direct,
            "sys::confine::tests::the_direct_read_filter_lets_its_list_through_and_refuses_every_other_call",
        );
    }

    #[test]
    fn the_reading_network_filter_lets_its_list_through_and_refuses_every_other_call() {
        check_in_own_process(
            Filtered::NetworkReader,
            "sys::confine::tests::the_reading_network_filter_lets_its_list_through_and_refuses_every_other_call",
        );
    }

    /// Every entry says why, and the lists are sets: the base is not repeated in a role's own.
    #[test]
    fn every_entry_has_a_reason_and_is_listed_once() {
        for role in [
            Filtered::Worker,
            Filtered::DangerWorker,
            Filtered::Network,
            Filtered::Direct,
            Filtered::NetworkReader,
        ] {
            let mut seen = std::collections::HashSet::new();
            for allowed in role.allowed() {
                assert!(!allowed.why.trim().is_empty(), "{} has no reason", allowed.name);
                assert!(seen.insert(allowed.nr), "{} listed twice for {role:?}", allowed.name);
            }
            for allowed in role.allowed_if() {
                assert!(!allowed.why.trim().is_empty(), "{} has no reason", allowed.name);
                assert!(!allowed.values.is_empty(), "{} allows no value", allowed.name);
            }
        }
    }
}
