//! The two parts of a version token, shared by the daemon that makes tokens and the clients that
//! compare them. A token is `<metadata part>` or `<metadata part>~<length>.<digest>`, the digest
//! (a MAC under a key only the daemon holds, hex) present when the daemon read or wrote the whole
//! file. Clients never take a token apart: they ask [`same`] whether two tokens describe the same
//! file state.

/// Separates the metadata part from the content part.
pub const CONTENT_SEPARATOR: char = '~';

/// The metadata part and, when the token has one, the content part (`<length hex>.<digest hex>`).
pub fn split(token: &str) -> (&str, Option<&str>) {
    match token.split_once(CONTENT_SEPARATOR) {
        Some((meta, content)) => (meta, Some(content)),
        None => (token, None),
    }
}

/// A metadata-only token completed with the content part: the digest of `length` bytes (a
/// stream that reached the end hashes its chunks as they pass).
pub fn with_digest(metadata: String, length: u64, digest: &str) -> String {
    format!("{metadata}{CONTENT_SEPARATOR}{length:x}.{digest}")
}

/// Whether two tokens describe the same file state as far as they can tell: equal metadata parts,
/// or equal content parts (a `touch` or a same-bytes rewrite leaves the content alone). The
/// daemon decides again under the target lock; this only spares a call that would be refused.
pub fn same(a: &str, b: &str) -> bool {
    let (meta_a, content_a) = split(a);
    let (meta_b, content_b) = split(b);
    meta_a == meta_b || content_a.is_some_and(|c| Some(c) == content_b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(a: &str, b: &str, expected: bool) {
        assert_eq!(same(a, b), expected, "{a} vs {b}");
        assert_eq!(same(b, a), expected, "{b} vs {a}");
    }

    #[test]
    fn tokens_compare_by_metadata_or_content() {
        check("v1.1.2", "v1.1.2", true);
        check("v1.1.2", "v1.1.2~3.ab", true);
        check("v1.1.2~3.ab", "v1.1.9~3.ab", true);
        check("v1.1.2~3.ab", "v1.1.9~3.cd", false);
        check("v1.1.2~3.ab", "v1.1.9", false);
        check("v1.1.2", "v1.1.9", false);
        assert_eq!(split("v1.1~3.ab"), ("v1.1", Some("3.ab")));
        assert_eq!(split("v1.1"), ("v1.1", None));
        assert_eq!(split(&with_digest("v1.1".into(), 255, "ab")), ("v1.1", Some("ff.ab")));
    }
}
