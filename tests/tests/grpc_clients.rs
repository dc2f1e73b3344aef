//! The Python grpcio example of docs/grpc-clients.md, run as written against a real daemon on its
//! Unix socket: stubs generated the way the doc says, the `:authority` workaround, a write, a
//! read and a decoded `google.rpc.ErrorInfo`. The interpreter is the venv `scripts/test.sh`
//! builds (`FSD_TEST_PYTHON`, with grpcio, grpcio-tools and grpcio-status).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Command;

fn python() -> PathBuf {
    match std::env::var_os("FSD_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FSD_TEST_PYTHON is not set: this test runs the grpcio example of docs/grpc-clients.md \
             with the venv scripts/test.sh builds (grpcio, grpcio-tools, grpcio-status)"
        ),
    }
}

/// The code block right after `<!-- example: NAME -->`.
fn example(markdown: &str, name: &str) -> String {
    let marker = format!("<!-- example: {name} -->");
    let after = markdown.split_once(&marker).unwrap_or_else(|| panic!("no {marker}")).1;
    let block = after.trim_start().strip_prefix("```python\n").expect("a python block follows the marker");
    block.split_once("\n```").expect("the block ends").0.to_owned()
}

#[test]
fn the_python_grpcio_example_runs_over_the_unix_socket() {
    let python = python();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(repo.join("docs/grpc-clients.md")).unwrap();
    let daemon = common::Daemon::start();
    let work = tempfile::tempdir().unwrap();
    let gen_dir = work.path().join("gen");
    std::fs::create_dir(&gen_dir).unwrap();
    // The doc's stub step: grpc_tools.protoc -I proto --python_out gen --grpc_python_out gen fsd/v1/fsd.proto
    assert!(
        doc.contains("-m grpc_tools.protoc -I proto --python_out gen --grpc_python_out gen fsd/v1/fsd.proto")
    );
    let status = Command::new(&python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(repo.join("proto"))
        .arg("--python_out")
        .arg(&gen_dir)
        .arg("--grpc_python_out")
        .arg(&gen_dir)
        .arg("fsd/v1/fsd.proto")
        .status()
        .unwrap();
    assert!(status.success(), "protoc via grpcio-tools failed");
    let script = work.path().join("fsd_example.py");
    std::fs::write(&script, example(&doc, "fsd_example.py")).unwrap();
    let out = Command::new(&python)
        .arg(&script)
        .arg(&daemon.socket)
        .arg(&daemon.root)
        .env("PYTHONPATH", &gen_dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let root = daemon.root.display();
    assert_eq!(lines[0], format!("fsd 0.1.0, writable roots ['{root}']"));
    assert!(
        lines[1].starts_with(&format!("read {root}/hello.txt at version "))
            && lines[1].ends_with(": 'hello from python\\n'"),
        "{stdout}"
    );
    assert_eq!(lines[2], format!("refused: NOT_FOUND FS_NOT_FOUND {root}/missing.txt"));
    assert_eq!(daemon.read("hello.txt"), b"hello from python\n");
}
