//! The task behind every streamed read, gRPC streamText and the REST face's GET alike: the
//! descriptor a worker opened is pumped from the shared reader pool into a bounded channel, the
//! caller's open-streams permit is held until the stream ends, and a reader that reads nothing
//! for the idle timeout has its stream cancelled and the descriptor closed.

use std::fs::File;

use fsd_proto::{ErrorCode, WireError};

use super::FsdService;
use crate::budget::Permit;
use crate::dispatch::stream;
use crate::error::{Failure, FsError, StaleReason};
use crate::op::{Mode, StreamHeader};

/// How one face's stream carries the file: what goes before the bytes, each chunk, what follows
/// a complete file (the version with the digest of every byte sent), and a failure.
pub(super) struct Shape<T> {
    pub header: Option<T>,
    pub chunk: fn(bytes::Bytes) -> T,
    pub trailer: fn(String) -> Option<T>,
    pub failed: fn(WireError) -> T,
}

/// Why a stream that did not reach the end of its file ended, as the daemon reports it; `None`
/// when its reader went away (nobody is left to tell).
fn ended_error(ended: stream::Ended, path: &str, idle: std::time::Duration) -> Option<WireError> {
    Some(match ended {
        stream::Ended::Gone => return None,
        stream::Ended::Idle => {
            tracing::info!(path = %path, idle_ms = idle.as_millis() as u64, "stream not read; cancelled");
            WireError::new(ErrorCode::Aborted, path, "stream idle; cancelled")
                .with_reason(fsd_proto::Reason::StreamIdle)
                .with("limit_ms", idle.as_millis().to_string())
        }
        stream::Ended::Read(e) => Failure::new(FsError::Read(e), path.to_owned()).into_wire(),
        stream::Ended::Changed => {
            Failure::new(FsError::Stale(StaleReason::ChangedWhileRead), path.to_owned()).into_wire()
        }
    })
}

impl FsdService {
    /// Streams an opened file in chunks of `chunk` bytes from a task (not a thread: it waits on
    /// the shared reader pool and on the reader's demand), one chunk read ahead (the pump reads
    /// only into room), so a stream whose reader stalls holds that chunk and the one HTTP/2
    /// waits to send, whatever the file's size; failures name `path`. `permit` (the caller's
    /// open stream) is given back when the stream ends, however it ends.
    pub(super) fn spawn_stream<T: Send + 'static>(
        &self,
        (header, file): (StreamHeader, File),
        path: String,
        chunk: usize,
        (mode, face): (Mode, crate::metrics::Face),
        permit: Permit,
        shape: Shape<T>,
    ) -> stream::Replies<T> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel();
        let dispatcher = self.dispatcher.clone();
        let idle = self.stream_idle;
        tokio::spawn(async move {
            let _open = (permit, crate::metrics::Open::stream());
            let sent_header = match shape.header {
                Some(item) => stream::send(&tx, item, idle).await,
                None => Ok(()),
            };
            let ended = match sent_header {
                Ok(()) => {
                    stream::pump(dispatcher.readers(), file, &header, chunk, idle, &tx, shape.chunk).await
                }
                Err(ended) => Err(ended),
            };
            let error = match ended {
                Ok(version) => {
                    crate::metrics::file_bytes(crate::metrics::Direction::Read, face, header.size);
                    if let Some(item) = (shape.trailer)(version) {
                        let _ = stream::send(&tx, item, idle).await;
                    }
                    return;
                }
                Err(ended) => match ended_error(ended, &path, idle) {
                    Some(error) => error,
                    None => return,
                },
            };
            let _ = cancel_tx.send((shape.failed)(error.with("mode", mode.as_str())));
        });
        stream::Replies::new(rx, cancel_rx)
    }
}
