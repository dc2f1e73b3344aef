//! The daemon's Prometheus metrics, kept by the network process and served as `/metrics` (the
//! text format) on the health listener and the HTTP listeners: calls by operation, mode, face
//! and result code; call latency per operation; audited decisions (denials, escalations by
//! outcome); budget refusals by budget; workers started and replaced, and abandoned, per mode;
//! open connections and streams; bytes read and written. Each is recorded in the one place its
//! event happens, through the functions here; the registry is the process's own (one network
//! process per daemon). With `metrics = false` nothing is recorded (each function returns at its
//! first check) and `/metrics` answers 404; so does the benchmark's build without telemetry
//! (`no-telemetry`, [`BUILT`]), where that check is a constant and every recording site, here
//! and in `traces`, is dead code.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::op::Mode;

/// The content type of the text format, as Prometheus negotiates it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How a call reached the daemon.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Face {
    /// fsd.v1 over gRPC (HTTP/2), on any listener.
    Grpc,
    /// fsd.v1 over gRPC-Web, on an HTTP listener.
    GrpcWeb,
    /// The agent-sandbox filesystem REST API.
    Rest,
}

impl Face {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Face::Grpc => "grpc",
            Face::GrpcWeb => "grpc-web",
            Face::Rest => "rest",
        }
    }
}

/// Which way file bytes went.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Direction {
    Read,
    Written,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Written => "written",
        }
    }
}

/// A worker's start: one of a mode's first pool, or one that replaced a worker that died.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum WorkerStart {
    Initial,
    Replacement,
}

impl WorkerStart {
    fn as_str(self) -> &'static str {
        match self {
            WorkerStart::Initial => "initial",
            WorkerStart::Replacement => "replacement",
        }
    }
}

/// Why a finished span never reached the collector.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum SpanDrop {
    /// The export queue (`trace_queue_spans`) was full: the collector is slower than the calls.
    QueueFull,
    /// The collector did not take an export (down, refusing, or slower than 5 s).
    ExportFailed,
    /// Still queued when the process stopped and the collector had not taken them in time.
    Shutdown,
}

impl SpanDrop {
    fn as_str(self) -> &'static str {
        match self {
            SpanDrop::QueueFull => "queue_full",
            SpanDrop::ExportFailed => "export_failed",
            SpanDrop::Shutdown => "shutdown",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpanDropLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    op: &'static str,
    mode: &'static str,
    face: &'static str,
    /// `ok` or the stable error code.
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    /// `call` or `escalation`.
    step: &'static str,
    decision: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    budget: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    mode: &'static str,
    start: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    direction: &'static str,
    face: &'static str,
}

struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Family<OpLabels, Histogram>,
    decisions: Family<DecisionLabels, Counter>,
    budget_refusals: Family<BudgetLabels, Counter>,
    workers: Family<WorkerLabels, Counter>,
    abandoned: Family<ModeLabels, Counter>,
    connections: Gauge,
    streams: Gauge,
    bytes: Family<BytesLabels, Counter>,
    spans_exported: Counter,
    spans_dropped: Family<SpanDropLabels, Counter>,
}

/// 100 µs to about 6.5 s, doubling: a small read on a warm cache to a large patch or a hung
/// worker's timeout.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut m = Metrics {
        registry: Registry::with_prefix("fsd"),
        calls: Family::default(),
        latency: Family::new_with_constructor(latency_histogram),
        decisions: Family::default(),
        budget_refusals: Family::default(),
        workers: Family::default(),
        abandoned: Family::default(),
        connections: Gauge::default(),
        streams: Gauge::default(),
        bytes: Family::default(),
        spans_exported: Counter::default(),
        spans_dropped: Family::default(),
    };
    m.registry.register(
        "calls",
        "fsd.v1 and REST calls by operation, mode, face and result code",
        m.calls.clone(),
    );
    m.registry.register(
        "call_duration_seconds",
        "Time from a call's grant to its outcome, per operation",
        m.latency.clone(),
    );
    m.registry.register(
        "decisions",
        "Audited decisions: calls allowed or denied, escalations by outcome",
        m.decisions.clone(),
    );
    m.registry.register(
        "budget_refusals",
        "Calls refused with FS_RATE_LIMITED, by budget",
        m.budget_refusals.clone(),
    );
    m.registry.register(
        "workers_started",
        "Worker processes that joined a mode's pool, first or replacing one that died",
        m.workers.clone(),
    );
    m.registry.register(
        "workers_abandoned",
        "Workers of a mode that survived their kill and were given up as stuck in the kernel",
        m.abandoned.clone(),
    );
    m.registry.register(
        "open_connections",
        "TCP connections open on the daemon's listeners",
        m.connections.clone(),
    );
    m.registry.register(
        "open_streams",
        "Streamed reads (StreamText, REST GET of a file) in progress",
        m.streams.clone(),
    );
    m.registry.register("file_bytes", "File content bytes read and written, by face", m.bytes.clone());
    m.registry.register(
        "spans_exported",
        "Trace spans the OTLP collector accepted",
        m.spans_exported.clone(),
    );
    m.registry.register(
        "spans_dropped",
        "Trace spans dropped: the export queue was full, or the collector did not take them",
        m.spans_dropped.clone(),
    );
    m
});

/// Whether this build records metrics and traces at all: always, but in the benchmark's
/// comparison build (cargo feature `no-telemetry`), which measures what the daemon configured
/// off still pays against a daemon with nothing to pay. The one place that feature is read.
pub const BUILT: bool = !cfg!(feature = "no-telemetry");

/// Whether calls, decisions, workers, connections and bytes are recorded (`metrics`).
static ON: AtomicBool = AtomicBool::new(true);

/// Turns recording off (`metrics = false`), once, before the first call.
pub fn set_enabled(enabled: bool) {
    ON.store(enabled, Ordering::Relaxed);
}

/// Whether metrics are kept and served.
pub fn enabled() -> bool {
    BUILT && ON.load(Ordering::Relaxed)
}

/// Spans the collector accepted.
pub fn spans_exported(count: usize) {
    if !enabled() {
        return;
    }
    METRICS.spans_exported.inc_by(count as u64);
}

/// Spans that never reached the collector: the sign of a collector that is down or cannot keep up.
pub fn spans_dropped(reason: SpanDrop, count: usize) {
    if !enabled() {
        return;
    }
    METRICS.spans_dropped.get_or_create(&SpanDropLabels { reason: reason.as_str() }).inc_by(count as u64);
}

/// One call's end, `started` then. The clock is read here, after the check, so a daemon that
/// keeps no metrics does not read it for them.
pub fn call(op: &'static str, mode: Mode, face: Face, code: &'static str, started: Instant) {
    if !enabled() {
        return;
    }
    record_call(op, mode, face, code, started.elapsed());
}

fn record_call(op: &'static str, mode: Mode, face: Face, code: &'static str, took: Duration) {
    let m = &*METRICS;
    m.calls.get_or_create(&CallLabels { op, mode: mode.as_str(), face: face.as_str(), code }).inc();
    m.latency.get_or_create(&OpLabels { op }).observe(took.as_secs_f64());
}

/// One audited decision; `escalation`: a step of an escalation rather than a call.
pub fn decision(escalation: bool, decision: &'static str) {
    if !enabled() {
        return;
    }
    let step = if escalation { "escalation" } else { "call" };
    METRICS.decisions.get_or_create(&DecisionLabels { step, decision }).inc();
}

/// One call refused by a budget.
pub fn budget_refusal(budget: &'static str) {
    if !enabled() {
        return;
    }
    METRICS.budget_refusals.get_or_create(&BudgetLabels { budget }).inc();
}

/// A worker joined `mode`'s pool.
pub fn worker_started(mode: Mode, start: WorkerStart) {
    if !enabled() {
        return;
    }
    METRICS.workers.get_or_create(&WorkerLabels { mode: mode.as_str(), start: start.as_str() }).inc();
}

/// One of `mode`'s workers was abandoned: replaced, or past `max_abandoned_workers`.
pub fn worker_abandoned(mode: Mode) {
    if !enabled() {
        return;
    }
    METRICS.abandoned.get_or_create(&ModeLabels { mode: mode.as_str() }).inc();
}

/// File content bytes that went one way.
pub fn file_bytes(direction: Direction, face: Face, bytes: u64) {
    if !enabled() {
        return;
    }
    METRICS
        .bytes
        .get_or_create(&BytesLabels { direction: direction.as_str(), face: face.as_str() })
        .inc_by(bytes);
}

/// Counted open while it lives: a connection or a stream.
#[derive(Debug)]
pub struct Open(Option<&'static Gauge>);

impl Open {
    pub fn connection() -> Open {
        Open::of(|m| &m.connections)
    }

    pub fn stream() -> Open {
        Open::of(|m| &m.streams)
    }

    /// The registry is reached only after the check: with metrics off it is never built.
    fn of(gauge: fn(&'static Metrics) -> &'static Gauge) -> Open {
        if !enabled() {
            return Open(None);
        }
        let gauge = gauge(&METRICS);
        gauge.inc();
        Open(Some(gauge))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(gauge) = self.0 {
            gauge.dec();
        }
    }
}

/// A tower layer that answers `GET /metrics` itself and passes every other request on: the
/// health listener's gRPC server serves the metrics beside `grpc.health.v1` (over HTTP/1.1 for
/// scrapers, which that listener accepts for this).
#[derive(Debug, Clone, Copy, Default)]
pub struct Endpoint;

impl<S> tower::Layer<S> for Endpoint {
    type Service = Served<S>;

    fn layer(&self, inner: S) -> Served<S> {
        Served(inner)
    }
}

#[derive(Debug, Clone)]
pub struct Served<S>(S);

type Http<B> = tonic::codegen::http::Request<B>;
type HttpResponse = tonic::codegen::http::Response<tonic::body::Body>;

impl<S, B> tower::Service<Http<B>> for Served<S>
where
    S: tower::Service<Http<B>, Response = HttpResponse>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = HttpResponse;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<HttpResponse, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Http<B>) -> Self::Future {
        use tonic::codegen::http;
        if request.method() == http::Method::GET && request.uri().path() == "/metrics" {
            return Box::pin(std::future::ready(Ok(response())));
        }
        Box::pin(self.0.call(request))
    }
}

/// The answer to `GET /metrics`: the text format, or 404 when metrics are off, saying why.
pub fn response() -> HttpResponse {
    use tonic::codegen::http;
    let (status, text) = match (enabled(), BUILT) {
        (true, _) => (http::StatusCode::OK, render()),
        (false, true) => (http::StatusCode::NOT_FOUND, "metrics are off (metrics = false)\n".to_owned()),
        (false, false) => (
            http::StatusCode::NOT_FOUND,
            "metrics are not in this build (no-telemetry: a benchmark's build)\n".to_owned(),
        ),
    };
    let body = tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(text)));
    let mut response = http::Response::new(body);
    *response.status_mut() = status;
    let content_type = if enabled() { CONTENT_TYPE } else { "text/plain; charset=utf-8" };
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}

/// The metrics in the Prometheus text format.
pub fn render() -> String {
    let mut text = String::new();
    // Writing into a String cannot fail; an encoder error would leave the text short, which a
    // scraper reports.
    let _ = prometheus_client::encoding::text::encode(&mut text, &METRICS.registry);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text names every family with its labels, in the format a Prometheus server parses
    /// (checked end to end by tests/tests/metrics.rs). The registry is the process's: other unit
    /// tests record into it too, so these events carry label values of their own.
    #[test]
    fn recorded_events_show_in_the_text() {
        record_call("unitTestOp", Mode::ReadOnly, Face::Rest, "ok", Duration::from_micros(300));
        decision(true, "unit-test");
        budget_refusal("unit_test_budget");
        worker_started(Mode::WorkspaceWrite, WorkerStart::Replacement);
        worker_abandoned(Mode::WorkspaceWrite);
        file_bytes(Direction::Written, Face::GrpcWeb, 42);
        let text = render();
        for line in [
            "fsd_calls_total{op=\"unitTestOp\",mode=\"read-only\",face=\"rest\",code=\"ok\"} 1",
            "fsd_call_duration_seconds_bucket{le=\"0.0002\",op=\"unitTestOp\"} 0",
            "fsd_call_duration_seconds_bucket{le=\"0.0004\",op=\"unitTestOp\"} 1",
            "fsd_decisions_total{step=\"escalation\",decision=\"unit-test\"} 1",
            "fsd_budget_refusals_total{budget=\"unit_test_budget\"} 1",
            "fsd_workers_started_total{mode=\"workspace-write\",start=\"replacement\"} 1",
            "fsd_workers_abandoned_total{mode=\"workspace-write\"} 1",
            "fsd_file_bytes_total{direction=\"written\",face=\"grpc-web\"} 42",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        assert!(text.lines().any(|l| l.starts_with("fsd_open_streams ")), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
