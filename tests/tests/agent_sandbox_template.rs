//! The agent-sandbox template without a cluster: `tests/python/validate_template.py` checks its
//! SandboxTemplate fields against the upstream CRD, validates the Pod it makes and the
//! NetworkPolicy the controller makes from it with `kubernetes-validate` (strict), and checks
//! that its ports, probes and policy match the example `fsd.toml`. Broken copies of the template
//! must be refused, each for its own reason, so the checks cannot pass by checking nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::rest::python;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("deploy/kubernetes/agent-sandbox")
}

/// Runs the validator on `template` (with the example's fsd.toml): success and its output.
fn validate(template: &Path) -> (bool, String) {
    let output = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/validate_template.py"))
        .arg(template)
        .arg(example().join("fsd.toml"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run FSD_TEST_PYTHON: {e}"));
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn the_template_is_valid_kubernetes_and_matches_the_config() {
    let (ok, output) = validate(&example().join("sandbox-template.yaml"));
    assert!(ok, "{output}\n(FSD_TEST_PYTHON needs kubernetes-validate: scripts/test.sh installs it)");
    assert_eq!(output.lines().filter(|l| l.starts_with("ok ")).count(), 6, "{output}");
}

#[test]
fn broken_templates_are_refused_for_their_own_reason() {
    let template = std::fs::read_to_string(example().join("sandbox-template.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // (what is broken, the template's text, the substitution, what the refusal names)
    let cases = [
        (
            "a field the CRD does not have",
            "  podTemplate:\n",
            "  networkPolicies: {}\n  podTemplate:\n",
            "fields the CRD does not: ['networkPolicies']",
        ),
        (
            "a pod selector of its own",
            "  networkPolicy:\n    ingress:\n",
            "  networkPolicy:\n    podSelector: {}\n    ingress:\n",
            "spec.networkPolicy has fields the CRD does not: ['podSelector']",
        ),
        (
            "a misspelt Pod field",
            "          readinessProbe:\n",
            "          readinesProbe:\n",
            "readinesProbe",
        ),
        ("a bad NetworkPolicy port", "            port: 8443\n", "            port: [8443]\n", "[8443]"),
        ("the router on another port", "containerPort: 8888", "containerPort: 8889", "declared"),
        (
            "probes over HTTPS",
            "              port: 8888\n            periodSeconds: 5\n",
            "              port: 8888\n              scheme: HTTPS\n            periodSeconds: 5\n",
            "readinessProbe",
        ),
        (
            "MCP as the main process",
            r#"command: ["sleep", "infinity"]"#,
            r#"command: ["fsd-tools", "mcp", "--endpoint", "http://127.0.0.1:8080"]"#,
            "closed stdin",
        ),
        (
            "the whole cluster let in",
            "                fsd-client: allowed\n",
            "                fsd-client: allowed\n          - ipBlock:\n              cidr: 10.0.0.0/8\n",
            "clients_rule",
        ),
    ];
    for (what, from, to, reason) in cases {
        assert!(template.contains(from), "{what}: the template no longer contains {from:?}");
        let path = dir.path().join("template.yaml");
        std::fs::write(&path, template.replacen(from, to, 1)).unwrap();
        let (ok, output) = validate(&path);
        assert!(!ok, "{what}: accepted\n{output}");
        assert!(output.contains(reason), "{what}: refused for another reason than {reason:?}:\n{output}");
    }
}
