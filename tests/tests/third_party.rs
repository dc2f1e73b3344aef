//! A third-party client end to end: `tests/python/third_party.py` generates Python stubs from
//! our proto with grpcio-tools and, over TLS (a client certificate, or a bearer token), calls
//! stat, readText and writeText, reads the `google.rpc.ErrorInfo` reason of refusals, sees a
//! compressed request refused, commits a Transact (after one refused whole), gets SERVING from a grpcio health stub (also on the plaintext
//! health-only listener) and lists services through server reflection. The interpreter is the
//! venv `scripts/test.sh` builds; its path comes in `FSD_TEST_PYTHON`.

use crate::common;
use crate::pki;

use std::path::PathBuf;

use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn python_grpcio_client_calls_fsd_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = pki::Ca::new(d, "ca");
    let server = ca.server("fsd", &["fsd.test"], &["127.0.0.1".parse().unwrap()]);
    let client = ca.client("py-client", "py-client");
    let token = "py-token-5b1f0e7c2d9a4e8f";
    let (port, health_port) = (free_port(), free_port());
    let state = tempfile::tempdir().unwrap();
    let config = format!(
        "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\ntls_client_cert = \"optional\"\n\
         health_listen = \"tcp:127.0.0.1:{health_port}\"\nstate_dir = {:?}\n[tokens.py]\nsha256 = \"{}\"\n",
        server.cert,
        server.key,
        ca.cert,
        state.path(),
        pki::sha256_hex(token)
    );
    let daemon = common::Daemon::start_with(&["--listen", &format!("tcp:127.0.0.1:{port}")], &config);
    daemon.write("hello.txt", "hello from fsd\n");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned();
    let args = json!({
        "proto_dir": repo.join("proto"),
        "stub_dir": d,
        "target": format!("127.0.0.1:{port}"),
        "health_target": format!("127.0.0.1:{health_port}"),
        "server_name": "fsd.test",
        "ca": ca.cert,
        "cert": client.cert,
        "key": client.key,
        "token": token,
        "root": daemon.root,
    });
    let seen = common::python_json("python/third_party.py", &args);
    let path = daemon.path("hello.txt").display().to_string();
    assert_eq!(seen["protocol_version"], json!(fsd_proto::PROTOCOL_VERSION));
    assert_eq!(seen["stat_size"], json!(15));
    assert_eq!(seen["read_text"], json!("hello from fsd\n"));
    assert_eq!(seen["write_display_path"], json!(path));
    assert_eq!(
        seen["transact_refused"],
        json!({"reason": "FS_STALE_VERSION", "operation": "1", "other_exists": false})
    );
    assert_eq!(seen["transact"], json!(["write", "edit"]));
    assert_eq!(String::from_utf8(daemon.read("hello.txt")).unwrap(), "written from grpcio\n");
    assert_eq!(daemon.read("other.txt"), b"other\n");
    assert_eq!(
        seen["missing"],
        json!({"code": "NOT_FOUND", "reason": "FS_NOT_FOUND", "domain": "fsd", "path": daemon.path("missing.txt")})
    );
    assert_eq!(seen["stale"], json!({"code": "ABORTED", "reason": "FS_STALE_VERSION"}));
    assert_eq!(seen["compressed"], json!("UNIMPLEMENTED"), "a compressed request must be refused");
    assert_eq!(seen["health"], json!({"(server)": "SERVING", "fsd.v1.Fsd": "SERVING"}));
    // Exactly what the listener serves: not fsd.approver.v1, whose descriptors share the set.
    assert_eq!(
        seen["reflection_services"],
        json!([
            "fsd.v1.Fsd",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ])
    );
    assert_eq!(seen["reflection_knows_readtext"], json!(true));
    assert_eq!(seen["anonymous"]["code"], json!("UNAUTHENTICATED"));
    assert_eq!(seen["token_stat_size"], json!("written from python\n".len()));
    assert_eq!(seen["anonymous_health"], json!("SERVING"));
    assert_eq!(seen["probe_health"], json!("SERVING"));
    assert_eq!(seen["probe_fsd"], json!("UNIMPLEMENTED"), "the health listener serves health only");
}
