//! Whole-file writes and the atomic replace every mutation uses: a temporary file with a random
//! name in the target's own directory, written, owner and mode kept, fsynced, renamed over the
//! target, the directory fsynced. A replace swaps with `RENAME_EXCHANGE` and checks that what it
//! swapped out is the file it checked, so an editor's save in between is never lost.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};

use super::journal::{Entry, Scope};
use super::resolve::Resolved;
use super::settle::{Spot, Undone, settle};
use super::version;
use crate::error::{FsError, StaleReason};
use crate::op::WriteGuard;
use crate::sys::{self, Errno, Kind, Meta, RenameHow};

/// Mode bits of files the daemon creates.
const NEW_FILE_MODE: u32 = 0o644;

/// How the new file takes its place.
#[derive(Debug, Clone, Copy)]
pub(super) enum Place<'a> {
    /// Only if nothing is there (`RENAME_NOREPLACE`): a guarded creation.
    Create,
    /// Whatever is there (an unguarded write of an absent target).
    CreateOrReplace,
    /// Exactly the file described by this metadata, keeping its owner and mode.
    Replace(&'a Meta),
}

/// Removes the temporary name on every early return, then drops its journal entry (kept when
/// the name could not be removed, so a later sweep still can).
struct TempName<'a> {
    dir: BorrowedFd<'a>,
    name: OsString,
    armed: bool,
    entry: Option<Entry<'a>>,
    /// The new file while it still sits at the temporary name (not yet placed).
    unplaced: Option<File>,
}

impl Drop for TempName<'_> {
    fn drop(&mut self) {
        let removed = || match &self.entry {
            // A replaced file the change record waits for goes into the record.
            Some(entry) if self.unplaced.is_none() => entry.retire(self.dir, &self.name),
            _ => sys::remove(self.dir, &self.name),
        };
        if self.armed
            && let Err(errno) = removed()
        {
            // Typically the directory was moved out of the fence mid-write, and Landlock
            // refuses the unlink there. The caller's bytes go at once; the name is handed to
            // the supervisor, which the fence does not hold, to remove (`stranded`).
            let emptied = self.unplaced.as_ref().map(sys::empty_file);
            tracing::warn!(name = ?self.name, %errno, ?emptied, "could not remove a temporary file");
            if let (Some(Ok(())), Some(file)) = (emptied, self.unplaced.as_ref()) {
                stranded::record(self.dir, &self.name, file);
                // The supervisor removes it by that record; the entry, whose directory is no
                // longer where a sweep walks from the root, could only be dropped by one.
                if let Some(entry) = self.entry.take() {
                    entry.end();
                }
            }
            return;
        }
        if let Some(entry) = self.entry.take() {
            entry.end();
        }
    }
}

/// Writes `content` as the file `name` in `dir` atomically, the temporary file journaled in
/// `journal` while it has a name. Returns the new file and its metadata taken after the final
/// rename.
pub(super) fn place_file<'a>(
    dir: BorrowedFd<'a>,
    name: &OsStr,
    content: &[u8],
    place: Place<'_>,
    journal: Scope<'a>,
) -> Result<(File, Meta), FsError> {
    let mut fill =
        |file: &mut File| file.write_all(content).map_err(|e| write_failed(e, content.len() as u64));
    stage(dir, &mut fill, journal, replaced_by(&place))?.place(name, place, None, Some(content))
}

/// The file a replace will swap out, when `place` is a replace.
fn replaced_by<'m>(place: &Place<'m>) -> Option<&'m Meta> {
    match place {
        Place::Replace(old) => Some(*old),
        Place::Create | Place::CreateOrReplace => None,
    }
}

/// A failed write into a temporary file. Past RLIMIT_FSIZE (EFBIG) the file is too large for
/// this worker, not a disk failure.
pub(super) fn write_failed(e: std::io::Error, size: u64) -> FsError {
    match (e.raw_os_error(), sys::file_size_limit()) {
        (Some(libc::EFBIG), Some(limit)) => FsError::TooLarge { size, limit },
        _ => FsError::WriteTemp(e),
    }
}

/// A new file's content, complete, under a temporary name in the target's directory: nothing
/// has replaced anything yet. Dropped without [`Staged::place`], the temporary file is removed.
pub(crate) struct Staged<'a> {
    file: File,
    created: Meta,
    temp: TempName<'a>,
}

/// Writes the content `fill` gives into a new temporary file of `dir`, journaled while it has
/// a name (with `replacing`, the file a replace will swap out, when already known). Takes no
/// lock: a long body streams in while other calls use the target.
pub(super) fn stage<'a>(
    dir: BorrowedFd<'a>,
    fill: &mut dyn FnMut(&mut File) -> Result<(), FsError>,
    journal: Scope<'a>,
    replacing: Option<&Meta>,
) -> Result<Staged<'a>, FsError> {
    let temp_name = sys::temp_name().map_err(FsError::CreateTemp)?;
    let mut entry = journal.begin(&temp_name);
    let mut file = match sys::create_exclusive(dir, &temp_name) {
        Ok(file) => file,
        Err(errno) => {
            entry.end();
            return Err(FsError::CreateTemp(errno));
        }
    };
    // The identity before any byte: a sweep removes a file of an entry without one only if
    // empty.
    let created = sys::meta(file.as_fd()).map_err(FsError::Metadata);
    if let Ok(meta) = &created {
        entry.identify(meta, replacing);
    }
    let mut temp = TempName { dir, name: temp_name, armed: true, entry: Some(entry), unplaced: None };
    let created = created?;
    // Kept to empty the file should its name outlive the call (see `TempName::drop`).
    let unplaced =
        file.try_clone().map_err(|e| FsError::CreateTemp(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    temp.unplaced = Some(unplaced);
    fill(&mut file)?;
    Ok(Staged { file, created, temp })
}

impl Staged<'_> {
    /// Gives the staged file its owner and mode, syncs it and renames it to `name` as `place`
    /// says (run under the target lock, after the caller's guard held). Returns the new file
    /// and its metadata taken after the final rename.
    ///
    /// `written`, when known, is the content the staged file holds (see `swap_back`).
    pub(super) fn place(
        self,
        name: &OsStr,
        place: Place<'_>,
        mode: Option<u32>,
        written: Option<&[u8]>,
    ) -> Result<(File, Meta), FsError> {
        let mut ready = self.ready_as(name, place, mode)?;
        #[cfg(feature = "fault-injection")]
        if name == "fsd-fault-pause-rename" {
            // Test hook: a window between the temporary file's last byte and its rename, in
            // which a test moves the directory out of the fence.
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        ready.put(name, place, written, Undo::NotNeeded)?;
        let Ready { file, temp, .. } = ready;
        let dir = temp.dir;
        // Removes the replaced file an exchange left at the temporary name.
        drop(temp);
        let synced = sys::sync_dir(dir);
        // Test hook: the file is in place, its directory's sync fails (a disk that fails
        // late): the call answers an error for a change that reached the disk.
        #[cfg(feature = "fault-injection")]
        let synced = if name == "fsd-fault-sync-error" { Err(Errno::IO) } else { synced };
        synced.map_err(FsError::Sync)?;
        let meta = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
        Ok((file, meta))
    }
}

/// Gives a staged file the owner, mode and attributes its place asks for, and syncs it: all but
/// the rename (for a replace, the journal entry names the file the exchange will swap out).
fn prepare(
    file: &File,
    created: &Meta,
    temp: &mut TempName<'_>,
    name: &OsStr,
    place: Place<'_>,
    mode: Option<u32>,
) -> Result<(), FsError> {
    let dir = temp.dir;
    match place {
        Place::Replace(old) => {
            // A replace names the file it swaps out, which sits at the temporary name from
            // the exchange until it is removed.
            if let Some(entry) = temp.entry.as_mut()
                && !entry.names_replaced(old)
            {
                entry.identify(created, Some(old));
            }
            let (uid, gid) = sys::effective_ids();
            if (old.uid, old.gid) != (uid, gid) {
                sys::set_owner(file, old.uid, old.gid).map_err(FsError::KeepOwner)?;
            }
            // After chown, which clears set-id bits; those are not carried over on purpose.
            sys::set_mode(file, mode.unwrap_or(old.mode) & 0o777).map_err(FsError::SetMode)?;
            keep_attributes(dir, name, old, file)?;
        }
        Place::Create | Place::CreateOrReplace => {
            sys::set_mode(file, mode.unwrap_or(NEW_FILE_MODE) & 0o777).map_err(FsError::SetMode)?;
        }
    }
    sys::sync(file.as_fd()).map_err(FsError::Sync)
}

impl<'a> Staged<'a> {
    /// For a transaction (`txn`): the staged file made ready for `place` as [`Staged::place`]
    /// would (owner, mode, attributes, synced), without the rename, which the transaction makes
    /// with its other files' once its intent record is durable.
    pub(super) fn ready(self, name: &OsStr, place: Place<'_>) -> Result<Ready<'a>, FsError> {
        self.ready_as(name, place, None)
    }

    /// [`Staged::ready`] with the mode bits a writeBytes call asks for.
    fn ready_as(self, name: &OsStr, place: Place<'_>, mode: Option<u32>) -> Result<Ready<'a>, FsError> {
        let Staged { file, created, mut temp } = self;
        prepare(&file, &created, &mut temp, name, place, mode)?;
        // Our file as placed: should it be written into while at `name` (see `swap_back`).
        let staged = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
        Ok(Ready { file, staged, temp })
    }
}

/// Whether a placed file must be able to go back (a transaction's step, undone should a later
/// one fail): then a filesystem that cannot exchange fails the replace, where a single write
/// falls back to a plain rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Undo {
    Needed,
    NotNeeded,
}

/// A staged file ready to take its place, still at its temporary name. Dropped, the temporary
/// name is removed unless [`Ready::placed`] said it holds nothing of the transaction's any more
/// (after a replace's exchange it holds the replaced file, which goes then).
pub(super) struct Ready<'a> {
    pub(super) file: File,
    /// The staged file's metadata once synced: what the intent record knows it by.
    pub(super) staged: Meta,
    temp: TempName<'a>,
}

impl Ready<'_> {
    pub(super) fn temp_name(&self) -> &OsStr {
        &self.temp.name
    }

    /// The one visible step of a new file, for a single write and a transaction's step alike:
    /// the rename `place` asks for. A replace exchanges, and checks that what came out is the
    /// file it checked: an outside save since is put back and the step is stale (see
    /// [`swap_back`]); the replaced file then sits at the temporary name, removed when this is
    /// dropped. `written`, when known, is the content the staged file holds.
    pub(super) fn put(
        &mut self,
        name: &OsStr,
        place: Place<'_>,
        written: Option<&[u8]>,
        undo: Undo,
    ) -> Result<(), FsError> {
        let dir = self.temp.dir;
        match place {
            Place::Create => match sys::rename(dir, &self.temp.name, dir, name, RenameHow::NoReplace) {
                Ok(()) => self.placed(),
                Err(Errno::EXIST) => return Err(FsError::AlreadyExists),
                Err(errno) => return Err(FsError::Rename(errno)),
            },
            Place::CreateOrReplace => {
                sys::rename(dir, &self.temp.name, dir, name, RenameHow::Replace).map_err(FsError::Rename)?;
                self.placed();
            }
            Place::Replace(old) => {
                #[cfg(feature = "fault-injection")]
                pause_at_exchange(name);
                match sys::rename(dir, &self.temp.name, dir, name, RenameHow::Exchange) {
                    Ok(()) => {
                        #[cfg(feature = "fault-injection")]
                        pause_at_exchange(name);
                        self.holds();
                        // The temporary name now holds whatever was at `name` a moment ago.
                        let out = sys::meta_at(dir, &self.temp.name);
                        if !out.as_ref().is_ok_and(|m| m.same_content(old)) {
                            let swapped = Swapped { staged: self.staged, out: out.ok() };
                            return Err(swap_back(dir, name, &swapped, written, &mut self.temp));
                        }
                    }
                    // The filesystem cannot exchange: the per-target lock still orders fsd's own
                    // writers.
                    Err(Errno::INVAL | Errno::OPNOTSUPP) if undo == Undo::NotNeeded => {
                        sys::rename(dir, &self.temp.name, dir, name, RenameHow::Replace)
                            .map_err(FsError::Rename)?;
                        self.placed();
                    }
                    Err(errno) => return Err(FsError::Rename(errno)),
                }
            }
        }
        Ok(())
    }

    /// The temporary name now holds something to remove when this is dropped: the replaced file
    /// after an exchange, or the staged file again after an undo.
    pub(super) fn holds(&mut self) {
        self.temp.armed = true;
        // Not ours to empty should the removal fail: it may be the replaced file.
        self.temp.unplaced = None;
    }

    /// The temporary name is free: the staged file took its place by a rename.
    pub(super) fn placed(&mut self) {
        self.temp.armed = false;
        self.temp.unplaced = None;
    }
}

/// Test hook: a replace of (or a guarded move onto, a single one or a transaction's)
/// `fsd-fault-pause-exchange` pauses a second just before its exchange and again just after it,
/// so a test can save over the name in the first window and write into or save over the file at
/// the name (then fsd's, or the moved one) in the second; an undone exchange (`settle::settle`:
/// a replace's, a move's, a rolled-back transaction's) pauses a third time once the undo's first
/// exchange put the file it took out back, so a test can change the name again there or kill
/// the worker.
#[cfg(feature = "fault-injection")]
pub(super) fn pause_at_exchange(name: &OsStr) {
    if name == "fsd-fault-pause-exchange" {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// A replace swapped out a file other than the one it checked (an outside save got in between):
/// the exchange is undone, and the call is stale. The undo exchanges the temporary name with
/// `name` again, which brings back the file the replace took out; but while fsd's file sat at
/// `name`, an outside writer may have written into it in place (`open(O_TRUNC)`, `>`, or an
/// append, `>>`) or renamed a save over it, and another may do either to the file the undo put
/// back before the undo looks. Each such change is newer than the file it met at `name`, so the
/// undo settles by rounds ([`settle`]): the newest change ends at the name, and the file it
/// superseded comes out at the temporary name.
///
/// That file is removed if it is fsd's own as staged, or if it is the save the replace took out,
/// still as taken out, and a write in place replaced our bytes wholesale (they are no longer the
/// start of fsd's file at `name`): that write would have replaced the save just the same had fsd
/// not been there. Anything else an outside writer made (the save under an append, which left
/// fsd's content under the appended bytes; a save or a write the newest change superseded while
/// fsd held the name) is kept at a visible name beside it ([`super::moves::keep_aside`]), which
/// the error names. Without `written` (a streamed body) the save the replace took out is kept.
fn swap_back(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    swapped: &Swapped,
    written: Option<&[u8]>,
    temp: &mut TempName<'_>,
) -> FsError {
    let Swapped { staged, .. } = *swapped;
    // A worker killed from here on must not have its sweep remove what the temporary name holds.
    if let Some(entry) = temp.entry.as_mut() {
        entry.restore_to(name);
    }
    // Not ours to empty: the temporary name holds someone's file from here on.
    temp.unplaced = None;
    let at_name = Spot { dir, name };
    let back = Spot { dir, name: &temp.name };
    let settled = settle(at_name, back, &|came_out| came_out.same_content(&staged));
    let superseded = match settled {
        Ok(Undone::At(superseded)) => superseded,
        Ok(Undone::StillChanging) => {
            temp.armed = false;
            return kept_beside(
                dir,
                name,
                temp,
                "outside changes kept coming while fsd undid a replace: the last one is kept beside the name",
            );
        }
        Err(errno) => {
            // Both names hold someone's content now; delete neither.
            temp.armed = false;
            return FsError::Rename(errno);
        }
    };
    if superseded.same_content(&staged) {
        // Our own file, as staged: removed with the temporary name on drop.
        return FsError::Stale(StaleReason::ChangedWhileWriting);
    }
    if written.is_some_and(|written| !starts_with(dir, name, &staged, written))
        && swapped.out.is_some_and(|out| superseded.same_content(&out))
    {
        // Removed with the temporary name on drop.
        return FsError::Stale(StaleReason::ChangedWhileWriting);
    }
    temp.armed = false;
    kept_beside(dir, name, temp, "a change fsd's undo took from the name is kept beside the newest one")
}

/// A replace's exchange that took out another file than the one it checked.
struct Swapped {
    /// Our staged file's metadata once synced.
    staged: Meta,
    /// What the exchange took out, as it was then.
    out: Option<Meta>,
}

/// What the temporary name holds, someone's save, kept at a visible name beside `name`: said in
/// the log (`what`) and in the stale reply, which names it.
fn kept_beside(dir: BorrowedFd<'_>, name: &OsStr, temp: &TempName<'_>, what: &'static str) -> FsError {
    let kept = super::moves::keep_aside(dir, name, &temp.name);
    tracing::warn!(?kept, ?name, "{what}");
    FsError::KeptAside { reason: StaleReason::ChangedWhileWriting, kept: kept.into() }
}

/// Whether the file at `name`, still the inode `staged` describes, starts with `written` (an
/// append kept our bytes; a rewrite did not). Unknown counts as kept: the older save stays then.
fn starts_with(dir: BorrowedFd<'_>, name: &OsStr, staged: &Meta, written: &[u8]) -> bool {
    let Ok(file) = sys::open_read(dir, name) else { return true };
    if !sys::meta(file.as_fd()).is_ok_and(|m| (m.dev, m.ino) == (staged.dev, staged.ino)) {
        return true;
    }
    sys::read_at_most(&file, 0, written.len()).ok().is_none_or(|start| start == written)
}

/// Copies the replaced file's POSIX ACL, `user.*` and `security.*` attributes to its
/// replacement. Without the ACL the mode's group bits (the old mask) would become the group's
/// access, wider than a narrower group entry: an ACL or user attribute that cannot be kept
/// refuses the write. A `security.*` attribute the worker may not set (a file capability, an
/// LSM label) is left behind: losing it never widens access.
fn keep_attributes(dir: BorrowedFd<'_>, name: &OsStr, old: &Meta, new: &File) -> Result<(), FsError> {
    use std::os::unix::ffi::OsStrExt;
    let replaced = match sys::open_read(dir, name) {
        Ok(file) => file,
        Err(Errno::NOENT) => return Err(FsError::Stale(StaleReason::Gone)),
        // A link put at the name since the check (the open follows none): not the file checked.
        Err(Errno::LOOP) => return Err(FsError::Stale(StaleReason::Symlink)),
        Err(errno) => return Err(FsError::KeepAttributes(errno)),
    };
    let now = sys::meta(replaced.as_fd()).map_err(FsError::Metadata)?;
    if (now.dev, now.ino) != (old.dev, old.ino) {
        return Err(FsError::Stale(StaleReason::ChangedWhileWriting));
    }
    let names = match sys::list_xattrs(replaced.as_fd()) {
        Ok(names) => names,
        // No extended attributes on this filesystem: nothing to keep.
        Err(Errno::NOTSUP) => return Ok(()),
        Err(errno) => return Err(FsError::KeepAttributes(errno)),
    };
    for attr in names {
        let bytes = attr.as_bytes();
        let must_keep = bytes == b"system.posix_acl_access" || bytes.starts_with(b"user.");
        if !must_keep && !bytes.starts_with(b"security.") {
            continue;
        }
        let value = match sys::get_xattr(replaced.as_fd(), &attr) {
            Ok(value) => value,
            Err(Errno::NODATA) => continue,
            Err(errno) => return Err(FsError::KeepAttributes(errno)),
        };
        #[cfg(feature = "fault-injection")]
        if must_keep && name == "fsd-fault-keep-attributes" {
            // Test hook: the kernel refuses to set what must be kept (as a filesystem without
            // ACLs on the new inode would), so the refusal path is exercised for real.
            return Err(FsError::KeepAttributes(Errno::OPNOTSUPP));
        }
        match sys::set_xattr(new.as_fd(), &attr, &value) {
            Ok(()) => {}
            Err(_) if !must_keep => {}
            Err(errno) => return Err(FsError::KeepAttributes(errno)),
        }
    }
    Ok(())
}

/// The current regular file at a resolved name, re-checked under the target lock.
pub(super) fn current_file(resolved: &Resolved) -> Result<Option<(File, Meta)>, FsError> {
    let Some(parent) = resolved.parent.as_ref() else {
        return Err(FsError::NotRegularFile);
    };
    match sys::meta_at(parent.as_fd(), resolved.name()) {
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(FsError::Metadata(errno)),
        // Replaced by a link since the walk: not the file the caller resolved.
        Ok(m) if m.kind == Kind::Symlink => {
            return Err(FsError::Stale(StaleReason::Symlink));
        }
        Ok(m) if m.kind != Kind::File => return Err(FsError::NotRegularFile),
        Ok(_) => {}
    }
    let file = match sys::open_read(parent.as_fd(), resolved.name()) {
        Ok(file) => file,
        Err(Errno::NOENT) => return Ok(None),
        // Replaced by a link between the look above and this open: the same as a link found.
        Err(Errno::LOOP) => return Err(FsError::Stale(StaleReason::Symlink)),
        Err(errno) => return Err(FsError::Open(errno)),
    };
    let meta = sys::meta(file.as_fd()).map_err(FsError::Metadata)?;
    if meta.kind != Kind::File {
        return Err(FsError::NotRegularFile);
    }
    Ok(Some((file, meta)))
}

/// [`current_file`], which for an approved call must still be the object its walk was held to.
pub(super) fn current_checked(resolved: &Resolved) -> Result<Option<(File, Meta)>, FsError> {
    let current = match current_file(resolved) {
        // A link put at the name since the walk: not the object approved.
        Err(FsError::Stale(StaleReason::Symlink)) if resolved.bound => {
            return Err(FsError::Denied(crate::error::Denial::NotApproved));
        }
        other => other?,
    };
    resolved.same_final(current.as_ref().map(|(_, meta)| meta))?;
    Ok(current)
}

/// Checks a target key a guard names against the resolved one.
/// Whether a write guard holds for the file found under the target lock (`existing`): create
/// only where nothing is, replace only the observed version of the observed target.
pub(super) fn check_write_guard(
    guard: Option<&WriteGuard>,
    existing: Option<&(File, Meta)>,
    target_key: &str,
) -> Result<(), FsError> {
    match (guard, existing) {
        (Some(WriteGuard::CreateIfAbsent), Some(_)) => Err(FsError::AlreadyExists),
        (Some(WriteGuard::ReplaceIfVersion { .. }), None) => Err(FsError::Stale(StaleReason::Gone)),
        (Some(WriteGuard::ReplaceIfVersion { version: expected, target_key: key }), Some((file, meta))) => {
            same_key(key.as_ref(), target_key)?;
            if version::holds(expected, file, meta)? {
                Ok(())
            } else {
                Err(FsError::Stale(StaleReason::Changed))
            }
        }
        _ => Ok(()),
    }
}

pub(super) fn same_key(expected: Option<&String>, actual: &str) -> Result<(), FsError> {
    match expected {
        Some(key) if !key.is_empty() && key != actual => Err(FsError::Stale(StaleReason::OtherFile)),
        _ => Ok(()),
    }
}

/// Whether a write failed because a directory on its way vanished under it (`ENOENT` making
/// a directory in it or a temporary file in the target's): a failed call's clean-up
/// ([`super::resolve::MadeDirs`]) removes the empty directories it made, which this call may
/// have found and entered a moment before. Nothing was written yet; the call walks again once.
pub(super) fn parent_vanished(error: &FsError) -> bool {
    matches!(error, FsError::CreateTemp(Errno::NOENT) | FsError::MakeDir(Errno::NOENT))
}

/// Temporary files this worker emptied but could not remove, kept until the worker hands them
/// on after its call (`take`).
pub mod stranded {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::sync::{Mutex, PoisonError};

    use crate::ipc_messages::Stranded;
    use crate::sys;

    static LEFT: Mutex<Vec<(Stranded, OwnedFd)>> = Mutex::new(Vec::new());

    pub(super) fn record(dir: BorrowedFd<'_>, name: &OsStr, file: &File) {
        let (Ok(dir), Ok(meta)) = (dir.try_clone_to_owned(), sys::meta(file.as_fd())) else { return };
        let stranded = Stranded { name: name.as_bytes().to_vec(), dev: meta.dev, ino: meta.ino };
        LEFT.lock().unwrap_or_else(PoisonError::into_inner).push((stranded, dir));
    }

    /// What the calls so far left behind, each with its directory.
    pub fn take() -> Vec<(Stranded, OwnedFd)> {
        std::mem::take(&mut *LEFT.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
