//! Transactions (`fsd.v1` Transact, docs/transactions.md) against the real daemon: a mix of
//! operations commits whole; a failing one changes nothing and says which operation failed and
//! how many were undone; bounds are refused up front; a worker that dies mid-commit is rolled back
//! before its targets unlock; a daemon killed mid-commit is rolled back at its next start, which
//! logs it; and the crash run (short form of `fsd-txn-crash`; `FSD_TXN_CRASH_SECS` for longer).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::v1::{self, transact_operation::Kind};
use fsd_proto::{ErrorCode, WireError};

fn write(path: &Path, content: &str) -> v1::TransactOperation {
    let request = v1::WriteTextRequest { path: p(path), content: content.to_owned(), ..Default::default() };
    v1::TransactOperation { kind: Some(Kind::Write(request)) }
}

fn edit(path: &Path, old: &str, new: &str, version: Option<String>) -> v1::TransactOperation {
    let request = v1::EditTextRequest {
        path: p(path),
        old_string: old.to_owned(),
        new_string: new.to_owned(),
        guard: version.map(|version| v1::EditGuard { version, target_key: String::new() }),
        ..Default::default()
    };
    v1::TransactOperation { kind: Some(Kind::Edit(request)) }
}

fn delete(path: &Path) -> v1::TransactOperation {
    v1::TransactOperation {
        kind: Some(Kind::Delete(v1::DeleteFileRequest { path: p(path), ..Default::default() })),
    }
}

fn moved(from: &Path, to: &Path) -> v1::TransactOperation {
    let request = v1::MoveFileRequest { source: p(from), destination: p(to), ..Default::default() };
    v1::TransactOperation { kind: Some(Kind::Move(request)) }
}

/// One apply_patch hunk: its `@@` context, old lines, new lines.
fn hunk(context: Option<&str>, old: &[&str], new: &[&str]) -> v1::PatchHunk {
    v1::PatchHunk {
        context: context.map(str::to_owned),
        old_lines: old.iter().map(|l| (*l).to_owned()).collect(),
        new_lines: new.iter().map(|l| (*l).to_owned()).collect(),
        end_of_file: false,
    }
}

fn patch(path: &Path, hunks: Vec<v1::PatchHunk>, version: Option<String>) -> v1::TransactOperation {
    let request = v1::PatchTextRequest {
        path: p(path),
        hunks,
        guard: version.map(|version| v1::EditGuard { version, target_key: String::new() }),
    };
    v1::TransactOperation { kind: Some(Kind::Patch(request)) }
}

fn transact(rpc: &mut Rpc, operations: Vec<v1::TransactOperation>) -> Result<v1::TransactReply, WireError> {
    let request = v1::TransactRequest { context: None, operations };
    rpc.rt
        .block_on(rpc.client.transact(request))
        .map(tonic::Response::into_inner)
        .map_err(|status| WireError::from_status(&status).expect("an fsd error"))
}

/// Every file below the root and its content.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A daemon with a state directory (outside its root), which it outlives.
fn daemon_with_state() -> (Daemon, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&[], &format!("state_dir = \"{}\"\n", state.path().display()));
    (d, state)
}

#[test]
fn a_mix_of_operations_commits_whole_and_answers_each() {
    let (d, _state) = daemon_with_state();
    d.write("a.txt", "alpha\n");
    d.write("b.txt", "beta\n");
    d.write("gone.txt", "gone\n");
    d.write("from.txt", "moved\n");
    let mut rpc = Rpc::connect(&d);
    let version = rpc.version(&d.path("b.txt"));
    let reply = transact(
        &mut rpc,
        vec![
            write(&d.path("a.txt"), "ALPHA\n"),
            edit(&d.path("b.txt"), "beta", "BETA", Some(version)),
            delete(&d.path("gone.txt")),
            moved(&d.path("from.txt"), &d.path("sub/to.txt")),
            write(&d.path("new.txt"), "new\n"),
        ],
    )
    .expect("commits");
    let kinds: Vec<&str> = reply
        .results
        .iter()
        .map(|r| match r.kind.as_ref().expect("a kind") {
            v1::transact_result::Kind::Write(_) => "write",
            v1::transact_result::Kind::Edit(_) => "edit",
            v1::transact_result::Kind::Delete(_) => "delete",
            v1::transact_result::Kind::Move(_) => "move",
            v1::transact_result::Kind::Patch(_) => "patch",
        })
        .collect();
    assert_eq!(kinds, ["write", "edit", "delete", "move", "write"]);
    let expected: Vec<(String, Vec<u8>)> =
        [("a.txt", "ALPHA\n"), ("b.txt", "BETA\n"), ("new.txt", "new\n"), ("sub/to.txt", "moved\n")]
            .iter()
            .map(|(n, c)| ((*n).to_owned(), c.as_bytes().to_vec()))
            .collect();
    assert_eq!(tree(&d.root), expected);
    // Each reply's version is the file's: a guarded edit with it goes through.
    let v1::transact_result::Kind::Write(a) = reply.results[0].kind.clone().unwrap() else { unreachable!() };
    assert!(
        rpc.edit_text(
            &d.path("a.txt"),
            "ALPHA",
            "alpha",
            Some(v1::EditGuard { version: a.version, target_key: String::new() })
        )
        .is_ok()
    );
}

/// The same transactions whose check or commit fails: nothing changes, and the error names the
/// failing operation and how many committed operations before it were undone.
#[test]
fn a_failing_transaction_changes_nothing_and_names_its_operation() {
    let (d, _state) = daemon_with_state();
    d.write("a.txt", "alpha\n");
    d.write("b.txt", "beta\n");
    d.write("c.txt", "gamma\n");
    let before = tree(&d.root);
    let mut rpc = Rpc::connect(&d);
    let stale = Some("1:1".to_owned());
    let fault = d.path("fsd-fault-txn-fail-3");
    let cases: Vec<(Vec<v1::TransactOperation>, ErrorCode, &str, &str)> = vec![
        // Refused at its check: nothing was committed.
        (
            vec![
                write(&d.path("a.txt"), "A"),
                delete(&d.path("b.txt")),
                edit(&d.path("c.txt"), "gamma", "G", stale),
            ],
            ErrorCode::StaleVersion,
            "2",
            "0",
        ),
        (
            vec![write(&d.path("a.txt"), "A"), edit(&d.path("c.txt"), "none", "x", None)],
            ErrorCode::EditNotFound,
            "1",
            "0",
        ),
        (
            vec![write(&d.path("a.txt"), "A"), write(&d.path("a.txt"), "again")],
            ErrorCode::SandboxDenied,
            "1",
            "0",
        ),
        // The third commit step fails: the two before it are undone.
        (
            vec![write(&d.path("a.txt"), "A"), delete(&d.path("b.txt")), write(&fault, "")],
            ErrorCode::IoError,
            "2",
            "2",
        ),
    ];
    for (ops, code, operation, undone) in cases {
        let failure = transact(&mut rpc, ops).expect_err("fails");
        assert_eq!(failure.code, code, "{failure:?}");
        assert_eq!(failure.metadata.get("operation").map(String::as_str), Some(operation), "{failure:?}");
        assert_eq!(failure.metadata.get("undone").map(String::as_str), Some(undone), "{failure:?}");
        assert_eq!(tree(&d.root), before, "{failure:?}");
    }
}

/// Commits `ops` on another thread while an outside writer changes `path` in a test hook's
/// pauses: each of `changes` after its wait (ms, from the previous one). The transaction's error.
fn transact_while_changed(
    d: &Daemon,
    ops: Vec<v1::TransactOperation>,
    path: &Path,
    changes: &[(u64, &[common::Outside])],
) -> WireError {
    let mut rpc = Rpc::connect(d);
    let committing = std::thread::spawn(move || transact(&mut rpc, ops));
    for (wait, outside) in changes {
        std::thread::sleep(Duration::from_millis(*wait));
        outside.iter().for_each(|change| change.run(path));
    }
    committing.join().unwrap().expect_err("the transaction fails")
}

/// The files beside `path` (nothing else in the root) hold `kept`, each at a name
/// `<name>.kept-…`.
fn check_kept_beside(d: &Daemon, path: &Path, kept: &[&str], case: &str) -> Vec<String> {
    let (beside, contents) = common::beside(&d.root, path);
    assert_eq!(contents, kept, "{case}: the files beside the name: {beside:?}");
    let prefix = format!("{}.kept-", path.file_name().unwrap().to_str().unwrap());
    let names: Vec<String> =
        beside.iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_owned()).collect();
    for name in &names {
        assert!(name.starts_with(&prefix), "{case}: {name}");
    }
    names
}

/// A transaction rolled back while outside changes come: its first step replaces
/// `fsd-fault-pause-exchange` (the hook pauses a second before that exchange and one after),
/// its second fails, and the undo of the first pauses a third second once its exchange put the
/// replaced file back. A writer changes the name in the second pause (over or into the
/// transaction's file) and in the third (over or into the file the undo put back). The newest
/// change must end at the name; the transaction's own file goes, the file it replaced goes when
/// a change the undo found superseded it (as it would had the change come before the undo), and
/// any other change the undo took from the name is kept beside it. The undo used to look at the
/// name and then exchange: a change made in between was taken out with the transaction's file
/// and removed with the temporary name.
#[test]
fn the_newest_change_made_while_a_transaction_is_rolled_back_stays_at_the_name() {
    use common::Outside::{self, Save, Write};
    struct Case {
        second: &'static [Outside],
        third: &'static [Outside],
        at_name: &'static str,
        kept: &'static [&'static str],
    }
    let cases = [
        Case { second: &[], third: &[Save("saved outside\n")], at_name: "saved outside\n", kept: &[] },
        Case { second: &[], third: &[Write("written\n")], at_name: "written\n", kept: &[] },
        Case {
            second: &[Write("bravo\n")],
            third: &[Save("newest save\n")],
            at_name: "newest save\n",
            kept: &["bravo\n"],
        },
    ];
    for Case { second, third, at_name, kept } in cases {
        let (d, _state) = daemon_with_state();
        d.write("fsd-fault-pause-exchange", "observed\n");
        let path = d.path("fsd-fault-pause-exchange");
        let ops = vec![write(&path, "mine\n"), write(&d.path("fsd-fault-txn-fail-2"), "")];
        // Into the second pause (the transaction's file is at the name), then the third (the
        // undo's exchange has put the replaced file back).
        let failure = transact_while_changed(&d, ops, &path, &[(1500, second), (1000, third)]);
        let case = format!("{second:?} then {third:?}");
        assert_eq!(failure.code, ErrorCode::IoError, "{case}: {failure:?}");
        let now = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(now, at_name, "{case}: the newest change is not at the name");
        check_kept_beside(&d, &path, kept, &case);
    }
}

/// A transaction rolled back while outside changes come to a file it created or moved: its
/// first step creates `fsd-fault-pause-remove` (or moves `a.txt` there), its second fails, and
/// the undo of the first takes the file out as a checked removal does (the hook pauses a second
/// before the file is renamed to the temporary name, or back to `a.txt`, and one after). A save
/// renamed over the name, or a write into the file there, in the first pause must end at the
/// name; a save that takes the name again in the second pause ends there, and the one the undo
/// moved is kept beside it. The undo used to look at the name and then rename it away: a save
/// made in between went with the transaction's file, to the temporary name out of sight, or to
/// `a.txt` in place of the file the transaction had moved.
#[test]
fn a_change_made_to_a_created_or_moved_file_while_its_transaction_is_rolled_back_is_not_taken_out() {
    use common::Outside::{self, Save, Write};
    struct Case {
        first: &'static [Outside],
        second: &'static [Outside],
        at_name: Option<&'static str>,
        kept: &'static [&'static str],
    }
    let cases = [
        Case { first: &[], second: &[], at_name: None, kept: &[] },
        Case { first: &[Save("saved outside\n")], second: &[], at_name: Some("saved outside\n"), kept: &[] },
        Case { first: &[Write("written\n")], second: &[], at_name: Some("written\n"), kept: &[] },
        Case {
            first: &[Save("first save\n")],
            second: &[Save("second save\n")],
            at_name: Some("second save\n"),
            kept: &["first save\n"],
        },
    ];
    for moving in [false, true] {
        for Case { first, second, at_name, kept } in &cases {
            let (d, _state) = daemon_with_state();
            let path = d.path("fsd-fault-pause-remove");
            let source = d.path("a.txt");
            let step = if moving {
                d.write("a.txt", "mine\n");
                moved(&source, &path)
            } else {
                write(&path, "mine\n")
            };
            let ops = vec![step, write(&d.path("fsd-fault-txn-fail-2"), "")];
            // Into the first pause (the transaction's file is at the name, looked at), then the
            // second (what was at the name is at the temporary name, or `a.txt`).
            let failure = transact_while_changed(&d, ops, &path, &[(500, first), (1000, second)]);
            let case = format!("moving: {moving}, {first:?} then {second:?}");
            assert_eq!(failure.code, ErrorCode::IoError, "{case}: {failure:?}");
            let read = |p: &Path| std::fs::read(p).ok().map(|b| String::from_utf8(b).unwrap());
            assert_eq!(read(&path).as_deref(), *at_name, "{case}: what the name holds");
            // The moved file is back at its source only when nothing came to its destination.
            let restored = (moving && at_name.is_none()).then_some("mine\n");
            assert_eq!(read(&source).as_deref(), restored, "{case}: what the source holds");
            let _ = std::fs::remove_file(&source);
            check_kept_beside(&d, &path, kept, &case);
        }
    }
}

/// A transaction's move that met an outside save is undone while more outside saves come: the
/// hook pauses a second before the move to `fsd-fault-pause-move` (a save over the source
/// there is what moves), then a second after the step found the save at the destination, and
/// one after it renamed it back. A save that takes the destination in the first of those must
/// end there, not at the source; one that takes it again in the second ends there, and the
/// undo's is kept beside it. The undo used to rename the destination back blind: a save made
/// there after the look went to the source's name instead.
#[test]
fn a_save_made_while_a_transaction_undoes_a_move_stays_at_the_destination() {
    use common::Outside::{self, Save};
    struct Case {
        first: &'static [Outside],
        second: &'static [Outside],
        at_destination: Option<&'static str>,
        at_source: Option<&'static str>,
        kept: &'static [&'static str],
    }
    let cases = [
        Case {
            first: &[],
            second: &[],
            at_destination: None,
            at_source: Some("saved at the source\n"),
            kept: &[],
        },
        Case {
            first: &[Save("saved at the destination\n")],
            second: &[],
            at_destination: Some("saved at the destination\n"),
            at_source: None,
            kept: &[],
        },
        Case {
            first: &[Save("saved at the destination\n")],
            second: &[Save("saved again\n")],
            at_destination: Some("saved again\n"),
            at_source: None,
            kept: &["saved at the destination\n"],
        },
    ];
    for Case { first, second, at_destination, at_source, kept } in cases {
        let (d, _state) = daemon_with_state();
        d.write("a.txt", "mine\n");
        let (source, destination) = (d.path("a.txt"), d.path("fsd-fault-pause-move"));
        let ops = vec![moved(&source, &destination)];
        let saver = {
            let source = source.clone();
            std::thread::spawn(move || {
                // Into the pause before the move: a save over the source is what moves.
                std::thread::sleep(Duration::from_millis(500));
                common::save_over(&source, "saved at the source\n");
            })
        };
        // Into the undo's first pause (the save is at the destination, looked at), then its
        // second (what was at the destination is at the source's name).
        let failure = transact_while_changed(&d, ops, &destination, &[(1500, first), (1000, second)]);
        saver.join().unwrap();
        let case = format!("{first:?} then {second:?}");
        assert_eq!(failure.code, ErrorCode::StaleVersion, "{case}: {failure:?}");
        let read = |p: &Path| std::fs::read(p).ok().map(|b| String::from_utf8(b).unwrap());
        assert_eq!(read(&destination).as_deref(), at_destination, "{case}: what the destination holds");
        assert_eq!(read(&source).as_deref(), at_source, "{case}: what the source holds");
        let _ = std::fs::remove_file(&source);
        for name in check_kept_beside(&d, &destination, kept, &case) {
            let named = failure.get("kept").is_some_and(|k| k.ends_with(&name));
            assert!(named, "{case}: the reply names it: {failure:?}");
        }
    }
}

/// A patch's hunks, applied by the daemon to the file's current text, commit with a write; a
/// patch whose hunk does not match (or whose guard is stale) changes nothing, and the error
/// names the operation, what the hunk missed and which hunk it was.
#[test]
fn a_patch_commits_with_another_operation_or_nothing_does() {
    let (d, _state) = daemon_with_state();
    d.write("a.txt", "one\r\ntwo\r\nthree\r\n");
    d.write("b.txt", "beta\n");
    let mut rpc = Rpc::connect(&d);
    let version = rpc.version(&d.path("a.txt"));
    let before = tree(&d.root);

    type Case = (Vec<v1::TransactOperation>, ErrorCode, &'static str, &'static str, Option<&'static str>);
    let cases: Vec<Case> = vec![
        (
            vec![
                write(&d.path("b.txt"), "B\n"),
                patch(
                    &d.path("a.txt"),
                    vec![hunk(None, &["one"], &["1"]), hunk(None, &["four"], &["4"])],
                    None,
                ),
            ],
            ErrorCode::EditNotFound,
            "1",
            "hunk_lines",
            Some("1"),
        ),
        (
            vec![
                patch(&d.path("a.txt"), vec![hunk(Some("zero"), &["two"], &["2"])], None),
                write(&d.path("b.txt"), "B\n"),
            ],
            ErrorCode::EditNotFound,
            "0",
            "hunk_context",
            Some("0"),
        ),
        // The guard is checked before any hunk: a stale patch says stale, not "no match".
        (
            vec![
                write(&d.path("b.txt"), "B\n"),
                patch(&d.path("a.txt"), vec![hunk(None, &["four"], &["4"])], Some("1:1".to_owned())),
            ],
            ErrorCode::StaleVersion,
            "1",
            "changed",
            None,
        ),
    ];
    for (ops, code, operation, reason, hunk_index) in cases {
        let failure = transact(&mut rpc, ops).expect_err("fails");
        assert_eq!(failure.code, code, "{failure:?}");
        let get = |key: &str| failure.metadata.get(key).map(String::as_str);
        assert_eq!(get("operation"), Some(operation), "{failure:?}");
        assert_eq!(get("undone"), Some("0"), "{failure:?}");
        assert_eq!(get("reason"), Some(reason), "{failure:?}");
        assert_eq!(get("hunk_index"), hunk_index, "{failure:?}");
        assert_eq!(tree(&d.root), before, "{failure:?}");
    }

    let reply = transact(
        &mut rpc,
        vec![
            patch(
                &d.path("a.txt"),
                vec![hunk(Some("one"), &["two"], &["TWO", "two and a half"]), hunk(None, &[], &["four"])],
                Some(version),
            ),
            write(&d.path("b.txt"), "BETA\n"),
        ],
    )
    .expect("commits");
    let [patched, written] = &reply.results[..] else { panic!("{reply:?}") };
    let Some(v1::transact_result::Kind::Patch(patched)) = &patched.kind else { panic!("{reply:?}") };
    assert!(matches!(written.kind, Some(v1::transact_result::Kind::Write(_))), "{reply:?}");
    assert_eq!(patched.hunks, 2);
    let change = patched.change.as_ref().expect("a change");
    assert_eq!(change.before.as_deref(), Some("one\r\ntwo\r\nthree\r\n"));
    assert_eq!(change.after.as_deref(), Some("one\r\nTWO\r\ntwo and a half\r\nthree\r\nfour\r\n"));
    let expected: Vec<(String, Vec<u8>)> =
        [("a.txt", "one\r\nTWO\r\ntwo and a half\r\nthree\r\nfour\r\n"), ("b.txt", "BETA\n")]
            .iter()
            .map(|(n, c)| ((*n).to_owned(), c.as_bytes().to_vec()))
            .collect();
    assert_eq!(tree(&d.root), expected);
    // The reply's version is the file's: a guarded edit with it goes through.
    let guard = v1::EditGuard { version: patched.version.clone(), target_key: String::new() };
    assert!(rpc.edit_text(&d.path("a.txt"), "four", "4", Some(guard)).is_ok());
}

#[test]
fn bounds_are_refused_up_front_and_a_daemon_without_state_dir_refuses_transactions() {
    let state = tempfile::tempdir().unwrap();
    let body = format!(
        "state_dir = \"{}\"\nmax_transaction_operations = 2\nmax_transaction_bytes = 8\n",
        state.path().display()
    );
    let d = Daemon::start_with(&[], &body);
    let mut rpc = Rpc::connect(&d);
    let three = vec![write(&d.path("a"), ""), write(&d.path("b"), ""), write(&d.path("c"), "")];
    let too_many = transact(&mut rpc, three).expect_err("too many");
    assert_eq!(too_many.code, ErrorCode::TooLarge);
    assert_eq!(
        (too_many.metadata.get("size").unwrap().as_str(), too_many.metadata.get("limit").unwrap().as_str()),
        ("3", "2")
    );
    let too_big = transact(&mut rpc, vec![write(&d.path("a"), "12345"), write(&d.path("b"), "6789")])
        .expect_err("too big");
    assert_eq!(too_big.code, ErrorCode::TooLarge);
    assert_eq!(
        (too_big.metadata.get("size").unwrap().as_str(), too_big.metadata.get("limit").unwrap().as_str()),
        ("9", "8")
    );
    assert!(tree(&d.root).is_empty());

    // Refused for its size before any budget is drawn: with a call burst of 3, four operations
    // over a limit of 3 are too large (not rate limited), and the budget is left whole.
    let body = format!(
        "state_dir = \"{}\"\nmax_transaction_operations = 3\n[budgets]\ncalls_per_second = 0.01\ncall_burst = 3\n",
        state.path().display()
    );
    let small = Daemon::start_with(&[], &body);
    let mut rpc = Rpc::connect(&small);
    let four = ["a", "b", "c", "d"].map(|n| write(&small.path(n), "x")).to_vec();
    let too_many = transact(&mut rpc, four).expect_err("too many");
    assert_eq!(
        (
            too_many.code,
            too_many.metadata.get("size").map(String::as_str),
            too_many.metadata.get("limit").map(String::as_str)
        ),
        (ErrorCode::TooLarge, Some("4"), Some("3"))
    );
    let three = ["a", "b", "c"].map(|n| write(&small.path(n), "x")).to_vec();
    transact(&mut rpc, three).expect("three operations within the whole budget");

    let plain = Daemon::start();
    let mut rpc = Rpc::connect(&plain);
    let refused = transact(&mut rpc, vec![write(&plain.path("a"), "a")]).expect_err("no state_dir");
    assert_eq!(refused.code, ErrorCode::SandboxDenied);
    assert_eq!(refused.metadata.get("reason").map(String::as_str), Some("no_state_dir"));
    assert!(tree(&plain.root).is_empty());
}

/// A worker that exits after the second of four commit steps, while the daemon lives: the next
/// change to one of its targets waits until the supervisor rolled it back, so it finds the file
/// as it was (its guard, the version before the transaction, holds), and nothing is left.
#[test]
fn a_worker_dying_mid_commit_is_rolled_back_before_its_targets_unlock() {
    let (d, state) = daemon_with_state();
    d.write("a.txt", "alpha\n");
    d.write("b.txt", "beta\n");
    let mut rpc = Rpc::connect(&d);
    let before = tree(&d.root);
    // A version taken with the content: the rollback brings back the same bytes (and inode), but
    // its renames change the inode's ctime, which a metadata-only version would call stale.
    let version = rpc.read_text(&d.path("a.txt"), 1 << 20).unwrap().version;
    let cut = transact(
        &mut rpc,
        vec![
            write(&d.path("a.txt"), "A\n"),
            delete(&d.path("b.txt")),
            write(&d.path("c.txt"), "C\n"),
            // The supervisor recovers this one a second late: the edit below comes first.
            write(&d.path("fsd-fault-txn-slow-recovery"), ""),
            write(&d.path("fsd-fault-txn-die-2"), ""),
        ],
    )
    .expect_err("its worker died");
    assert_eq!(cut.code, ErrorCode::Aborted, "{cut:?}");
    let edited = rpc.edit_text(
        &d.path("a.txt"),
        "alpha",
        "ALPHA",
        Some(v1::EditGuard { version, target_key: String::new() }),
    );
    assert!(edited.is_ok(), "{edited:?}");
    let mut expected = before;
    expected[0].1 = b"ALPHA\n".to_vec();
    assert_eq!(tree(&d.root), expected);
    assert_eq!(std::fs::read_dir(state.path().join("txn")).unwrap().count(), 0);
}

/// The whole daemon killed in the middle of a commit: its next start rolls the transaction back
/// before it serves, and logs it.
#[test]
fn a_daemon_killed_mid_commit_rolls_back_at_its_next_start() {
    use fsd_soak::daemon::{Bins, Daemon as Soaked, Options};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(root.join("b.txt"), "beta\n").unwrap();
    let before = tree(&root);
    let log = dir.path().join("fsd.log");
    let options = Options {
        root: root.clone(),
        socket: dir.path().join("fsd.sock"),
        config: format!("state_dir = \"{}\"\n", dir.path().join("state").display()),
        log: Some(log.clone()),
    };
    let bins = Bins::locate().expect("fsd and fsd-tools are built");
    let mut daemon = Soaked::start(&bins, &options).unwrap();
    let endpoint = daemon.endpoint();
    let ops = vec![
        write(&root.join("a.txt"), "A\n"),
        delete(&root.join("b.txt")),
        write(&root.join("c.txt"), "C\n"),
        write(&root.join("fsd-fault-txn-pause-2"), ""),
    ];
    let call = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (mut client, _) = rt.block_on(fsd_tool_client::connect::connect(&endpoint)).unwrap();
        rt.block_on(client.transact(v1::TransactRequest { context: None, operations: ops })).is_ok()
    });
    // The commit pauses a second after its second step.
    std::thread::sleep(Duration::from_millis(500));
    assert_ne!(tree(&root), before, "the first steps are visible in the pause");
    daemon.kill_tree().unwrap();
    assert!(!call.join().unwrap(), "the transaction was cut");
    drop(daemon);
    let mut daemon = Soaked::start(&bins, &options).unwrap();
    assert_eq!(tree(&root), before);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("transaction recovery done") && logged.contains("rolled_back=1"), "{logged}");
    daemon.terminate().unwrap();
}

#[test]
fn transactions_cut_by_kills_are_never_torn_and_lose_no_outside_save() {
    use fsd_soak::daemon::Bins;
    use fsd_soak::txn_crash::{self, TxnCrashOptions};
    let secs = std::env::var("FSD_TXN_CRASH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let bins = Bins::locate().expect("fsd and fsd-tools are built");
    let options = TxnCrashOptions { duration: Duration::from_secs(secs), ..TxnCrashOptions::default() };
    let report = txn_crash::run(&bins, &options).expect("the run ran");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}\n{}", report.violations.join("\n"));
    assert_eq!((report.torn, report.lost_outside_saves), (0, 0), "{report}");
    assert!(report.step_exits > 0 && report.tree_kills > 0 && report.worker_kills > 0, "{report}");
    assert!(report.committed > 0 && report.rolled_back > 0 && report.outside_saves > 0, "{report}");
}
