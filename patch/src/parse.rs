//! Parser for the patch text: boundaries, heredoc unwrap, operations and update chunks.
//!
//! It follows Codex's current parser where models depend on its behaviour, and reuses its error
//! wording because models are trained to react to those exact sentences. Line numbers count the
//! lines of the input as sent, so a report points at what the model wrote.

use crate::model::{Chunk, Op, Patch};

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File:";
const DELETE_FILE: &str = "*** Delete File:";
const UPDATE_FILE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";
const HEREDOC_OPENERS: [&str; 3] = ["<<EOF", "<<'EOF'", "<<\"EOF\""];

pub(crate) const FIRST_LINE_MSG: &str = "The first line of the patch must be '*** Begin Patch'";
pub(crate) const LAST_LINE_MSG: &str = "The last line of the patch must be '*** End Patch'";
pub(crate) const EMPTY_HUNK_MSG: &str = "Update hunk does not contain any lines";

/// A syntax error. `line` is 1-based in the input as sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    pub message: String,
    pub line: usize,
}

impl ParseError {
    fn new(message: impl Into<String>, line: usize) -> Self {
        ParseError { message: message.into(), line }
    }
}

#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    no: usize,
    text: &'a str,
}

/// Parses a whole patch. `*** Begin Patch` followed by `*** End Patch` is a valid, empty patch.
pub fn parse(input: &str) -> Result<Patch, ParseError> {
    let lines = split_lines(input);
    let body = patch_body(&lines)?;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        let text = line.text.trim();
        // Codex rejects blank lines between operations; models add them often and they carry
        // no meaning there, so they are skipped.
        if text.is_empty() {
            i += 1;
            continue;
        }
        if let Some(path) = header_path(text, ADD_FILE) {
            let (contents, next) = parse_add_lines(body, i + 1);
            ops.push(Op::Add { path: path.to_string(), contents, line: line.no });
            i = next;
        } else if let Some(path) = header_path(text, DELETE_FILE) {
            ops.push(Op::Delete { path: path.to_string(), line: line.no });
            i += 1;
        } else if let Some(path) = header_path(text, UPDATE_FILE) {
            let (op, next) = parse_update(body, i, path)?;
            ops.push(op);
            i = next;
        } else if text == END_PATCH {
            // An early `*** End Patch`: a repeated marker is harmless, real text after it is
            // what Codex refuses with the last-line message.
            match body[i + 1..].iter().find(|l| !l.text.trim().is_empty()) {
                None => break,
                Some(extra) => return Err(ParseError::new(LAST_LINE_MSG, extra.no)),
            }
        } else {
            return Err(invalid_header(text, line.no));
        }
    }
    Ok(Patch { ops })
}

/// Splits on `\n` and drops one trailing `\r` per line, as Codex does (`-old\r\r` keeps one).
fn split_lines(input: &str) -> Vec<Line<'_>> {
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    let mut pieces: Vec<&str> = input.split('\n').collect();
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    pieces
        .into_iter()
        .enumerate()
        .map(|(idx, text)| Line { no: idx + 1, text: text.strip_suffix('\r').unwrap_or(text) })
        .collect()
}

/// Returns the lines between the boundary markers, unwrapping a heredoc when the plain check
/// fails (Codex's lenient mode).
fn patch_body<'a, 'b>(lines: &'b [Line<'a>]) -> Result<&'b [Line<'a>], ParseError> {
    let outer = trim_blank(lines);
    let strict = check_boundaries(outer, 1);
    let Err(original) = strict else {
        return strict;
    };
    if let [first, .., last] = outer
        && outer.len() >= 4
        && HEREDOC_OPENERS.contains(&first.text.trim())
        && last.text.trim_end().ends_with("EOF")
    {
        return check_boundaries(trim_blank(&outer[1..outer.len() - 1]), first.no + 1);
    }
    Err(original)
}

fn check_boundaries<'a, 'b>(
    lines: &'b [Line<'a>],
    empty_line_no: usize,
) -> Result<&'b [Line<'a>], ParseError> {
    let Some(first) = lines.first() else {
        return Err(ParseError::new(FIRST_LINE_MSG, empty_line_no));
    };
    if first.text.trim() != BEGIN_PATCH {
        return Err(ParseError::new(FIRST_LINE_MSG, first.no));
    }
    match lines {
        [_, body @ .., last] if last.text.trim() == END_PATCH => Ok(body),
        _ => {
            let no = lines.last().map_or(first.no, |l| l.no);
            Err(ParseError::new(LAST_LINE_MSG, no))
        }
    }
}

/// Whole-text `trim()` in Codex, done on lines so that line numbers survive.
fn trim_blank<'a, 'b>(lines: &'b [Line<'a>]) -> &'b [Line<'a>] {
    let start = lines.iter().position(|l| !l.text.trim().is_empty()).unwrap_or(lines.len());
    let end = lines.iter().rposition(|l| !l.text.trim().is_empty()).map_or(start, |p| p + 1);
    &lines[start..end]
}

/// The path after a header marker. The space after the colon is optional here (Codex needs
/// it); a header with no path is not a header.
fn header_path<'a>(trimmed: &'a str, marker: &str) -> Option<&'a str> {
    let path = trimmed.strip_prefix(marker)?.trim_start();
    (!path.is_empty()).then_some(path)
}

fn invalid_header(text: &str, no: usize) -> ParseError {
    ParseError::new(
        format!(
            "'{text}' is not a valid hunk header. Valid hunk headers: \
             '*** Add File: {{path}}', '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
        no,
    )
}

/// Collects `+` lines. A blank line between two `+` lines is taken as an empty line of the new
/// file (the model dropped the `+`); blank lines after the last `+` line separate operations.
fn parse_add_lines(body: &[Line<'_>], mut i: usize) -> (String, usize) {
    let mut contents = String::new();
    let mut pending_blank = 0usize;
    while i < body.len() {
        let text = body[i].text;
        if let Some(rest) = text.strip_prefix('+') {
            for _ in 0..pending_blank {
                contents.push('\n');
            }
            pending_blank = 0;
            contents.push_str(rest);
            contents.push('\n');
        } else if text.trim().is_empty() {
            pending_blank += 1;
        } else {
            break;
        }
        i += 1;
    }
    (contents, i - pending_blank)
}

/// A chunk being collected; `lines` counts its context, `-` and `+` lines.
struct OpenChunk {
    chunk: Chunk,
    lines: usize,
}

impl OpenChunk {
    fn new(context: Option<String>, line: usize) -> Self {
        OpenChunk { chunk: Chunk { context, line, ..Chunk::default() }, lines: 0 }
    }

    fn push(&mut self, text: &str) {
        match text.chars().next() {
            Some('+') => self.chunk.new_lines.push(text[1..].to_string()),
            Some('-') => self.chunk.old_lines.push(text[1..].to_string()),
            Some(' ') => {
                self.chunk.old_lines.push(text[1..].to_string());
                self.chunk.new_lines.push(text[1..].to_string());
            }
            // An empty (or whitespace-only, e.g. a lone tab) line: empty context, as in Codex.
            _ => {
                self.chunk.old_lines.push(String::new());
                self.chunk.new_lines.push(String::new());
            }
        }
        self.lines += 1;
    }
}

fn is_chunk_line(text: &str) -> bool {
    text.starts_with([' ', '+', '-']) || text.trim().is_empty()
}

fn unexpected_line(text: &str, no: usize) -> ParseError {
    ParseError::new(
        format!(
            "Unexpected line found in update hunk: '{text}'. Every line should start with \
             ' ' (context line), '+' (added line), or '-' (removed line)"
        ),
        no,
    )
}

fn expected_marker(text: &str, no: usize) -> ParseError {
    ParseError::new(format!("Expected update hunk to start with a @@ context marker, got: '{text}'"), no)
}

/// Parses `*** Update File:` at `body[start]` and its chunks; returns the op and the index of
/// the first line after it.
fn parse_update(body: &[Line<'_>], start: usize, path: &str) -> Result<(Op, usize), ParseError> {
    let header_no = body[start].no;
    let mut move_to: Option<String> = None;
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut open: Option<OpenChunk> = None;
    let mut i = start + 1;
    while i < body.len() {
        let Line { no, text } = body[i];
        // Only column-0 markers count inside an update: ` *** Update File: b` is a context
        // line whose text is a header, as in Codex's current parser.
        let marker = text.trim_end();
        if chunks.is_empty()
            && open.is_none()
            && let Some(rest) = text.trim().strip_prefix(MOVE_TO)
        {
            if move_to.is_some() {
                return Err(ParseError::new(
                    format!("Update file hunk for path '{path}' has more than one '*** Move to:' line"),
                    no,
                ));
            }
            let dest = rest.trim();
            if dest.is_empty() {
                return Err(ParseError::new(
                    format!("Missing destination path after '*** Move to:' for path '{path}'"),
                    no,
                ));
            }
            move_to = Some(dest.to_string());
        } else if marker == END_OF_FILE {
            match open.take() {
                Some(mut o) if o.lines > 0 => {
                    o.chunk.end_of_file = true;
                    chunks.push(o.chunk);
                }
                Some(o) => return Err(ParseError::new(EMPTY_HUNK_MSG, o.chunk.line)),
                None => return Err(ParseError::new(EMPTY_HUNK_MSG, no)),
            }
        } else if marker.starts_with("***") {
            // A header, `*** End Patch`, or an unknown `***` line that the top level reports
            // as an invalid header, which says more than "unexpected line".
            break;
        } else if let Some(rest) = marker.strip_prefix("@@") {
            if let Some(o) = open.take() {
                close_on_next_header(o, &mut chunks);
            }
            open = Some(OpenChunk::new(chunk_context(rest), no));
        } else if let Some(o) = open.as_mut() {
            if is_chunk_line(text) {
                o.push(text);
            } else if o.lines == 0 {
                return Err(unexpected_line(text, no));
            } else {
                return Err(expected_marker(text, no));
            }
        } else if text.trim().is_empty() {
            // Blank lines before the first chunk or after `*** End of File` separate chunks.
        } else if chunks.is_empty() && is_chunk_line(text) {
            // Codex lets the first chunk omit its `@@`.
            let mut o = OpenChunk::new(None, no);
            o.push(text);
            open = Some(o);
        } else if chunks.is_empty() {
            return Err(unexpected_line(text, no));
        } else {
            return Err(expected_marker(text, no));
        }
        i += 1;
    }
    if let Some(o) = open {
        if o.lines == 0 {
            return Err(ParseError::new(EMPTY_HUNK_MSG, o.chunk.line));
        }
        chunks.push(o.chunk);
    }
    if chunks.is_empty() {
        return Err(ParseError::new(format!("Update file hunk for path '{path}' is empty"), header_no));
    }
    let op = Op::Update { path: path.to_string(), move_to, chunks, line: header_no };
    Ok((op, i))
}

/// Closes a chunk because another `@@` follows. A chunk with a context and no lines is a
/// chained header (`@@ class A` / `@@ def f():`) and is kept as a cursor move; a bare `@@`
/// with no lines means nothing and is dropped.
fn close_on_next_header(o: OpenChunk, chunks: &mut Vec<Chunk>) {
    if o.lines > 0 || o.chunk.context.is_some() {
        chunks.push(o.chunk);
    }
}

/// The context of an `@@` header, given the text after `@@` (already right-trimmed).
fn chunk_context(rest: &str) -> Option<String> {
    let ctx = rest.strip_prefix(' ').unwrap_or(rest);
    if ctx.trim().is_empty() {
        return None;
    }
    if let Some(after) = unified_range_tail(ctx) {
        let after = after.trim();
        return (!after.is_empty()).then(|| after.to_string());
    }
    Some(ctx.to_string())
}

/// For a unified-diff header body `-12,5 +12,6 @@ tail`, returns `tail` (maybe empty). Models
/// trained on git diffs write these; the numbers are never a line of the file, the tail is
/// git's "function line", which is what Codex's context means.
fn unified_range_tail(ctx: &str) -> Option<&str> {
    let rest = ctx.trim_start().strip_prefix('-')?;
    let rest = skip_range(rest)?.strip_prefix(" +")?;
    let rest = skip_range(rest)?.trim_start().strip_prefix("@@")?;
    Some(rest)
}

/// Skips `N` or `N,M`.
fn skip_range(s: &str) -> Option<&str> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let n = digits(s);
    if n == 0 {
        return None;
    }
    let s = &s[n..];
    match s.strip_prefix(',') {
        Some(after) => {
            let m = digits(after);
            (m > 0).then(|| &after[m..])
        }
        None => Some(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(ctx: Option<&str>, old: &[&str], new: &[&str], eof: bool, line: usize) -> Chunk {
        Chunk {
            context: ctx.map(str::to_string),
            old_lines: old.iter().map(|s| s.to_string()).collect(),
            new_lines: new.iter().map(|s| s.to_string()).collect(),
            end_of_file: eof,
            line,
        }
    }

    fn update(path: &str, move_to: Option<&str>, chunks: Vec<Chunk>, line: usize) -> Op {
        Op::Update { path: path.to_string(), move_to: move_to.map(str::to_string), chunks, line }
    }

    fn add(path: &str, contents: &str, line: usize) -> Op {
        Op::Add { path: path.to_string(), contents: contents.to_string(), line }
    }

    fn delete(path: &str, line: usize) -> Op {
        Op::Delete { path: path.to_string(), line }
    }

    fn check(input: &str, expected: Vec<Op>) {
        match parse(input) {
            Ok(p) => assert_eq!(p.ops, expected, "input:\n{input}"),
            Err(e) => panic!("parse failed at line {}: {}\ninput:\n{input}", e.line, e),
        }
    }

    fn check_err(input: &str, message: &str, line: usize) {
        match parse(input) {
            Ok(p) => panic!("expected error {message:?}, parsed {p:?}\ninput:\n{input}"),
            Err(e) => {
                assert_eq!(e.message, message, "input:\n{input}");
                assert_eq!(e.line, line, "line of {message:?}; input:\n{input}");
                assert_eq!(e.to_string(), message);
            }
        }
    }

    #[test]
    fn accepts_valid_patches() {
        let cases: Vec<(&str, Vec<Op>)> = vec![
            ("*** Begin Patch\n*** End Patch\n", vec![]),
            ("*** Begin Patch\n*** End Patch", vec![]),
            (
                "*** Begin Patch\n*** Add File: a.txt\n+one\n+\n+three\n*** End Patch\n",
                vec![add("a.txt", "one\n\nthree\n", 2)],
            ),
            ("*** Begin Patch\n*** Add File: empty.txt\n*** End Patch\n", vec![add("empty.txt", "", 2)]),
            ("*** Begin Patch\n*** Delete File: gone.txt\n*** End Patch\n", vec![delete("gone.txt", 2)]),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** End Patch\n",
                vec![update("a", None, vec![chunk(None, &["x"], &["y"], false, 3)], 2)],
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: b/c\n@@ fn main() {\n \
                 keep\n-x\n+y\n*** End of File\n*** End Patch\n",
                vec![update(
                    "a",
                    Some("b/c"),
                    vec![chunk(Some("fn main() {"), &["keep", "x"], &["keep", "y"], true, 4)],
                    2,
                )],
            ),
            // Several operations, in patch order, with an update followed directly by an add.
            (
                "*** Begin Patch\n*** Add File: n.txt\n+c\n*** Delete File: d.txt\n\
                 *** Update File: m.txt\n@@\n-l2\n+ch\n*** Add File: z\n+z\n*** End Patch",
                vec![
                    add("n.txt", "c\n", 2),
                    delete("d.txt", 4),
                    update("m.txt", None, vec![chunk(None, &["l2"], &["ch"], false, 6)], 5),
                    add("z", "z\n", 9),
                ],
            ),
            // Absolute paths and paths with inner spaces are taken verbatim.
            (
                "*** Begin Patch\n*** Delete File: /abs/my file.txt\n*** End Patch",
                vec![delete("/abs/my file.txt", 2)],
            ),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }

    #[test]
    fn chunk_shapes() {
        let p = |body: &str| format!("*** Begin Patch\n*** Update File: f\n{body}*** End Patch\n");
        let cases: Vec<(String, Vec<Chunk>)> = vec![
            // First chunk without `@@`.
            (p(" a\n-b\n+c\n"), vec![chunk(None, &["a", "b"], &["a", "c"], false, 3)]),
            // Empty line inside a chunk is empty context; so is a whitespace-only line.
            (p("@@\n-b\n+B\n\n-d\n+D\n"), vec![chunk(None, &["b", "", "d"], &["B", "", "D"], false, 3)]),
            (p("@@\n a\n\t\n a\n"), vec![chunk(None, &["a", "", "a"], &["a", "", "a"], false, 3)]),
            // A space-only line keeps what follows its prefix.
            (p("@@\n   \n"), vec![chunk(None, &["  "], &["  "], false, 3)]),
            // Several chunks; the second with a context.
            (
                p("@@\n-a\n+b\n@@ def f():\n-c\n+d\n"),
                vec![
                    chunk(None, &["a"], &["b"], false, 3),
                    chunk(Some("def f():"), &["c"], &["d"], false, 6),
                ],
            ),
            // Trailing whitespace after `@@` means no context; inner spaces of a context stay.
            (p("@@   \n-a\n"), vec![chunk(None, &["a"], &[], false, 3)]),
            (p("@@  indented ctx  \n-a\n"), vec![chunk(Some(" indented ctx"), &["a"], &[], false, 3)]),
            // Chained headers narrow the search: the first becomes a context-only chunk.
            (
                p("@@ class A\n@@ def f():\n-x\n+y\n"),
                vec![
                    chunk(Some("class A"), &[], &[], false, 3),
                    chunk(Some("def f():"), &["x"], &["y"], false, 4),
                ],
            ),
            // A bare `@@` directly followed by another header is dropped.
            (p("@@\n@@ ctx\n-x\n"), vec![chunk(Some("ctx"), &["x"], &[], false, 4)]),
            // Unified-diff headers: the numbers go, git's function line stays as context.
            (p("@@ -1,3 +1,4 @@\n-x\n"), vec![chunk(None, &["x"], &[], false, 3)]),
            (p("@@ -12 +12,2 @@ fn main() {\n-x\n"), vec![chunk(Some("fn main() {"), &["x"], &[], false, 3)]),
            // Not a unified header: kept as written.
            (p("@@ -12 foo\n-x\n"), vec![chunk(Some("-12 foo"), &["x"], &[], false, 3)]),
            // Blank lines after `*** End of File` are skipped; the next chunk has its `@@`.
            (
                p("@@\n-a\n*** End of File\n\n@@\n-b\n"),
                vec![chunk(None, &["a"], &[], true, 3), chunk(None, &["b"], &[], false, 7)],
            ),
            // Blank lines before the first chunk are skipped; trailing ones are context.
            (p("\n@@\n-a\n\n"), vec![chunk(None, &["a", ""], &[""], false, 4)]),
            // An indented header inside an update is a context line.
            (
                p("@@\n *** Update File: b\n-x\n"),
                vec![chunk(None, &["*** Update File: b", "x"], &["*** Update File: b"], false, 3)],
            ),
            // `-old\r\r` in a CRLF patch keeps one `\r`.
            (p("@@\r\n-old\r\r\n"), vec![chunk(None, &["old\r"], &[], false, 3)]),
        ];
        for (input, expected) in cases {
            check(&input, vec![update("f", None, expected, 2)]);
        }
    }

    #[test]
    fn leniencies() {
        let one = || vec![update("f", None, vec![chunk(None, &["a"], &["b"], false, 3)], 2)];
        let shifted =
            |by: usize| vec![update("f", None, vec![chunk(None, &["a"], &["b"], false, 3 + by)], 2 + by)];
        let cases: Vec<(&str, Vec<Op>)> = vec![
            // Conformance 018 and 020: padded boundary markers.
            (" *** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch \n", one()),
            ("*** Begin Patch \n*** Update File: f\n@@\n-a\n+b\n *** End Patch\n", one()),
            // Conformance 017: padded operation header.
            ("*** Begin Patch\n  *** Update File: f\n@@\n-a\n+b\n*** End Patch\n", one()),
            // Padded `*** End of File` and a padded `*** Move to:` are recognised.
            (
                "*** Begin Patch\n*** Update File: f\n  *** Move to: g  \n@@\n-a\n*** End of File  \n*** End Patch",
                vec![update("f", Some("g"), vec![chunk(None, &["a"], &[], true, 4)], 2)],
            ),
            // No space after the colon.
            ("*** Begin Patch\n*** Update File:f\n@@\n-a\n+b\n*** End Patch", one()),
            // CRLF patch text.
            ("*** Begin Patch\r\n*** Update File: f\r\n@@\r\n-a\r\n+b\r\n*** End Patch\r\n", one()),
            // Whole-text trim: blank lines around the patch; numbers still count them.
            ("\n\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n\n  \n", shifted(2)),
            // Heredoc wrappers, as Codex's lenient mode.
            ("<<'EOF'\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n", shifted(1)),
            ("<<EOF\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF", shifted(1)),
            ("<<\"EOF\"\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n", shifted(1)),
            // Blank lines inside the heredoc around the markers.
            (
                "<<'EOF'\n\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n\nEOF\n",
                shifted(2),
            ),
            // Blank lines between operations.
            (
                "*** Begin Patch\n\n*** Delete File: a\n\n\n*** Delete File: b\n*** End Patch",
                vec![delete("a", 3), delete("b", 6)],
            ),
            // A leading BOM on the patch text.
            ("\u{feff}*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n", one()),
            // A repeated End marker.
            ("*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n*** End Patch\n", one()),
            // A blank line between `+` lines of an add is an empty line; trailing blanks are not.
            (
                "*** Begin Patch\n*** Add File: a\n+x\n\n+y\n\n*** Delete File: b\n*** End Patch",
                vec![add("a", "x\n\ny\n", 2), delete("b", 7)],
            ),
        ];
        for (input, expected) in cases {
            check(input, expected);
        }
    }

    #[test]
    fn errors() {
        let headers = "Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', \
                       '*** Update File: {path}'";
        let unexpected = |l: &str| {
            format!(
                "Unexpected line found in update hunk: '{l}'. Every line should start with ' ' \
                 (context line), '+' (added line), or '-' (removed line)"
            )
        };
        let expected_at =
            |l: &str| format!("Expected update hunk to start with a @@ context marker, got: '{l}'");
        let cases: Vec<(&str, String, usize)> = vec![
            ("", FIRST_LINE_MSG.into(), 1),
            ("  \n\n", FIRST_LINE_MSG.into(), 1),
            ("bad\n*** End Patch\n", FIRST_LINE_MSG.into(), 1),
            ("\n\n{\"input\": \"x\"}\n", FIRST_LINE_MSG.into(), 3),
            ("*** Begin Patch\n", LAST_LINE_MSG.into(), 1),
            ("*** Begin Patch\n*** Delete File: a\n", LAST_LINE_MSG.into(), 2),
            ("*** Begin Patch\n*** End Patch\ntrailing\n", LAST_LINE_MSG.into(), 3),
            (
                "*** Begin Patch\n*** Delete File: a\n*** End Patch\nmore\n*** End Patch",
                LAST_LINE_MSG.into(),
                4,
            ),
            // Heredoc: mismatched quotes and too-short wrappers keep the original error.
            ("<<\"EOF'\n*** Begin Patch\n*** End Patch\nEOF\n", FIRST_LINE_MSG.into(), 1),
            ("<<'EOF'\n*** Begin Patch\nEOF\n", FIRST_LINE_MSG.into(), 1),
            // A heredoc whose inside is wrong reports the inside.
            ("<<'EOF'\n*** Begin Patch\n*** Delete File: a\nEOF\n", LAST_LINE_MSG.into(), 3),
            ("<<'EOF'\nnope\n*** End Patch\nEOF\n", FIRST_LINE_MSG.into(), 2),
            // Conformance 013.
            (
                "*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch\n",
                format!("'*** Frobnicate File: foo' is not a valid hunk header. {headers}"),
                2,
            ),
            (
                "*** Begin Patch\n*** Add File:   \n*** End Patch\n",
                format!("'*** Add File:' is not a valid hunk header. {headers}"),
                2,
            ),
            (
                "*** Begin Patch\n*** Delete File: a\n-stray\n*** End Patch\n",
                format!("'-stray' is not a valid hunk header. {headers}"),
                3,
            ),
            // An unknown `***` line after an update is reported as a header.
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** Frob\n*** End Patch\n",
                format!("'*** Frob' is not a valid hunk header. {headers}"),
                5,
            ),
            // A stray `+` line after the blank that ended an add.
            (
                "*** Begin Patch\n*** Add File: a\n+x\n\n*** Delete File: b\n+y\n*** End Patch\n",
                format!("'+y' is not a valid hunk header. {headers}"),
                6,
            ),
            // Conformance 008, and a move with no chunks.
            (
                "*** Begin Patch\n*** Update File: foo.txt\n*** End Patch\n",
                "Update file hunk for path 'foo.txt' is empty".into(),
                2,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: b\n\n*** End Patch\n",
                "Update file hunk for path 'a' is empty".into(),
                2,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Delete File: b\n*** End Patch\n",
                "Update file hunk for path 'a' is empty".into(),
                2,
            ),
            // `@@` with nothing after it.
            ("*** Begin Patch\n*** Update File: a\n@@\n*** End Patch\n", EMPTY_HUNK_MSG.into(), 3),
            (
                "*** Begin Patch\n*** Update File: a\n@@ ctx\n*** End of File\n*** End Patch\n",
                EMPTY_HUNK_MSG.into(),
                3,
            ),
            ("*** Begin Patch\n*** Update File: a\n@@ a\n@@ b\n*** End Patch\n", EMPTY_HUNK_MSG.into(), 4),
            (
                "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch\n",
                EMPTY_HUNK_MSG.into(),
                3,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** End of File\n*** End of File\n*** End Patch\n",
                EMPTY_HUNK_MSG.into(),
                6,
            ),
            // Bad line prefixes.
            ("*** Begin Patch\n*** Update File: a\n@@\nbad\n*** End Patch\n", unexpected("bad"), 4),
            ("*** Begin Patch\n*** Update File: a\nbad\n*** End Patch\n", unexpected("bad"), 3),
            ("*** Begin Patch\n*** Update File: a\n@@\n-old\nbad\n*** End Patch\n", expected_at("bad"), 5),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-old\n*** End of File\n-x\n*** End Patch\n",
                expected_at("-x"),
                6,
            ),
            // `*** Move to:` after chunks started is not a move.
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** Move to: b\n*** End Patch\n",
                format!("'*** Move to: b' is not a valid hunk header. {headers}"),
                5,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** Move to: c\n@@\n-x\n*** End Patch\n",
                "Update file hunk for path 'a' has more than one '*** Move to:' line".into(),
                4,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to:  \n@@\n-x\n*** End Patch\n",
                "Missing destination path after '*** Move to:' for path 'a'".into(),
                3,
            ),
        ];
        for (input, message, line) in cases {
            check_err(input, &message, line);
        }
    }

    #[test]
    fn op_accessors() {
        let patch = parse(
            "*** Begin Patch\n*** Add File: a\n+x\n*** Delete File: d\n*** Update File: u\n@@\n-x\n\
             *** Update File: m\n*** Move to: n\n@@\n-x\n*** End Patch",
        )
        .unwrap();
        let summary: Vec<_> = patch
            .ops
            .iter()
            .map(|op| {
                (op.kind().as_str(), op.kind().summary_letter(), op.path(), op.target_path(), op.line())
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("add", 'A', "a", "a", 2),
                ("delete", 'D', "d", "d", 4),
                ("update", 'M', "u", "u", 5),
                ("move", 'M', "m", "n", 8),
            ]
        );
        assert_eq!(patch.ops[3].move_to(), Some("n"));
        assert_eq!(patch.ops[2].chunks().len(), 1);
        assert!(patch.ops[0].chunks().is_empty());
    }
}
