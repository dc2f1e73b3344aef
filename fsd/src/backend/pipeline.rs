//! The one mutation pipeline: every change is planned, checked and committed here, in three
//! steps a caller runs in order (`Backend::mutate` for one call; a caller of several changes
//! plans them all, locks every target at once, checks them all, then commits).
//!
//! - **plan** (`Backend::plan`): each path walked (resolution, an approval's binding, the
//!   `read_denied` globs), the fence of a change (`may_change`: the mode, protected names, git
//!   directories), a move's source and destination told apart. Nothing is locked yet; a write's
//!   missing directories are made (a dry plan makes none, and judges the names it would make).
//! - **lock** (`Backend::lock_plans`): the keys of every planned target, taken together in one
//!   request (the router sorts them: one global order, so no two callers deadlock).
//! - **check** (`Backend::check`): under the locks, the current file at each name (for an
//!   approved call, still the object approved), the guard against it, and the transform: a
//!   write's styled content, an edit's replacement, what a delete or a move takes, what a removal
//!   finds. The result, [`Checked`], is everything the commit does and the outcome it returns,
//!   before anything is placed: a dry run (`Backend::dry_run`, `Request::Check`) ends here, with
//!   the outcome the commit would return ([`Checked::outcome`]).
//! - **commit** (`Backend::commit_all`, in `commit`: the one commit step, a single call's change
//!   as a list of one, a transaction's as its list): the change placed (the atomic replace, the
//!   rename, the unlink), each journaled while it has a temporary name; a single call's by
//!   [`Backend::commit_one`], here.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use super::commit::Commit;
use super::resolve::{Resolved, WalkOptions};
use super::settle::Spot;
use super::write::{
    self, Place, Staged, check_write_guard, current_checked, current_file, place_file, same_key,
};
use super::{Backend, Guard, moves, read, resolve, text, version};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{Change, EditGuard, Hunk, Mode, Outcome, Request, Target, WriteGuard, WriteOperation};
use crate::sys::{self, Errno, Kind, Meta, RenameHow};

/// How much of a large existing file is read to learn its BOM and line-ending style.
const STYLE_PROBE_BYTES: u64 = 64 << 10;

/// A change as the pipeline takes it: the call's parts, borrowed from its request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mutation<'a> {
    Write {
        path: &'a str,
        content: &'a str,
        guard: Option<&'a WriteGuard>,
        match_style: bool,
    },
    Edit {
        path: &'a str,
        old: &'a str,
        new: &'a str,
        replace_all: bool,
        guard: Option<&'a EditGuard>,
    },
    Delete {
        path: &'a str,
        guard: Option<&'a EditGuard>,
    },
    /// A transaction's update by apply_patch hunks: planned as an edit, its hunks applied to
    /// the current text in the check.
    Patch {
        path: &'a str,
        hunks: &'a [Hunk],
        guard: Option<&'a EditGuard>,
    },
    Move {
        source: &'a str,
        destination: &'a str,
        source_guard: Option<&'a EditGuard>,
        destination_guard: Option<&'a WriteGuard>,
        content: Option<&'a str>,
    },
    /// A whole file of raw bytes: its body is staged between plan and lock (`Backend::stage_body`).
    Bytes {
        path: &'a str,
        file_mode: Option<u32>,
        guard: Option<&'a WriteGuard>,
    },
    Remove {
        path: &'a str,
        recursive: bool,
        guard: Option<&'a EditGuard>,
    },
    /// A rewind's restore of a file's content as the change record kept it (`backend::rewind`):
    /// any bytes, text or not, placed as they are (no style, no text check).
    Restore {
        path: &'a str,
        content: &'a [u8],
        guard: Option<&'a WriteGuard>,
    },
}

impl<'a> Mutation<'a> {
    /// The change `request` makes; `None` for a read (or an approved call not yet unbound).
    pub(crate) fn of(request: &'a Request) -> Option<Mutation<'a>> {
        Some(match request {
            Request::WriteText { path, content, guard, match_style } => {
                Mutation::Write { path, content, guard: guard.as_ref(), match_style: *match_style }
            }
            Request::EditText { path, old, new, replace_all, guard } => {
                Mutation::Edit { path, old, new, replace_all: *replace_all, guard: guard.as_ref() }
            }
            Request::DeleteFile { path, guard } => Mutation::Delete { path, guard: guard.as_ref() },
            Request::PatchText { path, hunks, base: None } => Mutation::Patch { path, hunks, guard: None },
            // Applied to what an earlier operation of its patch left, which may not be on disk
            // yet: planned as the write that operation is.
            Request::PatchText { path, base: Some(_), .. } => {
                Mutation::Write { path, content: "", guard: None, match_style: false }
            }
            Request::MoveFile { source, destination, source_guard, destination_guard, content } => {
                Mutation::Move {
                    source,
                    destination,
                    source_guard: source_guard.as_ref(),
                    destination_guard: destination_guard.as_ref(),
                    content: content.as_deref(),
                }
            }
            Request::WriteBytes { path, mode, guard } => {
                Mutation::Bytes { path, file_mode: *mode, guard: guard.as_ref() }
            }
            Request::Remove { path, recursive, guard } => {
                Mutation::Remove { path, recursive: *recursive, guard: guard.as_ref() }
            }
            _ => return None,
        })
    }

    /// The operation it is, as the change record names it.
    pub(super) fn op(&self) -> crate::op::Op {
        use crate::op::Op;
        match self {
            Mutation::Write { .. } => Op::WriteText,
            Mutation::Edit { .. } | Mutation::Patch { .. } => Op::EditText,
            Mutation::Delete { .. } => Op::DeleteFile,
            Mutation::Move { .. } => Op::MoveFile,
            Mutation::Bytes { .. } | Mutation::Restore { .. } => Op::WriteBytes,
            Mutation::Remove { .. } => Op::Remove,
        }
    }

    /// The path it names first (a move's source): where a failure before any plan points.
    pub(super) fn path(&self) -> &'a str {
        match self {
            Mutation::Write { path, .. }
            | Mutation::Edit { path, .. }
            | Mutation::Delete { path, .. }
            | Mutation::Patch { path, .. }
            | Mutation::Bytes { path, .. }
            | Mutation::Remove { path, .. }
            | Mutation::Restore { path, .. } => path,
            Mutation::Move { source, .. } => source,
        }
    }

    /// The content bytes it carries, which a transaction stages (`Backend::within_staged`).
    pub(super) fn sent(&self) -> u64 {
        match self {
            Mutation::Write { content, .. } | Mutation::Move { content: Some(content), .. } => {
                content.len() as u64
            }
            Mutation::Restore { content, .. } => content.len() as u64,
            _ => 0,
        }
    }

    /// Whether its walk makes missing directories: a write, unless it replaces a file that
    /// must exist already.
    fn creates_parents(guard: Option<&WriteGuard>) -> bool {
        !matches!(guard, Some(WriteGuard::ReplaceIfVersion { .. }))
    }
}

/// One planned target: its walk and the name replies give it.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) resolved: Resolved,
    pub(crate) target: Target,
    /// A dry plan's target below directories that do not exist (yet): nothing is there.
    pub(crate) beyond: bool,
}

impl Planned {
    /// The file at the name now, re-checked under the lock (`None`: nothing there).
    fn current(&self) -> Result<Option<(File, Meta)>, FsError> {
        if self.beyond { Ok(None) } else { current_checked(&self.resolved) }
    }
}

/// A change planned: its targets resolved and fenced, nothing locked.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    pub(crate) mode: Mode,
    pub(crate) mutation: Mutation<'a>,
    /// The target (a move's source).
    pub(crate) target: Planned,
    /// A move's destination.
    pub(crate) destination: Option<Planned>,
    /// A dry run's plan: no directory made, and the check says more of a failure (where an
    /// ambiguous edit's matches start).
    pub(crate) dry: bool,
}

impl Plan<'_> {
    /// The lock keys of every target this change touches.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.target).chain(&self.destination).map(|p| p.target.key.as_str())
    }

    /// The target a failure to lock names: a move's destination, else the target.
    fn anchor(&self) -> &Resolved {
        &self.destination.as_ref().unwrap_or(&self.target).resolved
    }
}

/// Where a new file takes its place (owned: [`Place`] as the check decided it).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placement {
    Create,
    CreateOrReplace,
    Replace(Meta),
}

impl Placement {
    fn place(&self) -> Place<'_> {
        match self {
            Placement::Create => Place::Create,
            Placement::CreateOrReplace => Place::CreateOrReplace,
            Placement::Replace(meta) => Place::Replace(meta),
        }
    }

    fn operation(&self) -> WriteOperation {
        match self {
            Placement::Replace(_) => WriteOperation::Update,
            Placement::Create | Placement::CreateOrReplace => WriteOperation::Create,
        }
    }

    /// The file this change replaces, when it replaces one.
    pub(super) fn replaced(&self) -> Option<&Meta> {
        match self {
            Placement::Replace(meta) => Some(meta),
            Placement::Create | Placement::CreateOrReplace => None,
        }
    }
}

/// What the check decided for a change: everything its commit does.
#[derive(Debug)]
pub(crate) enum Decided {
    /// A whole new content at the target (writeText, editText; a rewind's restore, whose
    /// content need not be text).
    Put { content: Vec<u8>, placement: Placement, change: Change, replacements: Option<usize> },
    /// The staged body goes to the target (writeBytes).
    PutStaged { placement: Placement },
    /// The file checked is unlinked (deleteFile); `checked`: only that inode (guarded or approved).
    Delete { meta: Meta, checked: bool, change: Change },
    /// The source goes to the destination (moveFile).
    Move {
        source: (File, Meta),
        /// The destination's current file, when there is one.
        existing: Option<Meta>,
        how: RenameHow,
        create_only: bool,
        source_text: Option<String>,
        /// The destination's text before, when it existed (`Some(None)`: not shown).
        destination_before: Option<Option<String>>,
    },
    /// What the name holds is removed (remove): `now` as found under the lock, `checked` the
    /// file or link a guard was checked against (only that one is removed).
    Remove { now: Meta, checked: Option<Meta>, recursive: bool },
}

/// A change checked under its locks: what its commit will do.
#[derive(Debug)]
pub(crate) struct Checked<'p> {
    pub(crate) plan: &'p Plan<'p>,
    pub(crate) decided: Decided,
}

impl Checked<'_> {
    /// The outcome the commit would return, without committing (a dry run): the change with
    /// its before and after, and the version of what is there now (the one a guard of this
    /// change names; none for a creation).
    pub(crate) fn outcome(&self, backend: &Backend) -> Result<Outcome, Failure> {
        let target = self.plan.target.target.clone();
        let current = |planned: &Planned| -> Result<String, Failure> {
            match planned.current().map_err(|e| backend.fail(e, &planned.resolved))? {
                Some((file, meta)) => Ok(version::of_file(&file, &meta)),
                None => Ok(String::new()),
            }
        };
        Ok(match &self.decided {
            Decided::Put { placement, change, replacements: None, .. } => Outcome::WriteText {
                target,
                operation: placement.operation(),
                version: current(&self.plan.target)?,
                change: change.clone(),
            },
            Decided::Put { change, replacements: Some(count), .. } => Outcome::EditText {
                target,
                version: current(&self.plan.target)?,
                replacements: *count,
                change: change.clone(),
            },
            Decided::PutStaged { placement } => Outcome::WriteBytes {
                target,
                operation: placement.operation(),
                version: current(&self.plan.target)?,
                size: 0,
            },
            Decided::Delete { change, .. } => Outcome::DeleteFile { target, change: change.clone() },
            Decided::Move { source_text, destination_before, .. } => {
                let planned = self.plan.destination.as_ref().unwrap_or(&self.plan.target);
                let after = self.move_after(source_text);
                Outcome::MoveFile {
                    source: target,
                    destination: planned.target.clone(),
                    destination_version: current(planned)?,
                    source_change: source_change(source_text.clone()),
                    destination_change: backend.destination_change(destination_before, after.as_deref()),
                    source_removal_errno: None,
                }
            }
            Decided::Remove { .. } => Outcome::Remove { target, removed: 0 },
        })
    }

    /// What a move leaves at its destination: the new content, else the source's text.
    fn move_after(&self, source_text: &Option<String>) -> Option<String> {
        match self.plan.mutation {
            Mutation::Move { content: Some(content), .. } => Some(content.to_owned()),
            _ => source_text.clone(),
        }
    }
}

/// The file an edit or a patch changes, under the lock, its guard checked: the stale check comes
/// before matching, so a stale change never reports a match failure against content the caller
/// has not seen.
fn edit_current(planned: &Planned, guard: Option<&EditGuard>, key: &str) -> Result<(File, Meta), FsError> {
    let (file, meta) = planned.current()?.ok_or(FsError::Stale(StaleReason::Gone))?;
    if let Some(guard) = guard {
        same_key(guard.target_key.as_ref(), key)?;
        if !version::holds(&guard.version, &file, &meta)? {
            return Err(FsError::Stale(StaleReason::Changed));
        }
    }
    Ok((file, meta))
}

/// A replace that found a link put at the name since its check: for an approved call, not the
/// object approved (as `write::current_checked` says of one found at the check).
fn approved_object(error: FsError, resolved: &Resolved) -> FsError {
    match error {
        FsError::Stale(StaleReason::Symlink) if resolved.bound => FsError::Denied(Denial::NotApproved),
        error => error,
    }
}

/// A removed source's change: its text before, when shown.
pub(super) fn source_change(text: Option<String>) -> Change {
    match text {
        Some(text) => Change { before: Some(text), after: None, omitted: false },
        None => Change { before: None, after: None, omitted: true },
    }
}

impl Backend {
    /// Runs one change through the pipeline: plan, lock, check, commit. A write whose
    /// directory vanished under it (see `write::parent_vanished`) walks again, once.
    pub(crate) fn mutate(&self, mode: Mode, mutation: Mutation<'_>) -> Result<Outcome, Failure> {
        let once = || {
            let plan = self.plan(mode, mutation, false)?;
            let _held = self.lock_plans(&[&plan])?;
            let checked = self.check(&plan)?;
            self.commit_all(Commit::Single(checked, None)).and_then(|outcomes| only(outcomes, &plan))
        };
        match once() {
            Err(failure)
                if matches!(mutation, Mutation::Write { .. }) && write::parent_vanished(&failure.error) =>
            {
                tracing::debug!(%failure.error, "a write's directory vanished under it; walking again");
                once()
            }
            other => other,
        }
    }

    /// A dry run of one change: the whole pipeline but the commit. Returns the outcome the
    /// commit would return, or the failure it would meet; nothing is made or changed.
    pub(crate) fn dry_run(&self, mode: Mode, request: &Request) -> Result<Outcome, Failure> {
        let mutation = match Mutation::of(request) {
            // A body travels on a pipe a dry run has none of.
            Some(Mutation::Bytes { .. }) | None => {
                let error = std::io::Error::other("only a change whose content the call carries is checked");
                return Err(Failure::new(FsError::WriteTemp(error), request.path()));
            }
            Some(mutation) => mutation,
        };
        let plan = self.plan(mode, mutation, true)?;
        let _held = self.lock_plans(&[&plan])?;
        if let Request::PatchText { hunks, base, .. } = request {
            return self.patch_preview(&plan, hunks, base.as_deref());
        }
        self.check(&plan)?.outcome(self)
    }

    /// A patch's dry run, planned and locked: its hunks applied to `base` (what an earlier
    /// operation of the same patch left) or to the file's current text, both texts whole.
    fn patch_preview(&self, plan: &Plan<'_>, hunks: &[Hunk], base: Option<&str>) -> Result<Outcome, Failure> {
        let planned = &plan.target;
        let fail = |e| self.fail(e, &planned.resolved);
        let before = match base {
            Some(base) => base.to_owned(),
            None => {
                let (file, meta) = edit_current(planned, None, &planned.target.key).map_err(fail)?;
                let bytes = read::read_bounded(&file, &meta, self.limits.max_editable_bytes).map_err(fail)?;
                text::decode(&bytes).map_err(fail)?.to_owned()
            }
        };
        let after = self.hunks_applied(&before, hunks).map_err(fail)?;
        Ok(Outcome::Patched { target: planned.target.clone(), before, after })
    }

    /// Takes the locks of every target of `plans` at once, in the one global order.
    pub(crate) fn lock_plans(&self, plans: &[&Plan<'_>]) -> Result<Guard, Failure> {
        let keys: Vec<&str> = plans.iter().flat_map(|p| p.keys()).collect();
        let Some(anchor) = plans.first().map(|p| p.anchor()) else { return Ok(Guard::remote()) };
        self.locks.lock(&keys).map_err(|e| self.fail(e, anchor))
    }

    /// Plans a change: walks and fences each target. `dry`: makes no directory.
    pub(crate) fn plan<'a>(
        &self,
        mode: Mode,
        mutation: Mutation<'a>,
        dry: bool,
    ) -> Result<Plan<'a>, Failure> {
        let too_large = |content: &str, path: &str| {
            let limit = self.limits.max_editable_bytes;
            let size = content.len() as u64;
            (size > limit).then(|| Failure::new(FsError::TooLarge { size, limit }, path))
        };
        let (target, destination) = match mutation {
            Mutation::Write { path, content, guard, .. } => {
                if let Some(failure) = too_large(content, path) {
                    return Err(failure);
                }
                (self.plan_write(mode, path, guard, dry)?, None)
            }
            // Bounded by the transaction that carries it (`Backend::within_staged`).
            Mutation::Restore { path, guard, .. } => (self.plan_write(mode, path, guard, dry)?, None),
            Mutation::Bytes { path, guard, .. } => {
                let planned = self.plan_write(mode, path, guard, dry)?;
                planned
                    .resolved
                    .parent
                    .as_ref()
                    .ok_or_else(|| self.fail(FsError::NotRegularFile, &planned.resolved))?;
                // A guard that fails already refuses before any byte is read; it is checked
                // again under the lock, where it counts.
                check_write_guard(
                    guard,
                    planned.current().map_err(|e| self.fail(e, &planned.resolved))?.as_ref(),
                    &planned.target.key,
                )
                .map_err(|e| self.fail(e, &planned.resolved))?;
                (planned, None)
            }
            Mutation::Edit { path, .. } | Mutation::Patch { path, .. } => {
                let options = WalkOptions { follow_final: true, create_parents: false };
                let resolved = match self.walk(mode, path, options) {
                    Err(Failure { error: FsError::NotFound, path, .. }) => {
                        return Err(Failure::new(FsError::Stale(StaleReason::Gone), path));
                    }
                    other => other?,
                };
                if resolved.meta.is_none() {
                    return Err(self.fail(FsError::Stale(StaleReason::Gone), &resolved));
                }
                (self.fenced(mode, resolved)?, None)
            }
            Mutation::Delete { path, guard } => {
                (self.fenced(mode, self.walk_source(mode, path, guard.is_some())?)?, None)
            }
            Mutation::Move { source, destination, source_guard, destination_guard, content } => {
                if let Some(failure) = content.and_then(|c| too_large(c, destination)) {
                    return Err(failure);
                }
                let src = self.fenced(mode, self.walk_source(mode, source, source_guard.is_some())?)?;
                // A source guard that fails already refuses before the destination's
                // directories are made; it is checked again under the locks, where it counts.
                if let Some((file, meta)) = src.current().map_err(|e| self.fail(e, &src.resolved))? {
                    self.check_source_guard(source_guard, &src.target.key, &file, &meta)
                        .map_err(|e| self.fail(e, &src.resolved))?;
                }
                let dst = self.plan_write(mode, destination, destination_guard, dry)?;
                if src.target.key == dst.target.key {
                    return Err(self.fail(FsError::Denied(Denial::SameFile), &dst.resolved));
                }
                (src, Some(dst))
            }
            Mutation::Remove { path, .. } => {
                let resolved =
                    self.walk(mode, path, WalkOptions { follow_final: false, create_parents: false })?;
                if resolved.meta.is_none() {
                    return Err(self.fail(FsError::NotFound, &resolved));
                }
                if resolved.parent.is_none() {
                    return Err(self.fail(FsError::Denied(Denial::Root), &resolved));
                }
                (self.fenced(mode, resolved)?, None)
            }
        };
        Ok(Plan { mode, mutation, target, destination, dry })
    }

    /// A walked target the mode may change, named.
    fn fenced(&self, mode: Mode, resolved: Resolved) -> Result<Planned, Failure> {
        self.may_change(mode, &resolved).map_err(|e| self.fail(e, &resolved))?;
        let target = self.target(&resolved);
        Ok(Planned { resolved, target, beyond: false })
    }

    /// Plans the target of a write (a move's destination too): links followed, missing
    /// directories made, except for a replace (whose target must exist: else stale) or in a
    /// dry plan (which judges the names it would make instead).
    fn plan_write(
        &self,
        mode: Mode,
        path: &str,
        guard: Option<&WriteGuard>,
        dry: bool,
    ) -> Result<Planned, Failure> {
        self.plan_written(mode, path, true, guard, dry)
    }

    /// [`Backend::plan_write`], the final link followed or not (`check_write` asks either).
    pub(super) fn plan_written(
        &self,
        mode: Mode,
        path: &str,
        follow_final: bool,
        guard: Option<&WriteGuard>,
        dry: bool,
    ) -> Result<Planned, Failure> {
        let create_parents = Mutation::creates_parents(guard);
        let options = WalkOptions { follow_final, create_parents: create_parents && !dry };
        match self.walk(mode, path, options) {
            Err(Failure { error: FsError::NotFound, path, .. }) if !create_parents => {
                Err(Failure::new(FsError::Stale(StaleReason::Gone), path))
            }
            Err(Failure { error: FsError::NotFound, .. }) if dry => self.plan_beyond(mode, path, options),
            other => self.fenced(mode, other?),
        }
    }

    /// Plans a target whose directories do not all exist, making none: resolved as far as it
    /// exists, the missing rest judged as the names a write would make (no links among them,
    /// since they do not exist).
    fn plan_beyond(&self, mode: Mode, path: &str, options: WalkOptions) -> Result<Planned, Failure> {
        let options = WalkOptions { create_parents: false, ..options };
        let not_found = || Failure::new(FsError::NotFound, path);
        let mut known =
            resolve::raw_components(path, self.allow_backslash).map_err(|e| Failure::new(e, path))?;
        let mut missing = Vec::new();
        let found = loop {
            let Some(last) = known.pop() else { return Err(not_found()) };
            missing.push(last);
            let prefix: Vec<String> = known.iter().map(|c| resolve::escape_bytes(c.as_bytes())).collect();
            if let Ok(resolved) = self.walk(mode, &format!("/{}", prefix.join("/")), options) {
                break resolved;
            }
        };
        if missing.iter().any(|c| c == "..") {
            return Err(not_found());
        }
        // Each missing name as the write would make it: the directories on the way (which the
        // walk asks about one by one), then the target. The ancestor found may be missing
        // itself (a walk resolves an absent final name).
        if found.meta.is_none() {
            self.may_change(mode, &found).map_err(|e| self.fail(e, &found))?;
        }
        let mut rel: Vec<OsString> = found.rel.clone();
        let mut target = None;
        for name in missing.into_iter().rev() {
            rel.push(name);
            let beyond = Resolved {
                root: found.root,
                rel: rel.clone(),
                parent: None,
                meta: None,
                made: Default::default(),
                links: Vec::new(),
                dirs: Vec::new(),
                bound: false,
            };
            self.may_write(mode, beyond.root, &beyond.rel).map_err(|e| self.fail(e, &beyond))?;
            self.read_denied(beyond.root, &beyond.rel).map_err(|e| self.fail(e, &beyond))?;
            target = Some(beyond);
        }
        let resolved = target.ok_or_else(not_found)?;
        let target = self.target(&resolved);
        Ok(Planned { resolved, target, beyond: true })
    }

    /// Checks a planned change under its locks: the current file, the guard, the transform.
    pub(crate) fn check<'p>(&self, plan: &'p Plan<'p>) -> Result<Checked<'p>, Failure> {
        let planned = &plan.target;
        let resolved = &planned.resolved;
        let fail = |e| self.fail(e, resolved);
        let key = planned.target.key.as_str();
        let decided = match plan.mutation {
            Mutation::Write { path, content, guard, match_style } => {
                let existing = planned.current().map_err(fail)?;
                check_write_guard(guard, existing.as_ref(), key).map_err(fail)?;
                if !planned.beyond {
                    resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                }
                match existing {
                    // An approved creation never replaces what appears at the name meanwhile.
                    None => Decided::Put {
                        content: content.as_bytes().to_vec(),
                        placement: if guard.is_some() || self.creation_only(path) {
                            Placement::Create
                        } else {
                            Placement::CreateOrReplace
                        },
                        change: self.change(None, true, Some(content)),
                        replacements: None,
                    },
                    Some((old_file, old_meta)) => {
                        let (old_text, new_content) =
                            self.restyled(&old_file, &old_meta, content, match_style).map_err(fail)?;
                        let change = self.change(old_text.as_deref(), old_text.is_some(), Some(&new_content));
                        Decided::Put {
                            content: new_content.into_owned().into_bytes(),
                            placement: Placement::Replace(old_meta),
                            change,
                            replacements: None,
                        }
                    }
                }
            }
            Mutation::Edit { old, new, replace_all, guard, .. } => {
                let (file, meta) = edit_current(planned, guard, key).map_err(fail)?;
                let edited = self.edited(&file, &meta, old, new, replace_all, plan.dry).map_err(fail)?;
                Decided::Put {
                    change: self.change(Some(&edited.body), true, Some(&edited.replaced)),
                    content: edited.after.into_bytes(),
                    placement: Placement::Replace(meta),
                    replacements: Some(edited.count),
                }
            }
            Mutation::Patch { hunks, guard, .. } => {
                let (file, meta) = edit_current(planned, guard, key).map_err(fail)?;
                let patched = self.patched(&file, &meta, hunks).map_err(fail)?;
                Decided::Put {
                    change: self.change(Some(&patched.body), true, Some(&patched.replaced)),
                    content: patched.after.into_bytes(),
                    placement: Placement::Replace(meta),
                    replacements: Some(patched.count),
                }
            }
            Mutation::Restore { path, content, guard } => {
                let existing = planned.current().map_err(fail)?;
                check_write_guard(guard, existing.as_ref(), key).map_err(fail)?;
                resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                let placement = match &existing {
                    None if guard.is_some() || self.creation_only(path) => Placement::Create,
                    None => Placement::CreateOrReplace,
                    Some((_, meta)) => Placement::Replace(*meta),
                };
                // The content the record kept is bytes; the rewind's reply lists paths, not
                // text changes.
                Decided::Put {
                    content: content.to_vec(),
                    placement,
                    change: Change { before: None, after: None, omitted: true },
                    replacements: None,
                }
            }
            Mutation::Bytes { path, guard, .. } => {
                let existing = planned.current().map_err(fail)?;
                check_write_guard(guard, existing.as_ref(), key).map_err(fail)?;
                let placement = match &existing {
                    // An approved creation never replaces what appears at the name meanwhile.
                    None if guard.is_some() || self.creation_only(path) => Placement::Create,
                    None => Placement::CreateOrReplace,
                    Some((_, meta)) => Placement::Replace(*meta),
                };
                Decided::PutStaged { placement }
            }
            Mutation::Delete { guard, .. } => {
                let missing =
                    if guard.is_some() { FsError::Stale(StaleReason::Gone) } else { FsError::NotFound };
                let (file, meta) = planned.current().map_err(fail)?.ok_or_else(|| fail(missing))?;
                self.check_source_guard(guard, key, &file, &meta).map_err(fail)?;
                let change = source_change(self.bounded_text(&file, &meta));
                resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                // An approved deletion removes the file it was shown, bound to its inode.
                Decided::Delete { meta, checked: guard.is_some() || resolved.bound, change }
            }
            Mutation::Move { destination, source_guard, destination_guard, .. } => {
                let dst = plan.destination.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                let dst_fail = |e| self.fail(e, &dst.resolved);
                let src_missing = if source_guard.is_some() {
                    FsError::Stale(StaleReason::Gone)
                } else {
                    FsError::NotFound
                };
                let (src_file, src_meta) =
                    planned.current().map_err(fail)?.ok_or_else(|| fail(src_missing))?;
                self.check_source_guard(source_guard, key, &src_file, &src_meta).map_err(fail)?;
                let existing = dst.current().map_err(dst_fail)?;
                check_write_guard(destination_guard, existing.as_ref(), &dst.target.key).map_err(dst_fail)?;
                let source_text = self.bounded_text(&src_file, &src_meta);
                let destination_before = existing.as_ref().map(|(f, m)| self.bounded_text(f, m));
                resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                if !dst.beyond {
                    dst.resolved.parent.as_ref().ok_or_else(|| dst_fail(FsError::NotRegularFile))?;
                }
                // An approved move never replaces what appears at a destination shown absent.
                let create_only = destination_guard.is_some() || self.creation_only(destination);
                let how = match (destination_guard, &existing) {
                    (_, None) if create_only => RenameHow::NoReplace,
                    // A guarded replace swaps, then checks that what it swapped out is the file
                    // it checked (see `moves::swap_in`): a save over the destination since then
                    // is never lost.
                    (Some(WriteGuard::ReplaceIfVersion { .. }), Some(_)) => RenameHow::Exchange,
                    _ => RenameHow::Replace,
                };
                Decided::Move {
                    source: (src_file, src_meta),
                    existing: existing.map(|(_, meta)| meta),
                    how,
                    create_only,
                    source_text,
                    destination_before,
                }
            }
            Mutation::Remove { recursive, guard, .. } => {
                let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::Denied(Denial::Root)))?;
                let walked = resolved.meta.ok_or_else(|| fail(FsError::NotFound))?;
                // Re-checked under the lock: the name must still be what the walk found.
                let now = match sys::meta_at(parent.as_fd(), resolved.name()) {
                    Ok(meta) => meta,
                    Err(Errno::NOENT) => return Err(fail(FsError::NotFound)),
                    Err(errno) => return Err(fail(FsError::Metadata(errno))),
                };
                if (now.dev, now.ino) != (walked.dev, walked.ino) {
                    return Err(fail(FsError::Stale(StaleReason::OtherFile)));
                }
                // The file a guard was checked against: only that one is removed.
                let mut checked = None;
                if let Some(guard) = guard {
                    same_key(guard.target_key.as_ref(), key).map_err(fail)?;
                    let holds = match now.kind {
                        Kind::File => match current_checked(resolved).map_err(fail)? {
                            Some((file, meta)) => {
                                checked = Some(meta);
                                version::holds(&guard.version, &file, &meta).map_err(fail)?
                            }
                            None => return Err(fail(FsError::Stale(StaleReason::Gone))),
                        },
                        // A link (or another non-directory) is checked by its metadata, and only
                        // the one checked is removed: a save that replaced it since is another
                        // inode.
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
                Decided::Remove { now, checked, recursive }
            }
        };
        Ok(Checked { plan, decided })
    }

    /// A write's new content over the existing file: the old text (when small enough to show)
    /// and the content in the file's BOM and line endings when `match_style`, within the bound.
    fn restyled<'c>(
        &self,
        file: &File,
        meta: &Meta,
        content: &'c str,
        match_style: bool,
    ) -> Result<(Option<String>, Cow<'c, str>), FsError> {
        let whole = meta.size <= self.limits.max_diff_text_bytes;
        let probe = if whole { self.limits.max_diff_text_bytes } else { STYLE_PROBE_BYTES };
        let old_bytes = read_prefix(file, probe, meta.size)?;
        let old_text = if whole { text::decode(&old_bytes).ok().map(str::to_owned) } else { None };
        let new_content = if match_style {
            let (bom, ending) = text::style_of(&old_bytes);
            Cow::Owned(text::apply_style(bom, ending, content))
        } else {
            Cow::Borrowed(content)
        };
        // The file's CRLF endings and BOM can make the content longer than it was sent.
        let size = new_content.len() as u64;
        if size > self.limits.max_editable_bytes {
            return Err(FsError::TooLarge { size, limit: self.limits.max_editable_bytes });
        }
        Ok((old_text, new_content))
    }

    /// The literal replacement of an edit over the file under the lock: the file's text must
    /// decode, and the whole file, BOM included, stay within what a write of it could be.
    /// `lines`: an ambiguous edit says where its matches start (a dry run's answer, which the
    /// tools list).
    fn edited(
        &self,
        file: &File,
        meta: &Meta,
        old: &str,
        new: &str,
        replace_all: bool,
        lines: bool,
    ) -> Result<Edited, FsError> {
        let bytes = read::read_bounded(file, meta, self.limits.max_editable_bytes)?;
        let current = text::decode(&bytes)?;
        let (bom, body) = text::split_bom(current);
        let limit = self.limits.max_editable_bytes;
        let room = limit.saturating_sub(bom.len() as u64);
        let replaced = text::replace(body, old, new, replace_all, room).map_err(|e| match e {
            FsError::TooLarge { size, .. } => FsError::TooLarge { size: size + bom.len() as u64, limit },
            // Where the matches start, when the list fits an error's metadata (else the tools
            // word it without the lines).
            FsError::AmbiguousEdit { count, .. } if lines => {
                FsError::AmbiguousEdit { count, lines: text::match_lines(body, old) }
            }
            e => e,
        })?;
        Ok(Edited {
            after: format!("{bom}{}", replaced.text),
            body: body.to_owned(),
            replaced: replaced.text,
            count: replaced.count,
        })
    }

    /// A patch's hunks applied to the file under the lock, as the apply_patch tool applies them
    /// (`fsd_patch::apply_chunks`: a leading BOM kept, each line's ending kept): the file's text
    /// must decode, and the result stay within what a write of it could be. A hunk that does
    /// not match is [`FsError::HunkMismatch`], naming it.
    fn patched(&self, file: &File, meta: &Meta, hunks: &[Hunk]) -> Result<Edited, FsError> {
        let bytes = read::read_bounded(file, meta, self.limits.max_editable_bytes)?;
        let current = text::decode(&bytes)?;
        let after = self.hunks_applied(current, hunks)?;
        let body = text::split_bom(current).1.to_owned();
        let replaced = text::split_bom(&after).1.to_owned();
        Ok(Edited { after, body, replaced, count: hunks.len() })
    }

    /// `hunks` applied to `current`, the result within what a write of it could be.
    fn hunks_applied(&self, current: &str, hunks: &[Hunk]) -> Result<String, FsError> {
        let chunks: Vec<fsd_patch::Chunk> = hunks.iter().enumerate().map(|(i, h)| h.chunk(i + 1)).collect();
        let after = fsd_patch::apply_chunks(current, &chunks).map_err(|e| FsError::HunkMismatch {
            hunk: e.chunk_line.saturating_sub(1),
            miss: crate::error::HunkMiss::of(&e.kind),
        })?;
        let limit = self.limits.max_editable_bytes;
        let size = after.len() as u64;
        if size > limit {
            return Err(FsError::TooLarge { size, limit });
        }
        Ok(after)
    }

    /// A move's destination change: its text before (when it existed and is shown) and after.
    pub(super) fn destination_change(&self, before: &Option<Option<String>>, after: Option<&str>) -> Change {
        match before {
            Some(before) => self.change(before.as_deref(), before.is_some(), after),
            None => self.change(None, true, after),
        }
    }

    /// Streams a writeBytes body into a temporary file beside its target, with no lock held: a
    /// slow uploader does not hold up the other calls on the file. Between plan and lock.
    pub(super) fn stage_body<'p>(
        &'p self,
        plan: &'p Plan<'p>,
        fill: &mut dyn FnMut(&mut File) -> Result<(), FsError>,
    ) -> Result<Staged<'p>, Failure> {
        let resolved = &plan.target.resolved;
        let fail = |e| self.fail(e, resolved);
        let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
        write::stage(parent.as_fd(), fill, self.journal_scope(resolved), None).map_err(fail)
    }

    /// The single commit of one checked change (see `commit`): places it, and returns its
    /// outcome. `body`: a writeBytes body, staged (`stage_body`).
    pub(super) fn commit_one(
        &self,
        checked: Checked<'_>,
        body: Option<Body<'_>>,
    ) -> Result<Outcome, Failure> {
        let Checked { plan, decided } = checked;
        let (mode, planned) = (plan.mode, &plan.target);
        let resolved = &planned.resolved;
        let fail = |e| self.fail(e, resolved);
        let target = planned.target.clone();
        let parent = || resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile));
        match decided {
            Decided::Put { content, placement, change, replacements } => {
                let (file, meta) = place_file(
                    parent()?.as_fd(),
                    resolved.name(),
                    &content,
                    placement.place(),
                    self.journal_scope(resolved),
                )
                .map_err(|e| fail(approved_object(e, resolved)))?;
                let version = version::of_content(&file, &meta, &content);
                if let Some(replacements) = replacements {
                    return Ok(Outcome::EditText { target, version, replacements, change });
                }
                if placement.replaced().is_none() {
                    self.undo_git_piece(mode, resolved, &meta)?;
                }
                resolved.made.keep();
                Ok(Outcome::WriteText { target, operation: placement.operation(), version, change })
            }
            Decided::PutStaged { placement } => {
                let Mutation::Bytes { file_mode, .. } = plan.mutation else {
                    return Err(fail(FsError::NotRegularFile));
                };
                let Body { staged, size, digest } =
                    body.ok_or_else(|| fail(FsError::WriteTemp(std::io::Error::other("no body was sent"))))?;
                let (file, meta) = staged
                    .place(resolved.name(), placement.place(), file_mode, None)
                    .map_err(|e| fail(approved_object(e, resolved)))?;
                if placement.replaced().is_none() {
                    self.undo_git_piece(mode, resolved, &meta)?;
                }
                // Every byte passed through here: the version carries their digest.
                let version = fsd_proto::version::with_digest(version::of_file(&file, &meta), size, &digest);
                resolved.made.keep();
                Ok(Outcome::WriteBytes { target, operation: placement.operation(), version, size })
            }
            Decided::Delete { meta, checked, change } => {
                let parent = parent()?;
                if checked {
                    moves::remove_checked(
                        parent.as_fd(),
                        resolved.name(),
                        &meta,
                        self.journal_scope(resolved),
                    )
                    .map_err(fail)?;
                } else {
                    sys::remove(parent.as_fd(), resolved.name()).map_err(|e| fail(FsError::Remove(e)))?;
                }
                sys::sync_dir(parent.as_fd()).map_err(|e| fail(FsError::Sync(e)))?;
                Ok(Outcome::DeleteFile { target, change })
            }
            Decided::Move { source, existing, how, create_only, source_text, destination_before } => {
                let content = match plan.mutation {
                    Mutation::Move { content, .. } => content,
                    _ => None,
                };
                let dst = plan.destination.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
                self.commit_move(
                    mode,
                    resolved,
                    dst,
                    source,
                    existing,
                    how,
                    create_only,
                    content,
                    source_text,
                    destination_before,
                )
            }
            Decided::Remove { now, checked, recursive } => {
                let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::Denied(Denial::Root)))?;
                let name = resolved.name();
                let removed = if now.kind == Kind::Directory {
                    match sys::remove_dir(parent.as_fd(), name) {
                        Ok(()) => 1,
                        Err(Errno::NOTEMPTY | Errno::EXIST) if recursive => {
                            let tree =
                                super::bytes::Tree { backend: self, mode, root: resolved.root, dev: now.dev };
                            // A dry walk first: a protected name or a mount anywhere below
                            // refuses the whole removal before anything is gone.
                            tree.walk(parent.as_fd(), name, &resolved.rel, false).map_err(fail)?;
                            tree.walk(parent.as_fd(), name, &resolved.rel, true).map_err(fail)?
                        }
                        Err(Errno::NOTEMPTY | Errno::EXIST) => return Err(fail(FsError::NotEmpty)),
                        Err(errno) => return Err(fail(FsError::Remove(errno))),
                    }
                } else if let Some(checked) = &checked {
                    moves::remove_checked(parent.as_fd(), name, checked, self.journal_scope(resolved))
                        .map_err(fail)?;
                    1
                } else {
                    sys::remove(parent.as_fd(), name).map_err(|e| fail(FsError::Remove(e)))?;
                    1
                };
                sys::sync_dir(parent.as_fd()).map_err(|e| fail(FsError::Sync(e)))?;
                Ok(Outcome::Remove { target, removed })
            }
        }
    }

    /// A move's commit: a rename (an exchange checked for a guarded replace, a rename checked
    /// for an approved move), or across filesystems and with new content a write of the
    /// destination and an unlink of the source.
    #[allow(clippy::too_many_arguments)]
    fn commit_move(
        &self,
        mode: Mode,
        src: &Resolved,
        dst: &Planned,
        (src_file, src_meta): (File, Meta),
        existing: Option<Meta>,
        how: RenameHow,
        create_only: bool,
        content: Option<&str>,
        source_text: Option<String>,
        destination_before: Option<Option<String>>,
    ) -> Result<Outcome, Failure> {
        let dst_target = dst.target.clone();
        let dst = &dst.resolved;
        let src_parent = src.parent.as_ref().ok_or_else(|| self.fail(FsError::NotRegularFile, src))?;
        let dst_parent = dst.parent.as_ref().ok_or_else(|| self.fail(FsError::NotRegularFile, dst))?;
        let mut source_removal_errno = None;
        let after: Option<String>;
        #[cfg(feature = "fault-injection")]
        if how == RenameHow::Exchange {
            write::pause_at_exchange(dst.name());
        }
        let renamed = match (content, &existing) {
            (None, Some(checked)) if how == RenameHow::Exchange => {
                let record = self.record.as_ref();
                match moves::swap_in(
                    src_parent.as_fd(),
                    src.name(),
                    dst_parent.as_fd(),
                    dst.name(),
                    checked,
                    record,
                )
                .map_err(|e| self.fail(e, dst))?
                {
                    moves::Swap::Moved { left_at_source } => {
                        source_removal_errno = left_at_source.map(Errno::raw_os_error);
                        Ok(())
                    }
                    moves::Swap::Failed(errno) => Err(errno),
                }
            }
            (None, _) if src.bound => moves::renamed_checked(
                src_parent.as_fd(),
                src.name(),
                dst_parent.as_fd(),
                dst.name(),
                how,
                &src_meta,
            )
            .map_err(|e| self.fail(e, src))?,
            (None, _) => sys::rename(src_parent.as_fd(), src.name(), dst_parent.as_fd(), dst.name(), how),
            (Some(_), _) => Err(Errno::XDEV),
        };
        match renamed {
            Ok(()) => {
                // A racing call may have made a git directory's other piece since the check:
                // the rename is undone then (see `undo_git_piece`).
                if existing.is_none()
                    && let Err(denied) = self.git_piece_still_allowed(mode, dst)
                {
                    let at = Spot { dir: dst_parent.as_fd(), name: dst.name() };
                    let back = Spot { dir: src_parent.as_fd(), name: src.name() };
                    if let Err(moves::Aside::NotMoved(errno)) =
                        moves::undo_rename(at, back, StaleReason::ChangedWhileWriting)
                    {
                        tracing::warn!(%errno, "a move that made a git directory's last piece could not be undone");
                    }
                    return Err(denied);
                }
                after = source_text.clone();
                sys::sync_dir(dst_parent.as_fd()).map_err(|e| self.fail(FsError::Sync(e), dst))?;
                sys::sync_dir(src_parent.as_fd()).map_err(|e| self.fail(FsError::Sync(e), src))?;
            }
            Err(Errno::EXIST) => return Err(self.fail(FsError::AlreadyExists, dst)),
            // New content, or another filesystem: write the destination, then remove the source.
            Err(Errno::XDEV) => {
                let bytes = match content {
                    Some(content) => content.as_bytes().to_vec(),
                    None => read::read_bounded(&src_file, &src_meta, self.limits.max_editable_bytes)
                        .map_err(|e| self.fail(e, src))?,
                };
                let place = match (&existing, create_only) {
                    (Some(meta), _) => Place::Replace(meta),
                    (None, true) => Place::Create,
                    (None, false) => Place::CreateOrReplace,
                };
                let (_, placed) =
                    place_file(dst_parent.as_fd(), dst.name(), &bytes, place, self.journal_scope(dst))
                        .map_err(|e| self.fail(e, dst))?;
                // As for a rename above, but what is undone is the file written here; the
                // source is still in place.
                if existing.is_none() {
                    self.undo_git_piece(mode, dst, &placed)?;
                }
                after = String::from_utf8(bytes).ok();
                match sys::remove(src_parent.as_fd(), src.name()) {
                    Ok(()) => {
                        let _ = sys::sync_dir(src_parent.as_fd());
                    }
                    Err(errno) => source_removal_errno = Some(errno.raw_os_error()),
                }
            }
            Err(errno) => return Err(self.fail(FsError::Rename(errno), dst)),
        }
        let destination_version = match current_file(dst).map_err(|e| self.fail(e, dst))? {
            Some((file, meta)) => version::of_file(&file, &meta),
            None => return Err(self.fail(FsError::Stale(StaleReason::DestinationGone), dst)),
        };
        let source_change = match &source_removal_errno {
            Some(_) => Change::default(),
            None => source_change(source_text),
        };
        let destination_change = self.destination_change(&destination_before, after.as_deref());
        dst.made.keep();
        Ok(Outcome::MoveFile {
            source: self.target(src),
            destination: dst_target,
            destination_version,
            source_change,
            destination_change,
            source_removal_errno,
        })
    }
}

/// The one outcome of a single call's commit.
pub(super) fn only(outcomes: Vec<Outcome>, plan: &Plan<'_>) -> Result<Outcome, Failure> {
    outcomes
        .into_iter()
        .next()
        .ok_or_else(|| Failure::new(FsError::NotRegularFile, plan.target.target.display.clone()))
}

/// A writeBytes body staged beside its target: its size and the digest of its bytes.
pub(crate) struct Body<'p> {
    pub(crate) staged: Staged<'p>,
    pub(crate) size: u64,
    pub(crate) digest: String,
}

/// An edit's result: the whole new content (`after`, BOM included), the text before and after
/// without the BOM (the reply's change) and how many matches were replaced.
pub(crate) struct Edited {
    pub(crate) after: String,
    pub(crate) body: String,
    pub(crate) replaced: String,
    pub(crate) count: usize,
}

/// The first `limit` bytes of a file (all of it when smaller). `size` (the file's size at open)
/// sizes the buffer, so a small file takes one read and the end-of-file probe, not a read per
/// doubling of an empty vector.
fn read_prefix(file: &File, limit: u64, size: u64) -> Result<Vec<u8>, FsError> {
    let mut buf = Vec::with_capacity(usize::try_from(limit.min(size)).unwrap_or(0));
    std::io::Read::read_to_end(&mut std::io::Read::take(file, limit), &mut buf).map_err(FsError::Read)?;
    Ok(buf)
}
