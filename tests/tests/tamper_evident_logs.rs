//! The daemon's audit log and the approver's decision log are hash chains with signed
//! checkpoints: after real calls and a stop, `fsd audit verify` and `fsd-approver verify-log`
//! find them intact, and name the line an edit, a reorder or a cut broke.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::rpc::p;
use common::*;
use serde_json::json;

fn approver_bin() -> PathBuf {
    let bin = bin_dir().join("fsd-approver");
    assert!(bin.is_file(), "{} is missing: build the workspace binaries first", bin.display());
    bin
}

/// `fsd-approver keygen` into `dir`; the public key (hex).
fn keygen(dir: &Path) -> String {
    let out = Command::new(approver_bin()).arg("keygen").arg("--dir").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(dir.join("approver.pub")).unwrap().trim().to_owned()
}

/// Runs a verifier; its exit code and stdout.
fn run(mut command: Command) -> (i32, String) {
    let out = command.output().unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap(), String::from_utf8(out.stdout).unwrap())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
}

/// The records and checkpoints of a log, counted from its lines.
fn counts(path: &Path) -> (usize, usize) {
    let all = lines(path);
    let checkpoints = all.iter().filter(|l| l.contains("\"checkpoint\":")).count();
    (all.len() - checkpoints, checkpoints)
}

/// Each way of breaking a log, applied to a copy of it, and the line the verifier must name
/// with the start of what it must say.
fn tamperings(log: &Path, dir: &Path) -> Vec<(&'static str, PathBuf, String)> {
    let original = lines(log);
    let n = original.len();
    let copy = |name: &str, edit: &dyn Fn(&mut Vec<String>)| {
        let mut edited = original.clone();
        edit(&mut edited);
        let path = dir.join(name);
        std::fs::write(&path, edited.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        path
    };
    let edited = copy("edited.jsonl", &|l| l[1] = l[1].replacen("\"time\":\"2", "\"time\":\"1", 1));
    let reordered = copy("reordered.jsonl", &|l| l.swap(1, 2));
    let truncated = copy("truncated.jsonl", &|l| l.truncate(n - 2));
    vec![
        (
            "one byte edited",
            edited.clone(),
            format!("{}:2: edited: the record does not match its hash", edited.display()),
        ),
        (
            "two records swapped",
            reordered.clone(),
            format!("{}:2: reordered: record 3 where record 2 belongs", reordered.display()),
        ),
        (
            "the last two lines cut",
            truncated.clone(),
            format!(
                "{}:{}: truncated: the log ends without a shutdown checkpoint",
                truncated.display(),
                n - 1
            ),
        ),
    ]
}

/// A daemon serves calls and stops; its audit log verifies, still holds every field it held
/// before chaining, continues its chain across a restart, and any edit, reorder or cut is named.
#[test]
fn the_audit_log_verifies_and_names_the_line_a_tampering_broke() {
    let keys = tempfile::tempdir().unwrap();
    let public = keygen(keys.path());
    let audit = keys.path().join("audit.jsonl");
    let config = format!(
        "audit_log = \"{}\"\naudit_signing_key = \"{}\"\naudit_checkpoint_every = 2\n",
        audit.display(),
        keys.path().join("approver.key").display()
    );
    let mut d = Daemon::start_with(&[], &config);
    let write_some = |d: &Daemon, from: usize| {
        let mut t = d.session();
        for n in from..from + 3 {
            let r = t.call("write", json!({"file_path": p(&d.path(&format!("f{n}.txt"))), "content": "x\n"}));
            assert!(!r.is_error(), "{}", r.json);
        }
        t.finish();
    };
    write_some(&d, 0);
    // Restarted: the new run continues the chain of the one before.
    d.restart();
    write_some(&d, 3);
    assert!(d.terminate().success());

    let verify = |file: &Path, key: &str| {
        let mut command = fsd_command();
        command.args(["audit", "verify", "--public-key", key]).arg(file);
        run(command)
    };
    // A command is never a daemon's run: the daemon's flags (the internal role among them) are
    // refused beside it.
    for flags in [&["--role", "network"][..], &["--listen", "unix:/nonexistent/fsd.sock"][..]] {
        let out = fsd_command().args(flags).args(["audit", "verify"]).arg(&audit).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{flags:?}");
    }
    let (records, checkpoints) = counts(&audit);
    assert!(
        records >= 6 && checkpoints >= 3,
        "an interval checkpoint and two shutdown ones: {records} {checkpoints}\n{}",
        lines(&audit).join("\n")
    );
    assert_eq!(
        verify(&audit, keys.path().join("approver.pub").to_str().unwrap()),
        (
            0,
            format!(
                "{}: intact: {records} records, {checkpoints} checkpoints, signed by {public}\n",
                audit.display()
            )
        )
    );
    // The records keep their fields; the chain's come after them, the hash last.
    let all = lines(&audit);
    let write: serde_json::Value = serde_json::from_str(&all[0]).unwrap();
    let fields: Vec<&str> = write.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        [
            "time", "session", "call", "client", "op", "path", "mode", "decision", "result", "seq", "prev",
            "hash"
        ],
        "{}",
        all[0]
    );
    let last: serde_json::Value = serde_json::from_str(all.last().unwrap()).unwrap();
    assert_eq!(
        (last["checkpoint"].as_str(), last["key"].as_str()),
        (Some("shutdown"), Some(public.as_str()))
    );
    // Another key's checkpoints are not these.
    let other = tempfile::tempdir().unwrap();
    let other_key = keygen(other.path());
    let (code, out) = verify(&audit, &other_key);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(": bad signature: the checkpoint is not signed by "), "{out}");
    for (name, file, said) in tamperings(&audit, keys.path()) {
        let (code, out) = verify(&file, &public);
        assert_eq!(code, 1, "{name}: {out}");
        assert!(out.starts_with(&said), "{name}: {out:?} does not start with {said:?}");
    }
}

/// `fsd-approver serve` as an operator runs it.
struct Approver(Child);

impl Drop for Approver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The approver decides a few escalations by its rule file and stops; its decision log verifies
/// against its public key, and any edit, reorder or cut is named.
#[test]
fn the_decision_log_verifies_and_names_the_line_a_tampering_broke() {
    let keys = tempfile::tempdir().unwrap();
    let public = keygen(keys.path());
    let rules = keys.path().join("allow.toml");
    std::fs::write(&rules, "[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"allow\"\n").unwrap();
    let socket = keys.path().join("approver.sock");
    let log = keys.path().join("decisions.jsonl");
    let child = Command::new(approver_bin())
        .arg("serve")
        .arg("--key")
        .arg(keys.path().join("approver.key"))
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .arg("--rules")
        .arg(&rules)
        .args(["--socket-mode", "0660", "--socket-group", "0", "--checkpoint-every", "2", "--log"])
        .arg(&log)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut approver = Approver(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(approver.0.try_wait().unwrap().is_none(), "fsd-approver serve exited");
        assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let outside = tempfile::tempdir().unwrap();
    let config = format!(
        "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{public}\"\napprover_endpoint = \"unix:{}\"\n",
        socket.display()
    );
    let d = Daemon::start_with(&[], &config);
    let mut t = d.session();
    for n in 0..3 {
        let target = outside.path().join(format!("app{n}.conf"));
        std::fs::write(&target, "port = 1\n").unwrap();
        let r = t.call(
            "read",
            json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "the user asked"}),
        );
        assert!(!r.is_error() && r.text().contains("port = 1"), "{}", r.json);
    }
    t.finish();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(approver.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(approver.0.wait().unwrap().success());

    let verify = |file: &Path, key: &str| {
        let mut command = Command::new(approver_bin());
        command.args(["verify-log", "--public-key", key]).arg(file);
        run(command)
    };
    // Three decisions, a checkpoint after the second, one at exit.
    assert_eq!(counts(&log), (3, 2), "{:?}", lines(&log));
    let decision: serde_json::Value = serde_json::from_str(&lines(&log)[0]).unwrap();
    assert_eq!((decision["decision"].as_str(), decision["by"].as_str()), (Some("approved"), Some("rules")));
    let pub_file = keys.path().join("approver.pub");
    assert_eq!(
        verify(&log, pub_file.to_str().unwrap()),
        (0, format!("{}: intact: 3 records, 2 checkpoints, signed by {public}\n", log.display()))
    );
    for (name, file, said) in tamperings(&log, keys.path()) {
        let (code, out) = verify(&file, &public);
        assert_eq!(code, 1, "{name}: {out}");
        assert!(out.starts_with(&said), "{name}: {out:?} does not start with {said:?}");
    }
}
