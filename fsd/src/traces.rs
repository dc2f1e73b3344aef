//! The daemon's traces: one OpenTelemetry server span per fsd.v1 or REST file call, opened at the
//! edge (`crate::edge`, `crate::rest`) as the child of the caller's W3C `traceparent` (gRPC
//! metadata and HTTP headers are the same headers), with the call's operation, mode and code set
//! where the call is measured (`service`), and two children per worker call made where the
//! network process sees them (`dispatch`): the wait in the mode's queue and the worker's time.
//!
//! Off unless `otlp_endpoint` is set; then only the network process exports, over OTLP/gRPC, from
//! a task of its own runtime. A finished span goes into a bounded queue without waiting (when it
//! is full the span is dropped and counted in /metrics), so a collector that is down or slow
//! never holds up or slows a call. The SDK's batch processor is not used because it keeps its
//! drops to itself (one log line at shutdown), and an operator must see them while it happens.
//! When the process stops, what is still queued is exported ([`flush`]), for at most
//! [`FLUSH_WAIT`]; what is left then is dropped, counted and logged.
//!
//! What a span never carries: file content, paths, bearer tokens or their hashes. The session
//! and call ids the client sent join a span to the call's audit record, which has the path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    Sampler, SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use tokio::sync::{Notify, mpsc};
use tonic::codegen::http;

use crate::identity::Identity;
use crate::metrics::{Face, SpanDrop};
use crate::op::Mode;

/// Traces as configured: where the collector listens, how to reach it and how much may wait
/// for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// `http://HOST:PORT` or `https://HOST:PORT` of an OTLP/gRPC receiver (a collector's port
    /// 4317).
    pub endpoint: String,
    /// Finished spans that may wait for the exporter; past that they are dropped and counted.
    pub queue: usize,
    /// The share of calls without a sampled parent that are traced (a parent's decision wins).
    pub sample_ratio: f64,
    /// `https://` only: the CAs the collector's certificate must chain to (else the system's).
    pub ca: Option<PathBuf>,
    /// `https://` only: the certificate chain and key shown to a collector that asks.
    pub client: Option<(PathBuf, PathBuf)>,
    /// `name: value` lines sent as gRPC metadata with every export.
    pub headers_file: Option<PathBuf>,
}

/// Where the system keeps its CA bundle (Debian, Ubuntu, Alpine, Arch; Fedora, RHEL; others),
/// for an `https://` collector without `otlp_ca`.
const SYSTEM_CA_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The collector as the confined network process reaches it: everything read and resolved
/// before confinement. No `Debug`: it holds the header values (an auth token).
pub struct Collector {
    /// `http://IP:PORT` or `https://IP:PORT`.
    address: String,
    /// For `https://`: the CAs, the client identity and the name the certificate must carry.
    tls: Option<tonic::transport::ClientTlsConfig>,
    headers: tonic::metadata::MetadataMap,
}

/// Spans sent to the collector in one export, at most; a queue this full is exported at once.
const BATCH: usize = 512;

/// Otherwise what the queue holds is exported this often: the export task does not wake per span.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// An export that has not finished by then fails (its spans counted as dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// At a stop, how long the spans still queued may take to reach the collector, at most.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot resolve otlp_endpoint {0}: {1}")]
    Resolve(String, String),
    #[error("cannot build the OTLP exporter for {0}: {1}")]
    Exporter(String, String),
    #[error("cannot read {key} {path}: {source}")]
    Read { key: &'static str, path: PathBuf, source: std::io::Error },
    /// The file's words are never repeated: a header value may be a secret.
    #[error("{key} {path}: {reason}")]
    Pem { key: &'static str, path: PathBuf, reason: &'static str },
    #[error("otlp_headers_file {path} line {line}: {reason}")]
    HeaderLine { path: PathBuf, line: usize, reason: &'static str },
    #[error(
        "otlp_endpoint {0} is https:// without otlp_ca, and no system CA bundle is at {list}: set otlp_ca",
        list = SYSTEM_CA_BUNDLES.join(", ")
    )]
    NoCaBundle(String),
    #[error(
        "otlp_headers_file would cross the network in clear text: otlp_endpoint {0} is http:// and not on loopback; use https://"
    )]
    PlaintextHeaders(String),
}

static TRACER: OnceLock<SdkTracer> = OnceLock::new();
/// The tracer's sampler, asked first (see [`call`]): an unsampled call builds nothing at all.
static SAMPLER: OnceLock<Sampler> = OnceLock::new();
/// Kept for the life of the process: the tracer's spans go through its processor.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
/// The export task, told to send what is queued and end at a stop.
static EXPORTING: OnceLock<Exporting> = OnceLock::new();
/// Spans queued or in an export that has not finished: what a stop that cannot wait loses.
static PENDING: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct Exporting {
    stop: Arc<Notify>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Whether spans are made at all: everything here costs nothing beyond this check when not.
pub fn on() -> bool {
    tracer().is_some()
}

/// The tracer, once [`start`] set it. Never in a build without telemetry
/// (`crate::metrics::BUILT`): there this is a constant, and every span site is dead code.
fn tracer() -> Option<&'static SdkTracer> {
    if !crate::metrics::BUILT {
        return None;
    }
    TRACER.get()
}

/// The collector, made ready before the network process confines itself (after that it can
/// read no file, no /etc/hosts nor resolv.conf): its address resolved, the TLS files and the
/// headers file read and checked.
pub fn prepare(settings: &Settings) -> Result<Collector, TraceError> {
    use std::net::ToSocketAddrs;
    let failed = |reason: String| TraceError::Resolve(settings.endpoint.clone(), reason);
    let (scheme, authority) = match settings.endpoint.strip_prefix("https://") {
        Some(authority) => ("https", authority),
        None => ("http", settings.endpoint.strip_prefix("http://").unwrap_or(&settings.endpoint)),
    };
    let address = authority
        .to_socket_addrs()
        .map_err(|e| failed(e.to_string()))?
        .next()
        .ok_or_else(|| failed("no address".to_owned()))?;
    let headers = match &settings.headers_file {
        Some(path) => headers(path, &read("otlp_headers_file", path)?)?,
        None => tonic::metadata::MetadataMap::new(),
    };
    if scheme == "http" && !headers.is_empty() && !address.ip().is_loopback() {
        return Err(TraceError::PlaintextHeaders(settings.endpoint.clone()));
    }
    let tls = (scheme == "https").then(|| tls(settings, authority)).transpose()?;
    Ok(Collector { address: format!("{scheme}://{address}"), tls, headers })
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TraceError> {
    std::fs::read(path).map_err(|source| TraceError::Read { key, path: path.to_owned(), source })
}

/// The TLS side of an `https://` collector: its CAs (`otlp_ca`, else the system's bundle), the
/// client identity if any, and the endpoint's host as the name its certificate must carry (the
/// connection goes to the resolved address).
fn tls(settings: &Settings, authority: &str) -> Result<tonic::transport::ClientTlsConfig, TraceError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certificates = |key: &'static str, path: &Path| -> Result<Vec<u8>, TraceError> {
        let pem = read(key, path)?;
        let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
        match parsed {
            Ok(certificates) if !certificates.is_empty() => Ok(pem),
            _ => Err(TraceError::Pem { key, path: path.to_owned(), reason: "holds no PEM certificate" }),
        }
    };
    let ca = match &settings.ca {
        Some(path) => certificates("otlp_ca", path)?,
        None => SYSTEM_CA_BUNDLES
            .iter()
            .find_map(|path| certificates("otlp_ca", Path::new(path)).ok())
            .ok_or_else(|| TraceError::NoCaBundle(settings.endpoint.clone()))?,
    };
    let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name(host);
    if let Some((cert, key)) = &settings.client {
        let cert = certificates("otlp_client_cert", cert)?;
        let pem = read("otlp_client_key", key)?;
        if PrivateKeyDer::from_pem_slice(&pem).is_err() {
            let reason = "holds no PEM private key";
            return Err(TraceError::Pem { key: "otlp_client_key", path: key.clone(), reason });
        }
        config = config.identity(tonic::transport::Identity::from_pem(cert, pem));
    }
    Ok(config)
}

/// `otlp_headers_file`: one `name: value` a line; blank lines and `#` comments skipped. Names
/// are gRPC metadata keys (lowercased), values visible ASCII; a line in error is named by its
/// number only.
fn headers(path: &Path, text: &[u8]) -> Result<tonic::metadata::MetadataMap, TraceError> {
    use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
    let bad =
        |line: usize, reason: &'static str| TraceError::HeaderLine { path: path.to_owned(), line, reason };
    let text = std::str::from_utf8(text).map_err(|_| bad(0, "not UTF-8"))?;
    let mut map = tonic::metadata::MetadataMap::new();
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| bad(n, "expected name: value"))?;
        let name = name.trim().to_ascii_lowercase();
        if name.ends_with("-bin") {
            return Err(bad(n, "binary (-bin) headers are not supported"));
        }
        let key = AsciiMetadataKey::from_bytes(name.as_bytes()).map_err(|_| bad(n, "not a header name"))?;
        let value = value.trim();
        let not_ascii = || bad(n, "the value is not visible ASCII");
        if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            return Err(not_ascii());
        }
        let mut value = AsciiMetadataValue::try_from(value).map_err(|_| not_ascii())?;
        value.set_sensitive(true);
        map.append(key, value);
    }
    Ok(map)
}

/// Starts exporting to the collector (from [`prepare`]); on the network process's runtime, once.
pub fn start(collector: Collector, settings: &Settings) -> Result<(), TraceError> {
    if !crate::metrics::BUILT {
        tracing::warn!(
            endpoint = %settings.endpoint,
            "this build keeps no traces (no-telemetry, a benchmark's build): otlp_endpoint ignored"
        );
        return Ok(());
    }
    let Collector { address, tls, headers } = collector;
    let header_count = headers.len();
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&address)
        .with_timeout(EXPORT_TIMEOUT)
        .with_metadata(headers);
    let tls_on = tls.is_some();
    if let Some(tls) = tls {
        builder = builder.with_tls_config(tls);
    }
    let mut exporter = builder.build().map_err(|e| TraceError::Exporter(address.clone(), e.to_string()))?;
    // The exporter is the export task's, so it gets the resource here rather than through the
    // provider (which hands it only to processors).
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("fsd").build();
    exporter.set_resource(&resource);
    let (tx, rx) = mpsc::channel(settings.queue);
    let batch_ready = Arc::new(Notify::new());
    let stop = Arc::new(Notify::new());
    let task = tokio::spawn(export(exporter, (rx, batch_ready.clone(), stop.clone()), address.clone()));
    let _ = EXPORTING.set(Exporting { stop, task: Mutex::new(Some(task)) });
    // Whether a call is traced is decided in `call`, before its span is built; every span the
    // tracer is then asked for is one to keep (a call's, or a child of a sampled call's).
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio)));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Queue { spans: tx, batch_ready })
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("fsd");
    let _ = PROVIDER.set(provider);
    let _ = SAMPLER.set(sampler);
    let _ = TRACER.set(tracer);
    tracing::info!(
        endpoint = %settings.endpoint,
        address,
        tls = tls_on,
        client_cert = settings.client.is_some(),
        headers = header_count,
        "exporting traces over OTLP"
    );
    Ok(())
}

/// Hands finished spans to the export task without ever waiting; wakes it once a batch is
/// ready.
#[derive(Debug)]
struct Queue {
    spans: mpsc::Sender<SpanData>,
    batch_ready: Arc<Notify>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        // Counted before it is queued: the export task may take it at once.
        PENDING.fetch_add(1, Ordering::Relaxed);
        match self.spans.try_send(span) {
            Ok(()) => {
                if self.spans.max_capacity() - self.spans.capacity() >= BATCH {
                    self.batch_ready.notify_one();
                }
            }
            Err(e) => {
                PENDING.fetch_sub(1, Ordering::Relaxed);
                let reason = match e {
                    mpsc::error::TrySendError::Full(_) => SpanDrop::QueueFull,
                    // A call that ended after the stop's flush (the export task is gone).
                    mpsc::error::TrySendError::Closed(_) => SpanDrop::Shutdown,
                };
                crate::metrics::spans_dropped(reason, 1);
            }
        }
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// Sends what the queue holds every [`EXPORT_EVERY`], or as soon as a batch is ready, in batches
/// of at most [`BATCH`]; once told to stop, what it holds then, and ends. A failure is logged
/// when it starts and when exporting works again, not per batch (a collector that is down would
/// fill the log).
async fn export(
    exporter: opentelemetry_otlp::SpanExporter,
    (mut queue, batch_ready, stop): (mpsc::Receiver<SpanData>, Arc<Notify>, Arc<Notify>),
    address: String,
) {
    let mut failing = false;
    let mut stopping = false;
    while !stopping {
        tokio::select! {
            () = batch_ready.notified() => {}
            () = tokio::time::sleep(EXPORT_EVERY) => {}
            () = stop.notified() => stopping = true,
        }
        loop {
            let mut batch = Vec::with_capacity(BATCH);
            while batch.len() < BATCH {
                match queue.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    // The provider (and its queue's sender) lives as long as the process.
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                }
            }
            let count = batch.len();
            if count == 0 {
                break;
            }
            let result = match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(batch)).await {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {} s", EXPORT_TIMEOUT.as_secs())),
            };
            PENDING.fetch_sub(count, Ordering::Relaxed);
            match result {
                Ok(()) => {
                    crate::metrics::spans_exported(count);
                    if std::mem::take(&mut failing) {
                        tracing::info!(address, "exporting traces again");
                    }
                }
                Err(reason) => {
                    crate::metrics::spans_dropped(SpanDrop::ExportFailed, count);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(address, %reason, "cannot export traces; dropping them until the collector answers");
                    }
                }
            }
            if count < BATCH {
                break;
            }
        }
    }
}

/// At a stop (the calls drained): exports the spans still queued and waits, at most `wait`, for
/// the collector to take them; what is left then is dropped, counted (`shutdown`) and logged in
/// one line. Without traces, nothing.
pub async fn flush(wait: Duration) {
    let Some(exporting) = EXPORTING.get() else { return };
    let task = exporting.task.lock().map(|mut t| t.take()).unwrap_or_default();
    let Some(mut task) = task else { return };
    exporting.stop.notify_one();
    let queued = PENDING.load(Ordering::Relaxed);
    if tokio::time::timeout(wait, &mut task).await.is_err() {
        task.abort();
    }
    // Queued, or in the export the wait cut short.
    let lost = PENDING.swap(0, Ordering::Relaxed);
    if lost > 0 {
        crate::metrics::spans_dropped(SpanDrop::Shutdown, lost);
        tracing::warn!(
            lost,
            queued,
            waited_ms = wait.as_millis() as u64,
            "trace spans not exported at the stop"
        );
    } else if queued > 0 {
        tracing::info!(exported = queued, "trace spans still queued at the stop exported");
    }
}

/// W3C trace context from HTTP headers (gRPC metadata is HTTP/2 headers).
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The span of one call, opened at the edge as the child of the caller's `traceparent`, if
/// traces are on, the request is a file call (`/fsd.v1.Fsd/...` or `/v1/files...`; probes,
/// reflection and scrapes are not traced) and the call is sampled: the caller's sampled flag
/// decides, else `sample_ratio` on the trace id. The decision comes first, so an unsampled call
/// costs the header's parse and nothing more (no span, no attributes). `face`: the request's own
/// unless the HTTP face marked it (gRPC-Web). Run the call inside it with [`within`].
pub fn call<B>(request: &http::Request<B>, face: Face, client: &Identity) -> Option<Context> {
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};
    let tracer = tracer()?;
    let path = request.uri().path();
    let grpc = path.strip_prefix("/fsd.v1.Fsd/");
    if grpc.is_none() && path != "/v1/files" && !path.starts_with("/v1/files/") {
        return None;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(request.headers()));
    let remote = parent.span().span_context().clone();
    // Without a parent, the draw of the ratio sampler on a random trace id (the tracer draws
    // the root span's own).
    let trace_id =
        if remote.is_valid() { remote.trace_id() } else { RandomIdGenerator::default().new_trace_id() };
    let sampler = SAMPLER.get()?;
    let decision = sampler.should_sample(Some(&parent), trace_id, "", &SpanKind::Server, &[], &[]).decision;
    if decision != SamplingDecision::RecordAndSample {
        return None;
    }
    let face = request.extensions().get::<Face>().copied().unwrap_or(face);
    let mut attributes = Vec::with_capacity(7);
    let name = if let Some(method) = grpc {
        attributes.extend([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", "fsd.v1.Fsd"),
            KeyValue::new("rpc.method", method.to_owned()),
        ]);
        std::borrow::Cow::Owned(path[1..].to_owned())
    } else {
        // The route, never the path: a file's name is not put in a span.
        let method = request.method();
        attributes.extend([
            KeyValue::new("http.request.method", method.as_str().to_owned()),
            KeyValue::new("http.route", "/v1/files/{path}"),
        ]);
        match *method {
            http::Method::GET => "GET /v1/files/{path}".into(),
            http::Method::PUT => "PUT /v1/files/{path}".into(),
            http::Method::POST => "POST /v1/files/{path}".into(),
            http::Method::DELETE => "DELETE /v1/files/{path}".into(),
            _ => std::borrow::Cow::Owned(format!("{method} /v1/files/{{path}}")),
        }
    };
    attributes.push(KeyValue::new("fsd.face", face.as_str()));
    attributes.push(KeyValue::new("fsd.client", client.label()));
    // The tool call this daemon call serves, as `fsd-tools` names it (a client's word, bounded).
    let tool = request.headers().get(fsd_proto::TOOL_HEADER).and_then(|v| v.to_str().ok());
    if let Some(tool) = tool.filter(|t| t.len() <= 64) {
        attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
    }
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    Some(parent.with_span(span))
}

/// Runs `call` inside `span` (from [`call`]): the span ends when the call's future is done or
/// dropped. Without a span, the future as it is.
pub async fn within<F: Future>(span: Option<Context>, call: F) -> F::Output {
    use opentelemetry::context::FutureExt;
    match span {
        Some(cx) => call.with_context(cx).await,
        None => call.await,
    }
}

/// Marks a context whose calls are parts of the call whose span it holds.
#[derive(Debug, Clone, Copy)]
struct Part;

/// `work`, a task the current call spawns to make calls of its own as its parts (Inspect's
/// questions): their worker calls are children of the call's span, as on the call's own future,
/// but their outcomes are not the call's ([`outcome`] leaves its span as the call set it).
pub fn as_parts<F: Future>(work: F) -> impl Future<Output = F::Output> {
    use opentelemetry::context::FutureExt;
    work.with_context(Context::current().with_value(Part))
}

/// The call's outcome on its span: operation, mode, result code and the client's session and
/// call ids (which its audit record carries too).
pub fn outcome(op: &'static str, mode: Mode, code: &'static str, session: &str, call: &str) {
    if !on() {
        return;
    }
    let cx = Context::current();
    let span = cx.span();
    if !span.is_recording() || cx.get::<Part>().is_some() {
        return;
    }
    // One set: each takes the span's lock.
    let error = (code != "ok").then(|| KeyValue::new("error.type", code));
    let session = (!session.is_empty()).then(|| KeyValue::new("fsd.session_id", session.to_owned()));
    let call = (!call.is_empty()).then(|| KeyValue::new("fsd.call_id", call.to_owned()));
    span.set_attributes(
        [
            KeyValue::new("fsd.op", op),
            KeyValue::new("fsd.mode", mode.as_str()),
            KeyValue::new("fsd.code", code),
        ]
        .into_iter()
        .chain(error)
        .chain(session)
        .chain(call),
    );
}

/// A worker call as the network process saw it, as two children of the current call's span:
/// `fsd.queue` from `queued` to `taken` (a driver sent it to a worker) and `fsd.worker` from then
/// to `answered`. A call no worker took has the queue span only.
pub fn dispatched(mode: Mode, queued: Instant, taken: Option<Instant>, answered: Instant) {
    let Some(tracer) = tracer() else { return };
    let cx = Context::current();
    if !cx.span().span_context().is_sampled() {
        return;
    }
    let (now, wall) = (Instant::now(), SystemTime::now());
    let at = |instant: Instant| wall.checked_sub(now.saturating_duration_since(instant)).unwrap_or(wall);
    let mode = KeyValue::new("fsd.mode", mode.as_str());
    let span = |name: &'static str, from: Instant, to: Instant| {
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(at(from))
            .with_attributes([mode.clone()])
            .start_with_context(tracer, &cx);
        span.end_with_timestamp(at(to));
    };
    span("fsd.queue", queued, taken.unwrap_or(answered));
    if let Some(taken) = taken {
        span("fsd.worker", taken, answered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(endpoint: &str) -> Settings {
        Settings {
            endpoint: endpoint.to_owned(),
            queue: 1,
            sample_ratio: 1.0,
            ca: None,
            client: None,
            headers_file: None,
        }
    }

    /// The endpoint resolves to an address (a name or an IP literal), so the confined network
    /// process never needs a resolver.
    #[test]
    fn endpoint_resolves_before_confinement() {
        for (endpoint, resolved) in [
            ("http://127.0.0.1:4317", "http://127.0.0.1:4317"),
            ("http://localhost:4317", "http://"),
            ("http://[::1]:4318", "http://[::1]:4318"),
        ] {
            let got = prepare(&settings(endpoint)).unwrap_or_else(|e| panic!("{endpoint}: {e}")).address;
            assert!(got.starts_with(resolved) && got.ends_with(&endpoint[endpoint.len() - 5..]), "{got}");
        }
    }

    /// `otlp_headers_file`: what is sent, and a bad line named by its number without its words.
    #[test]
    fn headers_file_lines() {
        let path = Path::new("/h");
        type Want = Result<Vec<(&'static str, &'static str)>, String>;
        let cases: &[(&str, Want)] = &[
            ("", Ok(vec![])),
            (
                "# the collector's token\nAuthorization: Bearer abc.def\n\n  x-tenant :fleet-a  \n",
                Ok(vec![("authorization", "Bearer abc.def"), ("x-tenant", "fleet-a")]),
            ),
            ("authorization Bearer abc", Err("otlp_headers_file /h line 1: expected name: value".into())),
            ("\nbad name: v", Err("otlp_headers_file /h line 2: not a header name".into())),
            ("x: caf\u{e9}", Err("otlp_headers_file /h line 1: the value is not visible ASCII".into())),
            (
                "x-bin: AAAA",
                Err("otlp_headers_file /h line 1: binary (-bin) headers are not supported".into()),
            ),
        ];
        for (text, want) in cases {
            let got = headers(path, text.as_bytes()).map_err(|e| e.to_string()).map(|map| {
                let mut pairs = Vec::new();
                for kv in map.iter() {
                    if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                        pairs.push((k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()));
                    }
                }
                pairs
            });
            let want = want
                .clone()
                .map(|v| v.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect::<Vec<_>>());
            assert_eq!(got, want, "{text:?}");
        }
        // A value (a secret) is never in a debug print of the headers.
        let map = headers(path, b"authorization: Bearer s3cret").unwrap_or_default();
        assert!(!format!("{map:?}").contains("s3cret"), "{map:?}");
    }

    /// Headers cross plaintext only to a collector on loopback; a TLS collector's files must
    /// hold what their keys say.
    #[test]
    fn what_a_collector_needs_is_checked_at_start() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            path
        };
        let token = file("headers", "authorization: Bearer s3cret\n");
        let junk = file("junk.pem", "not a certificate\n");
        let with = |endpoint: &str, change: &dyn Fn(&mut Settings)| {
            let mut s = settings(endpoint);
            change(&mut s);
            prepare(&s).map(|c| c.address).map_err(|e| e.to_string())
        };
        let headers = |s: &mut Settings| s.headers_file = Some(token.clone());
        assert_eq!(with("http://127.0.0.1:4317", &headers), Ok("http://127.0.0.1:4317".to_owned()));
        assert_eq!(
            with("http://192.0.2.1:4317", &headers),
            Err("otlp_headers_file would cross the network in clear text: otlp_endpoint http://192.0.2.1:4317 is http:// and not on loopback; use https://".to_owned())
        );
        let ca = |s: &mut Settings| s.ca = Some(junk.clone());
        assert_eq!(
            with("https://127.0.0.1:4317", &ca),
            Err(format!("otlp_ca {}: holds no PEM certificate", junk.display()))
        );
        let missing = dir.path().join("missing.pem");
        let ca = |s: &mut Settings| s.ca = Some(missing.clone());
        let got = with("https://127.0.0.1:4317", &ca).unwrap_err();
        assert!(got.starts_with(&format!("cannot read otlp_ca {}: ", missing.display())), "{got}");
    }
}
