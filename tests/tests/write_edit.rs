//! The write and edit tools through the real daemon: their success texts, the read-before-write
//! policy (not observed, stale, confirmed absence), atomic replace fidelity (mode bits, line
//! endings, BOM, symlinks written through) and distinct versions.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::rpc::Rpc;
use common::*;
use serde_json::json;

fn write(s: &mut ToolSession, path: &str, content: &str) -> Reply {
    s.call("write", json!({"file_path": path, "content": content}))
}

fn edit(s: &mut ToolSession, path: &str, old: &str, new: &str) -> Reply {
    s.call("edit", json!({"file_path": path, "old_string": old, "new_string": new}))
}

fn not_observed(path: &Path) -> String {
    format!("Error: cannot modify \"{}\": file has not been read — read the file, then retry", path.display())
}

fn stale(path: &Path, reason: &str) -> String {
    format!("Error: cannot modify \"{}\": {reason} — re-read the file, then retry", path.display())
}

fn edited(path: &Path) -> String {
    format!("The file {} has been updated successfully.", path.display())
}

fn edited_all(path: &Path) -> String {
    format!("The file {} has been updated. All occurrences were successfully replaced.", path.display())
}

fn read_ok(s: &mut ToolSession, rel: &str) {
    let reply = s.read(rel);
    assert!(!reply.is_error(), "read {rel}: {}", reply.json);
}

// ---- write ----

#[test]
fn write_creates_then_updates() {
    let d = Daemon::start();
    let mut s = d.session();
    let p = d.path("new.txt");
    let created = write(&mut s, "new.txt", "one\ntwo\n");
    ok(
        &created,
        &format!("<path>{}</path>\n<type>file</type>\n<content>\nCreated file\n</content>", p.display()),
    );
    assert_eq!(created.text().lines().count(), 5, "the envelope is exactly five lines");
    assert_eq!(d.read("new.txt"), b"one\ntwo\n");
    // Its own write is an observation: the next write needs no read.
    let updated = write(&mut s, "new.txt", "three\n");
    ok(
        &updated,
        &format!("<path>{}</path>\n<type>file</type>\n<content>\nUpdated file\n</content>", p.display()),
    );
    assert_eq!(updated.text().lines().count(), 5);
    assert_eq!(d.read("new.txt"), b"three\n");

    // An existing file, read first, then replaced.
    d.write("old.txt", "before\n");
    read_ok(&mut s, "old.txt");
    ok(&write(&mut s, "old.txt", "after\n"), &write_envelope(&d.path("old.txt"), "Updated file"));
    assert_eq!(d.read("old.txt"), b"after\n");
    // An empty content is a valid write.
    ok(&write(&mut s, "old.txt", ""), &write_envelope(&d.path("old.txt"), "Updated file"));
    assert_eq!(d.read("old.txt"), b"");
}

#[test]
fn write_refuses_to_overwrite_an_unread_file() {
    let d = Daemon::start();
    d.write("a.txt", "keep me\n");
    let mut s = d.session();
    err(&write(&mut s, "a.txt", "clobbered\n"), "FS_NOT_OBSERVED", &not_observed(&d.path("a.txt")));
    assert_eq!(d.read("a.txt"), b"keep me\n");
    // Reading it lifts the refusal.
    read_ok(&mut s, "a.txt");
    ok(&write(&mut s, "a.txt", "replaced\n"), &write_envelope(&d.path("a.txt"), "Updated file"));
}

#[test]
fn write_refuses_a_stale_observation_and_keeps_the_disk_change() {
    let d = Daemon::start();
    d.write("a.txt", "v1\n");
    let mut s = d.session();
    read_ok(&mut s, "a.txt");
    d.write("a.txt", "changed by someone else\n");
    let p = d.path("a.txt");
    err(
        &write(&mut s, "a.txt", "mine\n"),
        "FS_STALE_VERSION",
        &stale(&p, "file changed on disk since it was read"),
    );
    assert_eq!(d.read("a.txt"), b"changed by someone else\n");
    // The remedy works: re-read, then retry.
    read_ok(&mut s, "a.txt");
    ok(&write(&mut s, "a.txt", "mine\n"), &write_envelope(&p, "Updated file"));
    assert_eq!(d.read("a.txt"), b"mine\n");
}

#[test]
fn three_rapid_writes_give_three_distinct_versions() {
    let d = Daemon::start();
    let mut rpc = Rpc::connect(&d);
    let mut s = d.session();
    let p = d.path("v.txt");
    let mut versions = Vec::new();
    // Equal sizes, back to back: only the versions' other parts can tell them apart.
    for content in ["one\n", "two\n", "six\n"] {
        let reply = write(&mut s, "v.txt", content);
        assert!(!reply.is_error(), "{}", reply.json);
        versions.push(rpc.version(&p));
    }
    assert_eq!(d.read("v.txt"), b"six\n");
    for i in 0..versions.len() {
        for j in i + 1..versions.len() {
            assert_ne!(versions[i], versions[j], "writes {i} and {j} share a version");
        }
    }
    // The same holds for provider-level writes, by their replies and by stat.
    let mut replies = Vec::new();
    for content in ["aaa\n", "bbb\n", "ccc\n"] {
        let reply = rpc.write_text(&p, content, None).expect("writeText");
        let metadata = fsd_proto::version::split(&reply.version).0;
        assert_eq!(metadata, rpc.version(&p), "the reply's version is the file's");
        replies.push(reply.version);
    }
    replies.extend(versions);
    let mut unique = replies.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), replies.len(), "versions repeat: {replies:?}");
}

#[test]
fn write_creates_missing_parent_directories() {
    let d = Daemon::start();
    let mut s = d.session();
    ok(&write(&mut s, "a/b/c/new.txt", "deep\n"), &write_envelope(&d.path("a/b/c/new.txt"), "Created file"));
    assert!(d.path("a/b/c").is_dir());
    assert_eq!(d.read("a/b/c/new.txt"), b"deep\n");
}

#[test]
fn write_goes_through_a_symlink_to_its_target() {
    let d = Daemon::start();
    d.write("dir/real.txt", "real\n");
    d.write("abs-real.txt", "abs\n");
    let relative = std::path::PathBuf::from("dir/real.txt");
    let absolute = d.path("abs-real.txt");
    symlink(&relative, &d.path("link.txt"));
    symlink(&absolute, &d.path("abs-link.txt"));
    let mut s = d.session();
    for (link, points_to, target) in
        [("link.txt", relative, d.path("dir/real.txt")), ("abs-link.txt", absolute.clone(), absolute)]
    {
        // The read names the resolved target.
        let reply = s.read(link);
        assert!(!reply.is_error(), "{}", reply.json);
        assert!(
            reply.text().starts_with(&format!("<path>{}</path>\n", target.display())),
            "{}",
            reply.text()
        );
        ok(&write(&mut s, link, "through the link\n"), &write_envelope(&target, "Updated file"));
        let meta = std::fs::symlink_metadata(d.path(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} is still a link");
        assert_eq!(std::fs::read_link(d.path(link)).unwrap(), points_to, "{link} still points where it did");
        assert_eq!(std::fs::read(&target).unwrap(), b"through the link\n");
        // An edit goes through the link as well.
        ok(&edit(&mut s, link, "through", "via"), &edited(&target));
        assert!(std::fs::symlink_metadata(d.path(link)).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"via the link\n");
    }
}

#[test]
fn replace_keeps_mode_bits() {
    let d = Daemon::start();
    let mut s = d.session();
    for (rel, mode) in [("script.sh", 0o755), ("private.txt", 0o600), ("odd.txt", 0o640)] {
        d.write(rel, "old\n");
        std::fs::set_permissions(d.path(rel), std::fs::Permissions::from_mode(mode)).unwrap();
        read_ok(&mut s, rel);
        ok(&write(&mut s, rel, "new\n"), &write_envelope(&d.path(rel), "Updated file"));
        let got = std::fs::metadata(d.path(rel)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{rel} after write: {got:o}");
        ok(&edit(&mut s, rel, "new", "newer"), &edited(&d.path(rel)));
        let got = std::fs::metadata(d.path(rel)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{rel} after edit: {got:o}");
    }
}

#[test]
fn write_keeps_the_files_line_endings_and_bom() {
    let d = Daemon::start();
    let mut s = d.session();
    // (existing bytes, the model's LF content, bytes on disk after the write)
    let cases: [(&str, &[u8], &str, &[u8]); 4] = [
        ("crlf.txt", b"a\r\nb\r\n", "x\ny\nz\n", b"x\r\ny\r\nz\r\n"),
        ("lf.txt", b"a\nb\n", "x\ny\n", b"x\ny\n"),
        ("bom.txt", "\u{feff}a\nb\n".as_bytes(), "x\n", "\u{feff}x\n".as_bytes()),
        ("bom-crlf.txt", "\u{feff}a\r\n".as_bytes(), "x\ny", "\u{feff}x\r\ny".as_bytes()),
    ];
    for (rel, before, content, after) in cases {
        d.write(rel, before);
        read_ok(&mut s, rel);
        ok(&write(&mut s, rel, content), &write_envelope(&d.path(rel), "Updated file"));
        assert_eq!(d.read(rel), after, "{rel}");
    }
}

#[test]
fn after_reading_a_missing_file_write_creates_it() {
    let d = Daemon::start();
    let mut s = d.session();
    let p = d.path("later.txt");
    err(&s.read("later.txt"), "FS_NOT_FOUND", &format!("Error: cannot read \"{}\": not found", p.display()));
    ok(&write(&mut s, "later.txt", "now\n"), &write_envelope(&p, "Created file"));
    assert_eq!(d.read("later.txt"), b"now\n");

    // Confirmed absence guards the creation: a file that appeared since is not overwritten.
    let q = d.path("raced.txt");
    err(&s.read("raced.txt"), "FS_NOT_FOUND", &format!("Error: cannot read \"{}\": not found", q.display()));
    d.write("raced.txt", "someone else's\n");
    err(&write(&mut s, "raced.txt", "mine\n"), "FS_NOT_OBSERVED", &not_observed(&q));
    assert_eq!(d.read("raced.txt"), b"someone else's\n");
}

#[test]
fn write_after_an_external_delete_is_stale_until_a_reread_confirms_absence() {
    let d = Daemon::start();
    d.write("gone.txt", "here\n");
    let mut s = d.session();
    let p = d.path("gone.txt");
    read_ok(&mut s, "gone.txt");
    std::fs::remove_file(&p).unwrap();
    err(&write(&mut s, "gone.txt", "back\n"), "FS_STALE_VERSION", &stale(&p, "file no longer exists"));
    assert!(!p.exists(), "a stale write creates nothing");
    err(&s.read("gone.txt"), "FS_NOT_FOUND", &format!("Error: cannot read \"{}\": not found", p.display()));
    ok(&write(&mut s, "gone.txt", "back\n"), &write_envelope(&p, "Created file"));
    assert_eq!(d.read("gone.txt"), b"back\n");
}

// ---- edit ----

/// A call's expected success text, or its error code and text.
type Outcome = Result<String, (&'static str, String)>;

#[test]
fn edit_results_and_refusals() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\nbeta\nalpha\ngamma\n");
    let p = d.path("a.txt");
    let mut s = d.session();
    read_ok(&mut s, "a.txt");
    let call = |old: &str, new: &str, all: Option<bool>| {
        let mut args = json!({"file_path": "a.txt", "old_string": old, "new_string": new});
        if let Some(all) = all {
            args["replace_all"] = json!(all);
        }
        args
    };
    // (arguments, Ok(success text) or Err((code, error text)), file content afterwards)
    let cases: Vec<(serde_json::Value, Outcome, &str)> = vec![
        (
            call("alpha", "ALPHA", None),
            Err((
                "FS_AMBIGUOUS_EDIT",
                "Error: Found 2 matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.\nString: alpha".to_owned(),
            )),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            call("alpha", "ALPHA", Some(false)),
            Err((
                "FS_AMBIGUOUS_EDIT",
                "Error: Found 2 matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.\nString: alpha".to_owned(),
            )),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            call("delta\nepsilon", "x", None),
            Err(("FS_EDIT_NOT_FOUND", "Error: String to replace not found in file.\nString: delta\nepsilon".to_owned())),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            call("", "x", None),
            Err(("INVALID_ARGS", "Error: old_string must be a non-empty string".to_owned())),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            json!({"file_path": "a.txt", "new_string": "x"}),
            Err(("INVALID_ARGS", "Error: old_string must be a non-empty string".to_owned())),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            call("beta", "beta", None),
            Err(("INVALID_ARGS", "Error: old_string and new_string must differ".to_owned())),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (
            json!({"file_path": "", "old_string": "a", "new_string": "b"}),
            Err(("INVALID_ARGS", "Error: file_path must be a non-empty string".to_owned())),
            "alpha\nbeta\nalpha\ngamma\n",
        ),
        (call("beta", "BETA", None), Ok(edited(&p)), "alpha\nBETA\nalpha\ngamma\n"),
        // Its own edit is an observation: the next edit needs no read.
        (call("alpha\n", "A\n", Some(true)), Ok(edited_all(&p)), "A\nBETA\nA\ngamma\n"),
        // replace_all with a single match still uses the replace_all text.
        (call("gamma", "G", Some(true)), Ok(edited_all(&p)), "A\nBETA\nA\nG\n"),
        // Deleting text is an edit.
        (call("BETA\n", "", None), Ok(edited(&p)), "A\nA\nG\n"),
    ];
    for (args, want, after) in cases {
        let reply = s.call("edit", args.clone());
        match want {
            Ok(text) => ok(&reply, &text),
            Err((code, text)) => err(&reply, code, &text),
        }
        assert_eq!(String::from_utf8(d.read("a.txt")).unwrap(), after, "after edit {args}");
    }
}

/// (file, bytes before, old_string, new_string, bytes after)
type EditCase<'a> = (&'a str, &'a [u8], &'a str, &'a str, &'a [u8]);

#[test]
fn edit_keeps_crlf_and_bom() {
    let d = Daemon::start();
    let mut s = d.session();
    // (file, bytes before, old, new, bytes after)
    let cases: [EditCase; 5] = [
        ("crlf.txt", b"a\r\nb\r\nc\r\n", "a\nb", "x\ny\nz", b"x\r\ny\r\nz\r\nc\r\n"),
        ("crlf-one.txt", b"one\r\ntwo\r\n", "two", "2", b"one\r\n2\r\n"),
        ("bom.txt", "\u{feff}alpha\nbeta\n".as_bytes(), "alpha", "gamma", "\u{feff}gamma\nbeta\n".as_bytes()),
        (
            "bom-crlf.txt",
            "\u{feff}alpha\r\nbeta\r\n".as_bytes(),
            "alpha\nbeta",
            "beta\nalpha",
            "\u{feff}beta\r\nalpha\r\n".as_bytes(),
        ),
        // Untouched lines keep their own endings; inserted ones take the first ending.
        ("mixed.txt", b"a\nb\r\nc\n", "c", "c\nd", b"a\nb\r\nc\nd\n"),
    ];
    for (rel, before, old, new, after) in cases {
        d.write(rel, before);
        read_ok(&mut s, rel);
        ok(&edit(&mut s, rel, old, new), &edited(&d.path(rel)));
        assert_eq!(d.read(rel), after, "{rel}");
    }
}

#[test]
fn a_stale_edit_is_stale_before_it_is_not_found() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let p = d.path("a.txt");
    let mut s = d.session();
    read_ok(&mut s, "a.txt");
    d.write("a.txt", "beta gamma\n");
    // "alpha" is gone from the new content, but the stale check comes first.
    err(
        &edit(&mut s, "a.txt", "alpha", "omega"),
        "FS_STALE_VERSION",
        &stale(&p, "file changed on disk since it was read"),
    );
    // Even when old_string still matches the new content, a stale observation is refused.
    err(
        &edit(&mut s, "a.txt", "beta", "omega"),
        "FS_STALE_VERSION",
        &stale(&p, "file changed on disk since it was read"),
    );
    assert_eq!(d.read("a.txt"), b"beta gamma\n");
    read_ok(&mut s, "a.txt");
    err(
        &edit(&mut s, "a.txt", "alpha", "omega"),
        "FS_EDIT_NOT_FOUND",
        "Error: String to replace not found in file.\nString: alpha",
    );
    ok(&edit(&mut s, "a.txt", "beta", "omega"), &edited(&p));
    assert_eq!(d.read("a.txt"), b"omega gamma\n");
}

#[test]
fn edit_needs_an_observation() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let mut s = d.session();
    err(&edit(&mut s, "a.txt", "alpha", "beta"), "FS_NOT_OBSERVED", &not_observed(&d.path("a.txt")));
    assert_eq!(d.read("a.txt"), b"alpha\n");
    // A file the session created itself needs no read.
    ok(&write(&mut s, "mine.txt", "one\ntwo\n"), &write_envelope(&d.path("mine.txt"), "Created file"));
    ok(&edit(&mut s, "mine.txt", "two", "2"), &edited(&d.path("mine.txt")));
    assert_eq!(d.read("mine.txt"), b"one\n2\n");
}

#[test]
fn edit_after_an_external_delete_is_stale_then_not_found() {
    let d = Daemon::start();
    d.write("gone.txt", "alpha\n");
    let p = d.path("gone.txt");
    let mut s = d.session();
    read_ok(&mut s, "gone.txt");
    std::fs::remove_file(&p).unwrap();
    err(&edit(&mut s, "gone.txt", "alpha", "beta"), "FS_STALE_VERSION", &stale(&p, "file no longer exists"));
    err(&s.read("gone.txt"), "FS_NOT_FOUND", &format!("Error: cannot read \"{}\": not found", p.display()));
    err(
        &edit(&mut s, "gone.txt", "alpha", "beta"),
        "FS_NOT_FOUND",
        &format!("Error: cannot modify \"{}\": not found", p.display()),
    );
    assert!(!p.exists());
}
