//! moveFile and deleteFile: regular files only, a symlink source refused, guarded like edits,
//! under the locks of every target they touch. A move onto a guarded destination exchanges the
//! names and checks what it swapped out, as a replace does; a guarded removal moves the name
//! aside and checks what it moved (`remove_checked`).

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;

use super::journal::Scope;
use super::resolve::{Resolved, WalkOptions};
use super::settle::{Spot, Undone, settle};
use super::write::same_key;
use super::{Backend, read, text, version};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{EditGuard, Mode};
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
}

/// Renames `from` to `to` for an approved move, which moves only the file it checked
/// (`checked`): should the name have been given to another object since (the source's
/// directory is writable by others), the rename is undone and the move refused. The rename's
/// own error is returned as the plain rename's would be.
pub(super) fn renamed_checked(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    how: RenameHow,
    checked: &sys::Meta,
) -> Result<Result<(), Errno>, FsError> {
    let checked_at =
        |dir, name| sys::meta_at(dir, name).is_ok_and(|m| (m.dev, m.ino) == (checked.dev, checked.ino));
    #[cfg(feature = "fault-injection")]
    pause_before_move(to);
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
    let (at, back) = (Spot { dir: to_dir, name: to }, Spot { dir: from_dir, name: from });
    if let Err(Aside::NotMoved(errno)) = undo_rename(at, back, StaleReason::ChangedWhileWriting) {
        tracing::warn!(%errno, "an approved move that moved another object could not be undone");
    }
    Err(FsError::Denied(Denial::NotApproved))
}

/// A transaction's move step: `from` renamed to `to`, which must be free (`replaced`: none) or
/// still hold the file `replaced` describes, and then the two exchange (the destination's file
/// comes out at `from`). What arrives must be the file checked at `from` (`moved`), and what
/// comes out the file checked at `to`: otherwise (an outside save in between) the rename is
/// undone and the step is stale; an exchange is undone by rounds, as a guarded move's
/// ([`swapped_back`]). A filesystem that cannot exchange fails the step: a plain replace could
/// not be undone.
pub(super) fn move_checked(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    moved: &sys::Meta,
    replaced: Option<&sys::Meta>,
) -> Result<(), FsError> {
    let how = if replaced.is_some() { RenameHow::Exchange } else { RenameHow::NoReplace };
    // For an exchange, the file about to go to `to`, as it goes: what its undo expects there.
    let going = match replaced.map(|_| sys::meta_at(from_dir, from)) {
        None => None,
        Some(Ok(meta)) => Some(meta),
        Some(Err(Errno::NOENT)) => return Err(FsError::Stale(StaleReason::Gone)),
        Some(Err(errno)) => return Err(FsError::Metadata(errno)),
    };
    #[cfg(feature = "fault-injection")]
    if going.is_some() {
        super::write::pause_at_exchange(to);
    } else {
        pause_before_move(to);
    }
    match sys::rename(from_dir, from, to_dir, to, how) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Err(FsError::AlreadyExists),
        Err(Errno::NOENT) => return Err(FsError::Stale(StaleReason::Gone)),
        Err(errno) => return Err(FsError::Rename(errno)),
    }
    #[cfg(feature = "fault-injection")]
    if going.is_some() {
        super::write::pause_at_exchange(to);
    }
    let holds = |dir, name, meta: &sys::Meta| {
        sys::meta_at(dir, name).is_ok_and(|m| m.kind == Kind::File && m.same_content(meta))
    };
    if holds(to_dir, to, moved) && replaced.is_none_or(|r| holds(from_dir, from, r)) {
        return Ok(());
    }
    let (at, back) = (Spot { dir: to_dir, name: to }, Spot { dir: from_dir, name: from });
    if let Some(going) = going {
        return Err(swapped_back(back, at, &going));
    }
    // An outside save came to the source's name before the rename: it goes back.
    match undo_rename(at, back, StaleReason::ChangedWhileWriting) {
        Ok(()) => Err(FsError::Stale(StaleReason::ChangedWhileWriting)),
        Err(Aside::NotMoved(errno)) => {
            // Both names hold someone's content: neither is removed.
            tracing::warn!(%errno, ?to, "a move that met an outside save could not be undone");
            Err(FsError::Rename(errno))
        }
        Err(Aside::Other(error)) => Err(error),
    }
}

/// How a guarded move onto an existing destination went, short of a stale destination.
pub(super) enum Swap {
    /// The source is at the destination; the replaced file is removed, or still at the source
    /// name for this reason.
    Moved { left_at_source: Option<Errno> },
    /// The rename itself failed, as a plain rename would have.
    Failed(Errno),
}

/// Moves `from` over `to`, which must still be the file `checked` describes: the two names are
/// exchanged, and when the file that comes out is another (an outside save in between), the
/// exchange is undone by rounds ([`swapped_back`]) and the move is stale. Else the replaced
/// file, now at `from`, is removed (into the change record, when it waits for it:
/// `record::retire`).
pub(super) fn swap_in(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    checked: &sys::Meta,
    record: Option<&super::record::Store>,
) -> Result<Swap, FsError> {
    // The file about to go to `to`, as it goes: what an undo expects to find there. A source
    // that cannot be looked at fails as its rename would.
    let going = match sys::meta_at(from_dir, from) {
        Ok(meta) => meta,
        Err(errno) => return Ok(Swap::Failed(errno)),
    };
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
    #[cfg(feature = "fault-injection")]
    super::write::pause_at_exchange(to);
    let swapped = sys::meta_at(from_dir, from);
    if !swapped.as_ref().is_ok_and(|m| m.same_content(checked)) {
        return Err(swapped_back(Spot { dir: from_dir, name: from }, Spot { dir: to_dir, name: to }, &going));
    }
    Ok(Swap::Moved { left_at_source: super::record::retire(record, from_dir, from).err() })
}

/// Undoes a move's exchange of `from` and `to` that took out another file than the one checked,
/// where `to` got the file `moved` describes (as it went). The undo settles by rounds
/// ([`settle`]): a save renamed over the destination, or a write into the file there, while the
/// undo runs is newer than the file the undo puts back, and ends at the destination. The moved
/// file back at its name, unchanged, leaves the move plainly stale; any other file the newest
/// change superseded (an older save of the destination, or the moved file written into there)
/// is kept beside the destination ([`keep_beside`]), which the stale reply names. Should an
/// exchange fail, both names hold someone's content: neither is removed.
fn swapped_back(from: Spot<'_>, to: Spot<'_>, moved: &sys::Meta) -> FsError {
    let what = match settle(to, from, &|came_out| came_out.same_content(moved)) {
        Ok(Undone::At(superseded)) if superseded.same_content(moved) => {
            return FsError::Stale(StaleReason::ChangedWhileWriting);
        }
        Ok(Undone::At(_)) => "a change a move's undo took from its destination is kept beside the newest one",
        Ok(Undone::StillChanging) => {
            "outside changes kept coming while fsd undid a move: the last one is kept beside its destination"
        }
        Err(errno) => {
            tracing::warn!(%errno, to = ?to.name, "a move that met an outside save could not be undone");
            return FsError::Rename(errno);
        }
    };
    match keep_beside(from, to) {
        Some(kept) => {
            tracing::warn!(?kept, to = ?to.name, "{what}");
            FsError::KeptAside { reason: StaleReason::ChangedWhileWriting, kept: kept.into() }
        }
        None => {
            // Still at the source's name, visible: only not named in the reply.
            tracing::warn!(from = ?from.name, to = ?to.name, "{what}, at the source's name");
            FsError::Stale(StaleReason::ChangedWhileWriting)
        }
    }
}

/// Gives the file at `from`, a change its own name `to` no longer holds, a visible name beside
/// `to` in `to`'s directory ([`kept_name`], after fresh random digits). Returns that name, or
/// `None` where it cannot be made (the file stays at `from`).
pub(super) fn keep_beside(from: Spot<'_>, to: Spot<'_>) -> Option<std::ffi::OsString> {
    let random = sys::temp_name().ok()?;
    kept_name(to.name, &random)
        .filter(|kept| sys::rename(from.dir, from.name, to.dir, kept, RenameHow::NoReplace).is_ok())
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
    match set_aside(dir, name, &temp, checked) {
        Ok(()) => {
            // Should the unlink fail, the entry stays: the sweep removes the checked file later.
            entry.retire(dir, &temp).map_err(FsError::Remove)?;
            entry.end();
            Ok(())
        }
        // Landlock grants a confined worker no right to make a link (or a fifo or socket), and a
        // rename that puts one at a name counts as making it: what the name holds is such a
        // thing (whatever an outside writer put there since, a regular file, would have moved).
        // It is removed only if it is still the one checked, looked at right before the unlink:
        // a window of one system call rather than the call's.
        Err(Aside::NotMoved(Errno::ACCESS)) if checked.kind != Kind::File => {
            entry.end();
            match sys::meta_at(dir, name) {
                Ok(now) if now.kind == checked.kind && now.same_content(checked) => {
                    sys::remove(dir, name).map_err(FsError::Remove)
                }
                Ok(_) => Err(FsError::Stale(StaleReason::ChangedWhileRemoving)),
                Err(Errno::NOENT) => Err(FsError::Stale(StaleReason::Gone)),
                Err(errno) => Err(FsError::Metadata(errno)),
            }
        }
        Err(aside) => {
            entry.end();
            Err(aside.into_error())
        }
    }
}

/// Why [`set_aside`] left nothing of the file checked at the temporary name.
pub(super) enum Aside {
    /// The rename refused: nothing moved.
    NotMoved(Errno),
    /// What moved was not the file checked (an outside save): it is back at its name, or kept
    /// beside it; the failure says which.
    Other(FsError),
}

impl Aside {
    pub(super) fn into_error(self) -> FsError {
        match self {
            Aside::NotMoved(Errno::NOENT) => FsError::Stale(StaleReason::Gone),
            Aside::NotMoved(errno) => FsError::Remove(errno),
            Aside::Other(error) => error,
        }
    }
}

/// The visible step of a checked removal, for a single removal and a transaction's step alike:
/// `name` is renamed to the temporary name `temp` (journaled by the caller), and what moved is
/// looked at. Only the file (or link) `checked` stays there; anything else goes back to its
/// name, or, should the name be taken again meanwhile, to a visible name beside it
/// ([`keep_aside`]), which the failure names.
pub(super) fn set_aside(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    temp: &OsStr,
    checked: &sys::Meta,
) -> Result<(), Aside> {
    #[cfg(feature = "fault-injection")]
    pause_at_removal(name);
    let aside = match sys::rename(dir, name, dir, temp, RenameHow::NoReplace) {
        // A filesystem without RENAME_NOREPLACE: the temporary name is 128 random bits, free.
        Err(Errno::INVAL | Errno::OPNOTSUPP) => sys::rename(dir, name, dir, temp, RenameHow::Replace),
        other => other,
    };
    aside.map_err(Aside::NotMoved)?;
    #[cfg(feature = "fault-injection")]
    pause_at_removal(name);
    // Left at the temporary name, a save would be hidden from listings: kept, it gets a visible
    // name beside its own.
    let (at, aside) = (Spot { dir, name }, Spot { dir, name: temp });
    took(at, aside, checked, StaleReason::ChangedWhileRemoving, || keep_aside(dir, name, temp))
}

/// Undoes a rename that put something at `at` ([`move_back`], of what `at` holds now): a save
/// made over `at` meanwhile stays there.
pub(super) fn undo_rename(at: Spot<'_>, back: Spot<'_>, reason: StaleReason) -> Result<(), Aside> {
    let arrived = sys::meta_at(at.dir, at.name).map_err(Aside::NotMoved)?;
    move_back(at, back, &arrived, reason)
}

/// Renames `from` back to `to`, the name it came from (a rolled-back move's undo), moving only
/// the file `checked` describes, as [`set_aside`] does: a save renamed over `from` between the
/// caller's look and the rename is what moves, and goes back to `from`, or beside it. `to` must
/// be free: a name taken again since is someone's.
pub(super) fn move_back(
    from: Spot<'_>,
    to: Spot<'_>,
    checked: &sys::Meta,
    reason: StaleReason,
) -> Result<(), Aside> {
    #[cfg(feature = "fault-injection")]
    pause_at_removal(from.name);
    sys::rename(from.dir, from.name, to.dir, to.name, RenameHow::NoReplace).map_err(Aside::NotMoved)?;
    #[cfg(feature = "fault-injection")]
    pause_at_removal(from.name);
    took(from, to, checked, reason, || keep_beside(to, from).unwrap_or_else(|| to.name.to_os_string()))
}

/// After a rename of `from` to `to` meant for the file `checked` describes: anything else there
/// (an outside save the rename caught) goes back to `from`, or, should that name be taken again
/// meanwhile, is kept where `keep` puts it, which the failure names.
fn took(
    from: Spot<'_>,
    to: Spot<'_>,
    checked: &sys::Meta,
    reason: StaleReason,
    keep: impl FnOnce() -> std::ffi::OsString,
) -> Result<(), Aside> {
    let moved = sys::meta_at(to.dir, to.name);
    if moved.as_ref().is_ok_and(|m| m.kind == checked.kind && m.same_content(checked)) {
        return Ok(());
    }
    if let Err(errno) = sys::rename(to.dir, to.name, from.dir, from.name, RenameHow::NoReplace) {
        let kept = keep();
        tracing::warn!(?kept, name = ?from.name, %errno, "an outside save a rename caught is kept at another name: its name was taken again");
        return Err(Aside::Other(FsError::KeptAside { reason, kept: kept.into() }));
    }
    Err(Aside::Other(FsError::Stale(reason)))
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
pub(super) fn kept_name(name: &OsStr, temp: &OsStr) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let random = temp.as_bytes().strip_prefix(crate::op::TEMP_PREFIX.as_bytes())?.get(..8)?;
    let mut kept = name.as_bytes().to_vec();
    kept.extend_from_slice(b".kept-");
    kept.extend_from_slice(random);
    (kept.len() <= crate::op::MAX_COMPONENT_BYTES).then(|| std::os::unix::ffi::OsStringExt::from_vec(kept))
}

/// Test hook: a checked removal pauses a second after its look, before it moves the name
/// aside, and again after, so a test can save over the name in the first window (the save is
/// what gets moved aside) and take the name again in the second. For `fsd-fault-pause-remove`
/// (a guarded removal; the undo of a rolled-back transaction's create of it, or of its move to
/// it: [`move_back`]) and `fsd-fault-pause-move` (the undo of a transaction's or an approved
/// move to it that met an outside save).
#[cfg(feature = "fault-injection")]
fn pause_at_removal(name: &OsStr) {
    if name == "fsd-fault-pause-remove" || name == "fsd-fault-pause-move" {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Test hook: a transaction's or an approved move to `fsd-fault-pause-move` pauses a second
/// before its rename, so a test can save over the source first.
#[cfg(feature = "fault-injection")]
fn pause_before_move(to: &OsStr) {
    if to == "fsd-fault-pause-move" {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
