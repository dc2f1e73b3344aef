//! The REST face (`http:` listener, the agent-sandbox filesystem API) against the same
//! operation over gRPC, in the same run, on loopback TCP, one client: GET and PUT of a 4 KiB
//! file (p50; gRPC readBytes and writeBytes, sampled in turn with them), then GET and PUT of a
//! large file (1 GiB by default; MB/s; gRPC streamText and writeBytes) and the daemon's peak RSS.
//! The REST client is hyper's HTTP/1.1 client on one keep-alive connection, as an SDK's pool has.

use std::time::Instant;

use bytes::Bytes;
use fsd_proto::v1::{self, fsd_client::FsdClient, write_bytes_request::Item};
use fsd_tool_client::connect;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::client::conn::http1::SendRequest;
use tonic::transport::Channel;

use crate::fixtures;
use crate::procs::{Server, Transport};
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// The chunk the large uploads are sent in, by both faces.
const CHUNK: usize = 1 << 20;

fn body(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
}

/// `mib` MiB from memory, in 1 MiB chunks of one buffer (the client's own cost stays small).
fn streamed_body(chunk: Bytes, mib: u64) -> Body {
    let frames = tokio_stream::iter((0..mib).map(move |_| Ok(Frame::data(chunk.clone()))));
    http_body_util::StreamBody::new(frames).boxed_unsync()
}

/// One HTTP/1.1 connection to the REST listener, driven by a task of the client runtime.
async fn rest_connect(addr: &str) -> Res<SendRequest<Body>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            note!("  rest: connection ended: {e}");
        }
    });
    Ok(sender)
}

/// A request as an HTTP/1.1 client addressing the listener by its address sends it: a loopback
/// plaintext listener refuses any other `Host` (DNS rebinding, `fsd::rest::host`).
fn request(
    method: hyper::Method,
    host: &str,
    name: &str,
    length: u64,
    body: Body,
) -> Res<hyper::Request<Body>> {
    Ok(hyper::Request::builder()
        .method(method)
        .uri(format!("/v1/files/{name}"))
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_LENGTH, length)
        .body(body)?)
}

/// GETs `name` and reads its whole body; the byte count.
async fn rest_get(sender: &mut SendRequest<Body>, host: &str, name: &str) -> Res<u64> {
    sender.ready().await?;
    let response =
        sender.send_request(request(hyper::Method::GET, host, name, 0, body(Bytes::new()))?).await?;
    if response.status() != hyper::StatusCode::OK {
        return Err(format!("GET {name}: {}", response.status()).into());
    }
    let mut body = response.into_body();
    let mut got = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            got += data.len() as u64;
        }
    }
    Ok(got)
}

async fn rest_put(
    sender: &mut SendRequest<Body>,
    host: &str,
    name: &str,
    length: u64,
    body: Body,
) -> Res<()> {
    sender.ready().await?;
    let response = sender.send_request(request(hyper::Method::PUT, host, name, length, body)?).await?;
    let status = response.status();
    // Read to the end, so the connection is ready for the next request.
    let answer = response.into_body().collect().await?.to_bytes();
    if status != hyper::StatusCode::NO_CONTENT {
        return Err(format!("PUT {name}: {status} {}", String::from_utf8_lossy(&answer)).into());
    }
    Ok(())
}

async fn grpc_read(client: &mut FsdClient<Channel>, path: &str) -> Res<u64> {
    let request = v1::ReadBytesRequest { context: None, path: path.to_owned(), max_bytes: 0 };
    Ok(client.read_bytes(request).await?.into_inner().data.len() as u64)
}

async fn grpc_write(client: &mut FsdClient<Channel>, path: &str, chunk: Bytes, chunks: u64) -> Res<()> {
    let header = v1::WriteBytesHeader { context: None, path: path.to_owned(), guard: None, mode: None };
    let first = std::iter::once(v1::WriteBytesRequest { item: Some(Item::Header(header)) });
    let want = chunks * chunk.len() as u64;
    let rest = (0..chunks).map(move |_| v1::WriteBytesRequest { item: Some(Item::Chunk(chunk.clone())) });
    let reply = client.write_bytes(tokio_stream::iter(first.chain(rest))).await?.into_inner();
    if reply.size != want {
        return Err(format!("writeBytes wrote {} of {want} bytes", reply.size).into());
    }
    Ok(())
}

async fn grpc_stream(client: &mut FsdClient<Channel>, path: &str) -> Res<u64> {
    let request = v1::StreamTextRequest { context: None, path: path.to_owned(), chunk_bytes: 0 };
    let mut stream = client.stream_text(request).await?.into_inner();
    let mut got = 0u64;
    while let Some(reply) = stream.message().await? {
        if let Some(v1::stream_text_reply::Item::Chunk(bytes)) = reply.item {
            got += bytes.len() as u64;
        }
    }
    Ok(got)
}

/// MB/s, MB = 10^6 bytes.
fn rate(bytes: u64, started: Instant) -> f64 {
    bytes as f64 / started.elapsed().as_secs_f64() / 1e6
}

/// The small-file figures of one run: p50 of REST GET, gRPC readBytes, REST PUT, gRPC
/// writeBytes, in µs.
#[derive(Debug, Default)]
struct Small {
    get: PerRun,
    read_bytes: PerRun,
    put: PerRun,
    write_bytes: PerRun,
}

#[derive(Debug, Default)]
struct Large {
    get: PerRun,
    stream_text: PerRun,
    put: PerRun,
    write_bytes: PerRun,
}

struct Clients {
    rest: SendRequest<Body>,
    /// The REST listener's address, sent as `Host`.
    host: String,
    grpc: FsdClient<Channel>,
    root: String,
}

impl Clients {
    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.root)
    }
}

/// `n` samples each (after `n / 10` unmeasured rounds), REST and gRPC in turn, one of each per
/// round, so both see the same machine.
async fn small_run(c: &mut Clients, n: usize, small: &mut Small) -> Res<()> {
    let four_k = Bytes::from(fixtures::four_k());
    let (read_path, grpc_target) = (c.path("f4k.txt"), c.path("g4k.bin"));
    let (mut get, mut read, mut put, mut write) = (
        Samples::with_capacity(n),
        Samples::with_capacity(n),
        Samples::with_capacity(n),
        Samples::with_capacity(n),
    );
    let warm = n / 10;
    for i in 0..warm + n {
        let started = Instant::now();
        let got = rest_get(&mut c.rest, &c.host, "f4k.txt").await?;
        let get_time = started.elapsed();
        let started = Instant::now();
        let read_got = grpc_read(&mut c.grpc, &read_path).await?;
        let read_time = started.elapsed();
        if (got, read_got) != (4096, 4096) {
            return Err(format!("4 KiB reads returned {got} and {read_got} bytes").into());
        }
        let started = Instant::now();
        rest_put(&mut c.rest, &c.host, "p4k.bin", 4096, body(four_k.clone())).await?;
        let put_time = started.elapsed();
        let started = Instant::now();
        grpc_write(&mut c.grpc, &grpc_target, four_k.clone(), 1).await?;
        let write_time = started.elapsed();
        if i >= warm {
            get.push(get_time);
            read.push(read_time);
            put.push(put_time);
            write.push(write_time);
        }
    }
    small.get.push(get.p50());
    small.read_bytes.push(read.p50());
    small.put.push(put.p50());
    small.write_bytes.push(write.p50());
    Ok(())
}

/// The large GET and PUT over REST.
async fn rest_large(c: &mut Clients, mib: u64, large: &mut Large) -> Res<()> {
    let size = mib << 20;
    let started = Instant::now();
    let got = rest_get(&mut c.rest, &c.host, "big.txt").await?;
    large.get.push(rate(got, started));
    if got != size {
        return Err(format!("the large GET returned {got} of {size} bytes").into());
    }
    let started = Instant::now();
    rest_put(&mut c.rest, &c.host, "up-rest.bin", size, streamed_body(Bytes::from(vec![b'u'; CHUNK]), mib))
        .await?;
    large.put.push(rate(size, started));
    Ok(())
}

/// The same over gRPC: streamText and writeBytes.
async fn grpc_large(c: &mut Clients, mib: u64, large: &mut Large) -> Res<()> {
    let size = mib << 20;
    let started = Instant::now();
    let path = c.path("big.txt");
    let streamed = grpc_stream(&mut c.grpc, &path).await?;
    large.stream_text.push(rate(streamed, started));
    if streamed != size {
        return Err(format!("streamText returned {streamed} of {size} bytes").into());
    }
    let started = Instant::now();
    let path = c.path("up-grpc.bin");
    grpc_write(&mut c.grpc, &path, Bytes::from(vec![b'u'; CHUNK]), mib).await?;
    large.write_bytes.push(rate(size, started));
    Ok(())
}

/// The REST listener comes up with the others; it is waited for on its own.
fn wait_listening(addr: &str) -> Res<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return Err(format!("fsd did not listen on http:{addr} within 20 s").into());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

pub fn run(common: &Common, mib: u64) -> Res<Section> {
    let mib = if common.quick { mib.min(64) } else { mib };
    let dir = tempfile::Builder::new().prefix("fsd-bench-rest-").tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    std::fs::write(root.join("f4k.txt"), fixtures::four_k())?;
    note!("  rest: writing {mib} MiB to {}", root.join("big.txt").display());
    fixtures::big(&root.join("big.txt"), mib)?;
    // REST and gRPC over TCP are both the plaintext loopback identity, read-only by default.
    let config = dir.path().join("fsd.toml");
    std::fs::write(&config, "client_max_modes = { tcp = \"workspace-write\" }\n")?;
    let rest_addr = format!("127.0.0.1:{}", crate::procs::free_port()?);
    let extra =
        ["--config".into(), config.into_os_string(), "--listen".into(), format!("http:{rest_addr}").into()];
    let fsd = Server::fsd_with(&common.bin_dir()?, &root, &extra)?;
    wait_listening(&rest_addr)?;
    let rt = crate::client_runtime()?;
    let mut clients = rt.block_on(async {
        let (grpc, _) = connect::connect(&fsd.endpoint(Transport::Tcp)).await?;
        let rest = rest_connect(&rest_addr).await?;
        Res::Ok(Clients { rest, host: rest_addr.clone(), grpc, root: root.to_string_lossy().into_owned() })
    })?;
    let (idle_kib, _) = fsd.peak_rss_kib();

    let mut small = Small::default();
    let mut large = Large::default();
    for run in 0..common.runs {
        note!("  rest: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        rt.block_on(small_run(&mut clients, common.n(500), &mut small))?;
    }
    let (small_kib, _) = fsd.peak_rss_kib();
    let mut rest_kib = 0;
    for run in 0..common.runs {
        note!("  rest: {mib} MiB, run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        rt.block_on(rest_large(&mut clients, mib, &mut large))?;
        if run == 0 {
            // Before any large gRPC transfer: the peak the REST face alone reached.
            rest_kib = fsd.peak_rss_kib().0;
        }
        rt.block_on(grpc_large(&mut clients, mib, &mut large))?;
    }
    let (peak_kib, processes) = fsd.peak_rss_kib();
    drop(clients);
    drop(rt);
    drop(fsd);
    Ok(render(mib, &small, &large, [idle_kib, small_kib, rest_kib, peak_kib], processes, common.runs))
}

fn render(mib: u64, small: &Small, large: &Large, kib: [u64; 4], processes: usize, runs: usize) -> Section {
    let mut section = Section::default();
    let mut md = String::from("### REST face (agent-sandbox filesystem API) against gRPC, TCP loopback\n\n");
    md.push_str(
        "One client, one call at a time, in the same daemon and run: hyper's HTTP/1.1 client on one \
         keep-alive connection to the `http:` listener against fsd.v1 on the `tcp:` listener (HTTP/2). \
         4 KiB: p50 of each run's samples, REST and gRPC sampled in turn; GET against readBytes (the \
         whole file in one reply), PUT against writeBytes (a header and one chunk), both durable \
         atomic replaces.\n\n",
    );
    md.push_str("| operation | REST p50 | gRPC p50 | REST ÷ gRPC |\n|---|---|---|---|\n");
    for (label, rest, grpc, target) in [
        ("GET 4 KiB / readBytes", &small.get, &small.read_bytes, "REST GET 4 KiB p50 ≤ 1.5× gRPC readBytes"),
        (
            "PUT 4 KiB / writeBytes",
            &small.put,
            &small.write_bytes,
            "REST PUT 4 KiB p50 ≤ 1.5× gRPC writeBytes",
        ),
    ] {
        let ratio = rest.ratio(grpc);
        md.push_str(&format!("| {label} | {} | {} | {} |\n", rest.micros(), grpc.micros(), ratio.times()));
        section.verdict(format!("{target} (TCP loopback)"), ratio.times(), ratio.median() <= 1.5);
    }
    md.push_str(&format!(
        "\n{mib} MiB, MB/s (10^6 B/s) from sending the request to its last byte: GET against \
         streamText of the same file (fsd's default chunks), PUT against writeBytes, both sent from \
         memory in 1 MiB chunks into a durable atomic replace.\n\n"
    ));
    md.push_str("| operation | REST | gRPC | REST ÷ gRPC |\n|---|---|---|---|\n");
    for (label, rest, grpc, target) in [
        ("GET / streamText", &large.get, &large.stream_text, "REST GET throughput ≥ 80% of gRPC streamText"),
        ("PUT / writeBytes", &large.put, &large.write_bytes, "REST PUT throughput ≥ 80% of gRPC writeBytes"),
    ] {
        let ratio = rest.ratio(grpc);
        md.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            rest.with_unit("MB/s"),
            grpc.with_unit("MB/s"),
            ratio.percent()
        ));
        section.verdict(format!("{target} ({mib} MiB)"), ratio.percent(), ratio.median() >= 0.8);
    }
    let mib_of = |kib: u64| kib as f64 / 1024.0;
    let [idle, after_small, rest, peak] = kib;
    md.push_str(&format!(
        "\nPeak RSS of the daemon, VmHWM summed over its {processes} processes: **{:.1} MiB** after \
         one {mib} MiB GET and PUT over REST (before any large gRPC transfer; idle: {:.1} MiB, after \
         the 4 KiB calls: {:.1} MiB), {:.1} MiB after all {runs} rounds of both faces.\n",
        mib_of(rest),
        mib_of(idle),
        mib_of(after_small),
        mib_of(peak),
    ));
    section.verdict(
        format!("REST {mib} MiB GET/PUT peak RSS of daemon + workers < 64 MiB"),
        format!("{:.1} MiB", mib_of(rest)),
        rest < 64 * 1024,
    );
    section.markdown = md;
    section
}
