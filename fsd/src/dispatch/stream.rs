//! Streamed reads without a thread each: every open stream is a task that asks a small reader
//! pool, shared by all streams, for its next chunk (a regular file cannot be polled for
//! readiness, so someone must block in `pread`; a few threads do it for everyone). A stream
//! whose reader stops reading for the idle timeout is cancelled and its descriptor closed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// One chunk to read.
struct Job {
    file: Arc<File>,
    offset: u64,
    len: usize,
    reply: oneshot::Sender<std::io::Result<Vec<u8>>>,
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
        let (tx, rx) = std_mpsc::channel::<JobBox>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("fsd-reader-{n}")).spawn(move || {
                loop {
                    let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(JobBox(job)) = job else { return };
                    if job.reply.is_closed() {
                        continue;
                    }
                    let _ = job.reply.send(read_chunk(&job.file, job.offset, job.len));
                }
            })?;
        }
        Ok(Readers { jobs: tx })
    }

    /// Reads up to `len` bytes at `offset` (fewer only at the end of the file).
    pub async fn read(&self, file: Arc<File>, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(JobBox(Job { file, offset, len, reply }))
            .map_err(|_| std::io::Error::other("the reader pool stopped"))?;
        rx.await.map_err(|_| std::io::Error::other("the reader pool stopped"))?
    }
}

fn read_chunk(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
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
}

/// Sends `file` in chunks of `chunk` bytes into `tx`, converting each with `wrap`; gives up
/// when a chunk waits longer than `idle` for room (the reader stopped reading).
pub async fn pump<T>(
    readers: &Readers,
    file: File,
    chunk: usize,
    idle: Duration,
    tx: &mpsc::Sender<T>,
    wrap: impl Fn(Vec<u8>) -> T,
) -> Result<(), Ended> {
    let file = Arc::new(file);
    let mut offset = 0u64;
    loop {
        let bytes = readers.read(file.clone(), offset, chunk).await.map_err(Ended::Read)?;
        if bytes.is_empty() {
            return Ok(());
        }
        let last = bytes.len() < chunk;
        offset += bytes.len() as u64;
        send(tx, wrap(bytes), idle).await?;
        if last {
            return Ok(());
        }
    }
}

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
#[allow(clippy::expect_used)]
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
        pump(&readers, file, 4096, Duration::from_secs(5), &tx, |b| b).await.expect("pump");
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
    async fn a_reader_that_stops_reading_cancels_the_stream() {
        let readers = Readers::start(1).expect("readers");
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(&[7u8; 64 << 10]).expect("write");
        let (tx, rx) = mpsc::channel(1);
        let (cancel_tx, cancel_rx) = oneshot::channel();
        let mut replies = Replies::new(rx, cancel_rx);
        let ended = pump(&readers, file, 4096, Duration::from_millis(100), &tx, |b| b.len()).await;
        assert!(matches!(ended, Err(Ended::Idle)), "{ended:?}");
        assert!(cancel_tx.send(0).is_ok());
        drop(tx);
        // The error comes first, then the stream ends: the buffered chunk is not delivered.
        assert_eq!(replies.next().await, Some(0));
        assert_eq!(replies.next().await, None);
    }
}
