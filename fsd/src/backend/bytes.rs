//! Raw bytes of any size and removals of any shape: writeBytes streams a framed body from a pipe
//! into the atomic replace (the network process never holds the file, nor does the worker), and
//! remove takes a file, a link (never followed), an empty directory or a whole tree, walking
//! descriptor-relative, never crossing a mount and never touching a protected name.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use super::Backend;
use super::commit::Commit;
use super::pipeline::{Body, Mutation, only};
use super::write::parent_vanished;
use crate::digest::Digest;
use crate::error::{Denial, Failure, FsError};
use crate::ipc_messages::MAX_BODY_FRAME;
use crate::op::{Mode, Outcome, WriteGuard};
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
        let mutation = Mutation::Bytes { path, file_mode, guard: guard.as_ref() };
        // A parent that vanished fails the call before its first byte is read (see
        // `parent_vanished`): the whole body is still on the pipe for the second walk.
        match self.write_bytes_once(mode, mutation, &mut body, progress) {
            Err(failure) if parent_vanished(&failure.error) => {
                tracing::debug!(%failure.error, "a write's directory vanished under it; walking again");
                self.write_bytes_once(mode, mutation, &mut body, progress)
            }
            other => other,
        }
    }

    /// The pipeline with a body: planned, the body staged with no lock held (a slow uploader
    /// does not hold up the other calls on this file), then locked for the guard and the rename.
    fn write_bytes_once(
        &self,
        mode: Mode,
        mutation: Mutation<'_>,
        body: &mut std::io::BufReader<File>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Outcome, Failure> {
        let plan = self.plan(mode, mutation, false)?;
        let limit = self.limits.max_upload_bytes;
        let mut size = 0u64;
        let mut hasher = Digest::default();
        let mut fill = |file: &mut File| {
            size = copy_frames(&mut *body, file, limit, &mut hasher, progress)?;
            Ok(())
        };
        let staged = self.stage_body(&plan, &mut fill)?;
        let _held = self.lock_plans(&[&plan])?;
        let checked = self.check(&plan)?;
        let body = Body { staged, size, digest: hasher.finish() };
        self.commit_all(Commit::Single(checked, Some(body))).and_then(|outcomes| only(outcomes, &plan))
    }
}

/// One recursive removal: the mode's fence, the root it is in and the device it may not leave.
pub(super) struct Tree<'b> {
    pub(super) backend: &'b Backend,
    pub(super) mode: Mode,
    pub(super) root: usize,
    pub(super) dev: u64,
}

impl Tree<'_> {
    /// Walks (and, when `remove`, removes) the directory `name` in `parent` and everything in
    /// it. Returns the number of names removed; a failure half-way says how many were.
    pub(super) fn walk(
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
    use crate::ipc_messages::body_frame_header;

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
