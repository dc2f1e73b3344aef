//! Confinement primitives: user and group ids, capabilities, no_new_privs, Landlock rulesets and
//! the seccomp allowlist. The order they run in is decided by `crate::confine`, one linear
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
    #[error("landlock: {0}")]
    Landlock(String),
    #[error("landlock ruleset not enforced: the kernel lacks ABI {0} or Landlock is disabled")]
    LandlockNotEnforced(u32),
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("the thread that checks the worker identity's access failed")]
    AccessCheck,
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
    Ok(())
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

pub fn no_new_privs() -> Result<(), ConfineError> {
    rustix::thread::set_no_new_privs(true).map_err(ConfineError::NoNewPrivs)
}

/// Landlock rights a grant gives beneath a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Read,
    /// Read, write, truncate, make regular files and directories, remove them, and refer
    /// (rename across directories). Never symlinks, devices, FIFOs, sockets or execute.
    Write,
}

fn rights(grant: Grant) -> BitFlags<AccessFs> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match grant {
        Grant::Read => read,
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

/// Restricts this (single-threaded) process to `grants`: every filesystem right the running
/// ABI knows is handled, so anything not granted is denied. The floor rights are a hard
/// requirement when `required`; newer rights and scopes are best effort.
pub fn landlock(grants: &[(PathBuf, Grant)], required: bool) -> Result<Enforcement, ConfineError> {
    let err = |e: &dyn std::fmt::Display| ConfineError::Landlock(e.to_string());
    let floor = if required { CompatLevel::HardRequirement } else { CompatLevel::BestEffort };
    let ruleset = Ruleset::default()
        .set_compatibility(floor)
        .handle_access(AccessFs::from_all(ABI::V3))
        .map_err(|e| err(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V6))
        .map_err(|e| err(&e))?
        .scope(Scope::from_all(ABI::V6))
        .map_err(|e| err(&e))?;
    let mut created = ruleset.create().map_err(|e| err(&e))?;
    for (path, grant) in grants {
        let fd = PathFd::new(path).map_err(|e| err(&e))?;
        created = created.add_rule(PathBeneath::new(fd, rights(*grant))).map_err(|e| err(&e))?;
    }
    let status = created.restrict_self().map_err(|e| err(&e))?;
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

/// The system calls a worker makes: descriptor-relative file operations, memory, its IPC
/// socket, time and exit. Everything else fails with EPERM.
const WORKER_SYSCALLS: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_lseek,
    libc::SYS_close,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_fchmod,
    libc::SYS_fchown,
    // Emptying a temporary file whose name cannot be removed (sys::empty_file).
    libc::SYS_ftruncate,
    // The temporary-file journal on the roots (backend::journal), on descriptors only, as
    // fchmod and fchown: a worker can reach no xattr a path would name.
    libc::SYS_fsetxattr,
    libc::SYS_fremovexattr,
    // Keeping a replaced file's ACL and user attributes (backend::write), descriptors only.
    libc::SYS_fgetxattr,
    libc::SYS_flistxattr,
    libc::SYS_renameat2,
    libc::SYS_renameat,
    libc::SYS_unlinkat,
    libc::SYS_mkdirat,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_brk,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// `FS_IOC_GETVERSION`, the only ioctl a worker makes.
const FS_IOC_GETVERSION: u64 = 0x8008_7601;

fn arch() -> Result<TargetArch, ConfineError> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| ConfineError::Seccomp(e.to_string()))
}

/// Loads the worker's allowlist, then a second filter that answers clone3 with ENOSYS, so a
/// library that starts a thread falls back to clone instead of failing outright.
pub fn seccomp_worker() -> Result<(), ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = WORKER_SYSCALLS.iter().map(|&nr| (nr, vec![])).collect();
    let ioctl = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, FS_IOC_GETVERSION)
        .map_err(|e| seccomp_err(&e))?;
    rules.insert(libc::SYS_ioctl, vec![SeccompRule::new(vec![ioctl]).map_err(|e| seccomp_err(&e))?]);
    load_allowlist(rules)
}

/// The system calls the network process makes once confined: its sockets (accepting, the
/// approver's connection, the workers' and the supervisor's socket pairs with descriptor
/// passing), reading the files workers pass it for streams, the audit log's descriptor, tokio's
/// epoll, eventfd and threads, memory, time and signals to itself. Nothing that opens, creates,
/// changes or runs a path (open, exec, unlink, chmod, statx ...), no mounts, namespaces, ptrace,
/// bpf, io_uring, keyrings or signals to other processes: a compromised network process is left
/// with the descriptors it holds.
const NETWORK_SYSCALLS: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_lseek,
    libc::SYS_close,
    libc::SYS_fstat,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_socket,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_socketpair,
    libc::SYS_pipe2,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_brk,
    libc::SYS_madvise,
    // Threads: tokio's workers and blocking pool (clone3 answers ENOSYS, see below).
    libc::SYS_clone,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_gettid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_uname,
    libc::SYS_prlimit64,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// `FIONBIO`: std's `set_nonblocking` on a socket.
const FIONBIO: u64 = 0x5421;
/// `FIONREAD`, asked of sockets by some readers.
const FIONREAD: u64 = 0x541b;

/// Loads the network process's allowlist (and the clone3 filter). prctl only names threads
/// (tokio's `fsd-net` workers) or reads a name.
pub fn seccomp_network() -> Result<(), ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        NETWORK_SYSCALLS.iter().map(|&nr| (nr, vec![])).collect();
    let ioctls = [FIONBIO, FIONREAD]
        .into_iter()
        .map(|request| {
            let arg = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)
                .map_err(|e| seccomp_err(&e))?;
            SeccompRule::new(vec![arg]).map_err(|e| seccomp_err(&e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctls);
    let prctls = [libc::PR_SET_NAME, libc::PR_GET_NAME]
        .into_iter()
        .map(|option| {
            let arg = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, option as u64)
                .map_err(|e| seccomp_err(&e))?;
            SeccompRule::new(vec![arg]).map_err(|e| seccomp_err(&e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_prctl, prctls);
    // glibc's fstat is newfstatat(fd, "", AT_EMPTY_PATH) (tokio's pipe check, std's metadata
    // fallback once statx is refused): allowed with exactly that flag. A caller that passes a
    // path with it still resolves the path (seccomp cannot read strings): a stat leaks
    // metadata, never content, and Landlock refuses every open.
    let empty_path = SeccompCondition::new(3, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, AT_EMPTY_PATH)
        .map_err(|e| seccomp_err(&e))?;
    rules
        .insert(libc::SYS_newfstatat, vec![SeccompRule::new(vec![empty_path]).map_err(|e| seccomp_err(&e))?]);
    // Signals to its own threads only: not to the supervisor or the workers, which may share
    // its uid.
    let own =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, u64::from(std::process::id()))
            .map_err(|e| seccomp_err(&e))?;
    rules.insert(libc::SYS_tgkill, vec![SeccompRule::new(vec![own]).map_err(|e| seccomp_err(&e))?]);
    load_allowlist(rules)
}

/// `AT_EMPTY_PATH`.
const AT_EMPTY_PATH: u64 = 0x1000;

fn seccomp_err(e: &dyn std::fmt::Display) -> ConfineError {
    ConfineError::Seccomp(e.to_string())
}

/// Loads `rules` as an allowlist (everything else fails with EPERM), then a second filter that
/// answers clone3 with ENOSYS, so a library that starts a thread falls back to clone instead of
/// failing outright. Loading the second filter takes prctl(PR_SET_NO_NEW_PRIVS) and seccomp(2),
/// which the first filter allows (both can only narrow what the process may do).
fn load_allowlist(mut rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), ConfineError> {
    let err = seccomp_err;
    let nnp =
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc::PR_SET_NO_NEW_PRIVS as u64)
            .map_err(|e| err(&e))?;
    rules.entry(libc::SYS_prctl).or_default().push(SeccompRule::new(vec![nnp]).map_err(|e| err(&e))?);
    rules.insert(libc::SYS_seccomp, vec![]);
    let allow =
        SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, arch()?)
            .map_err(|e| err(&e))?;
    let program: seccompiler::BpfProgram =
        allow.try_into().map_err(|e: seccompiler::BackendError| err(&e))?;
    seccompiler::apply_filter(&program).map_err(|e| err(&e))?;

    let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, vec![])].into_iter().collect();
    let enosys =
        SeccompFilter::new(clone3, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch()?)
            .map_err(|e| err(&e))?;
    let program: seccompiler::BpfProgram =
        enosys.try_into().map_err(|e: seccompiler::BackendError| err(&e))?;
    seccompiler::apply_filter(&program).map_err(|e| err(&e))
}

/// The running kernel's Landlock ABI as a number (0: none).
pub fn landlock_abi() -> u32 {
    super::landlock_abi()
}
