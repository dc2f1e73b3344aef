//! The 24 Codex apply_patch scenarios through the real daemon and the real tool, run as
//! `../shared/conformance/README.md` says: once with the policy off, once with it on after the
//! session read every input file; the final tree must equal `expected/` byte for byte, except
//! where the seed rules otherwise (005, 015).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

fn fixtures() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/apply_patch");
    assert!(
        dir.is_dir(),
        "conformance data missing at {}: the shared/ folder must sit beside the checkout",
        dir.display()
    );
    dir
}

/// Every file and directory below `root`: relative path -> Some(bytes) or None for a directory.
fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if entry.file_type().unwrap().is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (rel, content) in tree(from) {
        match content {
            None => std::fs::create_dir_all(to.join(rel)).unwrap(),
            Some(bytes) => {
                let dst = to.join(rel);
                std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
                std::fs::write(dst, bytes).unwrap();
            }
        }
    }
}

/// What the seed says the tree must be afterwards, when it differs from `expected/`.
fn expected_tree(scenario: &Path, name: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    match name {
        // Rejected in preflight: nothing is written, and 015 has no input.
        "015_failure_after_partial_success_leaves_changes" => tree(&scenario.join("input")),
        _ => tree(&scenario.join("expected")),
    }
}

#[test]
fn every_scenario_with_the_policy_off_and_on() {
    every_scenario_holds(&Daemon::start());
}

/// A daemon that predates Inspect (the tools' preflight asks it in one call) answers it
/// `UNIMPLEMENTED`; the tools ask the single calls instead, and every scenario and report ends as
/// with a daemon that has it.
#[test]
fn every_scenario_and_report_through_a_daemon_without_inspect() {
    let d = old_daemon();
    let mut rpc = common::rpc::Rpc::connect(&d);
    let request = fsd_proto::v1::InspectRequest {
        targets: vec![fsd_proto::v1::InspectTarget {
            path: d.root.display().to_string(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let answer = rpc.rt.block_on(rpc.client.inspect(request)).map(|_| ()).unwrap_err();
    assert_eq!(answer.code(), tonic::Code::Unimplemented, "the hook makes an old daemon: {answer:?}");
    every_scenario_holds(&d);
    reports_hold(old_daemon());
}

/// The tools' one client says "no Inspect here" (`None`) for exactly the `UNIMPLEMENTED` answer,
/// and answers every target of a daemon that has it: the preflight's fallback above would hide a
/// client that mistook one for the other.
#[test]
fn the_tools_client_tells_a_daemon_without_inspect_from_one_with_it() {
    fn check(d: &Daemon, expected: Option<usize>) {
        use fsd_tool_client::connect::{self, Credentials, Endpoint};
        use fsd_tool_client::daemon::{Daemon as Client, InspectTarget};
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let endpoint = Endpoint::Unix(d.socket.clone());
        let (session, _hello, _link) =
            rt.block_on(connect::open(&endpoint, &Credentials::default())).unwrap();
        let mut client = Client::new(session, "inspect-test".to_owned());
        let target = |name: &str| InspectTarget {
            path: d.root.join(name).display().to_string(),
            no_follow: false,
            read: true,
        };
        let answers = rt.block_on(client.inspect(&[target("a.txt"), target("missing.txt")])).unwrap();
        assert_eq!(answers.map(|a| a.len()), expected);
    }
    let current = Daemon::start();
    current.write("a.txt", "alpha\n");
    check(&current, Some(2));
    let old = old_daemon();
    old.write("a.txt", "alpha\n");
    check(&old, None);
}

fn old_daemon() -> Daemon {
    Daemon::start_with_env(&[], "", &[("FSD_FAULT_NO_INSPECT", "1")])
}

fn every_scenario_holds(d: &Daemon) {
    let mut scenarios: Vec<PathBuf> =
        std::fs::read_dir(fixtures()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    scenarios.sort();
    // 24 numbers; 020 is used twice upstream.
    assert_eq!(scenarios.len(), 25, "the conformance set has 25 scenario directories");
    let mut failures = Vec::new();
    for policy in [false, true] {
        for scenario in &scenarios {
            let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
            let cwd = d.root.join(format!("{}-{name}", if policy { "on" } else { "off" }));
            copy_tree(&scenario.join("input"), &cwd);
            let config = format!("applyPatch = true\nobservationPolicy = {policy}\n");
            let path = d.dir.path().join("client.toml");
            std::fs::write(&path, config).unwrap();
            let mut s = ToolSession::start(&d.endpoint(), &cwd, Some(&path));
            if policy {
                for (rel, content) in tree(&cwd) {
                    if content.is_some() {
                        let r = s.read(&rel);
                        assert!(!r.is_error(), "{name}: reading {rel}: {}", r.json);
                    }
                }
            }
            let patch = std::fs::read_to_string(scenario.join("patch.txt")).unwrap();
            let reply = s.call("apply_patch", json!({"input": patch}));
            let got = tree(&cwd);
            let want = expected_tree(scenario, &name);
            if got != want {
                failures.push(format!(
                    "{name} (policy {policy}): tree differs\n  got  {:?}\n  want {:?}\n  reply {}",
                    got.keys().collect::<Vec<_>>(),
                    want.keys().collect::<Vec<_>>(),
                    reply.text()
                ));
                for (k, v) in &want {
                    if got.get(k) != Some(v) {
                        failures.push(format!(
                            "    {k}: got {:?} want {:?}",
                            got.get(k).map(|b| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())),
                            v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
                        ));
                    }
                }
            }
            if name == "005_rejects_empty_patch" {
                assert_eq!(reply.text(), "Success. No operations in patch.");
                assert!(!reply.is_error());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn reports_match_the_seed() {
    reports_hold(Daemon::start());
}

fn reports_hold(d: Daemon) {
    d.write("a.txt", "one\ntwo\n");
    d.write("old.txt", "gone\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    // Not read: the whole patch is refused and nothing changes.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n*** Delete File: old.txt\n*** Add File: new.txt\n+n\n*** Update File: missing.txt\n@@\n-x\n+y\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    err(
        &r,
        "FS_NOT_OBSERVED",
        "Error: Patch rejected before any change (3 problems):\n- operation 1 (update a.txt, patch line 2): cannot modify \"a.txt\": file has not been read — read the file, then retry\n- operation 2 (delete old.txt, patch line 6): cannot modify \"old.txt\": file has not been read — read the file, then retry\n- operation 4 (update missing.txt, patch line 9): cannot read \"missing.txt\": not found",
    );
    assert!(!d.path("new.txt").exists());
    assert_eq!(d.read("a.txt"), b"one\ntwo\n");
    // Read, then the same patch without the missing file succeeds, grouped A/M/D.
    s.read("a.txt");
    s.read("old.txt");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n*** Delete File: old.txt\n*** Add File: new.txt\n+n\n*** End Patch";
    ok(
        &s.call("apply_patch", json!({"input": patch})),
        "Success. Updated the following files:\nA new.txt\nM a.txt\nD old.txt",
    );
    assert_eq!(d.read("a.txt"), b"ONE\ntwo\n");
    assert_eq!(d.read("new.txt"), b"n\n");
    assert!(!d.path("old.txt").exists());
    // A created file can be updated at once (this session wrote it); a move reports M <dest>.
    let patch =
        "*** Begin Patch\n*** Update File: new.txt\n*** Move to: moved/new.txt\n@@\n-n\n+m\n*** End Patch";
    ok(
        &s.call("apply_patch", json!({"input": patch})),
        "Success. Updated the following files:\nM moved/new.txt",
    );
    assert_eq!(d.read("moved/new.txt"), b"m\n");
    // Syntax errors keep the parser's message.
    let r = s.call("apply_patch", json!({"input": "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch"}));
    err(
        &r,
        "PATCH_SYNTAX",
        "Error: Invalid patch hunk on line 2: '*** Frobnicate File: x' is not a valid hunk header. Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'",
    );
    let r = s.call("apply_patch", json!({"input": "hello"}));
    err(&r, "PATCH_SYNTAX", "Error: Invalid patch: The first line of the patch must be '*** Begin Patch'");
}

#[test]
fn a_stopped_commit_reports_completed_failed_and_not_executed() {
    let d = Daemon::start();
    d.write("a.txt", "a\n");
    d.write(".git/config", "x\n");
    let mut s = d.session_with_config("applyPatch = true\nobservationPolicy = false\n");
    // The fence is asked in preflight: a protected target refuses the whole patch.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** Update File: .git/config\n@@\n-x\n+y\n*** Add File: c.txt\n+c\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    err(
        &r,
        "FS_SANDBOX_DENIED",
        "Error: Patch rejected before any change (1 problems):\n- operation 2 (update .git/config, patch line 6): cannot modify \".git/config\": .git is a protected path [sandbox: file access denied under workspace-write mode]",
    );
    assert_eq!(d.read("a.txt"), b"a\n");
    // A failure no check can foresee (an I/O error at commit) stops the commit where it is.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** Add File: fsd-fault-io-error\n+x\n*** Add File: c.txt\n+c\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    ok(
        &r,
        "Patch stopped after 1 of 3 operations.\nCompleted:\nM a.txt\nFailed:\n- operation 2 (add fsd-fault-io-error, patch line 6): cannot modify \"fsd-fault-io-error\": cannot rename into place: Input/output error (os error 5)\nNot executed:\n- operation 3 (add c.txt)",
    );
    assert_eq!(r.meta()["stopped"], json!(true));
    assert_eq!(d.read("a.txt"), b"b\n");
    assert_eq!(d.read(".git/config"), b"x\n");
    assert!(!d.path("c.txt").exists());
}

/// Runs `chattr FLAG path`; the test needs a file system with inode flags (ext4, xfs, btrfs).
fn chattr(flag: &str, path: &Path) {
    let status = std::process::Command::new("chattr").arg(flag).arg(path).status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "chattr {flag} {} failed ({status:?}): this test needs chattr and a file system with inode flags",
        path.display()
    );
}

#[test]
fn a_move_whose_source_cannot_be_removed_says_the_destination_was_written() {
    let d = Daemon::start();
    d.write("src/a.txt", "a\n");
    std::fs::create_dir_all(d.path("dst")).unwrap();
    // Append-only: names may be added to src/, none removed, whoever asks.
    chattr("+a", &d.path("src"));
    let mut s = d.session_with_config("applyPatch = true\nobservationPolicy = false\n");
    let patch =
        "*** Begin Patch\n*** Update File: src/a.txt\n*** Move to: dst/a.txt\n@@\n-a\n+b\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    chattr("-a", &d.path("src"));
    // The errno travels as a number and is worded here, like every I/O failure.
    ok(
        &r,
        "Patch stopped after 0 of 1 operations.\nFailed:\n- operation 1 (move src/a.txt -> dst/a.txt, patch line 2): source removal failed: cannot remove file: Operation not permitted (os error 1)\n  destination dst/a.txt was written; source src/a.txt remains",
    );
    assert_eq!(d.read("dst/a.txt"), b"b\n");
    assert_eq!(d.read("src/a.txt"), b"a\n");
}

#[test]
fn a_patch_touching_200_files() {
    let d = Daemon::start();
    let mut patch = String::from("*** Begin Patch\n");
    for i in 0..200 {
        d.write(&format!("f/{i}.txt"), format!("line {i}\n"));
        patch.push_str(&format!("*** Update File: f/{i}.txt\n@@\n-line {i}\n+LINE {i}\n"));
    }
    patch.push_str("*** End Patch");
    let mut s = d.session_with_config("applyPatch = true\nobservationPolicy = false\n");
    let r = s.call("apply_patch", json!({"input": patch}));
    assert!(!r.is_error(), "{}", r.json);
    assert!(r.text().starts_with("Success. Updated the following files:\nM f/0.txt\n"));
    for i in 0..200 {
        assert_eq!(d.read(&format!("f/{i}.txt")), format!("LINE {i}\n").as_bytes());
    }
}

#[test]
fn an_unknown_outcome_and_a_known_failure_mid_commit() {
    // The worker hangs on this write; the daemon kills it at the deadline, so nobody knows
    // whether the file changed: the report says so and ends with the re-read remedy.
    let d = Daemon::start_with(&[], "call_timeout_ms = 1500\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+a\n*** Add File: fsd-fault-hang-write\n+x\n*** Add File: c.txt\n+c\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    ok(
        &r,
        "Patch stopped after 1 of 3 operations.\nCompleted:\nA a.txt\nOutcome unknown:\n- operation 2 (add fsd-fault-hang-write, patch line 4): cannot modify \"fsd-fault-hang-write\": the call exceeded its deadline and its worker was killed; the outcome is unknown — re-read the file, then retry\nNot executed:\n- operation 3 (add c.txt)",
    );
    assert_eq!(r.meta()["operations"][1]["status"], json!("unknown"));
    assert!(d.path("a.txt").exists() && !d.path("c.txt").exists());

    // An I/O error whose target is provably unchanged is a known failure.
    let patch =
        "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Add File: fsd-fault-io-error\n+x\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    ok(
        &r,
        "Patch stopped after 1 of 2 operations.\nCompleted:\nA b.txt\nFailed:\n- operation 2 (add fsd-fault-io-error, patch line 4): cannot modify \"fsd-fault-io-error\": cannot rename into place: Input/output error (os error 5)",
    );
    assert_eq!(r.meta()["operations"][1]["status"], json!("failed"));
    assert!(!d.path("fsd-fault-io-error").exists());
}

#[test]
fn symlink_sources_and_fenced_moves() {
    // A move whose source the fence will not let go (a read-only root): refused in preflight
    // with the sandbox marker, and the destination is never written.
    let ro = tempfile::tempdir().unwrap();
    let ro_root = std::fs::canonicalize(ro.path()).unwrap();
    std::fs::write(ro_root.join("src.txt"), "keep\n").unwrap();
    let d = Daemon::start_with(&["--readable-root", ro_root.to_str().unwrap()], "");
    d.write("a.txt", "a\n");
    std::os::unix::fs::symlink(d.path("a.txt"), d.path("link.txt")).unwrap();
    let mut s = d.session_with_config("applyPatch = true\n");
    assert!(!s.read("a.txt").is_error());
    assert!(!s.read("link.txt").is_error());
    // Deleting or moving a symlink is refused in preflight with its own code.
    let r =
        s.call("apply_patch", json!({"input": "*** Begin Patch\n*** Delete File: link.txt\n*** End Patch"}));
    err(
        &r,
        "PATCH_SYMLINK_SOURCE",
        "Error: Patch rejected before any change (1 problems):\n- operation 1 (delete link.txt, patch line 2): cannot delete \"link.txt\": it is a symbolic link; patch the file it points to instead",
    );
    assert!(d.path("link.txt").exists());
    let src = ro_root.join("src.txt");
    assert!(!s.read(src.to_str().unwrap()).is_error());
    let patch = format!(
        "*** Begin Patch\n*** Update File: {}\n*** Move to: moved.txt\n@@\n-keep\n+kept\n*** End Patch",
        src.display()
    );
    let r = s.call("apply_patch", json!({"input": patch}));
    assert!(r.is_error(), "{}", r.json);
    assert_eq!(r.code(), Some("FS_SANDBOX_DENIED"), "{}", r.json);
    assert!(
        r.text().starts_with("Error: Patch rejected before any change (1 problems):\n- operation 1 (move "),
        "{}",
        r.text()
    );
    assert!(r.text().ends_with("[sandbox: file access denied under workspace-write mode]"), "{}", r.text());
    assert_eq!(std::fs::read_to_string(&src).unwrap(), "keep\n");
    assert!(!d.path("moved.txt").exists());
}

/// The client config that commits apply_patch as one daemon transaction, and a daemon that can.
fn atomic_daemon(extra: &str) -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&[], &format!("state_dir = \"{}\"\n{extra}", state.path().display()));
    (d, state)
}

const ATOMIC: &str = "applyPatch = true\nobservationPolicy = false\napplyPatchAtomic = true\n";

/// With `applyPatchAtomic`, every scenario ends in the same tree as without it: the successful
/// ones commit whole, the rejected ones change nothing.
#[test]
fn every_scenario_with_the_atomic_commit() {
    let (d, _state) = atomic_daemon("");
    let mut scenarios: Vec<PathBuf> =
        std::fs::read_dir(fixtures()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    scenarios.sort();
    let path = d.dir.path().join("atomic.toml");
    std::fs::write(&path, ATOMIC).unwrap();
    let mut failures = Vec::new();
    for scenario in &scenarios {
        let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
        let cwd = d.root.join(&name);
        copy_tree(&scenario.join("input"), &cwd);
        let mut s = ToolSession::start(&d.endpoint(), &cwd, Some(&path));
        let patch = std::fs::read_to_string(scenario.join("patch.txt")).unwrap();
        let reply = s.call("apply_patch", json!({"input": patch}));
        if tree(&cwd) != expected_tree(scenario, &name) {
            failures.push(format!("{name}: tree differs; reply {}", reply.text()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The stopped commits above, with `applyPatchAtomic`: the failure is reported as before, the
/// operations before it are undone, and the tree is as it was.
#[test]
fn an_atomic_commit_that_fails_changes_nothing_and_says_so() {
    let (d, _state) = atomic_daemon("call_timeout_ms = 1500\n");
    d.write("a.txt", "a\n");
    let before = tree(&d.root);
    let mut s = d.session_with_config(ATOMIC);
    let cases = [
        (
            "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** Add File: fsd-fault-io-error\n+x\n*** Add File: c.txt\n+c\n*** End Patch",
            "Patch rolled back: operation 2 of 3 failed, so no file was changed.\nUndone:\nM a.txt\nFailed:\n- operation 2 (add fsd-fault-io-error, patch line 6): cannot modify \"fsd-fault-io-error\": cannot rename into place: Input/output error (os error 5)\nNot executed:\n- operation 3 (add c.txt)",
            ["undone", "failed", "skipped"],
        ),
        (
            "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Add File: fsd-fault-hang-write\n+x\n*** Add File: c.txt\n+c\n*** End Patch",
            "Patch outcome unknown: the commit was cut; all 3 operations were applied or none.\nOutcome unknown:\n- operation 1 (add b.txt, patch line 2)\n- operation 2 (add fsd-fault-hang-write, patch line 4)\n- operation 3 (add c.txt, patch line 6)\nCause: cannot modify \"b.txt\": the call exceeded its deadline and its worker was killed; the outcome is unknown — re-read the file, then retry",
            ["unknown", "unknown", "unknown"],
        ),
    ];
    for (patch, text, statuses) in cases {
        let r = s.call("apply_patch", json!({"input": patch}));
        ok(&r, text);
        assert_eq!(r.meta()["atomic"], json!(true));
        let got: Vec<&str> = (0..3).map(|i| r.meta()["operations"][i]["status"].as_str().unwrap()).collect();
        assert_eq!(got, statuses);
        // A cut commit is rolled back, and its staged files swept, by the supervisor before the
        // next call on one of its targets runs (`c.txt` is one in both patches).
        let probe = s.call("write", json!({"file_path": "c.txt", "content": "p"}));
        assert!(!probe.is_error(), "{}", probe.json);
        std::fs::remove_file(d.path("c.txt")).unwrap();
        assert_eq!(tree(&d.root), before, "{text}");
    }

    // The move whose source cannot be removed: its destination is undone too.
    d.write("src/a.txt", "a\n");
    std::fs::create_dir_all(d.path("dst")).unwrap();
    let before = tree(&d.root);
    chattr("+a", &d.path("src"));
    let patch =
        "*** Begin Patch\n*** Update File: src/a.txt\n*** Move to: dst/a.txt\n@@\n-a\n+b\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    chattr("-a", &d.path("src"));
    ok(
        &r,
        "Patch rolled back: operation 1 of 1 failed, so no file was changed.\nFailed:\n- operation 1 (move src/a.txt -> dst/a.txt, patch line 2): cannot modify \"src/a.txt\": cannot remove file: Operation not permitted (os error 1)",
    );
    assert_eq!(tree(&d.root), before);
}

/// Off, the same patch keeps the seed's report and its partial change (the option changes
/// nothing unless it is on).
#[test]
fn without_the_option_a_daemon_with_state_dir_commits_in_order() {
    let (d, _state) = atomic_daemon("");
    d.write("a.txt", "a\n");
    let mut s = d.session_with_config("applyPatch = true\nobservationPolicy = false\n");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** Add File: fsd-fault-io-error\n+x\n*** Add File: c.txt\n+c\n*** End Patch";
    let r = s.call("apply_patch", json!({"input": patch}));
    ok(
        &r,
        "Patch stopped after 1 of 3 operations.\nCompleted:\nM a.txt\nFailed:\n- operation 2 (add fsd-fault-io-error, patch line 6): cannot modify \"fsd-fault-io-error\": cannot rename into place: Input/output error (os error 5)\nNot executed:\n- operation 3 (add c.txt)",
    );
    assert_eq!(d.read("a.txt"), b"b\n");
}
