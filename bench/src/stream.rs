//! streamText of a large file (1 GiB by default, written for real on /tmp, removed after): MB/s
//! against a bare tonic server stream of the same chunk size (slices of one buffer: transport
//! only; and a file read on a blocking thread the way fsd's streamText reads: transport plus
//! read), and against a local read of the page-cached file; and fsd against its build without
//! the content digest (`unhashed-streams`), which is what the digest costs. Then the daemon's
//! peak RSS.

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use fsd_proto::v1::{self, stream_text_reply::Item};
use fsd_tool_client::connect;

use crate::echo::{self, pb};
use crate::fixtures;
use crate::procs::{Server, Transport};
use crate::report::Section;
use crate::stats::PerRun;
use crate::{Common, Res};

/// MB/s, MB = 10^6 bytes as in perf.md.
fn rate(bytes: u64, started: Instant) -> f64 {
    bytes as f64 / started.elapsed().as_secs_f64() / 1e6
}

/// Streams the whole file through fsd; (MB/s, the largest chunk seen).
async fn fsd_stream(endpoint: &connect::Endpoint, path: &str, size: u64) -> Res<(f64, usize)> {
    let (mut client, _) = connect::connect(endpoint).await?;
    let started = Instant::now();
    // chunk_bytes 0: the daemon's default, as the read tool asks.
    let request = v1::StreamTextRequest { context: None, path: path.to_owned(), chunk_bytes: 0 };
    let mut stream = client.stream_text(request).await?.into_inner();
    let (mut got, mut largest) = (0u64, 0usize);
    while let Some(reply) = stream.message().await? {
        if let Some(Item::Chunk(bytes)) = reply.item {
            got += bytes.len() as u64;
            largest = largest.max(bytes.len());
        }
    }
    if got != size {
        return Err(format!("fsd streamed {got} of {size} bytes").into());
    }
    Ok((rate(got, started), largest))
}

/// Streams `size` bytes from the echo server; `path` empty: from memory.
async fn echo_stream(endpoint: &connect::Endpoint, chunk: usize, size: u64, path: &str) -> Res<f64> {
    let mut client = echo::client(endpoint).await?;
    let started = Instant::now();
    let request = pb::StreamRequest { chunk_bytes: chunk as u32, total_bytes: size, path: path.to_owned() };
    let mut stream = client.stream(request).await?.into_inner();
    let mut got = 0u64;
    while let Some(chunk) = stream.message().await? {
        got += chunk.data.len() as u64;
    }
    if got != size {
        return Err(format!("echo streamed {got} of {size} bytes").into());
    }
    Ok(rate(got, started))
}

/// The rate of the content digest over the file's bytes in chunks of `chunk`, read first (what
/// the network process adds to a stream that reaches the end: it hashes each chunk as it
/// passes).
fn digest_rate(path: &Path, chunk: usize) -> Res<f64> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; chunk];
    let mut hasher = fsd::digest::Digest::default();
    let mut hashing = std::time::Duration::ZERO;
    let mut got = 0u64;
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => {
                let started = Instant::now();
                hasher.update(&buf[..n]);
                hashing += started.elapsed();
                got += n as u64;
            }
        }
    }
    std::hint::black_box(hasher.finish());
    Ok(got as f64 / hashing.as_secs_f64().max(1e-9) / 1e6)
}

fn local_read(path: &Path, chunk: usize) -> Res<f64> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; chunk];
    let started = Instant::now();
    let mut got = 0u64;
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => got += n as u64,
        }
    }
    Ok(rate(got, started))
}

pub fn run(common: &Common, mib: u64) -> Res<Section> {
    let mib = if common.quick { mib.min(64) } else { mib };
    let dir = tempfile::Builder::new().prefix("fsd-bench-stream-").tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let file = root.join("big.txt");
    note!("  streaming: writing {mib} MiB to {}", file.display());
    fixtures::big(&file, mib)?;
    let size = mib << 20;
    let path = file.to_string_lossy().into_owned();
    // Into the page cache before anything is timed, so every reader starts equal.
    local_read(&file, 1 << 20)?;

    let fsd = Server::fsd(&common.bin_dir()?, &root)?;
    // The same daemon built without the stream digest: what the digest costs, measured.
    let unhashed = Server::fsd(&common.comparison_build("unhashed", "unhashed-streams")?, &root)?;
    let echo_server = Server::echo()?;
    let rt = crate::client_runtime()?;
    // The daemon's peak before any stream: start-up and idle pools.
    rt.block_on(connect::connect(&fsd.endpoint(Transport::Unix)))?;
    let (idle_kib, _) = fsd.peak_rss_kib();

    let mut chunk = 0usize;
    let mut rows: Vec<(Transport, PerRun, PerRun, PerRun)> = Transport::ALL
        .iter()
        .map(|t| (*t, PerRun::default(), PerRun::default(), PerRun::default()))
        .collect();
    // fsd built without the digest, per transport.
    let mut unhashed_rates: Vec<PerRun> = Transport::ALL.iter().map(|_| PerRun::default()).collect();
    let mut local = PerRun::default();
    let mut digest = PerRun::default();
    for run in 0..common.runs {
        note!("  streaming: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        for (transport, fsd_rates, mem_rates, file_rates) in rows.iter_mut() {
            let (fsd_rate, largest) = rt.block_on(fsd_stream(&fsd.endpoint(*transport), &path, size))?;
            chunk = chunk.max(largest);
            let echo_endpoint = echo_server.endpoint(*transport);
            mem_rates.push(rt.block_on(echo_stream(&echo_endpoint, chunk, size, ""))?);
            file_rates.push(rt.block_on(echo_stream(&echo_endpoint, chunk, size, &path))?);
            fsd_rates.push(fsd_rate);
        }
        local.push(local_read(&file, chunk.max(4096))?);
        digest.push(digest_rate(&file, chunk.max(4096))?);
    }
    // The digest's cost: the two builds streamed back to back, in pairs (which one first
    // alternates), more pairs than runs: a 1 GiB stream varies by a fifth from one to the next
    // on this shared machine, more than the effect, and only a ratio of neighbours sees past it.
    let pairs = if common.quick { 2 } else { (4 * common.runs).max(11) };
    let mut hashed_rates: Vec<PerRun> = Transport::ALL.iter().map(|_| PerRun::default()).collect();
    // CPU seconds per GiB streamed, the daemon's and the daemon's plus this client's, per
    // transport, with and without the digest: what the digest costs in work, which the
    // machine's noise moves far less than it moves a rate.
    let per_gib = 1024.0 / mib as f64;
    let mut cpu: Vec<[PerRun; 4]> = Transport::ALL.iter().map(|_| Default::default()).collect();
    for pair in 0..pairs {
        if pair % 4 == 0 {
            note!("  streaming: digest pair {}/{pairs} ({})", pair + 1, crate::report::loadavg());
        }
        for (((transport, with), without), cpu) in
            Transport::ALL.iter().zip(&mut hashed_rates).zip(&mut unhashed_rates).zip(&mut cpu)
        {
            let [daemon_with, daemon_without, total_with, total_without] = cpu;
            let rate = |server: &Server, daemon: &mut PerRun, total: &mut PerRun| -> Res<f64> {
                let me = [std::process::id()];
                let (daemon_before, client_before) =
                    (server.cpu_seconds(), fsd_testkit::procs::cpu_seconds(&me));
                let rate = rt.block_on(fsd_stream(&server.endpoint(*transport), &path, size))?.0;
                let spent = server.cpu_seconds() - daemon_before;
                let client = fsd_testkit::procs::cpu_seconds(&me) - client_before;
                daemon.push(spent * per_gib);
                total.push((spent + client) * per_gib);
                Ok(rate)
            };
            if pair % 2 == 0 {
                with.push(rate(&fsd, daemon_with, total_with)?);
                without.push(rate(&unhashed, daemon_without, total_without)?);
            } else {
                without.push(rate(&unhashed, daemon_without, total_without)?);
                with.push(rate(&fsd, daemon_with, total_with)?);
            }
        }
    }
    let (peak_kib, processes) = fsd.peak_rss_kib();
    let (echo_kib, _) = echo_server.peak_rss_kib();
    drop(fsd);
    drop(unhashed);
    drop(echo_server);

    let mut section = Section::default();
    let mut md = format!("### streamText of a {mib} MiB file\n\n");
    md.push_str(&format!(
        "MB/s (10^6 B/s) from issuing the RPC to the last chunk, on a fresh connection; {} KiB chunks \
         (fsd's default, which the read tool asks for). Bare tonic (memory): the echo server streams \
         slices of one buffer. Bare tonic (file): it reads the same page-cached file on a blocking \
         thread into a fresh buffer per chunk and sends it through a channel, as fsd's streamText does. Local: \
         `read(2)` of the file with the same buffer size.\n\n",
        chunk / 1024
    ));
    md.push_str("| transport | fsd streamText | bare tonic stream (memory) | bare tonic stream (file) | local read | fsd ÷ bare (memory) | fsd ÷ bare (file) | fsd ÷ local |\n");
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for (transport, fsd_rates, mem_rates, file_rates) in &rows {
        let vs_mem = fsd_rates.ratio(mem_rates);
        let vs_file = fsd_rates.ratio(file_rates);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            transport.name(),
            fsd_rates.with_unit("MB/s"),
            mem_rates.with_unit("MB/s"),
            file_rates.with_unit("MB/s"),
            local.with_unit("MB/s"),
            vs_mem.percent(),
            vs_file.percent(),
            fsd_rates.ratio(&local).percent(),
        ));
        section.verdict(
            format!(
                "streaming ≥ 85% of bare tonic streaming ({}, vs the in-memory stream)",
                transport.name()
            ),
            vs_mem.percent(),
            vs_mem.median() >= 0.85,
        );
    }
    // Time hashing ÷ time streaming = stream rate ÷ hash rate: the share of the stream's time the
    // digest would add if none of it overlapped the sending: an upper bound, printed beside.
    md.push_str(&format!(
        "\nContent-aware versions: the content digest (AEGIS-128X2 MAC) over the same chunks runs at {} on one core",
        digest.with_unit("MB/s")
    ));
    for (transport, fsd_rates, _, _) in &rows {
        let share = fsd_rates.ratio(&digest);
        md.push_str(&format!(
            ", {} of the stream's time if none of it overlapped the sending ({})",
            share.percent_fine(),
            transport.name()
        ));
    }
    // What it costs, measured: fsd against the same daemon built without the stream digest.
    md.push_str(&format!(
        ". Measured against fsd built without the stream digest (feature `unhashed-streams`), \
         the two streaming the file back to back in {pairs} pairs (median [min–max] over the pairs)"
    ));
    for ((transport, with), without) in Transport::ALL.iter().zip(&hashed_rates).zip(&unhashed_rates) {
        let cost = without.ratio(with).map(|r| r - 1.0);
        md.push_str(&format!(
            ": {} with the digest against {} without, {} slower ({})",
            with.with_unit("MB/s"),
            without.with_unit("MB/s"),
            cost.percent_fine(),
            transport.name()
        ));
        section.verdict(
            format!("stream digest ≤ 10% over no digest, 1 GiB ({})", transport.name()),
            cost.percent_fine(),
            cost.median() <= 0.10,
        );
    }
    md.push_str(
        ". In work, over the same pairs (CPU seconds per GiB from /proc, utime + stime, median \
         [min–max])",
    );
    for (transport, [daemon_with, daemon_without, total_with, total_without]) in
        Transport::ALL.iter().zip(&cpu)
    {
        let more = total_with.ratio(total_without).map(|r| r - 1.0);
        md.push_str(&format!(
            ": the daemon {} with the digest against {} without, the daemon and the client \
             together {} against {}, {} more ({})",
            daemon_with.with_unit("s"),
            daemon_without.with_unit("s"),
            total_with.with_unit("s"),
            total_without.with_unit("s"),
            more.percent_fine(),
            transport.name()
        ));
    }
    md.push_str(".\n");
    let mib_of = |kib: u64| kib as f64 / 1024.0;
    md.push_str(&format!(
        "\nPeak RSS of the daemon, VmHWM summed over its {processes} processes (supervisor, network \
         process, workers) after all {} streams: **{:.1} MiB** (before streaming: {:.1} MiB). The bare \
         echo server (one process) peaked at {:.1} MiB.\n",
        common.runs * Transport::ALL.len(),
        mib_of(peak_kib),
        mib_of(idle_kib),
        mib_of(echo_kib),
    ));
    section.verdict(
        "streaming peak RSS of daemon + workers < 64 MiB",
        format!("{:.1} MiB", mib_of(peak_kib)),
        peak_kib < 64 * 1024,
    );
    section.markdown = md;
    Ok(section)
}
