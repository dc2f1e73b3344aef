//! A process of its own for each approved call of a danger-full-access worker: the fork, the
//! child's immediate exit and the parent's wait. The child confines itself to the approved
//! objects (`crate::role_confinement::approved_call`), performs the call, replies and exits; the worker
//! keeps its own authority for the next call.
#![allow(unsafe_code)]

use super::Errno;

/// Which side of a fork this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    Child,
    Parent(i32),
}

/// How a call's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Killed(i32),
}

/// Forks the calling process. Only a single-threaded process may call it: the worker, whose
/// seccomp allowlist lets `clone` through with fork's flags only (never a thread), so no other
/// thread can hold a lock the child would inherit held.
pub fn fork() -> Result<Forked, Errno> {
    // SAFETY: the worker is single-threaded (see above), so the child inherits no lock held by
    // another thread; glibc's fork runs its own atfork handlers (malloc, stdio) around it.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Waits for the child `pid` to end, through interruptions.
pub fn wait(pid: i32) -> Result<Ended, Errno> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid, writable int for the call's duration; no rusage pointer.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, std::ptr::null_mut()) };
        if rc == -1 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if errno == libc::EINTR {
                continue;
            }
            return Err(Errno::from_raw_os_error(errno));
        }
        if libc::WIFEXITED(status) {
            return Ok(Ended::Exited(libc::WEXITSTATUS(status)));
        }
        if libc::WIFSIGNALED(status) {
            return Ok(Ended::Killed(libc::WTERMSIG(status)));
        }
    }
}

/// Makes this child die with its parent, the worker `parent`: a worker killed as hung (or
/// otherwise gone) never leaves its approved call running to act after its caller was told the
/// call ended. Credentials changes clear the setting, so it is made after the identity switch.
pub fn die_with_parent(parent: u32) -> Result<(), Errno> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    // The parent may have died before the setting: then nothing would ever send it.
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent) {
        exit_now(1);
    }
    Ok(())
}

/// Ends the child at once with `code`: no destructor, no atexit handler, no buffered output of
/// the parent's written twice (`_exit`).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes an int and never returns.
    unsafe { libc::_exit(code) }
}
