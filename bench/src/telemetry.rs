//! The cost of metrics and traces: the read tool's per-call p50 and its calls per second with 64
//! in flight, against five daemons started side by side in the same run: metrics and traces
//! off (`metrics = false`), metrics on and scraped every second (`health_listen`), metrics
//! plus traces exported to a local OTLP sink (this process's own trace service, counting what it
//! receives) at the default `trace_sample_ratio` and with every call traced, and the daemon
//! built without them (cargo feature `no-telemetry`), configured as off: what off still costs.
//! The daemons are measured in turn within each run (the order rotating from run to run), so
//! drift of the shared machine falls on all of them alike.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fsd_tool_client::connect;
use fsd_tool_client::{ClientConfig, Session, Tools};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde_json::json;

use crate::concurrent::{Load, Window, fsd_rate};
use crate::fixtures;
use crate::procs::{Server, Transport, free_port};
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    Off,
    Metrics,
    /// At the default `trace_sample_ratio` (the bench's calls carry no `traceparent`).
    MetricsTraces,
    /// `trace_sample_ratio = 1.0`: every call traced.
    MetricsTracesAll,
    /// The comparison build with metrics and traces compiled out, configured as [`Setting::Off`].
    CompiledOut,
}

/// How many daemons a run measures.
const DAEMONS: usize = Setting::ALL.len();

impl Setting {
    const ALL: [Setting; 5] = [
        Setting::Off,
        Setting::Metrics,
        Setting::MetricsTraces,
        Setting::MetricsTracesAll,
        Setting::CompiledOut,
    ];

    /// Where each setting sits in the per-run figures (`ALL` is in declaration order).
    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Setting::Off => "off (`metrics = false`, no `otlp_endpoint`)",
            Setting::Metrics => "metrics, scraped every 1 s",
            Setting::MetricsTraces => {
                "metrics (scraped every 1 s) + traces to a local OTLP sink, default `trace_sample_ratio` (0.1)"
            }
            Setting::MetricsTracesAll => {
                "metrics (scraped every 1 s) + traces to a local OTLP sink, every call traced (`trace_sample_ratio = 1.0`)"
            }
            Setting::CompiledOut => "compiled out (feature `no-telemetry`, `metrics = false`)",
        }
    }
}

/// The local collector: accepts every export and counts its spans.
#[derive(Debug, Default)]
struct Sink(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize =
            request.get_ref().resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// The sink on a thread of its own (the client's runtime is single-threaded and busy measuring);
/// stopped when the sender is dropped.
struct SinkServer {
    port: u16,
    spans: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SinkServer {
    fn start() -> Res<SinkServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let spans = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let sink = Sink(spans.clone());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::spawn(move || {
            let served = runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(sink))
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    })
                    .await
                    .map_err(|e| -> crate::Error { e.into() })
            });
            if let Err(e) = served {
                note!("fsd-bench: the OTLP sink stopped: {e}");
            }
        });
        Ok(SinkServer { port, spans, stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for SinkServer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `GET /metrics` on `port` every second until `stop`, as Prometheus would (more often than
/// its default of 15 s); the last answer is kept.
fn scrape(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut last = String::new();
        while !stop.load(Ordering::Relaxed) {
            if let Ok(text) = scrape_once(port) {
                last = text;
            }
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        last
    })
}

fn scrape_once(port: u16) -> Res<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// One daemon of the comparison and its health listener.
struct Daemon {
    server: Server,
    health: Option<u16>,
}

fn start(setting: Setting, common: &Common, root: &Path, sink: u16) -> Res<Daemon> {
    let health = free_port()?;
    let config = match setting {
        Setting::Off | Setting::CompiledOut => "metrics = false".to_owned(),
        Setting::Metrics => format!("health_listen = \"tcp:127.0.0.1:{health}\""),
        Setting::MetricsTraces => {
            format!("health_listen = \"tcp:127.0.0.1:{health}\"\notlp_endpoint = \"http://127.0.0.1:{sink}\"")
        }
        Setting::MetricsTracesAll => format!(
            "health_listen = \"tcp:127.0.0.1:{health}\"\notlp_endpoint = \"http://127.0.0.1:{sink}\"\ntrace_sample_ratio = 1.0"
        ),
    };
    let bin_dir = match setting {
        Setting::CompiledOut => common.comparison_build("no-telemetry", "no-telemetry")?,
        _ => common.bin_dir()?,
    };
    let server = Server::fsd_unmetered_with(&bin_dir, root, &config)?;
    let scraped = !matches!(setting, Setting::Off | Setting::CompiledOut);
    Ok(Daemon { server, health: scraped.then_some(health) })
}

/// One run's figures of one daemon: the read tool's p50 (µs) and its calls/s with 64 in flight.
fn measure(daemon: &Daemon, common: &Common, path: &str, root: &Path) -> Res<(f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = daemon.health.map(|port| scrape(port, stop.clone()));
    let rt = crate::client_runtime()?;
    let (window_warm, window) = Window::timing(common);
    let figures = rt.block_on(async {
        let endpoint = daemon.server.endpoint(Transport::Unix);
        let (client, hello) = connect::connect(&endpoint).await?;
        let mut session =
            Session::new(Tools::new(ClientConfig::default()), client.clone(), hello.clone(), root.to_owned());
        let args = json!({ "file_path": path });
        for _ in 0..common.n(200) {
            session.call("read", args.clone()).await;
        }
        let n = common.n(2000);
        let mut samples = Samples::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let result = session.call("read", args.clone()).await;
            samples.push(started.elapsed());
            if result.is_error {
                return Err::<_, crate::Error>(result.text().into());
            }
        }
        let rate =
            fsd_rate(Load::ReadTool, &client, &hello, path, root, Window::new(window_warm, window)).await?;
        Ok((samples.p50(), rate))
    });
    stop.store(true, Ordering::Relaxed);
    if let Some(scraper) = scraper {
        let _ = scraper.join();
    }
    figures
}

pub fn run(common: &Common) -> Res<Section> {
    let (_dir, root, path) = fixtures::four_k_workspace("fsd-bench-telemetry-")?;
    let sink = SinkServer::start()?;
    let daemons =
        Setting::ALL.iter().map(|s| start(*s, common, &root, sink.port)).collect::<Res<Vec<Daemon>>>()?;
    let mut p50: [PerRun; DAEMONS] = Default::default();
    let mut rate: [PerRun; DAEMONS] = Default::default();
    for run in 0..common.runs {
        note!("  metrics and traces: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        for k in 0..DAEMONS {
            let i = (run + k) % DAEMONS;
            let (p, r) = measure(&daemons[i], common, &path, &root)?;
            p50[i].push(p);
            rate[i].push(r);
        }
    }
    // Spans dropped by each traced daemon, by the last scrape.
    let mut dropped = [0u64; DAEMONS];
    for setting in [Setting::MetricsTraces, Setting::MetricsTracesAll] {
        let i = setting.index();
        let last = daemons[i].health.map(scrape_once).transpose()?.unwrap_or_default();
        dropped[i] = last
            .lines()
            .filter(|l| l.starts_with("fsd_spans_dropped_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
    }
    let exported = sink.spans.load(Ordering::Relaxed);
    drop(daemons);

    let (off, out) = (Setting::Off.index(), Setting::CompiledOut.index());
    let mut section = Section::default();
    let mut md = String::from("### Metrics and traces\n\n");
    md.push_str(
        "The read tool (4 KiB, Unix socket) against five daemons started side by side and measured in \
         turn in each run: metrics and traces off, metrics on and scraped every second, metrics plus \
         traces exported to a local OTLP/gRPC sink (three spans per traced read: the call, its queue wait \
         and its worker time) at the default sampling ratio and with every call traced, and the same \
         daemon built without metrics and traces (cargo feature `no-telemetry`), configured as off. p50 \
         of one caller's calls; calls per second with 64 sessions in flight on one connection.\n\n",
    );
    md.push_str("| daemon | read tool p50 | ÷ off | 64 in flight | ÷ off |\n|---|---|---|---|---|\n");
    for (i, setting) in Setting::ALL.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            setting.label(),
            p50[i].micros(),
            p50[i].ratio(&p50[off]).times(),
            rate[i].with_unit("/s"),
            rate[i].ratio(&rate[off]).times(),
        ));
    }
    let off_p50 = p50[off].ratio(&p50[out]);
    let off_rate = rate[off].ratio(&rate[out]);
    md.push_str(&format!(
        "\nOff ÷ compiled out (median [min–max] of the per-run ratios; off costs more above 1.0 on the \
         p50, below it on the rate): read tool p50 {}, 64 in flight {}.\n",
        off_p50.times(),
        off_rate.times(),
    ));
    md.push_str(&format!(
        "\nThe sink received {exported} spans; the traced daemons dropped {} (default ratio) and {} (every \
         call traced) (`fsd_spans_dropped_total`).\n",
        dropped[Setting::MetricsTraces.index()],
        dropped[Setting::MetricsTracesAll.index()]
    ));
    for (setting, what) in [
        (Setting::Metrics, "metrics"),
        (Setting::MetricsTraces, "metrics + traces (default ratio)"),
        (Setting::MetricsTracesAll, "metrics + traces (all traced)"),
    ] {
        let i = setting.index();
        let slower = p50[i].ratio(&p50[off]);
        section.verdict(
            format!("{what}: read tool p50 ≤ 103% of off"),
            slower.percent(),
            slower.median() <= 1.03,
        );
        let kept = rate[i].ratio(&rate[off]);
        section.verdict(
            format!("{what}: 64-in-flight read tool ≥ 97% of off"),
            kept.percent(),
            kept.median() >= 0.97,
        );
    }
    // "Nothing measurable when off": the same-run ratios fall on both sides of 1.0 and their
    // median is within the 3% the bound on the features allows.
    section.verdict(
        "off: read tool p50 against compiled out, nothing measurable (runs on both sides of 1.0, median within 3%)",
        off_p50.times(),
        off_p50.unmeasurable(0.03),
    );
    section.verdict(
        "off: 64-in-flight read tool against compiled out, nothing measurable (runs on both sides of 1.0, median within 3%)",
        off_rate.times(),
        off_rate.unmeasurable(0.03),
    );
    section.markdown = md;
    Ok(section)
}
