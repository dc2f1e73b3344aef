//! Per-call latency, one client, one call at a time, on the Unix socket and on loopback TCP:
//! stat (the RPC), readText (the RPC), and the read, write, edit and apply_patch tools through
//! `Session::call`. Each beside, in the same run: the RPC floor (bare tonic echo calls with the
//! same request and reply sizes as the fsd calls the tool makes) and the I/O floor (the same file
//! operation done locally). And the cost of content-aware versions on the read tool: the content
//! digest of the 4 KiB the daemon reads, timed in this process in the same runs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_tool_client::connect;
use fsd_tool_client::{ClientConfig, Session, Tools};
use prost::Message;
use serde_json::json;
use tonic::transport::Channel;

use crate::echo::{self, Payloads, Shape, pb::echo_client::EchoClient};
use crate::fixtures;
use crate::local::Local;
use crate::procs::{Reads, Server, Transport};
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Stat,
    ReadText,
    Read,
    Write,
    Edit,
    Patch,
}

impl Op {
    const ALL: [Op; 6] = [Op::Stat, Op::ReadText, Op::Read, Op::Write, Op::Edit, Op::Patch];

    fn label(self) -> &'static str {
        match self {
            Op::Stat => "stat (RPC)",
            Op::ReadText => "readText 4 KiB (RPC)",
            Op::Read => "**read tool**, 4 KiB",
            Op::Write => "**write tool**, 4 KiB, durable",
            Op::Edit => "edit tool, 4 KiB file",
            Op::Patch => "apply_patch, 1 file, 1 hunk",
        }
    }

    /// The fsd RPCs the call makes, as echo shapes.
    fn shapes(self, s: &Shapes) -> Vec<Shape> {
        match self {
            Op::Stat => vec![s.stat],
            Op::ReadText | Op::Read => vec![s.read],
            Op::Write => vec![s.write],
            Op::Edit => vec![s.edit],
            // Preflight stats and reads the file; the commit writes it.
            Op::Patch => vec![s.stat, s.read, s.write],
        }
    }

    fn io_floor(self) -> &'static str {
        match self {
            Op::Stat => "statx",
            Op::ReadText | Op::Read => "open+fstat+read",
            Op::Write => "atomic replace + fsync file + fsync dir",
            Op::Edit => "read + replace text + durable replace",
            Op::Patch => "stat + read + replace text + durable replace",
        }
    }

    /// Sample counts: the durable ones take about a millisecond each.
    fn samples(self, common: &Common) -> usize {
        match self {
            Op::Stat | Op::ReadText | Op::Read => common.n(2000),
            Op::Write | Op::Edit | Op::Patch => common.n(300),
        }
    }
}

/// Encoded request and reply sizes of each fsd RPC the tools make here.
#[derive(Debug, Clone, Copy)]
struct Shapes {
    stat: Shape,
    read: Shape,
    write: Shape,
    edit: Shape,
}

/// One transport's connections to one daemon: a raw client, a tool session, an echo client.
struct Conn {
    transport: Transport,
    /// Where that daemon serves plain reads.
    reads: Reads,
    /// The 4 KiB file the reads read, below that daemon's root.
    read_path: String,
    client: FsdClient<Channel>,
    session: Session,
    echo: EchoClient<Channel>,
    /// Per-transport targets, so one session's writes never make another's observation stale.
    write_file: String,
    edit_file: String,
    patch_file: String,
    /// How many times each mutation ran: even means the file holds marker-A.
    flips: [u64; 3],
}

/// The per-run figures of one (transport, op).
#[derive(Debug, Default)]
struct Row {
    fsd_p50: PerRun,
    fsd_p99: PerRun,
    rpc_p50: PerRun,
    io_p50: PerRun,
}

/// The markers of a flip: odd counts go back.
fn markers(count: u64) -> (&'static str, &'static str) {
    if count.is_multiple_of(2) { ("marker-A", "marker-B") } else { ("marker-B", "marker-A") }
}

fn context() -> Option<v1::CallContext> {
    // Sized like a real session's context (`s-PID-NANOS`, `…-N`).
    let session_id = format!("s-{}-{}", std::process::id(), 1_700_000_000_000_000_000u64);
    Some(v1::CallContext { call_id: format!("{session_id}-1234"), session_id, mode: 0, escalation: None })
}

/// Measures each RPC once to learn its encoded sizes.
async fn shapes(client: &mut FsdClient<Channel>, root: &Path) -> Res<Shapes> {
    let path = root.join("shape-4k.txt");
    std::fs::write(&path, fixtures::four_k())?;
    let path = path.to_string_lossy().into_owned();
    let shape = |req: usize, rep: usize| Shape { request: req, reply: rep };

    let request =
        v1::StatRequest { context: context(), path: path.clone(), no_follow: false, check_write: false };
    let len = request.encoded_len();
    let reply = client.stat(request).await?.into_inner();
    let stat = shape(len, reply.encoded_len());

    let request = v1::ReadTextRequest { context: context(), path: path.clone(), max_bytes: 10 << 20 };
    let len = request.encoded_len();
    let reply = client.read_text(request).await?.into_inner();
    let read = shape(len, reply.encoded_len());
    let guard = |version: String, key: String| v1::WriteGuard {
        kind: Some(v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
            version,
            target_key: key,
        })),
    };
    let key = reply.target.map(|t| t.target_key).unwrap_or_default();

    let request = v1::WriteTextRequest {
        context: context(),
        path: path.clone(),
        content: fixtures::four_k_b(),
        guard: Some(guard(reply.version, key.clone())),
        match_existing_style: true,
    };
    let len = request.encoded_len();
    let reply = client.write_text(request).await?.into_inner();
    let write = shape(len, reply.encoded_len());

    let request = v1::EditTextRequest {
        context: context(),
        path,
        old_string: "marker-B".into(),
        new_string: "marker-A".into(),
        replace_all: false,
        guard: Some(v1::EditGuard { version: reply.version, target_key: key }),
    };
    let len = request.encoded_len();
    let reply = client.edit_text(request).await?.into_inner();
    let edit = shape(len, reply.encoded_len());
    Ok(Shapes { stat, read, write, edit })
}

/// One fsd call of `op`.
async fn fsd_once(op: Op, conn: &mut Conn) -> Res<()> {
    let read_path = conn.read_path.clone();
    let read_path = read_path.as_str();
    let result = match op {
        Op::Stat => {
            let request = v1::StatRequest {
                context: context(),
                path: read_path.to_owned(),
                no_follow: false,
                check_write: false,
            };
            let reply = conn.client.stat(request).await?.into_inner();
            return if reply.info.is_some() { Ok(()) } else { Err("stat found no file".into()) };
        }
        Op::ReadText => {
            let request =
                v1::ReadTextRequest { context: context(), path: read_path.to_owned(), max_bytes: 10 << 20 };
            let reply = conn.client.read_text(request).await?.into_inner();
            return if reply.text.len() == 4096 { Ok(()) } else { Err("readText: wrong size".into()) };
        }
        Op::Read => conn.session.call("read", json!({ "file_path": read_path })).await,
        Op::Write => {
            conn.flips[0] += 1;
            let content =
                if conn.flips[0].is_multiple_of(2) { fixtures::four_k() } else { fixtures::four_k_b() };
            conn.session.call("write", json!({ "file_path": conn.write_file, "content": content })).await
        }
        Op::Edit => {
            let (from, to) = markers(conn.flips[1]);
            conn.flips[1] += 1;
            let args = json!({ "file_path": conn.edit_file, "old_string": from, "new_string": to });
            conn.session.call("edit", args).await
        }
        Op::Patch => {
            let (from, to) = markers(conn.flips[2]);
            conn.flips[2] += 1;
            let input = fixtures::patch(std::slice::from_ref(&conn.patch_file), from, to);
            conn.session.call("apply_patch", json!({ "input": input })).await
        }
    };
    if result.is_error {
        return Err(format!("{op:?} failed on {}: {}", conn.transport.name(), result.text()).into());
    }
    Ok(())
}

/// One local operation of `op` (sample `i`).
fn local_once(op: Op, local: &mut Local, i: u64) -> Res<()> {
    let (from, to) = markers(i);
    match op {
        Op::Stat => local.stat(),
        Op::ReadText | Op::Read => local.read().map(drop),
        Op::Write => {
            let content = if i.is_multiple_of(2) { fixtures::four_k_b() } else { fixtures::four_k() };
            local.replace(content.as_bytes())
        }
        Op::Edit => local.edit(from, to),
        Op::Patch => local.patch(from, to),
    }
}

/// `n` samples each of the fsd call on every connection of `conns` (one transport: the daemon
/// with direct reads, the one with reads in workers), its RPC floor and its I/O floor,
/// interleaved one by one (after `n / 10` unmeasured rounds): every series sees the same
/// machine, which matters most for fsync, whose latency on this shared ext4 follows other
/// processes' writeback, and for the direct-versus-workers comparison.
async fn time_op(
    op: Op,
    conns: &mut [Conn],
    local: &mut Local,
    payloads: &Payloads,
    shapes: &[Shape],
    n: usize,
) -> Res<(Vec<Samples>, Samples, Samples)> {
    let mut fsd: Vec<Samples> = conns.iter().map(|_| Samples::with_capacity(n)).collect();
    let (mut rpc, mut io) = (Samples::with_capacity(n), Samples::with_capacity(n));
    let warm = n / 10;
    for i in 0..warm + n {
        for (c, conn) in conns.iter_mut().enumerate() {
            let started = Instant::now();
            fsd_once(op, conn).await?;
            if i >= warm {
                fsd[c].push(started.elapsed());
            }
        }
        let echo = &mut conns.first_mut().ok_or("no connection")?.echo;
        let started = Instant::now();
        payloads.call(echo, shapes).await?;
        let rpc_time = started.elapsed();
        let started = Instant::now();
        local_once(op, local, i as u64)?;
        let io_time = started.elapsed();
        if i >= warm {
            rpc.push(rpc_time);
            io.push(io_time);
        }
    }
    Ok((fsd, rpc, io))
}

/// The fixtures: a root per daemon (`name`) with the read file and one write, edit and patch
/// target per transport.
fn setup_root(dir: &Path, name: &str) -> Res<PathBuf> {
    let root = dir.join(name);
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    std::fs::write(root.join("f4k.txt"), fixtures::four_k())?;
    for t in ["unix", "tcp"] {
        for kind in ["w", "e", "p"] {
            std::fs::write(root.join(format!("{kind}4k-{t}.txt")), fixtures::four_k())?;
        }
    }
    Ok(root)
}

async fn open(
    (fsd, reads): (&Server, Reads),
    echo_server: &Server,
    transport: Transport,
    root: &Path,
) -> Res<Conn> {
    let (client, hello) = connect::connect(&fsd.endpoint(transport)).await?;
    let config = ClientConfig { apply_patch: true, ..ClientConfig::default() };
    let mut session = Session::new(Tools::new(config), client.clone(), hello, root.to_owned());
    let suffix = match transport {
        Transport::Unix => "unix",
        Transport::Tcp => "tcp",
    };
    let names = ["w", "e", "p"].map(|k| format!("{k}4k-{suffix}.txt"));
    // The observation policy is on: the session reads what it will change.
    for name in &names {
        let result = session.call("read", json!({ "file_path": name })).await;
        if result.is_error {
            return Err(format!("cannot read {name}: {}", result.text()).into());
        }
    }
    let [write_file, edit_file, patch_file] = names;
    Ok(Conn {
        transport,
        reads,
        read_path: root.join("f4k.txt").to_string_lossy().into_owned(),
        client,
        session,
        echo: echo::client(&echo_server.endpoint(transport)).await?,
        write_file,
        edit_file,
        patch_file,
        flips: [0; 3],
    })
}

pub fn run(common: &Common) -> Res<Section> {
    let dir = tempfile::Builder::new().prefix("fsd-bench-percall-").tempdir_in("/tmp")?;
    let local_dir = dir.path().join("local");
    std::fs::create_dir(&local_dir)?;
    // A daemon per place its plain reads run (`Reads`), in the same run.
    let mut daemons = Vec::new();
    for reads in Reads::ALL {
        let root = setup_root(dir.path(), &format!("ws-{}", reads.name()))?;
        daemons.push((Server::fsd_reads(&common.bin_dir()?, &root, reads)?, reads, root));
    }
    let echo_server = Server::echo()?;
    let rt = crate::client_runtime()?;
    let mut local = Local::new(&local_dir, &fixtures::four_k())?;
    let payloads = Payloads::new();

    // Grouped by transport (each `Reads` in turn), the groups sampled in turn per round.
    let mut conns = Vec::new();
    for transport in Transport::ALL {
        for (fsd, reads, root) in &daemons {
            conns.push(rt.block_on(open((fsd, *reads), &echo_server, transport, root))?);
        }
    }
    let shapes = match (conns.first_mut(), daemons.first()) {
        (Some(conn), Some((_, _, root))) => rt.block_on(shapes(&mut conn.client, root))?,
        _ => return Err("no connection".into()),
    };

    let mut rows: Vec<Vec<Row>> =
        conns.iter().map(|_| Op::ALL.iter().map(|_| Row::default()).collect()).collect();
    let four_k = fixtures::four_k();
    let mut digest = PerRun::default();
    for run in 0..common.runs {
        digest.push(digest_p50(four_k.as_bytes(), common.n(20_000)));
        note!("  per call: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        let per_transport = Reads::ALL.len();
        for (g, group) in conns.chunks_mut(per_transport).enumerate() {
            for (o, op) in Op::ALL.into_iter().enumerate() {
                let n = op.samples(common);
                let shapes = op.shapes(&shapes);
                let (fsd_samples, rpc, io) =
                    rt.block_on(time_op(op, group, &mut local, &payloads, &shapes, n))?;
                for (k, samples) in fsd_samples.iter().enumerate() {
                    let row = &mut rows[g * per_transport + k][o];
                    row.fsd_p50.push(samples.p50());
                    row.fsd_p99.push(samples.p99());
                    row.rpc_p50.push(rpc.p50());
                    row.io_p50.push(io.p50());
                }
            }
        }
    }
    let mut section = render(&conns, &rows, &shapes);
    digest_line(&mut section, &conns, &rows, &digest);
    Ok(section)
}

/// The p50 of `n` content digests of `bytes`, in µs (what readText adds to every whole read).
fn digest_p50(bytes: &[u8], n: usize) -> f64 {
    let mut samples = Samples::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        std::hint::black_box(fsd::digest::of(std::hint::black_box(bytes)));
        samples.push(started.elapsed());
    }
    samples.p50()
}

/// The digest's cost beside the read tool's p50 of the same runs.
fn digest_line(section: &mut Section, conns: &[Conn], rows: &[Vec<Row>], digest: &PerRun) {
    let read = Op::ALL.iter().position(|op| *op == Op::Read);
    let mut md = format!(
        "\nContent-aware versions: the content digest (AEGIS-128X2 MAC) of the 4 KiB the daemon reads takes {} per readText",
        digest.micros()
    );
    for (conn, per_op) in conns.iter().zip(rows) {
        let Some(row) = read.and_then(|r| per_op.get(r)) else { continue };
        let share = digest.ratio(&row.fsd_p50);
        md.push_str(&format!(
            ", {} of the read tool's p50 ({}, {} reads)",
            share.percent_fine(),
            conn.transport.name(),
            conn.reads.name()
        ));
        section.verdict(
            format!(
                "content digest ≤ 3% of the read tool, 4 KiB ({}, {} reads)",
                conn.transport.name(),
                conn.reads.name()
            ),
            share.percent_fine(),
            share.median() <= 0.03,
        );
    }
    md.push_str(".\n");
    section.markdown.push_str(&md);
}

fn render(conns: &[Conn], rows: &[Vec<Row>], shapes: &Shapes) -> Section {
    let mut section = Section::default();
    let mut md = String::from("### Per call, one client, one call at a time\n\n");
    md.push_str(&format!(
        "p50 of each run's samples, median [min–max] over runs; ratios are per run, then the median. In each run the fsd call (on every daemon), its RPC floor and its I/O floor are sampled in turn, one of each per round, so all of them see the same machine. \
         RPC floor: bare tonic echo calls with the request/reply sizes of the fsd RPCs the call makes \
         (stat {}/{} B, readText {}/{} B, writeText {}/{} B, editText {}/{} B; apply_patch = stat + readText + writeText). \
         I/O floor: the same file operation done locally with std on the same filesystem. \
         Reads: `direct`, a daemon that serves plain reads in its network process on the runtime thread that received them (`direct_reads` and `inline_reads`, the defaults); `threads`, one that hands them to its direct read threads (`inline_reads = false`); `workers`, one whose reads take the hop to a worker (`direct_reads = false`); the three daemons run in the same run.\n\n",
        shapes.stat.request,
        shapes.stat.reply,
        shapes.read.request,
        shapes.read.reply,
        shapes.write.request,
        shapes.write.reply,
        shapes.edit.request,
        shapes.edit.reply,
    ));
    md.push_str("| transport | reads | call | fsd p50 | fsd p99 | RPC floor p50 | I/O floor p50 (what) | fsd ÷ RPC floor | fsd ÷ (I/O + RPC floor) |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for (conn, per_op) in conns.iter().zip(rows) {
        for (op, row) in Op::ALL.into_iter().zip(per_op) {
            let vs_rpc = row.fsd_p50.ratio(&row.rpc_p50);
            let vs_both = row.fsd_p50.ratio(&row.io_p50.plus(&row.rpc_p50));
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |\n",
                conn.transport.name(),
                conn.reads.name(),
                op.label(),
                row.fsd_p50.micros(),
                row.fsd_p99.micros(),
                row.rpc_p50.micros(),
                row.io_p50.micros(),
                op.io_floor(),
                vs_rpc.times(),
                vs_both.times(),
            ));
            let on = format!("{}, {} reads", conn.transport.name(), conn.reads.name());
            match op {
                Op::Stat => section.verdict(
                    format!("stat ≤ 1.1× the echo plus the local statx ({on})"),
                    vs_both.times(),
                    vs_both.median() <= 1.1,
                ),
                Op::Read => section.verdict(
                    format!("read tool ≤ 1.2× the echo plus the local read ({on})"),
                    vs_both.times(),
                    vs_both.median() <= 1.2,
                ),
                Op::Write => section.verdict(
                    format!(
                        "durable write ≤ 1.3× (local atomic replace with both fsyncs + one bare RPC) ({on})"
                    ),
                    vs_both.times(),
                    vs_both.median() <= 1.3,
                ),
                Op::Patch => section.verdict(
                    format!("apply_patch, one file ≤ 1.5× its floors ({on})"),
                    vs_both.times(),
                    vs_both.median() <= 1.5,
                ),
                _ => {}
            }
        }
    }
    section.markdown = md;
    section
}
