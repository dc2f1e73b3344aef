//! Streamed reads without a thread each: every open stream is a task that asks a small reader
//! pool, shared by all streams, for its next chunk (a regular file cannot be polled for
//! readiness, so someone must block in `pread`; a few threads do it for everyone). A stream
//! whose reader stops reading for the idle timeout is cancelled and its descriptor closed.

use std::fs::File;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::digest::Digest;
use crate::op::StreamHeader;

/// Hashes a streamed file's chunks as they pass, so that a stream that reached the end yields a
/// version with a digest without a second read.
#[derive(Debug, Default)]
pub struct StreamDigest {
    hasher: Digest,
    sent: u64,
}

impl StreamDigest {
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.sent += bytes.len() as u64;
    }

    /// Bytes hashed so far: the offset of the next chunk.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// The header's version completed with the digest; `None` when the length sent differs
    /// from the one opened (the file changed while it was sent).
    pub fn finish(&self, header: &StreamHeader) -> Option<String> {
        (self.sent == header.size).then(|| {
            fsd_proto::version::with_digest(header.version.clone(), self.sent, &self.hasher.clone().finish())
        })
    }
}

/// One chunk to read, and the digest of the stream's bytes so far when it is to be hashed too.
/// The reader thread hands the bytes back first and hashes them after: the chunk is on its way
/// to the client while it is hashed, so the digest is off the path from one chunk to the next
/// (it soaks up CPU the stream leaves idle instead of delaying the send).
struct Job {
    file: Arc<File>,
    offset: u64,
    len: usize,
    digest: Option<Hashing>,
    reply: oneshot::Sender<std::io::Result<Bytes>>,
}

/// A digest to extend with a job's bytes, and where it goes once they are hashed in.
struct Hashing {
    digest: Box<StreamDigest>,
    done: oneshot::Sender<Box<StreamDigest>>,
}

/// The reader pool. Each stream has at most one job queued, so the queue is bounded by the
/// number of open streams (itself capped per identity).
#[derive(Debug, Clone)]
pub struct Readers {
    jobs: std_mpsc::Sender<JobBox>,
}

/// `Job` behind a box so `Readers` can derive Debug without exposing the job.
struct JobBox(Job);

impl std::fmt::Debug for JobBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("offset", &self.0.offset).field("len", &self.0.len).finish()
    }
}

impl Readers {
    /// Starts `threads` readers.
    pub fn start(threads: usize) -> std::io::Result<Readers> {
        let jobs = super::threads::start("fsd-reader", threads, |JobBox(job)| {
            if job.reply.is_closed() {
                return;
            }
            let bytes = crate::sys::read_at_most(&job.file, job.offset, job.len)
                .map(Bytes::from)
                .map_err(std::io::Error::from);
            let shared = bytes.as_ref().ok().cloned();
            let _ = job.reply.send(bytes);
            if let (Some(bytes), Some(mut hashing)) = (shared, job.digest) {
                hashing.digest.update(&bytes);
                let _ = hashing.done.send(hashing.digest);
            }
        })?;
        Ok(Readers { jobs })
    }

    async fn submit(
        &self,
        file: Arc<File>,
        offset: u64,
        len: usize,
        digest: Option<Hashing>,
    ) -> std::io::Result<Bytes> {
        let (reply, rx) = oneshot::channel();
        self.jobs.send(JobBox(Job { file, offset, len, digest, reply })).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Reads up to `len` bytes at `offset` (fewer only at the end of the file).
    pub async fn read(&self, file: Arc<File>, offset: u64, len: usize) -> std::io::Result<Bytes> {
        self.submit(file, offset, len, None).await
    }

    /// [`Readers::read`], then `digest` extended with the bytes read, which arrives once they
    /// are hashed (after the bytes themselves).
    async fn read_hashed(
        &self,
        file: Arc<File>,
        offset: u64,
        len: usize,
        digest: Box<StreamDigest>,
    ) -> std::io::Result<(Bytes, oneshot::Receiver<Box<StreamDigest>>)> {
        let (done, hashed) = oneshot::channel();
        let bytes = self.submit(file, offset, len, Some(Hashing { digest, done })).await?;
        Ok((bytes, hashed))
    }
}

fn stopped() -> std::io::Error {
    std::io::Error::other("the reader pool stopped")
}

/// How a pumped stream ended, when not by reaching the end of the file.
#[derive(Debug)]
pub enum Ended {
    /// The reader stopped reading for the idle timeout.
    Idle,
    /// The reader went away.
    Gone,
    /// Reading the file failed.
    Read(std::io::Error),
    /// The file was truncated, grew or was rewritten while it was read (or it reports a size
    /// it does not have): what was sent is not the file.
    Changed,
}

/// Sends `file` in chunks of `chunk` bytes into `tx`, converting each with `wrap`; gives up
/// when the channel has no room for longer than `idle` (the reader stopped reading). A chunk is
/// read only once there is room for it, so a stalled stream holds no bytes of its own beyond
/// what its channel holds. Sends exactly the file's size at the start: a file that ends early,
/// has bytes past that size (a size-0 procfs or FUSE file that never ends) or whose metadata
/// changed by the end is [`Ended::Changed`], never a stream that passes for the whole file. The
/// chunks are hashed as they are read (on the reader threads): having sent the whole file, it
/// returns the version `header` completed with the digest of every byte sent.
pub async fn pump<T>(
    readers: &Readers,
    file: File,
    header: &StreamHeader,
    chunk: usize,
    idle: Duration,
    tx: &mpsc::Sender<T>,
    wrap: impl Fn(Bytes) -> T,
) -> Result<String, Ended> {
    use std::os::fd::AsFd;
    let at_open = crate::sys::meta(file.as_fd()).map_err(|e| Ended::Read(e.into()))?;
    let file = Arc::new(file);
    let mut sent = 0u64;
    // The digest of every byte sent so far, or the hashing of the last chunk that extends it.
    let mut digest = Box::<StreamDigest>::default();
    let mut hashing: Option<oneshot::Receiver<Box<StreamDigest>>> = None;
    while sent < at_open.size {
        let want = chunk.min(usize::try_from(at_open.size - sent).unwrap_or(usize::MAX));
        let room = match tokio::time::timeout(idle, tx.reserve()).await {
            Ok(Ok(room)) => room,
            Ok(Err(_)) => return Err(Ended::Gone),
            Err(_) => return Err(Ended::Idle),
        };
        if let Some(hashed) = hashing.take() {
            digest = hashed.await.map_err(|_| Ended::Read(stopped()))?;
        }
        let bytes = if HASHED {
            let taken = std::mem::take(&mut digest);
            let (bytes, hashed) =
                readers.read_hashed(file.clone(), sent, want, taken).await.map_err(Ended::Read)?;
            hashing = Some(hashed);
            bytes
        } else {
            readers.read(file.clone(), sent, want).await.map_err(Ended::Read)?
        };
        if bytes.len() < want {
            return Err(Ended::Changed);
        }
        sent += bytes.len() as u64;
        room.send(wrap(bytes));
    }
    if let Some(hashed) = hashing.take() {
        digest = hashed.await.map_err(|_| Ended::Read(stopped()))?;
    }
    if !readers.read(file.clone(), sent, 1).await.map_err(Ended::Read)?.is_empty() {
        return Err(Ended::Changed);
    }
    if !crate::sys::meta(file.as_fd()).is_ok_and(|now| now.read_unchanged(&at_open)) {
        return Err(Ended::Changed);
    }
    if !HASHED {
        return Ok(header.version.clone());
    }
    digest.finish(header).ok_or(Ended::Changed)
}

/// Whether streamed reads are hashed: always, but in the benchmark's comparison build.
const HASHED: bool = !cfg!(feature = "unhashed-streams");

/// Sends one item, waiting for room at most `idle`.
pub async fn send<T>(tx: &mpsc::Sender<T>, item: T, idle: Duration) -> Result<(), Ended> {
    match tokio::time::timeout(idle, tx.send(item)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Ended::Gone),
        Err(_) => Err(Ended::Idle),
    }
}

/// The reply stream of a streamed read: the items the pump sends, or, once the pump cancelled
/// the stream, the one error it left in `cancelled` (the channel itself may be full).
#[derive(Debug)]
pub struct Replies<T> {
    rx: mpsc::Receiver<T>,
    cancelled: Option<oneshot::Receiver<T>>,
}

impl<T> Replies<T> {
    pub fn new(rx: mpsc::Receiver<T>, cancelled: oneshot::Receiver<T>) -> Replies<T> {
        Replies { rx, cancelled: Some(cancelled) }
    }
}

impl<T> tokio_stream::Stream for Replies<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(cancelled) = self.cancelled.as_mut() {
            match Pin::new(cancelled).poll(cx) {
                Poll::Ready(Ok(error)) => {
                    // Buffered chunks are dropped: the stream is over.
                    self.cancelled = None;
                    self.rx.close();
                    while self.rx.try_recv().is_ok() {}
                    return Poll::Ready(Some(error));
                }
                Poll::Ready(Err(_)) => self.cancelled = None,
                Poll::Pending => {}
            }
        }
        self.rx.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio_stream::StreamExt;

    #[tokio::test]
    async fn a_file_is_pumped_in_chunks_through_the_shared_readers() {
        let readers = Readers::start(2).expect("readers");
        let mut file = tempfile::tempfile().expect("tempfile");
        let data: Vec<u8> = (0..10_000u32).map(|n| (n % 251) as u8).collect();
        file.write_all(&data).expect("write");
        let (tx, mut rx) = mpsc::channel(64);
        let header = StreamHeader {
            target: crate::op::Target { key: "k".into(), display: "d".into() },
            version: "v".into(),
            size: data.len() as u64,
        };
        let version =
            pump(&readers, file, &header, 4096, Duration::from_secs(5), &tx, |b| b).await.expect("pump");
        // Hashed chunk by chunk on the reader threads: the digest of the whole file, in order.
        let mut whole = StreamDigest::default();
        whole.update(&data);
        assert_eq!(Some(version), whole.finish(&header), "a stream that reached the end carries a digest");
        drop(tx);
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(chunk) = rx.recv().await {
            sizes.push(chunk.len());
            got.extend(chunk);
        }
        assert_eq!(sizes, vec![4096, 4096, 1808]);
        assert_eq!(got, data);
    }

    #[tokio::test]
    async fn a_file_that_is_not_its_size_is_a_changed_stream() {
        let readers = Readers::start(1).expect("readers");
        // /proc files report size 0 and keep answering: nothing is sent, the stream fails.
        let file = File::open("/proc/self/status").expect("procfs");
        let (tx, mut rx) = mpsc::channel(64);
        let header = StreamHeader {
            target: crate::op::Target { key: "k".into(), display: "d".into() },
            version: "v".into(),
            size: 0,
        };
        let ended = pump(&readers, file, &header, 4096, Duration::from_secs(5), &tx, |b| b).await;
        assert!(matches!(ended, Err(Ended::Changed)), "{ended:?}");
        drop(tx);
        assert!(rx.recv().await.is_none());

        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(&[1u8; 100_000]).expect("write");
        let cut = file.try_clone().expect("clone");
        let (tx, mut rx) = mpsc::channel(64);
        let first = std::sync::atomic::AtomicBool::new(true);
        let wrap = |b: Bytes| {
            if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                cut.set_len(5000).expect("truncate");
            }
            b.len()
        };
        let header = StreamHeader {
            target: crate::op::Target { key: "k".into(), display: "d".into() },
            version: "v".into(),
            size: 100_000,
        };
        let ended = pump(&readers, file, &header, 4096, Duration::from_secs(5), &tx, wrap).await;
        assert!(matches!(ended, Err(Ended::Changed)), "{ended:?}");
        drop(tx);
        let mut sent = 0;
        while let Some(n) = rx.recv().await {
            sent += n;
        }
        assert!(sent < 100_000, "{sent}");
    }

    #[tokio::test]
    async fn a_reader_that_stops_reading_cancels_the_stream() {
        let readers = Readers::start(1).expect("readers");
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(&[7u8; 64 << 10]).expect("write");
        let (tx, rx) = mpsc::channel(1);
        let (cancel_tx, cancel_rx) = oneshot::channel();
        let mut replies = Replies::new(rx, cancel_rx);
        let header = StreamHeader {
            target: crate::op::Target { key: "k".into(), display: "d".into() },
            version: "v".into(),
            size: 64 << 10,
        };
        let read = std::sync::atomic::AtomicUsize::new(0);
        let wrap = |b: Bytes| {
            read.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            b.len()
        };
        let ended = pump(&readers, file, &header, 4096, Duration::from_millis(100), &tx, wrap).await;
        assert!(matches!(ended, Err(Ended::Idle)), "{ended:?}");
        // Only the chunk that found room was read: a stalled stream holds nothing more.
        assert_eq!(read.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(cancel_tx.send(0).is_ok());
        drop(tx);
        // The error comes first, then the stream ends: the buffered chunk is not delivered.
        assert_eq!(replies.next().await, Some(0));
        assert_eq!(replies.next().await, None);
    }
}
