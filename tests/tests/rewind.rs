//! The change record, checkpoints and the listing of changes (docs/rewind.md), end to end: the
//! real daemon with a `state_dir`, driven by `fsd-tools session` (the JSON-lines face of an
//! agent host) and the `fsd-tools checkpoint | changes` CLI.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{self, Daemon, ToolSession};

/// A daemon with a state directory (outside its root) and these config lines added.
fn daemon(extra: &str) -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let config = format!("state_dir = \"{}\"\n{extra}", state.path().display());
    (Daemon::start_with(&[], &config), state)
}

/// Names a point on the session: its id.
fn checkpoint(s: &mut ToolSession, label: &str) -> u64 {
    let reply = s.raw(&json!({"id": "cp", "checkpoint": label}).to_string());
    assert!(!reply.is_error(), "{}", reply.json);
    reply.meta()["checkpoint"].as_u64().expect("an id")
}

/// The session's listing after a point.
fn changes(s: &mut ToolSession, since: u64) -> common::Reply {
    let reply = s.raw(&json!({"id": "ch", "changes": {"since": since, "this_session": true}}).to_string());
    assert!(!reply.is_error(), "{}", reply.json);
    reply
}

/// `fsd-tools ARGS --endpoint ...`: its stdout and whether it succeeded.
fn cli(d: &Daemon, args: &[&str]) -> (String, bool) {
    let out = Command::new(common::tools_bin())
        .args(args)
        .arg("--endpoint")
        .arg(d.endpoint())
        .arg("--cwd")
        .arg(&d.root)
        .output()
        .expect("run fsd-tools");
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.success())
}

fn blobs(state: &Path) -> usize {
    std::fs::read_dir(state.join("changes/blobs")).unwrap().count()
}

/// A session's writes, edits, patches (an update, a move and a delete) after a checkpoint are
/// each recorded with who made them, and the listing shows per file the diff since the point.
#[test]
fn every_change_of_a_session_is_listed_with_its_author_and_diff() {
    let (d, state) = daemon("");
    d.write("a.txt", "one\ntwo\n");
    d.write("b.txt", "bee\n");
    d.write("c.txt", "sea\n");
    let mut s = d.session_with_config("applyPatch = true\n");
    let a = d.path("a.txt").display().to_string();
    let before = checkpoint(&mut s, "start");
    assert!(!s.read(&a).is_error());
    assert!(!s.call("edit", json!({"file_path": a, "old_string": "two", "new_string": "TWO"})).is_error());
    assert!(!s.call("write", json!({"file_path": d.path("new.txt"), "content": "fresh\n"})).is_error());
    for name in ["b.txt", "c.txt"] {
        assert!(!s.read(&d.path(name).display().to_string()).is_error());
    }
    let patch = "*** Begin Patch\n*** Update File: b.txt\n@@\n-bee\n+BEE\n*** Update File: c.txt\n*** Move to: moved.txt\n@@\n-sea\n+SEA\n*** Delete File: new.txt\n*** End Patch";
    let patched = s.call("apply_patch", json!({"input": patch}));
    assert!(!patched.is_error(), "{}", patched.json);

    let listing = changes(&mut s, before);
    let meta = listing.meta();
    let ops: Vec<&str> = meta["changes"].as_array().unwrap().iter().map(|c| c["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["editText", "writeText", "writeText", "moveFile", "deleteFile"], "{}", listing.json);
    for change in meta["changes"].as_array().unwrap() {
        assert_eq!(change["identity"], json!("uid:0"));
        assert!(change["call"].as_str().unwrap().starts_with(change["session"].as_str().unwrap()));
    }
    let files: Vec<(&str, &Value)> =
        meta["files"].as_array().unwrap().iter().map(|f| (f["path"].as_str().unwrap(), f)).collect();
    let file = |name: &str| files.iter().find(|(p, _)| p.ends_with(name)).map(|(_, f)| *f).expect(name);
    assert_eq!(file("/a.txt")["diff"], json!(format!("--- a{a}\n+++ b{a}\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n")));
    // Made and removed since the point: no file then, none now, nothing to show.
    assert_eq!((file("/new.txt")["existed"].as_bool(), file("/new.txt")["exists"].as_bool()), (Some(false), Some(false)));
    assert_eq!(file("/new.txt")["diff"], json!(""));
    assert_eq!(file("/c.txt")["exists"], json!(false));
    assert!(file("/moved.txt")["diff"].as_str().unwrap().contains("+SEA"));
    assert_eq!(file("/a.txt")["changed_outside"], json!(false));
    assert!(listing.text().starts_with("5 changes after point"), "{}", listing.text());
    // Each before-image once, by digest: a.txt, b.txt, c.txt and new.txt's.
    assert_eq!(blobs(state.path()), 4);

    // A write fsd did not see is reported, and the diff is against what is there now.
    std::fs::write(d.path("a.txt"), "outside\n").unwrap();
    let listing = changes(&mut s, before);
    assert_eq!(listing.meta()["files"][0]["changed_outside"], json!(true), "{}", listing.json);
    assert!(listing.text().contains("changed since by someone the record did not see"));

    // A later point lists only what came after it.
    let later = checkpoint(&mut s, "later");
    assert!(later > before);
    assert_eq!(changes(&mut s, later).text(), format!("No changes recorded after point {later}."));
}

/// At its size bound the record drops the oldest whole changes, removes the before-images no
/// kept change names, and the listing says what was dropped.
#[test]
fn the_record_at_its_bound_drops_the_oldest_whole_changes_and_says_so() {
    let (d, state) = daemon("change_record_max_bytes = 100\n");
    let mut s = d.session();
    let path = d.path("f.txt").display().to_string();
    for i in 0..6 {
        // Each version is 40 bytes: two before-images fit the bound, three do not.
        let content = format!("{i}{}\n", "x".repeat(38));
        let reply = s.call("write", json!({"file_path": path, "content": content}));
        assert!(!reply.is_error(), "{}", reply.json);
        assert!(!s.read(&path).is_error());
    }
    let listing = changes(&mut s, 0);
    let seqs: Vec<u64> =
        listing.meta()["changes"].as_array().unwrap().iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    // The first write replaced nothing (no image); of the five that did, two fit.
    assert_eq!(seqs, [5, 6], "{}", listing.json);
    assert_eq!(listing.meta()["dropped_through"], json!(4));
    assert_eq!(listing.meta()["dropped_changes"], json!(4));
    assert!(
        listing.text().starts_with(
            "The record's bounds dropped the oldest history: 4 whole changes, through change 4. \
             Changes after your point up to then are not listed and cannot be undone."
        ),
        "{}",
        listing.text()
    );
    assert_eq!(blobs(state.path()), 2);
}

/// The CLI: a checkpoint prints its id, a listing its diffs; another identity's changes only
/// for an identity `change_operators` names.
#[test]
fn the_cli_lists_changes_and_only_an_operator_sees_another_identitys() {
    let (d, _state) = daemon("");
    d.write("a.txt", "one\n");
    let (text, ok) = cli(&d, &["checkpoint", "before"]);
    assert!(ok, "{text}");
    let id: u64 = text.trim().strip_prefix("checkpoint ").and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
    assert_eq!(text.trim(), format!("checkpoint {id} \"before\""));
    let (text, ok) = cli(&d, &["call", "write", &json!({"file_path": d.path("a.txt"), "content": "two\n"}).to_string()]);
    assert!(ok, "{text}");
    let (text, ok) = cli(&d, &["changes", "--since", &id.to_string()]);
    assert!(ok, "{text}");
    assert!(text.contains("writeText"), "{text}");
    assert!(text.contains("-one\n+two"), "{text}");
    let (text, ok) = cli(&d, &["changes", "--identity", "uid:4242"]);
    assert!(!ok);
    assert_eq!(
        text.trim(),
        "Error: only an identity the file service's change_operators names may see or undo another identity's changes"
    );

    let (op, _state) = daemon("change_operators = [\"uid:0\"]\n");
    let (text, ok) = cli(&op, &["changes", "--identity", "*"]);
    assert!(ok, "{text}");
    assert_eq!(text.trim(), "No changes recorded after point 0.");
}

/// Without a state directory there is no record, and the listing says so.
#[test]
fn a_daemon_without_a_record_says_so() {
    let d = Daemon::start();
    let (text, ok) = cli(&d, &["changes"]);
    assert!(!ok);
    assert_eq!(
        text.trim(),
        "Error: the file service keeps no change record (it needs state_dir, and change_record not off)"
    );
}
