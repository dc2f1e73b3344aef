//! Calls from faces that are not fsd.v1 (the REST face): the same grant, worker dispatch, logs
//! and audit records as a gRPC call, answered with the daemon's own types. The caller's identity
//! comes from the same edge; a REST call names no session and asks for no mode, so it runs at the
//! caller's default mode.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fsd_proto::{ErrorCode, WireError};

use super::FsdService;
use super::grant::{Caller, Decision, Step};
use super::streamed::Shape;
use crate::dispatch::stream::Replies;
use crate::identity::Identity;
use crate::op::{self, Mode, Outcome, StreamHeader};

/// How long an upload's client may send slower than `min_upload_bytes_per_sec` before it is
/// held to it: a start, a pause, a slow first second of a connection.
const UPLOAD_GRACE: Duration = Duration::from_secs(10);

/// The write end of an upload's pipe: frames go in, the worker reads them.
#[derive(Debug)]
pub struct BodySink {
    pipe: tokio::net::unix::pipe::Sender,
    sent: u64,
    meter: Arc<Mutex<Meter>>,
    /// Set once the body is worth a worker: its pipe is full, or it is complete (dropped: the
    /// client went away). Until then the upload holds no worker.
    primed: tokio::sync::watch::Sender<bool>,
}

/// How an upload's client keeps up: what it sent, and the time its body waited for the worker
/// (a full pipe: a queued call, a slow disk), which is not the client's to account for.
#[derive(Debug)]
struct Meter {
    started: Instant,
    sent: u64,
    waited: Duration,
    waiting_since: Option<Instant>,
    done: bool,
}

impl Meter {
    fn new() -> Meter {
        Meter { started: Instant::now(), sent: 0, waited: Duration::ZERO, waiting_since: None, done: false }
    }

    /// Whether the client has sent less than `rate` bytes a second over its own time, the
    /// grace aside.
    fn behind(&self, rate: u64, now: Instant) -> bool {
        let waiting = self.waiting_since.map_or(Duration::ZERO, |since| now - since);
        let client = (now - self.started).saturating_sub(self.waited + waiting);
        let owed = client.saturating_sub(UPLOAD_GRACE).as_secs_f64() * rate as f64;
        !self.done && client > UPLOAD_GRACE && (self.sent as f64) < owed
    }
}

fn meter(meter: &Mutex<Meter>) -> std::sync::MutexGuard<'_, Meter> {
    meter.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves once the upload's client falls behind `rate` (never when `rate` is 0).
async fn too_slow(upload: &Mutex<Meter>, rate: u64) {
    if rate == 0 {
        return std::future::pending().await;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if meter(upload).behind(rate, Instant::now()) {
            return;
        }
    }
}

/// Why a body could not be passed on: the worker stopped reading (it refused the call or hit a
/// limit; its reply says which).
#[derive(Debug)]
pub struct SinkClosed;

impl BodySink {
    /// Passes on one chunk of the body.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), SinkClosed> {
        for chunk in bytes.chunks(crate::ipc_messages::MAX_BODY_FRAME) {
            meter(&self.meter).waiting_since = Some(Instant::now());
            let written = async {
                self.put(&crate::ipc_messages::body_frame_header(chunk.len())).await?;
                self.put(chunk).await
            }
            .await;
            let mut upload = meter(&self.meter);
            if let Some(since) = upload.waiting_since.take() {
                upload.waited += since.elapsed();
            }
            written.map_err(|_| SinkClosed)?;
            self.sent += chunk.len() as u64;
            upload.sent = self.sent;
        }
        Ok(())
    }

    /// The body is complete. Dropping the sink without this abandons the write.
    pub async fn finish(mut self) -> Result<(), SinkClosed> {
        meter(&self.meter).done = true;
        let ended = self.put(&crate::ipc_messages::body_frame_header(0)).await.map_err(|_| SinkClosed);
        self.primed.send_replace(true);
        ended
    }

    /// Writes `bytes` into the pipe; the first time the pipe is full, the upload is primed.
    async fn put(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            // Ready first: a write tried before the runtime saw the pipe writable is refused
            // without asking the kernel, which would look like a full pipe.
            self.pipe.writable().await?;
            match self.pipe.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                // The kernel's answer: the pipe holds all it can.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.primed.send_replace(true);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn sent(&self) -> u64 {
        self.sent
    }
}

fn internal(path: &str, what: impl std::fmt::Display) -> WireError {
    WireError::new(ErrorCode::IoError, path, what.to_string())
}

impl FsdService {
    fn plain_caller(identity: Identity) -> Caller {
        Caller { identity, session: String::new(), call: String::new(), face: crate::metrics::Face::Rest }
    }

    /// The mode a plain call runs at.
    fn plain_mode(&self, caller: &Caller, path: &str, op: crate::op::Op) -> Result<Mode, WireError> {
        self.mode(caller, None, path, op).map(|grant| grant.mode).map_err(|status| {
            WireError::from_status(&status).unwrap_or_else(|| internal(path, status.message()))
        })
    }

    /// Logs and audits the end of a plain call.
    fn plain_done(
        &self,
        caller: &Caller,
        op: crate::op::Op,
        path: &str,
        mode: Mode,
        result: &Result<Outcome, WireError>,
        started: std::time::Instant,
    ) {
        super::measure(caller, op, mode, result, 0, started);
        if let Err(w) = result {
            tracing::info!(op = op.name(), mode = mode.as_str(), path = %w.path, code = %w.code, error = %w.message, "refused");
        }
        if op.is_mutation() {
            let code = result.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
            let decision = Decision::of_call(result.as_ref().err().map(|w| w.code));
            self.audit(caller, Step::Call(op), path, mode, decision, code);
        }
    }

    /// One operation for a caller of another face.
    pub async fn call_as(&self, identity: Identity, request: op::Request) -> Result<Outcome, WireError> {
        let caller = Self::plain_caller(identity);
        let (op, path) = (request.op(), request.path().to_owned());
        // Over budget: refused before anything else happens, so nothing is touched.
        let _in_flight = self.budgets.call(&caller.identity).map_err(|r| r.into_wire(&path))?;
        let mode = self.plain_mode(&caller, &path, op)?;
        let started = std::time::Instant::now();
        // Another face's calls are never escalated: a plain read may run directly.
        let request = request.recorded(caller.author(false));
        let result = self.dispatcher.read(mode, &caller.client(), request).await;
        let result = result.map_err(|w| w.with("mode", mode.as_str()));
        self.plain_done(&caller, op, &path, mode, &result, started);
        result
    }

    /// A streamed read for a caller of another face, on the machinery of streamText: the
    /// shared reader pool, the caller's open-streams budget (held until the stream ends) and
    /// the idle timeout. The items are chunks of `chunk` bytes, or the one error that ended the
    /// stream early (nothing follows it).
    pub async fn stream_as(
        &self,
        identity: Identity,
        path: &str,
        chunk: usize,
    ) -> Result<(StreamHeader, Replies<Result<bytes::Bytes, WireError>>), WireError> {
        let caller = Self::plain_caller(identity);
        let call_permit = self.budgets.call(&caller.identity).map_err(|r| r.into_wire(path))?;
        let mode = self.plain_mode(&caller, path, crate::op::Op::StreamText)?;
        let started = std::time::Instant::now();
        let opened = self.dispatcher.open_read_stream(mode, &caller.client(), path).await;
        super::measure_open(&caller, mode, &opened, started);
        let (header, file) = opened.map_err(|w| w.with("mode", mode.as_str()))?;
        // Taken once the path proved a file: a GET of a directory is a listing, not a stream,
        // and must not be refused for the caller's open streams.
        let stream_permit = self.budgets.stream(&caller.identity).map_err(|r| r.into_wire(path))?;
        drop(call_permit);
        let shape = Shape { header: None, chunk: Ok, trailer: |_| None, failed: Err };
        let replies = self.spawn_stream(
            (header.clone(), file),
            path.to_owned(),
            chunk,
            (mode, caller.face),
            stream_permit,
            shape,
        );
        Ok((header, replies))
    }

    /// A streamed write (`Request::WriteBytes`): `feed` passes the body into the sink while a
    /// worker writes it; it finishes the sink when the body is complete. Returns what `feed`
    /// returned (`None` when the call was refused before it began) and the outcome.
    pub async fn write_stream_as<F, Fut, T>(
        &self,
        identity: Identity,
        request: op::Request,
        feed: F,
    ) -> (Option<T>, Result<Outcome, WireError>)
    where
        F: FnOnce(BodySink) -> Fut,
        Fut: Future<Output = T>,
    {
        let caller = Self::plain_caller(identity);
        let (op, path) = (request.op(), request.path().to_owned());
        let _in_flight = match self.budgets.call(&caller.identity) {
            Ok(permit) => permit,
            Err(r) => return (None, Err(r.into_wire(&path))),
        };
        let mode = match self.plain_mode(&caller, &path, op) {
            Ok(mode) => mode,
            Err(w) => return (None, Err(w)),
        };
        if let Err(w) = self.may_create(&caller, mode, &request).await {
            return (None, Err(w));
        }
        self.stream_write(&caller, mode, request, feed).await
    }

    /// The streamed write itself, at a granted mode: the body flows into a pipe while a worker
    /// writes it; logged and audited like every mutation.
    pub(super) async fn stream_write<F, Fut, T>(
        &self,
        caller: &Caller,
        mode: Mode,
        request: op::Request,
        feed: F,
    ) -> (Option<T>, Result<Outcome, WireError>)
    where
        F: FnOnce(BodySink) -> Fut,
        Fut: Future<Output = T>,
    {
        let (op, path) = (request.op(), request.path().to_owned());
        let (read, write) = match crate::sys::pipe() {
            Ok(pair) => pair,
            Err(e) => return (None, Err(internal(&path, format!("cannot make a pipe: {e}")))),
        };
        let pipe = match tokio::net::unix::pipe::Sender::from_owned_fd(write) {
            Ok(pipe) => pipe,
            Err(e) => return (None, Err(internal(&path, format!("cannot use the pipe: {e}")))),
        };
        // The body flows while the worker writes it: both futures are polled together. A client
        // that falls behind the minimum rate is cut off: its body and its place among the
        // workers are let go at once, and the worker, if it had begun, sees the body end early.
        let started = std::time::Instant::now();
        let client = caller.client();
        let escalated = self.escalated(caller, mode);
        let request = request.recorded(caller.author(escalated));
        // A worker is taken only once the body fills its pipe or is complete (or its client
        // went away): however slowly a body trickles in, it holds no worker until it has a
        // pipe's worth waiting, and a small body is written at once, whole. What waits is in
        // the pipe, as before: the network process reads no more of an upload than that.
        let (primed, mut ready) = tokio::sync::watch::channel(false);
        let worker = async move {
            // An error: the sink is gone, so the body is complete or abandoned.
            let _ = ready.wait_for(|primed| *primed).await;
            self.dispatcher.call_with_body(mode, &client, request, read).await
        };
        let upload = Arc::new(Mutex::new(Meter::new()));
        let sink = BodySink { pipe, sent: 0, meter: upload.clone(), primed };
        let rate = self.limits.min_upload_bytes_per_sec;
        let (fed, result) = tokio::select! {
            both = async { tokio::join!(feed(sink), worker) } => (Some(both.0), both.1),
            () = too_slow(&upload, rate) => {
                let message = format!("the upload's body came slower than {rate} bytes a second");
                let slow = WireError::new(ErrorCode::Aborted, &path, message)
                    .with_reason(fsd_proto::Reason::UploadTooSlow)
                    .with("limit", rate.to_string());
                (None, Err(slow))
            }
        };
        let result = result.map_err(|w| w.with("mode", mode.as_str()));
        if let Ok(Outcome::WriteBytes { operation: op::WriteOperation::Create, .. }) = &result {
            self.budgets.created(&caller.identity, 1);
        }
        self.plain_done(caller, op, &path, mode, &result, started);
        (fed, result)
    }

    /// Whether every mode this daemon serves has a live worker (what `/v1/health` reports).
    /// Why the direct read path does not serve, if it does not (for health).
    pub fn direct_reads_off(&self) -> Option<String> {
        self.dispatcher.direct().off_reason().map(|off| off.describe())
    }

    pub fn all_modes_served(&self, modes: &[Mode]) -> bool {
        let report = self.dispatcher.report();
        modes
            .iter()
            .all(|m| report.iter().any(|r| r.mode == *m && r.live_workers > 0 && r.unavailable.is_none()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_upload_is_worth_a_worker_once_its_pipe_is_full_or_its_body_complete() {
        // (bytes sent, body finished, primed): nothing reads the pipe (no worker yet).
        let cases =
            [(100, false, false), (60 << 10, false, false), (100, true, true), (256 << 10, false, true)];
        for (bytes, finished, primed) in cases {
            let (_read, write) = crate::sys::pipe().unwrap();
            let (tell, ready) = tokio::sync::watch::channel(false);
            let pipe = tokio::net::unix::pipe::Sender::from_owned_fd(write).unwrap();
            let mut sink =
                BodySink { pipe, sent: 0, meter: Arc::new(Mutex::new(Meter::new())), primed: tell };
            let _ = tokio::time::timeout(Duration::from_millis(300), async {
                let _ = sink.send(&vec![b'x'; bytes]).await;
                if finished {
                    let _ = sink.finish().await;
                }
            })
            .await;
            assert_eq!(*ready.borrow(), primed, "{bytes} bytes, finished: {finished}");
        }
    }

    #[test]
    fn an_upload_falls_behind_only_on_its_clients_time_past_the_grace() {
        let start = Instant::now();
        let s = Duration::from_secs;
        // (seconds since the start, seconds waited for the worker, bytes sent, done, behind)
        let cases = [
            (5, 0, 0, false, false),
            (11, 0, 0, false, true),
            (11, 0, 20_000, false, false),
            (20, 0, 150_000, false, true),
            (20, 0, 170_000, false, false),
            (40, 30, 0, false, false),
            (40, 25, 0, false, true),
            (100, 0, 0, true, false),
        ];
        for (at, waited, sent, done, behind) in cases {
            let meter = Meter { started: start, sent, waited: s(waited), waiting_since: None, done };
            assert_eq!(
                meter.behind(16 << 10, start + s(at)),
                behind,
                "{at} s, waited {waited} s, {sent} bytes"
            );
        }
        let waiting =
            Meter { started: start, sent: 0, waited: s(0), waiting_since: Some(start + s(1)), done: false };
        assert!(!waiting.behind(16 << 10, start + s(60)), "time waiting for the worker is not the client's");
    }
}
