//! str_replace_editor through the real daemon: every command and refusal with the exact text the
//! model reads (the `cat -n` view, ranges, the two-level listing and its exclusions, clipping,
//! create's guarded creation, str_replace's match errors and snippet, insert boundaries with and
//! without trailing newlines, CRLF and BOM files), null placeholders, the observation policy, and
//! the policy-off compare-and-swap path.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

const ON: &str = "strReplaceEditor = true\n";
const OFF: &str = "strReplaceEditor = true\nobservationPolicy = false\n";
const FILE_NOTICE: &str = "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>";
const DIR_NOTICE: &str = "<response clipped><NOTE>Due to the max output limit, only part of this directory has been shown to you. You should use `ls -la` instead to view large directories incrementally.</NOTE>";
const REPLACE_TAIL: &str =
    "Review the changes and make sure they are as expected. Edit the file again if necessary.";
const INSERT_TAIL: &str = "Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.";

/// What one call must answer.
enum Want {
    Text(String),
    Error(&'static str, String),
}

fn text(t: impl Into<String>) -> Want {
    Want::Text(t.into())
}

fn error(code: &'static str, message: impl std::fmt::Display) -> Want {
    Want::Error(code, format!("Error: {message}"))
}

#[track_caller]
fn check(s: &mut ToolSession, args: Value, want: Want) -> Reply {
    let reply = s.call("str_replace_editor", args.clone());
    match want {
        Want::Text(text) => {
            assert!(!reply.is_error(), "{args}: expected success, got {}", reply.json);
            assert_eq!(reply.text(), text, "{args}");
        }
        Want::Error(code, text) => {
            assert!(reply.is_error(), "{args}: expected an error, got {}", reply.json);
            assert_eq!(reply.code(), Some(code), "{args}: {}", reply.json);
            assert_eq!(reply.text(), text, "{args}");
        }
    }
    reply
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn view(p: &Path) -> Value {
    json!({"command": "view", "path": s(p)})
}

fn header(p: &Path) -> String {
    format!("Here's the result of running `cat -n` on {}:\n", p.display())
}

/// `cat -n` lines numbered from `first`.
fn cat_n(first: usize, lines: &[&str]) -> String {
    lines.iter().enumerate().map(|(i, l)| format!("{:>6}\t{l}\n", first + i)).collect()
}

fn viewed(p: &Path, first: usize, lines: &[&str]) -> Want {
    text(format!("{}{}", header(p), cat_n(first, lines)))
}

fn replaced(p: &Path, first: usize, lines: &[&str]) -> Want {
    let p = p.display();
    text(format!(
        "The file {p} has been edited. Here's the result of running `cat -n` on a snippet of {p}:\n{}{REPLACE_TAIL}",
        cat_n(first, lines)
    ))
}

fn inserted(p: &Path, first: usize, lines: &[&str]) -> Want {
    text(format!(
        "The file {} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:\n{}{INSERT_TAIL}",
        p.display(),
        cat_n(first, lines)
    ))
}

fn invalid(message: impl std::fmt::Display) -> Want {
    error("INVALID_ARGS", message)
}

fn not_found(p: &Path) -> Want {
    error("FS_NOT_FOUND", format!("The path {} does not exist. Please provide a valid path.", p.display()))
}

fn exists(p: &Path) -> Want {
    error(
        "FS_ALREADY_EXISTS",
        format!("File already exists at: {}. Cannot overwrite files using command `create`.", p.display()),
    )
}

fn not_observed(p: &Path) -> Want {
    error(
        "FS_NOT_OBSERVED",
        format!("cannot modify \"{}\": file has not been read — read the file, then retry", p.display()),
    )
}

#[test]
fn view_files_ranges_and_argument_errors() {
    let d = Daemon::start();
    d.write("five.txt", "one\ntwo\nthree\nfour\nfive\n");
    d.write("tabs.txt", "no tabs\n\tindented\nline\twith\ttabs\n");
    d.write("noeol.txt", "a\nb");
    d.write("empty.txt", "");
    d.write("crlf.txt", "a\r\nb\r\n");
    d.write("bom.txt", "\u{feff}x\ny\n");
    let mut sess = d.session_with_config(ON);
    let five = d.path("five.txt");
    let all5 = ["one", "two", "three", "four", "five"];
    let range = |p: &Path, r: Value| json!({"command": "view", "path": s(p), "view_range": r});
    let empty = d.path("empty.txt");
    let cases: Vec<(Value, Want)> = vec![
        (view(&five), viewed(&five, 1, &all5)),
        (range(&five, json!([2, 3])), viewed(&five, 2, &["two", "three"])),
        (range(&five, json!([4, -1])), viewed(&five, 4, &["four", "five"])),
        (range(&five, json!([5, 5])), viewed(&five, 5, &["five"])),
        (range(&five, json!(null)), viewed(&five, 1, &all5)),
        // Every other field may be a null placeholder.
        (
            json!({"command": "view", "path": s(&five), "file_text": null, "old_str": null, "new_str": null, "insert_line": null, "insert_text": null, "view_range": null}),
            viewed(&five, 1, &all5),
        ),
        (
            range(&five, json!([0, 1])),
            invalid(
                "Invalid `view_range`: [0, 1]. Its first element `0` should be within the range of lines of the file: [1, 5]",
            ),
        ),
        (
            range(&five, json!([6, 6])),
            invalid(
                "Invalid `view_range`: [6, 6]. Its first element `6` should be within the range of lines of the file: [1, 5]",
            ),
        ),
        (
            range(&five, json!([3, 2])),
            invalid(
                "Invalid `view_range`: [3, 2]. Its second element `2` should be larger or equal than its first `3`",
            ),
        ),
        (
            range(&five, json!([1, 6])),
            invalid(
                "Invalid `view_range`: [1, 6]. Its second element `6` should be less than or equal to the number of lines in the file: `5`",
            ),
        ),
        (range(&five, json!([1])), invalid("Invalid `view_range`. It should be a list of two integers.")),
        (range(&five, json!("1-2")), invalid("Invalid `view_range`. It should be a list of two integers.")),
        // Tabs stay tabs, so the view is valid old_str input.
        (
            view(&d.path("tabs.txt")),
            viewed(&d.path("tabs.txt"), 1, &["no tabs", "\tindented", "line\twith\ttabs"]),
        ),
        // No phantom last line, with or without a final newline; the empty file has no lines.
        (view(&d.path("noeol.txt")), viewed(&d.path("noeol.txt"), 1, &["a", "b"])),
        (view(&empty), viewed(&empty, 1, &[])),
        (range(&empty, json!([1, -1])), viewed(&empty, 1, &[])),
        (
            range(&empty, json!([1, 1])),
            invalid(
                "Invalid `view_range`: [1, 1]. Its second element `1` should be less than or equal to the number of lines in the file: `0`",
            ),
        ),
        // CRLF endings and the BOM are not shown.
        (view(&d.path("crlf.txt")), viewed(&d.path("crlf.txt"), 1, &["a", "b"])),
        (view(&d.path("bom.txt")), viewed(&d.path("bom.txt"), 1, &["x", "y"])),
        // Argument mistakes the schema cannot express.
        (
            json!({"command": "view", "path": "five.txt"}),
            invalid(format!(
                "The path five.txt is not an absolute path, it should start with `/`. Maybe you meant {}?",
                five.display()
            )),
        ),
        (json!({"command": "view"}), invalid("Parameter `path` is required for command: view")),
        (json!({"command": "view", "path": null}), invalid("Parameter `path` is required for command: view")),
        (
            json!({"path": s(&five)}),
            invalid(
                "Parameter `command` is required. Allowed commands are: view, create, str_replace, insert",
            ),
        ),
        (
            json!({"command": "undo_edit", "path": s(&five)}),
            invalid(
                "Unrecognized command undo_edit. The allowed commands for the str_replace_editor tool are: view, create, str_replace, insert",
            ),
        ),
        (
            json!({"command": "view", "path": s(&five), "replace_all": true}),
            invalid("unknown argument \"replace_all\""),
        ),
        (view(&d.path("missing.txt")), not_found(&d.path("missing.txt"))),
    ];
    for (args, want) in cases {
        check(&mut sess, args, want);
    }
    // A FIFO is not a file: refused without blocking.
    mkfifo(&d.path("pipe"));
    check(
        &mut sess,
        view(&d.path("pipe")),
        error(
            "FS_NOT_REGULAR_FILE",
            format!("cannot read \"{}\": not a regular file", d.path("pipe").display()),
        ),
    );
}

#[test]
fn directory_listing_is_two_levels_without_hidden_or_dependency_entries() {
    let d = Daemon::start();
    for (rel, body) in [
        ("proj/a.txt", ""),
        ("proj/b.txt", ""),
        ("proj/.env", ""),
        ("proj/.git/config", ""),
        ("proj/node_modules/x/index.js", ""),
        ("proj/__pycache__/m.pyc", ""),
        ("proj/src/main.rs", ""),
        ("proj/src/.hidden", ""),
        ("proj/src/deep/inner.txt", ""),
        ("proj/src/node_modules/y.js", ""),
    ] {
        d.write(rel, body);
    }
    std::fs::create_dir(d.path("proj/z-dir")).unwrap();
    let mut sess = d.session_with_config(ON);
    let p = d.path("proj");
    let q = p.display();
    check(
        &mut sess,
        view(&p),
        text(format!(
            "Here's the files and directories up to 2 levels deep in {q}, excluding hidden items, node_modules and __pycache__:\n{q}/\n{q}/a.txt\n{q}/b.txt\n{q}/src/\n{q}/src/deep/\n{q}/src/main.rs\n{q}/z-dir/"
        )),
    );
    // A hidden directory named directly is still listed.
    let git = d.path("proj/.git");
    check(
        &mut sess,
        view(&git),
        text(format!(
            "Here's the files and directories up to 2 levels deep in {g}, excluding hidden items, node_modules and __pycache__:\n{g}/\n{g}/config",
            g = git.display()
        )),
    );
    check(
        &mut sess,
        json!({"command": "view", "path": s(&p), "view_range": [1, 2]}),
        invalid(
            "Invalid `view_range` parameter: [1, 2]. The `view_range` parameter is not allowed when `path` points to a directory.",
        ),
    );
    // Only view works on a directory.
    let dir_only = |p: &Path| {
        error(
            "FS_NOT_REGULAR_FILE",
            format!(
                "The path {} is a directory and only the `view` command can be used on directories",
                p.display()
            ),
        )
    };
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&p), "old_str": "a", "new_str": "b"}),
        dir_only(&p),
    );
    check(
        &mut sess,
        json!({"command": "insert", "path": s(&p), "insert_line": 0, "new_str": "b"}),
        dir_only(&p),
    );
    check(&mut sess, json!({"command": "create", "path": s(&p), "file_text": "x"}), exists(&p));
}

#[test]
fn long_views_keep_their_prefix_and_end_with_the_notice() {
    let d = Daemon::start();
    let lines: Vec<String> = (1..=30).map(|i| format!("line {i:02}")).collect();
    d.write("long.txt", lines.join("\n") + "\n");
    for i in 0..30 {
        d.write(&format!("big/f{i:02}"), "");
    }
    let file = d.path("long.txt");
    let dir = d.path("big");
    // Each numbered line is 15 characters: the cut falls inside the fourth line.
    let max = header(&file).chars().count() + 3 * 15 + 5;
    let mut sess = d.session_with_config(&format!("{ON}maxOutputChars = {max}\n"));
    let first3 = ["line 01", "line 02", "line 03"];
    let reply =
        check(&mut sess, view(&file), text(format!("{}{}{FILE_NOTICE}", header(&file), cat_n(1, &first3))));
    assert_eq!(reply.meta()["clipped"], json!(true));
    // A short range is not clipped.
    check(
        &mut sess,
        json!({"command": "view", "path": s(&file), "view_range": [29, -1]}),
        viewed(&file, 29, &["line 29", "line 30"]),
    );

    let q = dir.display();
    let head = format!(
        "Here's the files and directories up to 2 levels deep in {q}, excluding hidden items, node_modules and __pycache__:\n{q}/"
    );
    let entry = |i: usize| format!("\n{q}/f{i:02}");
    let max = head.chars().count() + 4 * entry(0).chars().count() + 2;
    let mut sess = d.session_with_config(&format!("{ON}maxOutputChars = {max}\n"));
    let kept: String = (0..4).map(entry).collect();
    check(&mut sess, view(&dir), text(format!("{head}{kept}\n{DIR_NOTICE}")));
}

#[test]
fn create_is_guarded_creation() {
    let d = Daemon::start();
    d.write("old.txt", "old\n");
    let mut sess = d.session_with_config(ON);
    let new = d.path("new/deeper/file.txt");
    let created = |p: &Path| text(format!("File created successfully at: {}", p.display()));
    let reply = check(
        &mut sess,
        json!({"command": "create", "path": s(&new), "file_text": "hello\n"}),
        created(&new),
    );
    assert_eq!(d.read("new/deeper/file.txt"), b"hello\n");
    assert_eq!(reply.meta()["command"], json!("create"));
    assert_eq!(reply.meta()["affectedPaths"], json!([s(&new)]));
    assert_eq!(reply.meta()["diffs"][0]["newText"], json!("hello\n"));
    // The path is taken now, by this session's create or anyone's file: never overwritten.
    check(&mut sess, json!({"command": "create", "path": s(&new), "file_text": "again"}), exists(&new));
    let old = d.path("old.txt");
    check(&mut sess, view(&old), viewed(&old, 1, &["old"]));
    check(&mut sess, json!({"command": "create", "path": s(&old), "file_text": "x"}), exists(&old));
    assert_eq!(d.read("old.txt"), b"old\n");
    // Empty content, and null placeholders for the fields create does not use.
    let blank = d.path("blank.txt");
    check(
        &mut sess,
        json!({"command": "create", "path": s(&blank), "file_text": "", "old_str": null, "new_str": null, "insert_line": null, "insert_text": null, "view_range": null}),
        created(&blank),
    );
    assert_eq!(d.read("blank.txt"), b"");
    check(
        &mut sess,
        json!({"command": "create", "path": s(&d.path("x.txt"))}),
        invalid("Parameter `file_text` is required for command: create"),
    );
    check(
        &mut sess,
        json!({"command": "create", "path": s(&d.path("x.txt")), "file_text": null}),
        invalid("Parameter `file_text` is required for command: create"),
    );
    check(
        &mut sess,
        json!({"command": "create", "path": s(&d.path("x.txt")), "file_text": 5}),
        invalid("Invalid `file_text` parameter: 5. It should be a string."),
    );
    // Its own create is an observation: str_replace needs no view first.
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&new), "old_str": "hello", "new_str": "bye"}),
        replaced(&new, 1, &["bye"]),
    );
    assert_eq!(d.read("new/deeper/file.txt"), b"bye\n");
}

#[test]
fn str_replace_texts_and_snippets() {
    let d = Daemon::start();
    d.write("doc.txt", "This is a test file.\nThis file is for testing purposes.");
    d.write("same-line.txt", "aa aa\nb\n");
    d.write("blocks.txt", "x\ny\nz\nx\ny\n");
    d.write("remove.txt", "Line 1\nLine to remove\nLine 3");
    d.write("tabs.py", "def test():\n\tprint(\"Hello, World!\")");
    d.write("crlf.txt", "one\r\ntwo\r\nthree\r\n");
    d.write("bom.txt", "\u{feff}alpha\nbeta\n");
    let long: Vec<String> = (1..=700).map(|i| format!("Line {i}")).collect();
    d.write("long.txt", long.join("\n") + "\n");
    let mut sess = d.session_with_config(ON);
    let doc = d.path("doc.txt");
    let sr = |p: &Path, old: &str, new: &str| json!({"command": "str_replace", "path": s(p), "old_str": old, "new_str": new});

    check(&mut sess, sr(&doc, "test file", "sample file"), not_observed(&doc));
    check(
        &mut sess,
        view(&doc),
        viewed(&doc, 1, &["This is a test file.", "This file is for testing purposes."]),
    );
    let reply = check(
        &mut sess,
        sr(&doc, "test file", "sample file"),
        replaced(&doc, 1, &["This is a sample file.", "This file is for testing purposes."]),
    );
    assert_eq!(d.read("doc.txt"), b"This is a sample file.\nThis file is for testing purposes.");
    assert_eq!(reply.meta()["replacements"], json!(1));
    assert_eq!(
        reply.meta()["diffs"][0]["oldText"],
        json!("This is a test file.\nThis file is for testing purposes.")
    );
    // Its own edit is an observation too.
    check(
        &mut sess,
        sr(&doc, "nope", "x"),
        error(
            "FS_EDIT_NOT_FOUND",
            format!(
                "No replacement was performed, old_str `nope` did not appear verbatim in {}.",
                doc.display()
            ),
        ),
    );
    check(
        &mut sess,
        sr(&doc, "file", "x"),
        error(
            "FS_AMBIGUOUS_EDIT",
            "No replacement was performed. Multiple occurrences of old_str `file` in lines [1, 2]. Please ensure it is unique.",
        ),
    );
    // Start lines, deduplicated; a multi-line old_str reports where each match starts.
    let same = d.path("same-line.txt");
    check(&mut sess, view(&same), viewed(&same, 1, &["aa aa", "b"]));
    check(
        &mut sess,
        sr(&same, "aa", "c"),
        error(
            "FS_AMBIGUOUS_EDIT",
            "No replacement was performed. Multiple occurrences of old_str `aa` in lines [1]. Please ensure it is unique.",
        ),
    );
    let blocks = d.path("blocks.txt");
    check(&mut sess, view(&blocks), viewed(&blocks, 1, &["x", "y", "z", "x", "y"]));
    check(
        &mut sess,
        sr(&blocks, "x\ny", "q"),
        error(
            "FS_AMBIGUOUS_EDIT",
            "No replacement was performed. Multiple occurrences of old_str `x\ny` in lines [1, 4]. Please ensure it is unique.",
        ),
    );
    assert_eq!(d.read("blocks.txt"), b"x\ny\nz\nx\ny\n");

    // Argument rules: omission deletes, null is refused, empty and identical strings are refused.
    let remove = d.path("remove.txt");
    check(&mut sess, view(&remove), viewed(&remove, 1, &["Line 1", "Line to remove", "Line 3"]));
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&remove), "old_str": "Line to remove\n", "new_str": null}),
        invalid(
            "Invalid `new_str` parameter: null. To delete `old_str`, omit `new_str` instead of passing null.",
        ),
    );
    check(
        &mut sess,
        sr(&remove, "", "x"),
        invalid("No replacement was performed. `old_str` must not be empty."),
    );
    check(
        &mut sess,
        sr(&remove, "Line 1", "Line 1"),
        invalid(
            "Invalid `new_str` parameter: Line 1. No replacement was performed. `new_str` and `old_str` must be different.",
        ),
    );
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&remove), "new_str": "x"}),
        invalid("Parameter `old_str` is required for command: str_replace"),
    );
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&remove), "old_str": "Line to remove\n", "file_text": null, "insert_line": null, "view_range": null}),
        replaced(&remove, 1, &["Line 1", "Line 3"]),
    );
    assert_eq!(d.read("remove.txt"), b"Line 1\nLine 3");

    // Tabs are preserved on disk and in the snippet.
    let tabs = d.path("tabs.py");
    check(&mut sess, view(&tabs), viewed(&tabs, 1, &["def test():", "\tprint(\"Hello, World!\")"]));
    check(
        &mut sess,
        sr(&tabs, "def test():\n\tprint(\"Hello, World!\")", "def test():\n\tprint(\"Hello, Universe!\")"),
        replaced(&tabs, 1, &["def test():", "\tprint(\"Hello, Universe!\")"]),
    );
    assert_eq!(d.read("tabs.py"), b"def test():\n\tprint(\"Hello, Universe!\")");

    // LF text matches a CRLF file; new lines take CRLF; the BOM stays.
    let crlf = d.path("crlf.txt");
    check(&mut sess, view(&crlf), viewed(&crlf, 1, &["one", "two", "three"]));
    check(
        &mut sess,
        sr(&crlf, "one\ntwo", "uno\ndos\ntres"),
        replaced(&crlf, 1, &["uno", "dos", "tres", "three"]),
    );
    assert_eq!(d.read("crlf.txt"), b"uno\r\ndos\r\ntres\r\nthree\r\n");
    let bom = d.path("bom.txt");
    check(&mut sess, view(&bom), viewed(&bom, 1, &["alpha", "beta"]));
    check(&mut sess, sr(&bom, "alpha", "ALPHA"), replaced(&bom, 1, &["ALPHA", "beta"]));
    assert_eq!(d.read("bom.txt"), "\u{feff}ALPHA\nbeta\n".as_bytes());

    // The snippet is four lines either side, plus the lines the replacement added.
    let long = d.path("long.txt");
    check(
        &mut sess,
        json!({"command": "view", "path": s(&long), "view_range": [1, 1]}),
        viewed(&long, 1, &["Line 1"]),
    );
    check(
        &mut sess,
        sr(&long, "Line 500\n", "500 new\n500 more\n"),
        replaced(
            &long,
            496,
            &[
                "Line 496", "Line 497", "Line 498", "Line 499", "500 new", "500 more", "Line 501",
                "Line 502", "Line 503", "Line 504", "Line 505",
            ],
        ),
    );
}

#[test]
fn observation_policy_guards_str_replace_and_insert() {
    let d = Daemon::start();
    d.write("f.txt", "one\ntwo\n");
    let f = d.path("f.txt");
    let mut sess = d.session_with_config(ON);
    let sr = json!({"command": "str_replace", "path": s(&f), "old_str": "one", "new_str": "uno"});
    let ins = json!({"command": "insert", "path": s(&f), "insert_line": 0, "new_str": "zero"});
    check(&mut sess, sr.clone(), not_observed(&f));
    check(&mut sess, ins.clone(), not_observed(&f));
    check(&mut sess, view(&f), viewed(&f, 1, &["one", "two"]));
    // Changed on disk after the view: stale, before any matching.
    std::fs::write(&f, "one\ntwo\nthree\n").unwrap();
    let stale = error(
        "FS_STALE_VERSION",
        format!(
            "cannot modify \"{}\": file changed on disk since it was read — re-read the file, then retry",
            f.display()
        ),
    );
    check(&mut sess, sr.clone(), stale);
    check(&mut sess, view(&f), viewed(&f, 1, &["one", "two", "three"]));
    check(&mut sess, sr, replaced(&f, 1, &["uno", "two", "three"]));
    check(&mut sess, ins, inserted(&f, 1, &["zero", "uno", "two", "three"]));
    assert_eq!(d.read("f.txt"), b"zero\nuno\ntwo\nthree\n");
    // Deleted behind the session's back: the re-read records confirmed absence, every later
    // str_replace says not found, and create recovers the path.
    std::fs::remove_file(&f).unwrap();
    let sr = json!({"command": "str_replace", "path": s(&f), "old_str": "zero", "new_str": "0"});
    check(&mut sess, sr.clone(), not_found(&f));
    check(&mut sess, sr.clone(), not_found(&f));
    check(
        &mut sess,
        json!({"command": "create", "path": s(&f), "file_text": "zero\n"}),
        text(format!("File created successfully at: {}", f.display())),
    );
    check(&mut sess, sr, replaced(&f, 1, &["0"]));
    // Observations do not cross sessions.
    let mut other = d.session_with_config(ON);
    check(
        &mut other,
        json!({"command": "insert", "path": s(&f), "insert_line": 1, "new_str": "x"}),
        not_observed(&f),
    );
}

#[test]
fn policy_off_still_edits_on_what_it_re_read() {
    let d = Daemon::start();
    d.write("f.txt", "a\nb\n");
    let f = d.path("f.txt");
    let mut sess = d.session_with_config(OFF);
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&f), "old_str": "a", "new_str": "A"}),
        replaced(&f, 1, &["A", "b"]),
    );
    check(
        &mut sess,
        json!({"command": "insert", "path": s(&f), "insert_line": 2, "new_str": "c"}),
        inserted(&f, 1, &["A", "b", "c"]),
    );
    assert_eq!(d.read("f.txt"), b"A\nb\nc\n");
    // An external change is simply what the next re-read sees.
    std::fs::write(&f, "x\n").unwrap();
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&f), "old_str": "x", "new_str": "y"}),
        replaced(&f, 1, &["y"]),
    );
    check(&mut sess, json!({"command": "create", "path": s(&f), "file_text": "z"}), exists(&f));
    check(
        &mut sess,
        json!({"command": "str_replace", "path": s(&d.path("nope")), "old_str": "x", "new_str": "y"}),
        not_found(&d.path("nope")),
    );
}

/// (initial, insert_line, text, file after, snippet's first line, snippet)
type InsertCase = (&'static str, i64, &'static str, &'static str, usize, &'static [&'static str]);

#[test]
fn insert_boundaries() {
    let d = Daemon::start();
    let mut sess = d.session_with_config(ON);
    let cases: &[InsertCase] = &[
        ("a\nb\n", 0, "X", "X\na\nb\n", 1, &["X", "a", "b"]),
        ("a\nb\n", 1, "X", "a\nX\nb\n", 1, &["a", "X", "b"]),
        ("a\nb\n", 2, "X", "a\nb\nX\n", 1, &["a", "b", "X"]),
        // No trailing newline: inserting at the end starts a new line and adds none after.
        ("a\nb", 2, "X", "a\nb\nX", 1, &["a", "b", "X"]),
        ("a\nb", 1, "X\nY", "a\nX\nY\nb", 1, &["a", "X", "Y", "b"]),
        ("a\nb", 0, "X", "X\na\nb", 1, &["X", "a", "b"]),
        ("", 0, "X", "X", 1, &["X"]),
        // The text is literal: its own trailing newline is an empty line.
        ("a\nb\n", 1, "X\n", "a\nX\n\nb\n", 1, &["a", "X", "", "b"]),
        ("a\nb\n", 1, "", "a\n\nb\n", 1, &["a", "", "b"]),
        // CRLF files get CRLF for the inserted lines; the BOM stays first.
        ("a\r\nb\r\n", 1, "X\nY", "a\r\nX\r\nY\r\nb\r\n", 1, &["a", "X", "Y", "b"]),
        ("a\r\nb", 2, "X", "a\r\nb\r\nX", 1, &["a", "b", "X"]),
        ("\u{feff}a\nb\n", 0, "X", "\u{feff}X\na\nb\n", 1, &["X", "a", "b"]),
        // The snippet: three lines before the boundary, the new lines, four after.
        (
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n",
            10,
            "new",
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\nnew\n11\n12\n13\n14\n15\n16\n",
            7,
            &["7", "8", "9", "10", "new", "11", "12", "13", "14"],
        ),
    ];
    for (i, (initial, line, new, after, first, snippet)) in cases.iter().enumerate() {
        let rel = format!("ins{i}.txt");
        d.write(&rel, initial);
        let p = d.path(&rel);
        let reply = sess.call("str_replace_editor", view(&p));
        assert!(!reply.is_error(), "{}", reply.json);
        check(
            &mut sess,
            json!({"command": "insert", "path": s(&p), "insert_line": line, "new_str": new}),
            inserted(&p, *first, snippet),
        );
        assert_eq!(
            String::from_utf8(d.read(&rel)).unwrap(),
            *after,
            "insert {new:?} at {line} into {initial:?}"
        );
    }

    d.write("t.txt", "a\nb\n");
    let t = d.path("t.txt");
    check(&mut sess, view(&t), viewed(&t, 1, &["a", "b"]));
    let ins = |extra: Value| {
        let mut args = json!({"command": "insert", "path": s(&t)});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    };
    let range = |n: &str| {
        invalid(format!(
            "Invalid `insert_line` parameter: {n}. It should be within the range of lines of the file: [0, 2]"
        ))
    };
    check(&mut sess, ins(json!({"insert_line": 3, "new_str": "x"})), range("3"));
    check(&mut sess, ins(json!({"insert_line": -1, "new_str": "x"})), range("-1"));
    check(
        &mut sess,
        ins(json!({"new_str": "x"})),
        invalid("Parameter `insert_line` is required for command: insert"),
    );
    check(
        &mut sess,
        ins(json!({"insert_line": null, "new_str": "x"})),
        invalid("Parameter `insert_line` is required for command: insert"),
    );
    check(
        &mut sess,
        ins(json!({"insert_line": "2", "new_str": "x"})),
        invalid("Invalid `insert_line` parameter: \"2\". It should be an integer."),
    );
    check(
        &mut sess,
        ins(json!({"insert_line": 1})),
        invalid("Parameter `new_str` is required for command: insert"),
    );
    check(
        &mut sess,
        ins(json!({"insert_line": 1, "new_str": "x", "insert_text": "y"})),
        invalid(
            "Parameters `new_str` and `insert_text` were both given with different values; give only one of them for command: insert",
        ),
    );
    assert_eq!(d.read("t.txt"), b"a\nb\n");
    // insert_text is accepted, alone or agreeing with new_str, and null placeholders are fine.
    check(
        &mut sess,
        ins(json!({"insert_line": 1, "insert_text": "y", "new_str": null, "old_str": null})),
        inserted(&t, 1, &["a", "y", "b"]),
    );
    check(
        &mut sess,
        ins(json!({"insert_line": 0, "insert_text": "w", "new_str": "w"})),
        inserted(&t, 1, &["w", "a", "y", "b"]),
    );
    assert_eq!(d.read("t.txt"), b"w\na\ny\nb\n");
}

#[test]
fn schema_visibility_and_description() {
    let d = Daemon::start();
    // Off by default.
    let mut plain = d.session();
    let reply = plain.call("str_replace_editor", view(&d.root));
    assert_eq!(reply.code(), Some("UNKNOWN_TOOL"));

    let dir = tempfile::tempdir().unwrap();
    let schemas = |config: &str| -> Vec<Value> {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(tools_bin())
            .arg("schemas")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let guidance = |config: &str| -> String {
        let path = dir.path().join("g.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(tools_bin())
            .arg("guidance")
            .arg("--config")
            .arg(&path)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let names = |v: &[Value]| v.iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&schemas("")), ["read", "write", "edit"]);
    let on = schemas(ON);
    assert_eq!(names(&on), ["read", "write", "edit", "str_replace_editor"]);
    let editor = &on[3];
    assert!(
        editor["description"]
            .as_str()
            .unwrap()
            .starts_with("Custom editing tool for viewing, creating and editing files\n")
    );
    assert_eq!(editor["input_schema"]["required"], json!(["command", "path"]));
    assert_eq!(
        editor["input_schema"]["properties"]["command"]["enum"],
        json!(["view", "create", "str_replace", "insert"])
    );
    assert_eq!(editor["input_schema"]["properties"]["new_str"]["type"], json!(["string", "null"]));
    let custom = schemas(&format!("{ON}description = \"Edit files.\"\n"));
    assert_eq!(custom[3]["description"], json!("Edit files."));
    // The editor adds no guidance section.
    assert_eq!(guidance(ON), guidance(""));
}

#[test]
fn large_files_stream_to_the_same_views() {
    let d = Daemon::start();
    d.write("five.txt", "one\ntwo\nthree\nfour\nfive\n");
    d.write("crlf.txt", "\u{feff}a\r\n\tb\r\nc");
    d.write("empty.txt", "");
    d.write("bin.txt", "ok\n\0\n");
    let lines: Vec<String> = (1..=3000).map(|i| format!("line {i}")).collect();
    d.write("long.txt", lines.join("\n") + "\n");
    let mut small = d.session_with_config(ON);
    // Every file here is at or above readStreamMinSize for this session.
    let mut streaming = d.session_with_config(&format!("{ON}readStreamMinSize = 1\n"));
    let v =
        |rel: &str, range: Value| json!({"command": "view", "path": s(&d.path(rel)), "view_range": range});
    for args in [
        v("five.txt", Value::Null),
        v("five.txt", json!([2, 4])),
        v("five.txt", json!([5, -1])),
        v("five.txt", json!([0, 2])),
        v("five.txt", json!([6, -1])),
        v("five.txt", json!([2, 6])),
        v("five.txt", json!([3, 1])),
        v("crlf.txt", Value::Null),
        v("empty.txt", Value::Null),
        v("empty.txt", json!([1, -1])),
        v("bin.txt", Value::Null),
        v("long.txt", Value::Null),
        v("long.txt", json!([1500, 1502])),
        v("long.txt", json!([2999, -1])),
        v("long.txt", json!([2999, 3001])),
    ] {
        let a = small.call("str_replace_editor", args.clone());
        let b = streaming.call("str_replace_editor", args.clone());
        assert_eq!((a.text(), a.code()), (b.text(), b.code()), "{args}");
    }
    let bin = d.path("bin.txt");
    let reply = streaming.call("str_replace_editor", view(&bin));
    assert_eq!(reply.code(), Some("FS_NOT_TEXT"), "{}", reply.json);
    // A streamed view counts as a read.
    let five = d.path("five.txt");
    check(
        &mut streaming,
        json!({"command": "str_replace", "path": s(&five), "old_str": "two", "new_str": "2"}),
        replaced(&five, 1, &["one", "2", "three", "four", "five"]),
    );
}

#[test]
fn escalation_covers_the_re_read_and_the_mutation() {
    let outside = tempfile::tempdir().unwrap();
    let outside_dir = std::fs::canonicalize(outside.path()).unwrap();
    let d = Daemon::start_with(&[], "escalation = \"client\"\nmax_mode = \"danger-full-access\"\n");
    let rules = outside_dir.join("rules.toml");
    std::fs::write(
        &rules,
        format!(
            "[[rule]]\nmode = \"danger-full-access\"\npath = \"{}/**\"\ndecision = \"allow\"\n",
            outside_dir.display()
        ),
    )
    .unwrap();
    let mut sess = d.session_with_config(&format!("{ON}escalationRules = \"{}\"\n", rules.display()));
    let f = outside_dir.join("x.txt");
    let with = |mut args: Value| {
        args["sandbox_permissions"] = json!("danger-full-access");
        args["justification"] = json!("the user asked for this file");
        args
    };
    let create = json!({"command": "create", "path": s(&f), "file_text": "a\n"});
    let denied = sess.call("str_replace_editor", create.clone());
    assert_eq!(denied.code(), Some("FS_SANDBOX_DENIED"), "{}", denied.json);
    assert!(!f.exists());
    check(&mut sess, with(create), text(format!("File created successfully at: {}", f.display())));
    // str_replace and insert re-read outside the roots too: the approval covers the whole call.
    let sr = json!({"command": "str_replace", "path": s(&f), "old_str": "a", "new_str": "b"});
    assert_eq!(sess.call("str_replace_editor", sr.clone()).code(), Some("FS_SANDBOX_DENIED"));
    check(&mut sess, with(sr), replaced(&f, 1, &["b"]));
    let ins = json!({"command": "insert", "path": s(&f), "insert_line": 1, "new_str": "c"});
    check(&mut sess, with(ins), inserted(&f, 1, &["b", "c"]));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "b\nc\n");
}
