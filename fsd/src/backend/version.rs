//! Version tokens: opaque, a metadata part taken on an open handle plus, when the daemon read or
//! wrote the whole file, a digest of its bytes (`digest`). The metadata part is device, inode, inode
//! generation, birth time, size and nanosecond mtime and ctime: a replace makes a new inode and a
//! rename changes ctime, so two successive writes never share one, and `touch -d` (which cannot
//! set ctime) cannot forge one. The digest makes a guard content-aware: `touch`, a formatter's
//! same-bytes rewrite or a checkout of the same blob changes the metadata but not the bytes, and
//! the guard still holds ([`holds`]).

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use fsd_proto::version::{split, with_digest};

use crate::digest::{self, Digest};
use crate::error::FsError;
use crate::sys::{self, Meta};

/// How much of a file one `pread` of the content check takes.
const HASH_CHUNK: usize = 256 << 10;

/// The version of an open regular file whose bytes the daemon did not read whole.
pub fn of_file(file: &File, meta: &Meta) -> String {
    token(meta, sys::generation(file))
}

/// The version of an open regular file whose whole content is `bytes` (just read or written).
pub fn of_content(file: &File, meta: &Meta, bytes: &[u8]) -> String {
    with_digest(of_file(file, meta), bytes.len() as u64, &digest::of(bytes))
}

/// The version of an object that is not opened for I/O (directories, special files).
pub fn of_meta(meta: &Meta) -> String {
    token(meta, 0)
}

fn token(m: &Meta, generation: u64) -> String {
    format!(
        "v1.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}",
        m.dev, m.ino, generation, m.btime.0, m.btime.1, m.size, m.mtime.0, m.mtime.1, m.ctime.0, m.ctime.1
    )
}

/// Whether a guard's version holds for the open file `file` (with `meta` from its handle), called
/// under the target lock. It holds when the metadata part matches; else, when the guard carries a
/// digest, when the current bytes have that digest. The bytes are read with `pread` (the handle's
/// offset stays at 0 for the caller), and the handle's metadata must be the same after the read as
/// before it, so the bytes hashed are the bytes `meta` describes: a writer racing the check makes
/// it fail (stale), never pass, and the replace that follows swaps out only a file with `meta`.
pub fn holds(guard: &str, file: &File, meta: &Meta) -> Result<bool, FsError> {
    let (guard_meta, guard_content) = split(guard);
    let current = of_file(file, meta);
    if current == guard_meta {
        return Ok(true);
    }
    let Some((length, digest)) = guard_content.and_then(|c| c.split_once('.')) else {
        return Ok(false);
    };
    if u64::from_str_radix(length, 16).ok() != Some(meta.size) {
        return Ok(false);
    }
    let Some(current_digest) = digest_of(file, meta.size)? else {
        return Ok(false);
    };
    let after = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
    if after != *meta {
        return Ok(false);
    }
    Ok(current_digest == digest)
}

/// The digest of the first `size` bytes of `file`, or `None` when it turns out to be shorter or
/// longer (it changed under the check).
fn digest_of(file: &File, size: u64) -> Result<Option<String>, FsError> {
    let mut hasher = Digest::default();
    let mut buf = vec![0u8; HASH_CHUNK.min(size as usize + 1).max(1)];
    let mut offset = 0u64;
    loop {
        let n = match file.read_at(&mut buf, offset) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FsError::Read(e)),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
        if offset > size {
            return Ok(None);
        }
    }
    Ok((offset == size).then(|| hasher.finish()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn open(dir: &tempfile::TempDir, bytes: &[u8]) -> (File, Meta) {
        let path = dir.path().join("f");
        std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
        let file = File::open(&path).unwrap();
        let meta = sys::meta(file.as_fd()).unwrap();
        (file, meta)
    }

    fn check(seen: &[u8], now: &[u8], with_digest: bool, expected: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (file, meta) = open(&dir, seen);
        let guard = if with_digest { of_content(&file, &meta, seen) } else { of_file(&file, &meta) };
        drop(file);
        // A new inode every time: the metadata part never matches.
        std::fs::remove_file(dir.path().join("f")).unwrap();
        let (file, meta) = open(&dir, now);
        assert_eq!(
            holds(&guard, &file, &meta).unwrap(),
            expected,
            "{seen:?} -> {now:?}, digest {with_digest}"
        );
    }

    #[test]
    fn a_guard_holds_by_metadata_or_by_content() {
        check(b"same", b"same", true, true);
        check(b"", b"", true, true);
        check(b"same", b"same", false, false);
        check(b"same", b"diff", true, false);
        check(b"same", b"same!", true, false);
        let big = vec![7u8; 3 * HASH_CHUNK + 5];
        check(&big, &big, true, true);
        let mut changed = big.clone();
        changed[2 * HASH_CHUNK] = 8;
        check(&big, &changed, true, false);
    }

    #[test]
    fn an_unchanged_file_holds_by_metadata_and_keeps_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (file, meta) = open(&dir, b"abc");
        assert!(holds(&of_file(&file, &meta), &file, &meta).unwrap());
        assert!(holds(&of_content(&file, &meta, b"abc"), &file, &meta).unwrap());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut &file, &mut rest).unwrap();
        assert_eq!(rest, "abc");
    }
}
