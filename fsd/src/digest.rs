//! The content part of a version: a 256-bit AEGIS-128X2 tag of the file's bytes, used as a MAC
//! under a key the supervisor draws at the daemon's start and hands to every process it starts
//! (`ipc_messages::Start`), never to a client. A tag is a pseudorandom function of the bytes for anyone
//! without the key: two different contents share one only by chance, and nobody who sees tags
//! can make a pair that does, which is the collision resistance a guard needs. AEGIS runs on
//! the AES instructions at 42–45 GB/s on one core here, 7–8× BLAKE3: a 1 GiB stream's readers
//! spend 0.04 core-seconds more than without a digest instead of BLAKE3's 0.21
//! (BENCHMARKS.md). The price: a daemon restarted with a new key proves the content of a
//! version issued before only by its metadata part.

use std::sync::OnceLock;

use aegis::aegis128x2::Aegis128X2Mac;

/// The key's length.
pub const KEY_BYTES: usize = 16;
/// The tag's length: the longest AEGIS offers, as its authors advise for a MAC.
const TAG_BYTES: usize = 32;

/// The MAC state with this process's key absorbed: every digest starts from a copy.
static KEYED: OnceLock<Aegis128X2Mac<TAG_BYTES>> = OnceLock::new();

/// Sets this process's key (a child of the supervisor, at start, before any digest); false
/// when a digest was taken already, under a key of this process's own, which would then match
/// no other process's tags.
pub fn set_key(key: &[u8; KEY_BYTES]) -> bool {
    KEYED.set(Aegis128X2Mac::new(key)).is_ok()
}

/// A fresh random key, for the supervisor to share.
pub fn new_key() -> Result<[u8; KEY_BYTES], getrandom::Error> {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key)?;
    Ok(key)
}

fn keyed() -> &'static Aegis128X2Mac<TAG_BYTES> {
    // Never reached without `set_key` in a daemon's child (which reads its key before it
    // serves anything, and refuses to start if a digest came first): only in a process that
    // is no daemon child, a unit test or the benchmark, whose tags need only agree among
    // themselves. Without randomness such a process still gets a key of its own, if a
    // guessable one.
    KEYED.get_or_init(|| {
        let key = new_key().unwrap_or_else(|_| {
            let mut key = [0u8; KEY_BYTES];
            key[..4].copy_from_slice(&std::process::id().to_le_bytes());
            key
        });
        Aegis128X2Mac::new(&key)
    })
}

/// The digest of bytes passed in pieces (a stream, a body written from a pipe, a check's reads).
#[derive(Debug, Clone)]
pub struct Digest(Aegis128X2Mac<TAG_BYTES>);

impl Default for Digest {
    fn default() -> Digest {
        Digest(keyed().clone())
    }
}

impl Digest {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The tag, in hex (as a version carries it).
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// The digest of `bytes`, whole.
pub fn of(bytes: &[u8]) -> String {
    let mut digest = Digest::default();
    digest.update(bytes);
    digest.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pieces: &[&[u8]], whole: &[u8], same: bool) {
        let mut digest = Digest::default();
        for piece in pieces {
            digest.update(piece);
        }
        assert_eq!(digest.finish() == of(whole), same, "{pieces:?} vs {whole:?}");
    }

    #[test]
    fn a_digest_depends_on_the_bytes_not_on_how_they_were_cut() {
        check(&[b"hello ", b"world"], b"hello world", true);
        check(&[b"", b"hello world", b""], b"hello world", true);
        check(&[], b"", true);
        check(&[b"hello world"], b"hello world\n", false);
        check(&[b"hello world"], b"hello worle", false);
        check(&[b"\0"], b"", false);
        let big: Vec<u8> = (0..1_000_003u32).map(|n| (n % 251) as u8).collect();
        check(&[&big[..4096], &big[4096..700_001], &big[700_001..]], &big, true);
        assert_eq!(of(b"x").len(), 2 * TAG_BYTES);
    }

    #[test]
    fn a_tag_under_another_key_matches_nothing() {
        let other = Aegis128X2Mac::<TAG_BYTES>::new(&[1u8; KEY_BYTES]);
        let mut theirs = other.clone();
        theirs.update(b"same bytes");
        assert_ne!(hex::encode(theirs.finalize()), of(b"same bytes"));
        // This process's key is taken now: a key arriving late is refused, not mixed in.
        assert!(!set_key(&[2u8; KEY_BYTES]));
    }
}
