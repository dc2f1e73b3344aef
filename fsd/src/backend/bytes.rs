//! Raw bytes of any size and removals of any shape: writeBytes streams a framed body from a pipe
//! into the atomic replace (the network process never holds the file, nor does the worker), and
//! remove takes a file, a link (never followed), an empty directory or a whole tree, walking
//! descriptor-relative, never crossing a mount and never touching a protected name.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use super::moves::remove_checked;
use super::resolve::WalkOptions;
use super::write::{Place, check_write_guard, current_checked, parent_vanished, same_key, stage};
use super::{Backend, version};
use crate::digest::Digest;
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::ipc::MAX_BODY_FRAME;
use crate::op::{EditGuard, Mode, Outcome, WriteGuard, WriteOperation};
use crate::sys::{self, Errno, Kind};

/// A worker reports progress this often (bytes, or time with any byte) while a body streams in,
/// so a long or slow upload is not mistaken for a hung worker; one that stalls still is.
pub const PROGRESS_BYTES: u64 = 8 << 20;
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Copies a framed body into `out`, refusing more than `limit` bytes, hashing what passes (the
/// digest of the file's content version). Returns the byte count.
pub fn copy_frames(
    body: &mut impl Read,
    out: &mut impl Write,
    limit: u64,
    hasher: &mut Digest,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, FsError> {
    let mut buf = vec![0u8; MAX_BODY_FRAME];
    let mut total = 0u64;
    let mut reported = 0u64;
    let mut reported_at = std::time::Instant::now();
    loop {
        let mut header = [0u8; 4];
        read_exact(body, &mut header)?;
        let len = u32::from_le_bytes(header) as usize;
        if len == 0 {
            return Ok(total);
        }
        if len > MAX_BODY_FRAME {
            return Err(FsError::WriteTemp(std::io::Error::other("body frame over the limit")));
        }
        total += len as u64;
        if total > limit {
            return Err(FsError::TooLarge { size: total, limit });
        }
        read_exact(body, &mut buf[..len])?;
        out.write_all(&buf[..len]).map_err(|e| super::write::write_failed(e, len as u64))?;
        hasher.update(&buf[..len]);
        if total - reported >= PROGRESS_BYTES || reported_at.elapsed() >= PROGRESS_EVERY {
            reported = total;
            reported_at = std::time::Instant::now();
            progress(total);
        }
    }
}

fn read_exact(body: &mut impl Read, buf: &mut [u8]) -> Result<(), FsError> {
    body.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FsError::Truncated,
        _ => FsError::Read(e),
    })
}

impl Backend {
    /// Writes the framed body on `body` as the whole file at `path`, atomically.
    pub fn write_bytes(
        &self,
        mode: Mode,
        path: &str,
        file_mode: Option<u32>,
        guard: Option<WriteGuard>,
        body: File,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Outcome, Failure> {
        let mut body = std::io::BufReader::with_capacity(MAX_BODY_FRAME + 4, body);
        // A parent that vanished fails the call before its first byte is read (see
        // `parent_vanished`): the whole body is still on the pipe for the second walk.
        match self.write_bytes_once(mode, path, file_mode, guard.as_ref(), &mut body, progress) {
            Err(failure) if parent_vanished(&failure.error) => {
                tracing::debug!(%failure.error, "a write's directory vanished under it; walking again");
                self.write_bytes_once(mode, path, file_mode, guard.as_ref(), &mut body, progress)
            }
            other => other,
        }
    }

    fn write_bytes_once(
        &self,
        mode: Mode,
        path: &str,
        file_mode: Option<u32>,
        guard: Option<&WriteGuard>,
        body: &mut std::io::BufReader<File>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Outcome, Failure> {
        let create_parents = !matches!(guard, Some(WriteGuard::ReplaceIfVersion { .. }));
        let resolved = match self.walk(mode, path, WalkOptions { follow_final: true, create_parents }) {
            Err(Failure { error: FsError::NotFound, path, .. }) if !create_parents => {
                return Err(Failure::new(FsError::Stale(StaleReason::Gone), path));
            }
            other => other?,
        };
        let fail = |e| self.fail(e, &resolved);
        self.may_change(mode, &resolved).map_err(fail)?;
        let target = self.target(&resolved);
        let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
        // A guard that fails already refuses before any byte is read; it is checked again
        // under the lock, where it counts.
        check_write_guard(guard, current_checked(&resolved).map_err(fail)?.as_ref(), &target.key)
            .map_err(fail)?;
        let limit = self.limits.max_upload_bytes;
        let mut size = 0u64;
        let mut hasher = Digest::default();
        let mut fill = |file: &mut File| {
            size = copy_frames(&mut *body, file, limit, &mut hasher, progress)?;
            Ok(())
        };
        // The body streams into a temporary file with no lock held: a slow uploader does not
        // hold up the other calls on this file. The lock covers only the guard and the rename.
        let staged = stage(parent.as_fd(), &mut fill, self.journal_scope(&resolved), None).map_err(fail)?;
        let _held = self.lock(&[&target.key], &resolved)?;
        let existing = current_checked(&resolved).map_err(fail)?;
        check_write_guard(guard, existing.as_ref(), &target.key).map_err(fail)?;
        let (operation, place) = match &existing {
            // An approved creation never replaces what appears at the name meanwhile.
            None if guard.is_some() || self.creation_only(path) => (WriteOperation::Create, Place::Create),
            None => (WriteOperation::Create, Place::CreateOrReplace),
            Some((_, meta)) => (WriteOperation::Update, Place::Replace(meta)),
        };
        let (file, meta) = staged.place(resolved.name(), place, file_mode, None).map_err(fail)?;
        if operation == WriteOperation::Create {
            self.undo_git_piece(mode, &resolved, &meta)?;
        }
        // Every byte passed through here: the version carries their digest.
        let version = version::with_digest(version::of_file(&file, &meta), size, &hasher.finish());
        resolved.made.keep();
        Ok(Outcome::WriteBytes { target, operation, version, size })
    }

    pub(super) fn remove(
        &self,
        mode: Mode,
        path: &str,
        recursive: bool,
        guard: Option<EditGuard>,
    ) -> Result<Outcome, Failure> {
        let resolved = self.walk(mode, path, WalkOptions { follow_final: false, create_parents: false })?;
        let fail = |e| self.fail(e, &resolved);
        let walked = resolved.meta.ok_or_else(|| fail(FsError::NotFound))?;
        let Some(parent) = resolved.parent.as_ref() else {
            return Err(fail(FsError::Denied(Denial::Root)));
        };
        self.may_change(mode, &resolved).map_err(fail)?;
        let target = self.target(&resolved);
        let _held = self.lock(&[&target.key], &resolved)?;
        let name = resolved.name();
        // Re-checked under the lock: the name must still be what the walk found.
        let now = match sys::meta_at(parent.as_fd(), name) {
            Ok(meta) => meta,
            Err(Errno::NOENT) => return Err(fail(FsError::NotFound)),
            Err(errno) => return Err(fail(FsError::Metadata(errno))),
        };
        if (now.dev, now.ino) != (walked.dev, walked.ino) {
            return Err(fail(FsError::Stale(StaleReason::OtherFile)));
        }
        // The file a guard was checked against: only that one is removed.
        let mut checked = None;
        if let Some(guard) = &guard {
            same_key(guard.target_key.as_ref(), &target.key).map_err(fail)?;
            let holds = match now.kind {
                Kind::File => match current_checked(&resolved).map_err(fail)? {
                    Some((file, meta)) => {
                        checked = Some(meta);
                        version::holds(&guard.version, &file, &meta).map_err(fail)?
                    }
                    None => return Err(fail(FsError::Stale(StaleReason::Gone))),
                },
                // A link (or another non-directory) is checked by its metadata, and only the
                // one checked is removed: a save that replaced it since is another inode.
                Kind::Directory => version::of_meta(&now) == guard.version,
                _ => {
                    checked = Some(now);
                    version::of_meta(&now) == guard.version
                }
            };
            if !holds {
                return Err(fail(FsError::Stale(StaleReason::Changed)));
            }
        }
        let removed = if now.kind == Kind::Directory {
            match sys::remove_dir(parent.as_fd(), name) {
                Ok(()) => 1,
                Err(Errno::NOTEMPTY | Errno::EXIST) if recursive => {
                    let tree = Tree { backend: self, mode, root: resolved.root, dev: now.dev };
                    // A dry walk first: a protected name or a mount anywhere below refuses the
                    // whole removal before anything is gone.
                    tree.walk(parent.as_fd(), name, &resolved.rel, false).map_err(fail)?;
                    tree.walk(parent.as_fd(), name, &resolved.rel, true).map_err(fail)?
                }
                Err(Errno::NOTEMPTY | Errno::EXIST) => return Err(fail(FsError::NotEmpty)),
                Err(errno) => return Err(fail(FsError::Remove(errno))),
            }
        } else if let Some(checked) = &checked {
            remove_checked(parent.as_fd(), name, checked, self.journal_scope(&resolved)).map_err(fail)?;
            1
        } else {
            sys::remove(parent.as_fd(), name).map_err(|e| fail(FsError::Remove(e)))?;
            1
        };
        sys::sync_dir(parent.as_fd()).map_err(|e| fail(FsError::Sync(e)))?;
        Ok(Outcome::Remove { target, removed })
    }
}

/// One recursive removal: the mode's fence, the root it is in and the device it may not leave.
struct Tree<'b> {
    backend: &'b Backend,
    mode: Mode,
    root: usize,
    dev: u64,
}

impl Tree<'_> {
    /// Walks (and, when `remove`, removes) the directory `name` in `parent` and everything in
    /// it. Returns the number of names removed; a failure half-way says how many were.
    fn walk(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        rel: &[OsString],
        remove: bool,
    ) -> Result<u64, FsError> {
        let mut removed = 0u64;
        self.walk_into(parent, name, rel, remove, &mut removed).map_err(|source| match removed {
            0 => source,
            removed => FsError::Partial { removed, source: Box::new(source) },
        })?;
        Ok(removed)
    }

    fn walk_into(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        rel: &[OsString],
        remove: bool,
        removed: &mut u64,
    ) -> Result<(), FsError> {
        // O_NOFOLLOW | O_DIRECTORY: a directory swapped for a link since it was listed is refused,
        // never entered.
        let dir = sys::open_dir_for_listing(parent, name).map_err(FsError::Walk)?;
        let meta = sys::meta(dir.as_fd()).map_err(FsError::Metadata)?;
        if meta.dev != self.dev || sys::is_mount_root(dir.as_fd()).ok().flatten() == Some(true) {
            return Err(FsError::Denied(Denial::Mount(name.to_string_lossy().into_owned())));
        }
        // Another root of the daemon nested in this tree (a read-only one below a writable
        // root, which Landlock cannot keep read-only): never removed from here.
        if self.backend.is_root_dir(&meta) {
            return Err(FsError::Denied(Denial::Root));
        }
        let listing =
            dir.try_clone().map_err(|e| FsError::List(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        let names = sys::list_names(listing, self.backend.limits.max_dir_entries).map_err(|e| match e {
            Errno::NOSPC => FsError::TooManyEntries(self.backend.limits.max_dir_entries),
            e => FsError::List(e),
        })?;
        for child in names {
            let mut child_rel = rel.to_vec();
            child_rel.push(child.clone());
            self.backend.may_write(self.mode, self.root, &child_rel)?;
            // A tree holding a denied file is not removed: removing it is a change of it too.
            self.backend.read_denied(self.root, &child_rel)?;
            let meta = match sys::meta_at(dir.as_fd(), &child) {
                Ok(meta) => meta,
                Err(Errno::NOENT) => continue,
                Err(errno) => return Err(FsError::Metadata(errno)),
            };
            if meta.kind == Kind::Directory {
                self.walk_into(dir.as_fd(), &child, &child_rel, remove, removed)?;
            } else if remove {
                match sys::remove(dir.as_fd(), &child) {
                    Ok(()) => *removed += 1,
                    Err(Errno::NOENT) => {}
                    Err(errno) => return Err(FsError::Remove(errno)),
                }
            }
        }
        if remove {
            match sys::remove_dir(parent, name) {
                Ok(()) => *removed += 1,
                Err(Errno::NOENT) => {}
                Err(errno) => return Err(FsError::Remove(errno)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::body_frame_header;

    fn framed(chunks: &[&[u8]], end: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&body_frame_header(c.len()));
            out.extend_from_slice(c);
        }
        if end {
            out.extend_from_slice(&body_frame_header(0));
        }
        out
    }

    fn check(input: Vec<u8>, limit: u64, expected: Result<&[u8], &str>) {
        let mut out = Vec::new();
        let got = copy_frames(&mut input.as_slice(), &mut out, limit, &mut Digest::default(), &mut |_| {});
        match (got, expected) {
            (Ok(n), Ok(want)) => {
                assert_eq!(out, want);
                assert_eq!(n, want.len() as u64);
            }
            (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{e} does not contain {want}"),
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn frames_end_only_at_the_end_marker() {
        check(framed(&[b"ab", b"cd"], true), 10, Ok(b"abcd"));
        check(framed(&[], true), 10, Ok(b""));
        check(framed(&[b"ab", b"cd"], false), 10, Err("ended before its last byte"));
        check(framed(&[b"abc"], true)[..5].to_vec(), 10, Err("ended before its last byte"));
        check(framed(&[b"abcd", b"ef"], true), 5, Err("over the limit of 5 bytes"));
    }
}
