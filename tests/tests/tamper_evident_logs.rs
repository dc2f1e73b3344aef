//! The daemon's audit log and the approver's decision log are hash chains with signed
//! checkpoints: after real calls and a stop, `fsd audit verify` and `fsd-approver verify-log`
//! find them intact, and name the line an edit, a reorder or a cut broke. Without a configured
//! key the daemon signs with its own, kept in `state_dir`; a log cut back to an earlier run's
//! shutdown checkpoint is found with a checkpoint hash the writer logged (`--expect-checkpoint`).

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

/// The checkpoint hashes a writer logged on stderr, in order (the daemon's `audit log checkpoint
/// ... hash=HEX`, the approver's `decision log checkpoint: ... hash HEX`).
fn logged_checkpoints(stderr: &Path) -> Vec<String> {
    std::fs::read_to_string(stderr)
        .unwrap()
        .lines()
        .filter(|l| l.contains("log checkpoint"))
        .filter_map(|l| {
            let after = &l[l.find("hash")? + "hash".len()..];
            let hex = after.trim_start_matches(['=', ' ', '"', ':']);
            hex.get(..64).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit())).map(str::to_owned)
        })
        .collect()
}

/// A copy of `log` holding its lines up to and including the first run's shutdown checkpoint:
/// what is left after a cut back to it, a whole signed log.
fn cut_back_to_first_shutdown(log: &Path, dir: &Path) -> PathBuf {
    let all = lines(log);
    let end = all.iter().position(|l| l.contains("\"checkpoint\":\"shutdown\"")).unwrap() + 1;
    assert!(end < all.len(), "the second run wrote nothing after the first one's end");
    let path = dir.join("cut-back.jsonl");
    std::fs::write(&path, all[..end].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    path
}

/// A daemon with no `audit_signing_key` signs its checkpoints with its own key, made once in
/// `state_dir` (the supervisor's user's alone) and kept across a restart; the log verifies
/// against that key, each tampering is named, and a cut back to the first run's shutdown
/// checkpoint, which verifies as whole, is found with the last checkpoint hash it logged.
#[test]
fn the_daemon_signs_with_its_own_key_and_a_logged_checkpoint_finds_a_cut_back() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let state = dir.path().join("state");
    let stderr = dir.path().join("fsd.stderr");
    let config = format!(
        "audit_log = \"{}\"\nstate_dir = \"{}\"\naudit_checkpoint_every = 2\n",
        audit.display(),
        state.display()
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut d = launch()
        .unix(dir.path().join("fsd.sock"))
        .writable_root(std::fs::canonicalize(&ws).unwrap())
        .config(dir.path().join("fsd.toml"), config)
        .env("FSD_LOG", "info")
        .stderr(fsd_testkit::Stderr::Log(stderr.clone()))
        .start()
        .unwrap();
    let endpoint = format!("unix:{}", dir.path().join("fsd.sock").display());
    let write_some = |from: usize| {
        let root = std::fs::canonicalize(&ws).unwrap();
        let mut t = ToolSession::start(&endpoint, &root, None);
        for n in from..from + 3 {
            let r =
                t.call("write", json!({"file_path": p(&root.join(format!("f{n}.txt"))), "content": "x\n"}));
            assert!(!r.is_error(), "{}", r.json);
        }
        t.finish();
    };
    write_some(0);
    d.restart().unwrap();
    write_some(3);
    assert!(d.terminate().unwrap().success());

    // The key: made once, the daemon's user's alone, its public key beside it and in the log.
    let keys = state.join("audit-key");
    let meta = |path: &Path| {
        let meta = std::fs::metadata(path).unwrap();
        (meta.uid(), meta.permissions().mode() & 0o777)
    };
    let me = rustix::process::geteuid().as_raw();
    assert_eq!(meta(&keys), (me, 0o700));
    assert_eq!(meta(&keys.join("audit.key")), (me, 0o600));
    let public = std::fs::read_to_string(keys.join("audit.pub")).unwrap().trim().to_owned();
    let said = std::fs::read_to_string(&stderr).unwrap();
    let started: Vec<&str> = said.lines().filter(|l| l.contains("signed by the daemon's own key")).collect();
    assert_eq!(started.len(), 2, "one line per start:\n{said}");
    assert!(started.iter().all(|l| l.contains(&public)), "the same key after the restart:\n{said}");
    let (records, checkpoints) = counts(&audit);
    let signed = lines(&audit).iter().filter(|l| l.contains("\"signature\":")).count();
    assert_eq!(signed, checkpoints, "every checkpoint signed:\n{}", lines(&audit).join("\n"));

    let verify = |file: &Path, expect: &[&str]| {
        let mut command = fsd_command();
        command.args(["audit", "verify", "--public-key"]).arg(keys.join("audit.pub"));
        for hash in expect {
            command.args(["--expect-checkpoint", hash]);
        }
        command.arg(file);
        run(command)
    };
    assert_eq!(
        verify(&audit, &[]),
        (
            0,
            format!(
                "{}: intact: {records} records, {checkpoints} checkpoints, signed by {public}\n",
                audit.display()
            )
        )
    );
    for (name, file, said) in tamperings(&audit, dir.path()) {
        let (code, out) = verify(&file, &[]);
        assert_eq!(code, 1, "{name}: {out}");
        assert!(out.starts_with(&said), "{name}: {out:?} does not start with {said:?}");
    }
    // Every checkpoint was logged with its hash; the last is the second run's shutdown one.
    let logged = logged_checkpoints(&stderr);
    assert_eq!(logged.len(), checkpoints, "{said}");
    let last = logged.last().unwrap();
    assert!(lines(&audit).last().unwrap().ends_with(&format!("\"hash\":\"{last}\"}}")));
    let (code, out) = verify(&audit, &[last]);
    assert_eq!(code, 0, "{out}");
    // Cut back to the first run's end: whole and signed, so it verifies, unless the later
    // checkpoint's hash is expected.
    let cut = cut_back_to_first_shutdown(&audit, dir.path());
    let (code, out) = verify(&cut, &[]);
    assert_eq!(code, 0, "a cut back to a shutdown checkpoint is a whole log: {out}");
    let (code, out) = verify(&cut, &[last]);
    assert_eq!(
        (code, out),
        (
            1,
            format!(
                "{}:{}: records missing: the log does not hold the expected checkpoint {last} (cut back to an earlier checkpoint, or rewritten)\n",
                cut.display(),
                lines(&cut).len() + 1
            )
        )
    );
}

/// Without `state_dir` there is nowhere to keep a key: the checkpoints are still signed, by a key
/// of that run (logged at start as a warning), never unsigned.
#[test]
fn without_a_state_dir_the_audit_log_is_signed_by_a_key_of_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut d = Daemon::start_with(&[], &format!("audit_log = \"{}\"\n", audit.display()));
    let mut t = d.session();
    let r = t.call("write", json!({"file_path": p(&d.path("f.txt")), "content": "x\n"}));
    assert!(!r.is_error(), "{}", r.json);
    t.finish();
    assert!(d.terminate().success());
    let last: serde_json::Value = serde_json::from_str(lines(&audit).last().unwrap()).unwrap();
    let key = last["key"].as_str().unwrap_or_else(|| panic!("an unsigned checkpoint: {last}"));
    let mut command = fsd_command();
    command.args(["audit", "verify", "--public-key", key]).arg(&audit);
    assert_eq!(
        run(command),
        (0, format!("{}: intact: 1 records, 1 checkpoints, signed by {key}\n", audit.display()))
    );
}

/// `fsd-approver serve` as an operator runs it.
struct Approver(Child);

impl Drop for Approver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Approver {
    /// `serve` with an allow-everything rule file, the key in `keys` (from [`keygen`]), a
    /// checkpoint every two decisions, and the decision log `keys/decisions.jsonl`; once it listens.
    fn serve(keys: &Path, stderr: Stdio) -> Approver {
        let rules = keys.join("allow.toml");
        std::fs::write(&rules, "[[rule]]\nmode = \"*\"\npath = \"/**\"\ndecision = \"allow\"\n").unwrap();
        let socket = keys.join("approver.sock");
        let child = Command::new(approver_bin())
            .arg("serve")
            .arg("--key")
            .arg(keys.join("approver.key"))
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--rules")
            .arg(&rules)
            .args(["--socket-mode", "0660", "--socket-group", "0", "--checkpoint-every", "2", "--log"])
            .arg(keys.join("decisions.jsonl"))
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut approver = Approver(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(approver.0.try_wait().unwrap().is_none(), "fsd-approver serve exited");
            assert!(Instant::now() < deadline, "fsd-approver serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        approver
    }

    /// `n` escalated reads through a daemon that asks this approver (its public key `public`,
    /// its socket in `keys`), each decided by its rule file.
    fn decide(&self, keys: &Path, public: &str, n: usize) {
        let outside = tempfile::tempdir().unwrap();
        let config = format!(
            "escalation = \"signed\"\nmax_mode = \"danger-full-access\"\napprover_public_key = \"{public}\"\napprover_endpoint = \"unix:{}\"\n",
            keys.join("approver.sock").display()
        );
        let d = Daemon::start_with(&[], &config);
        let mut t = d.session();
        for n in 0..n {
            let target = outside.path().join(format!("app{n}.conf"));
            std::fs::write(&target, "port = 1\n").unwrap();
            let r = t.call(
                "read",
                json!({"file_path": p(&target), "sandbox_permissions": "danger-full-access", "justification": "the user asked"}),
            );
            assert!(!r.is_error() && r.text().contains("port = 1"), "{}", r.json);
        }
        t.finish();
    }

    /// SIGTERM, and a clean exit.
    fn stop(mut self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.0.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        assert!(self.0.wait().unwrap().success());
    }
}

/// The approver decides a few escalations by its rule file and stops; its decision log verifies
/// against its public key, and any edit, reorder or cut is named.
#[test]
fn the_decision_log_verifies_and_names_the_line_a_tampering_broke() {
    let keys = tempfile::tempdir().unwrap();
    let public = keygen(keys.path());
    let log = keys.path().join("decisions.jsonl");
    let approver = Approver::serve(keys.path(), Stdio::null());
    approver.decide(keys.path(), &public, 3);
    approver.stop();

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

/// Two runs of the approver on one decision log: each checkpoint's hash is on its stderr line;
/// the log cut back to the first run's shutdown checkpoint verifies as whole, and is found with
/// the hash of the second run's last checkpoint.
#[test]
fn a_logged_checkpoint_finds_the_decision_log_cut_back() {
    let keys = tempfile::tempdir().unwrap();
    let public = keygen(keys.path());
    let log = keys.path().join("decisions.jsonl");
    let stderr = keys.path().join("approver.stderr");
    for n in [1, 3] {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&stderr).unwrap();
        let approver = Approver::serve(keys.path(), Stdio::from(file));
        approver.decide(keys.path(), &public, n);
        approver.stop();
    }
    let said = std::fs::read_to_string(&stderr).unwrap();
    let starts = said.lines().filter(|l| l.contains(&format!("checkpoints signed by {public}"))).count();
    assert_eq!(starts, 2, "the key on each start:\n{said}");
    let logged = logged_checkpoints(&stderr);
    let (records, checkpoints) = counts(&log);
    assert_eq!((records, checkpoints, logged.len()), (4, 3, 3), "{said}");
    let last = logged.last().unwrap();
    let verify = |file: &Path, expect: &[&str]| {
        let mut command = Command::new(approver_bin());
        command.args(["verify-log", "--public-key", &public]);
        for hash in expect {
            command.args(["--expect-checkpoint", hash]);
        }
        command.arg(file);
        run(command)
    };
    assert_eq!(
        verify(&log, &[&logged[1], last]),
        (
            0,
            format!(
                "{}: intact: 4 records, 3 checkpoints, signed by {public}, holds every expected checkpoint (2)\n",
                log.display()
            )
        )
    );
    let cut = cut_back_to_first_shutdown(&log, keys.path());
    let (code, out) = verify(&cut, &[]);
    assert_eq!(code, 0, "a cut back to a shutdown checkpoint is a whole log: {out}");
    let (code, out) = verify(&cut, &[last]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with(&format!(
            "{}:{}: records missing: the log does not hold the expected checkpoint {last}",
            cut.display(),
            lines(&cut).len() + 1
        )),
        "{out}"
    );
    // A hash that is not one is refused as such (exit 2), not taken for a missing checkpoint.
    let out = Command::new(approver_bin())
        .args(["verify-log", "--expect-checkpoint", "abc"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
