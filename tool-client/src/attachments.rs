//! The attachment store: normalized images kept on disk under `attachmentStore`, content-addressed
//! by SHA-256, so they survive restarts, identical bytes are stored once, and a result can name a
//! durable reference instead of carrying the bytes in history.
//!
//! Layout: `<dir>/objects/<first two hex digits>/<64 hex digits>`, with no extension, so reading
//! an object path back through `read_image` identifies it by signature (the seed). Writes go to a
//! temporary file in the same directory and are renamed into place, so a reader never sees a
//! partial object and several processes may share one store. The store is bounded by total size:
//! after a write, the oldest objects (by modification time; a repeated store of the same bytes
//! refreshes it) are removed until the total fits, never the object just written.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// The default bound on the store's total size.
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the attachment store at {0}: {1}")]
    Create(PathBuf, #[source] std::io::Error),
    #[error("cannot write attachment {0}: {1}")]
    Write(PathBuf, #[source] std::io::Error),
    #[error("cannot read attachment {0}: {1}")]
    Read(String, #[source] std::io::Error),
    #[error("not an attachment reference: {0}")]
    BadReference(String),
}

/// A stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The durable reference: `sha256:<hex>`.
    pub reference: String,
    /// Where the object lives on disk.
    pub path: PathBuf,
    pub size: u64,
    /// False when identical bytes were already stored.
    pub created: bool,
}

/// A content-addressed store rooted at one directory.
#[derive(Debug, Clone)]
pub struct AttachmentStore {
    dir: PathBuf,
    max_bytes: u64,
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

impl AttachmentStore {
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> AttachmentStore {
        AttachmentStore { dir: dir.into(), max_bytes }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn objects(&self) -> PathBuf {
        self.dir.join("objects")
    }

    fn object_path(&self, digest: &str) -> PathBuf {
        self.objects().join(&digest[..2]).join(digest)
    }

    /// The path of a reference (`sha256:<hex>`), whether or not it is still stored.
    pub fn path_of(&self, reference: &str) -> Result<PathBuf, StoreError> {
        let digest = reference.strip_prefix("sha256:").unwrap_or_default();
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(StoreError::BadReference(reference.to_owned()));
        }
        Ok(self.object_path(digest))
    }

    /// The bytes of a stored reference.
    pub fn get(&self, reference: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.path_of(reference)?;
        fs::read(&path).map_err(|e| StoreError::Read(reference.to_owned(), e))
    }

    /// Stores `bytes` (once), then evicts the oldest objects beyond the size bound.
    pub fn put(&self, bytes: &[u8]) -> Result<Stored, StoreError> {
        let digest = hex(&Sha256::digest(bytes));
        let path = self.object_path(&digest);
        let reference = format!("sha256:{digest}");
        let size = bytes.len() as u64;
        let existing = fs::metadata(&path).ok().filter(|m| m.is_file() && m.len() == size);
        let created = if existing.is_some() {
            // Touch it, so eviction sees it as recently used. Failure only costs eviction order.
            let _ =
                fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
            false
        } else {
            let parent = path.parent().unwrap_or(&self.dir).to_path_buf();
            fs::create_dir_all(&parent).map_err(|e| StoreError::Create(parent.clone(), e))?;
            let mut temp = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&parent)
                .map_err(|e| StoreError::Write(path.clone(), e))?;
            temp.write_all(bytes)
                .and_then(|()| temp.as_file().sync_all())
                .map_err(|e| StoreError::Write(path.clone(), e))?;
            temp.persist(&path).map_err(|e| StoreError::Write(path.clone(), e.error))?;
            true
        };
        self.evict(&path);
        Ok(Stored { reference, path, size, created })
    }

    /// Removes the oldest objects until the total fits the bound, sparing `keep`. Races with
    /// other processes are harmless: an object already gone is simply skipped.
    fn evict(&self, keep: &Path) {
        let mut objects: Vec<(SystemTime, PathBuf, u64)> = Vec::new();
        let Ok(shards) = fs::read_dir(self.objects()) else { return };
        for shard in shards.flatten() {
            let Ok(entries) = fs::read_dir(shard.path()) else { continue };
            for entry in entries.flatten() {
                // Another writer's object in progress is not evictable.
                if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                objects.push((modified, entry.path(), meta.len()));
            }
        }
        let mut total: u64 = objects.iter().map(|o| o.2).sum();
        if total <= self.max_bytes {
            return;
        }
        objects.sort();
        for (_, path, size) in objects {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_addressing_dedups_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path(), DEFAULT_MAX_BYTES);
        let a = store.put(b"hello").unwrap();
        assert!(a.created);
        assert_eq!(a.reference, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
        assert_eq!(
            a.path,
            dir.path().join("objects/2c/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        );
        let again = store.put(b"hello").unwrap();
        assert!(!again.created);
        assert_eq!(again.path, a.path);
        // A new store value over the same directory (a restart) still serves it.
        let reopened = AttachmentStore::new(dir.path(), DEFAULT_MAX_BYTES);
        assert_eq!(reopened.get(&a.reference).unwrap(), b"hello");
        assert!(reopened.get("sha256:zz").is_err());
    }

    #[test]
    fn eviction_removes_the_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = AttachmentStore::new(dir.path(), 10);
        let old = store.put(b"aaaa").unwrap();
        let set = |p: &Path, secs: u64| {
            let f = fs::File::options().append(true).open(p).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)).unwrap();
        };
        set(&old.path, 100);
        let mid = store.put(b"bbbb").unwrap();
        set(&mid.path, 200);
        assert!(old.path.exists() && mid.path.exists());
        // 12 bytes > 10: the oldest goes, the newest stays.
        let new = store.put(b"cccc").unwrap();
        assert!(!old.path.exists());
        assert!(mid.path.exists() && new.path.exists());
        // An object larger than the bound is still kept: it is the one just written.
        let big = store.put(b"0123456789abcdef").unwrap();
        assert!(big.path.exists());
        assert!(!mid.path.exists() && !new.path.exists());
    }
}
