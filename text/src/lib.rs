//! CONTRACT's text rules, in one pure crate that the daemon, the patch engine and the tools share:
//! decoding (valid UTF-8, no NUL), the BOM, line-ending style, the LF view that reads `\r\n` as
//! `\n`, literal replacement that matches LF text against CRLF files while every untouched byte
//! stays as it was, and the line model (a line ends at `\n`; no phantom last line). apply_patch's
//! own line splitting, which also ends lines at a lone `\r`, stays in `fsd-patch`.
#![forbid(unsafe_code)]

/// The UTF-8 byte order mark: kept on disk, never shown to the model.
pub const BOM: &str = "\u{feff}";

/// Why bytes are not text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotText {
    #[error("contains a NUL byte")]
    Nul,
    #[error("not valid UTF-8")]
    InvalidUtf8,
}

/// Why a literal replacement found no single place to replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    /// No match (or an empty string to replace).
    #[error("no match")]
    NotFound,
    /// More than one match and not replace-all.
    #[error("{0} matches")]
    Ambiguous(usize),
    /// The result would be longer than the limit: its length in bytes.
    #[error("the result would be {0} bytes")]
    TooLarge(u64),
}

/// Decodes file bytes as text: valid UTF-8 and no NUL byte.
pub fn decode(bytes: &[u8]) -> Result<&str, NotText> {
    if bytes.contains(&0) {
        return Err(NotText::Nul);
    }
    std::str::from_utf8(bytes).map_err(|_| NotText::InvalidUtf8)
}

/// Splits a leading BOM off: `(bom, body)`.
pub fn split_bom(text: &str) -> (&str, &str) {
    match text.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", text),
    }
}

/// The text as the model sees it: every `\r\n` read as `\n` (a lone `\r` stays line text).
pub fn lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// The file's first line ending: `"\r\n"` or `"\n"` (LF when it has none), the ending CONTRACT
/// gives inserted lines.
pub fn first_ending(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// Rewrites every bare `\n` (not already after `\r`) as `ending`.
pub fn with_ending(text: &str, ending: &str) -> String {
    if ending == "\n" {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut prev = '\0';
    for c in text.chars() {
        if c == '\n' && prev != '\r' {
            out.push_str(ending);
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}

/// The BOM and first line ending of existing file bytes (a prefix is enough).
pub fn style_of(bytes: &[u8]) -> (bool, &'static str) {
    let bom = bytes.starts_with(BOM.as_bytes());
    let ending = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && bytes[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    };
    (bom, ending)
}

/// Gives new whole-file content the existing file's style: its BOM and, for bare LF, its first
/// line ending. Used by the write tool, whose model never saw the `\r` or the BOM.
pub fn apply_style(bom: bool, ending: &str, new: &str) -> String {
    let (new_bom, body) = split_bom(new);
    let prefix = if bom { BOM } else { new_bom };
    format!("{prefix}{}", with_ending(body, ending))
}

/// The lines of LF text, without their endings: `a\nb\n` and `a\nb` both have 2, the empty
/// text none.
pub fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').collect()
}

/// The number of lines of raw (possibly CRLF) text, by the same model.
pub fn count_lines(body: &str) -> usize {
    let newlines = body.bytes().filter(|&b| b == b'\n').count();
    newlines + usize::from(!body.is_empty() && !body.ends_with('\n'))
}

/// The distinct 1-based lines of `text` on which the byte offsets `starts` (ascending) fall, in
/// order and lazily: one pass over `text` however many offsets there are (a file of one-letter
/// lines can have millions of matches), and a caller may stop early.
pub fn start_lines(text: &str, starts: impl IntoIterator<Item = usize>) -> impl Iterator<Item = usize> {
    let bytes = text.as_bytes();
    let (mut line, mut counted, mut last) = (1, 0, 0);
    starts.into_iter().filter_map(move |at| {
        let at = at.clamp(counted, bytes.len());
        line += bytes[counted..at].iter().filter(|&&b| b == b'\n').count();
        counted = at;
        (line != last).then(|| {
            last = line;
            line
        })
    })
}

/// `text` with every `\r\n` read as `\n`, and where each such pair sat (index in the result).
struct LfView {
    text: String,
    /// Sorted indices, in `text`, of the `\n`s that were `\r\n` on disk.
    crlf_at: Vec<usize>,
}

impl LfView {
    fn new(raw: &str) -> LfView {
        if !raw.contains("\r\n") {
            return LfView { text: raw.to_owned(), crlf_at: Vec::new() };
        }
        let mut text = String::with_capacity(raw.len());
        let mut crlf_at = Vec::new();
        let mut rest = raw;
        while let Some(i) = rest.find("\r\n") {
            text.push_str(&rest[..i]);
            crlf_at.push(text.len());
            text.push('\n');
            rest = &rest[i + 2..];
        }
        text.push_str(rest);
        LfView { text, crlf_at }
    }

    /// The raw byte offset of view offset `at`: every `\r` dropped before it counts once.
    fn raw_start(&self, at: usize) -> usize {
        at + self.crlf_at.partition_point(|&i| i < at)
    }

    /// The raw end (exclusive) of a view range ending at `end`: a matched `\n` that was `\r\n`
    /// takes its `\r` along.
    fn raw_end(&self, end: usize) -> usize {
        end + self.crlf_at.partition_point(|&i| i < end)
    }
}

/// The result of a literal replacement.
#[derive(Debug, PartialEq, Eq)]
pub struct Replaced {
    pub text: String,
    pub count: usize,
}

/// Replaces `old` with `new` in `body` (no BOM). Exactly one match unless `replace_all`.
/// Matching sees CRLF as LF; inserted text takes the file's first line ending; bytes outside the
/// matches are kept exactly. A result longer than `limit` bytes is refused before it is built.
pub fn replace(
    body: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    limit: u64,
) -> Result<Replaced, ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::NotFound);
    }
    let view = LfView::new(body);
    let old = lf(old);
    let matches: Vec<usize> = view.text.match_indices(old.as_str()).map(|(i, _)| i).collect();
    match matches.len() {
        0 => return Err(ReplaceError::NotFound),
        1 => {}
        n if !replace_all => return Err(ReplaceError::Ambiguous(n)),
        _ => {}
    }
    let new = with_ending(&lf(new), first_ending(body));
    let spans: Vec<(usize, usize)> =
        matches.iter().map(|&at| (view.raw_start(at), view.raw_end(at + old.len()))).collect();
    // The exact length first: a short `old` and a long `new` over many matches would otherwise
    // ask for terabytes (the allocation failure aborts the process).
    let kept = body.len() as u64 - spans.iter().map(|(start, end)| (end - start) as u64).sum::<u64>();
    let size = kept.saturating_add((spans.len() as u64).saturating_mul(new.len() as u64));
    if size > limit {
        return Err(ReplaceError::TooLarge(size));
    }
    let mut out = String::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut cursor = 0;
    for &(start, end) in &spans {
        out.push_str(&body[cursor..start]);
        out.push_str(&new);
        cursor = end;
    }
    out.push_str(&body[cursor..]);
    Ok(Replaced { text: out, count: spans.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_their_distinct_lines_in_order() {
        let check = |text: &str, starts: &[usize], expected: &[usize]| {
            let got: Vec<usize> = start_lines(text, starts.iter().copied()).collect();
            assert_eq!(got, expected, "{text:?} {starts:?}");
        };
        check("a\nb\nc\n", &[0, 2, 4], &[1, 2, 3]);
        check("aa\nb\n", &[0, 1, 3], &[1, 2]);
        check("a\n\n\nb", &[6], &[4]);
        check("", &[], &[]);
        // Past the end: the last line.
        check("a\nb", &[99], &[2]);
    }

    fn check(body: &str, old: &str, new: &str, all: bool, expected: Result<&str, &str>) {
        let got = replace(body, old, new, all, u64::MAX);
        match (got, expected) {
            (Ok(r), Ok(want)) => assert_eq!(r.text, want, "replace {old:?} in {body:?}"),
            (Err(e), Err(want)) => assert_eq!(format!("{e:?}"), want, "replace {old:?} in {body:?}"),
            (got, want) => panic!("replace {old:?} in {body:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn replacement_table() {
        check("a\nb\nc\n", "b", "B", false, Ok("a\nB\nc\n"));
        check("a\nb\nb\n", "b", "B", false, Err("Ambiguous(2)"));
        check("a\nb\nb\n", "b", "B", true, Ok("a\nB\nB\n"));
        check("a\nb\n", "x", "y", false, Err("NotFound"));
        // LF text matches a CRLF file; inserted lines take CRLF; other lines keep their bytes.
        check("a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\nz\n", false, Ok("x\r\ny\r\nz\r\nc\r\n"));
        check("a\r\nb\r\n", "b", "b2\nb3", false, Ok("a\r\nb2\r\nb3\r\n"));
        // A CRLF old_string still matches a CRLF file.
        check("a\r\nb\r\n", "a\r\nb", "q", false, Ok("q\r\n"));
        // Mixed endings: untouched lines keep theirs; new text takes the first ending.
        check("a\nb\r\nc\n", "c", "c\nd", false, Ok("a\nb\r\nc\nd\n"));
        // A lone CR is line text, not an ending.
        check("a\rb\n", "a\rb", "z", false, Ok("z\n"));
        check("x", "", "y", false, Err("NotFound"));
    }

    #[test]
    fn a_result_over_the_limit_is_refused_with_its_exact_length() {
        let check = |body: &str, new: &str, limit: u64, expected: Result<&str, ReplaceError>| {
            let got = replace(body, "a", new, true, limit).map(|r| r.text);
            assert_eq!(got.as_deref().map_err(|e| *e), expected, "{body:?} a -> {new:?} within {limit}");
        };
        check("aaa", "bb", 6, Ok("bbbbbb"));
        check("aaa", "bb", 5, Err(ReplaceError::TooLarge(6)));
        check("xa\r\na", "b\nc", 11, Ok("xb\r\nc\r\nb\r\nc"));
        check("xa\r\na", "b\nc", 10, Err(ReplaceError::TooLarge(11)));
        check(&"a".repeat(1 << 10), &"b".repeat(1 << 20), 1 << 20, Err(ReplaceError::TooLarge(1 << 30)));
    }

    #[test]
    fn style_follows_the_existing_file() {
        let check = |existing: &str, new: &str, want: &str| {
            let (bom, ending) = style_of(existing.as_bytes());
            assert_eq!(apply_style(bom, ending, new), want, "{existing:?} <- {new:?}");
        };
        check("\u{feff}a\r\nb\r\n", "x\ny\n", "\u{feff}x\r\ny\r\n");
        check("a\nb", "x\r\ny\n", "x\r\ny\n");
        check("", "x\n", "x\n");
        check("a\nb\n", "\u{feff}x", "\u{feff}x");
    }

    #[test]
    fn decode_refuses_nul_and_invalid_utf8() {
        assert!(decode(b"ok\n").is_ok());
        assert_eq!(decode(b"a\0b"), Err(NotText::Nul));
        assert_eq!(decode(b"\xff"), Err(NotText::InvalidUtf8));
    }

    #[test]
    fn the_line_model_has_no_phantom_line() {
        assert_eq!(lines(""), Vec::<&str>::new());
        assert_eq!(lines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(lines("a\nb"), vec!["a", "b"]);
        assert_eq!(lines("\n"), vec![""]);
        assert_eq!(
            (count_lines(""), count_lines("a\r\nb\r\n"), count_lines("a\nb"), count_lines("\n")),
            (0, 2, 2, 1)
        );
        assert_eq!(lf("a\r\nb\rc\n"), "a\nb\rc\n");
        assert_eq!(split_bom("\u{feff}a"), (BOM, "a"));
        assert_eq!(with_ending("x\ny\r\nz", "\r\n"), "x\r\ny\r\nz");
    }

    #[test]
    fn first_ending_is_lf_without_any() {
        assert_eq!(first_ending("abc"), "\n");
        assert_eq!(first_ending("a\r\nb\n"), "\r\n");
        assert_eq!(first_ending("a\nb\r\n"), "\n");
        assert_eq!(first_ending("\r\n"), "\r\n");
    }
}
