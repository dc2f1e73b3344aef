//! The pipeline's commit step: every change the pipeline checked reaches the disk through
//! [`Backend::commit_all`], a single call's as a list of one, a transaction's as its list.
//!
//! - A single call's change (and a transaction of one write, edit or delete, which changes one
//!   name by one rename or unlink: all-or-nothing already) is placed by the single commit
//!   (`Backend::commit_one`, in `pipeline`): one step, no intent record.
//! - Several changes, or a transaction's move, are committed together: each new file is staged
//!   beside its target and synced under a journaled temporary name; the intent record naming
//!   every step (`txn::Record`) is written and synced with its directory; then the steps run in
//!   order, each one visible change at one name; a step that fails undoes the steps before it,
//!   newest first ([`txn::undo`], which recovery runs too), before the reply; once all are done
//!   the directories are synced, the record removed, then the replaced and removed files.
//!
//! Both place a new file with the same step (`write::Ready::put`: the exchange, its check and
//! its undo) and remove a checked file with the same step (`moves::set_aside`). Once a commit
//! is on disk, [`Backend::committed`] is told, with each name's file before and version after:
//! the one place where a change is known to be committed.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::journal::Entry;
use super::pipeline::{Body, Checked, Decided, Mutation, Placement};
use super::resolve::Resolved;
use super::txn::{self, Action, Origin, Record, SlotRecord, Stamp};
use super::write::{Place, Ready, Undo, stage, write_failed};
use super::{Backend, moves, read, version};
use crate::error::{Failure, FsError};
use crate::op::{Change, Outcome, Target, WriteOperation};
use crate::sys::{self, Meta};

/// What is committed, and how. Built once per call and moved straight into `commit_all`: the
/// single call's larger variant is not worth a heap allocation on every write.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Commit<'p, 'b> {
    /// One call's change, committed as that call promises (with a writeBytes body, staged).
    Single(Checked<'p>, Option<Body<'b>>),
    /// A transaction's changes: all or none, also across a crash.
    Together(Vec<Checked<'p>>),
}

/// One name a commit changed, as the commit step knows it once the change is on disk.
#[derive(Debug)]
pub(crate) struct Committed<'o> {
    /// The name.
    pub(crate) target: &'o Target,
    /// The file it held before (`None`: none; the commit made the name).
    pub(crate) before: Option<Meta>,
    /// The version of what it holds now (`None`: nothing; the commit removed it).
    pub(crate) after: Option<&'o str>,
}

/// What each name of a checked change held before its commit: its target, then a move's
/// destination.
fn befores(checked: &Checked<'_>) -> [Option<Meta>; 2] {
    match &checked.decided {
        Decided::Put { placement, .. } | Decided::PutStaged { placement } => {
            [placement.replaced().copied(), None]
        }
        Decided::Delete { meta, .. } => [Some(*meta), None],
        Decided::Move { source: (_, meta), existing, .. } => [Some(*meta), *existing],
        Decided::Remove { now, .. } => [Some(*now), None],
    }
}

/// The names an outcome changed, each with the version it holds now, in [`befores`]' order.
fn afters(outcome: &Outcome) -> Vec<(&Target, Option<&str>)> {
    match outcome {
        Outcome::WriteText { target, version, .. }
        | Outcome::EditText { target, version, .. }
        | Outcome::WriteBytes { target, version, .. } => vec![(target, Some(version.as_str()))],
        Outcome::DeleteFile { target, .. } | Outcome::Remove { target, .. } => vec![(target, None)],
        Outcome::MoveFile { source, destination, destination_version, source_removal_errno, .. } => {
            // A source the move could not remove is still there, unchanged.
            let source = source_removal_errno.is_none().then_some((source, None));
            source.into_iter().chain([(destination, Some(destination_version.as_str()))]).collect()
        }
        _ => Vec::new(),
    }
}

impl Backend {
    /// Commits checked changes: the one commit step of the pipeline (see the module's comment).
    /// Returns each change's outcome, in order. A transaction's failure names its operation and
    /// how many were undone; nothing it changed stays changed.
    pub(crate) fn commit_all(&self, commit: Commit<'_, '_>) -> Result<Vec<Outcome>, Failure> {
        // The change record keeps what the commit replaces or removes before it places
        // anything (a transaction is one change), and writes the change's line once it is on
        // disk; its lock is held from one to the other.
        let mut pending = {
            let first = match &commit {
                Commit::Single(checked, _) => Some(checked),
                Commit::Together(checked) => checked.first(),
            };
            match first {
                Some(first) => self.record_begin().map_err(|e| self.fail(e, &first.plan.target.resolved))?,
                None => None,
            }
        };
        // A transaction of one write, edit or delete is recorded as that change.
        let op = match &commit {
            Commit::Single(checked, _) => checked.plan.mutation.op(),
            Commit::Together(checked) => match checked.as_slice() {
                [only] if !matches!(only.decided, Decided::Move { .. }) => only.plan.mutation.op(),
                _ => crate::op::Op::Transact,
            },
        };
        let imaged = match &commit {
            Commit::Single(checked, _) => self.record_images(&mut pending, checked),
            Commit::Together(checked) => checked.iter().enumerate().try_for_each(|(i, c)| {
                self.record_images(&mut pending, c).map_err(|f| f.in_transaction(i, 0))
            }),
        };
        if let Err(failure) = imaged {
            self.record_abandoned(pending);
            return Err(failure);
        }
        let placed = match commit {
            Commit::Single(checked, body) => {
                let before = befores(&checked);
                self.commit_one(checked, body).map(|outcome| (vec![before], vec![outcome]))
            }
            Commit::Together(mut checked) => {
                let before: Vec<_> = checked.iter().map(befores).collect();
                let outcomes = match checked.pop() {
                    // One write, edit or delete changes one name by one rename or unlink: the
                    // single commit is all-or-nothing already, without an intent record to sync.
                    Some(only) if checked.is_empty() && !matches!(only.decided, Decided::Move { .. }) => {
                        self.commit_one(only, None).map(|o| vec![o]).map_err(|f| f.in_transaction(0, 0))
                    }
                    Some(last) => {
                        checked.push(last);
                        self.commit_together(checked)
                    }
                    None => Ok(Vec::new()),
                };
                outcomes.map(|outcomes| (before, outcomes))
            }
        };
        let (befores, outcomes): (Vec<[Option<Meta>; 2]>, Vec<Outcome>) = match placed {
            Ok(placed) => placed,
            Err(failure) => {
                // A change can reach the disk and still fail (its directory's sync): the call
                // answers an error, and the record keeps the change all the same.
                self.record_failed(pending, op.name());
                return Err(failure);
            }
        };
        let changes: Vec<Committed<'_>> = befores
            .iter()
            .zip(&outcomes)
            .flat_map(|(before, outcome)| {
                let names = afters(outcome);
                // A move whose source stayed names only its destination (its second name).
                let skip =
                    usize::from(matches!(outcome, Outcome::MoveFile { source_removal_errno: Some(_), .. }));
                names.into_iter().zip(before.iter().skip(skip)).map(|((target, after), before)| Committed {
                    target,
                    before: *before,
                    after,
                })
            })
            .collect();
        self.committed(&changes);
        self.record_after(pending, op.name());
        Ok(outcomes)
    }

    /// Every commit, once on disk, comes here with the names it changed: the one place where a
    /// change is known to be committed (the change record of rewind is kept from here).
    fn committed(&self, changes: &[Committed<'_>]) {
        #[cfg(test)]
        REPORTED.with(|r| {
            let names =
                changes.iter().map(|c| (c.target.display.clone(), c.before.is_some(), c.after.is_some()));
            r.borrow_mut().extend(names);
        });
        for change in changes {
            tracing::trace!(
                key = %change.target.key,
                before = ?change.before.as_ref().map(version::of_meta),
                after = ?change.after,
                "committed"
            );
        }
    }

    /// Several checked changes committed all-or-nothing, across a crash too (see the module's
    /// comment).
    fn commit_together(&self, checked: Vec<Checked<'_>>) -> Result<Vec<Outcome>, Failure> {
        let Some(first) = checked.first() else { return Ok(Vec::new()) };
        let anchor = &first.plan.target.resolved;
        let first_path = first.plan.target.target.display.clone();
        let Some(intents) = self.intents.as_ref() else {
            return Err(self.fail(FsError::Denied(crate::error::Denial::NoStateDir), anchor));
        };
        // Every target of every operation, a move's source before its destination.
        let mut targets: Vec<&Resolved> = Vec::new();
        let mut of_op: Vec<(usize, Option<usize>)> = Vec::new();
        for c in &checked {
            let a = targets.len();
            targets.push(&c.plan.target.resolved);
            let b = c.plan.destination.as_ref().map(|d| {
                targets.push(&d.resolved);
                a + 1
            });
            of_op.push((a, b));
        }

        let mut staging: Vec<Option<Staging>> = (0..targets.len()).map(|_| None).collect();
        let mut planned = Vec::with_capacity(checked.len());
        for (i, c) in checked.into_iter().enumerate() {
            let (a, b) = of_op[i];
            let fail = |e, t: usize| self.fail(e, targets[t]).in_transaction(i, 0);
            match (c.decided, c.plan.mutation) {
                (Decided::Put { content, placement, change, replacements }, _) => {
                    let old = match placement {
                        Placement::Replace(meta) => Some(meta),
                        Placement::Create | Placement::CreateOrReplace => None,
                    };
                    let operation =
                        if old.is_some() { WriteOperation::Update } else { WriteOperation::Create };
                    staging[a] = Some(Staging::Put { content, old });
                    planned.push(match replacements {
                        Some(replacements) => Planned::Edit { target: a, replacements, change },
                        None => Planned::Write { target: a, operation, change },
                    });
                }
                (Decided::Delete { meta, change, .. }, _) => {
                    staging[a] = Some(Staging::Remove { old: meta });
                    planned.push(Planned::Delete { target: a, change });
                }
                (
                    Decided::Move { source: (file, meta), existing, source_text, destination_before, .. },
                    Mutation::Move { content, .. },
                ) => {
                    let d = b.ok_or_else(|| fail(FsError::NotRegularFile, a))?;
                    let destination_change =
                        self.destination_change(&destination_before, source_text.as_deref());
                    if content.is_none() && same_mount(targets[a], targets[d]) {
                        // A rename: the file itself travels (inode, links, attributes, mode).
                        // Over an existing destination the two exchange, and the destination's
                        // file, then at the source's name, is set aside there.
                        staging[d] = Some(Staging::Rename { file, meta, from: a, old: existing });
                        staging[a] = existing.map(|old| Staging::Remove { old });
                        planned.push(Planned::Move {
                            source: a,
                            destination: d,
                            source_change: super::pipeline::source_change(source_text),
                            destination_change,
                        });
                        continue;
                    }
                    // New content, or another filesystem: the destination written anew, the
                    // source removed.
                    let bytes = match content {
                        Some(content) => content.as_bytes().to_vec(),
                        None => {
                            // The check read the source for its text: from its start again.
                            std::io::Seek::rewind(&mut &file).map_err(|e| fail(FsError::Read(e), a))?;
                            read::read_bounded(&file, &meta, self.limits.max_editable_bytes)
                                .map_err(|e| fail(e, a))?
                        }
                    };
                    let after = content.map(str::to_owned).or_else(|| source_text.clone());
                    let destination_change = self.destination_change(&destination_before, after.as_deref());
                    staging[d] = Some(Staging::Put { content: bytes, old: existing });
                    staging[a] = Some(Staging::Remove { old: meta });
                    planned.push(Planned::Move {
                        source: a,
                        destination: d,
                        source_change: super::pipeline::source_change(source_text),
                        destination_change,
                    });
                }
                // A transaction carries text changes only (`TxnOp`).
                _ => return Err(fail(FsError::NotRegularFile, a)),
            }
        }
        let staged_bytes: u64 = staging
            .iter()
            .map(|d| match d {
                Some(Staging::Put { content, .. }) => content.len() as u64,
                _ => 0,
            })
            .sum();
        self.within_staged(staged_bytes, &first_path)?;

        // Stage, in commit order: a move's destination before its source goes.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (i, (a, b)) in of_op.iter().enumerate() {
            let targets = b.iter().chain([a]).filter(|t| staging[**t].is_some());
            order.extend(targets.map(|t| (i, *t)));
        }
        let mut slots: Vec<Slot<'_>> = Vec::with_capacity(order.len());
        for (op, t) in order {
            let resolved: &Resolved = targets[t];
            let fail = |e| self.fail(e, resolved).in_transaction(op, 0);
            let dir =
                resolved.parent.as_ref().map(AsFd::as_fd).ok_or_else(|| fail(FsError::NotRegularFile))?;
            let slot = match staging[t].take() {
                Some(Staging::Put { content, old }) => {
                    let place = match &old {
                        Some(meta) => Place::Replace(meta),
                        None => Place::Create,
                    };
                    let mut fill = |file: &mut File| {
                        file.write_all(&content).map_err(|e| write_failed(e, content.len() as u64))
                    };
                    let staged =
                        stage(dir, &mut fill, self.journal_scope(resolved), old.as_ref()).map_err(fail)?;
                    let ready = staged.ready(resolved.name(), place).map_err(fail)?;
                    let temp = ready.temp_name().to_owned();
                    let kind = if old.is_some() { Action::Replace } else { Action::Create };
                    Slot {
                        op,
                        target: t,
                        resolved,
                        dir,
                        kind,
                        content,
                        staged: Some(ready.staged),
                        ready: Some(ready),
                        moved: None,
                        old,
                        temp,
                        aside: None,
                    }
                }
                Some(Staging::Remove { old }) => {
                    let temp = sys::temp_name().map_err(|e| fail(FsError::CreateTemp(e)))?;
                    Slot {
                        op,
                        target: t,
                        resolved,
                        dir,
                        kind: Action::Remove,
                        content: Vec::new(),
                        staged: None,
                        ready: None,
                        moved: None,
                        old: Some(old),
                        temp,
                        aside: None,
                    }
                }
                Some(Staging::Rename { file, meta, from, old }) => {
                    let source: &Resolved = targets[from];
                    let from_dir = source
                        .parent
                        .as_ref()
                        .map(AsFd::as_fd)
                        .ok_or_else(|| fail(FsError::NotRegularFile))?;
                    // Unused unless an undo finds the source's name taken again: the moved file
                    // is kept beside it then, named after this.
                    let temp = sys::temp_name().map_err(|e| fail(FsError::CreateTemp(e)))?;
                    Slot {
                        op,
                        target: t,
                        resolved,
                        dir,
                        kind: Action::Rename,
                        content: Vec::new(),
                        staged: Some(meta),
                        ready: None,
                        moved: Some((file, from_dir, source)),
                        old,
                        temp,
                        aside: None,
                    }
                }
                None => return Err(fail(FsError::NotRegularFile)),
            };
            slots.push(slot);
        }

        // The intent record, durable before the first visible change.
        let record = Record {
            format: txn::FORMAT.to_owned(),
            owner: super::journal::owner(),
            slots: slots
                .iter()
                .map(|s| {
                    let origin = self.origin(s.resolved);
                    SlotRecord {
                        root: origin.root,
                        dir: origin.dir,
                        name: origin.name,
                        temp: txn::hex(s.temp.as_bytes()),
                        kind: s.kind,
                        staged: s.staged.as_ref().map(Stamp::of),
                        old: s.old.as_ref().map(Stamp::of),
                        from: s.moved.as_ref().map(|(_, _, source)| self.origin(source)),
                    }
                })
                .collect(),
        };
        let written =
            write_record(intents.as_fd(), &record).map_err(|e| self.fail(e, anchor).in_transaction(0, 0))?;
        let intent = Intent { dir: intents.as_fd(), name: written };

        #[cfg(any(test, feature = "fault-injection"))]
        let names: Vec<&std::ffi::OsStr> = targets.iter().map(|t| t.name()).collect();
        let mut failed = None;
        #[cfg(test)]
        let mut died = false;
        for (k, slot) in slots.iter_mut().enumerate() {
            #[cfg(any(test, feature = "fault-injection"))]
            if txn::fault_at(&names, "fsd-fault-txn-fail-", k + 1) {
                failed = Some((k, FsError::Rename(sys::Errno::IO)));
                break;
            }
            // The single write's hooks (`worker::fault`), at this target's own commit step.
            #[cfg(feature = "fault-injection")]
            {
                let name = slot.resolved.name();
                if name == "fsd-fault-io-error" {
                    failed = Some((k, FsError::Rename(sys::Errno::IO)));
                    break;
                }
                if name == "fsd-fault-hang-write" {
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(3600));
                    }
                }
            }
            if let Err(e) = self.commit_step(slot) {
                failed = Some((k, e));
                break;
            }
            #[cfg(feature = "fault-injection")]
            if txn::fault_at(&names, "fsd-fault-txn-pause-", k + 1) {
                // A window in which a test kills the worker, the network process or the daemon.
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            #[cfg(any(test, feature = "fault-injection"))]
            if txn::fault_at(&names, "fsd-fault-txn-die-", k + 1) {
                // As a SIGKILL would leave it: nothing undone, the record in place.
                #[cfg(not(test))]
                std::process::exit(137);
                #[cfg(test)]
                {
                    died = true;
                    break;
                }
            }
        }
        #[cfg(test)]
        if died {
            std::mem::forget(slots);
            std::mem::forget(intent);
            return Err(Failure::new(FsError::Aborted, first_path));
        }
        if let Some((k, error)) = failed {
            let mut undone_ops = std::collections::BTreeSet::new();
            let slots_op_failed = slots[k].op;
            for j in (0..k).rev() {
                let slot_record = &record.slots[j];
                let slot = &mut slots[j];
                let from = slot.moved.as_ref().map(|(_, from, _)| *from);
                txn::undo(slot.dir, from, slot_record);
                let _ = sys::sync_dir(slot.dir);
                if let Some(from) = from {
                    let _ = sys::sync_dir(from);
                }
                match slot.kind {
                    Action::Rename => {}
                    Action::Replace | Action::Create => {
                        if let Some(ready) = slot.ready.as_mut() {
                            // Only the transaction's own file or the one it replaced goes with
                            // the temporary name; an outside change an undo could not keep
                            // beside the name stays there.
                            let ours = |m: &Meta| {
                                [slot_record.staged, slot_record.old].iter().flatten().any(|s| s.is(m))
                            };
                            if sys::meta_at(slot.dir, ready.temp_name()).is_ok_and(|m| ours(&m)) {
                                ready.holds();
                            } else {
                                ready.placed();
                            }
                        }
                    }
                    Action::Remove => {
                        if let Some(entry) = slot.aside.take() {
                            entry.end();
                        }
                    }
                }
                // A move's destination undone when its source failed is the failing operation.
                if slot.op != slots_op_failed {
                    undone_ops.insert(slot.op);
                }
            }
            intent.remove();
            let slot = &slots[k];
            return Err(self.fail(error, slot.resolved).in_transaction(slot.op, undone_ops.len()));
        }

        // Committed: the directories synced once each, then the record goes, then the replaced
        // and removed files (a sweep finishes these should the worker die now).
        let mut synced: Vec<(u64, u64)> = Vec::new();
        for slot in &slots {
            let from = slot.moved.as_ref().map(|(_, from, _)| *from);
            for dir in std::iter::once(slot.dir).chain(from) {
                if let Ok(meta) = sys::meta(dir)
                    && !synced.contains(&(meta.dev, meta.ino))
                {
                    synced.push((meta.dev, meta.ino));
                    sys::sync_dir(dir)
                        .map_err(|e| self.fail(FsError::Sync(e), slot.resolved).in_transaction(slot.op, 0))?;
                }
            }
        }
        intent.remove();
        let mut versions: Vec<Option<String>> = (0..targets.len()).map(|_| None).collect();
        for slot in &mut slots {
            if let Some(ready) = &slot.ready {
                let meta = sys::meta(ready.file.as_fd())
                    .map_err(|e| self.fail(FsError::Metadata(e), slot.resolved).in_transaction(slot.op, 0))?;
                versions[slot.target] = Some(version::of_content(&ready.file, &meta, &slot.content));
            }
            if let Some((file, _, _)) = &slot.moved {
                let meta = sys::meta(file.as_fd())
                    .map_err(|e| self.fail(FsError::Metadata(e), slot.resolved).in_transaction(slot.op, 0))?;
                versions[slot.target] = Some(version::of_file(file, &meta));
            }
            if let (Some(entry), Some(old)) = (slot.aside.take(), slot.old.as_ref()) {
                if sys::meta_at(slot.dir, &slot.temp).is_ok_and(|m| Stamp::of(old).is(&m)) {
                    let _ = entry.retire(slot.dir, &slot.temp);
                }
                entry.end();
            }
        }
        drop(slots);
        for target in &targets {
            target.made.keep();
        }
        let version = |t: usize| versions[t].clone().unwrap_or_default();
        Ok(planned
            .into_iter()
            .map(|p| match p {
                Planned::Write { target, operation, change } => Outcome::WriteText {
                    target: self.target(targets[target]),
                    operation,
                    version: version(target),
                    change,
                },
                Planned::Edit { target, replacements, change } => Outcome::EditText {
                    target: self.target(targets[target]),
                    version: version(target),
                    replacements,
                    change,
                },
                Planned::Delete { target, change } => {
                    Outcome::DeleteFile { target: self.target(targets[target]), change }
                }
                Planned::Move { source, destination, source_change, destination_change } => {
                    Outcome::MoveFile {
                        source: self.target(targets[source]),
                        destination: self.target(targets[destination]),
                        destination_version: version(destination),
                        source_change,
                        destination_change,
                        source_removal_errno: None,
                    }
                }
            })
            .collect())
    }

    /// One step's visible change, by the single commit's own steps: a new file placed as
    /// `Ready::put` places it (undoable: no plain replace), a removal set aside as
    /// `moves::set_aside` does, kept there until the commit is done.
    fn commit_step<'r>(&'r self, slot: &mut Slot<'r>) -> Result<(), FsError> {
        let name = slot.resolved.name();
        match slot.kind {
            Action::Replace | Action::Create => {
                let Some(ready) = slot.ready.as_mut() else { return Err(FsError::NotRegularFile) };
                let place = match (&slot.kind, slot.old.as_ref()) {
                    (Action::Replace, Some(old)) => Place::Replace(old),
                    (Action::Replace, None) => return Err(FsError::NotRegularFile),
                    _ => Place::Create,
                };
                ready.put(name, place, Some(&slot.content), Undo::Needed)
            }
            Action::Remove => {
                let Some(old) = slot.old.as_ref() else { return Err(FsError::NotRegularFile) };
                let entry = self.journal_scope(slot.resolved).begin_removal(&slot.temp, name, old);
                match moves::set_aside(slot.dir, name, &slot.temp, old) {
                    Ok(()) => {
                        slot.aside = Some(entry);
                        Ok(())
                    }
                    Err(aside) => {
                        entry.end();
                        Err(aside.into_error())
                    }
                }
            }
            Action::Rename => {
                let (Some((_, from, source)), Some(staged)) = (slot.moved.as_ref(), slot.staged.as_ref())
                else {
                    return Err(FsError::NotRegularFile);
                };
                moves::move_checked(*from, source.name(), slot.dir, name, staged, slot.old.as_ref())
            }
        }
    }

    /// Where a resolved name is, as an intent record names it.
    fn origin(&self, resolved: &Resolved) -> Origin {
        Origin {
            root: txn::hex(self.roots[resolved.root].path.as_os_str().as_bytes()),
            dir: resolved.rel[..resolved.rel.len().saturating_sub(1)]
                .iter()
                .map(|c| txn::hex(c.as_bytes()))
                .collect(),
            name: txn::hex(resolved.name().as_bytes()),
        }
    }
}

#[cfg(test)]
thread_local! {
    /// What [`Backend::committed`] was told on this thread: each name, whether it held a file
    /// before and whether it holds one after.
    static REPORTED: std::cell::RefCell<Vec<(String, bool, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What [`Backend::committed`] was told on this thread since the last call.
#[cfg(test)]
pub(super) fn reported() -> Vec<(String, bool, bool)> {
    REPORTED.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

/// What a target's commit step needs, from the pipeline's check.
enum Staging {
    Put {
        content: Vec<u8>,
        old: Option<Meta>,
    },
    Remove {
        old: Meta,
    },
    /// The source file (at target `from`), renamed to this target, over `old` when it is there.
    Rename {
        file: File,
        meta: Meta,
        from: usize,
        old: Option<Meta>,
    },
}

/// Whether a rename takes a file from one target's directory to the other's: the same mount.
fn same_mount(a: &Resolved, b: &Resolved) -> bool {
    let mount =
        |r: &Resolved| r.parent.as_ref().and_then(|p| sys::meta(p.as_fd()).ok()).map(|m| (m.dev, m.mount));
    matches!((mount(a), mount(b)), (Some(a), Some(b)) if a == b)
}

/// What each operation decided at check time, for its outcome: the slots it owns and the
/// reply's parts known before the commit.
enum Planned {
    Write { target: usize, operation: WriteOperation, change: Change },
    Edit { target: usize, replacements: usize, change: Change },
    Delete { target: usize, change: Change },
    Move { source: usize, destination: usize, source_change: Change, destination_change: Change },
}

/// A slot while the transaction runs: one target's commit step.
struct Slot<'r> {
    op: usize,
    target: usize,
    resolved: &'r Resolved,
    dir: BorrowedFd<'r>,
    kind: Action,
    content: Vec<u8>,
    /// The file the step puts at the name (staged, or moved), as the record knows it.
    staged: Option<Meta>,
    ready: Option<Ready<'r>>,
    /// A rename's source: the file, its directory and its target.
    moved: Option<(File, BorrowedFd<'r>, &'r Resolved)>,
    old: Option<Meta>,
    /// The temporary name: the staged file's, or the one a removal moves the name to.
    temp: OsString,
    aside: Option<Entry<'r>>,
}

/// The intent record's file while the transaction runs.
struct Intent<'d> {
    dir: BorrowedFd<'d>,
    name: OsString,
}

impl Intent<'_> {
    fn remove(self) {
        if let Err(errno) = sys::remove(self.dir, &self.name) {
            tracing::warn!(%errno, "cannot remove a transaction's intent record");
        }
    }
}

/// Writes and syncs the record, then its directory: durable before the first rename.
fn write_record(dir: BorrowedFd<'_>, record: &Record) -> Result<OsString, FsError> {
    let random = sys::temp_name().map_err(FsError::CreateTemp)?;
    let suffix =
        random.as_bytes().strip_prefix(crate::op::TEMP_PREFIX.as_bytes()).unwrap_or(random.as_bytes());
    let mut name = txn::RECORD_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(suffix);
    let name = OsString::from_vec(name);
    let bytes = serde_json::to_vec(record).map_err(|e| FsError::WriteTemp(std::io::Error::other(e)))?;
    let mut file = sys::create_exclusive(dir, &name).map_err(FsError::CreateTemp)?;
    let written = file.write_all(&bytes).map_err(FsError::WriteTemp).and_then(|()| {
        sys::sync(file.as_fd()).map_err(FsError::Sync)?;
        sys::sync_dir(dir).map_err(FsError::Sync)
    });
    if let Err(e) = written {
        let _ = sys::remove(dir, &name);
        return Err(e);
    }
    Ok(name)
}
