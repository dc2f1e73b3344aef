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
        fsd_text::ReplaceError::Ambiguous(n) => FsError::AmbiguousEdit(n),
        fsd_text::ReplaceError::TooLarge(size) => FsError::TooLarge { size, limit },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_reasons_become_backend_errors() {
        assert!(matches!(decode(b"a\0b"), Err(FsError::NotText(_))));
        assert!(matches!(decode(b"\xff"), Err(FsError::NotText(_))));
        assert!(matches!(replace("a", "x", "y", false, 8), Err(FsError::EditNotFound)));
        assert!(matches!(replace("b b", "b", "y", false, 8), Err(FsError::AmbiguousEdit(2))));
        assert_eq!(replace("a\r\n", "a", "b", false, 8).map(|r| r.text).ok().as_deref(), Some("b\r\n"));
        assert!(matches!(replace("aa", "a", "bb", true, 3), Err(FsError::TooLarge { size: 4, limit: 3 })));
    }
}
