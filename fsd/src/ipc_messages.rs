//! The messages between fsd's processes: the network process and its workers (calls, locks,
//! replies, streamed-read descriptors), and the supervisor and the network process (new workers,
//! kill requests, rotated TLS files). Encoded with postcard in the length-prefixed frames of `sys::ipc`.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use fsd_proto::WireError;
use serde::{Deserialize, Serialize};

use crate::op::{Mode, Outcome, Request, StreamHeader};
use crate::sys::ipc::{self as raw, AsyncFrames, RecvError};

/// Supervisor → every child, the first frame on its socket, before anything else is sent:
/// what all of the daemon's processes share and no client may learn.
#[derive(Serialize, Deserialize)]
pub struct Start {
    /// The key of the content digests in versions (`backend::digest`).
    pub digest_key: [u8; crate::digest::KEY_BYTES],
    /// The configuration the supervisor resolved at start: a child never reads the config
    /// file, so a replacement serves what the daemon was started with, whatever the file says
    /// by then.
    pub config: crate::config::Config,
    /// Workers only (`None` for the network process): the key a worker vouches for the
    /// directories an approved call made with (`escalation::WorkerCheck::vouch`), which the
    /// network process, never holding it, cannot forge.
    pub vouch_key: Option<[u8; crate::digest::KEY_BYTES]>,
    /// The network process only (`None` for workers): the seed of the Ed25519 key that signs the
    /// audit log's checkpoints, which the supervisor read or made (`audit::signing_key`). Handed
    /// over here so that the key file is opened by the supervisor alone.
    pub audit_key: Option<[u8; 32]>,
}

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start").finish_non_exhaustive()
    }
}

/// Network process → worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    Call(Request),
    /// Open a file for a streamed read; the reply carries the open descriptor.
    OpenStream {
        path: String,
        /// For an approved read: the object its approval binds (see `backend::Binding`).
        bindings: crate::op::Bindings,
        /// What its approver signed, which the worker checks itself (signed trust).
        approval: Option<crate::op::SignedApproval>,
        /// Whom an approved read is for (see `op::Request::Bound`).
        requester: Option<crate::op::Requester>,
    },
    /// The locks the worker asked for are held.
    LockGranted,
    /// Test hook (cargo feature `fault-injection`): open a path with a plain `open(2)` that
    /// bypasses the resolver, so only the kernel can refuse it.
    #[cfg(feature = "fault-injection")]
    RawOpen {
        path: String,
        write: bool,
    },
    /// Test hook: chmod and chown by path, which the seccomp allowlist must both refuse.
    #[cfg(feature = "fault-injection")]
    RawMetadata {
        path: String,
    },
}

impl ToWorker {
    /// A call that reads and takes no locks: the network process may send it behind another
    /// read the worker is running (see `dispatch`).
    pub fn is_read(&self) -> bool {
        use crate::op::Request;
        match self {
            ToWorker::Call(request) => match request.plain() {
                Request::Stat { .. }
                | Request::CheckWrite { .. }
                | Request::ReadText { .. }
                | Request::ReadBytes { .. }
                | Request::ListDir { .. } => true,
                Request::WriteText { .. }
                | Request::EditText { .. }
                | Request::MoveFile { .. }
                | Request::DeleteFile { .. }
                | Request::WriteBytes { .. }
                | Request::Remove { .. }
                | Request::PatchText { .. }
                | Request::Transact { .. } => false,
                // A dry run takes its targets' locks; the change record's calls wait on its lock.
                Request::Check { .. }
                | Request::Bound { .. }
                | Request::Recorded { .. }
                | Request::Checkpoint { .. }
                | Request::Changes(_)
                | Request::Rewind { .. } => false,
            },
            ToWorker::OpenStream { .. } => true,
            ToWorker::LockGranted => false,
            #[cfg(feature = "fault-injection")]
            ToWorker::RawOpen { .. } | ToWorker::RawMetadata { .. } => false,
        }
    }
}

/// Worker → network process.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// Sent once, after confinement: how the fence is enforced.
    Ready { mode: Mode, enforcement: String },
    /// Take these per-target locks for the current call.
    Lock { keys: Vec<String> },
    /// The outcome, or the failure with its code and reasons typed (a value this build does not
    /// know fails the frame's decode).
    Reply(Result<Outcome, WireError>),
    /// A streamed write has taken this many bytes so far: the worker is busy, not hung.
    Progress { bytes: u64 },
    /// The header of a streamed read; the frame carries the file's descriptor.
    Stream(Result<StreamHeader, WireError>),
    /// A temporary file this worker emptied but could not remove: its directory left the fence
    /// mid-write. The frame carries the directory's descriptor; the supervisor removes it.
    Stranded(Stranded),
    #[cfg(feature = "fault-injection")]
    RawOpened(Result<(), String>),
}

/// The largest frame of a body on the pipe that travels with a WriteBytes call (the network
/// process writes them, `backend::bytes` reads them).
pub const MAX_BODY_FRAME: usize = 1 << 20;

/// The header of one body frame: its length (little-endian). A zero-length frame ends the body;
/// a pipe that closes before it means the sender gave up, and nothing is replaced.
pub fn body_frame_header(len: usize) -> [u8; 4] {
    (len as u32).to_le_bytes()
}

/// Supervisor → network process.
#[derive(Debug, Serialize, Deserialize)]
pub enum Control {
    /// A new worker for `mode`; the frame carries the network end of its socket.
    Worker { mode: Mode, pid: u32 },
    /// No worker will serve `mode` (or none until abandoned workers exit): why.
    Unavailable { mode: Mode, reason: String },
    /// A worker of `mode` survived its kill and was given up (`fsd_workers_abandoned_total`):
    /// sent for every one, replaced or past the cap, since the network process keeps the metrics.
    Abandoned { mode: Mode },
    /// Too many workers of `mode` are stuck where no kill reaches them: calls fail fast.
    Stuck { mode: Mode, abandoned: usize },
    /// `mode` is served again: enough abandoned workers finally exited.
    Available { mode: Mode },
    /// The supervisor heard [`ControlRequest::Stopping`] (or stops the daemon itself): the
    /// workers' exits that follow are not replaced. The network process closes their sockets
    /// only after this, so the order never depends on which channel is read first.
    StopSeen,
    /// A dead worker's transaction (if any) was recovered and its temporary files swept: the
    /// locks its last call held, kept since it was lost mid-transaction, may go.
    Recovered { pid: u32 },
    /// The TLS files changed and load: new handshakes use them (`tls::watch`). The supervisor
    /// reads them because the confined network process may not.
    Tls(crate::tls::TlsFiles),
}

/// Network process → supervisor.
#[derive(Debug, Serialize, Deserialize)]
pub enum ControlRequest {
    /// This worker overran its call's deadline: kill and replace it.
    Kill { pid: u32 },
    /// The listeners are bound and the process is confined: workers may start.
    Listening,
    /// The process cannot start (a listener that cannot bind, an unreadable TLS file...): why.
    /// It exits right after; the supervisor reports this one line.
    StartFailed { reason: String },
    /// The process has begun to stop (a signal, a server that failed): its workers' sockets
    /// close next, and their exits are not for replacing.
    Stopping,
    /// A worker's [`FromWorker::Stranded`], passed on with the directory's descriptor.
    RemoveStranded(Stranded),
}

/// A temporary file left outside the fence: its name in the directory the frame's descriptor
/// holds, and the inode it must still be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stranded {
    pub name: Vec<u8>,
    pub dev: u64,
    pub ino: u64,
}

/// Why a message could not be exchanged.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("peer closed the connection")]
    Closed,
    #[error("deadline passed")]
    TimedOut,
    #[error("i/o: {0}")]
    Io(#[source] std::io::Error),
    #[error("bad message: {0}")]
    Decode(#[source] postcard::Error),
}

pub fn send<T: Serialize>(
    socket: &UnixStream,
    message: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), IpcError> {
    let bytes = postcard::to_stdvec(message).map_err(IpcError::Decode)?;
    raw::send_frame(socket, &bytes, fd).map_err(IpcError::Io)
}

pub fn recv<T: for<'de> Deserialize<'de>>(socket: &UnixStream) -> Result<(T, Option<OwnedFd>), IpcError> {
    let (bytes, fd) = raw::recv_frame(socket).map_err(recv_error)?;
    let message = postcard::from_bytes(&bytes).map_err(IpcError::Decode)?;
    Ok((message, fd))
}

fn recv_error(e: RecvError) -> IpcError {
    match e {
        RecvError::Closed => IpcError::Closed,
        RecvError::TimedOut => IpcError::TimedOut,
        RecvError::Io(e) => IpcError::Io(e),
    }
}

/// [`send`] on the network process's runtime.
pub async fn send_async<T: Serialize>(
    frames: &AsyncFrames,
    message: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), IpcError> {
    let bytes = postcard::to_stdvec(message).map_err(IpcError::Decode)?;
    frames.send(&bytes, fd).await.map_err(IpcError::Io)
}

/// [`recv`] on the network process's runtime; decodes straight from the receive buffer.
pub async fn recv_async<T: for<'de> Deserialize<'de>>(
    frames: &mut AsyncFrames,
) -> Result<(T, Option<OwnedFd>), IpcError> {
    let (bytes, fd) = frames.recv().await.map_err(recv_error)?;
    let message = postcard::from_bytes(bytes).map_err(IpcError::Decode)?;
    Ok((message, fd))
}

#[cfg(test)]
mod tests {
    use fsd_proto::{ErrorCode, Reason, Step, TicketRefusal, WireError, WorkerLost};

    use super::*;

    fn pair() -> (UnixStream, UnixStream) {
        raw::pair().expect("socket pair")
    }

    #[test]
    fn a_failure_crosses_with_its_code_and_words_typed() {
        let (a, b) = pair();
        let sent = WireError::new(ErrorCode::SandboxDenied, "/ws/a.txt", "label")
            .with_reason(Reason::TicketRefused)
            .with_word(TicketRefusal::Expired)
            .with_word(Step::Rename)
            .with_word(WorkerLost::Died)
            .with("mode", "workspace-write");
        send(&a, &FromWorker::Reply(Err(sent.clone())), None).unwrap();
        let (got, _) = recv::<FromWorker>(&b).unwrap();
        assert!(matches!(got, FromWorker::Reply(Err(wire)) if wire == sent));
    }

    /// A code or a word this build does not know fails the frame: never `FS_IO_ERROR`, never a
    /// reason guessed.
    #[test]
    fn an_unknown_code_or_word_on_a_frame_is_a_decode_error() {
        let (a, b) = pair();
        // `FromWorker::Reply` (variant 2), `Err` (1), then a code index past every code: postcard
        // writes a variant index as the varint of a u32.
        let no_word: Option<u8> = None;
        let frame =
            |code: u32| (2u32, 1u32, code, "label", "/ws/a.txt", no_word, no_word, no_word, no_word, 0u8);
        // The same bytes with a known code decode: only the code is wrong below.
        raw::send_frame(&a, &postcard::to_stdvec(&frame(0)).unwrap(), None).unwrap();
        assert!(
            matches!(recv::<FromWorker>(&b), Ok((FromWorker::Reply(Err(wire)), _)) if wire.code == ErrorCode::ALL[0])
        );
        let unknown = ErrorCode::ALL.len() as u32 + 7;
        raw::send_frame(&a, &postcard::to_stdvec(&frame(unknown)).unwrap(), None).unwrap();
        assert!(matches!(recv::<FromWorker>(&b), Err(IpcError::Decode(_))));

        let mut unknown = WireError::new(ErrorCode::StaleVersion, "/ws/a.txt", "label");
        unknown.metadata.insert("reason".into(), "a reason of a newer build".into());
        send(&a, &FromWorker::Reply(Err(unknown)), None).unwrap();
        assert!(matches!(recv::<FromWorker>(&b), Err(IpcError::Decode(_))));
    }
}
