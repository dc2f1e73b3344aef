//! The daemon's face of `fsd-text`, the shared text rules: the same functions, with the crate's
//! reasons mapped to the backend's errors.

use crate::error::FsError;

pub use fsd_text::{Replaced, apply_style, split_bom, style_of};

/// Decodes file bytes as text: valid UTF-8 and no NUL byte, else `FS_NOT_TEXT`.
pub fn decode(bytes: &[u8]) -> Result<&str, FsError> {
    fsd_text::decode(bytes).map_err(|e| match e {
        fsd_text::NotText::Nul => FsError::NotText("file contains a NUL byte"),
        fsd_text::NotText::InvalidUtf8 => FsError::NotText("file is not valid UTF-8"),
    })
}

/// Replaces `old` with `new` in `body` (no BOM), the result at most `limit` bytes; see
/// [`fsd_text::replace`].
pub fn replace(body: &str, old: &str, new: &str, replace_all: bool, limit: u64) -> Result<Replaced, FsError> {
    fsd_text::replace(body, old, new, replace_all, limit).map_err(|e| match e {
        fsd_text::ReplaceError::NotFound => FsError::EditNotFound,
        fsd_text::ReplaceError::Ambiguous(count) => FsError::AmbiguousEdit { count, lines: None },
        fsd_text::ReplaceError::TooLarge(size) => FsError::TooLarge { size, limit },
    })
}

/// The most bytes of line numbers an ambiguous edit's error lists: it travels in the reply's
/// metadata, which a peer bounds (hyper's HTTP/2 accepts 16 KiB of headers by default, all told).
const MAX_MATCH_LINES_BYTES: usize = 8 << 10;

/// The distinct 1-based lines where the non-overlapping matches of `old` start (CRLF read as
/// LF, as the edit itself matches), comma-separated; `None` past [`MAX_MATCH_LINES_BYTES`]. One
/// pass over `body`, whatever the number of matches (a file of one-letter lines has millions).
pub fn match_lines(body: &str, old: &str) -> Option<String> {
    let (body, old) = (fsd_text::lf(body), fsd_text::lf(old));
    if old.is_empty() {
        return Some(String::new());
    }
    let mut list = String::new();
    for line in fsd_text::start_lines(&body, body.match_indices(old.as_str()).map(|(at, _)| at)) {
        if !list.is_empty() {
            list.push(',');
        }
        list.push_str(&line.to_string());
        if list.len() > MAX_MATCH_LINES_BYTES {
            return None;
        }
    }
    Some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_matches_are_listed_by_line_in_one_pass() {
        let check = |body: &str, old: &str, expected: Option<&str>| {
            assert_eq!(match_lines(body, old).as_deref(), expected, "{body:?} {old:?}");
        };
        check("a\nb\na\n", "a", Some("1,3"));
        check("aa a\r\nb\r\naa\r\n", "a", Some("1,3"));
        check("x\r\ny\r\nx\r\ny", "x\r\ny", Some("1,3"));
        check("abc", "z", Some(""));
        check("abc", "", Some(""));
        // Millions of matches (4 MiB of them on one line, or of one-letter lines): one pass, and
        // a list too long for an error's metadata is left out rather than sent.
        check(&"a".repeat(4 << 20), "a", Some("1"));
        let many = "a\n".repeat(2 << 20);
        check(&many, "a", None);
        let few = format!("{}a\n", "b\n".repeat(2 << 20));
        check(&few, "a", Some(&(2usize << 20).saturating_add(1).to_string()));
    }

    #[test]
    fn the_shared_reasons_become_backend_errors() {
        assert!(matches!(decode(b"a\0b"), Err(FsError::NotText(_))));
        assert!(matches!(decode(b"\xff"), Err(FsError::NotText(_))));
        assert!(matches!(replace("a", "x", "y", false, 8), Err(FsError::EditNotFound)));
        assert!(matches!(
            replace("b b", "b", "y", false, 8),
            Err(FsError::AmbiguousEdit { count: 2, lines: None })
        ));
        assert_eq!(replace("a\r\n", "a", "b", false, 8).map(|r| r.text).ok().as_deref(), Some("b\r\n"));
        assert!(matches!(replace("aa", "a", "bb", true, 3), Err(FsError::TooLarge { size: 4, limit: 3 })));
    }
}
