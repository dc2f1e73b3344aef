//! `/metrics` scraped by a real Prometheus server (Debian's `prometheus`, installed by
//! `scripts/test.sh`), every family the daemon keeps produced by real calls and read back through
//! Prometheus's HTTP API. First: a daemon with an HTTP listener and a health listener serves calls
//! over gRPC (a session on its Unix socket), gRPC-Web and REST, one refused by a budget, and has a
//! mode's workers killed and replaced; Prometheus scrapes both listeners and answers counters
//! (calls by operation, mode, face and code; bytes; budget refusals; worker replacements) and a
//! histogram (call latency per operation). Second: a daemon that escalates to a rule file and has
//! a worker stuck past its kill: Prometheus answers its audited decisions (a denial, escalations
//! approved and refused), the worker abandoned and the one that replaced it, and the open
//! connections and streams while the test holds them open, and again once it lets them go.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rest::{RestDaemon, connect, exchange, free_port, http, python, read_head, send_head};
use common::router::{Killed, wait_port};
use serde_json::{Value, json};

fn prometheus_bin() -> PathBuf {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"].iter().map(PathBuf::from).find(|p| p.exists()).unwrap_or_else(
        || panic!("prometheus is not installed: this test scrapes with Debian's prometheus (scripts/test.sh installs it)"),
    )
}

/// One query through Prometheus's HTTP API: the `data.result` vector, or why there is none
/// (Prometheus answers 503 until its storage is ready).
fn try_query(python: &Path, port: u16, promql: &str) -> Result<Vec<Value>, String> {
    let script = "import json, sys, urllib.parse, urllib.request\n\
        url = f'http://127.0.0.1:{sys.argv[1]}/api/v1/query?' + urllib.parse.urlencode({'query': sys.argv[2]})\n\
        print(urllib.request.urlopen(url, timeout=10).read().decode())\n";
    let out = Command::new(python).arg("-c").arg(script).arg(port.to_string()).arg(promql).output().unwrap();
    if !out.status.success() {
        return Err(format!("query {promql}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["status"], "success", "{answer}");
    Ok(answer["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// [`try_query`] once Prometheus is known to be ready.
fn query(python: &Path, port: u16, promql: &str) -> Vec<Value> {
    try_query(python, port, promql).unwrap_or_else(|e| panic!("{e}"))
}

/// The value of a one-series answer, once Prometheus has scraped it with the wanted value
/// (it scrapes every second; the deadline only bounds a failure).
fn value_once(python: &Path, port: u16, promql: &str, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Until Prometheus is ready its API answers 503: that is "not yet", like a stale value.
        let result = try_query(python, port, promql);
        let got = result
            .as_ref()
            .ok()
            .and_then(|r| r.first())
            .and_then(|s| s["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok());
        if got == Some(want) {
            return want;
        }
        assert!(Instant::now() < deadline, "{promql}: {result:?}, want {want}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A real Prometheus scraping `targets` (job name, port) every second; its web port.
fn prometheus(dir: &Path, targets: &[(&str, u16)]) -> (Killed, u16) {
    let web = free_port();
    let config = dir.join("prometheus.yml");
    let mut yaml = "global:\n  scrape_interval: 1s\nscrape_configs:\n".to_owned();
    for (job, port) in targets {
        yaml.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: [\"127.0.0.1:{port}\"]\n"
        ));
    }
    std::fs::write(&config, yaml).unwrap();
    let child = Command::new(prometheus_bin())
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn prometheus");
    let mut prometheus = Killed(child);
    wait_port(web, &mut prometheus.0, "prometheus");
    (prometheus, web)
}

#[test]
fn prometheus_scrapes_calls_and_latencies() {
    let python = python();
    let health = free_port();
    // One call per second per identity, a burst of 40: the session's calls fit; a REST burst
    // past it is refused by the budget.
    let mut daemon = RestDaemon::start(
        &format!(
            "health_listen = \"tcp:127.0.0.1:{health}\"\n[budgets]\ncalls_per_second = 1\ncall_burst = 40\n"
        ),
        &[],
    );
    std::fs::write(daemon.path("notes.txt"), "alpha\nbeta\n").unwrap();

    // gRPC on the Unix socket: three reads, a write, an edit, a read of nothing.
    let endpoint = format!("unix:{}", daemon.dir.path().join("fsd.sock").display());
    let mut s = common::ToolSession::start(&endpoint, &daemon.root, None);
    for _ in 0..3 {
        assert!(!s.read("notes.txt").is_error());
    }
    assert!(!s.call("write", json!({"file_path": "new.txt", "content": "x\n"})).is_error());
    assert!(
        !s.call("edit", json!({"file_path": "notes.txt", "old_string": "beta", "new_string": "gamma"}))
            .is_error()
    );
    assert_eq!(s.read("missing.txt").code(), Some("FS_NOT_FOUND"));
    assert!(s.finish().success());
    // gRPC-Web on the HTTP listener: one read.
    let port = daemon.port;
    let mut s = common::ToolSession::start(&format!("http://127.0.0.1:{port}"), &daemon.root, None);
    assert!(!s.read("notes.txt").is_error());
    assert!(s.finish().success());
    // REST: two writes and a read, then calls until the budget refuses one.
    assert_eq!(http(port, "PUT", "/v1/files/a.txt", &[], b"0123456789").status, 204);
    assert_eq!(http(port, "PUT", "/v1/files/b.txt", &[], b"01234").status, 204);
    assert_eq!(http(port, "GET", "/v1/files/a.txt", &[], b"").body, b"0123456789");
    let refused =
        (0..100).map(|_| http(port, "HEAD", "/v1/files/a.txt", &[], b"").status).find(|s| *s == 429);
    assert_eq!(refused, Some(429), "the budget never refused a call");

    // The read-only mode's workers die (as under the OOM killer); the supervisor replaces them.
    let killed = daemon.process.kill_workers(&["read-only"]);
    assert_eq!(killed.len(), 2, "{killed:?}");
    let replaced = "fsd_workers_started_total{mode=\"read-only\",start=\"replacement\"} 2";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8(http(health, "GET", "/metrics", &[], b"").body).unwrap().contains(replaced) {
        assert!(Instant::now() < deadline, "the replacements were never counted: {replaced}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The text itself, the same on both listeners (nothing was called in between).
    let scrape = |at: u16| {
        let answer = http(at, "GET", "/metrics", &[], b"");
        assert_eq!(answer.status, 200);
        assert!(answer.header("content-type").is_some_and(|t| t.starts_with("text/plain")), "{answer:?}");
        String::from_utf8(answer.body).unwrap()
    };
    let text = scrape(health);
    let value = |series: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    let ok_reads =
        value("fsd_calls_total{op=\"readText\",mode=\"workspace-write\",face=\"grpc\",code=\"ok\"}");
    assert!(ok_reads >= 3.0, "{text}");
    assert_eq!(
        value(
            "fsd_calls_total{op=\"readText\",mode=\"workspace-write\",face=\"grpc\",code=\"FS_NOT_FOUND\"}"
        ),
        1.0
    );
    assert_eq!(
        value("fsd_calls_total{op=\"writeText\",mode=\"workspace-write\",face=\"grpc\",code=\"ok\"}"),
        1.0
    );
    assert_eq!(
        value("fsd_calls_total{op=\"streamText\",mode=\"workspace-write\",face=\"rest\",code=\"ok\"}"),
        1.0
    );
    assert_eq!(value("fsd_file_bytes_total{direction=\"written\",face=\"rest\"}"), 15.0);
    assert_eq!(value("fsd_file_bytes_total{direction=\"read\",face=\"rest\"}"), 10.0);
    assert!(value("fsd_budget_refusals_total{budget=\"calls_per_second\"}") >= 1.0, "{text}");
    assert_eq!(value("fsd_workers_started_total{mode=\"workspace-write\",start=\"initial\"}"), 2.0);
    let web_reads = "fsd_calls_total{op=\"readText\",mode=\"workspace-write\",face=\"grpc-web\",code=\"ok\"}";
    assert_eq!(value(web_reads), 1.0);
    assert_eq!(value("fsd_call_duration_seconds_count{op=\"readText\"}"), ok_reads + 2.0);
    let rest_writes =
        value("fsd_calls_total{op=\"writeBytes\",mode=\"workspace-write\",face=\"rest\",code=\"ok\"}");
    assert_eq!(rest_writes, 2.0);
    // The connection gauge differs by the scraping connections themselves.
    let calls = |text: &str| {
        text.lines().filter(|l| !l.starts_with("fsd_open_connections")).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(calls(&scrape(port)), calls(&text), "the HTTP listener serves the same metrics");

    // A real Prometheus scrapes both listeners every second.
    let dir = tempfile::tempdir().unwrap();
    let (_prometheus, web) = prometheus(dir.path(), &[("fsd-health", health), ("fsd-http", port)]);

    // The counter: the gRPC reads that found their file, and the one that did not; the REST
    // writes (summed over the series of both jobs' scrapes of one of them).
    let reads = "fsd_calls_total{job=\"fsd-health\",op=\"readText\",face=\"grpc\",mode=\"workspace-write\",code=\"ok\"}";
    value_once(&python, web, reads, ok_reads);
    let missing = "fsd_calls_total{job=\"fsd-http\",op=\"readText\",code=\"FS_NOT_FOUND\"}";
    value_once(&python, web, missing, 1.0);
    let rest_writes_query =
        "sum(fsd_calls_total{job=\"fsd-http\",face=\"rest\",op=\"writeBytes\",code=\"ok\"})";
    value_once(&python, web, rest_writes_query, rest_writes);
    let written = "fsd_file_bytes_total{job=\"fsd-health\",face=\"rest\",direction=\"written\"}";
    value_once(&python, web, written, 15.0);
    // The histogram: every readText call in its +Inf bucket and its count, the median inside
    // the buckets.
    let bucket = "fsd_call_duration_seconds_bucket{job=\"fsd-health\",op=\"readText\",le=\"+Inf\"}";
    value_once(&python, web, bucket, ok_reads + 2.0);
    value_once(
        &python,
        web,
        "fsd_call_duration_seconds_count{job=\"fsd-health\",op=\"readText\"}",
        ok_reads + 2.0,
    );
    let median = "histogram_quantile(0.5, sum by (le) (fsd_call_duration_seconds_bucket{job=\"fsd-health\",op=\"readText\"}))";
    let result = query(&python, web, median);
    let p50: f64 = result[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(p50 > 0.0 && p50 < 60.0, "{result:?}");
    let refusals = "sum(fsd_budget_refusals_total{job=\"fsd-health\",budget=\"calls_per_second\"}) > 0";
    assert_eq!(query(&python, web, refusals).len(), 1);
    let replacements = "fsd_workers_started_total{job=\"fsd-http\",mode=\"read-only\",start=\"replacement\"}";
    value_once(&python, web, replacements, 2.0);
    daemon.terminate();
    daemon.wait();
}

#[test]
fn prometheus_scrapes_decisions_abandoned_workers_and_what_is_open() {
    let python = python();
    let health = free_port();
    let outside = tempfile::tempdir().unwrap();
    let outside_path = std::fs::canonicalize(outside.path()).unwrap();
    // Escalations go to the client's rule file; one worker per mode, a call that overruns 800 ms
    // has its worker killed, and the test hook makes that worker survive its kill (abandoned).
    let mut daemon = RestDaemon::start(
        &format!(
            "health_listen = \"tcp:127.0.0.1:{health}\"\nescalation = \"client\"\nmax_mode = \"danger-full-access\"\ncall_timeout_ms = 800\nworkers_per_mode = 1\nmax_abandoned_workers = 4\ndirect_reads = false\nstream_idle_timeout_ms = 120000\n"
        ),
        &[("FSD_FAULT_UNKILLABLE_WORKERS", "1")],
    );
    let rules = outside_path.join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[[rule]]\nmode = \"*\"\npath = \"{0}/denied/**\"\ndecision = \"deny\"\n\n[[rule]]\nmode = \"danger-full-access\"\npath = \"{0}/**\"\ndecision = \"allow\"\n",
            outside_path.display()
        ),
    )
    .unwrap();
    let client = outside_path.join("client.toml");
    std::fs::write(&client, format!("escalationRules = \"{}\"\n", rules.display())).unwrap();
    std::fs::write(daemon.path("fsd-fault-hang"), "x").unwrap();
    std::fs::write(daemon.path("a.txt"), "alpha\n").unwrap();

    let endpoint = format!("unix:{}", daemon.dir.path().join("fsd.sock").display());
    let mut s = common::ToolSession::start(&endpoint, &daemon.root, Some(&client));
    let write = |s: &mut common::ToolSession, path: &Path, escalate: bool| {
        let mut args = json!({"file_path": path.display().to_string(), "content": "x\n"});
        if escalate {
            args["sandbox_permissions"] = json!("danger-full-access");
            args["justification"] = json!("the user asked for it");
        }
        s.call("write", args)
    };
    // (what is written, escalated, the code it ends with)
    let calls = [
        (outside_path.join("out.txt"), false, Some("FS_SANDBOX_DENIED")),
        (outside_path.join("out.txt"), true, None),
        (outside_path.join("denied").join("no.txt"), true, Some("FS_SANDBOX_DENIED")),
    ];
    for (path, escalate, code) in &calls {
        let r = write(&mut s, path, *escalate);
        assert_eq!(r.code(), *code, "{} {escalate}: {}", path.display(), r.json);
    }
    // A read that hangs: its worker is killed, survives, is abandoned and replaced.
    assert!(s.read("fsd-fault-hang").is_error());
    assert!(s.finish().success());

    let dir = tempfile::tempdir().unwrap();
    // Only the health listener is scraped, so the HTTP listener's connections are the test's own.
    let (_prometheus, web) = prometheus(dir.path(), &[("fsd", health)]);
    let series = |family: &str, labels: &str| format!("sum({family}{{job=\"fsd\"{labels}}})");
    value_once(&python, web, &series("fsd_decisions_total", ",step=\"call\",decision=\"denied\""), 1.0);
    value_once(
        &python,
        web,
        &series("fsd_decisions_total", ",step=\"escalation\",decision=\"approved\""),
        2.0,
    );
    value_once(
        &python,
        web,
        &series("fsd_decisions_total", ",step=\"escalation\",decision=\"refused\""),
        1.0,
    );
    let abandoned = series("fsd_workers_abandoned_total", ",mode=\"workspace-write\"");
    value_once(&python, web, &abandoned, 1.0);
    let replaced = series("fsd_workers_started_total", ",mode=\"workspace-write\",start=\"replacement\"");
    value_once(&python, web, &replaced, 1.0);

    // Nothing of the test's is open: the only connection is Prometheus's own scrape.
    let (connections, streams) = (series("fsd_open_connections", ""), series("fsd_open_streams", ""));
    value_once(&python, web, &connections, 1.0);
    value_once(&python, web, &streams, 0.0);
    // Three idle keep-alive connections, each after one call, and a REST GET of a file larger
    // than the sockets' buffers whose body the test does not read: a stream held open.
    let port = daemon.port;
    let mut held: Vec<_> = (0..3)
        .map(|_| {
            let mut conn = connect(port);
            assert_eq!(exchange(&mut conn, "HEAD", "/v1/files/a.txt", &[], b"").status, 200);
            conn
        })
        .collect();
    std::fs::write(daemon.path("big.bin"), vec![7u8; 64 << 20]).unwrap();
    let mut stalled = connect(port);
    send_head(&mut stalled, "GET", "/v1/files/big.bin", &[], 0);
    assert_eq!(read_head(&mut stalled).status, 200);
    held.push(stalled);
    value_once(&python, web, &connections, 5.0);
    value_once(&python, web, &streams, 1.0);
    // Let go: the stream ends with its connection, and the gauges come back down.
    drop(held);
    value_once(&python, web, &streams, 0.0);
    value_once(&python, web, &connections, 1.0);
    daemon.terminate();
    daemon.wait();
}
