//! The editor's text rules, pure and unit-tested: CONTRACT's line model (a line ends at `\n`, so
//! `a\nb\n` and `a\nb` both have 2 lines and the empty file has 0, with no phantom last line), the
//! `cat -n` numbering, literal matching that reads CRLF as LF exactly as the daemon's editText
//! does, line-boundary insertion, and prefix clipping. The BOM, ending and line-model rules are
//! `fsd-text`'s, re-exported here, so the editor and the daemon cannot drift apart.

pub use fsd_text::{count_lines, first_ending, lf, lines, split_bom, with_ending};

/// The notice after a clipped file view (the reference implementation's wording).
pub const FILE_CLIPPED: &str = "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>";

/// The notice after a clipped directory view (openhands-aci's directory wording).
pub const DIR_CLIPPED: &str = "<response clipped><NOTE>Due to the max output limit, only part of this directory has been shown to you. You should use `ls -la` instead to view large directories incrementally.</NOTE>";

/// `cat -n` style: `%6d\t<text>\n` per line, numbered from `first`.
pub fn number(lines: &[&str], first: usize) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:>6}\t{line}\n", first + i));
    }
    out
}

/// Start offsets of the non-overlapping literal matches of `old` in `text` (both LF), the same
/// matches the daemon's editText finds.
pub fn match_starts(text: &str, old: &str) -> Vec<usize> {
    if old.is_empty() {
        return Vec::new();
    }
    text.match_indices(old).map(|(at, _)| at).collect()
}

/// The 1-based line holding byte `at` of LF text.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The distinct start lines of the matches (`starts` ascending, as [`match_starts`] gives them),
/// in order: one pass over `text`, whatever the number of matches.
pub fn start_lines(text: &str, starts: &[usize]) -> Vec<usize> {
    fsd_text::start_lines(text, starts.iter().copied()).collect()
}

/// Inserts `text` as whole lines after line `after` (0 = the top) of raw `body`.
///
/// The reference implementation's semantics under CONTRACT's line model: the inserted text becomes
/// its own line(s), so a line ending is added after it when a line follows or when the file ended
/// with one, and before it when it goes after an unterminated last line; nothing else is added,
/// so insertion never changes whether the file ends with a newline (no implicit trailing newline,
/// the seed). Added endings and the text's own bare `\n`s take the file's first line ending.
/// `Err(n)` when `after` is beyond the file's `n` lines.
pub fn insert(body: &str, after: usize, text: &str) -> Result<String, usize> {
    let n = count_lines(body);
    if after > n {
        return Err(n);
    }
    let ending = first_ending(body);
    let text = with_ending(text, ending);
    let unterminated = !body.is_empty() && !body.ends_with('\n');
    if after == n && unterminated {
        return Ok(format!("{body}{ending}{text}"));
    }
    // The byte offset just past the `after`-th line ending.
    let at = if after == 0 {
        0
    } else {
        body.match_indices('\n').nth(after - 1).map(|(i, _)| i + 1).unwrap_or(body.len())
    };
    let (head, tail) = body.split_at(at);
    let sep = if tail.is_empty() && !body.ends_with('\n') { "" } else { ending };
    Ok(format!("{head}{text}{sep}{tail}"))
}

/// Keeps the longest prefix of `text` within `max_chars` characters, cut after a whole line when
/// the prefix holds a line break, and appends `notice`. `None` when `text` fits.
pub fn clip(text: &str, max_chars: usize, notice: &str) -> Option<String> {
    let cut = text.char_indices().nth(max_chars).map(|(i, _)| i)?;
    let prefix = &text[..cut];
    let keep = match prefix.rfind('\n') {
        Some(i) => &prefix[..=i],
        None => prefix,
    };
    Some(format!("{keep}{notice}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_model_has_no_phantom_line() {
        assert_eq!(lines(""), Vec::<&str>::new());
        assert_eq!(lines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(lines("a\nb"), vec!["a", "b"]);
        assert_eq!(lines("\n"), vec![""]);
        assert_eq!(lines("a\n\n"), vec!["a", ""]);
        assert_eq!(
            (count_lines(""), count_lines("a\r\nb\r\n"), count_lines("a\nb"), count_lines("\n")),
            (0, 2, 2, 1)
        );
    }

    #[test]
    fn numbering_is_cat_n() {
        assert_eq!(number(&["a", "\tb"], 9), "     9\ta\n    10\t\tb\n");
        assert_eq!(number(&["x"], 1234567), "1234567\tx\n");
    }

    #[test]
    fn matches_report_distinct_start_lines() {
        let text = "test\ntest test\nx\n";
        let starts = match_starts(text, "test");
        assert_eq!(starts, vec![0, 5, 10]);
        assert_eq!(start_lines(text, &starts), vec![1, 2]);
        // Non-overlapping, as the daemon counts.
        assert_eq!(match_starts("aaa", "aa").len(), 1);
        let block = "a\nb\nc\na\nb\n";
        assert_eq!(start_lines(block, &match_starts(block, "a\nb")), vec![1, 4]);
        // Millions of matches on one line: one pass (it was one count from the top per match).
        let long = "a".repeat(4 << 20);
        assert_eq!(start_lines(&long, &match_starts(&long, "a")), vec![1]);
    }

    #[test]
    fn insert_table() {
        let check = |body: &str, after: usize, text: &str, want: Result<&str, usize>| {
            assert_eq!(
                insert(body, after, text).as_deref().map_err(|n| *n),
                want,
                "{body:?} @{after} {text:?}"
            );
        };
        check("a\nb\n", 0, "X", Ok("X\na\nb\n"));
        check("a\nb\n", 1, "X", Ok("a\nX\nb\n"));
        check("a\nb\n", 2, "X", Ok("a\nb\nX\n"));
        check("a\nb\n", 3, "X", Err(2));
        check("a\nb", 2, "X", Ok("a\nb\nX"));
        check("a\nb", 1, "X", Ok("a\nX\nb"));
        check("a\nb", 0, "X", Ok("X\na\nb"));
        check("", 0, "X", Ok("X"));
        check("", 1, "X", Err(0));
        check("a\nb\n", 1, "X\nY", Ok("a\nX\nY\nb\n"));
        // The text is literal: a trailing newline in it is an empty line of its own.
        check("a\nb\n", 1, "X\n", Ok("a\nX\n\nb\n"));
        check("a\nb\n", 1, "", Ok("a\n\nb\n"));
        // CRLF files: added endings and the text's bare LFs take CRLF; other bytes stay.
        check("a\r\nb\r\n", 1, "X\nY", Ok("a\r\nX\r\nY\r\nb\r\n"));
        check("a\r\nb", 2, "X", Ok("a\r\nb\r\nX"));
        check("a\r\nb\r\n", 2, "X", Ok("a\r\nb\r\nX\r\n"));
    }

    #[test]
    fn clipping_keeps_whole_lines() {
        assert_eq!(clip("abc\n", 4, "!"), None);
        assert_eq!(clip("ab\ncd\nef\n", 7, "!").as_deref(), Some("ab\ncd\n!"));
        assert_eq!(clip("abcdef", 3, "!").as_deref(), Some("abc!"));
        assert_eq!(clip("ééé\né", 2, "!").as_deref(), Some("éé!"));
    }

    #[test]
    fn endings() {
        assert_eq!(first_ending("a\r\nb\n"), "\r\n");
        assert_eq!(first_ending("ab"), "\n");
        assert_eq!(with_ending("x\ny\r\nz", "\r\n"), "x\r\ny\r\nz");
        assert_eq!(split_bom("\u{feff}a"), (fsd_text::BOM, "a"));
        assert_eq!(lf("a\r\nb\rc\n"), "a\nb\rc\n");
    }
}
