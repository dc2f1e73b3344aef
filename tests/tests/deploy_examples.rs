//! The deployment examples in `deploy/` cannot run here (no systemd, container runtime or
//! cluster), but their configs must stay valid: every `fsd.toml` loads with the daemon's parser
//! and `fleet.toml` with the client's, so the examples cannot rot silently.

use std::path::PathBuf;

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
    assert_eq!(listen, ["http:127.0.0.1:8080", "http:0.0.0.0:8443"]);
    assert_eq!(config.rest.root, PathBuf::from("/workspace"));
    assert_eq!(config.rest.metadata_env_prefix, "SANDBOX_");
    assert!(config.tls.is_some() && !config.tokens.is_empty(), "the router's listener needs TLS and a token");
    let template = std::fs::read_to_string(dir.join("sandbox-template.yaml")).unwrap();
    for line in [
        "kind: SandboxTemplate",
        "apiVersion: extensions.agents.x-k8s.io/v1beta1",
        "automountServiceAccountToken: false",
        "runAsNonRoot: true",
        "path: /v1/health",
        "scheme: HTTPS",
        "port: 8443",
        "name: SANDBOXD_REST_ADDR",
        "value: 127.0.0.1:8080",
        "mountPath: /workspace",
        r#"command: ["fsd-tools", "mcp", "--endpoint", "http://127.0.0.1:8080", "--cwd", "/workspace"]"#,
    ] {
        assert!(template.contains(line), "sandbox-template.yaml lacks {line:?}");
    }
}
