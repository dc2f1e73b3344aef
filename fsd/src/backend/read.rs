//! Reads: stat, readText, readBytes, streamText and listDir. Only regular files are opened for
//! I/O, always non-blocking and without following a final link, then checked by fstat on the
//! handle that is read.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use super::resolve::{self, Resolved, WalkOptions};
use super::{Backend, text, version};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{DirEntry, FileType, Info, Mode, Outcome, StreamHeader, TEMP_PREFIX, Target};
use crate::sys::{self, Errno, Kind, Meta};

/// Whether the file's content still is what it was when it was opened ([`Meta::read_unchanged`]).
pub(super) fn unchanged(file: &File, at_open: &Meta) -> Result<(), FsError> {
    let now = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
    if !now.read_unchanged(at_open) {
        return Err(FsError::Stale(StaleReason::ChangedWhileRead));
    }
    Ok(())
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::File,
        Kind::Directory => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Other => FileType::Other,
    }
}

/// Reads the whole file as it was at open (`at_open`), at most `limit` bytes. A file that
/// reports size 0 (procfs, some FUSE files) is read up to the limit: more is `FS_TOO_LARGE`. A
/// file whose bytes or metadata no longer match its size at open (truncated, grown, rewritten
/// under the read) is `FS_STALE_VERSION`, never a short or mixed read passed off as the file.
pub(super) fn read_bounded(file: &File, at_open: &Meta, limit: u64) -> Result<Vec<u8>, FsError> {
    if at_open.size > limit {
        return Err(FsError::TooLarge { size: at_open.size, limit });
    }
    let cap = if at_open.size == 0 { limit } else { at_open.size };
    let mut buf = Vec::with_capacity(usize::try_from(cap.min(1 << 20)).unwrap_or(0));
    file.take(cap + 1).read_to_end(&mut buf).map_err(FsError::Read)?;
    if at_open.size == 0 {
        if buf.len() as u64 > limit {
            return Err(FsError::TooLarge { size: buf.len() as u64, limit });
        }
    } else if buf.len() as u64 != at_open.size {
        return Err(FsError::Stale(StaleReason::ChangedWhileRead));
    }
    unchanged(file, at_open)?;
    Ok(buf)
}

impl Backend {
    /// Opens the resolved target as a regular file for reading.
    pub(super) fn open_regular(&self, resolved: &Resolved) -> Result<(File, Meta), FsError> {
        let meta = resolved.meta.ok_or(FsError::NotFound)?;
        if meta.kind != Kind::File {
            return Err(FsError::NotRegularFile);
        }
        let parent = resolved.parent.as_ref().ok_or(FsError::NotRegularFile)?;
        let file = match sys::open_read(parent.as_fd(), resolved.name()) {
            Ok(file) => file,
            Err(Errno::NOENT) => return Err(FsError::NotFound),
            // The name became a link after the walk: not the file that was resolved (for an
            // approved call, not the object approved).
            Err(Errno::LOOP) if resolved.bound => return Err(FsError::Denied(Denial::NotApproved)),
            Err(Errno::LOOP) => return Err(FsError::NotRegularFile),
            Err(errno) => return Err(FsError::Open(errno)),
        };
        let meta = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
        if meta.kind != Kind::File {
            return Err(FsError::NotRegularFile);
        }
        resolved.same_final(Some(&meta))?;
        Ok((file, meta))
    }

    /// The version the daemon reports for a resolved object, as every reply computes it.
    pub(super) fn version_at(&self, resolved: &Resolved, meta: &Meta) -> String {
        if meta.kind == Kind::File
            && let Ok((file, opened)) = self.open_regular(resolved)
        {
            return version::of_file(&file, &opened);
        }
        version::of_meta(meta)
    }

    pub(super) fn stat(&self, mode: Mode, path: &str, no_follow: bool) -> Result<Outcome, Failure> {
        let options = WalkOptions { follow_final: !no_follow, create_parents: false };
        let resolved = match self.walk(mode, path, options) {
            Ok(r) => r,
            // A missing parent directory means the target is absent, not an error.
            // Its key is the one the walk of a call that makes the missing directories
            // resolves to (an approval names it).
            Err(Failure { error: FsError::NotFound | FsError::NotDirectory, path: shown, .. }) => {
                let (binding, key) = self.binding_below(mode, path).unzip();
                let target = Target { key: key.unwrap_or_default(), display: shown };
                return Ok(Outcome::Stat { target, info: None, binding });
            }
            Err(f) => return Err(f),
        };
        let target = self.target(&resolved);
        let binding = Some(resolved.binding());
        let info = resolved.meta.map(|meta| Info {
            version: self.version_at(&resolved, &meta),
            file_type: file_type(meta.kind),
            size: (meta.kind == Kind::File).then_some(meta.size),
        });
        Ok(Outcome::Stat { target, info, binding })
    }

    pub(super) fn read_text(&self, mode: Mode, path: &str, max_bytes: u64) -> Result<Outcome, Failure> {
        let limit = match max_bytes {
            0 => self.limits.max_editable_bytes,
            n => n.min(self.limits.max_editable_bytes),
        };
        let resolved = self.walk_read(mode, path)?;
        let (file, meta) = self.open_regular(&resolved).map_err(|e| self.fail(e, &resolved))?;
        if meta.size > limit {
            return Err(self.fail(FsError::TooLarge { size: meta.size, limit }, &resolved));
        }
        let bytes = read_bounded(&file, &meta, limit).map_err(|e| self.fail(e, &resolved))?;
        text::decode(&bytes).map_err(|e| self.fail(e, &resolved))?;
        // The digest is of the bytes just read, so no second read; the model saw exactly these.
        let version = version::of_content(&file, &meta, &bytes);
        let text = String::from_utf8(bytes)
            .map_err(|_| self.fail(FsError::NotText("file is not valid UTF-8"), &resolved))?;
        Ok(Outcome::ReadText { target: self.target(&resolved), version, text })
    }

    pub(super) fn read_bytes(&self, mode: Mode, path: &str, max_bytes: u64) -> Result<Outcome, Failure> {
        let limit = match max_bytes {
            0 => self.limits.max_read_bytes,
            n => n.min(self.limits.max_read_bytes),
        };
        let resolved = self.walk_read(mode, path)?;
        let (file, meta) = self.open_regular(&resolved).map_err(|e| self.fail(e, &resolved))?;
        if meta.size > limit {
            return Err(self.fail(FsError::TooLarge { size: meta.size, limit }, &resolved));
        }
        let data = read_bounded(&file, &meta, limit).map_err(|e| self.fail(e, &resolved))?;
        let version = version::of_content(&file, &meta, &data);
        Ok(Outcome::ReadBytes { target: self.target(&resolved), version, data })
    }

    /// Opens a file for a streamed read: the header and the open handle. The handle can cross
    /// to another process (SCM_RIGHTS), which then reads it with [`pump`] without any rights of
    /// its own.
    pub fn open_stream(&self, mode: Mode, path: &str) -> Result<(StreamHeader, File), Failure> {
        let resolved = self.walk_read(mode, path)?;
        let (file, meta) = self.open_regular(&resolved).map_err(|e| self.fail(e, &resolved))?;
        let header = StreamHeader {
            target: self.target(&resolved),
            version: version::of_file(&file, &meta),
            size: meta.size,
        };
        Ok((header, file))
    }

    /// The chunk size for a requested one (0: the default), within the limits.
    pub fn chunk_size(&self, requested: usize) -> usize {
        match requested {
            0 => self.limits.default_chunk_bytes,
            n => n.clamp(4096, self.limits.max_chunk_bytes),
        }
    }

    pub(super) fn list_dir(&self, mode: Mode, path: &str) -> Result<Outcome, Failure> {
        let resolved = self.walk_read(mode, path)?;
        let meta = resolved.meta.ok_or_else(|| self.fail(FsError::NotFound, &resolved))?;
        if meta.kind != Kind::Directory {
            return Err(self.fail(FsError::NotDirectory, &resolved));
        }
        let dir = match &resolved.parent {
            Some(parent) => sys::open_dir_for_listing(parent.as_fd(), resolved.name()),
            None => sys::open_dir_for_listing(self.roots[resolved.root].fd.as_fd(), OsStr::new("")),
        }
        .map_err(|e| self.fail(FsError::List(e), &resolved))?;
        let listing = dir.try_clone().map_err(|e| {
            self.fail(FsError::List(Errno::from_io_error(&e).unwrap_or(Errno::IO)), &resolved)
        })?;
        let mut names = sys::list_names(listing, self.limits.max_dir_entries).map_err(|e| {
            let error = match e {
                Errno::NOSPC => FsError::TooManyEntries(self.limits.max_dir_entries),
                e => FsError::List(e),
            };
            self.fail(error, &resolved)
        })?;
        names.retain(|n| !n.as_bytes().starts_with(TEMP_PREFIX.as_bytes()));
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));

        let target = self.target(&resolved);
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let mut rel = resolved.rel.clone();
            rel.push(name.clone());
            let child = Target {
                key: resolve::target_key(&self.roots, resolved.root, &rel),
                display: resolve::display_path(&self.roots, resolved.root, &rel),
            };
            let display_name = resolve::escape_bytes(name.as_bytes());
            let other = |target: Target| DirEntry {
                name: display_name.clone(),
                raw_name: name.as_bytes().to_vec(),
                file_type: FileType::Other,
                target,
                version: None,
                size: None,
                modified: None,
                mode: None,
            };
            let meta = match sys::meta_at(dir.as_fd(), &name) {
                Ok(meta) => meta,
                // Disappeared since the listing: report it as other, without metadata.
                Err(Errno::NOENT) => {
                    entries.push(other(child));
                    continue;
                }
                Err(e) => return Err(self.fail(FsError::Metadata(e), &resolved)),
            };
            // A mount point the walk may not enter is shown, and nothing of what it shows.
            if !self.roots[resolved.root].may_enter(meta.mount) {
                entries.push(DirEntry { file_type: file_type(meta.kind), ..other(child) });
                continue;
            }
            let child_resolved = if meta.kind == Kind::Symlink {
                // A link is described by what it leads to inside the roots; broken or leading
                // out, it is "other".
                match std::str::from_utf8(child.display.as_bytes())
                    .ok()
                    .and_then(|p| self.walk_read(mode, p).ok())
                {
                    Some(r) if r.meta.is_some() => r,
                    _ => {
                        entries.push(other(child));
                        continue;
                    }
                }
            } else {
                // A denied entry is shown, and nothing of it: not even its size.
                if self.read_denied(resolved.root, &rel).is_err() {
                    entries.push(DirEntry { file_type: file_type(meta.kind), ..other(child) });
                    continue;
                }
                Resolved {
                    root: resolved.root,
                    rel,
                    parent: dir.try_clone().ok(),
                    meta: Some(meta),
                    made: Default::default(),
                    links: Vec::new(),
                    dirs: Vec::new(),
                    bound: false,
                }
            };
            let Some(meta) = child_resolved.meta else {
                entries.push(other(child));
                continue;
            };
            entries.push(DirEntry {
                name: display_name.clone(),
                raw_name: name.as_bytes().to_vec(),
                file_type: file_type(meta.kind),
                target: self.target(&child_resolved),
                version: Some(self.version_at(&child_resolved, &meta)),
                size: (meta.kind == Kind::File).then_some(meta.size),
                modified: Some(meta.mtime),
                mode: Some(meta.mode & 0o7777),
            });
        }
        Ok(Outcome::ListDir { target, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file with `size` bytes, opened, and its metadata at open.
    fn opened(dir: &std::path::Path, size: usize) -> (std::path::PathBuf, File, Meta) {
        let path = dir.join("f");
        std::fs::write(&path, vec![b'a'; size]).unwrap();
        let file = File::open(&path).unwrap();
        let meta = sys::meta(file.as_fd()).unwrap();
        (path, file, meta)
    }

    #[test]
    fn a_read_of_a_file_that_changed_under_it_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let stale =
            |r: Result<Vec<u8>, FsError>| matches!(r, Err(FsError::Stale(StaleReason::ChangedWhileRead)));

        let (_, file, meta) = opened(dir.path(), 1000);
        assert_eq!(read_bounded(&file, &meta, 1 << 20).unwrap().len(), 1000);

        let (path, file, meta) = opened(dir.path(), 1000);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(10).unwrap();
        assert!(stale(read_bounded(&file, &meta, 1 << 20)), "truncated");

        let (path, file, meta) = opened(dir.path(), 1000);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"more").unwrap();
        assert!(stale(read_bounded(&file, &meta, 1 << 20)), "grown");

        let (path, file, meta) = opened(dir.path(), 1000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(b"b").unwrap();
        assert!(stale(read_bounded(&file, &meta, 1 << 20)), "rewritten in place, same size");

        let (_, file, meta) = opened(dir.path(), 1000);
        assert!(matches!(read_bounded(&file, &meta, 999), Err(FsError::TooLarge { size: 1000, limit: 999 })));
    }

    #[test]
    fn a_size_zero_file_is_read_up_to_the_limit() {
        // /proc files report size 0 and have content: read, but never past the limit.
        let file = File::open("/proc/self/status").unwrap();
        let meta = sys::meta(file.as_fd()).unwrap();
        assert_eq!(meta.size, 0);
        assert!(!read_bounded(&file, &meta, 1 << 20).unwrap().is_empty());
        let file = File::open("/proc/self/status").unwrap();
        assert!(matches!(read_bounded(&file, &meta, 16), Err(FsError::TooLarge { limit: 16, .. })));
    }
}
