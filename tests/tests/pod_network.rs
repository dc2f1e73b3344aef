//! The listener an operator declares for a pod network behind the agent-sandbox router
//! (`http+pod:`): plaintext beyond loopback on purpose, with a warning at every start; its
//! callers are the identity `pod`, read-only unless `client_max_modes` grants more; a bearer
//! token there is refused unless the operator opted that listener in with `pod_network_tokens`
//! (`true` for the only one, or the listeners it names), and then it is checked and keys its own
//! grant; another pod listener of the same daemon still refuses it. Real daemon, raw HTTP/1.1 on
//! a real socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Read;

use common::rest::{free_port, http, refused};

const TOKEN: &str = "pod-network-token-0123456789";

struct PodDaemon {
    process: fsd_testkit::Daemon,
    port: u16,
    root: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// A daemon whose only TCP listener is `http+pod:0.0.0.0:PORT` (what the template uses), its
/// stderr piped so the start warning can be read.
fn start(config: &str) -> PodDaemon {
    start_on(&[free_port()], config)
}

/// A daemon with an `http+pod:0.0.0.0:PORT` listener on each of `ports` (the first is
/// [`PodDaemon::port`]).
fn start_on(ports: &[u16], config: &str) -> PodDaemon {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    let mut launch = common::launch();
    for port in ports {
        launch = launch
            .arg("--listen")
            .arg(format!("http+pod:0.0.0.0:{port}"))
            .awaits(fsd_testkit::Listener::Http(format!("127.0.0.1:{port}")));
    }
    let port = ports[0];
    let process = launch
        .unix(dir.path().join("fsd.sock"))
        .writable_root(&root)
        .config(dir.path().join("fsd.toml"), config)
        .stderr(fsd_testkit::Stderr::Piped)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    PodDaemon { process, port, root, _dir: dir }
}

/// Everything the daemon logged until it stopped.
fn stop_and_read_log(mut daemon: PodDaemon) -> String {
    let mut stderr = daemon.process.take_stderr().expect("piped stderr");
    daemon.process.signal(rustix::process::Signal::TERM);
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    daemon.process.wait().unwrap();
    log
}

#[test]
fn the_pod_network_listener_is_its_own_identity_and_takes_tokens_only_when_told() {
    let bearer = format!("Bearer {TOKEN}");
    let hash = fsd::identity::token_sha256_hex(TOKEN);
    // (config, what a PUT does without a token, with the token, with a wrong token, the mode
    // the warning names)
    struct Case {
        config: String,
        plain_put: u16,
        token_put: (u16, &'static str),
        wrong_token_put: u16,
        warning: &'static str,
    }
    let cases = [
        // No grant: the pod network's callers read, and nothing more.
        Case {
            config: String::new(),
            plain_put: 403,
            token_put: (401, "UNAUTHENTICATED"),
            wrong_token_put: 401,
            warning: "max_mode=\"read-only\"",
        },
        // The operator grants `pod` what the router's callers may do.
        Case {
            config: "client_max_modes = { pod = \"workspace-write\" }\n".into(),
            plain_put: 204,
            token_put: (401, "UNAUTHENTICATED"),
            wrong_token_put: 401,
            warning: "max_mode=\"workspace-write\"",
        },
        // Tokens count here only on the opt-in, and then key their own grant; `tcp`'s grant
        // never reaches the pod network.
        Case {
            config: format!(
                "pod_network_tokens = true\nclient_max_modes = {{ tcp = \"danger-full-access\", \"token:router\" = \"workspace-write\" }}\n[tokens.router]\nsha256 = \"{hash}\"\n"
            ),
            plain_put: 403,
            token_put: (204, ""),
            wrong_token_put: 401,
            warning: "tokens=true",
        },
    ];
    for case in cases {
        let daemon = start(&case.config);
        let port = daemon.port;
        let context = &case.config;
        let read = http(port, "GET", "/v1/files/a.txt", &[], b"");
        assert_eq!((read.status, read.body.as_slice()), (200, &b"alpha\n"[..]), "{context}");
        let put = http(port, "PUT", "/v1/files/plain.txt", &[], b"plain\n");
        assert_eq!(put.status, case.plain_put, "{context}: {put:?}");
        if case.plain_put == 403 {
            refused(&put, 403, "PERMISSION_DENIED");
        }
        // The router strips `authorization`: a token travels in x-fsd-authorization.
        let put = http(port, "PUT", "/v1/files/token.txt", &[("x-fsd-authorization", &bearer)], b"token\n");
        match case.token_put {
            (204, _) => assert_eq!(put.status, 204, "{context}: {put:?}"),
            (status, code) => refused(&put, status, code),
        }
        let wrong = http(
            port,
            "PUT",
            "/v1/files/wrong.txt",
            &[("authorization", "Bearer not-the-token")],
            b"wrong\n",
        );
        assert_eq!(wrong.status, case.wrong_token_put, "{context}: {wrong:?}");
        assert_eq!(daemon.root.join("plain.txt").exists(), case.plain_put == 204, "{context}");
        assert_eq!(daemon.root.join("token.txt").exists(), case.token_put.0 == 204, "{context}");
        assert!(!daemon.root.join("wrong.txt").exists(), "{context}");
        let log = stop_and_read_log(daemon);
        let warning = log
            .lines()
            .find(|l| l.contains("PLAINTEXT listener on the pod network"))
            .unwrap_or_else(|| panic!("{context}: no start warning in {log}"));
        assert!(warning.contains("WARN"), "{warning}");
        assert!(warning.contains(&format!("http+pod:0.0.0.0:{port}")), "{warning}");
        assert!(warning.contains(case.warning), "{context}: {warning}");
    }
}

/// Two pod listeners, one named in `pod_network_tokens`: the token counts on that one; on the
/// other it is refused with UNAUTHENTICATED and a message that says which key would admit it,
/// whichever header carries it. Each listener's start warning says whether it takes tokens.
#[test]
fn a_token_counts_only_on_the_pod_listener_the_operator_named() {
    let (named, other) = (free_port(), free_port());
    assert_ne!(named, other);
    let hash = fsd::identity::token_sha256_hex(TOKEN);
    let config = format!(
        "pod_network_tokens = [\"http+pod:0.0.0.0:{named}\"]\nclient_max_modes = {{ \"token:router\" = \"workspace-write\" }}\n[tokens.router]\nsha256 = \"{hash}\"\n"
    );
    let daemon = start_on(&[named, other], &config);
    let bearer = format!("Bearer {TOKEN}");
    // (listener, the header the token travels in, the answer, the file it writes)
    let cases = [
        (named, "x-fsd-authorization", 204, "named-x.txt"),
        (named, "authorization", 204, "named.txt"),
        (other, "x-fsd-authorization", 401, "other-x.txt"),
        (other, "authorization", 401, "other.txt"),
    ];
    for (port, header, status, file) in cases {
        let context = format!("{port} {header}");
        let put = http(port, "PUT", &format!("/v1/files/{file}"), &[(header, &bearer)], b"x\n");
        if status == 204 {
            assert_eq!(put.status, 204, "{context}: {put:?}");
        } else {
            refused(&put, status, "UNAUTHENTICATED");
            let message = put.json()["message"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains("pod_network_tokens does not name it"), "{context}: {message}");
        }
        assert_eq!(daemon.root.join(file).exists(), status == 204, "{context}");
        // Without a token both listeners serve the pod's reads alike.
        let read = http(port, "GET", "/v1/files/a.txt", &[], b"");
        assert_eq!((read.status, read.body.as_slice()), (200, &b"alpha\n"[..]), "{context}");
    }
    let log = stop_and_read_log(daemon);
    for (port, tokens) in [(named, "tokens=true"), (other, "tokens=false")] {
        let warning = log
            .lines()
            .find(|l| {
                l.contains("PLAINTEXT listener on the pod network") && l.contains(&format!("0.0.0.0:{port}"))
            })
            .unwrap_or_else(|| panic!("no start warning for {port} in {log}"));
        assert!(warning.contains(tokens), "{warning}");
    }
}

#[test]
fn a_daemon_refuses_the_opt_in_where_it_would_do_nothing() {
    let check = |listens: &[&str], config: &str, expected: &str| {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("fsd.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut command = common::fsd_command();
        for listen in listens {
            command.arg("--listen").arg(listen);
        }
        let listen = listens.join(" ");
        let output = command
            .arg("--writable-root")
            .arg(dir.path())
            .arg("--config")
            .arg(&config_path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{listen} {config}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{listen} {config}: {stderr}");
    };
    let hash = fsd::identity::token_sha256_hex(TOKEN);
    let token = format!("[tokens.router]\nsha256 = \"{hash}\"\n");
    check(
        &["http+plain:127.0.0.1:1"],
        &format!("pod_network_tokens = true\n{token}"),
        "invalid pod_network_tokens: it applies to http+pod: listeners and there is none",
    );
    check(
        &["http+pod:0.0.0.0:1"],
        &token,
        "bearer tokens are accepted only over TLS: set tls_cert and tls_key",
    );
    // With two pod listeners `true` would opt both in at once: the operator names them.
    check(
        &["http+pod:0.0.0.0:1", "http+pod:0.0.0.0:2"],
        &format!("pod_network_tokens = true\n{token}"),
        "with several, list those that take tokens",
    );
    check(
        &["http+pod:0.0.0.0:1"],
        &format!("pod_network_tokens = [\"http+pod:0.0.0.0:2\"]\n{token}"),
        "invalid pod_network_tokens entry \"http+pod:0.0.0.0:2\": this daemon has no such http+pod: listener",
    );
    // Nothing else relaxes beside it.
    check(&["http:0.0.0.0:1"], "", "a non-loopback TCP listener needs TLS");
}
