//! A process of its own for each approved call of a danger-full-access worker: the fork, the
//! child's immediate exit and the parent's wait. The child confines itself to the approved
//! objects (`crate::role_confinement::approved_call`), performs the call, replies and exits; the worker
//! keeps its own authority for the next call. A call that changes files hands its change to the
//! worker first and waits until it is recorded (the handshake), then replies.
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

/// The approved call's process's side of its handshake with its worker: it says once that its
/// change is in the carrier, then waits until the worker has recorded it, so the reply it sends
/// next never reaches a client before the change is listed.
#[derive(Debug)]
pub struct ProcessSide {
    carried: std::os::fd::OwnedFd,
    recorded: std::os::fd::OwnedFd,
}

/// The worker's side: it waits for the word (or the process's end), records, then lets the
/// process reply.
#[derive(Debug)]
pub struct WorkerSide {
    carried: std::os::fd::OwnedFd,
    recorded: std::os::fd::OwnedFd,
}

/// Two pipes, made before the fork: each side keeps its own ends and drops the others, so a
/// side that ends closes its ends and the other's wait returns.
pub fn handshake() -> Result<(ProcessSide, WorkerSide), Errno> {
    use rustix::pipe::{PipeFlags, pipe_with};
    let (carried_read, carried_write) = pipe_with(PipeFlags::CLOEXEC)?;
    let (recorded_read, recorded_write) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok((
        ProcessSide { carried: carried_write, recorded: recorded_read },
        WorkerSide { carried: carried_read, recorded: recorded_write },
    ))
}

impl ProcessSide {
    /// Says the change is carried and waits for the worker's answer; a worker gone answers too
    /// (its end closes).
    pub fn carried(self) {
        if write_byte(&self.carried) {
            read_byte(&self.recorded);
        }
    }
}

impl WorkerSide {
    /// Waits until the process says its change is carried, or ends without saying so.
    pub fn wait_carried(&self) {
        read_byte(&self.carried);
    }

    /// Lets the process go on (a process already gone needs no answer: the write fails with
    /// EPIPE, SIGPIPE being ignored).
    pub fn recorded(self) {
        write_byte(&self.recorded);
    }
}

fn write_byte(fd: &std::os::fd::OwnedFd) -> bool {
    loop {
        match rustix::io::write(fd, &[1]) {
            Ok(n) => return n == 1,
            Err(Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

fn read_byte(fd: &std::os::fd::OwnedFd) {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(fd, &mut byte) {
            Err(Errno::INTR) => continue,
            _ => return,
        }
    }
}
