//! Large files through the read tool: files at or above readStreamMinSize (10 MiB) stream from
//! the daemon in chunks, with the daemon's memory bounded, long lines cut, the byte cap ending
//! the stream early, and bad bytes anywhere in what is read refused as FS_NOT_TEXT.

use crate::common;

use std::io::Write;

use common::*;
use serde_json::json;

const MIB: usize = 1 << 20;

/// 65536 numbered 16-byte lines: exactly 1 MiB.
fn mib_of_lines() -> Vec<u8> {
    let mut buf = Vec::with_capacity(MIB);
    for i in 0..MIB / 16 {
        writeln!(buf, "L{i:014}").unwrap();
    }
    assert_eq!(buf.len(), MIB);
    buf
}

/// The text of 1-based line `n` of a file made of `mib_of_lines` blocks.
fn line_text(n: usize) -> String {
    format!("L{:014}", (n - 1) % (MIB / 16))
}

/// Writes `pieces` in order to `rel` (real data, not sparse).
fn write_file(d: &Daemon, rel: &str, pieces: &[&[u8]]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(d.path(rel)).unwrap());
    for piece in pieces {
        f.write_all(piece).unwrap();
    }
    f.flush().unwrap();
}

fn numbered(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|n| format!("{n}: {}", line_text(n))).collect()
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_200_mib_file_streams_in_bounded_daemon_memory() {
    let d = Daemon::start();
    let block = mib_of_lines();
    let blocks: Vec<&[u8]> = std::iter::repeat_n(block.as_slice(), 200).collect();
    write_file(&d, "big.txt", &blocks);
    let total = 200 * MIB / 16;
    let p = d.path("big.txt");
    let mut s = d.session();
    // Warm up the daemon's pools with a small read before taking the baseline.
    d.write("small.txt", "x\n");
    assert!(!s.read("small.txt").is_error());
    let before = d.peak_rss_kib();

    // The default window: 2000 lines, then the whole file is counted for the footer.
    let lines = numbered(1, 2000);
    ok(
        &s.read("big.txt"),
        &envelope(
            &p,
            &as_strs(&lines),
            &format!("(Showing lines 1-2000 of {total}. Use offset=2001 to continue.)"),
        ),
    );
    // A window near the end.
    let lines = numbered(total - 2, total);
    ok(
        &s.call("read", json!({"file_path": "big.txt", "offset": total - 2})),
        &envelope(&p, &as_strs(&lines), &format!("(End of file - total {total} lines)")),
    );
    let after = d.peak_rss_kib();
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "the daemon's peak RSS grew by {} KiB (from {before} KiB to {after} KiB) reading a 200 MiB file",
        after.saturating_sub(before)
    );
}

#[test]
fn streamed_long_lines_are_cut_and_the_byte_cap_ends_the_stream() {
    let d = Daemon::start();
    // One 11 MiB line, then a short one.
    let long = vec![b'a'; 11 * MIB];
    write_file(&d, "one-long.txt", &[&long, b"\nsecond\n"]);
    // Thirty 400 KiB lines: each is cut to 2000 characters, and 25 of those fill the 51200 bytes.
    let mut wide = Vec::new();
    for i in 0..30u8 {
        wide.push(vec![b'a' + (i % 26); 400 * 1024]);
    }
    let wide_refs: Vec<Vec<u8>> = wide.iter().map(|l| [l.as_slice(), b"\n"].concat()).collect();
    let wide_slices: Vec<&[u8]> = wide_refs.iter().map(Vec::as_slice).collect();
    write_file(&d, "wide.txt", &wide_slices);
    let mut s = d.session();
    let cut =
        |n: usize, c: char| format!("{n}: {}... (line truncated to 2000 chars)", c.to_string().repeat(2000));
    ok(
        &s.read("one-long.txt"),
        &envelope(&d.path("one-long.txt"), &[&cut(1, 'a'), "2: second"], "(End of file - total 2 lines)"),
    );
    ok(
        &s.call("read", json!({"file_path": "one-long.txt", "offset": 2})),
        &envelope(&d.path("one-long.txt"), &["2: second"], "(End of file - total 2 lines)"),
    );
    let lines: Vec<String> = (1..=25).map(|n| cut(n, char::from(b'a' + ((n - 1) % 26) as u8))).collect();
    ok(
        &s.read("wide.txt"),
        &envelope(
            &d.path("wide.txt"),
            &as_strs(&lines),
            "(Output capped. Showing lines 1-25. Use offset=26 to continue.)",
        ),
    );
    let lines: Vec<String> = (26..=30).map(|n| cut(n, char::from(b'a' + ((n - 1) % 26) as u8))).collect();
    ok(
        &s.call("read", json!({"file_path": "wide.txt", "offset": 26})),
        &envelope(&d.path("wide.txt"), &as_strs(&lines), "(End of file - total 30 lines)"),
    );
}

#[test]
fn bad_bytes_deep_in_a_streamed_file_are_not_text() {
    let d = Daemon::start();
    let block = mib_of_lines();
    let twelve: Vec<&[u8]> = std::iter::repeat_n(block.as_slice(), 12).collect();
    let with = |tail: &'static [u8]| {
        let mut v = twelve.clone();
        v.insert(11, tail);
        v
    };
    write_file(&d, "ff.txt", &with(b"bad \xff byte\n"));
    write_file(&d, "nul.txt", &with(b"bad \0 byte\n"));
    write_file(&d, "lone-continuation.txt", &with(b"\x80\n"));
    let mut cut_at_end = twelve.clone();
    cut_at_end.push(b"\xe2\x82");
    write_file(&d, "cut-at-end.txt", &cut_at_end);
    // Three-byte characters on 13-byte lines: chunk boundaries fall inside characters.
    let euro_line = "€€€€\n".as_bytes();
    let euros: Vec<u8> = euro_line.repeat(12 * MIB / euro_line.len() + 1);
    write_file(&d, "euro.txt", &[&euros]);

    let mut s = d.session();
    for rel in ["ff.txt", "nul.txt", "lone-continuation.txt", "cut-at-end.txt"] {
        let text = format!(
            "Error: cannot read \"{}\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)",
            d.path(rel).display()
        );
        err(&s.read(rel), "FS_NOT_TEXT", &text);
        // A window far before the bad bytes still reads them to count the lines.
        err(&s.call("read", json!({"file_path": rel, "limit": 1})), "FS_NOT_TEXT", &text);
    }
    let total = 12 * MIB / euro_line.len() + 1;
    ok(
        &s.call("read", json!({"file_path": "euro.txt", "offset": total})),
        &envelope(
            &d.path("euro.txt"),
            &[&format!("{total}: €€€€")],
            &format!("(End of file - total {total} lines)"),
        ),
    );
}
