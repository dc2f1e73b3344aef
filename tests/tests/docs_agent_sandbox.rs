//! docs/agent-sandbox.md followed as written, everything but Kubernetes itself: the example
//! `fsd.toml` with the guide's step 1 (the token's hash) and what a test machine has instead of a
//! pod (a test certificate for the TLS secret, a temporary `/workspace`, free loopback ports);
//! fsd started with the template's container arguments; the template's `/v1/health` probes; the
//! agent container's `fsd-tools mcp` command; the guide's SDK snippet with the template's
//! `SANDBOXD_REST_ADDR`; and the guide's `fsd-tools session` command and fleet file through nginx
//! standing in for the sandbox-router. A substitution that no longer finds its text fails the
//! test, so the guide, the config and the template cannot drift apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::pki;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::rest::{free_port, http, python};
use common::router::{Sandbox, router};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `text` with each `(from, to)` replaced; every `from` must be there.
fn substitute(what: &str, text: &str, pairs: &[(&str, String)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in pairs {
        assert!(out.contains(from), "{what} no longer contains {from:?}: the guide's recipe changed");
        out = out.replace(from, to);
    }
    out
}

/// The JSON array on the template's line `key: [...]` (a container's `args:` or `command:`).
fn yaml_array(template: &str, key: &str) -> Vec<String> {
    let line = template
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("the template has no {key:?} line"));
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{key} {line}: {e}"))
}

/// The value the template gives the environment variable `name`.
fn template_env(template: &str, name: &str) -> String {
    let mut lines = template.lines().map(str::trim);
    lines.find(|l| *l == format!("- name: {name}")).unwrap_or_else(|| panic!("the template sets no {name}"));
    let value = lines.next().and_then(|l| l.strip_prefix("value: ")).expect("a value line after the name");
    value.trim_matches('"').to_owned()
}

/// The template's HTTPS probe of `/v1/health`, as the kubelet makes it (the CA stands in for
/// the cluster's trust of the TLS secret): its status and body.
fn https_probe(python: &Path, port: u16, ca: &Path) -> String {
    let script = "import ssl, sys, urllib.request\n\
        ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
        r = urllib.request.urlopen(f'https://127.0.0.1:{sys.argv[1]}/v1/health', context=ctx, timeout=10)\n\
        print(r.status, r.read().decode())\n";
    let out = Command::new(python).arg("-c").arg(script).arg(port.to_string()).arg(ca).output().unwrap();
    assert!(out.status.success(), "HTTPS probe failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The agent container's command: `fsd-tools mcp` over stdio, one write and one read.
fn agent_container(command: &[String], workspace: &Path) {
    let mut child = Command::new(common::tools_bin())
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the agent container's fsd-tools mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut call = |message: Value| -> Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let init = call(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "agent", "version": "1"}}}));
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    call(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let tool = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
    };
    let wrote = call(tool(1, "write", json!({"file_path": "notes.txt", "content": "alpha\nbeta\n"})));
    assert_ne!(wrote["result"]["isError"], json!(true), "{wrote}");
    let read = call(tool(2, "read", json!({"file_path": "notes.txt"})));
    let text = read["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("1: alpha") && text.contains("2: beta"), "{read}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "alpha\nbeta\n");
}

/// The guide's SDK snippet, run as written with the template's `SANDBOXD_REST_ADDR` (its port
/// the test's): what it prints is what its comments say.
fn sdk_snippet(python: &Path, snippet: &str, rest_addr: &str, workspace: &Path) {
    let expected: Vec<&str> = snippet
        .lines()
        .filter(|l| l.starts_with("print("))
        .map(|l| l.split_once("# ").expect("each print of the snippet says its output").1)
        .collect();
    let out = Command::new(python)
        .arg("-c")
        .arg(snippet)
        .env("SANDBOXD_REST_ADDR", rest_addr)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "the SDK snippet failed: {}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.lines().collect::<Vec<_>>(), expected, "the snippet printed otherwise than it says");
    assert!(!workspace.join("src").exists(), "the snippet's recursive delete left src");
}

/// The guide's `kubectl exec` line for MCP: `-i` (stdin kept open) without a terminal, into a
/// container the template has; what it runs there (the words after `--`).
fn exec_command(block: &str, template: &str) -> Vec<String> {
    let words: Vec<String> = block.replace("\\\n", " ").split_whitespace().map(str::to_owned).collect();
    assert_eq!(&words[..2], ["kubectl", "exec"], "{block}");
    let split = words.iter().position(|w| w == "--").expect("`--` before the container's command");
    let flags = &words[2..split];
    assert!(flags.iter().any(|f| f == "-i" || f == "--stdin"), "MCP needs stdin: {flags:?}");
    assert!(
        !flags.iter().any(|f| f == "-t" || f == "--tty" || f == "-it"),
        "a terminal mangles JSON-RPC: {flags:?}"
    );
    let container = flags.windows(2).find(|w| w[0] == "-c").map(|w| w[1].clone()).expect("-c CONTAINER");
    assert!(
        template.contains(&format!("- name: {container}\n")),
        "the template has no container {container}"
    );
    words[split + 1..].to_vec()
}

/// The guide's `fsd-tools session` command line (after `fsd-tools session`) and the variable
/// its `export` line sets.
fn session_command(block: &str) -> (Vec<String>, String) {
    let joined = block.replace("\\\n", " ");
    let line =
        joined.lines().find(|l| l.starts_with("fsd-tools session ")).expect("an fsd-tools session line");
    let args = line.split_whitespace().skip(2).map(str::to_owned).collect();
    let var = joined
        .lines()
        .find_map(|l| l.strip_prefix("export "))
        .and_then(|l| l.split_once('='))
        .map(|(name, _)| name.to_owned())
        .expect("an export line for the token");
    (args, var)
}

/// A session with these arguments reads notes.txt and replaces `old` in it with `new`.
fn session_works(args: &[String], env: (&str, &str), workspace: &Path, old: &str, new: &str) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut s = common::ToolSession::start_args(&args, &[env]);
    let r = s.read("notes.txt");
    assert!(!r.is_error(), "{args:?}: {}", r.json);
    assert!(r.text().contains("1: alpha"), "{}", r.text());
    let r = s.call("edit", json!({"file_path": "notes.txt", "old_string": old, "new_string": new}));
    assert!(!r.is_error(), "{args:?}: {}", r.json);
    assert!(s.finish().success());
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), format!("alpha\n{new}\n"));
}

#[test]
fn the_agent_sandbox_guide_works_as_written() {
    let python = python();
    let guide = std::fs::read_to_string(repo().join("docs/agent-sandbox.md")).unwrap();
    let found = common::docs::marked_blocks(&guide, "test");
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        ["fleet.toml", "mcp.sh", "sdk.py", "session.sh"]
    );
    let example = repo().join("deploy/kubernetes/agent-sandbox");
    let template = std::fs::read_to_string(example.join("sandbox-template.yaml")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let workspace = std::fs::canonicalize(&workspace).unwrap();
    let ca = pki::Ca::new(dir.path(), "ca");
    let secret = ca.server("fsd-tls", &["fsd.test"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let token = "agent-sandbox-guide-token-0123456789";
    // The pod's loopback listener, its pod-network listener (the router's), its TLS listener.
    let (pod_port, net_port, tls_port) = (free_port(), free_port(), free_port());

    // Step 1: the example config with your token's hash; the rest is what stands in for the pod
    // here (the TLS listener on loopback too: tests bind nothing else).
    let config = std::fs::read_to_string(example.join("fsd.toml")).unwrap();
    let hash_line = config.lines().find(|l| l.starts_with("sha256 = ")).expect("tokens.router.sha256");
    let config = substitute(
        "fsd.toml",
        &config,
        &[
            (hash_line, format!("sha256 = \"{}\"", pki::sha256_hex(token))),
            ("\"http+plain:127.0.0.1:8080\"", format!("\"http+plain:127.0.0.1:{pod_port}\"")),
            ("\"http+pod:0.0.0.0:8888\"", format!("\"http+pod:127.0.0.1:{net_port}\"")),
            ("\"http:0.0.0.0:8443\"", format!("\"http:127.0.0.1:{tls_port}\"")),
            ("\"/workspace\"", format!("{:?}", workspace.display().to_string())),
            ("\"/etc/fsd/tls/tls.crt\"", format!("{:?}", secret.cert.display().to_string())),
            ("\"/etc/fsd/tls/tls.key\"", format!("{:?}", secret.key.display().to_string())),
        ],
    );
    let config_path = dir.path().join("fsd.toml");
    std::fs::write(&config_path, config).unwrap();

    // The fsd container, with its arguments from the template (the ConfigMap mounted here).
    let args = yaml_array(&template, "args:");
    let args: Vec<String> = args
        .iter()
        .map(|a| if a == "/etc/fsd/fsd.toml" { config_path.display().to_string() } else { a.clone() })
        .collect();
    assert!(
        args.contains(&config_path.display().to_string()),
        "the template's args name no /etc/fsd/fsd.toml"
    );
    // The template's args name the listeners; the kit waits for both ports.
    let _fsd = common::launch()
        .args(&args)
        .env("SANDBOX_ID", "sb-1")
        .env("AWS_SECRET_ACCESS_KEY", "not-for-metadata")
        .awaits(fsd_testkit::Listener::Tcp(format!("127.0.0.1:{pod_port}")))
        .awaits(fsd_testkit::Listener::Tcp(format!("127.0.0.1:{net_port}")))
        .awaits(fsd_testkit::Listener::Tcp(format!("127.0.0.1:{tls_port}")))
        .start()
        .unwrap_or_else(|e| panic!("{e}"));

    // The template's probe, on the pod-network listener; the TLS listener over HTTPS; the pod's own.
    let probe = http(net_port, "GET", "/v1/health", &[], b"");
    assert_eq!(probe.status, 200, "{probe:?}");
    assert_eq!(probe.json()["status"], "ok");
    let probe = https_probe(&python, tls_port, &ca.cert);
    assert!(probe.starts_with("200 ") && probe.contains("\"status\":\"ok\""), "{probe}");
    assert_eq!(http(pod_port, "GET", "/v1/health", &[], b"").status, 200);
    let metadata = http(pod_port, "GET", "/v1/metadata", &[], b"").json();
    assert_eq!(metadata, json!({"env": {"SANDBOX_ID": "sb-1"}}));

    // The agent container, its stdin closed as a container's is: its process keeps running
    // while the guide's `kubectl exec -i` line serves MCP in it (the part after `--` is what
    // runs in the container, over the exec's stdin and stdout), against the loopback listener.
    let main = yaml_array(&template, "command:");
    let mut container = Command::new(&main[0]).args(&main[1..]).stdin(Stdio::null()).spawn().unwrap();
    let exec = exec_command(&found["mcp.sh"], &template);
    let exec = substitute(
        "the MCP command line",
        &exec.join("\n"),
        &[
            ("http://127.0.0.1:8080", format!("http://127.0.0.1:{pod_port}")),
            ("/workspace", workspace.display().to_string()),
        ],
    );
    let exec: Vec<String> = exec.lines().map(str::to_owned).collect();
    assert_eq!(&exec[..2], ["fsd-tools", "mcp"]);
    agent_container(&exec, &workspace);
    let running = container.try_wait().unwrap();
    let _ = container.kill();
    let _ = container.wait();
    assert!(
        running.is_none(),
        "the agent container's {main:?} exited ({running:?}): the pod would crash-loop"
    );

    // The SDK snippet, with the template's SANDBOXD_REST_ADDR.
    let rest_addr = substitute(
        "SANDBOXD_REST_ADDR",
        &template_env(&template, "SANDBOXD_REST_ADDR"),
        &[("127.0.0.1:8080", format!("127.0.0.1:{pod_port}"))],
    );
    sdk_snippet(&python, &found["sdk.py"], &rest_addr, &workspace);

    // The session and the fleet file through the router (nginx as the Go router proxies), its
    // port-forward at a free loopback port; the pod's http+pod: port where the guide says 8888.
    let router_port = free_port();
    let sandbox = Sandbox { id: "sb-1", namespace: "agents", pod_ip: "127.0.0.1", port: net_port };
    let _router = router(dir.path(), router_port, &sandbox);
    let (args, var) = session_command(&found["session.sh"]);
    // The variable the guide exports is the one its command and its fleet file name.
    assert_eq!(var, "FSD_TOKEN");
    assert!(args.windows(2).any(|w| w == ["--token-env", "FSD_TOKEN"]), "{args:?}");
    assert!(found["fleet.toml"].contains("tokenEnv = \"FSD_TOKEN\""), "{}", found["fleet.toml"]);
    let args = substitute(
        "the session command",
        &args.join("\n"),
        &[
            ("http://127.0.0.1:18080", format!("http://127.0.0.1:{router_port}")),
            ("8888", net_port.to_string()),
            ("/workspace", workspace.display().to_string()),
        ],
    );
    let args: Vec<String> = args.lines().map(str::to_owned).collect();
    session_works(&args, (&var, token), &workspace, "beta", "through the router");

    let fleet = substitute(
        "the fleet file",
        &found["fleet.toml"],
        &[
            ("http://127.0.0.1:18080", format!("http://127.0.0.1:{router_port}")),
            ("8888", net_port.to_string()),
        ],
    );
    let fleet_path = dir.path().join("fleet.toml");
    std::fs::write(&fleet_path, &fleet).unwrap();
    let token_var =
        fleet.lines().find_map(|l| l.strip_prefix("tokenEnv = ")).expect("tokenEnv").trim_matches('"');
    let args = [
        "--fleet".to_owned(),
        fleet_path.display().to_string(),
        "--target".to_owned(),
        "sb1".to_owned(),
        "--cwd".to_owned(),
        workspace.display().to_string(),
    ];
    session_works(&args, (token_var, token), &workspace, "through the router", "through the fleet file");
}
