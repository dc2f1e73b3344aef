//! Process plumbing: socket pairs between the supervisor, the network process and the workers,
//! length-prefixed frames that may carry descriptors (SCM_RIGHTS), receive deadlines, descriptor
//! inheritance across exec, and signals.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustix::io::FdFlags;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

pub use rustix::io::Errno;

/// Frames larger than this are refused: the largest message is a 64 MiB file plus framing.
pub const MAX_FRAME: usize = 96 << 20;
const HEADER: usize = 5;

/// A connected pair of stream sockets, close-on-exec.
pub fn pair() -> Result<(UnixStream, UnixStream), Errno> {
    let (a, b) =
        rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    Ok((UnixStream::from(a), UnixStream::from(b)))
}

/// Marks a descriptor to survive (or not) the next exec. The supervisor is single-threaded, so
/// clearing the flag just before spawning cannot leak the descriptor into another child.
pub fn set_inheritable(fd: BorrowedFd<'_>, inheritable: bool) -> Result<(), Errno> {
    let flags = if inheritable { FdFlags::empty() } else { FdFlags::CLOEXEC };
    rustix::io::fcntl_setfd(fd, flags)
}

/// Takes ownership of a descriptor inherited across exec, named by number on the command line.
pub fn inherited(raw: RawFd) -> Result<OwnedFd, Errno> {
    // Checks that the number names an open descriptor before claiming it.
    // SAFETY: `raw` was passed by our supervisor as the one descriptor it left open for this
    // process, and nothing else in this process owns it yet; F_GETFD below fails on a closed
    // number before anything else uses the descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    match rustix::io::fcntl_getfd(&fd) {
        Ok(_) => {
            rustix::io::fcntl_setfd(&fd, FdFlags::CLOEXEC)?;
            Ok(fd)
        }
        Err(e) => {
            // Not ours after all: do not close whatever that number is.
            std::mem::forget(fd);
            Err(e)
        }
    }
}

/// Bounds how long a receive may block (`None`: forever).
pub fn set_receive_deadline(socket: &UnixStream, timeout: Option<Duration>) -> Result<(), Errno> {
    rustix::net::sockopt::set_socket_timeout(socket, rustix::net::sockopt::Timeout::Recv, timeout)
}

/// Sends one frame, with an optional descriptor attached to its first byte.
pub fn send_frame(socket: &UnixStream, payload: &[u8], fd: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut header = [0u8; HEADER];
    header[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[4] = u8::from(fd.is_some());
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("cannot attach descriptor"));
    }
    let iov = [IoSlice::new(&header), IoSlice::new(payload)];
    let sent = loop {
        match rustix::net::sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => break n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptor went with the first bytes; the rest is plain stream data.
    let mut writer = socket;
    writer.write_all(&header[sent.min(HEADER)..])?;
    writer.write_all(&payload[sent.saturating_sub(HEADER)..])?;
    Ok(())
}

/// Why a frame could not be received.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the socket between frames.
    Closed,
    /// The receive deadline passed.
    TimedOut,
    Io(std::io::Error),
}

/// Receives one frame and the descriptor sent with it, if any.
pub fn recv_frame(socket: &UnixStream) -> Result<(Vec<u8>, Option<OwnedFd>), RecvError> {
    let mut header = [0u8; HEADER];
    let mut got = 0;
    let mut fd = None;
    while got < HEADER {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut header[got..])];
        let received = match rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(r) => r,
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return Err(RecvError::TimedOut),
            Err(e) => return Err(RecvError::Io(e.into())),
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for received_fd in fds {
                    fd.get_or_insert(received_fd);
                }
            }
        }
        if received.bytes == 0 {
            return Err(if got == 0 {
                RecvError::Closed
            } else {
                RecvError::Io(std::io::ErrorKind::UnexpectedEof.into())
            });
        }
        got += received.bytes;
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_FRAME {
        return Err(RecvError::Io(std::io::Error::other("frame too large")));
    }
    let mut payload = vec![0u8; len];
    let mut reader = socket;
    reader.read_exact(&mut payload).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => RecvError::TimedOut,
        _ => RecvError::Io(e),
    })?;
    Ok((payload, fd))
}

/// Sends a signal to a process we started.
pub fn signal(pid: u32, kill: bool) -> Result<(), Errno> {
    let pid = rustix::process::Pid::from_raw(pid as i32).ok_or(Errno::SRCH)?;
    let signal = if kill { rustix::process::Signal::KILL } else { rustix::process::Signal::TERM };
    rustix::process::kill_process(pid, signal)
}

/// Asks the kernel to SIGKILL this process when its parent (the supervisor) dies, so no worker
/// or network process outlives a killed supervisor and keeps writing behind its successor.
pub fn die_with_parent() -> Result<(), Errno> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    // The parent may have died before the request took effect: then we were re-parented.
    if rustix::process::getppid().is_none_or(|p| p.as_raw_nonzero().get() == 1) {
        return Err(Errno::SRCH);
    }
    Ok(())
}

/// The process that listens on the socket `stream` is connected to: a Unix socket's peer
/// credentials name the process that called listen().
pub fn listener_pid(stream: &UnixStream) -> Option<u32> {
    let peer = rustix::net::sockopt::socket_peercred(stream).ok()?;
    u32::try_from(peer.pid.as_raw_pid()).ok()
}

/// Whether process `pid` is on its way out: gone, its main thread a zombie (a killed
/// multi-threaded process shows that while its other threads still exit, still holding its
/// descriptors), or marked exiting (the kernel's PF_EXITING in `/proc/<pid>/stat`). A process
/// whose state cannot be read (another user's under `hidepid`) counts as alive.
pub fn exiting(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_says_exiting(&stat),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Reads a `/proc/<pid>/stat` line: after the parenthesised name come state, ppid, pgrp,
/// session, tty_nr, tpgid, flags, ...
fn stat_says_exiting(stat: &str) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Some((_, rest)) = stat.rsplit_once(')') else { return false };
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or_default();
    let flags = fields.nth(5).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0
}

/// Borrows the socket's descriptor.
pub fn fd_of(socket: &UnixStream) -> BorrowedFd<'_> {
    socket.as_fd()
}

/// Descriptors one receive may carry: the kernel stops a stream read after the first message
/// with descriptors, and every frame carries at most one.
const MAX_FDS_PER_READ: usize = 4;
/// What one receive asks for when no frame is half-read: small frames arrive in one syscall.
const READ_AHEAD: usize = 64 << 10;

/// The non-blocking side of a frame socket, on the tokio runtime: the network process talks to
/// its workers and its supervisor with it, so no call waits on a thread. Frames are those of
/// [`send_frame`]/[`recv_frame`], so the blocking peer needs no change.
#[derive(Debug)]
pub struct AsyncFrames {
    io: tokio::net::UnixStream,
    /// Bytes received and not yet handed out; `start..filled` is unread.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    /// Bytes of the last frame handed out, dropped at the next receive.
    consumed: usize,
    /// Descriptors received, in the order of the frames that carry them.
    fds: std::collections::VecDeque<OwnedFd>,
}

impl AsyncFrames {
    /// Takes a connected socket; it becomes non-blocking. Must run inside a tokio runtime.
    pub fn new(socket: UnixStream) -> std::io::Result<AsyncFrames> {
        socket.set_nonblocking(true)?;
        let io = tokio::net::UnixStream::from_std(socket)?;
        Ok(AsyncFrames { io, buf: Vec::new(), start: 0, filled: 0, consumed: 0, fds: Default::default() })
    }

    /// Sends one frame, with an optional descriptor attached to its first byte.
    pub async fn send(&self, payload: &[u8], fd: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
        if payload.len() > MAX_FRAME {
            return Err(std::io::Error::other("frame too large"));
        }
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[4] = u8::from(fd.is_some());
        let total = HEADER + payload.len();
        let mut sent = 0;
        while sent < total {
            let attach = if sent == 0 { fd } else { None };
            let n = self
                .io
                .async_io(tokio::io::Interest::WRITABLE, || {
                    let fds: Vec<BorrowedFd<'_>> = attach.into_iter().collect();
                    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
                    let mut control = SendAncillaryBuffer::new(&mut space);
                    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
                        return Err(std::io::Error::other("cannot attach descriptor"));
                    }
                    let head = &header[sent.min(HEADER)..];
                    let body = &payload[sent.saturating_sub(HEADER)..];
                    let iov = [IoSlice::new(head), IoSlice::new(body)];
                    loop {
                        match rustix::net::sendmsg(&self.io, &iov, &mut control, SendFlags::NOSIGNAL) {
                            Ok(n) => return Ok(n),
                            Err(Errno::INTR) => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                })
                .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            sent += n;
        }
        Ok(())
    }

    /// Receives one frame: its payload (valid until the next receive) and its descriptor.
    pub async fn recv(&mut self) -> Result<(&[u8], Option<OwnedFd>), RecvError> {
        self.start += std::mem::take(&mut self.consumed);
        loop {
            let available = self.filled - self.start;
            if available >= HEADER {
                let h = &self.buf[self.start..self.start + HEADER];
                let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let has_fd = h[4] != 0;
                if len > MAX_FRAME {
                    return Err(RecvError::Io(std::io::Error::other("frame too large")));
                }
                if available >= HEADER + len {
                    let fd = if has_fd {
                        Some(self.fds.pop_front().ok_or_else(|| {
                            RecvError::Io(std::io::Error::other("frame announced a descriptor it lacks"))
                        })?)
                    } else {
                        None
                    };
                    self.consumed = HEADER + len;
                    let body = self.start + HEADER;
                    return Ok((&self.buf[body..body + len], fd));
                }
                self.make_room(HEADER + len);
            } else {
                self.make_room(HEADER);
            }
            self.fill().await?;
        }
    }

    /// Makes the buffer able to hold `frame` bytes from `start`, moving the unread bytes to the
    /// front, and gives back memory a large frame took once it is read.
    fn make_room(&mut self, frame: usize) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
        let want = frame.max(READ_AHEAD);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        } else if self.buf.len() > READ_AHEAD && want == READ_AHEAD && self.filled <= READ_AHEAD {
            self.buf.truncate(READ_AHEAD);
            self.buf.shrink_to(READ_AHEAD);
        }
    }

    /// One receive into the free part of the buffer.
    async fn fill(&mut self) -> Result<(), RecvError> {
        let (io, buf, filled, fds) = (&self.io, &mut self.buf, self.filled, &mut self.fds);
        let received = io
            .async_io(tokio::io::Interest::READABLE, || {
                let mut space =
                    [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_READ))];
                let mut control = RecvAncillaryBuffer::new(&mut space);
                let mut iov = [IoSliceMut::new(&mut buf[filled..])];
                let received = loop {
                    match rustix::net::recvmsg(io, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
                        Ok(r) => break r,
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(std::io::Error::from(e)),
                    }
                };
                for message in control.drain() {
                    if let RecvAncillaryMessage::ScmRights(received_fds) = message {
                        fds.extend(received_fds);
                    }
                }
                Ok(received.bytes)
            })
            .await
            .map_err(RecvError::Io)?;
        if received == 0 {
            return Err(if self.filled == self.start {
                RecvError::Closed
            } else {
                RecvError::Io(std::io::ErrorKind::UnexpectedEof.into())
            });
        }
        self.filled += received;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(stat: &str, expected: bool) {
        assert_eq!(stat_says_exiting(stat), expected, "{stat}");
    }

    #[test]
    fn stat_lines_of_exiting_processes() {
        // A serving process; a name with spaces and parentheses; a zombie main thread; a process
        // marked PF_EXITING (0x40800c) while its main thread still runs; an unreadable line.
        check("4242 (fsd) S 4241 4241 1 0 -1 4194560 900 0 0 0", false);
        check("4242 (a) b (c) S 4241 4241 1 0 -1 4194560 900 0 0 0", false);
        check("4242 (fsd) Z 4241 4241 1 0 -1 4227084 900 0 0 0", true);
        check("4242 (fsd) R 4241 4241 1 0 -1 4227084 900 0 0 0", true);
        check("4242 (fsd) X 1 4241 1 0 -1 4194560 900 0 0 0", true);
        check("garbage", false);
    }
}
