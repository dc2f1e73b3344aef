//! The noisy neighbour: while one identity (anonymous loopback TCP) holds 1000 stalled
//! streamText calls (most refused by its `open_streams` budget), 1000 idle connections and a
//! flood of stats, another identity (the Unix peer uid) reads a 4 KiB file with the read tool.
//! Its p50 is compared with its unloaded p50 in the same run; the daemon's RSS and thread count
//! under the load are printed beside. The same load against the bare tonic echo server, in the
//! same run, is the floor: what a server that answers the flood as fast as tonic does leaves its
//! other client on these CPUs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fsd_proto::v1;
use fsd_tool_client::connect::{self, Endpoint};
use fsd_tool_client::{ClientConfig, Session, Tools};
use serde_json::json;

use crate::echo::{self, Payloads, Shape};
use crate::fixtures;
use crate::procs::{Server, Transport};
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

const STALLED_STREAMS: usize = 1000;
const IDLE_CONNECTIONS: usize = 1000;
const FLOOD_IN_FLIGHT: usize = 64;

/// What the noisy identity got.
#[derive(Debug, Default)]
struct Noise {
    streams_held: AtomicU64,
    streams_refused: AtomicU64,
    idle_open: AtomicU64,
    stats_ok: AtomicU64,
    stats_refused: AtomicU64,
}

/// Threads of a process (0 when it is gone).
fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

/// The noisy identity's load, until `stop`.
async fn noise(
    tcp: Endpoint,
    addr: String,
    path: String,
    big: String,
    noise: Arc<Noise>,
    stop: Arc<AtomicBool>,
) -> Res<()> {
    let mut idle = Vec::new();
    for _ in 0..IDLE_CONNECTIONS {
        if let Ok(stream) = tokio::net::TcpStream::connect(&addr).await {
            idle.push(stream);
            noise.idle_open.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Stalled streams over a few connections (HTTP/2 caps the streams of one).
    let mut stalled = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(connect::connect(&tcp).await?.0);
    }
    for i in 0..STALLED_STREAMS {
        let mut client = clients[i % clients.len()].clone();
        let request = v1::StreamTextRequest { path: big.clone(), chunk_bytes: 1 << 20, ..Default::default() };
        match client.stream_text(request).await {
            Ok(stream) => {
                // Never read: not even the header (HTTP/2 flow control would hold it back
                // behind the other stalled streams of the connection anyway).
                stalled.push(stream.into_inner());
                noise.streams_held.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                noise.streams_refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // The flood on connections of its own: stalled streams use up their connection's HTTP/2
    // window, which would hold back any other reply on it.
    let mut flooders = Vec::new();
    for _ in 0..4 {
        flooders.push(connect::connect(&tcp).await?.0);
    }
    let mut flood = Vec::new();
    for i in 0..FLOOD_IN_FLIGHT {
        let (mut client, noise, stop, path) =
            (flooders[i % flooders.len()].clone(), noise.clone(), stop.clone(), path.clone());
        flood.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = v1::StatRequest { path: path.clone(), ..Default::default() };
                match client.stat(request).await {
                    Ok(_) => noise.stats_ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => noise.stats_refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for task in flood {
        let _ = task.await;
    }
    drop((stalled, idle));
    Ok(())
}

/// The echo floor's noisy identity: idle connections and stat-shaped echoes, 64 in flight, until
/// `stop`. Streams are left out: the echo server holds nothing for a stream it is not asked for.
async fn echo_noise(tcp: Endpoint, addr: String, answered: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> Res<()> {
    let mut idle = Vec::new();
    for _ in 0..IDLE_CONNECTIONS {
        if let Ok(stream) = tokio::net::TcpStream::connect(&addr).await {
            idle.push(stream);
        }
    }
    let mut flooders = Vec::new();
    for _ in 0..4 {
        flooders.push(echo::client(&tcp).await?);
    }
    let payloads = Payloads::new();
    let mut flood = Vec::new();
    for i in 0..FLOOD_IN_FLIGHT {
        let (mut client, payloads, answered, stop) =
            (flooders[i % flooders.len()].clone(), payloads.clone(), answered.clone(), stop.clone());
        flood.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if payloads.call(&mut client, &[STAT_SHAPE]).await.is_ok() {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in flood {
        let _ = task.await;
    }
    drop(idle);
    Ok(())
}

/// A stat's encoded request and reply, and a 4 KiB readText's (as `concurrent` measures them).
const STAT_SHAPE: Shape = Shape { request: 112, reply: 160 };
const READ_SHAPE: Shape = Shape { request: 117, reply: 4252 };

/// The echo floor, one run: the victim's read-shaped echo p50 unloaded and under the load, and
/// the flood's echoes answered while the victim sampled.
fn echo_floor(server: &Server, n: usize) -> Res<(f64, f64, u64)> {
    let rt = crate::client_runtime()?;
    let payloads = Payloads::new();
    let mut client = rt.block_on(echo::client(&server.endpoint(Transport::Unix)))?;
    let victim = |client: &mut echo::Client| -> Res<Samples> {
        rt.block_on(async {
            let mut samples = Samples::with_capacity(n);
            for _ in 0..n {
                let started = Instant::now();
                payloads.call(client, &[READ_SHAPE]).await?;
                samples.push(started.elapsed());
            }
            Ok(samples)
        })
    };
    let quiet = victim(&mut client)?;
    let Endpoint::Tcp(addr) = server.endpoint(Transport::Tcp) else { return Err("no TCP endpoint".into()) };
    let (answered, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let noisy_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let load =
        noisy_rt.spawn(echo_noise(server.endpoint(Transport::Tcp), addr, answered.clone(), stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(120);
    while answered.load(Ordering::Relaxed) < 1000 {
        if load.is_finished() || Instant::now() > deadline {
            return Err("the echo floor's noisy load did not start".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = answered.load(Ordering::Relaxed);
    let busy = victim(&mut client)?;
    let flood = answered.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    let _ = noisy_rt.block_on(load);
    Ok((quiet.p50(), busy.p50(), flood))
}

async fn victim_reads(session: &mut Session, path: &str, n: usize) -> Res<Samples> {
    let mut samples = Samples::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let result = session.call("read", json!({ "file_path": path })).await;
        samples.push(started.elapsed());
        if result.is_error {
            return Err(format!("the victim's read failed: {}", result.text()).into());
        }
    }
    Ok(samples)
}

pub fn run(common: &Common) -> Res<Section> {
    let dir = tempfile::Builder::new().prefix("fsd-bench-neighbour-").tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    std::fs::write(root.join("f4k.txt"), fixtures::four_k())?;
    fixtures::big(&root.join("big.txt"), 64)?;
    let root = std::fs::canonicalize(&root)?;
    let read_path = root.join("f4k.txt").to_string_lossy().into_owned();
    let big_path = root.join("big.txt").to_string_lossy().into_owned();
    let n = common.n(400);
    let (mut unloaded, mut loaded, mut ratio) = (PerRun::default(), PerRun::default(), PerRun::default());
    let (mut echo_unloaded, mut echo_loaded, mut echo_ratio) =
        (PerRun::default(), PerRun::default(), PerRun::default());
    let echo_server = Server::echo()?;
    let mut last = String::new();
    // The largest over runs: what the load cost the daemon at worst.
    let (mut peak_rss_kib, mut peak_threads) = (0u64, 0u64);
    for run in 0..common.runs {
        eprintln!("  noisy neighbour: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        let fsd = Server::fsd(&common.bin_dir()?, &root)?;
        let rt = crate::client_runtime()?;
        let Endpoint::Tcp(addr) = fsd.endpoint(Transport::Tcp) else { return Err("no TCP endpoint".into()) };
        let mut session = rt.block_on(async {
            let (client, hello) = connect::connect(&fsd.endpoint(Transport::Unix)).await?;
            Ok::<_, crate::Error>(Session::new(
                Tools::new(ClientConfig::default()),
                client,
                hello,
                root.clone(),
            ))
        })?;
        let quiet = rt.block_on(victim_reads(&mut session, &read_path, n))?;

        let stats = Arc::new(Noise::default());
        let stop = Arc::new(AtomicBool::new(false));
        let noisy_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let load = noisy_rt.spawn(noise(
            fsd.endpoint(Transport::Tcp),
            addr,
            read_path.clone(),
            big_path.clone(),
            stats.clone(),
            stop.clone(),
        ));
        // The load is in place once the streams are opened and the flood answers.
        let deadline = Instant::now() + Duration::from_secs(120);
        while stats.streams_held.load(Ordering::Relaxed) + stats.streams_refused.load(Ordering::Relaxed)
            < STALLED_STREAMS as u64
            || stats.stats_ok.load(Ordering::Relaxed) + stats.stats_refused.load(Ordering::Relaxed) < 1000
        {
            if load.is_finished() {
                let why = match noisy_rt.block_on(load) {
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok(())) => "it ended".into(),
                    Err(e) => e.to_string(),
                };
                return Err(format!("the noisy load failed: {why}").into());
            }
            if Instant::now() > deadline {
                return Err(format!("the noisy load did not start: {stats:?}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let flood_before = stats.stats_ok.load(Ordering::Relaxed);
        let busy = rt.block_on(victim_reads(&mut session, &read_path, n))?;
        let flood_during = stats.stats_ok.load(Ordering::Relaxed) - flood_before;
        let pids = fsd.pids();
        let thread_count: u64 = pids.iter().map(|p| threads(*p)).sum();
        let (rss, procs) = fsd.peak_rss_kib();
        peak_rss_kib = peak_rss_kib.max(rss);
        peak_threads = peak_threads.max(thread_count);
        stop.store(true, Ordering::Relaxed);
        let _ = noisy_rt.block_on(load);
        drop(noisy_rt);
        drop(session);
        drop(rt);
        unloaded.push(quiet.p50());
        loaded.push(busy.p50());
        ratio.push(busy.p50() / quiet.p50());
        drop(fsd);
        let (echo_quiet, echo_busy, echo_flood) = echo_floor(&echo_server, n)?;
        last = format!(
            "last run: {} stalled streams held and {} refused (FS_RATE_LIMITED), {} idle connections opened, \
             {} flood stats answered and {} refused ({flood_during} while the victim sampled, against \
             {echo_flood} echoes of the echo floor's flood); daemon peak RSS {:.1} MiB over {procs} processes, \
             {thread_count} threads under the load",
            stats.streams_held.load(Ordering::Relaxed),
            stats.streams_refused.load(Ordering::Relaxed),
            stats.idle_open.load(Ordering::Relaxed),
            stats.stats_ok.load(Ordering::Relaxed),
            stats.stats_refused.load(Ordering::Relaxed),
            rss as f64 / 1024.0,
        );
        echo_unloaded.push(echo_quiet);
        echo_loaded.push(echo_busy);
        echo_ratio.push(echo_busy / echo_quiet);
    }
    let markdown = format!(
        "### Noisy neighbour\n\n\
         One identity (anonymous loopback TCP) opens {IDLE_CONNECTIONS} idle connections and {STALLED_STREAMS} streamText calls of a 64 MiB file \
         that it never reads, then floods stats with {FLOOD_IN_FLIGHT} in flight; meanwhile another identity (the Unix peer uid) \
         calls the read tool on a 4 KiB file, one call at a time ({n} samples). Default budgets. A fresh daemon per run.\n\n\
         The floor, in the same runs: the bare tonic echo server under the same idle connections and a flood of \
         stat-shaped echoes ({FLOOD_IN_FLIGHT} in flight, from the same kind of client), its other client echoing \
         readText-shaped replies one at a time over the Unix socket.\n\n\
         | server | victim p50, unloaded | victim p50, under the load | loaded ÷ unloaded |\n|---|---|---|---|\n\
         | fsd (read tool) | {} | {} | {} |\n\
         | bare tonic echo (one RPC) | {} | {} | {} |\n\n{last}.\n",
        unloaded.micros(),
        loaded.micros(),
        ratio.times(),
        echo_unloaded.micros(),
        echo_loaded.micros(),
        echo_ratio.times(),
    );
    let mut section = Section { markdown, ..Section::default() };
    section.verdict(
        "noisy neighbour: another identity's read tool p50 ≤ 1.5× its unloaded p50 (daemon peak RSS and threads under the load beside)",
        format!(
            "{}; {:.1} MiB, {peak_threads} threads; the bare echo under the same flood: {}",
            ratio.times(),
            peak_rss_kib as f64 / 1024.0,
            echo_ratio.times()
        ),
        ratio.median() <= 1.5,
    );
    Ok(section)
}
