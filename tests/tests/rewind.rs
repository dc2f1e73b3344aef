//! The change record, checkpoints and the listing of changes (docs/rewind.md), end to end: the
//! real daemon with a `state_dir`, driven by `fsd-tools session` (the JSON-lines face of an
//! agent host), the `fsd-tools checkpoint | changes` CLI, and the MCP tools of the same names
//! through the official Python SDK (`tests/mcp/rewind.py`).

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

/// The inodes of the record's blobs.
fn blob_inodes(state: &Path) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(state.join("changes/blobs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().ino())
        .collect()
}

/// Where the store shares the tree's filesystem, a replaced or deleted file becomes its own
/// before-image: the commit renames it into the store rather than copying it. A rewind restores
/// both from there.
#[test]
fn a_replaced_or_deleted_file_is_moved_into_the_record_not_copied() {
    use std::os::unix::fs::MetadataExt;
    let (d, state) = daemon("");
    d.write("a.txt", "one\n");
    d.write("b.txt", "bee\n");
    // Each file held open, so an unlinked one's inode number is not reused by a copy.
    let mut held = Vec::new();
    let mut ino = |name: &str| {
        let file = std::fs::File::open(d.path(name)).unwrap();
        let ino = file.metadata().unwrap().ino();
        held.push(file);
        ino
    };
    let (a, b) = (ino("a.txt"), ino("b.txt"));
    let mut s = d.session_with_config("applyPatch = true\n");
    let since = checkpoint(&mut s, "before");
    for name in ["a.txt", "b.txt"] {
        assert!(!s.read(&d.path(name).display().to_string()).is_error());
    }
    assert!(!s.call("write", json!({"file_path": d.path("a.txt"), "content": "ONE\n"})).is_error());
    let patch = "*** Begin Patch\n*** Delete File: b.txt\n*** End Patch";
    let patched = s.call("apply_patch", json!({"input": patch}));
    assert!(!patched.is_error(), "{}", patched.json);
    let kept = blob_inodes(state.path());
    assert!(kept.contains(&a), "the replaced a.txt ({a}) is a blob: {kept:?}");
    assert!(kept.contains(&b), "the deleted b.txt ({b}) is a blob: {kept:?}");
    assert_eq!(kept.len(), 2, "{kept:?}");
    let rewound = rewind(&mut s, since, false);
    assert!(!rewound.is_error(), "{}", rewound.json);
    assert_eq!(std::fs::read_to_string(d.path("a.txt")).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(d.path("b.txt")).unwrap(), "bee\n");

    // A move over a guarded destination: the destination's file it replaced goes in too.
    d.write("c.txt", "sea\n");
    d.write("e.txt", "ee\n");
    let e = ino("e.txt");
    let mut rpc = crate::common::rpc::Rpc::connect(&d);
    let version = rpc.version(&d.path("e.txt"));
    let request = fsd_proto::v1::MoveFileRequest {
        source: crate::common::rpc::p(&d.path("c.txt")),
        destination: crate::common::rpc::p(&d.path("e.txt")),
        destination_guard: Some(fsd_proto::v1::WriteGuard {
            kind: Some(fsd_proto::v1::write_guard::Kind::ReplaceIfVersion(fsd_proto::v1::ReplaceIfVersion {
                version,
                ..Default::default()
            })),
        }),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.move_file(request)).expect("moveFile");
    let kept = blob_inodes(state.path());
    assert!(kept.contains(&e), "the moved-over e.txt ({e}) is a blob: {kept:?}");
    drop(held);
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
    let ops: Vec<&str> =
        meta["changes"].as_array().unwrap().iter().map(|c| c["operation"].as_str().unwrap()).collect();
    assert_eq!(ops, ["editText", "writeText", "writeText", "moveFile", "deleteFile"], "{}", listing.json);
    for change in meta["changes"].as_array().unwrap() {
        assert_eq!(change["identity"], json!("uid:0"));
        assert!(change["call"].as_str().unwrap().starts_with(change["session"].as_str().unwrap()));
    }
    let files: Vec<(&str, &Value)> =
        meta["files"].as_array().unwrap().iter().map(|f| (f["path"].as_str().unwrap(), f)).collect();
    let file = |name: &str| files.iter().find(|(p, _)| p.ends_with(name)).map(|(_, f)| *f).expect(name);
    assert_eq!(
        file("/a.txt")["diff"],
        json!(format!("--- a{a}\n+++ b{a}\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"))
    );
    // Made and removed since the point: no file then, none now, nothing to show.
    assert_eq!(
        (file("/new.txt")["existed"].as_bool(), file("/new.txt")["exists"].as_bool()),
        (Some(false), Some(false))
    );
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
    // A rewind to a point before the dropped history would not restore it whole: refused.
    let before = d.read("f.txt");
    let refused = rewind(&mut s, 0, false);
    assert_eq!(refused.code(), Some("FS_SANDBOX_DENIED"), "{}", refused.json);
    assert_eq!(
        refused.text(),
        "Error: the change record's bounds dropped history after that point, so it cannot be restored whole; nothing was changed"
    );
    assert_eq!(d.read("f.txt"), before);
    // From a point after it, the kept changes undo.
    let back = rewind(&mut s, 4, false);
    assert!(!back.is_error(), "{}", back.json);
    assert_eq!(d.read("f.txt"), format!("3{}\n", "x".repeat(38)).into_bytes());
}

/// The CLI: a checkpoint prints its id, a listing its diffs; another identity's changes only
/// for an identity `change_operators` names.
#[test]
fn the_cli_lists_changes_and_only_an_operator_sees_another_identitys() {
    let (d, _state) = daemon("");
    d.write("a.txt", "one\n");
    let (text, ok) = cli(&d, &["checkpoint", "before"]);
    assert!(ok, "{text}");
    let id: u64 =
        text.trim().strip_prefix("checkpoint ").and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
    assert_eq!(text.trim(), format!("checkpoint {id} \"before\""));
    let (text, ok) =
        cli(&d, &["call", "write", &json!({"file_path": d.path("a.txt"), "content": "two\n"}).to_string()]);
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

/// One entry of [`tree`]: relative path, kind and mode, owner, content.
type Entry = (String, u32, (u32, u32), Vec<u8>);

/// Every entry below `root`: what "byte for byte, modes and owners included" compares. A name
/// that goes while it is listed (a temporary file the supervisor's sweep removes meanwhile) is
/// not in the tree.
fn tree(root: &Path) -> Vec<Entry> {
    use std::os::unix::fs::MetadataExt;
    fn unless_gone<T>(result: std::io::Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("{e}"),
        }
    }
    let mut out = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Some(meta) = unless_gone(std::fs::symlink_metadata(&path)) else { continue };
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let content = if meta.is_file() {
                let Some(content) = unless_gone(std::fs::read(&path)) else { continue };
                content
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                dirs.push(path);
            }
            out.push((rel, meta.mode(), (meta.uid(), meta.gid()), content));
        }
    }
    out.sort();
    out
}

/// Rewinds the session's changes after a point: the reply.
fn rewind(s: &mut ToolSession, since: u64, keep_checkpoint: bool) -> common::Reply {
    let line = json!({"id": "rw", "rewind": {"since": since, "this_session": true, "keep_checkpoint": keep_checkpoint}});
    s.raw(&line.to_string())
}

/// A session's edits, writes and a patch's update, move and delete across files, all after a
/// checkpoint.
fn a_session_of_changes(d: &Daemon, s: &mut ToolSession) {
    for name in ["a.txt", "b.txt", "c.txt", "secret.txt"] {
        assert!(!s.read(&d.path(name).display().to_string()).is_error());
    }
    let a = d.path("a.txt").display().to_string();
    assert!(!s.call("edit", json!({"file_path": a, "old_string": "two", "new_string": "TWO"})).is_error());
    assert!(!s.call("write", json!({"file_path": d.path("new.txt"), "content": "fresh\n"})).is_error());
    assert!(
        !s.call("write", json!({"file_path": d.path("b.txt"), "content": "bee, rewritten\n"})).is_error()
    );
    let patch = "*** Begin Patch\n*** Update File: b.txt\n@@\n-bee, rewritten\n+BEE\n*** Update File: c.txt\n*** Move to: moved.txt\n@@\n-sea\n+SEA\n*** Delete File: secret.txt\n*** End Patch";
    let patched = s.call("apply_patch", json!({"input": patch}));
    assert!(!patched.is_error(), "{}", patched.json);
}

/// The fixture: files of several modes, one executable that is edited in place.
fn fixture(d: &Daemon) {
    use std::os::unix::fs::PermissionsExt;
    d.write("a.txt", "one\ntwo\n");
    d.write("b.txt", "bee\n");
    d.write("c.txt", "sea\n");
    d.write("secret.txt", "hush\n");
    std::fs::set_permissions(d.path("secret.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(d.path("a.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A session that writes, edits, patches, moves and deletes, then rewinds to its checkpoint:
/// the tree is the checkpoint's, byte for byte, modes and owners included; the rewind is
/// recorded, and rewinding it brings the session's work back.
#[test]
fn a_rewind_restores_the_tree_of_the_checkpoint_and_is_itself_undoable() {
    let logs = tempfile::tempdir().unwrap();
    let audit = logs.path().join("audit.jsonl");
    let (d, _state) = daemon(&format!("audit_log = \"{}\"\n", audit.display()));
    fixture(&d);
    let at_checkpoint = tree(&d.root);
    let mut s = d.session_with_config("applyPatch = true\n");
    let point = checkpoint(&mut s, "before the session");
    a_session_of_changes(&d, &mut s);
    let worked = tree(&d.root);
    assert_ne!(worked, at_checkpoint);

    let reply = rewind(&mut s, point, false);
    assert!(!reply.is_error(), "{}", reply.json);
    assert_eq!(reply.meta()["conflicts"], json!([]), "{}", reply.json);
    assert_eq!(tree(&d.root), at_checkpoint, "{}", reply.text());
    assert!(
        reply.text().starts_with(&format!("Rewound to point {point}: 6 files restored as one change")),
        "{}",
        reply.text()
    );

    // The rewind is a change of its own: rewinding it brings the session's work back.
    let change = reply.meta()["change"].as_u64().expect("the rewind's change");
    let listing = changes(&mut s, change - 1);
    assert_eq!(listing.meta()["changes"][0]["operation"], json!("rewind"), "{}", listing.json);
    let again = rewind(&mut s, change - 1, false);
    assert!(!again.is_error(), "{}", again.json);
    assert_eq!(
        tree(&d.root).into_iter().map(|(p, _, o, c)| (p, o, c)).collect::<Vec<_>>(),
        worked.into_iter().map(|(p, _, o, c)| (p, o, c)).collect::<Vec<_>>()
    );
    // Every rewind is an audit record, and so is one refused.
    let (text, ok) = cli(&d, &["rewind", "--since", "0", "--identity", "uid:4242"]);
    assert!(!ok, "{text}");
    let audit = std::fs::read_to_string(&audit).unwrap();
    let rewinds: Vec<(String, String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["op"] == "rewind")
        .map(|l| {
            (
                l["path"].as_str().unwrap_or("").to_owned(),
                l["result"].as_str().unwrap_or("").to_owned(),
                l["client"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        rewinds,
        [
            (format!("since {point}"), "ok".to_owned(), "uid:0".to_owned()),
            (format!("since {}", change - 1), "ok".to_owned(), "uid:0".to_owned()),
            ("since 0".to_owned(), "FS_PERMISSION_DENIED".to_owned(), "uid:0".to_owned()),
        ],
        "{audit}"
    );
}

/// A file written by someone fsd did not record (an editor, a shell) is a conflict: reported
/// with both versions and left as it is while the rest is restored; with keep_checkpoint it is
/// restored too, and the outside version stays in the record, where a rewind of the rewind finds it.
#[test]
fn an_outside_write_is_a_conflict_and_its_content_is_kept() {
    let (d, _state) = daemon("");
    fixture(&d);
    let mut s = d.session_with_config("applyPatch = true\n");
    let point = checkpoint(&mut s, "start");
    a_session_of_changes(&d, &mut s);
    std::fs::write(d.path("a.txt"), "one\noutside\n").unwrap();

    let reply = rewind(&mut s, point, false);
    assert!(!reply.is_error(), "{}", reply.json);
    let a = d.path("a.txt").display().to_string();
    assert_eq!(reply.meta()["conflicts"], json!([a]), "{}", reply.json);
    assert_eq!(d.read("a.txt"), b"one\noutside\n", "the outside content is kept");
    assert_eq!(d.read("b.txt"), b"bee\n", "the rest is restored");
    assert_eq!(d.read("secret.txt"), b"hush\n");
    assert!(
        reply
            .text()
            .contains(&format!("left as it is: {a} was changed since by someone the record did not see"))
            && reply.text().contains("-two\n+outside"),
        "{}",
        reply.text()
    );

    let kept = rewind(&mut s, point, true);
    assert!(!kept.is_error(), "{}", kept.json);
    assert_eq!(kept.meta()["replaced"], json!([a]), "{}", kept.json);
    assert_eq!(d.read("a.txt"), b"one\ntwo\n");
    let change = kept.meta()["change"].as_u64().unwrap();
    let back = rewind(&mut s, change - 1, false);
    assert!(!back.is_error(), "{}", back.json);
    assert_eq!(d.read("a.txt"), b"one\noutside\n", "the outside version came back from the record");
}

/// A rewind of this session's changes leaves a file another session changed since as it is,
/// and says so as that, not as a change fsd did not see.
#[test]
fn another_sessions_change_since_is_a_conflict_named_as_such() {
    let (d, _state) = daemon("");
    d.write("a.txt", "one\n");
    let mut mine = d.session();
    let mut other = d.session();
    let a = d.path("a.txt").display().to_string();
    assert!(!mine.read(&a).is_error());
    let point = checkpoint(&mut mine, "start");
    let r = mine.call("edit", json!({"file_path": a, "old_string": "one", "new_string": "two"}));
    assert!(!r.is_error(), "{}", r.json);
    assert!(!other.read(&a).is_error());
    let r = other.call("edit", json!({"file_path": a, "old_string": "two", "new_string": "three"}));
    assert!(!r.is_error(), "{}", r.json);

    let reply = rewind(&mut mine, point, false);
    assert!(!reply.is_error(), "{}", reply.json);
    assert_eq!(reply.meta()["conflicts"], json!([a]), "{}", reply.json);
    assert_eq!(d.read("a.txt"), b"three\n", "the other session's change is left");
    assert!(
        reply.text().contains(&format!(
            "left as it is: {a} was changed since by a change this rewind does not undo (another session's or identity's)"
        )),
        "{}",
        reply.text()
    );
}

/// A rewind writes: a caller whose own mode is read-only is refused as a write would be, before
/// anything is looked at (its changes were approved one call at a time).
#[test]
fn a_read_only_caller_may_not_rewind() {
    let (d, _state) = daemon("default_mode = \"read-only\"\n");
    let mut s = d.session();
    let reply = rewind(&mut s, 0, false);
    assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{}", reply.json);
    assert_eq!(reply.text(), "Error: a rewind writes, and this client may only read; nothing was changed");
}

/// The process doing a rewind killed in the middle of its commit (as SIGKILL leaves it), then
/// the daemon restarted: the rewind is all or nothing, here nothing.
#[test]
fn a_rewind_killed_mid_commit_changes_nothing() {
    let (mut d, state) = daemon("");
    fixture(&d);
    let mut s = d.session_with_config("applyPatch = true\n");
    let point = checkpoint(&mut s, "start");
    a_session_of_changes(&d, &mut s);
    // The rewind removes this file: its commit's worker exits right after its second step.
    assert!(!s.call("write", json!({"file_path": d.path("fsd-fault-txn-die-2"), "content": ""})).is_error());
    let before = tree(&d.root);
    let cut = rewind(&mut s, point, false);
    assert!(cut.is_error(), "{}", cut.json);
    // The supervisor recovers the dead worker's transaction (its intent record), then sweeps
    // the worker's journaled temporary files (the staged contents); a call on one of its
    // targets would wait for that, a look at the disk does not: it waits for both.
    let intents = state.path().join("txn");
    let settled = || {
        std::fs::read_dir(&intents).unwrap().count() == 0
            && !tree(&d.root).iter().any(|(name, ..)| name.contains(".fsd-tmp-"))
    };
    for _ in 0..200 {
        if settled() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(tree(&d.root), before, "recovered after the worker's death");
    drop(s);
    d.restart();
    assert_eq!(tree(&d.root), before, "and after a restart");
    assert_eq!(std::fs::read_dir(state.path().join("txn")).unwrap().count(), 0);
}

/// Uploads `bytes` to `path` by writeBytes (gRPC), with a mode when given.
fn upload(rpc: &mut crate::common::rpc::Rpc, path: &Path, bytes: &[u8], mode: Option<u32>) {
    use fsd_proto::v1::{self, write_bytes_request::Item};
    let header = v1::WriteBytesHeader { context: None, path: crate::common::rpc::p(path), guard: None, mode };
    let messages = vec![
        v1::WriteBytesRequest { item: Some(Item::Header(header)) },
        v1::WriteBytesRequest { item: Some(Item::Chunk(bytes.to_vec().into())) },
    ];
    rpc.rt.block_on(rpc.client.write_bytes(tokio_stream::iter(messages))).expect("writeBytes");
}

/// Content that is not text (a byte sequence no UTF-8 decoder takes) is restored byte for
/// byte, and so is a file's mode a writeBytes changed: the rewind goes through the byte path.
#[test]
fn a_rewind_restores_binary_content_and_modes_byte_for_byte() {
    use std::os::unix::fs::PermissionsExt;
    let (d, _state) = daemon("");
    let binary: Vec<u8> = (0..=255u8).rev().cycle().take(3000).collect();
    d.write("blob.bin", &binary);
    std::fs::set_permissions(d.path("blob.bin"), std::fs::Permissions::from_mode(0o640)).unwrap();
    d.write("gone.bin", [0xff, 0xfe, 0x00, 0x80]);
    d.write("text.txt", "text\n");
    std::fs::set_permissions(d.path("text.txt"), std::fs::Permissions::from_mode(0o604)).unwrap();
    let at_checkpoint = tree(&d.root);
    let mut s = d.session();
    let point = checkpoint(&mut s, "before the uploads");
    let mut rpc = crate::common::rpc::Rpc::connect(&d);
    upload(&mut rpc, &d.path("blob.bin"), &[0xc3, 0x28, 0x00, 0xa0], Some(0o755));
    upload(&mut rpc, &d.path("text.txt"), &[0x80, 0x81], Some(0o600));
    let delete = fsd_proto::v1::DeleteFileRequest {
        path: crate::common::rpc::p(&d.path("gone.bin")),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.delete_file(delete)).expect("deleteFile");
    upload(&mut rpc, &d.path("made.bin"), &[0x00, 0xff], None);
    assert_ne!(tree(&d.root), at_checkpoint);

    let line = json!({"id": "rw", "rewind": {"since": point, "this_session": false}});
    let reply = s.raw(&line.to_string());
    assert!(!reply.is_error(), "{}", reply.json);
    assert_eq!(reply.meta()["unrestorable"], json!([]), "{}", reply.json);
    assert_eq!(tree(&d.root), at_checkpoint, "{}", reply.text());
}

/// A change the client's own escalation rules approved runs in the danger-full-access worker
/// itself: recorded, and listed as escalated with its metadata only (no content, no diff). The
/// signed escalation's own process: `signed_escalation::an_approved_change_in_its_own_process_is_recorded`.
#[test]
fn a_change_the_clients_rules_approved_is_listed_with_its_metadata_only() {
    let outside = tempfile::tempdir().unwrap();
    let rules = outside.path().join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[[rule]]\nmode = \"danger-full-access\"\npath = \"{}/**\"\ndecision = \"allow\"\n",
            outside.path().display()
        ),
    )
    .unwrap();
    let (d, _state) = daemon("escalation = \"client\"\nmax_mode = \"danger-full-access\"\n");
    let target = outside.path().join("app.conf");
    std::fs::write(&target, "port = 1\n").unwrap();
    let target = target.display().to_string();
    let mut s = d.session_with_config(&format!("escalationRules = \"{}\"\n", rules.display()));
    let point = checkpoint(&mut s, "before the escalation");
    let esc = |mut args: Value| {
        args.as_object_mut().unwrap().extend(
            json!({"sandbox_permissions": "danger-full-access", "justification": "the user asked"})
                .as_object()
                .unwrap()
                .clone(),
        );
        args
    };
    assert!(!s.call("read", esc(json!({"file_path": target}))).is_error());
    let edited =
        s.call("edit", esc(json!({"file_path": target, "old_string": "port = 1", "new_string": "port = 2"})));
    assert!(!edited.is_error(), "{}", edited.json);
    let made = outside.path().join("new.conf").display().to_string();
    let written = s.call("write", esc(json!({"file_path": made, "content": "made\n"})));
    assert!(!written.is_error(), "{}", written.json);

    let listing = changes(&mut s, point);
    let meta = listing.meta();
    let recorded: Vec<(&str, bool, Vec<&str>)> = meta["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let targets = c["targets"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
            (c["operation"].as_str().unwrap(), c["escalated"].as_bool().unwrap(), targets)
        })
        .collect();
    assert_eq!(
        recorded,
        [("editText", true, vec![target.as_str()]), ("writeText", true, vec![made.as_str()])],
        "{}",
        listing.json
    );
    for file in meta["files"].as_array().unwrap() {
        assert_eq!(file["diff"], Value::Null, "{}", listing.json);
    }
    assert!(!listing.text().contains("port = 2"), "{}", listing.text());
    assert_eq!(listing.text().matches("content not shown: changed under an escalation").count(), 2);
}

/// A write whose file reached the disk and whose sync then failed answers an error, yet the
/// change is there: it is recorded. One that failed before touching the disk is not.
#[test]
fn a_change_on_disk_whose_sync_failed_is_recorded_and_one_that_never_reached_it_is_not() {
    let (d, _state) = daemon("");
    // (name, the file there before, recorded)
    let cases =
        [("fsd-fault-sync-error", Some("before\n"), true), ("fsd-fault-io-error", Some("kept\n"), false)];
    for (name, before, recorded) in cases {
        if let Some(before) = before {
            d.write(name, before);
        }
        let mut s = d.session();
        let path = d.path(name).display().to_string();
        assert!(!s.read(&path).is_error());
        let point = checkpoint(&mut s, name);
        let reply = s.call("write", json!({"file_path": path, "content": "after\n"}));
        assert!(reply.is_error(), "{name}: {}", reply.json);
        let listing = changes(&mut s, point);
        let ops: Vec<&str> = listing.meta()["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["operation"].as_str().unwrap())
            .collect();
        let expected: &[&str] = if recorded { &["writeText"] } else { &[] };
        assert_eq!(ops, expected, "{name}: {}", listing.json);
        if recorded {
            assert_eq!(listing.meta()["changes"][0]["failed"], true, "{name}: {}", listing.json);
            assert!(listing.text().contains("failed after reaching the disk"), "{name}: {}", listing.text());
        }
        let on_disk = if recorded { "after\n" } else { before.unwrap_or_default() };
        assert_eq!(d.read(name), on_disk.as_bytes(), "{name}");
    }
}

/// The change record's tools over MCP (`changeTools = true`), through the official Python SDK
/// (`tests/mcp/rewind.py`): off, tools/list lacks them and a call is refused with the key that
/// turns them on; on, they are listed after the other tools with their schemas and truthful
/// annotations, and one session writes a file, names a checkpoint, edits it and creates another,
/// sees both changes with the diff, rewinds, and the file is back byte for byte, the new one gone.
#[test]
fn the_change_tools_over_mcp_checkpoint_list_and_rewind_python_sdk() {
    let (d, _state) = daemon("");
    let configs = tempfile::tempdir().unwrap();
    let (off, on) = (configs.path().join("off.toml"), configs.path().join("on.toml"));
    std::fs::write(&off, "").unwrap();
    std::fs::write(&on, "changeTools = true\n").unwrap();
    let args = json!({
        "fsd_tools": common::tools_bin(),
        "endpoint": d.endpoint(),
        "root": d.root,
        "off": off,
        "on": on,
    });
    let seen = common::python_json("mcp/rewind.py", &args);
    let (off_seen, on_seen) = (&seen["off"], &seen["on"]);
    let names = |tools: &Value| -> Vec<String> {
        tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    };

    // Off: the tool set as it was, and a call names the key.
    assert_eq!(names(&off_seen["tools"]), ["read", "write", "edit"]);
    assert_eq!(
        off_seen["rewind"]["error"],
        json!([
            -32602,
            "Unknown tool: rewind (tool \"rewind\" is off in this client; changeTools = true in the client config (--config FILE) turns it on)"
        ])
    );

    // On: the same three first, then the record's, as `fsd-tools schemas` prints them.
    assert_eq!(names(&on_seen["tools"]), ["read", "write", "edit", "checkpoint", "changes", "rewind"]);
    let listed = on_seen["tools"].as_array().unwrap();
    assert_eq!(listed[..3], off_seen["tools"].as_array().unwrap()[..]);
    let printed = Command::new(common::tools_bin()).args(["schemas", "--config"]).arg(&on).output().unwrap();
    assert!(printed.status.success());
    let printed: Vec<Value> = serde_json::from_slice(&printed.stdout).unwrap();
    for (tool, schema) in listed[3..].iter().zip(&printed[3..]) {
        assert_eq!(
            (&tool["name"], &tool["description"], &tool["input_schema"]),
            (&schema["name"], &schema["description"], &schema["input_schema"])
        );
    }
    // [title, readOnly, destructive, idempotent, openWorld]
    let annotations: Vec<&Value> = listed[3..].iter().map(|t| &t["annotations"]).collect();
    assert_eq!(
        annotations,
        [
            &json!(["Checkpoint", false, false, false, false]),
            &json!(["List changes", true, false, true, false]),
            &json!(["Rewind changes", false, true, false, false]),
        ]
    );

    // The session's calls: each succeeded but the one with a mistaken argument.
    let ok = |name: &str| {
        let call = &on_seen[name];
        assert_eq!((&call["is_error"], &call["code"]), (&json!(false), &Value::Null), "{name}: {call}");
        call
    };
    for name in ["write", "edit", "create"] {
        ok(name);
    }
    let original = "alpha\r\nbeta \r\ncafé".as_bytes();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(on_seen["written"], json!(hex(original)));

    let made = ok("checkpoint");
    let point = made["meta"]["checkpoint"].as_u64().expect("the checkpoint's id");
    assert_eq!(made["text"], json!(format!("checkpoint {point} \"before the edit\"")));

    let notes = d.path("notes.txt").display().to_string();
    let new = d.path("new.txt").display().to_string();
    let listing = ok("changes");
    let diff = format!(
        "--- a{notes}\n+++ b{notes}\n@@ -1,3 +1,3 @@\n alpha\r\n-beta \r\n+BETA \r\n café\n\\ No newline at end of file\n"
    );
    let files = &listing["meta"]["files"];
    assert_eq!(
        (&files[0]["path"], &files[0]["diff"], &files[1]["path"], &files[1]["existed"], &files[1]["exists"]),
        (&json!(notes), &json!(diff), &json!(new), &json!(false), &json!(true)),
        "{listing}"
    );
    let text = listing["text"].as_str().unwrap();
    assert!(text.starts_with(&format!("2 changes after point {point}:\n")), "{text}");
    assert!(
        text.contains(&format!("\n\n{notes} (changed by uid:0)\n{diff}\n{new} (created by uid:0)\n")),
        "{text}"
    );
    assert!(text.ends_with("@@ -0,0 +1 @@\n+fresh"), "{text}");

    assert_eq!(
        (&on_seen["bad_since"]["code"], &on_seen["bad_since"]["text"]),
        (&json!("INVALID_ARGS"), &json!("Error: since must be a checkpoint's id (a non-negative integer)"))
    );

    let rewound = ok("rewind");
    let change = rewound["meta"]["change"].as_u64().expect("the rewind's change");
    assert_eq!(
        rewound["text"],
        json!(format!(
            "Rewound to point {point}: 2 files restored as one change (#{change}; rewind it to undo this).\n  restored {notes}\n  restored {new}"
        ))
    );
    assert_eq!(
        (&rewound["meta"]["conflicts"], &rewound["meta"]["replaced"], &rewound["meta"]["unrestorable"]),
        (&json!([]), &json!([]), &json!([]))
    );

    // Back byte for byte, the created file gone; the rewind is itself the last change listed.
    assert_eq!(on_seen["rewound"], json!(hex(original)));
    assert_eq!(d.read("notes.txt"), original);
    assert_eq!(on_seen["new_exists"], json!(false));
    assert!(!d.path("new.txt").exists());
    let after = ok("changes_after");
    let last = after["meta"]["changes"].as_array().unwrap().last().cloned().unwrap_or_default();
    assert_eq!((&last["seq"], &last["operation"]), (&json!(change), &json!("rewind")), "{after}");
    for file in after["meta"]["files"].as_array().unwrap() {
        assert_eq!(file["diff"], json!(""), "{after}");
    }
}
