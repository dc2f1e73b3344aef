//! Applying an update's chunks to a file's text: locate each chunk, then rebuild the text.
//!
//! Untouched lines keep their exact bytes, including their own endings; changed and inserted
//! lines take the file's first ending. A non-empty result always ends with a line ending (Codex
//! terminates a final unterminated line, conformance 014).

use crate::align::align;
use crate::lines::{FileText, split};
use crate::model::Chunk;
use crate::seek::seek;

/// A chunk that could not be placed. `message` does not name the file; the caller adds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HunkError {
    pub message: String,
    /// The chunk's `line` (1-based line in the patch).
    pub chunk_line: usize,
    pub kind: HunkErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkErrorKind {
    /// The chunk's old lines (as written in the patch) were not found after the cursor.
    ExpectedLines { lines: Vec<String> },
    /// The `@@` context line was not found after the cursor.
    Context { context: String },
}

impl HunkError {
    /// Codex's own wording with the path, for callers that want it verbatim:
    /// `Failed to find expected lines in <path>:\n<lines>` or
    /// `Failed to find context '<ctx>' in <path>`.
    pub fn codex_message(&self, path: &str) -> String {
        match &self.kind {
            HunkErrorKind::ExpectedLines { lines } => {
                format!("Failed to find expected lines in {path}:\n{}", lines.join("\n"))
            }
            HunkErrorKind::Context { context } => {
                format!("Failed to find context '{context}' in {path}")
            }
        }
    }
}

/// Where an output line comes from.
#[derive(Debug)]
enum Piece<'c> {
    /// A file line left alone: written with its own bytes.
    Keep(usize),
    /// A line from the patch: written with the preferred ending.
    New(&'c str),
}

/// Replace `old_len` file lines at `start` with `pieces`.
#[derive(Debug)]
struct Edit<'c> {
    chunk_line: usize,
    start: usize,
    old_len: usize,
    pieces: Vec<Piece<'c>>,
}

/// Applies the chunks of one `*** Update File` to the file's current text, in order.
///
/// A cursor moves forward through the file: a chunk's `@@` context is sought at or after it,
/// then the chunk's old lines after that. A chunk with no old lines inserts right after its
/// context line, or at the end of the file when it has none (or has `*** End of File`).
pub fn apply_chunks(original: &str, chunks: &[Chunk]) -> Result<String, HunkError> {
    let text = split(original);
    let texts: Vec<&str> = text.lines.iter().map(|l| l.text).collect();
    let mut edits: Vec<Edit<'_>> = Vec::with_capacity(chunks.len());
    let mut cursor = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            let Some(at) = seek(&texts, std::slice::from_ref(context), cursor, false) else {
                return Err(context_error(&texts, chunk, context, cursor));
            };
            cursor = at + 1;
        }
        if let Some(added) = pure_addition(chunk) {
            // Codex puts every pure addition at the end of the file, even under `@@ context`
            // (openai/codex#30946); inserting after the context is what the model asked for.
            let at = if chunk.context.is_some() && !chunk.end_of_file { cursor } else { texts.len() };
            edits.push(Edit {
                chunk_line: chunk.line,
                start: at,
                old_len: 0,
                pieces: added.iter().map(|l| Piece::New(l.as_str())).collect(),
            });
            continue;
        }
        let Some((at, old, new)) = locate(&texts, chunk, cursor) else {
            return Err(expected_lines_error(&texts, chunk, cursor));
        };
        let pieces = align(old, new)
            .into_iter()
            .zip(new)
            .map(|(kept, line)| match kept {
                Some(i) => Piece::Keep(at + i),
                None => Piece::New(line),
            })
            .collect();
        edits.push(Edit { chunk_line: chunk.line, start: at, old_len: old.len(), pieces });
        cursor = at + old.len();
    }
    render(&text, edits, original.len())
}

/// The lines a chunk adds when it removes nothing. Trailing blank lines that sit on both sides
/// are dropped first: they are the separator before the next header, and as context they would
/// make Codex put the addition in front of the first blank line of the file.
fn pure_addition(chunk: &Chunk) -> Option<&[String]> {
    let (mut old, mut new) = (&chunk.old_lines[..], &chunk.new_lines[..]);
    while let (Some(o), Some(n)) = (old.last(), new.last())
        && o.is_empty()
        && n.is_empty()
    {
        old = &old[..old.len() - 1];
        new = &new[..new.len() - 1];
    }
    old.is_empty().then_some(new)
}

/// Finds the chunk's old lines at or after `cursor`. As in Codex, when that fails and the old
/// lines end with a blank line, the blank line is dropped (from the new lines too when they
/// end with one) and the search retried; unlike Codex, this repeats for several blank lines.
fn locate<'c>(
    texts: &[&str],
    chunk: &'c Chunk,
    cursor: usize,
) -> Option<(usize, &'c [String], &'c [String])> {
    let (mut old, mut new) = (&chunk.old_lines[..], &chunk.new_lines[..]);
    loop {
        if let Some(at) = seek(texts, old, cursor, chunk.end_of_file) {
            return Some((at, old, new));
        }
        // Never strip down to nothing: an empty pattern "matches" anywhere.
        if old.len() < 2 || !old.last().is_some_and(String::is_empty) {
            return None;
        }
        old = &old[..old.len() - 1];
        if new.last().is_some_and(String::is_empty) {
            new = &new[..new.len() - 1];
        }
    }
}

fn context_error(texts: &[&str], chunk: &Chunk, context: &str, cursor: usize) -> HunkError {
    let hint = match seek(texts, std::slice::from_ref(&context), 0, false) {
        Some(at) if at < cursor => format!(
            " (it occurs earlier, at line {}, above the previous hunk; hunks must follow file order)",
            at + 1
        ),
        _ => String::new(),
    };
    HunkError {
        message: format!("failed to find context '{context}'{hint}"),
        chunk_line: chunk.line,
        kind: HunkErrorKind::Context { context: context.to_string() },
    }
}

fn expected_lines_error(texts: &[&str], chunk: &Chunk, cursor: usize) -> HunkError {
    let where_ = if chunk.end_of_file { " at the end of the file" } else { "" };
    // Say where the lines are when they exist but were out of reach, the usual reason a model
    // cannot see why its hunk "does not match".
    let hint = match locate(texts, &unanchored(chunk), 0) {
        Some((at, _, _)) if chunk.end_of_file => format!(" (they occur at line {})", at + 1),
        Some((at, _, _)) if at < cursor => format!(
            " (they occur earlier, at line {}, above the previous hunk; hunks must follow file order)",
            at + 1
        ),
        _ => String::new(),
    };
    HunkError {
        message: format!("failed to find expected lines{where_}{hint}:\n{}", chunk.old_lines.join("\n")),
        chunk_line: chunk.line,
        kind: HunkErrorKind::ExpectedLines { lines: chunk.old_lines.clone() },
    }
}

fn unanchored(chunk: &Chunk) -> Chunk {
    Chunk {
        context: None,
        old_lines: chunk.old_lines.clone(),
        new_lines: Vec::new(),
        end_of_file: false,
        line: chunk.line,
    }
}

fn render(text: &FileText<'_>, mut edits: Vec<Edit<'_>>, capacity: usize) -> Result<String, HunkError> {
    // Stable: insertions at the same line keep patch order.
    edits.sort_by_key(|e| e.start);
    let mut out = String::with_capacity(capacity);
    if text.bom {
        out.push_str(fsd_text::BOM);
    }
    let mut push = |line: &str, ending: &str| {
        out.push_str(line);
        out.push_str(if ending.is_empty() { text.preferred } else { ending });
    };
    let keep = |i: usize| (text.lines[i].text, text.lines[i].ending);
    let mut pos = 0;
    for edit in edits {
        if edit.start < pos {
            // The cursor only moves forward, so edits cannot overlap; guard anyway rather
            // than write a garbled file.
            return Err(HunkError {
                message: "hunks overlap".to_string(),
                chunk_line: edit.chunk_line,
                kind: HunkErrorKind::ExpectedLines { lines: Vec::new() },
            });
        }
        for i in pos..edit.start {
            let (t, e) = keep(i);
            push(t, e);
        }
        for piece in edit.pieces {
            match piece {
                Piece::Keep(i) => {
                    let (t, e) = keep(i);
                    push(t, e);
                }
                Piece::New(line) => push(line, text.preferred),
            }
        }
        pos = edit.start + edit.old_len;
    }
    for i in pos..text.lines.len() {
        let (t, e) = keep(i);
        push(t, e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Op;
    use crate::parse::parse;

    /// Chunks of a patch whose single operation updates some file; `body` is what follows the
    /// `*** Update File:` line.
    fn chunks_of(body: &str) -> Vec<Chunk> {
        let patch = parse(&format!("*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch\n")).unwrap();
        match patch.ops.into_iter().next() {
            Some(Op::Update { chunks, .. }) => chunks,
            other => panic!("not an update: {other:?}"),
        }
    }

    fn check(original: &str, body: &str, expected: &str) {
        match apply_chunks(original, &chunks_of(body)) {
            Ok(got) => assert_eq!(got, expected, "original {original:?}\npatch:\n{body}"),
            Err(e) => panic!("{e}\noriginal {original:?}\npatch:\n{body}"),
        }
    }

    fn check_err(original: &str, body: &str, message: &str, chunk_line: usize) {
        match apply_chunks(original, &chunks_of(body)) {
            Ok(got) => panic!("expected {message:?}, got {got:?}\npatch:\n{body}"),
            Err(e) => {
                assert_eq!(e.message, message, "original {original:?}\npatch:\n{body}");
                assert_eq!(e.chunk_line, chunk_line, "chunk line for {message:?}");
            }
        }
    }

    #[test]
    fn replaces_and_keeps() {
        let cases: &[(&str, &str, &str)] = &[
            ("line1\nline2\n", "@@\n-line2\n+changed", "line1\nchanged\n"),
            // Conformance 003: two chunks in file order.
            (
                "line1\nline2\nline3\nline4\n",
                "@@\n-line2\n+changed2\n@@\n-line4\n+changed4",
                "line1\nchanged2\nline3\nchanged4\n",
            ),
            // Conformance 014: a final unterminated line gets an ending.
            (
                "no newline at end",
                "@@\n-no newline at end\n+first line\n+second line",
                "first line\nsecond line\n",
            ),
            ("a\nb", "@@\n-a\n+A", "A\nb\n"),
            // Conformance 021: deletion only.
            ("line1\nline2\nline3\n", "@@\n line1\n-line2\n line3", "line1\nline3\n"),
            // Conformance 022: End of File anchors at the tail.
            (
                "first\nsecond\n",
                "@@\n first\n-second\n+second updated\n*** End of File",
                "first\nsecond updated\n",
            ),
            ("x\ny\nx\n", "@@\n-x\n+X\n*** End of File", "x\ny\nX\n"),
            // Deleting everything leaves an empty file, not a lone newline.
            ("a\nb\n", "@@\n-a\n-b", ""),
            // The first chunk may omit `@@`.
            ("a\nb\n", " a\n-b\n+c", "a\nc\n"),
            // Repeated-line ordering (Codex preserve-mode test).
            ("a\nb", "@@\n-a\n-b\n+b\n+b\n+a", "b\nb\na\n"),
            // Earliest match after the cursor wins.
            ("x\nx\nx\n", "@@\n-x\n+1\n@@\n-x\n+2", "1\n2\nx\n"),
            // Conformance 019: UTF-8 text.
            (
                "line1\nnaïve café\nline3\n",
                "@@\n line1\n-naïve café\n+naïve café ✅",
                "line1\nnaïve café ✅\nline3\n",
            ),
        ];
        for (original, body, expected) in cases {
            check(original, body, expected);
        }
    }

    #[test]
    fn line_endings() {
        let cases: &[(&str, &str, &str)] = &[
            // Conformance 023: CRLF file, LF patch.
            (
                "one\r\ntwo\r\nthree\r\n",
                "@@\n-one\n+ONE\n two\n+between\n three",
                "ONE\r\ntwo\r\nbetween\r\nthree\r\n",
            ),
            // Conformance 024: a lone CR ends a line; kept lines keep their own endings.
            (
                "one\r\ntwo\rthree\nfour\r\n",
                "@@\n one\n two\n-three\n+THREE\n four",
                "one\r\ntwo\rTHREE\r\nfour\r\n",
            ),
            // CR-only file.
            ("a\rb\rc\r", "@@\n-b\n+B\n+B2", "a\rB\rB2\rc\r"),
            // The unterminated last line takes the file's first ending.
            ("one\r\ntwo", "@@\n-one\n+ONE", "ONE\r\ntwo\r\n"),
            ("one\ntwo\r\n", "@@\n-two\n+TWO", "one\nTWO\n"),
            // Untouched neighbours keep mixed endings.
            ("a\nb\r\nc\rd", "@@\n-c\n+C", "a\nb\r\nC\nd\n"),
            // CRLF patch text against an LF file.
            ("a\nb\n", "@@\r\n-a\r\n+A\r", "A\nb\n"),
            // Appending after a trailing blank CRLF line (Codex preserve-mode test).
            ("a\r\n\r\n", "@@\n+new", "a\r\n\r\nnew\r\n"),
            // A file with no ending at all uses LF.
            ("", "@@\n+x", "x\n"),
            ("solo", "@@\n+x", "solo\nx\n"),
        ];
        for (original, body, expected) in cases {
            check(original, body, expected);
        }
    }

    #[test]
    fn fuzzy_matching_keeps_file_bytes_for_context() {
        let cases: &[(&str, &str, &str)] = &[
            // Trailing whitespace in the file: the context line keeps it, the replaced line
            // is written as in the patch.
            ("ctx   \nold  \n", "@@\n ctx\n-old\n+new", "ctx   \nnew\n"),
            // Indentation drift.
            ("    if x:\n        y()\n", "@@\n if x:\n-    y()\n+    z()", "    if x:\n    z()\n"),
            // Unicode punctuation: ASCII in the patch finds the typographic file text.
            (
                "import asyncio  # local import \u{2013} avoids top\u{2011}level dep\n",
                "@@\n-import asyncio  # local import - avoids top-level dep\n+import asyncio  # fixed",
                "import asyncio  # fixed\n",
            ),
            ("say \u{201C}hi\u{201D}\u{00A0}now\n", "@@\n-say \"hi\" now\n+x", "x\n"),
        ];
        for (original, body, expected) in cases {
            check(original, body, expected);
        }
    }

    #[test]
    fn contexts_and_additions() {
        let two_blocks = "fn a() {\n    body\n}\nfn b() {\n    body\n}\n";
        let classes = "class A:\n    def f():\n        pass\nclass B:\n    def f():\n        pass\n";
        let cases: &[(&str, &str, &str)] = &[
            // Conformance 016: a bare pure addition goes to the end.
            (
                "line1\nline2\n",
                "@@\n+added line 1\n+added line 2",
                "line1\nline2\nadded line 1\nadded line 2\n",
            ),
            // Under a context it goes right after the context line (Codex: end of file).
            ("a\nb\nc\n", "@@ a\n+x", "a\nx\nb\nc\n"),
            // `*** End of File` sends it to the end even under a context.
            ("a\nb\nc\n", "@@ a\n+x\n*** End of File", "a\nb\nc\nx\n"),
            // A blank separator line after the `+` lines stays a pure addition.
            ("a\n\nb\n", "@@\n+x\n", "a\n\nb\nx\n"),
            ("a\n\nb\n", "@@ b\n+x\n\n", "a\n\nb\nx\n"),
            // A pure addition then a removal: the addition still lands at the end.
            ("line1\nline2\nline3\n", "@@\n+added\n@@\n-line2\n+two", "line1\ntwo\nline3\nadded\n"),
            // The context picks the second of two identical blocks.
            (
                two_blocks,
                "@@ fn b() {\n-    body\n+    changed",
                "fn a() {\n    body\n}\nfn b() {\n    changed\n}\n",
            ),
            // The context matches a whole line through the trim pass only.
            (
                classes,
                "@@ def f():\n-        pass\n+        return 1",
                &classes.replacen("        pass", "        return 1", 1),
            ),
            // Chained contexts narrow the search.
            (
                classes,
                "@@ class B:\n@@ def f():\n-        pass\n+        return 2",
                "class A:\n    def f():\n        pass\nclass B:\n    def f():\n        return 2\n",
            ),
            // A context-only chunk changes nothing by itself.
            ("a\nb\n", "@@ a\n@@ b\n+c", "a\nb\nc\n"),
            // Unified-diff header: the function-line tail is the context.
            (
                two_blocks,
                "@@ -4,3 +4,3 @@ fn b() {\n-    body\n+    x",
                "fn a() {\n    body\n}\nfn b() {\n    x\n}\n",
            ),
            // Insertion right after a context that is the last line.
            ("a\nb", "@@ b\n+c", "a\nb\nc\n"),
        ];
        for (original, body, expected) in cases {
            check(original, body, expected);
        }
    }

    #[test]
    fn trailing_blank_context() {
        // Codex drops a trailing blank context line when the lines are not found with it.
        check("a\nb\nc\n", "@@\n-b\n+B\n", "a\nB\nc\n");
        // Several trailing blank lines (Codex drops only one).
        check("a\nb\nc\n", "@@\n-b\n+B\n\n", "a\nB\nc\n");
        // When the file has the blank line, it is matched and kept.
        check("a\nb\n\nc\n", "@@\n-b\n+B\n", "a\nB\n\nc\n");
        // A blank line in the middle is real context: `b, "", d` is not in `a b c d`.
        check_err("a\nb\nc\nd\n", "@@\n-b\n+B\n\n-d\n+D", "failed to find expected lines:\nb\n\nd", 3);
        // Removing a blank line that does not exist fails rather than matching anywhere.
        check_err("a\nb\n", "@@\n-\n+x", "failed to find expected lines:\n", 3);
    }

    #[test]
    fn bom() {
        check("\u{feff}first\nsecond\n", "@@\n-first\n+FIRST", "\u{feff}FIRST\nsecond\n");
        check("\u{feff}a\r\nb\r\n", "@@\n a\n+x", "\u{feff}a\r\nx\r\nb\r\n");
        check("\u{feff}only\n", "@@\n-only", "\u{feff}");
        check("\u{feff}", "@@\n+x", "\u{feff}x\n");
    }

    #[test]
    fn errors() {
        let cases: &[(&str, &str, &str, usize)] = &[
            // Conformance 006.
            ("line1\nline2\n", "@@\n-missing\n+changed", "failed to find expected lines:\nmissing", 3),
            ("a\nb\n", "@@ nope\n-a", "failed to find context 'nope'", 3),
            ("a\nb\n", "@@\n-a\n+A\n@@ zzz\n-b", "failed to find context 'zzz'", 6),
            // Out of order: the hint says where the lines are.
            (
                "a\nb\nc\n",
                "@@\n-c\n+C\n@@\n-a\n+A",
                "failed to find expected lines (they occur earlier, at line 1, above the previous \
                 hunk; hunks must follow file order):\na",
                6,
            ),
            (
                "a\nb\nc\n",
                "@@ c\n+x\n@@ a\n+y",
                "failed to find context 'a' (it occurs earlier, at line 1, above the previous \
                 hunk; hunks must follow file order)",
                5,
            ),
            // End of File: lines elsewhere do not count.
            (
                "x\ny\n",
                "@@\n-x\n+X\n*** End of File",
                "failed to find expected lines at the end of the file (they occur at line 1):\nx",
                3,
            ),
            (
                "x\ny\n",
                "@@\n-q\n*** End of File",
                "failed to find expected lines at the end of the file:\nq",
                3,
            ),
            // Overlapping End of File chunks are refused (Codex preserve mode).
            (
                "a\nb\n",
                "@@\n-b\n+B\n*** End of File\n@@\n-b\n+C\n*** End of File",
                "failed to find expected lines at the end of the file (they occur at line 2):\nb",
                7,
            ),
            // An empty file has nothing to match.
            ("", "@@\n-a", "failed to find expected lines:\na", 3),
            // The quoted lines include a trailing blank context line.
            ("a\n", "@@\n-zz\n", "failed to find expected lines:\nzz\n", 3),
        ];
        for (original, body, message, line) in cases {
            check_err(original, body, message, *line);
        }
    }

    #[test]
    fn codex_wording_with_path() {
        let e = apply_chunks("a\n", &chunks_of("@@\n-x\n-y")).unwrap_err();
        assert_eq!(e.kind, HunkErrorKind::ExpectedLines { lines: vec!["x".into(), "y".into()] });
        assert_eq!(e.codex_message("/w/f.txt"), "Failed to find expected lines in /w/f.txt:\nx\ny");
        let e = apply_chunks("a\n", &chunks_of("@@ ctx\n-a")).unwrap_err();
        assert_eq!(e.codex_message("/w/f.txt"), "Failed to find context 'ctx' in /w/f.txt");
        assert_eq!(e.to_string(), "failed to find context 'ctx'");
    }

    #[test]
    fn no_chunks_only_terminates() {
        assert_eq!(apply_chunks("a\r\nb", &[]).unwrap(), "a\r\nb\r\n");
        assert_eq!(apply_chunks("", &[]).unwrap(), "");
    }
}
