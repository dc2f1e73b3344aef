//! Side by side through one raw JSON-RPC client over stdio (one JSON line per message, blocking
//! pipes): `fsd-tools mcp --root DIR` against the MCP reference filesystem server
//! (`@modelcontextprotocol/server-filesystem`, pinned in bench/package-lock.json). Both servers
//! start fresh each run; each operation gets a warm-up, then sequential tools/call round trips.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

use crate::fixtures;
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

/// The protocol version the raw client asks for (the one perf.md's raw client used).
const PROTOCOL: &str = "2025-06-18";

/// One MCP server over stdio.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: String,
}

impl Peer {
    fn start(mut cmd: Command) -> Res<Peer> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut peer = Peer { child, stdin, stdout, next_id: 0, line: String::new() };
        let params = json!({
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": { "name": "fsd-bench", "version": env!("CARGO_PKG_VERSION") }
        });
        peer.request("initialize", params)?;
        peer.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
        Ok(peer)
    }

    fn send(&mut self, message: &Value) -> Res<()> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        let mut text = serde_json::to_string(message)?;
        text.push('\n');
        stdin.write_all(text.as_bytes())?;
        stdin.flush()?;
        Ok(())
    }

    /// One request and its response (notifications and server requests in between are
    /// answered or skipped).
    fn request(&mut self, method: &str, params: Value) -> Res<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                return Err(format!("the server closed stdout during {method}").into());
            }
            let message: Value = serde_json::from_str(&self.line)?;
            if message.get("id").and_then(Value::as_u64) == Some(id) && message.get("method").is_none() {
                if let Some(error) = message.get("error") {
                    return Err(format!("{method}: {error}").into());
                }
                return Ok(message.get("result").cloned().unwrap_or(Value::Null));
            }
            if let (Some(server_id), Some(_)) = (message.get("id"), message.get("method")) {
                // A request from the server (e.g. roots/list): we offer nothing.
                let reply = json!({ "jsonrpc": "2.0", "id": server_id, "error": { "code": -32601, "message": "not supported" } });
                self.send(&reply)?;
            }
        }
    }

    /// tools/call; a tool error is a benchmark failure.
    fn call(&mut self, tool: &str, arguments: Value) -> Res<()> {
        let result = self.request("tools/call", json!({ "name": tool, "arguments": arguments }))?;
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(format!("{tool} failed: {result}").into());
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing stdin ends both servers; fsd-tools then stops its private daemon.
        drop(self.stdin.take());
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ping,
    Read,
    Stat,
    Write,
}

impl Op {
    const ALL: [Op; 4] = [Op::Ping, Op::Read, Op::Stat, Op::Write];

    fn label(self) -> &'static str {
        match self {
            Op::Ping => "ping (JSON-RPC round trip, no tool)",
            Op::Read => "**read** 4 KiB",
            Op::Stat => "stat of a 4 KiB file",
            Op::Write => "**write** 4 KiB",
        }
    }

    fn samples(self, common: &Common) -> usize {
        match self {
            Op::Ping | Op::Read | Op::Stat => common.n(1000),
            Op::Write => common.n(500),
        }
    }
}

/// Which server a peer is, and how it names things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Fsd,
    Reference,
}

/// One call of `op` on `side`; None when that side has no such tool.
fn once(peer: &mut Peer, side: Side, op: Op, dir: &Path, i: usize) -> Option<Res<()>> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let content = if i.is_multiple_of(2) { fixtures::four_k_b() } else { fixtures::four_k() };
    Some(match (side, op) {
        (_, Op::Ping) => peer.request("ping", json!({})).map(drop),
        (Side::Fsd, Op::Read) => peer.call("read", json!({ "file_path": file("f4k.txt") })),
        (Side::Reference, Op::Read) => peer.call("read_text_file", json!({ "path": file("f4k.txt") })),
        // fsd's model-facing tools have no stat; its daemon's stat RPC is in the per-call table.
        (Side::Fsd, Op::Stat) => return None,
        (Side::Reference, Op::Stat) => peer.call("get_file_info", json!({ "path": file("f4k.txt") })),
        (Side::Fsd, Op::Write) => {
            peer.call("write", json!({ "file_path": file("w4k.txt"), "content": content }))
        }
        (Side::Reference, Op::Write) => {
            peer.call("write_file", json!({ "path": file("w4k.txt"), "content": content }))
        }
    })
}

/// Every peer's samples of `op`, one call of each per round (after `n / 5` unmeasured rounds),
/// so all see the same machine; None for a side without the tool.
fn time_all(peers: &mut [(Peer, Side, PathBuf)], op: Op, n: usize) -> Res<Vec<Option<Samples>>> {
    let mut out: Vec<Option<Samples>> = peers.iter().map(|_| Some(Samples::with_capacity(n))).collect();
    let warm = n / 5;
    for i in 0..warm + n {
        for (s, (peer, side, dir)) in peers.iter_mut().enumerate() {
            if out[s].is_none() {
                continue;
            }
            let started = Instant::now();
            match once(peer, *side, op, dir, i) {
                None => out[s] = None,
                Some(result) => result?,
            }
            let elapsed = started.elapsed();
            if let (Some(samples), true) = (out[s].as_mut(), i >= warm) {
                samples.push(elapsed);
            }
        }
    }
    Ok(out)
}

fn data_dir(parent: &Path, name: &str) -> Res<PathBuf> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    std::fs::write(dir.join("f4k.txt"), fixtures::four_k())?;
    std::fs::write(dir.join("w4k.txt"), fixtures::four_k())?;
    Ok(dir)
}

/// p50 and p99 per run of one (side, op).
#[derive(Debug, Default)]
struct Series {
    p50: PerRun,
    p99: PerRun,
    present: bool,
}

pub fn run(common: &Common, peer_script: &Path) -> Res<Section> {
    if !peer_script.is_file() {
        return Err(
            format!("{} is missing: run scripts/bench.sh, which installs it", peer_script.display()).into()
        );
    }
    // Absolute: the server runs with its data directory as its cwd.
    let peer_script = std::fs::canonicalize(peer_script)?;
    let tools = common.bin_dir()?.join("fsd-tools");
    let tmp = tempfile::Builder::new().prefix("fsd-bench-mcp-").tempdir_in("/tmp")?;
    let ours = data_dir(tmp.path(), "fsd")?;
    let workers_dir = data_dir(tmp.path(), "fsd-workers")?;
    let theirs = data_dir(tmp.path(), "reference")?;
    // The same tools over a daemon whose reads go to its workers (`direct_reads = false`),
    // started by the kit beside the embedded one, in the same run.
    let workers =
        crate::procs::Server::fsd_reads(&common.bin_dir()?, &workers_dir, crate::procs::Reads::Workers)?;
    let workers_endpoint = match workers.endpoint(crate::procs::Transport::Unix) {
        fsd_tool_client::connect::Endpoint::Unix(path) => format!("unix:{}", path.display()),
        other => return Err(format!("not a Unix socket: {other:?}").into()),
    };
    let mut series: Vec<[Series; 3]> = Op::ALL.iter().map(|_| Default::default()).collect();
    for run in 0..common.runs {
        note!("  MCP: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        let mut cmd = Command::new(&tools);
        cmd.arg("mcp").arg("--root").arg(&ours).current_dir(&ours).env("FSD_LOG", "warn");
        let fsd = Peer::start(cmd)?;
        let mut cmd = Command::new(&tools);
        cmd.arg("mcp").arg("--endpoint").arg(&workers_endpoint).arg("--cwd").arg(&workers_dir);
        cmd.current_dir(&workers_dir).env("FSD_LOG", "warn");
        let fsd_workers = Peer::start(cmd)?;
        let mut cmd = Command::new("node");
        cmd.arg(&peer_script).arg(&theirs).current_dir(&theirs);
        let reference = Peer::start(cmd)?;
        let mut peers = vec![
            (fsd, Side::Fsd, ours.clone()),
            (fsd_workers, Side::Fsd, workers_dir.clone()),
            (reference, Side::Reference, theirs.clone()),
        ];
        // The observation policy is on: fsd's sessions read the file they will overwrite.
        for (peer, side, dir) in peers.iter_mut() {
            if *side == Side::Fsd {
                peer.call("read", json!({ "file_path": dir.join("w4k.txt").to_string_lossy() }))?;
            }
        }
        for (o, op) in Op::ALL.into_iter().enumerate() {
            let all = time_all(&mut peers, op, op.samples(common))?;
            for (s, samples) in all.into_iter().enumerate() {
                if let Some(samples) = samples {
                    series[o][s].p50.push(samples.p50());
                    series[o][s].p99.push(samples.p99());
                    series[o][s].present = true;
                }
            }
        }
    }

    let mut section = Section::default();
    let mut md = String::from("### MCP over stdio: `fsd-tools mcp` vs the reference filesystem server\n\n");
    md.push_str(&format!(
        "One raw JSON-RPC client (this bench: one JSON line per message, blocking pipes, protocol {PROTOCOL}), \
         both servers started fresh in each run, {} warm-up rounds then sequential round trips per operation, alternating one call to each server per round so both see the same machine. \
         fsd: `fsd-tools mcp --root DIR` (its private daemon, workers and all, plain reads direct as by default; tools read / write, \
         observation policy on); \"reads in workers\": `fsd-tools mcp --endpoint` over a daemon with `direct_reads = false`, in the same rounds. Reference: `@modelcontextprotocol/server-filesystem` (version in \
         bench/package.json) on Node {}; tools read_text_file / get_file_info / write_file. \
         **Writes are not alike: fsd's write is durable (temporary file fsynced, renamed, directory \
         fsynced) and version-guarded; the reference server's write_file never fsyncs.** fsd exposes no \
         stat tool to models (the contract's tool set), so the stat row has the reference server only.\n\n",
        Op::Read.samples(common) / 5,
        node_version()
    ));
    md.push_str("| operation | fsd-tools mcp p50 | p99 | reads in workers p50 | reference p50 | p99 | fsd ÷ reference (p50) |\n|---|---|---|---|---|---|---|\n");
    for (op, [ours, in_workers, theirs]) in Op::ALL.into_iter().zip(&series) {
        let cell = |s: &Series, v: &PerRun| if s.present { v.micros() } else { "no such tool".to_owned() };
        let ratio = ours.p50.ratio(&theirs.p50);
        let ratio_text = if ours.present && theirs.present { ratio.times() } else { "–".to_owned() };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            op.label(),
            cell(ours, &ours.p50),
            cell(ours, &ours.p99),
            cell(in_workers, &in_workers.p50),
            cell(theirs, &theirs.p50),
            cell(theirs, &theirs.p99),
            ratio_text
        ));
        match op {
            Op::Read => section.verdict(
                "through MCP, read p50 ≤ 0.5× the reference server's",
                ratio.times(),
                ratio.median() <= 0.5,
            ),
            Op::Write => section.verdict(
                "through MCP, durable write p50 ≤ 1.3× the reference server's (non-durable) write",
                ratio.times(),
                ratio.median() <= 1.3,
            ),
            _ => {}
        }
    }
    section.markdown = md;
    Ok(section)
}

fn node_version() -> String {
    Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "(unknown)".to_owned())
}
