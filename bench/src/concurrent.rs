//! Throughput with 64 calls in flight on one connection: stat and readText RPCs, and the read
//! tool (64 sessions sharing the connection), against the bare tonic echo at 64 in flight with
//! the same payload sizes. Each figure counts calls completed in a fixed window after a warm-up.

use std::path::Path;
use std::time::{Duration, Instant};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_tool_client::connect;
use fsd_tool_client::{ClientConfig, Session, Tools};
use prost::Message;
use serde_json::json;
use tonic::transport::Channel;

use crate::echo::{self, Payloads, Shape};
use crate::fixtures;
use crate::procs::{Reads, Server, Transport};
use crate::report::Section;
use crate::stats::PerRun;
use crate::{Common, Res};

const IN_FLIGHT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Load {
    Stat,
    ReadText,
    ReadTool,
}

impl Load {
    const ALL: [Load; 3] = [Load::Stat, Load::ReadText, Load::ReadTool];

    fn label(self) -> &'static str {
        match self {
            Load::Stat => "**stat** (RPC)",
            Load::ReadText => "readText 4 KiB (RPC)",
            Load::ReadTool => "read tool, 4 KiB (64 sessions)",
        }
    }
}

/// Counts the calls that finish inside [start + warm, start + warm + window).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    from: Instant,
    to: Instant,
}

impl Window {
    pub(crate) fn new(warm: Duration, window: Duration) -> Window {
        let from = Instant::now() + warm;
        Window { from, to: from + window }
    }

    /// The warm-up and the window of every 64-in-flight figure (shorter with `--quick`).
    pub(crate) fn timing(common: &Common) -> (Duration, Duration) {
        if common.quick {
            (Duration::from_millis(100), Duration::from_millis(300))
        } else {
            (Duration::from_millis(300), Duration::from_millis(1500))
        }
    }

    fn rate(&self, count: u64) -> f64 {
        count as f64 / (self.to - self.from).as_secs_f64()
    }
}

/// One caller's count of the calls that finished inside a [`Window`].
struct Counted {
    window: Window,
    counted: u64,
}

impl Counted {
    fn new(window: Window) -> Counted {
        Counted { window, counted: 0 }
    }

    /// A call just finished: `Some(count)` once the window has closed, the caller's last call.
    fn finished(&mut self) -> Option<u64> {
        let now = Instant::now();
        if now >= self.window.to {
            return Some(self.counted);
        }
        if now >= self.window.from {
            self.counted += 1;
        }
        None
    }
}

/// Adds up the callers' counts into calls per second inside the window.
async fn total(mut tasks: tokio::task::JoinSet<Res<u64>>, window: Window) -> Res<f64> {
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done??;
    }
    Ok(window.rate(total))
}

/// Runs `IN_FLIGHT` loops of `call` until the window closes; calls per second inside it.
async fn drive<F, Fut>(window: Window, make: impl FnMut(usize) -> F) -> Res<f64>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Res<()>> + Send,
{
    drive_n(IN_FLIGHT, window, make).await
}

/// `drive` with `in_flight` loops.
async fn drive_n<F, Fut>(in_flight: usize, window: Window, mut make: impl FnMut(usize) -> F) -> Res<f64>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Res<()>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..in_flight {
        let mut call = make(i);
        tasks.spawn(async move {
            let mut counted = Counted::new(window);
            loop {
                call().await?;
                if let Some(count) = counted.finished() {
                    return Ok(count);
                }
            }
        });
    }
    total(tasks, window).await
}

fn stat_request(path: &str) -> v1::StatRequest {
    v1::StatRequest { context: None, path: path.to_owned(), no_follow: false, check_write: false }
}

fn read_request(path: &str) -> v1::ReadTextRequest {
    v1::ReadTextRequest { context: None, path: path.to_owned(), max_bytes: 10 << 20 }
}

pub(crate) async fn fsd_rate(
    load: Load,
    client: &FsdClient<Channel>,
    hello: &v1::HelloReply,
    path: &str,
    root: &Path,
    window: Window,
) -> Res<f64> {
    match load {
        Load::Stat => {
            drive(window, |_| {
                let client = client.clone();
                let path = path.to_owned();
                move || {
                    let mut client = client.clone();
                    let request = stat_request(&path);
                    async move {
                        client.stat(request).await?;
                        Ok(())
                    }
                }
            })
            .await
        }
        Load::ReadText => {
            drive(window, |_| {
                let client = client.clone();
                let path = path.to_owned();
                move || {
                    let mut client = client.clone();
                    let request = read_request(&path);
                    async move {
                        client.read_text(request).await?;
                        Ok(())
                    }
                }
            })
            .await
        }
        Load::ReadTool => {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..IN_FLIGHT {
                let mut session = Session::new(
                    Tools::new(ClientConfig::default()),
                    client.clone(),
                    hello.clone(),
                    root.to_owned(),
                );
                let path = path.to_owned();
                // A session is the caller's own, borrowed by each call: a loop here, not `drive`.
                tasks.spawn(async move {
                    let mut counted = Counted::new(window);
                    loop {
                        let result = session.call("read", json!({ "file_path": path })).await;
                        if result.is_error {
                            return Err(result.text().into());
                        }
                        if let Some(count) = counted.finished() {
                            return Ok(count);
                        }
                    }
                });
            }
            total(tasks, window).await
        }
    }
}

async fn echo_rate(endpoint: &fsd_tool_client::connect::Endpoint, shape: Shape, window: Window) -> Res<f64> {
    let client = echo::client(endpoint).await?;
    let payloads = Payloads::new();
    drive(window, |_| {
        let client = client.clone();
        let payloads = payloads.clone();
        move || {
            let mut client = client.clone();
            let payloads = payloads.clone();
            async move { payloads.call(&mut client, &[shape]).await }
        }
    })
    .await
}

pub fn run(common: &Common) -> Res<Section> {
    let (_dir, root, path) = fixtures::four_k_workspace("fsd-bench-conc-")?;
    // A daemon per place its plain reads run (`Reads`), in the same run.
    let mut daemons = Vec::new();
    for reads in Reads::ALL {
        daemons.push((reads, Server::fsd_unmetered_reads(&common.bin_dir()?, &root, reads)?));
    }
    let echo_server = Server::echo()?;
    let rt = crate::client_runtime()?;
    let (warm, window) = Window::timing(common);

    let mut rows: Vec<(Transport, Reads, Load, PerRun, PerRun)> = Vec::new();
    for transport in Transport::ALL {
        for reads in Reads::ALL {
            for load in Load::ALL {
                rows.push((transport, reads, load, PerRun::default(), PerRun::default()));
            }
        }
    }
    for run in 0..common.runs {
        note!("  64 in flight: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        for (transport, reads, load, fsd_rates, echo_rates) in rows.iter_mut() {
            let Some((_, fsd)) = daemons.iter().find(|(r, _)| r == reads) else { continue };
            let endpoint = fsd.endpoint(*transport);
            let echo_endpoint = echo_server.endpoint(*transport);
            let (fsd_rate_now, echo_rate_now) = rt.block_on(async {
                // A fresh connection per figure, as a fresh client would have.
                let (client, hello) = connect::connect(&endpoint).await?;
                let shape = match load {
                    Load::Stat => {
                        let reply = client.clone().stat(stat_request(&path)).await?.into_inner();
                        Shape { request: stat_request(&path).encoded_len(), reply: reply.encoded_len() }
                    }
                    Load::ReadText | Load::ReadTool => {
                        let reply = client.clone().read_text(read_request(&path)).await?.into_inner();
                        Shape { request: read_request(&path).encoded_len(), reply: reply.encoded_len() }
                    }
                };
                let f = fsd_rate(*load, &client, &hello, &path, &root, Window::new(warm, window)).await?;
                let e = echo_rate(&echo_endpoint, shape, Window::new(warm, window)).await?;
                Ok::<_, crate::Error>((f, e))
            })?;
            fsd_rates.push(fsd_rate_now);
            echo_rates.push(echo_rate_now);
        }
    }

    let mut section = Section::default();
    let mut md = String::from("### 64 calls in flight on one connection\n\n");
    md.push_str(&format!(
        "Calls completed per second in a {:.1} s window after {:.1} s of warm-up, one connection, \
         {IN_FLIGHT} concurrent callers on the client's current-thread runtime; baseline: the bare tonic echo \
         with the same request/reply sizes, in the same run. Reads: `direct`, a daemon that serves plain reads in its network process, on the runtime thread that received them (the defaults); `threads`, the same on its direct read threads (`inline_reads = false`); `workers`, one with `direct_reads = false`; all three in the same run.\n\n",
        window.as_secs_f64(),
        warm.as_secs_f64()
    ));
    md.push_str(
        "| transport | reads | call | fsd calls/s | bare tonic echo calls/s | fsd ÷ echo |\n|---|---|---|---|---|---|\n",
    );
    for (transport, reads, load, fsd_rates, echo_rates) in &rows {
        let ratio = fsd_rates.ratio(echo_rates);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            transport.name(),
            reads.name(),
            load.label(),
            fsd_rates.with_unit("/s"),
            echo_rates.with_unit("/s"),
            ratio.percent()
        ));
        match load {
            Load::Stat => section.verdict(
                format!(
                    "64-in-flight stat ≥ 85% of bare tonic ({}, {} reads)",
                    transport.name(),
                    reads.name()
                ),
                ratio.percent(),
                ratio.median() >= 0.85,
            ),
            Load::ReadTool => section.verdict(
                format!(
                    "64-in-flight read tool ≥ 85% of bare tonic ({}, {} reads)",
                    transport.name(),
                    reads.name()
                ),
                ratio.percent(),
                ratio.median() >= 0.85,
            ),
            Load::ReadText => {}
        }
    }
    section.markdown = md;
    Ok(section)
}

/// For profiling (`perf record -a` around it): one load against fsd or the echo server for a
/// while, with `in_flight` callers; prints calls per second.
pub fn probe(
    common: &Common,
    stat: bool,
    echo_only: bool,
    in_flight: usize,
    seconds: f64,
    tcp: bool,
) -> Res<String> {
    let (_dir, root, path) = fixtures::four_k_workspace("fsd-bench-probe-")?;
    let transport = if tcp { Transport::Tcp } else { Transport::Unix };
    let server = if echo_only { Server::echo()? } else { Server::fsd_unmetered(&common.bin_dir()?, &root)? };
    let rt = crate::client_runtime()?;
    let window = Window::new(Duration::from_millis(200), Duration::from_secs_f64(seconds));
    let rate = rt.block_on(async {
        let endpoint = server.endpoint(transport);
        if echo_only {
            let shape =
                if stat { Shape { request: 112, reply: 160 } } else { Shape { request: 117, reply: 4252 } };
            let client = echo::client(&endpoint).await?;
            let payloads = Payloads::new();
            return drive_n(in_flight, window, |_| {
                let client = client.clone();
                let payloads = payloads.clone();
                move || {
                    let mut client = client.clone();
                    let payloads = payloads.clone();
                    async move { payloads.call(&mut client, &[shape]).await }
                }
            })
            .await;
        }
        let (client, _) = connect::connect(&endpoint).await?;
        drive_n(in_flight, window, |_| {
            let client = client.clone();
            let path = path.clone();
            move || {
                let mut client = client.clone();
                let (s, r) = (stat_request(&path), read_request(&path));
                async move {
                    if stat {
                        client.stat(s).await?;
                    } else {
                        client.read_text(r).await?;
                    }
                    Ok(())
                }
            }
        })
        .await
    })?;
    Ok(format!("{rate:.0} calls/s ({:.1} µs per call per caller)", in_flight as f64 * 1e6 / rate))
}
