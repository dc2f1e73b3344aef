//! Content-aware versions through the real daemon and tools: after a read, a `touch`, a same-bytes
//! rewrite, a copy-and-rename or a `git checkout` of the same content is not stale, so the next
//! write, edit, apply_patch or editor call succeeds; a real change is refused and kept; and a
//! same-content rewriter racing a real change never makes fsd lose the real change.

use crate::common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::rpc::Rpc;
use common::*;
use fsd_proto::version;
use serde_json::json;

/// A change of the file's metadata but not of its bytes, as outside tools make them.
#[derive(Debug, Clone, Copy)]
enum SameBytes {
    /// `touch`: a new mtime (and so ctime) on the same inode.
    Touch,
    /// A formatter or editor saving unchanged text in place.
    Rewrite,
    /// A save by copy and rename: a new inode with the same bytes.
    CopyRename,
    /// `git checkout -- f` after an outside edit: the committed blob is what was read.
    GitCheckout,
}

const ALL: [SameBytes; 4] =
    [SameBytes::Touch, SameBytes::Rewrite, SameBytes::CopyRename, SameBytes::GitCheckout];

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is needed for the checkout case and is not installed");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Prepares `rel` with `content` (in a git repository for the checkout case).
fn prepare(d: &Daemon, how: SameBytes, rel: &str, content: &str) {
    d.write(rel, content);
    if let SameBytes::GitCheckout = how {
        git(&d.root, &["init", "-q"]);
    }
}

/// Changes `rel`'s metadata, never its bytes, and proves the metadata did change.
fn disturb(d: &Daemon, how: SameBytes, rel: &str) {
    let path = d.path(rel);
    let before = std::fs::metadata(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // Timestamps must move even on a coarse clock.
    std::thread::sleep(Duration::from_millis(20));
    match how {
        SameBytes::Touch => {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_modified(SystemTime::now()).unwrap();
        }
        SameBytes::Rewrite => std::fs::write(&path, &bytes).unwrap(),
        SameBytes::CopyRename => {
            let tmp = path.with_extension("swp");
            std::fs::write(&tmp, &bytes).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        SameBytes::GitCheckout => {
            git(&d.root, &["add", rel]);
            git(&d.root, &["commit", "-q", "--allow-empty", "-m", "what was read"]);
            std::fs::write(&path, b"someone else's edit\n").unwrap();
            git(&d.root, &["checkout", "--", rel]);
        }
    }
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "{how:?} changed the bytes");
    use std::os::unix::fs::MetadataExt;
    assert!(
        (before.ino(), before.mtime_nsec(), before.ctime_nsec())
            != (after.ino(), after.mtime_nsec(), after.ctime_nsec()),
        "{how:?} left the metadata as it was"
    );
}

fn stale_text(path: &Path) -> String {
    format!(
        "Error: cannot modify \"{}\": file changed on disk since it was read — re-read the file, then retry",
        path.display()
    )
}

#[test]
fn same_bytes_after_a_read_are_not_stale_for_any_mutating_tool() {
    let d = Daemon::start();
    let mut s = d.session_with_config("applyPatch = true\nstrReplaceEditor = true\n");
    for how in ALL {
        let rel = format!("{how:?}.txt").to_lowercase();
        let p = d.path(&rel);
        prepare(&d, how, &rel, "alpha\nbeta\n");

        // edit
        assert!(!s.read(&rel).is_error());
        disturb(&d, how, &rel);
        let r = s.call("edit", json!({"file_path": rel, "old_string": "alpha", "new_string": "one"}));
        ok(&r, &format!("The file {} has been updated successfully.", p.display()));
        assert_eq!(d.read(&rel), b"one\nbeta\n", "{how:?}");

        // write, on the version the edit's reply carried (the daemon wrote those bytes)
        disturb(&d, how, &rel);
        let r = s.call("write", json!({"file_path": rel, "content": "two\nbeta\n"}));
        ok(&r, &write_envelope(&p, "Updated file"));
        assert_eq!(d.read(&rel), b"two\nbeta\n", "{how:?}");

        // apply_patch
        assert!(!s.read(&rel).is_error());
        disturb(&d, how, &rel);
        let patch =
            format!("*** Begin Patch\n*** Update File: {rel}\n@@\n-two\n+three\n beta\n*** End Patch");
        let r = s.call("apply_patch", json!({"input": patch}));
        ok(&r, &format!("Success. Updated the following files:\nM {rel}"));
        assert_eq!(d.read(&rel), b"three\nbeta\n", "{how:?}");

        // the editor's str_replace, after a view
        let view = s.call("str_replace_editor", json!({"command": "view", "path": p.display().to_string()}));
        assert!(!view.is_error(), "{}", view.json);
        disturb(&d, how, &rel);
        let r = s.call(
            "str_replace_editor",
            json!({"command": "str_replace", "path": p.display().to_string(), "old_str": "three", "new_str": "four"}),
        );
        assert!(!r.is_error(), "{how:?}: {}", r.json);
        assert_eq!(d.read(&rel), b"four\nbeta\n", "{how:?}");

        // an apply_patch deletion reads no text, yet the bytes still decide
        assert!(!s.read(&rel).is_error());
        disturb(&d, how, &rel);
        let r = s.call(
            "apply_patch",
            json!({"input": format!("*** Begin Patch\n*** Delete File: {rel}\n*** End Patch")}),
        );
        ok(&r, &format!("Success. Updated the following files:\nD {rel}"));
        assert!(!p.exists(), "{how:?}");
    }
}

#[test]
fn a_streamed_read_to_the_end_carries_the_digest() {
    let d = Daemon::start();
    // Every read streams: the file is over the (lowered) streaming threshold.
    let mut s = d.session_with_config("readStreamMinSize = 1\n");
    d.write("big.txt", "alpha\nbeta\n");
    assert!(!s.read("big.txt").is_error());
    disturb(&d, SameBytes::Touch, "big.txt");
    let r = s.call("edit", json!({"file_path": "big.txt", "old_string": "beta", "new_string": "gamma"}));
    ok(&r, &format!("The file {} has been updated successfully.", d.path("big.txt").display()));
    assert_eq!(d.read("big.txt"), b"alpha\ngamma\n");
}

/// One key for every process of a daemon: the workers that replace killed ones prove the
/// versions their predecessors gave (a process with a key of its own would call the file
/// changed after a `touch`).
#[test]
fn a_replaced_worker_proves_the_versions_its_predecessor_gave() {
    let d = Daemon::start();
    let mut s = d.session();
    d.write("a.txt", "alpha\nbeta\n");
    assert!(!s.read("a.txt").is_error());
    let modes = ["read-only", "workspace-write"];
    let killed = d.process.kill_workers(&modes);
    assert!(!killed.is_empty(), "no worker to kill");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !modes.iter().all(|mode| {
        let now = d.process.worker_pids(mode);
        !now.is_empty() && now.iter().all(|pid| !killed.contains(pid))
    }) {
        assert!(std::time::Instant::now() < deadline, "the killed workers {killed:?} were not replaced");
        std::thread::sleep(Duration::from_millis(20));
    }
    disturb(&d, SameBytes::Touch, "a.txt");
    let r = s.call("edit", json!({"file_path": "a.txt", "old_string": "beta", "new_string": "gamma"}));
    ok(&r, &format!("The file {} has been updated successfully.", d.path("a.txt").display()));
    assert_eq!(d.read("a.txt"), b"alpha\ngamma\n");
}

#[test]
fn a_real_change_is_refused_before_matching_and_kept() {
    let d = Daemon::start();
    let mut s = d.session_with_config("applyPatch = true\n");
    let p = d.path("a.txt");
    let outside = b"their change\n";
    d.write("a.txt", "alpha\n");

    assert!(!s.read("a.txt").is_error());
    d.write("a.txt", outside);
    // Stale, not "not found": the old string is gone, but the model has not seen why.
    let r = s.call("edit", json!({"file_path": "a.txt", "old_string": "alpha", "new_string": "one"}));
    err(&r, "FS_STALE_VERSION", &stale_text(&p));
    assert_eq!(d.read("a.txt"), outside);

    let r = s.call("write", json!({"file_path": "a.txt", "content": "mine\n"}));
    err(&r, "FS_STALE_VERSION", &stale_text(&p));
    assert_eq!(d.read("a.txt"), outside);

    let r = s.call("apply_patch", json!({"input": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch"}));
    assert!(r.is_error(), "{}", r.json);
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(d.read("a.txt"), outside);

    // Same length, same metadata-visible size: only the digest tells them apart.
    let mut rpc = Rpc::connect(&d);
    d.write("b.txt", "aaaa\n");
    let seen = rpc.read_text(&d.path("b.txt"), 0).unwrap().version;
    std::thread::sleep(Duration::from_millis(20));
    d.write("b.txt", "bbbb\n");
    let guard = Some(fsd_proto::v1::EditGuard { version: seen, ..Default::default() });
    let e = rpc.edit_text(&d.path("b.txt"), "bbbb", "cccc", guard).expect_err("a real change is stale");
    assert_eq!(common::rpc::wire(&e).code, fsd_proto::ErrorCode::StaleVersion);
    assert_eq!(d.read("b.txt"), b"bbbb\n");
}

#[test]
fn versions_name_their_content_only_when_the_daemon_had_all_of_it() {
    let d = Daemon::start();
    let mut rpc = Rpc::connect(&d);
    d.write("a.txt", "alpha\n");
    let p = d.path("a.txt");
    let stat = rpc.version(&p);
    let read = rpc.read_text(&p, 0).unwrap().version;
    assert_eq!(version::split(&stat).1, None, "a stat reads no bytes");
    assert!(version::split(&read).1.is_some(), "a whole read has a digest: {read}");
    assert_eq!(version::split(&read).0, stat, "and the same metadata part");
    assert!(version::same(&stat, &read));
}

/// One trial: the session has read `A`; an outside rewriter keeps saving `A` unchanged, another
/// outside writer saves `B` once (and the rewriter stops: outside writers order themselves); the
/// session edits `A` meanwhile. Whatever the interleaving, the file ends as `B`: an edit that
/// replaced `B` would have lost a real change.
#[test]
fn a_same_content_rewrite_racing_a_real_change_never_loses_it() {
    const A: &[u8] = b"alpha\n";
    const B: &[u8] = b"bravo\n";
    let d = Daemon::start();
    let mut s = d.session();
    let path = d.path("r.txt");
    let (mut won, mut stale) = (0, 0);
    for trial in 0..40u64 {
        d.write("r.txt", A);
        assert!(!s.read("r.txt").is_error());
        let changed = Arc::new(Mutex::new(false));
        let rewriter = {
            let (changed, path) = (changed.clone(), path.clone());
            std::thread::spawn(move || {
                let tmp = path.with_extension("tmp");
                for _ in 0..200 {
                    let done = changed.lock().unwrap();
                    if *done {
                        return;
                    }
                    std::fs::write(&tmp, A).unwrap();
                    std::fs::rename(&tmp, &path).unwrap();
                    drop(done);
                    std::thread::yield_now();
                }
            })
        };
        let changer = {
            let (changed, path) = (changed.clone(), path.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(200 * (trial % 10)));
                let mut done = changed.lock().unwrap();
                std::fs::write(&path, B).unwrap();
                *done = true;
            })
        };
        std::thread::sleep(Duration::from_micros(150 * (trial % 7)));
        let r = s.call("edit", json!({"file_path": "r.txt", "old_string": "alpha", "new_string": "mine"}));
        changer.join().unwrap();
        rewriter.join().unwrap();
        match r.code() {
            None => won += 1,
            Some("FS_STALE_VERSION") => stale += 1,
            other => panic!("trial {trial}: unexpected outcome {other:?}: {}", r.json),
        }
        assert_eq!(d.read("r.txt"), B, "trial {trial}: the real change was lost ({})", r.json);
    }
    eprintln!("{won} edits won the race, {stale} were stale");
    assert_eq!(won + stale, 40);
}

/// The interleaving the race above can hit, made certain by the test hook
/// `fsd-fault-pause-exchange` (a second's pause just before the replace's exchange and another
/// just after it): an editor saves over the name after the edit's check, so the edit swaps out a
/// file it did not check and must undo; meanwhile another writer writes in place into the file
/// at the name, which is the edit's own by then. That write is the newest change: it stays.
#[test]
fn an_outside_write_while_a_replace_is_undone_is_kept() {
    let d = Daemon::start();
    // In the first pause: an editor's save, the same bytes as a new file renamed over the name.
    let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "alpha\n");
    // In the second: a write in place into whatever is at the name.
    std::fs::write(&path, "bravo\n").unwrap();
    let r = edit.join().unwrap();
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read(&path).unwrap(), b"bravo\n", "the newest outside write was lost");
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["fsd-fault-pause-exchange"], "no temporary file is left");
}

/// The same interleaving, but in the second pause another save is renamed over the name, over the
/// edit's file (the race above met this in CI: the undo's exchange then swapped that newest save
/// out and removed it). The newest save stays at the name; the older one the undo had brought back
/// is kept beside it, and the stale reply names it.
#[test]
fn a_save_over_a_replace_being_undone_stays_at_the_name() {
    let d = Daemon::start();
    let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "older save\n");
    common::save_over(&path, "newest save\n");
    let r = edit.join().unwrap();
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read(&path).unwrap(), b"newest save\n", "the newest outside save was lost");
    let kept: Vec<_> =
        std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().path()).filter(|p| p != &path).collect();
    assert_eq!(kept.len(), 1, "one file beside the name, the older save: {kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), b"older save\n");
    let name = kept[0].file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("fsd-fault-pause-exchange.kept-"), "{name}");
    assert!(r.text().contains(name), "the reply names the kept save: {}", r.text());
}

/// The same interleaving again, one step further (the race above met this in CI too): in the
/// second pause a newer save is renamed over the edit's file, so the undo's exchange brings the
/// older save back to the name and takes the newer one out; in the third pause (after that
/// exchange) a writer writes in place into the file at the name, the older save's. That write is
/// the newest change: it stays at the name, and the newer save the undo took out is kept beside
/// it, which the stale reply names.
#[test]
fn a_write_into_the_save_an_undo_put_back_stays_at_the_name() {
    let d = Daemon::start();
    let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "older save\n");
    common::save_over(&path, "newer save\n");
    // Into the third pause: the undo's exchange has put the older save back at the name.
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::write(&path, "written in place\n").unwrap();
    let r = edit.join().unwrap();
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read(&path).unwrap(), b"written in place\n", "the newest write was lost");
    let kept: Vec<_> =
        std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().path()).filter(|p| p != &path).collect();
    assert_eq!(kept.len(), 1, "one file beside the name, the newer save: {kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), b"newer save\n");
    let name = kept[0].file_name().unwrap().to_str().unwrap();
    assert!(r.text().contains(name), "the reply names the kept save: {}", r.text());
}

/// The same interleaving, with outside changes in the second pause (after the edit's exchange)
/// and in the third (after the undo's first exchange): every change made while the undo runs is
/// newer than the file the undo was putting back, so the newest one must end at the name, and
/// each other file the undo moved is kept beside it, which the stale reply names. The second
/// case is the race above as it met CI under load: the same-content rewriter's save renamed over
/// the older save the undo had just put back, then the real change written into that save, were
/// taken out by the undo's next exchange and kept aside while an older save took the name.
#[test]
fn the_newest_change_made_during_an_undo_stays_at_the_name() {
    use common::Outside::{Save, Write};
    /// The outside changes in the second and the third pause, and what the name and the files
    /// kept beside it hold at the end.
    struct Case {
        second: &'static [Outside],
        third: &'static [Outside],
        at_name: &'static str,
        kept: &'static [&'static str],
    }
    let cases = [
        Case {
            second: &[Save("newer save\n")],
            third: &[Save("newest save\n")],
            at_name: "newest save\n",
            kept: &["newer save\n"],
        },
        Case {
            second: &[Save("newer save\n")],
            third: &[Save("alpha\n"), Write("bravo\n")],
            at_name: "bravo\n",
            kept: &["newer save\n"],
        },
        Case {
            second: &[Write("bravo\n")],
            third: &[Save("newest save\n")],
            at_name: "newest save\n",
            kept: &["bravo\n"],
        },
        Case {
            second: &[Save("newer save\n"), Write("bravo\n")],
            third: &[Save("newest save\n")],
            at_name: "newest save\n",
            kept: &["bravo\n"],
        },
    ];
    for Case { second, third, at_name, kept } in cases {
        let d = Daemon::start();
        let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "older save\n");
        second.iter().for_each(|change| change.run(&path));
        // Into the third pause: the undo's first exchange has put the older save back.
        std::thread::sleep(Duration::from_millis(1000));
        third.iter().for_each(|change| change.run(&path));
        let r = edit.join().unwrap();
        let case = format!("{second:?} then {third:?}");
        assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{case}: {}", r.json);
        let now = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(now, at_name, "{case}: the newest change is not at the name ({})", r.json);
        let (beside, contents) = common::beside(&d.root, &path);
        assert_eq!(contents, kept, "{case}: the files beside the name: {beside:?}");
        for p in &beside {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with("fsd-fault-pause-exchange.kept-"), "{case}: {name}");
            assert!(r.text().contains(name), "{case}: the reply names the kept file: {}", r.text());
        }
    }
}

/// The same interleaving, but the write into the edit's file at the name is an append (`>>`):
/// the appended bytes stay at the name, on the edit's content, since the appender's descriptor is
/// that file's; the editor's save the edit swapped out is not removed but kept at a visible name
/// beside it, which the stale reply names, so nothing an outside writer saved is lost.
#[test]
fn an_outside_append_while_a_replace_is_undone_loses_no_save() {
    let d = Daemon::start();
    let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "saved outside\n");
    let mut appender = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut appender, b"appended\n").unwrap();
    drop(appender);
    let r = edit.join().unwrap();
    assert_eq!(r.code(), Some("FS_STALE_VERSION"), "{}", r.json);
    assert_eq!(std::fs::read(&path).unwrap(), b"mine\nappended\n", "the appended bytes were lost");
    let others: Vec<_> =
        std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().path()).filter(|p| p != &path).collect();
    let [kept] = &others[..] else {
        panic!("the swapped-out save is not kept once: {others:?} ({})", r.json)
    };
    assert_eq!(std::fs::read(kept).unwrap(), b"saved outside\n");
    assert!(kept.file_name().unwrap().to_str().unwrap().starts_with("fsd-fault-pause-exchange.kept-"));
    let expected = format!(
        "Error: cannot modify \"{}\": file changed on disk while it was being written (the newest change was kept; an earlier change it replaced was kept as \"{}\") — re-read the file, then retry",
        path.display(),
        kept.display()
    );
    assert_eq!(r.text(), expected);
}

/// A worker killed while it undoes a replace, once the undo's exchange put the edit's file, which
/// an outside writer wrote into at the name, back at the temporary name (the hook's third
/// pause): the supervisor's sweep must not remove that file as the worker's own. The editor's
/// save stays at the name, and the newer outside write is kept beside it, visible.
#[test]
fn a_worker_killed_while_undoing_a_replace_loses_no_outside_write() {
    let d = Daemon::start();
    let (path, edit) = edit_saved_over_in_the_exchange_pause(&d, "saved outside\n");
    std::fs::write(&path, "bravo\n").unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    d.process.kill_workers(&["workspace-write"]);
    let r = edit.join().unwrap();
    assert!(r.is_error(), "the call of a killed worker succeeded: {}", r.json);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut contents: Vec<_> = std::fs::read_dir(&d.root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.file_name().unwrap().to_str().unwrap().to_owned(), std::fs::read(&p).unwrap()))
            .collect();
        contents.sort();
        let settled = contents.len() == 2
            && contents[0] == ("fsd-fault-pause-exchange".to_owned(), b"saved outside\n".to_vec())
            && contents[1].0.starts_with("fsd-fault-pause-exchange.kept-")
            && contents[1].1 == b"bravo\n";
        if settled {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "after the sweep: {contents:?} ({})", r.json);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The same hook on a move onto an observed destination: an editor saves over the destination
/// after the move's check of its version. The move must not rename its source over that save.
#[test]
fn an_outside_save_over_a_moves_destination_after_its_check_is_kept() {
    let d = Daemon::start();
    d.write("source.txt", "moved\n");
    d.write("fsd-fault-pause-exchange", "observed\n");
    let destination = d.path("fsd-fault-pause-exchange");
    let mut rpc = Rpc::connect(&d);
    let version = rpc.version(&destination);
    let request = fsd_proto::v1::MoveFileRequest {
        source: common::rpc::p(&d.path("source.txt")),
        destination: common::rpc::p(&destination),
        destination_guard: Some(fsd_proto::v1::WriteGuard {
            kind: Some(fsd_proto::v1::write_guard::Kind::ReplaceIfVersion(fsd_proto::v1::ReplaceIfVersion {
                version,
                ..Default::default()
            })),
        }),
        ..Default::default()
    };
    let moving = std::thread::spawn(move || rpc.rt.block_on(rpc.client.move_file(request)));
    // In the first pause, after the check: an editor's save, a new file renamed over the name.
    std::thread::sleep(Duration::from_millis(500));
    let tmp = destination.with_extension("save");
    std::fs::write(&tmp, "saved outside\n").unwrap();
    std::fs::rename(&tmp, &destination).unwrap();
    let status = moving.join().unwrap().unwrap_err();
    assert_eq!(common::rpc::wire(&status).code, fsd_proto::ErrorCode::StaleVersion, "{status:?}");
    assert_eq!(std::fs::read(&destination).unwrap(), b"saved outside\n", "the outside save was lost");
    assert_eq!(d.read("source.txt"), b"moved\n", "the source stays where it was");
    let mut names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["fsd-fault-pause-exchange", "source.txt"], "no temporary file is left");
}

/// A move onto an observed destination undone while outside changes come: an editor's save
/// over the destination in the hook's first pause (before the move's exchange) makes the move
/// stale; in the second (after the exchange, the moved file at the destination) and the third
/// (after the undo's first exchange, the older save back at the destination) a writer saves
/// over the destination or writes into the file there. Every such change is newer than the file
/// the undo was putting back: the newest one ends at the destination, and each other file the
/// undo moved is kept beside it, which the stale reply names. (A save renamed over the
/// destination while the moved file sat there replaced that file, as it would have after a
/// move: the source's name is then left empty.) One exchange back left the newest change at the
/// source's name and the older save at the destination.
#[test]
fn the_newest_change_made_during_a_moves_undo_stays_at_its_destination() {
    use common::Outside::{Save, Write};
    /// The outside changes in the second and the third pause, and what the destination and the
    /// files kept beside it hold at the end.
    struct Case {
        second: &'static [Outside],
        third: &'static [Outside],
        at_destination: &'static str,
        kept: &'static [&'static str],
    }
    let cases = [
        Case {
            second: &[Save("newer save\n")],
            third: &[],
            at_destination: "newer save\n",
            kept: &["older save\n"],
        },
        Case { second: &[Write("bravo\n")], third: &[], at_destination: "bravo\n", kept: &["older save\n"] },
        Case {
            second: &[Save("newer save\n")],
            third: &[Save("newest save\n")],
            at_destination: "newest save\n",
            kept: &["newer save\n"],
        },
    ];
    for Case { second, third, at_destination, kept } in cases {
        let d = Daemon::start();
        d.write("source.txt", "moved\n");
        d.write("fsd-fault-pause-exchange", "observed\n");
        let destination = d.path("fsd-fault-pause-exchange");
        let mut rpc = Rpc::connect(&d);
        let version = rpc.version(&destination);
        let request = fsd_proto::v1::MoveFileRequest {
            source: common::rpc::p(&d.path("source.txt")),
            destination: common::rpc::p(&destination),
            destination_guard: Some(fsd_proto::v1::WriteGuard {
                kind: Some(fsd_proto::v1::write_guard::Kind::ReplaceIfVersion(
                    fsd_proto::v1::ReplaceIfVersion { version, ..Default::default() },
                )),
            }),
            ..Default::default()
        };
        let moving = std::thread::spawn(move || rpc.rt.block_on(rpc.client.move_file(request)));
        std::thread::sleep(Duration::from_millis(500));
        common::save_over(&destination, "older save\n");
        // Into the second pause: the moved file is at the destination.
        std::thread::sleep(Duration::from_millis(1000));
        second.iter().for_each(|change| change.run(&destination));
        // Into the third: the undo's first exchange has put the older save back.
        std::thread::sleep(Duration::from_millis(1000));
        third.iter().for_each(|change| change.run(&destination));
        let status = moving.join().unwrap().unwrap_err();
        let case = format!("{second:?} then {third:?}");
        let wire = common::rpc::wire(&status);
        assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion, "{case}: {status:?}");
        let now = String::from_utf8(std::fs::read(&destination).unwrap()).unwrap();
        assert_eq!(now, at_destination, "{case}: the newest change is not at the destination");
        let (beside, contents) = common::beside(&d.root, &destination);
        assert_eq!(contents, kept, "{case}: the files beside the destination: {beside:?}");
        for p in &beside {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(name.starts_with("fsd-fault-pause-exchange.kept-"), "{case}: {name}");
            assert!(
                wire.get("kept").is_some_and(|k| k.ends_with(name)),
                "{case}: the reply names it: {status:?}"
            );
        }
    }
}

/// An editor's save over `path`: a new file renamed over the name.
/// An edit of `fsd-fault-pause-exchange` (`alpha` to `mine`, after a read) held by the test hook's
/// pauses, with an editor's save of `saved` over the name in the first pause (before the edit's
/// exchange); returns in the second (after it), with the edit still running.
fn edit_saved_over_in_the_exchange_pause(
    d: &Daemon,
    saved: &str,
) -> (std::path::PathBuf, std::thread::JoinHandle<Reply>) {
    let mut s = d.session();
    let path = d.path("fsd-fault-pause-exchange");
    d.write("fsd-fault-pause-exchange", "alpha\n");
    assert!(!s.read("fsd-fault-pause-exchange").is_error());
    let edit = std::thread::spawn(move || {
        s.call(
            "edit",
            json!({"file_path": "fsd-fault-pause-exchange", "old_string": "alpha", "new_string": "mine"}),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    common::save_over(&path, saved);
    std::thread::sleep(Duration::from_millis(1000));
    (path, edit)
}

/// Writes `fsd-fault-pause-remove`, takes its version and starts the removal `call` makes with
/// it on a thread of its own; returns half a second into the test hook's first pause.
fn start_guarded_removal<T: Send + 'static>(
    d: &Daemon,
    call: impl FnOnce(Rpc, String) -> T + Send + 'static,
) -> (std::path::PathBuf, std::thread::JoinHandle<T>) {
    let path = d.path("fsd-fault-pause-remove");
    d.write("fsd-fault-pause-remove", "observed\n");
    let mut rpc = Rpc::connect(d);
    let version = rpc.version(&path);
    let removing = std::thread::spawn(move || call(rpc, version));
    std::thread::sleep(Duration::from_millis(500));
    (path, removing)
}

/// A guarded delete of `path` through `rpc`, guarded by `version`.
fn guarded_delete(mut rpc: Rpc, path: &Path, version: String) -> Result<(), tonic::Status> {
    let request = fsd_proto::v1::DeleteFileRequest {
        path: common::rpc::p(path),
        guard: Some(fsd_proto::v1::EditGuard { version, ..Default::default() }),
        ..Default::default()
    };
    rpc.rt.block_on(rpc.client.delete_file(request)).map(drop)
}

/// A guarded removal through `rpc` of `path`, the request made by `call`, with an editor's save
/// over the name placed by the test hook `fsd-fault-pause-remove` (a second's pause after the
/// guard's check, before the removal moves the name aside, and another after): the save is kept
/// and the removal is stale.
fn outside_save_during_a_guarded_removal(
    d: &Daemon,
    call: impl FnOnce(Rpc, String) -> Result<(), tonic::Status> + Send + 'static,
) {
    let (path, removing) = start_guarded_removal(d, call);
    common::save_over(&path, "saved outside\n");
    let done = removing.join().unwrap();
    let kept = std::fs::read(&path).ok();
    assert_eq!(kept.as_deref(), Some(&b"saved outside\n"[..]), "the outside save was deleted ({done:?})");
    let status = done.unwrap_err();
    let wire = common::rpc::wire(&status);
    assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion, "{status:?}");
    assert_eq!(wire.get("reason"), Some("changed_while_removing"), "{status:?}");
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["fsd-fault-pause-remove"], "no temporary file is left");
}

#[test]
fn an_outside_save_during_a_guarded_delete_is_kept() {
    let d = Daemon::start();
    let path = common::rpc::p(&d.path("fsd-fault-pause-remove"));
    outside_save_during_a_guarded_removal(&d, move |mut rpc, version| {
        let guard = Some(fsd_proto::v1::EditGuard { version, ..Default::default() });
        let request = fsd_proto::v1::DeleteFileRequest { path, guard, ..Default::default() };
        rpc.rt.block_on(rpc.client.delete_file(request)).map(drop)
    });
}

#[test]
fn an_outside_save_during_a_guarded_remove_is_kept() {
    let d = Daemon::start();
    let path = common::rpc::p(&d.path("fsd-fault-pause-remove"));
    outside_save_during_a_guarded_removal(&d, move |mut rpc, version| {
        let guard = Some(fsd_proto::v1::EditGuard { version, ..Default::default() });
        let request = fsd_proto::v1::RemoveRequest { path, guard, ..Default::default() };
        rpc.rt.block_on(rpc.client.remove(request)).map(drop)
    });
}

/// Makes `path` a link to `target.txt`, takes its version (of the link, not its target), and
/// starts a remove guarded by it on a thread of its own; on the pause hook's name, half a second
/// into the hook's pause.
fn start_guarded_link_removal(d: &Daemon, path: &Path) -> std::thread::JoinHandle<Result<(), tonic::Status>> {
    std::os::unix::fs::symlink("target.txt", path).unwrap();
    let mut rpc = Rpc::connect(d);
    let request =
        fsd_proto::v1::StatRequest { path: common::rpc::p(path), no_follow: true, ..Default::default() };
    let version = rpc.rt.block_on(rpc.client.stat(request)).unwrap().into_inner().info.unwrap().version;
    let request = fsd_proto::v1::RemoveRequest {
        path: common::rpc::p(path),
        guard: Some(fsd_proto::v1::EditGuard { version, ..Default::default() }),
        ..Default::default()
    };
    let removing = std::thread::spawn(move || rpc.rt.block_on(rpc.client.remove(request)).map(drop));
    if path.ends_with("fsd-fault-pause-remove") {
        std::thread::sleep(Duration::from_millis(500));
    }
    removing
}

/// A guarded remove of a symbolic link removes only the link it checked: an editor's save that
/// replaced the link (by rename) between the check and the removal is kept, and so is the link's
/// target. The pause is the test hook `fsd-fault-pause-remove`'s.
#[test]
fn an_outside_save_over_a_guarded_symlink_removal_is_kept() {
    let d = Daemon::start();
    let path = d.path("fsd-fault-pause-remove");
    d.write("target.txt", "the link's target\n");
    let removing = start_guarded_link_removal(&d, &path);
    common::save_over(&path, "saved outside\n");
    let done = removing.join().unwrap();
    let kept = std::fs::symlink_metadata(&path).map(|m| m.file_type().is_file());
    assert!(kept.as_ref().is_ok_and(|f| *f), "the outside save was deleted: {kept:?} ({done:?})");
    assert_eq!(std::fs::read(&path).unwrap(), b"saved outside\n");
    assert_eq!(d.read("target.txt"), b"the link's target\n");
    let wire = common::rpc::wire(&done.unwrap_err());
    assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion);
    assert_eq!(wire.get("reason"), Some("changed_while_removing"));
    let mut names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["fsd-fault-pause-remove", "target.txt"], "no temporary file is left");
}

/// The link replaced by another link (renamed over it) between the check and the removal: a
/// confined worker may not move a link aside (Landlock counts that as making one), so it looks
/// at the name right before the unlink, finds another link, and removes nothing.
#[test]
fn a_link_replaced_by_another_during_a_guarded_removal_is_kept() {
    let d = Daemon::start();
    let path = d.path("fsd-fault-pause-remove");
    d.write("target.txt", "the link's target\n");
    let removing = start_guarded_link_removal(&d, &path);
    let other = d.path("other-link");
    std::os::unix::fs::symlink("elsewhere.txt", &other).unwrap();
    std::fs::rename(&other, &path).unwrap();
    let done = removing.join().unwrap();
    let link = std::fs::read_link(&path);
    assert_eq!(
        link.ok().as_deref(),
        Some(Path::new("elsewhere.txt")),
        "the other link was removed ({done:?})"
    );
    let wire = common::rpc::wire(&done.unwrap_err());
    assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion);
    assert_eq!(wire.get("reason"), Some("changed_while_removing"));
}

/// Without interference a guarded remove of a link removes the link, not its target, and leaves
/// no temporary name.
#[test]
fn a_guarded_remove_of_a_symlink_still_removes_it() {
    let d = Daemon::start();
    let path = d.path("link");
    d.write("target.txt", "kept\n");
    start_guarded_link_removal(&d, &path).join().unwrap().unwrap();
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["target.txt"]);
    assert_eq!(d.read("target.txt"), b"kept\n");
}

/// The rarer interleaving: the save caught by the move aside cannot go back, because another
/// save took the name in the second pause. Neither is deleted: the name holds the newer one, and
/// the other is kept at a visible name beside it (listed; no sweep removes it: its entry is
/// dropped), which the stale reply names (`kept`).
#[test]
fn a_name_taken_again_before_a_removal_puts_a_save_back_keeps_both_saves() {
    let d = Daemon::start();
    let target = d.path("fsd-fault-pause-remove");
    let (path, removing) =
        start_guarded_removal(&d, move |rpc, version| guarded_delete(rpc, &target, version));
    common::save_over(&path, "first save\n");
    std::thread::sleep(Duration::from_millis(1000));
    common::save_over(&path, "second save\n");
    let done = removing.join().unwrap();
    assert_eq!(std::fs::read(&path).ok().as_deref(), Some(&b"second save\n"[..]), "{done:?}");
    let others: Vec<_> =
        std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().path()).filter(|p| p != &path).collect();
    let [kept] = &others[..] else { panic!("not one other name: {others:?} ({done:?})") };
    assert_eq!(std::fs::read(kept).unwrap(), b"first save\n", "the save moved aside was not kept");
    let kept_name = kept.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(kept_name.starts_with("fsd-fault-pause-remove.kept-"), "{kept_name}");
    let wire = common::rpc::wire(&done.unwrap_err());
    assert_eq!(wire.code, fsd_proto::ErrorCode::StaleVersion);
    assert_eq!(wire.get("reason"), Some("changed_while_removing"));
    assert_eq!(wire.get("kept"), Some(kept.to_str().unwrap()), "the reply does not name the kept save");
    let mut rpc = Rpc::connect(&d);
    let listed: Vec<_> = rpc.list_dir(&d.root).unwrap().entries.into_iter().map(|e| e.name).collect();
    assert!(listed.contains(&kept_name), "the kept save is not listed: {listed:?}");
}

/// Without interference the same guarded removals remove the file, and leave nothing behind.
#[test]
fn a_guarded_delete_and_remove_still_remove() {
    let d = Daemon::start();
    let mut rpc = Rpc::connect(&d);
    for name in ["deleted.txt", "removed.txt"] {
        d.write(name, "observed\n");
        let path = common::rpc::p(&d.path(name));
        let version = rpc.version(&d.path(name));
        let guard = Some(fsd_proto::v1::EditGuard { version, ..Default::default() });
        let done = if name == "deleted.txt" {
            let request = fsd_proto::v1::DeleteFileRequest { path, guard, ..Default::default() };
            rpc.rt.block_on(rpc.client.delete_file(request)).map(drop)
        } else {
            let request = fsd_proto::v1::RemoveRequest { path, guard, ..Default::default() };
            rpc.rt.block_on(rpc.client.remove(request)).map(drop)
        };
        done.unwrap_or_else(|status| panic!("{name}: {status:?}"));
    }
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.is_empty(), "left: {names:?}");
}

/// A worker killed in a guarded removal's second pause, after it moved the name aside: the
/// supervisor's sweep of the dead worker's journal finishes the removal of the checked file, or
/// puts an outside save the move caught back at its name. Nothing is lost, nothing is left.
#[test]
fn a_worker_killed_mid_removal_loses_no_outside_save() {
    for outside_save in [false, true] {
        let d = Daemon::start();
        let target = d.path("fsd-fault-pause-remove");
        let (path, removing) =
            start_guarded_removal(&d, move |rpc, version| guarded_delete(rpc, &target, version));
        if outside_save {
            common::save_over(&path, "saved outside\n");
        }
        std::thread::sleep(Duration::from_millis(1000));
        let workers = d.process.kill_workers(&["workspace-write"]);
        assert!(!workers.is_empty(), "no workspace-write worker to kill");
        let done = removing.join().unwrap();
        assert!(done.is_err(), "the call of a killed worker succeeded: {done:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
            let expected: &[&str] = if outside_save { &["fsd-fault-pause-remove"] } else { &[] };
            if names == expected {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "outside save {outside_save}: the sweep left {names:?} ({done:?})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if outside_save {
            assert_eq!(std::fs::read(&path).unwrap(), b"saved outside\n");
        }
    }
}
