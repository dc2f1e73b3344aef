//! moveFile and deleteFile: regular files only, a symlink source refused, guarded like edits,
//! under the locks of every target they touch. A move onto a guarded destination exchanges the
//! names and checks what it swapped out, as a replace does; a guarded removal moves the name
//! aside and checks what it moved (`remove_checked`).

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use super::journal::Scope;
use super::resolve::{Resolved, WalkOptions};
use super::write::{Place, current_checked, current_file, place_file, same_key};
use super::{Backend, read, text, version};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{Change, EditGuard, Mode, Outcome, WriteGuard};
use crate::sys::{self, Errno, Kind, RenameHow};

impl Backend {
    /// Resolves a move or delete source: the final link is not followed, and only a regular
    /// file qualifies.
    pub(super) fn walk_source(&self, mode: Mode, path: &str, guarded: bool) -> Result<Resolved, Failure> {
        let options = WalkOptions { follow_final: false, create_parents: false };
        let missing = |path: String| {
            let error = if guarded { FsError::Stale(StaleReason::Gone) } else { FsError::NotFound };
            Failure::new(error, path)
        };
        let resolved = match self.walk(mode, path, options) {
            Err(Failure { error: FsError::NotFound, path, .. }) => return Err(missing(path)),
            other => other?,
        };
        match resolved.meta {
            None => Err(self.fail(missing(String::new()).error, &resolved)),
            Some(meta) if meta.kind != Kind::File => Err(self.fail(FsError::NotRegularFile, &resolved)),
            Some(_) => Ok(resolved),
        }
    }

    /// Checks an edit-style guard against the current file.
    pub(super) fn check_source_guard(
        &self,
        guard: Option<&EditGuard>,
        key: &str,
        file: &std::fs::File,
        meta: &sys::Meta,
    ) -> Result<(), FsError> {
        if let Some(guard) = guard {
            same_key(guard.target_key.as_ref(), key)?;
            if !version::holds(&guard.version, file, meta)? {
                return Err(FsError::Stale(StaleReason::Changed));
            }
        }
        Ok(())
    }

    /// The text of a file for a removal diff, when bounded and text.
    pub(super) fn bounded_text(&self, file: &std::fs::File, meta: &sys::Meta) -> Option<String> {
        if meta.size > self.limits.max_diff_text_bytes {
            return None;
        }
        let bytes = read::read_bounded(file, meta, self.limits.max_diff_text_bytes).ok()?;
        text::decode(&bytes).ok().map(str::to_owned)
    }

    pub(super) fn delete_file(
        &self,
        mode: Mode,
        path: &str,
        guard: Option<EditGuard>,
    ) -> Result<Outcome, Failure> {
        let resolved = self.walk_source(mode, path, guard.is_some())?;
        let fail = |e| self.fail(e, &resolved);
        self.may_change(mode, &resolved).map_err(fail)?;
        let target = self.target(&resolved);
        let _held = self.lock(&[&target.key], &resolved)?;
        let missing = if guard.is_some() { FsError::Stale(StaleReason::Gone) } else { FsError::NotFound };
        let (file, meta) = current_checked(&resolved).map_err(fail)?.ok_or_else(|| fail(missing))?;
        self.check_source_guard(guard.as_ref(), &target.key, &file, &meta).map_err(fail)?;
        let before = self.bounded_text(&file, &meta);
        let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
        // An approved deletion removes the file it was shown, bound to its inode.
        if guard.is_some() || resolved.bound {
            remove_checked(parent.as_fd(), resolved.name(), &meta, self.journal_scope(&resolved))
                .map_err(fail)?;
        } else {
            sys::remove(parent.as_fd(), resolved.name()).map_err(|e| fail(FsError::Remove(e)))?;
        }
        sys::sync_dir(parent.as_fd()).map_err(|e| fail(FsError::Sync(e)))?;
        let change = match before {
            Some(before) => Change { before: Some(before), after: None, omitted: false },
            None => Change { before: None, after: None, omitted: true },
        };
        Ok(Outcome::DeleteFile { target, change })
    }

    pub(super) fn move_file(
        &self,
        mode: Mode,
        source: &str,
        destination: &str,
        source_guard: Option<EditGuard>,
        destination_guard: Option<WriteGuard>,
        content: Option<String>,
    ) -> Result<Outcome, Failure> {
        if let Some(content) = &content
            && content.len() as u64 > self.limits.max_editable_bytes
        {
            let error =
                FsError::TooLarge { size: content.len() as u64, limit: self.limits.max_editable_bytes };
            return Err(Failure::new(error, destination));
        }
        let src = self.walk_source(mode, source, source_guard.is_some())?;
        self.may_change(mode, &src).map_err(|e| self.fail(e, &src))?;
        // A source guard that fails already refuses before the destination's directories are
        // made; it is checked again under the locks, where it counts.
        if let Some((file, meta)) = current_checked(&src).map_err(|e| self.fail(e, &src))? {
            let key = self.target(&src).key;
            self.check_source_guard(source_guard.as_ref(), &key, &file, &meta)
                .map_err(|e| self.fail(e, &src))?;
        }
        let create_parents = !matches!(destination_guard, Some(WriteGuard::ReplaceIfVersion { .. }));
        let dst = self.walk(mode, destination, WalkOptions { follow_final: true, create_parents })?;
        self.may_change(mode, &dst).map_err(|e| self.fail(e, &dst))?;
        let src_target = self.target(&src);
        let dst_target = self.target(&dst);
        if src_target.key == dst_target.key {
            return Err(self.fail(FsError::Denied(Denial::SameFile), &dst));
        }
        let _held = self.lock(&[&src_target.key, &dst_target.key], &dst)?;

        let src_missing =
            if source_guard.is_some() { FsError::Stale(StaleReason::Gone) } else { FsError::NotFound };
        let (src_file, src_meta) = current_checked(&src)
            .map_err(|e| self.fail(e, &src))?
            .ok_or_else(|| self.fail(src_missing, &src))?;
        self.check_source_guard(source_guard.as_ref(), &src_target.key, &src_file, &src_meta)
            .map_err(|e| self.fail(e, &src))?;
        let existing = current_checked(&dst).map_err(|e| self.fail(e, &dst))?;
        match (&destination_guard, &existing) {
            (Some(WriteGuard::CreateIfAbsent), Some(_)) => {
                return Err(self.fail(FsError::AlreadyExists, &dst));
            }
            (Some(WriteGuard::ReplaceIfVersion { .. }), None) => {
                return Err(self.fail(FsError::Stale(StaleReason::Gone), &dst));
            }
            (Some(WriteGuard::ReplaceIfVersion { version: expected, target_key }), Some((file, meta))) => {
                same_key(target_key.as_ref(), &dst_target.key).map_err(|e| self.fail(e, &dst))?;
                if !version::holds(expected, file, meta).map_err(|e| self.fail(e, &dst))? {
                    return Err(self.fail(FsError::Stale(StaleReason::Changed), &dst));
                }
            }
            _ => {}
        }
        let src_text = self.bounded_text(&src_file, &src_meta);
        let dst_before = existing.as_ref().map(|(f, m)| self.bounded_text(f, m));
        let src_parent = src.parent.as_ref().ok_or_else(|| self.fail(FsError::NotRegularFile, &src))?;
        let dst_parent = dst.parent.as_ref().ok_or_else(|| self.fail(FsError::NotRegularFile, &dst))?;

        let mut source_removal_errno = None;
        let after: Option<String>;
        // An approved move never replaces what appears at a destination shown absent.
        let create_only = destination_guard.is_some() || self.creation_only(destination);
        let how = match (&destination_guard, &existing) {
            (_, None) if create_only => RenameHow::NoReplace,
            // A guarded replace swaps, then checks that what it swapped out is the file it
            // checked (see `swap_in`): a save over the destination since then is never lost.
            (Some(WriteGuard::ReplaceIfVersion { .. }), Some(_)) => RenameHow::Exchange,
            _ => RenameHow::Replace,
        };
        #[cfg(feature = "fault-injection")]
        if how == RenameHow::Exchange {
            super::write::pause_at_exchange(dst.name());
        }
        let renamed = match (&content, &existing) {
            (None, Some((_, checked))) if how == RenameHow::Exchange => {
                match swap_in(src_parent.as_fd(), src.name(), dst_parent.as_fd(), dst.name(), checked)
                    .map_err(|e| self.fail(e, &dst))?
                {
                    Swap::Moved { left_at_source } => {
                        source_removal_errno = left_at_source.map(Errno::raw_os_error);
                        Ok(())
                    }
                    Swap::Failed(errno) => Err(errno),
                }
            }
            (None, _) if src.bound => renamed_checked(
                src_parent.as_fd(),
                src.name(),
                dst_parent.as_fd(),
                dst.name(),
                how,
                &src_meta,
            )
            .map_err(|e| self.fail(e, &src))?,
            (None, _) => sys::rename(src_parent.as_fd(), src.name(), dst_parent.as_fd(), dst.name(), how),
            (Some(_), _) => Err(Errno::XDEV),
        };
        match renamed {
            Ok(()) => {
                // A racing call may have made a git directory's other piece since the check:
                // the rename is undone then (see `undo_git_piece`).
                if existing.is_none()
                    && let Err(denied) = self.git_piece_still_allowed(mode, &dst)
                {
                    if let Err(errno) = sys::rename(
                        dst_parent.as_fd(),
                        dst.name(),
                        src_parent.as_fd(),
                        src.name(),
                        RenameHow::NoReplace,
                    ) {
                        tracing::warn!(%errno, "a move that made a git directory's last piece could not be undone");
                    }
                    return Err(denied);
                }
                after = src_text.clone();
                sys::sync_dir(dst_parent.as_fd()).map_err(|e| self.fail(FsError::Sync(e), &dst))?;
                sys::sync_dir(src_parent.as_fd()).map_err(|e| self.fail(FsError::Sync(e), &src))?;
            }
            Err(Errno::EXIST) => return Err(self.fail(FsError::AlreadyExists, &dst)),
            // New content, or another filesystem: write the destination, then remove the source.
            Err(Errno::XDEV) => {
                let bytes = match &content {
                    Some(content) => content.as_bytes().to_vec(),
                    None => read::read_bounded(&src_file, &src_meta, self.limits.max_editable_bytes)
                        .map_err(|e| self.fail(e, &src))?,
                };
                let place = match (&existing, create_only) {
                    (Some((_, meta)), _) => Place::Replace(meta),
                    (None, true) => Place::Create,
                    (None, false) => Place::CreateOrReplace,
                };
                let (_, placed) =
                    place_file(dst_parent.as_fd(), dst.name(), &bytes, place, self.journal_scope(&dst))
                        .map_err(|e| self.fail(e, &dst))?;
                // As for a rename above, but what is undone is the file written here; the
                // source is still in place.
                if existing.is_none() {
                    self.undo_git_piece(mode, &dst, &placed)?;
                }
                after = String::from_utf8(bytes).ok();
                match sys::remove(src_parent.as_fd(), src.name()) {
                    Ok(()) => {
                        let _ = sys::sync_dir(src_parent.as_fd());
                    }
                    Err(errno) => source_removal_errno = Some(errno.raw_os_error()),
                }
            }
            Err(errno) => return Err(self.fail(FsError::Rename(errno), &dst)),
        }
        let dst_file_meta = current_file(&dst).map_err(|e| self.fail(e, &dst))?;
        let destination_version = match dst_file_meta {
            Some((file, meta)) => version::of_file(&file, &meta),
            None => return Err(self.fail(FsError::Stale(StaleReason::DestinationGone), &dst)),
        };
        let source_change = match (&source_removal_errno, src_text.clone()) {
            (Some(_), _) => Change::default(),
            (None, Some(text)) => Change { before: Some(text), after: None, omitted: false },
            (None, None) => Change { before: None, after: None, omitted: true },
        };
        let destination_change = match dst_before {
            Some(before) => self.change(before.as_deref(), before.is_some(), after.as_deref()),
            None => self.change(None, true, after.as_deref()),
        };
        dst.made.keep();
        Ok(Outcome::MoveFile {
            source: src_target,
            destination: dst_target,
            destination_version,
            source_change,
            destination_change,
            source_removal_errno,
        })
    }
}

/// Renames `from` to `to` for an approved move, which moves only the file it checked
/// (`checked`): should the name have been given to another object since (the source's
/// directory is writable by others), the rename is undone and the move refused. The rename's
/// own error is returned as the plain rename's would be.
fn renamed_checked(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    how: RenameHow,
    checked: &sys::Meta,
) -> Result<Result<(), Errno>, FsError> {
    let checked_at =
        |dir, name| sys::meta_at(dir, name).is_ok_and(|m| (m.dev, m.ino) == (checked.dev, checked.ino));
    if let Err(errno) = sys::rename(from_dir, from, to_dir, to, how) {
        // Refused for what the name holds now (a link a worker may not place): not the file
        // checked, and nothing moved.
        if !checked_at(from_dir, from) {
            return Err(FsError::Denied(Denial::NotApproved));
        }
        return Ok(Err(errno));
    }
    if checked_at(to_dir, to) {
        return Ok(Ok(()));
    }
    // Should the undo fail, the object stays at the destination, under the approved name.
    if let Err(errno) = sys::rename(to_dir, to, from_dir, from, RenameHow::NoReplace) {
        tracing::warn!(%errno, "an approved move that moved another object could not be undone");
    }
    Err(FsError::Denied(Denial::NotApproved))
}

/// How a guarded move onto an existing destination went, short of a stale destination.
enum Swap {
    /// The source is at the destination; the replaced file is removed, or still at the source
    /// name for this reason.
    Moved { left_at_source: Option<Errno> },
    /// The rename itself failed, as a plain rename would have.
    Failed(Errno),
}

/// Moves `from` over `to`, which must still be the file `checked` describes: the two names are
/// exchanged, and when the file that comes out is another (an outside save in between), the
/// exchange is undone and the move is stale. Else the replaced file, now at `from`, is removed.
fn swap_in(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    checked: &sys::Meta,
) -> Result<Swap, FsError> {
    match sys::rename(from_dir, from, to_dir, to, RenameHow::Exchange) {
        Ok(()) => {}
        // The filesystem cannot exchange: the per-target lock still orders fsd's own writers.
        Err(Errno::INVAL | Errno::OPNOTSUPP) => {
            return Ok(match sys::rename(from_dir, from, to_dir, to, RenameHow::Replace) {
                Ok(()) => Swap::Moved { left_at_source: None },
                Err(errno) => Swap::Failed(errno),
            });
        }
        Err(errno) => return Ok(Swap::Failed(errno)),
    }
    let swapped = sys::meta_at(from_dir, from);
    if !swapped.as_ref().is_ok_and(|m| m.same_content(checked)) {
        // Should the undo fail, both names hold someone's content: neither is removed.
        sys::rename(from_dir, from, to_dir, to, RenameHow::Exchange).map_err(FsError::Rename)?;
        return Err(FsError::Stale(StaleReason::ChangedWhileWriting));
    }
    Ok(Swap::Moved { left_at_source: sys::remove(from_dir, from).err() })
}

/// Removes `name` from `dir` only if it is still the file (or link: anything but a directory)
/// `checked` describes. The guard was
/// checked under fsd's lock, but an outside writer (an editor's save by rename) takes no lock: an
/// unlink by name could delete a save made since. So the name is renamed to a journaled
/// temporary name, and what was moved is looked at: the checked file is removed; anything else
/// goes back to its name and the removal is stale. Should the name be taken again meanwhile,
/// both saves are kept (the moved one at a visible name beside it, `keep_aside`, which the error
/// names; its entry dropped so no sweep removes it). A worker killed
/// half-way leaves the entry, and the sweep finishes the same way.
pub(super) fn remove_checked(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    checked: &sys::Meta,
    journal: Scope<'_>,
) -> Result<(), FsError> {
    let temp = sys::temp_name().map_err(FsError::CreateTemp)?;
    let entry = journal.begin_removal(&temp, name, checked);
    #[cfg(feature = "fault-injection")]
    pause_at_removal(name);
    let aside = match sys::rename(dir, name, dir, &temp, RenameHow::NoReplace) {
        // A filesystem without RENAME_NOREPLACE: the temporary name is 128 random bits, free.
        Err(Errno::INVAL | Errno::OPNOTSUPP) => sys::rename(dir, name, dir, &temp, RenameHow::Replace),
        other => other,
    };
    match aside {
        Ok(()) => {}
        // Landlock grants a confined worker no right to make a link (or a fifo or socket), and a
        // rename that puts one at a name counts as making it: what the name holds is such a
        // thing (whatever an outside writer put there since, a regular file, would have moved).
        // It is removed only if it is still the one checked, looked at right before the unlink:
        // a window of one system call rather than the call's.
        Err(Errno::ACCESS) if checked.kind != Kind::File => {
            entry.end();
            return match sys::meta_at(dir, name) {
                Ok(now) if now.kind == checked.kind && now.same_content(checked) => {
                    sys::remove(dir, name).map_err(FsError::Remove)
                }
                Ok(_) => Err(FsError::Stale(StaleReason::ChangedWhileRemoving)),
                Err(Errno::NOENT) => Err(FsError::Stale(StaleReason::Gone)),
                Err(errno) => Err(FsError::Metadata(errno)),
            };
        }
        Err(errno) => {
            entry.end();
            return Err(match errno {
                Errno::NOENT => FsError::Stale(StaleReason::Gone),
                errno => FsError::Remove(errno),
            });
        }
    }
    #[cfg(feature = "fault-injection")]
    pause_at_removal(name);
    let moved = sys::meta_at(dir, &temp);
    if moved.as_ref().is_ok_and(|m| m.kind == checked.kind && m.same_content(checked)) {
        // Should the unlink fail, the entry stays: the sweep removes the checked file later.
        sys::remove(dir, &temp).map_err(FsError::Remove)?;
        entry.end();
        return Ok(());
    }
    if let Err(errno) = sys::rename(dir, &temp, dir, name, RenameHow::NoReplace) {
        // Left at the temporary name, the save would be hidden from listings: it gets a
        // visible name beside its own, and the reply names it.
        let kept = keep_aside(dir, name, &temp);
        tracing::warn!(?kept, ?name, %errno, "a save made during a removal is kept at another name: its name was taken again");
        entry.end();
        return Err(FsError::KeptAside { reason: StaleReason::ChangedWhileRemoving, kept: kept.into() });
    }
    entry.end();
    Err(FsError::Stale(StaleReason::ChangedWhileRemoving))
}

/// Gives the outside save at the temporary name `temp` of `dir`, whose own name `name` was
/// taken again, a visible name beside it ([`kept_name`]): at the temporary name it would be
/// hidden from listings. Returns the name it is kept under (the temporary one should the
/// rename fail).
pub(super) fn keep_aside(dir: BorrowedFd<'_>, name: &OsStr, temp: &OsStr) -> std::ffi::OsString {
    kept_name(name, temp)
        .filter(|kept| sys::rename(dir, temp, dir, kept, RenameHow::NoReplace).is_ok())
        .unwrap_or_else(|| temp.to_os_string())
}

/// The visible name a save caught by a removal is kept under when its own name was taken again:
/// `<name>.kept-<8 hex digits of the temporary name>`, in the same directory (`None`: too long).
fn kept_name(name: &OsStr, temp: &OsStr) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let random = temp.as_bytes().strip_prefix(crate::op::TEMP_PREFIX.as_bytes())?.get(..8)?;
    let mut kept = name.as_bytes().to_vec();
    kept.extend_from_slice(b".kept-");
    kept.extend_from_slice(random);
    (kept.len() <= crate::op::MAX_COMPONENT_BYTES).then(|| std::os::unix::ffi::OsStringExt::from_vec(kept))
}

/// Test hook: a guarded removal of `fsd-fault-pause-remove` pauses a second after its check,
/// before it moves the name aside, and again after, so a test can save over the name in the
/// first window (the save is what gets moved aside) and take the name again in the second.
#[cfg(feature = "fault-injection")]
fn pause_at_removal(name: &OsStr) {
    if name == "fsd-fault-pause-remove" {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
