//! The deployment examples in `deploy/` cannot run here (no running systemd, container runtime
//! or cluster; the unit is checked with `systemd-analyze verify`), but their configs must stay valid: every `fsd.toml` loads with the daemon's parser
//! and `fleet.toml` with the client's, so the examples cannot rot silently.

use crate::common;

use std::path::{Path, PathBuf};

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("deploy")
}

#[test]
fn every_example_daemon_config_loads() {
    for example in ["systemd/fsd.toml", "container/fsd.toml", "kubernetes/fsd.toml"] {
        let path = deploy().join(example);
        let config = fsd::config::Config::load(Some(&path), fsd::config::Overrides::default())
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        assert!(config.health_listen.is_some(), "{example}: the examples probe health");
    }
    let systemd =
        fsd::config::Config::load(Some(&deploy().join("systemd/fsd.toml")), Default::default()).unwrap();
    assert_eq!(systemd.tls.map(|t| t.client_certs), Some(fsd::tls::ClientCerts::Required));
}

#[test]
fn the_example_fleet_file_loads() {
    let fleet = fsd_tool_client::fleet::Fleet::load(Some(&deploy().join("fleet.toml"))).unwrap();
    assert_eq!(fleet.names().collect::<Vec<_>>(), ["alpha", "bravo", "local"]);
    let alpha = fleet.target("alpha").unwrap();
    assert_eq!(alpha.ca, Some(deploy().join("tls/fleet-ca.pem")));
}

#[test]
fn the_unit_verifies_without_the_man_page_installed() {
    // It named man:fsd(1), and `systemd-analyze verify` failed until the page was installed.
    // The binary is the one thing of the install it needs: the test build stands in for it.
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or_else(|| {
            panic!("systemd-analyze is not installed (Debian's systemd package): this test runs it")
        });
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(deploy().join("systemd/fsd.service")).unwrap();
    let unit = unit.replace("/usr/local/bin/fsd", common::fsd_bin().to_str().unwrap());
    let path = dir.path().join("fsd.service");
    std::fs::write(&path, unit).unwrap();
    let out = std::process::Command::new(analyze).arg("verify").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_unit_and_the_pod_name_the_paths_the_configs_use() {
    let unit = std::fs::read_to_string(deploy().join("systemd/fsd.service")).unwrap();
    for line in [
        "ExecStart=/usr/local/bin/fsd --config /etc/fsd/fsd.toml",
        "RuntimeDirectory=fsd",
        "ReadWritePaths=/srv/workspace",
        "KillMode=mixed",
    ] {
        assert!(unit.contains(line), "fsd.service lacks {line:?}");
    }
    let pod = std::fs::read_to_string(deploy().join("kubernetes/agent-with-fsd.yaml")).unwrap();
    for line in [
        "mountPath: /run/fsd",
        "mountPath: /workspace",
        "service: fsd.v1.Fsd",
        "port: 7444",
        "restartPolicy: Always",
    ] {
        assert!(pod.contains(line), "agent-with-fsd.yaml lacks {line:?}");
    }
}

#[test]
fn the_agent_sandbox_example_serves_rest_on_the_ports_the_template_names() {
    let dir = deploy().join("kubernetes/agent-sandbox");
    let config = fsd::config::Config::load(Some(&dir.join("fsd.toml")), Default::default()).unwrap();
    let listen: Vec<String> = config.listen.iter().map(ToString::to_string).collect();
    assert_eq!(listen, ["http+plain:127.0.0.1:8080", "http+pod:0.0.0.0:8888", "http:0.0.0.0:8443"]);
    let over_pod: Vec<String> = config.pod_network_tokens.iter().map(ToString::to_string).collect();
    assert_eq!(over_pod, ["0.0.0.0:8888"], "the router's token counts on the pod listener, and only there");
    let pod = fsd::identity::ClientKey::Pod;
    assert_eq!(config.client_max_modes.get(&pod), Some(&fsd::op::Mode::ReadOnly));
    assert_eq!(config.rest.root, PathBuf::from("/workspace"));
    assert_eq!(config.rest.metadata_env_prefix, "SANDBOX_");
    assert!(config.tls.is_some() && !config.tokens.is_empty(), "the TLS listener needs TLS and a token");
    let template = std::fs::read_to_string(dir.join("sandbox-template.yaml")).unwrap();
    for line in [
        "kind: SandboxTemplate",
        "apiVersion: extensions.agents.x-k8s.io/v1beta1",
        "automountServiceAccountToken: false",
        "runAsNonRoot: true",
        "path: /v1/health",
        "port: 8888",
        "containerPort: 8443",
        "name: SANDBOXD_REST_ADDR",
        "value: 127.0.0.1:8080",
        "mountPath: /workspace",
        "app: sandbox-router",
        r#"command: ["sleep", "infinity"]"#,
    ] {
        assert!(template.contains(line), "sandbox-template.yaml lacks {line:?}");
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// README.md, docs/*.md and every file under deploy/, with their names.
fn documents() -> Vec<(String, String)> {
    let mut paths = vec![repo().join("README.md")];
    for dir in [
        repo().join("docs"),
        deploy(),
        deploy().join("systemd"),
        deploy().join("container"),
        deploy().join("kubernetes"),
    ] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                paths.push(path);
            }
        }
    }
    paths
        .into_iter()
        .map(|p| {
            (p.strip_prefix(repo()).unwrap().display().to_string(), std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The ports of every `"tcp:HOST:PORT"` after `key` on the lines of `text` that start with it.
fn ports_after(text: &str, key: &str) -> Vec<u16> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with(key))
        .flat_map(|l| l.split("\"tcp:").skip(1).map(|t| t.split('"').next().unwrap_or_default().to_owned()))
        .filter_map(|addr| addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
        .collect()
}

#[test]
fn ports_are_consistent_and_tcp_keys_need_a_tcp_listener() {
    let mut health = Vec::new();
    let mut served = Vec::new();
    for (name, text) in documents() {
        health.extend(ports_after(&text, "health_listen").into_iter().map(|p| (p, name.clone())));
        served.extend(ports_after(&text, "listen").into_iter().map(|p| (p, name.clone())));
        served.extend(ports_after(&text, "endpoint").into_iter().map(|p| (p, name.clone())));
    }
    assert!(!health.is_empty() && !served.is_empty());
    for (port, doc) in &health {
        let clash: Vec<_> = served.iter().filter(|(p, _)| p == port).collect();
        assert!(
            clash.is_empty(),
            "port {port} is the plaintext health port in {doc} and a served port in {clash:?}"
        );
    }
    let tcp_only = [
        "idle_timeout_ms",
        "handshake_timeout_ms",
        "max_connections",
        "max_concurrent_streams",
        "max_calls_per_connection",
        "keepalive_interval_ms",
        "keepalive_timeout_ms",
    ];
    for example in ["systemd/fsd.toml", "container/fsd.toml", "kubernetes/fsd.toml"] {
        let text = std::fs::read_to_string(deploy().join(example)).unwrap();
        let config = fsd::config::Config::load(Some(&deploy().join(example)), Default::default()).unwrap();
        let has_tcp = config.listen.iter().any(|l| matches!(l, fsd::config::Listen::Tcp(_)));
        for key in tcp_only {
            let set = text.lines().any(|l| l.trim_start().starts_with(key));
            assert!(!set || has_tcp, "{example} sets {key} without a tcp: listener");
        }
    }
    // The pod probes the health port its config opens, and gives fsd its shutdown grace.
    let pod = std::fs::read_to_string(deploy().join("kubernetes/agent-with-fsd.yaml")).unwrap();
    let k8s =
        fsd::config::Config::load(Some(&deploy().join("kubernetes/fsd.toml")), Default::default()).unwrap();
    let probe_port = k8s.health_listen.unwrap().port();
    assert!(
        pod.contains(&format!("containerPort: {probe_port}")) && pod.contains(&format!("port: {probe_port}"))
    );
    let number_after = |text: &str, key: &str| -> u64 {
        let rest = text.split_once(key).unwrap_or_else(|| panic!("no {key}")).1;
        rest.trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let grace_ms = k8s.shutdown_grace.as_millis() as u64;
    assert!(number_after(&pod, "terminationGracePeriodSeconds:") * 1000 > grace_ms);
    let unit = std::fs::read_to_string(deploy().join("systemd/fsd.service")).unwrap();
    let systemd =
        fsd::config::Config::load(Some(&deploy().join("systemd/fsd.toml")), Default::default()).unwrap();
    assert!(number_after(&unit, "TimeoutStopSec=") * 1000 > systemd.shutdown_grace.as_millis() as u64);
    assert!(!unit.contains("Documentation=file:"), "the unit points at a file nothing installs");
}

#[test]
fn documented_variables_are_read_by_the_code_and_scripts_need_no_job_control() {
    let mut sources = String::new();
    for dir in ["fsd/src", "tool-client/src", "approver/src", "tests/tests", "tests/tests/common"] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                sources.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    sources.push_str(&std::fs::read_to_string(repo().join("scripts/test.sh")).unwrap());
    for (name, text) in documents() {
        for (i, _) in text.match_indices("FSD_") {
            let var: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // A fleet file's tokenEnv names a variable of the user's choosing.
            if text[..i].ends_with("tokenEnv = \"") {
                continue;
            }
            assert!(
                sources.contains(&format!("\"{var}\"")) || sources.contains(&format!("{var}=")),
                "{name} mentions {var}, which nothing reads"
            );
        }
        assert!(!text.contains("kill %"), "{name}: job control (kill %N) does not work in a script");
    }
}
