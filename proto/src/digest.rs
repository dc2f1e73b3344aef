//! The content digests a signed escalation binds, computed by one function on both sides of the
//! wire so a client's declaration and the daemon's check cannot drift apart.

use sha2::{Digest, Sha256};

/// SHA-256 of a whole-file content (writeText, moveFile with content).
pub fn content(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).to_vec()
}

/// SHA-256 of an edit: old, NUL, new, NUL, then `1` for replace-all or `0`.
pub fn edit(old: &str, new: &str, replace_all: bool) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(old.as_bytes());
    hasher.update([0]);
    hasher.update(new.as_bytes());
    hasher.update([0]);
    hasher.update(if replace_all { b"1" } else { b"0" });
    hasher.finalize().to_vec()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_separators_keep_edits_apart() {
        assert_ne!(super::edit("ab", "c", false), super::edit("a", "bc", false));
        assert_ne!(super::edit("a", "b", false), super::edit("a", "b", true));
        assert_eq!(super::content(b"").len(), 32);
    }
}
