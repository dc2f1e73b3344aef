//! The read tool through the real daemon: the envelope and its three footers, long-line
//! truncation, the byte cap, offsets, client caps, and every refusal text (not found, not a
//! regular file, not text, bad arguments).

use crate::common;

use common::*;
use serde_json::{Value, json};

/// What one read call must answer: the full success text, or an error code and text.
enum Want {
    Text(String),
    Error(&'static str, String),
}

#[track_caller]
fn check(s: &mut ToolSession, args: Value, want: Want) {
    let reply = s.call("read", args.clone());
    match want {
        Want::Text(text) => {
            assert!(!reply.is_error(), "read {args}: expected success, got {}", reply.json);
            assert_eq!(reply.text(), text, "read {args}");
        }
        Want::Error(code, text) => {
            assert!(reply.is_error(), "read {args}: expected an error, got {}", reply.json);
            assert_eq!(reply.code(), Some(code), "read {args}: {}", reply.json);
            assert_eq!(reply.text(), text, "read {args}");
        }
    }
}

fn text(d: &Daemon, rel: &str, lines: &[&str], footer: &str) -> Want {
    Want::Text(envelope(&d.path(rel), lines, footer))
}

#[test]
fn windows_and_footers() {
    let d = Daemon::start();
    d.write("five.txt", "a\nb\nc\nd\ne\n");
    d.write("noeol.txt", "a\nb");
    d.write("newline.txt", "\n");
    d.write("empty.txt", "");
    d.write("crlf.txt", "a\r\nb\r\n");
    d.write("lone-cr.txt", "x\ry\nz\r\n");
    d.write("bom.txt", "\u{feff}hello\nworld\n");
    d.write("bom-crlf.txt", "\u{feff}one\r\ntwo\r\n");
    d.write("mid-bom.txt", "a\n\u{feff}b\n");
    let mut s = d.session();
    let all5 = ["1: a", "2: b", "3: c", "4: d", "5: e"];
    let cases: Vec<(Value, Want)> = vec![
        (json!({"file_path": "five.txt"}), text(&d, "five.txt", &all5, "(End of file - total 5 lines)")),
        (
            json!({"file_path": "five.txt", "offset": 2, "limit": 2}),
            text(&d, "five.txt", &["2: b", "3: c"], "(Showing lines 2-3 of 5. Use offset=4 to continue.)"),
        ),
        (
            json!({"file_path": "five.txt", "limit": 1}),
            text(&d, "five.txt", &["1: a"], "(Showing lines 1-1 of 5. Use offset=2 to continue.)"),
        ),
        (
            json!({"file_path": "five.txt", "offset": 4, "limit": 2}),
            text(&d, "five.txt", &["4: d", "5: e"], "(End of file - total 5 lines)"),
        ),
        (
            json!({"file_path": "five.txt", "offset": 5}),
            text(&d, "five.txt", &["5: e"], "(End of file - total 5 lines)"),
        ),
        (
            json!({"file_path": "five.txt", "offset": 6}),
            Want::Error(
                "INVALID_ARGS",
                format!("Error: offset 6 is out of range for \"{}\" (5 lines)", d.path("five.txt").display()),
            ),
        ),
        // An absolute path reads the same file as the relative one.
        (
            json!({"file_path": d.path("five.txt").display().to_string(), "offset": 3, "limit": 1}),
            text(&d, "five.txt", &["3: c"], "(Showing lines 3-3 of 5. Use offset=4 to continue.)"),
        ),
        // A last line without a newline still counts; a lone newline is one empty line.
        (
            json!({"file_path": "noeol.txt"}),
            text(&d, "noeol.txt", &["1: a", "2: b"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "newline.txt"}),
            text(&d, "newline.txt", &["1: "], "(End of file - total 1 lines)"),
        ),
        // The empty file: 0 lines, and offset 1 is in range for it.
        (json!({"file_path": "empty.txt"}), text(&d, "empty.txt", &[], "(End of file - total 0 lines)")),
        (
            json!({"file_path": "empty.txt", "offset": 1}),
            text(&d, "empty.txt", &[], "(End of file - total 0 lines)"),
        ),
        (
            json!({"file_path": "empty.txt", "offset": 2}),
            Want::Error(
                "INVALID_ARGS",
                format!(
                    "Error: offset 2 is out of range for \"{}\" (0 lines)",
                    d.path("empty.txt").display()
                ),
            ),
        ),
        // A CR before LF belongs to the ending and is not shown; a lone CR is line text.
        (
            json!({"file_path": "crlf.txt"}),
            text(&d, "crlf.txt", &["1: a", "2: b"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "lone-cr.txt"}),
            text(&d, "lone-cr.txt", &["1: x\ry", "2: z"], "(End of file - total 2 lines)"),
        ),
        // A leading BOM is hidden; one later in the file is text.
        (
            json!({"file_path": "bom.txt"}),
            text(&d, "bom.txt", &["1: hello", "2: world"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "bom-crlf.txt"}),
            text(&d, "bom-crlf.txt", &["1: one", "2: two"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "bom.txt", "offset": 2}),
            text(&d, "bom.txt", &["2: world"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "mid-bom.txt"}),
            text(&d, "mid-bom.txt", &["1: a", "2: \u{feff}b"], "(End of file - total 2 lines)"),
        ),
    ];
    for (args, want) in cases {
        check(&mut s, args, want);
    }
    // Reads never alter a file.
    assert_eq!(d.read("bom-crlf.txt"), "\u{feff}one\r\ntwo\r\n".as_bytes());
}

#[test]
fn long_lines_are_truncated_by_characters() {
    let d = Daemon::start();
    let a2000 = "a".repeat(2000);
    let e2000 = "é".repeat(2000);
    d.write("exact.txt", format!("{a2000}\nshort\n"));
    d.write("long.txt", format!("{}\nshort\n", "a".repeat(2500)));
    d.write("wide.txt", format!("{}\n", "é".repeat(2001)));
    d.write("long-crlf.txt", format!("{}\r\nnext\r\n", "b".repeat(3000)));
    let mut s = d.session();
    let trunc = |body: &str| format!("1: {body}... (line truncated to 2000 chars)");
    let cases: Vec<(Value, Want)> = vec![
        (
            json!({"file_path": "exact.txt"}),
            text(&d, "exact.txt", &[&format!("1: {a2000}"), "2: short"], "(End of file - total 2 lines)"),
        ),
        (
            json!({"file_path": "long.txt"}),
            text(&d, "long.txt", &[&trunc(&a2000), "2: short"], "(End of file - total 2 lines)"),
        ),
        // Characters, not bytes: 2000 two-byte characters are kept.
        (
            json!({"file_path": "wide.txt"}),
            text(&d, "wide.txt", &[&trunc(&e2000)], "(End of file - total 1 lines)"),
        ),
        (
            json!({"file_path": "long-crlf.txt"}),
            text(
                &d,
                "long-crlf.txt",
                &[&trunc(&"b".repeat(2000)), "2: next"],
                "(End of file - total 2 lines)",
            ),
        ),
    ];
    for (args, want) in cases {
        check(&mut s, args, want);
    }
}

#[test]
fn the_byte_cap_ends_the_window_with_the_capped_footer() {
    let d = Daemon::start();
    // 100-byte lines: 512 of them are exactly 51200 bytes of kept text.
    let line = |n: usize| format!("{n:03}{}", "x".repeat(97));
    let body = |count: usize| (1..=count).map(|n| format!("{}\n", line(n))).collect::<String>();
    d.write("600.txt", body(600));
    d.write("512.txt", body(512));
    d.write("513.txt", body(513));
    let numbered =
        |from: usize, to: usize| (from..=to).map(|n| format!("{n}: {}", line(n))).collect::<Vec<_>>();
    let mut s = d.session();
    let want = |rel: &str, from: usize, to: usize, footer: &str| {
        let lines = numbered(from, to);
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        Want::Text(envelope(&d.path(rel), &lines, footer))
    };
    let cases: Vec<(Value, Want)> = vec![
        (
            json!({"file_path": "600.txt"}),
            want("600.txt", 1, 512, "(Output capped. Showing lines 1-512. Use offset=513 to continue.)"),
        ),
        (
            json!({"file_path": "600.txt", "offset": 513}),
            want("600.txt", 513, 600, "(End of file - total 600 lines)"),
        ),
        (
            json!({"file_path": "600.txt", "offset": 50}),
            want("600.txt", 50, 561, "(Output capped. Showing lines 50-561. Use offset=562 to continue.)"),
        ),
        // The line limit can end the window before the byte cap does.
        (
            json!({"file_path": "600.txt", "limit": 10}),
            want("600.txt", 1, 10, "(Showing lines 1-10 of 600. Use offset=11 to continue.)"),
        ),
        // Exactly 51200 bytes fit.
        (json!({"file_path": "512.txt"}), want("512.txt", 1, 512, "(End of file - total 512 lines)")),
        (
            json!({"file_path": "513.txt"}),
            want("513.txt", 1, 512, "(Output capped. Showing lines 1-512. Use offset=513 to continue.)"),
        ),
    ];
    for (args, want) in cases {
        check(&mut s, args, want);
    }
}

#[test]
fn refusals_have_the_seed_texts() {
    let d = Daemon::start();
    d.write("a.txt", "a\n");
    d.write("bad-utf8.txt", b"ok\n\xff\xfe\n");
    d.write("nul.txt", b"ok\n\0\n");
    d.write("cut.txt", b"ok\n\xe2\x82");
    d.write("overlong.txt", b"\xc0\xaf\n");
    d.write("surrogate.txt", b"\xed\xa0\x80\n");
    std::fs::create_dir(d.path("dir")).unwrap();
    mkfifo(&d.path("fifo"));
    let mut s = d.session();
    let p = |rel: &str| d.path(rel).display().to_string();
    let not_text = |rel: &str| {
        Want::Error(
            "FS_NOT_TEXT",
            format!(
                "Error: cannot read \"{}\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)",
                p(rel)
            ),
        )
    };
    let bad_path = || Want::Error("INVALID_ARGS", "Error: file_path must be a non-empty string".to_owned());
    let cases: Vec<(Value, Want)> = vec![
        (json!({"file_path": ""}), bad_path()),
        (json!({}), bad_path()),
        (json!({"file_path": 7}), bad_path()),
        (json!({"file_path": null}), bad_path()),
        (
            json!({"file_path": "a.txt", "limit": 2001}),
            Want::Error("INVALID_ARGS", "Error: limit must be less than or equal to 2000".to_owned()),
        ),
        (
            json!({"file_path": "missing.txt"}),
            Want::Error("FS_NOT_FOUND", format!("Error: cannot read \"{}\": not found", p("missing.txt"))),
        ),
        (
            json!({"file_path": "no/such/dir.txt"}),
            Want::Error(
                "FS_NOT_FOUND",
                format!("Error: cannot read \"{}\": not found", p("no/such/dir.txt")),
            ),
        ),
        (
            json!({"file_path": "dir"}),
            Want::Error(
                "FS_NOT_REGULAR_FILE",
                format!("Error: cannot read \"{}\": not a regular file", p("dir")),
            ),
        ),
        (
            json!({"file_path": d.root.display().to_string()}),
            Want::Error(
                "FS_NOT_REGULAR_FILE",
                format!("Error: cannot read \"{}\": not a regular file", d.root.display()),
            ),
        ),
        // A FIFO is refused without opening it, so the call cannot hang.
        (
            json!({"file_path": "fifo"}),
            Want::Error(
                "FS_NOT_REGULAR_FILE",
                format!("Error: cannot read \"{}\": not a regular file", p("fifo")),
            ),
        ),
        (json!({"file_path": "bad-utf8.txt"}), not_text("bad-utf8.txt")),
        (json!({"file_path": "nul.txt"}), not_text("nul.txt")),
        (json!({"file_path": "cut.txt"}), not_text("cut.txt")),
        (json!({"file_path": "overlong.txt"}), not_text("overlong.txt")),
        (json!({"file_path": "surrogate.txt"}), not_text("surrogate.txt")),
        // Not text even when the window would end before the bad bytes.
        (json!({"file_path": "nul.txt", "limit": 1}), not_text("nul.txt")),
    ];
    for (args, want) in cases {
        check(&mut s, args, want);
    }
    // The files are never altered.
    assert_eq!(d.read("bad-utf8.txt"), b"ok\n\xff\xfe\n");
    assert_eq!(d.read("nul.txt"), b"ok\n\0\n");
    // The session still works after every refusal.
    ok(&s.read("a.txt"), &envelope(&d.path("a.txt"), &["1: a"], "(End of file - total 1 lines)"));
}

#[test]
fn a_client_config_lowers_the_caps() {
    let d = Daemon::start();
    let five = "aaaaa\n".repeat(10);
    let eight = "bbbbbbbb\n".repeat(10);
    d.write("five.txt", &five);
    d.write("eight.txt", &eight);
    d.write("long.txt", "abcdefghij\nxyz\n");
    let mut s = d.session_with_config("readLimit = 3\nreadMaxBytes = 20\n");
    let cases: Vec<(Value, Want)> = vec![
        // readLimit is the default limit: 3 lines of 5 bytes fit in 20 bytes.
        (
            json!({"file_path": "five.txt"}),
            text(
                &d,
                "five.txt",
                &["1: aaaaa", "2: aaaaa", "3: aaaaa"],
                "(Showing lines 1-3 of 10. Use offset=4 to continue.)",
            ),
        ),
        (
            json!({"file_path": "five.txt", "offset": 9}),
            text(&d, "five.txt", &["9: aaaaa", "10: aaaaa"], "(End of file - total 10 lines)"),
        ),
        // Two 8-byte lines fit in 20 bytes, a third does not.
        (
            json!({"file_path": "eight.txt"}),
            text(
                &d,
                "eight.txt",
                &["1: bbbbbbbb", "2: bbbbbbbb"],
                "(Output capped. Showing lines 1-2. Use offset=3 to continue.)",
            ),
        ),
        (
            json!({"file_path": "eight.txt", "offset": 3, "limit": 1}),
            text(&d, "eight.txt", &["3: bbbbbbbb"], "(Showing lines 3-3 of 10. Use offset=4 to continue.)"),
        ),
        // readLimit is also the maximum limit.
        (
            json!({"file_path": "five.txt", "limit": 4}),
            Want::Error("INVALID_ARGS", "Error: limit must be less than or equal to 3".to_owned()),
        ),
        (
            json!({"file_path": "five.txt", "limit": 3}),
            text(
                &d,
                "five.txt",
                &["1: aaaaa", "2: aaaaa", "3: aaaaa"],
                "(Showing lines 1-3 of 10. Use offset=4 to continue.)",
            ),
        ),
    ];
    for (args, want) in cases {
        check(&mut s, args, want);
    }

    let mut s = d.session_with_config("readMaxLineLength = 5\n");
    check(
        &mut s,
        json!({"file_path": "long.txt"}),
        text(
            &d,
            "long.txt",
            &["1: abcde... (line truncated to 5 chars)", "2: xyz"],
            "(End of file - total 2 lines)",
        ),
    );
}
