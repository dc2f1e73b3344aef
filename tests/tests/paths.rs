//! Path resolution and the sandbox through the real daemon: absolute paths outside the root,
//! `..` escapes, symlinks (absolute, relative, in a middle component) leading out, links inside
//! the root, and the protected `.git` directory. Every refusal is FS_SANDBOX_DENIED with the
//! seed's marker, and nothing outside the root is ever written.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

const MARKER: &str = "[sandbox: file access denied under workspace-write mode]";
const OUTSIDE: &str = "path resolves outside every root of this daemon";
const PROTECTED: &str = ".git is a protected path";

/// Every file and directory below `dir` with its content (None for directories and links).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
                out.insert(path, None);
            } else if meta.file_type().is_symlink() {
                out.insert(path, None);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path, Some(bytes));
            }
        }
    }
    out
}

/// A workspace with an `outside` sibling directory and links leading out of the root.
struct Fixture {
    d: Daemon,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let d = Daemon::start();
    let outside = d.root.parent().unwrap().join("outside");
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    d.write("inside.txt", "inside\n");
    d.write("sub/real.txt", "real\n");
    symlink(outside.join("secret.txt"), &d.path("abs-out"));
    symlink("../outside/secret.txt", &d.path("rel-out"));
    symlink("../../outside/secret.txt", &d.path("sub/deep-rel-out"));
    symlink(&outside, &d.path("abs-dir-out"));
    symlink("../outside", &d.path("rel-dir-out"));
    symlink("abs-out", &d.path("chain-out"));
    Fixture { d, outside }
}

fn denied(verb: &str, path: &str, reason: &str) -> String {
    format!("Error: cannot {verb} \"{path}\": {reason} {MARKER}")
}

#[test]
fn paths_leading_out_of_the_root_are_denied() {
    let Fixture { d, outside } = fixture();
    let before = snapshot(&outside);
    let root = d.root.display().to_string();
    let out = outside.display().to_string();
    let mut s = d.session();
    // (tool, file_path as the model gives it, the path the error names)
    let cases: Vec<(&str, String, String)> = vec![
        ("read", format!("{out}/secret.txt"), format!("{out}/secret.txt")),
        ("write", format!("{out}/secret.txt"), format!("{out}/secret.txt")),
        ("write", format!("{out}/new.txt"), format!("{out}/new.txt")),
        ("write", format!("{out}/newdir/new.txt"), format!("{out}/newdir/new.txt")),
        // `..` escapes, plain and after a real directory.
        ("read", "../outside/secret.txt".to_owned(), format!("{root}/../outside/secret.txt")),
        ("write", "../outside/secret.txt".to_owned(), format!("{root}/../outside/secret.txt")),
        ("write", "../outside/new.txt".to_owned(), format!("{root}/../outside/new.txt")),
        ("write", "sub/../../outside/new.txt".to_owned(), format!("{root}/sub/../../outside/new.txt")),
        ("write", format!("{root}/../outside/new.txt"), format!("{root}/../outside/new.txt")),
        // An absolute link, a relative link, a deeper relative link and a chain of links.
        ("read", "abs-out".to_owned(), format!("{root}/abs-out")),
        ("write", "abs-out".to_owned(), format!("{root}/abs-out")),
        ("read", "rel-out".to_owned(), format!("{root}/rel-out")),
        ("write", "rel-out".to_owned(), format!("{root}/rel-out")),
        ("write", "sub/deep-rel-out".to_owned(), format!("{root}/sub/deep-rel-out")),
        ("write", "chain-out".to_owned(), format!("{root}/chain-out")),
        // A link in a middle component.
        ("read", "abs-dir-out/secret.txt".to_owned(), format!("{root}/abs-dir-out/secret.txt")),
        ("write", "abs-dir-out/secret.txt".to_owned(), format!("{root}/abs-dir-out/secret.txt")),
        ("write", "abs-dir-out/new.txt".to_owned(), format!("{root}/abs-dir-out/new.txt")),
        ("write", "abs-dir-out/dir/new.txt".to_owned(), format!("{root}/abs-dir-out/dir/new.txt")),
        ("write", "rel-dir-out/new.txt".to_owned(), format!("{root}/rel-dir-out/new.txt")),
        ("write", "rel-dir-out/deeper/new.txt".to_owned(), format!("{root}/rel-dir-out/deeper/new.txt")),
    ];
    for (tool, file_path, named) in cases {
        let args = match tool {
            "read" => json!({"file_path": file_path}),
            _ => json!({"file_path": file_path, "content": "pwned\n"}),
        };
        let verb = if tool == "read" { "read" } else { "modify" };
        let reply = s.call(tool, args);
        assert!(reply.is_error(), "{tool} {file_path}: {}", reply.json);
        assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{tool} {file_path}: {}", reply.json);
        assert_eq!(reply.text(), denied(verb, &named, OUTSIDE), "{tool} {file_path}");
    }
    assert_eq!(snapshot(&outside), before, "nothing outside the root changed");
    // Nothing was created inside either (no parent directories for refused writes).
    assert!(!d.path("newdir").exists());
}

#[test]
fn a_link_repointed_out_after_the_read_is_denied_at_the_mutation() {
    let Fixture { d, outside } = fixture();
    let before = snapshot(&outside);
    let mut s = d.session();
    let swing = d.path("swing");
    symlink("sub/real.txt", &swing);
    let reply = s.read("swing");
    assert!(!reply.is_error(), "{}", reply.json);
    std::fs::remove_file(&swing).unwrap();
    symlink(outside.join("secret.txt"), &swing);
    let named = swing.display().to_string();
    let r = s.call("edit", json!({"file_path": "swing", "old_string": "secret", "new_string": "pwned"}));
    err(&r, "FS_SANDBOX_DENIED", &denied("modify", &named, OUTSIDE));
    let r = s.call("write", json!({"file_path": "swing", "content": "pwned\n"}));
    err(&r, "FS_SANDBOX_DENIED", &denied("modify", &named, OUTSIDE));
    assert_eq!(snapshot(&outside), before);
    assert_eq!(d.read("sub/real.txt"), b"real\n");
}

#[test]
fn links_and_dot_dot_inside_the_root_work() {
    let Fixture { d, .. } = fixture();
    let real = d.path("sub/real.txt");
    symlink("sub/real.txt", &d.path("in-rel"));
    symlink(&real, &d.path("in-abs"));
    symlink("sub", &d.path("in-dir"));
    symlink(d.path("sub"), &d.path("in-abs-dir"));
    let mut s = d.session();
    let body = |path: &Path, text: &str| envelope(path, &[text], "(End of file - total 1 lines)");
    let cases: Vec<(Value, String)> = vec![
        (json!({"file_path": "in-rel"}), body(&real, "1: real")),
        (json!({"file_path": "in-abs"}), body(&real, "1: real")),
        (json!({"file_path": "in-dir/real.txt"}), body(&real, "1: real")),
        (json!({"file_path": "in-abs-dir/real.txt"}), body(&real, "1: real")),
        (json!({"file_path": "sub/../inside.txt"}), body(&d.path("inside.txt"), "1: inside")),
        (json!({"file_path": "sub/./real.txt"}), body(&real, "1: real")),
    ];
    for (args, text) in cases {
        ok(&s.call("read", args), &text);
    }
    // Writes through inside links land on the targets.
    ok(
        &s.call("write", json!({"file_path": "in-abs", "content": "one\n"})),
        &write_envelope(&real, "Updated file"),
    );
    assert_eq!(d.read("sub/real.txt"), b"one\n");
    ok(
        &s.call("write", json!({"file_path": "in-dir/new.txt", "content": "new\n"})),
        &write_envelope(&d.path("sub/new.txt"), "Created file"),
    );
    assert_eq!(d.read("sub/new.txt"), b"new\n");
    ok(
        &s.call("write", json!({"file_path": "sub/../top.txt", "content": "top\n"})),
        &write_envelope(&d.path("top.txt"), "Created file"),
    );
    assert_eq!(d.read("top.txt"), b"top\n");
    assert!(std::fs::symlink_metadata(d.path("in-abs")).unwrap().file_type().is_symlink());
    assert!(std::fs::symlink_metadata(d.path("in-dir")).unwrap().file_type().is_symlink());
}

#[test]
fn dot_git_is_readable_but_protected_from_writes_and_edits() {
    let d = Daemon::start();
    d.write(".git/config", "[core]\n");
    d.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
    symlink(".git/config", &d.path("config-link"));
    symlink(".git/hooks", &d.path("hooks-link"));
    let config = d.path(".git/config");
    let mut s = d.session();
    // Readable, directly and through a link.
    ok(&s.read(".git/config"), &envelope(&config, &["1: [core]"], "(End of file - total 1 lines)"));
    ok(&s.read("config-link"), &envelope(&config, &["1: [core]"], "(End of file - total 1 lines)"));
    let named = |rel: &str| d.path(rel).display().to_string();
    let cases: Vec<(&str, Value, String)> = vec![
        ("write", json!({"file_path": ".git/config", "content": "x\n"}), named(".git/config")),
        (
            "edit",
            json!({"file_path": ".git/config", "old_string": "core", "new_string": "x"}),
            named(".git/config"),
        ),
        ("write", json!({"file_path": "config-link", "content": "x\n"}), named("config-link")),
        (
            "edit",
            json!({"file_path": "config-link", "old_string": "core", "new_string": "x"}),
            named("config-link"),
        ),
        (
            "write",
            json!({"file_path": ".git/hooks/pre-commit", "content": "x\n"}),
            named(".git/hooks/pre-commit"),
        ),
        (
            "write",
            json!({"file_path": "hooks-link/post-commit", "content": "x\n"}),
            named("hooks-link/post-commit"),
        ),
        ("write", json!({"file_path": ".git/new/dir/file", "content": "x\n"}), named(".git/new/dir/file")),
        // A .git created later, at any depth, is protected too.
        ("write", json!({"file_path": "sub/.git/HEAD", "content": "x\n"}), named("sub/.git/HEAD")),
    ];
    for (tool, args, path) in cases {
        let reply = s.call(tool, args.clone());
        err(&reply, "FS_SANDBOX_DENIED", &denied("modify", &path, PROTECTED));
    }
    assert_eq!(d.read(".git/config"), b"[core]\n");
    assert!(!d.path(".git/hooks/pre-commit").exists());
    assert!(!d.path(".git/hooks/post-commit").exists());
    assert!(!d.path(".git/new").exists());
    assert!(!d.path("sub/.git").exists());
    // Names that merely contain ".git" are ordinary.
    ok(
        &s.call("write", json!({"file_path": ".gitignore", "content": "target\n"})),
        &write_envelope(&d.path(".gitignore"), "Created file"),
    );
    ok(
        &s.call("write", json!({"file_path": "x.git/file", "content": "y\n"})),
        &write_envelope(&d.path("x.git/file"), "Created file"),
    );
}

#[test]
fn a_path_through_a_missing_directory_is_judged_before_anything_is_created() {
    let Fixture { d, outside } = fixture();
    let (inside_before, outside_before) = (snapshot(&d.root), snapshot(&outside));
    let root = d.root.display().to_string();
    let mut s = d.session_with_config("applyPatch = true\n");
    // The directories a write would make on the way are climbed out of again: out of the root,
    // or into the protected name.
    let cases = [
        ("new1/../../outside/new.txt", OUTSIDE),
        ("n2/n3/../../../outside/new.txt", OUTSIDE),
        ("n4/../.git/config", PROTECTED),
    ];
    for (file_path, reason) in cases {
        let reply = s.call("write", json!({"file_path": file_path, "content": "pwned\n"}));
        assert_eq!(reply.code(), Some("FS_SANDBOX_DENIED"), "{file_path}: {}", reply.json);
        assert_eq!(reply.text(), denied("modify", &format!("{root}/{file_path}"), reason), "{file_path}");
    }
    // apply_patch's preflight judges such a path as the write would: nothing of the patch runs.
    let patch = "*** Begin Patch\n*** Add File: first.txt\n+one\n*** Add File: n5/../../outside/new.txt\n+two\n*** End Patch";
    let reply = s.call("apply_patch", json!({"input": patch}));
    assert!(reply.text().starts_with("Error: Patch rejected before any change"), "{}", reply.json);
    assert_eq!(snapshot(&d.root), inside_before, "nothing was created inside the root");
    assert_eq!(snapshot(&outside), outside_before, "nothing outside the root changed");

    // One that comes back inside writes its file, and no directory it only passed through.
    let reply = s.call("write", json!({"file_path": "n6/../back.txt", "content": "back\n"}));
    assert!(!reply.is_error(), "{}", reply.json);
    assert_eq!(d.read("back.txt"), b"back\n");
    assert!(!d.path("n6").exists(), "a directory the path only passed through was created");
}
