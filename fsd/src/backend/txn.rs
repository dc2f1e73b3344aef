//! Transactions: an ordered list of guarded operations (write, edit, delete, move) over distinct
//! targets, checked together under all their locks and committed all-or-nothing, also across a
//! SIGKILL of the worker, the network process or the whole daemon (`docs/transactions.md`).
//!
//! The steps: every target is walked (plan); all their keys are locked in one request, which
//! the router takes together in one global order (`dispatch::locks`); every guard is checked and
//! every new content computed (check); each new file is staged beside its target, synced, under
//! a journaled temporary name (`write::stage`, `Staged::ready`); the intent record, naming every
//! slot by its directory, its name, its temporary name and the identities of the staged and the
//! replaced file, is written to the state directory and synced with the directory; then the
//! commit renames in order: a replace exchanges (`RENAME_EXCHANGE`, so the replaced file stays at
//! the temporary name), a creation renames without replacing, a removal renames the name aside.
//! A step that fails undoes the ones before it, newest first, before the reply; on success the
//! directories are synced, the record removed and the replaced files with it.
//!
//! Recovery ([`recover`]) reads the records the supervisor finds at start (before any worker and
//! before the start-up sweep) and after a worker died (before that worker's sweep): a record
//! whose every slot committed is finished (the sweep removes the replaced files); any other is
//! rolled back, newest slot first. A slot is undone only where its name still holds the file the
//! transaction put there, unchanged ([`undo`]): an outside save since is newer and stays; a
//! removed file whose name was taken again is kept beside it (`<name>.kept-<8 hex>`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::journal::Entry;
use super::pipeline::{self, Mutation, Placement, Plan};
use super::resolve::Resolved;
use super::write::{Place, Ready, stage, write_failed};
use super::{Backend, read, version};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{Change, Mode, Outcome, RootSpec, TxnOp, WriteOperation};
use crate::sys::{self, Errno, Kind, Meta, RenameHow};

/// The state directory's subdirectory of intent records.
pub const INTENTS: &str = "txn";
const FORMAT: &str = "fsd-txn-1";
const RECORD_PREFIX: &str = "txn-";

/// What a slot's commit step does at its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Action {
    /// The staged file and the existing one exchange names.
    Replace,
    /// The staged file takes a free name.
    Create,
    /// The existing file goes to the temporary name.
    Remove,
}

/// A file as the record knows it: the identity and content stamp `Meta::same_content` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, u32),
}

impl Stamp {
    fn of(meta: &Meta) -> Stamp {
        Stamp { dev: meta.dev, ino: meta.ino, size: meta.size, mtime: meta.mtime }
    }

    fn is(&self, meta: &Meta) -> bool {
        meta.kind == Kind::File && Stamp::of(meta) == *self
    }
}

/// One slot of an intent record. Names are hex (any bytes but `/`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SlotRecord {
    /// The root's absolute path and the directories below it, hex.
    root: String,
    dir: Vec<String>,
    name: String,
    temp: String,
    kind: Action,
    staged: Option<Stamp>,
    old: Option<Stamp>,
}

/// The intent record: written and synced before the first visible change.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    format: String,
    /// The journal owner of the worker that commits (`<instance> <pid>`).
    owner: String,
    slots: Vec<SlotRecord>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<OsString> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect();
    bytes.map(OsString::from_vec)
}

/// A name that stays in its directory.
fn component(text: &str) -> Option<OsString> {
    unhex(text).filter(|n| !n.is_empty() && n != "." && n != ".." && !n.as_bytes().contains(&b'/'))
}

/// Undoes one slot's commit in `dir`, where its name still holds what the transaction put there
/// (else an outside change since is newer, and stays). Returns whether it restored anything.
fn undo(dir: BorrowedFd<'_>, slot: &SlotRecord) -> bool {
    let (Some(name), Some(temp)) = (component(&slot.name), component(&slot.temp)) else { return false };
    let holds = |at: &OsStr, stamp: Option<Stamp>| {
        stamp.is_some_and(|s| sys::meta_at(dir, at).is_ok_and(|m| s.is(&m)))
    };
    match slot.kind {
        // The replaced file is at the temporary name: exchanged back, the staged one goes there.
        Action::Replace if holds(&name, slot.staged) && holds(&temp, slot.old) => {
            sys::rename(dir, &temp, dir, &name, RenameHow::Exchange).is_ok()
        }
        Action::Create if holds(&name, slot.staged) => {
            sys::rename(dir, &name, dir, &temp, RenameHow::NoReplace).is_ok()
        }
        Action::Remove if holds(&temp, slot.old) => {
            match sys::rename(dir, &temp, dir, &name, RenameHow::NoReplace) {
                Ok(()) => true,
                Err(errno) => {
                    // The name was taken again since: the removed file is kept beside it.
                    let kept = super::moves::keep_aside(dir, &name, &temp);
                    tracing::warn!(?kept, ?name, %errno, "a file a rolled-back transaction had removed is kept at another name: its name was taken again");
                    true
                }
            }
        }
        _ => false,
    }
}

/// Whether a slot's commit step happened (by what its names hold now).
fn committed(dir: BorrowedFd<'_>, slot: &SlotRecord) -> bool {
    let (Some(name), Some(temp)) = (component(&slot.name), component(&slot.temp)) else { return false };
    let holds = |at: &OsStr, stamp: Option<Stamp>| {
        stamp.is_some_and(|s| sys::meta_at(dir, at).is_ok_and(|m| s.is(&m)))
    };
    match slot.kind {
        Action::Replace | Action::Create => !holds(&temp, slot.staged),
        Action::Remove => !holds(&name, slot.old),
    }
}

/// The directory of a slot, reached from its root one component at a time, no link followed.
/// The root must be one of `roots` (the writable roots, canonical): the record was written by a
/// worker, and a forged one must not send the privileged recovery anywhere a worker cannot write.
fn open_slot_dir(slot: &SlotRecord, roots: &[PathBuf]) -> Option<OwnedFd> {
    let root = unhex(&slot.root)?;
    if !roots.iter().any(|r| r.as_os_str() == root) {
        tracing::warn!(root = ?root, "an intent record names a directory outside the writable roots; left alone");
        return None;
    }
    let mut fd = sys::open_dir(Path::new(&root)).ok()?;
    for part in &slot.dir {
        let next = sys::open_component(fd.as_fd(), &component(part)?).ok()?;
        if !sys::meta(next.as_fd()).is_ok_and(|m| m.kind == Kind::Directory) {
            return None;
        }
        fd = next;
    }
    Some(fd)
}

/// The most of one intent record recovery reads: far above what the largest transaction's record
/// takes (1000 operations of the longest paths: about 17 MiB), and a bound on what the supervisor
/// holds for a file a worker wrote.
const MAX_RECORD_BYTES: u64 = 256 << 20;

/// An intent record, read as the worker's writing it is: no link followed, no FIFO or device
/// waited on, at most [`MAX_RECORD_BYTES`]; `None` when it is not a whole record.
fn read_record(path: &Path) -> Option<Record> {
    use std::io::Read as _;
    let dir = sys::open_dir(path.parent()?).ok()?;
    let file = sys::open_read(dir.as_fd(), path.file_name()?).ok()?;
    if sys::meta(file.as_fd()).ok()?.kind != Kind::File {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What recovery did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records found.
    pub records: usize,
    /// Transactions whose every step had committed: finished.
    pub finished: usize,
    /// Transactions rolled back, and the steps undone in them.
    pub rolled_back: usize,
    pub undone: usize,
    /// Records that did not parse (written only in part: nothing had been renamed yet).
    pub unreadable: usize,
}

/// Recovers the transactions whose intent records are in `state_dir` and whose owner `matches`
/// (the supervisor's: at start every record, after a worker died that worker's), touching
/// nothing outside the writable ones of `roots`. Each record is removed once settled, and the
/// directory synced.
pub fn recover(state_dir: &Path, roots: &[RootSpec], matches: impl Fn(&str) -> bool) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    let roots: Vec<PathBuf> =
        roots.iter().filter(|r| r.writable).filter_map(|r| std::fs::canonicalize(&r.path).ok()).collect();
    let dir = state_dir.join(INTENTS);
    let Ok(entries) = std::fs::read_dir(&dir) else { return report };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.as_bytes().starts_with(RECORD_PREFIX.as_bytes())))
        .collect();
    paths.sort();
    for path in paths {
        let record = read_record(&path);
        let record = match record {
            Some(record) if record.format == FORMAT => record,
            _ => {
                // A record that did not parse was never complete, so nothing was renamed for it;
                // only a start-up recovery (`matches` everything) may judge whose it was.
                if matches("") {
                    report.records += 1;
                    report.unreadable += 1;
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
        };
        if !matches(&record.owner) {
            continue;
        }
        report.records += 1;
        // Test hook: a transaction naming `fsd-fault-txn-slow-recovery` is recovered a second
        // late, a window in which a call on its targets would find it half-committed were they
        // not kept locked.
        #[cfg(feature = "fault-injection")]
        if record.slots.iter().any(|s| component(&s.name).is_some_and(|n| n == "fsd-fault-txn-slow-recovery"))
        {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let dirs: Vec<Option<OwnedFd>> =
            record.slots.iter().map(|slot| open_slot_dir(slot, &roots)).collect();
        let all = record
            .slots
            .iter()
            .zip(&dirs)
            .all(|(slot, dir)| dir.as_ref().is_some_and(|d| committed(d.as_fd(), slot)));
        if all {
            report.finished += 1;
        } else {
            report.rolled_back += 1;
            for (slot, dir) in record.slots.iter().zip(&dirs).rev() {
                if let Some(dir) = dir
                    && undo(dir.as_fd(), slot)
                {
                    report.undone += 1;
                    let _ = sys::sync_dir(dir.as_fd());
                }
            }
        }
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a settled intent record");
        }
    }
    if report.records > 0
        && let Ok(fd) = sys::open_dir(&dir)
    {
        let _ = sys::sync_dir(fd.as_fd());
    }
    report
}

/// Test hooks (`fault-injection`, and unit tests): a transaction that names a file
/// `fsd-fault-txn-die-<k>` exits its worker right after commit step `k` (as a SIGKILL would
/// leave it: nothing undone; in a unit test the call returns `FS_ABORTED` having left
/// everything as the exit would); one naming `fsd-fault-txn-fail-<k>` fails step `k` with EIO
/// before making it, and undoes the steps before it; one naming `fsd-fault-txn-pause-<k>`
/// pauses a second after step `k` (a window for a test to kill a process in). The single write's
/// `fsd-fault-io-error` and `fsd-fault-hang-write` act at their own target's step.
#[cfg(any(test, feature = "fault-injection"))]
fn fault_at(names: &[&OsStr], prefix: &str, step: usize) -> bool {
    let wanted = format!("{prefix}{step}");
    names.iter().any(|n| n.as_bytes() == wanted.as_bytes())
}

/// What a target's commit step needs, from the pipeline's check.
enum Staging {
    Put { content: Vec<u8>, old: Option<Meta> },
    Remove { old: Meta },
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
    ready: Option<Ready<'r>>,
    old: Option<Meta>,
    /// The temporary name: the staged file's, or the one a removal moves the name to.
    temp: OsString,
    aside: Option<Entry<'r>>,
}

impl Backend {
    /// Refuses more staged bytes than a transaction may carry.
    fn within_staged(&self, size: u64, path: &str) -> Result<(), Failure> {
        let limit = self.limits.max_transaction_bytes;
        if size > limit {
            return Err(Failure::new(FsError::TooLarge { size, limit }, path));
        }
        Ok(())
    }

    /// Runs a transaction (see the module's comment). On failure nothing it changed stays
    /// changed, and the failure names the operation and how many were undone.
    pub(super) fn transact(&self, mode: Mode, ops: Vec<TxnOp>) -> Result<Outcome, Failure> {
        let first = ops.first().map(TxnOp::path).unwrap_or_default().to_owned();
        let limit = self.limits.max_transaction_operations;
        if ops.len() > limit {
            let error = FsError::TooLarge { size: ops.len() as u64, limit: limit as u64 };
            return Err(Failure::new(error, first));
        }
        let sent: u64 = ops
            .iter()
            .map(|op| match op {
                TxnOp::Write { content, .. } | TxnOp::Move { content: Some(content), .. } => {
                    content.len() as u64
                }
                _ => 0,
            })
            .sum();
        self.within_staged(sent, &first)?;
        let Some(intents) = self.intents.as_ref() else {
            return Err(Failure::new(FsError::Denied(Denial::NoStateDir), first));
        };
        let at = |op: usize| move |f: Failure| f.in_transaction(op, 0);

        // Plan: each operation as the pipeline plans the single call (walk, binding,
        // read_denied, the fence of a change); each target named once.
        let mutations: Vec<Mutation<'_>> = ops.iter().map(mutation).collect();
        let mut plans: Vec<Plan<'_>> = Vec::with_capacity(ops.len());
        for (i, m) in mutations.iter().enumerate() {
            let plan = self.plan(mode, *m, false).map_err(at(i))?;
            for key in plan.keys() {
                if plans.iter().any(|p| p.keys().any(|k| k == key)) {
                    let failure = self.fail(FsError::Denied(Denial::RepeatedTarget), &plan.target.resolved);
                    return Err(failure.in_transaction(i, 0));
                }
            }
            plans.push(plan);
        }
        let Some(first_plan) = plans.first() else {
            return Ok(Outcome::Transact { outcomes: Vec::new() });
        };
        // Every target of every operation, a move's source before its destination.
        let mut targets: Vec<&Resolved> = Vec::new();
        let mut of_op: Vec<(usize, Option<usize>)> = Vec::new();
        for plan in &plans {
            let a = targets.len();
            targets.push(&plan.target.resolved);
            let b = plan.destination.as_ref().map(|d| {
                targets.push(&d.resolved);
                a + 1
            });
            of_op.push((a, b));
        }
        let anchor = &first_plan.target.resolved;
        // The pipeline's one lock site: every key in one request, taken in one global order.
        let refs: Vec<&Plan<'_>> = plans.iter().collect();
        let _held = self.lock_plans(&refs)?;

        // Check: every operation as the pipeline checks the single call, under the locks.
        let mut staging: Vec<Option<Staging>> = (0..targets.len()).map(|_| None).collect();
        let mut planned = Vec::with_capacity(ops.len());
        let single = plans.len() == 1 && !matches!(first_plan.mutation, Mutation::Move { .. });
        // The change record: every target's before-image, the transaction one change.
        let mut pending =
            if single { None } else { self.record_begin().map_err(|e| self.fail(e, anchor))? };
        for (i, plan) in plans.iter().enumerate() {
            let (a, b) = of_op[i];
            let checked = self.check(plan).map_err(at(i))?;
            // One write, edit or delete changes one name by one rename or unlink: the pipeline's
            // own commit is all-or-nothing already, without an intent record to sync.
            if single {
                let outcome = self.commit(checked, None).map_err(at(i))?;
                return Ok(Outcome::Transact { outcomes: vec![outcome] });
            }
            self.record_images(&mut pending, &checked).map_err(|f| f.in_transaction(i, 0))?;
            let fail = |e, t: usize| self.fail(e, targets[t]).in_transaction(i, 0);
            match (checked.decided, plan.mutation) {
                (pipeline::Decided::Put { content, placement, change, replacements }, _) => {
                    let old = match placement {
                        Placement::Replace(meta) => Some(meta),
                        Placement::Create | Placement::CreateOrReplace => None,
                    };
                    let operation =
                        if old.is_some() { WriteOperation::Update } else { WriteOperation::Create };
                    staging[a] = Some(Staging::Put { content: content.into_bytes(), old });
                    planned.push(match replacements {
                        Some(replacements) => Planned::Edit { target: a, replacements, change },
                        None => Planned::Write { target: a, operation, change },
                    });
                }
                (pipeline::Decided::Delete { meta, change, .. }, _) => {
                    staging[a] = Some(Staging::Remove { old: meta });
                    planned.push(Planned::Delete { target: a, change });
                }
                (
                    pipeline::Decided::Move {
                        source: (file, meta),
                        existing,
                        source_text,
                        destination_before,
                        ..
                    },
                    Mutation::Move { content, .. },
                ) => {
                    let d = b.ok_or_else(|| fail(FsError::NotRegularFile, a))?;
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
                    let destination_change = match destination_before {
                        Some(before) => self.change(before.as_deref(), before.is_some(), after.as_deref()),
                        None => self.change(None, true, after.as_deref()),
                    };
                    staging[d] = Some(Staging::Put { content: bytes, old: existing });
                    staging[a] = Some(Staging::Remove { old: meta });
                    planned.push(Planned::Move {
                        source: a,
                        destination: d,
                        source_change: pipeline::source_change(source_text),
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
        self.within_staged(staged_bytes, &first)?;

        // Stage, in commit order: a move's destination before its source goes.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (i, (a, b)) in of_op.iter().enumerate() {
            match b {
                Some(b) => order.extend([(i, *b), (i, *a)]),
                None => order.push((i, *a)),
            }
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
                        ready: Some(ready),
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
                        ready: None,
                        old: Some(old),
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
            format: FORMAT.to_owned(),
            owner: super::journal::owner(),
            slots: slots
                .iter()
                .map(|s| SlotRecord {
                    root: hex(self.roots[s.resolved.root].path.as_os_str().as_bytes()),
                    dir: s.resolved.rel[..s.resolved.rel.len().saturating_sub(1)]
                        .iter()
                        .map(|c| hex(c.as_bytes()))
                        .collect(),
                    name: hex(s.resolved.name().as_bytes()),
                    temp: hex(s.temp.as_bytes()),
                    kind: s.kind,
                    staged: s.ready.as_ref().map(|r| Stamp::of(&r.staged)),
                    old: s.old.as_ref().map(Stamp::of),
                })
                .collect(),
        };
        let written =
            write_record(intents.as_fd(), &record).map_err(|e| self.fail(e, anchor).in_transaction(0, 0))?;
        let intent = Intent { dir: intents.as_fd(), name: written };

        #[cfg(any(test, feature = "fault-injection"))]
        let names: Vec<&OsStr> = targets.iter().map(|t| t.name()).collect();
        let mut failed = None;
        #[cfg(test)]
        let mut died = false;
        for (k, slot) in slots.iter_mut().enumerate() {
            #[cfg(any(test, feature = "fault-injection"))]
            if fault_at(&names, "fsd-fault-txn-fail-", k + 1) {
                failed = Some((k, FsError::Rename(Errno::IO)));
                break;
            }
            // The single write's hooks (`worker::fault`), at this target's own commit step.
            #[cfg(feature = "fault-injection")]
            {
                let name = slot.resolved.name();
                if name == "fsd-fault-io-error" {
                    failed = Some((k, FsError::Rename(Errno::IO)));
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
            if fault_at(&names, "fsd-fault-txn-pause-", k + 1) {
                // A window in which a test kills the worker, the network process or the daemon.
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            #[cfg(any(test, feature = "fault-injection"))]
            if fault_at(&names, "fsd-fault-txn-die-", k + 1) {
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
            return Err(Failure::new(FsError::Aborted, first));
        }
        if let Some((k, error)) = failed {
            let mut undone_ops = std::collections::BTreeSet::new();
            let slots_op_failed = slots[k].op;
            for j in (0..k).rev() {
                let slot_record = &record.slots[j];
                let slot = &mut slots[j];
                undo(slot.dir, slot_record);
                let _ = sys::sync_dir(slot.dir);
                match slot.kind {
                    Action::Replace | Action::Create => {
                        if let Some(ready) = slot.ready.as_mut() {
                            ready.holds();
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
            if let Ok(meta) = sys::meta(slot.dir)
                && !synced.contains(&(meta.dev, meta.ino))
            {
                synced.push((meta.dev, meta.ino));
                sys::sync_dir(slot.dir)
                    .map_err(|e| self.fail(FsError::Sync(e), slot.resolved).in_transaction(slot.op, 0))?;
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
            if let (Some(entry), Some(old)) = (slot.aside.take(), slot.old.as_ref()) {
                if sys::meta_at(slot.dir, &slot.temp).is_ok_and(|m| Stamp::of(old).is(&m)) {
                    let _ = sys::remove(slot.dir, &slot.temp);
                }
                entry.end();
            }
        }
        drop(slots);
        for target in &targets {
            target.made.keep();
        }
        let version = |t: usize| versions[t].clone().unwrap_or_default();
        let outcomes = planned
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
            .collect();
        self.record_after(pending, crate::op::Op::Transact.name());
        Ok(Outcome::Transact { outcomes })
    }

    /// One slot's visible change.
    fn commit_step<'r>(&'r self, slot: &mut Slot<'r>) -> Result<(), FsError> {
        let dir = slot.dir;
        let name = slot.resolved.name();
        match slot.kind {
            Action::Replace => {
                let (Some(ready), Some(old)) = (slot.ready.as_mut(), slot.old.as_ref()) else {
                    return Err(FsError::NotRegularFile);
                };
                sys::rename(dir, &slot.temp, dir, name, RenameHow::Exchange).map_err(FsError::Rename)?;
                ready.holds();
                // What came out must be the file checked: an outside save since is put back.
                if !sys::meta_at(dir, &slot.temp).is_ok_and(|m| m.same_content(old)) {
                    return Err(ready.swap_back(name, &slot.content));
                }
                Ok(())
            }
            Action::Create => {
                let Some(ready) = slot.ready.as_mut() else { return Err(FsError::NotRegularFile) };
                match sys::rename(dir, &slot.temp, dir, name, RenameHow::NoReplace) {
                    Ok(()) => {
                        ready.placed();
                        Ok(())
                    }
                    Err(Errno::EXIST) => Err(FsError::AlreadyExists),
                    Err(errno) => Err(FsError::Rename(errno)),
                }
            }
            Action::Remove => {
                let Some(old) = slot.old.as_ref() else { return Err(FsError::NotRegularFile) };
                let entry = self.journal_scope(slot.resolved).begin_removal(&slot.temp, name, old);
                match sys::rename(dir, name, dir, &slot.temp, RenameHow::NoReplace) {
                    Ok(()) => {}
                    Err(errno) => {
                        entry.end();
                        return Err(match errno {
                            Errno::NOENT => FsError::Stale(StaleReason::Gone),
                            errno => FsError::Remove(errno),
                        });
                    }
                }
                if sys::meta_at(dir, &slot.temp).is_ok_and(|m| m.kind == Kind::File && m.same_content(old)) {
                    slot.aside = Some(entry);
                    return Ok(());
                }
                // An outside save was moved: it goes back (beside its name, should that be taken).
                let error = match sys::rename(dir, &slot.temp, dir, name, RenameHow::NoReplace) {
                    Ok(()) => FsError::Stale(StaleReason::ChangedWhileRemoving),
                    Err(_) => {
                        let kept = super::moves::keep_aside(dir, name, &slot.temp);
                        FsError::KeptAside { reason: StaleReason::ChangedWhileRemoving, kept: kept.into() }
                    }
                };
                entry.end();
                Err(error)
            }
        }
    }
}

/// The pipeline's view of one operation: the single call's change.
fn mutation(op: &TxnOp) -> Mutation<'_> {
    match op {
        TxnOp::Write { path, content, guard, match_style } => {
            Mutation::Write { path, content, guard: guard.as_ref(), match_style: *match_style }
        }
        TxnOp::Edit { path, old, new, replace_all, guard } => {
            Mutation::Edit { path, old, new, replace_all: *replace_all, guard: guard.as_ref() }
        }
        TxnOp::Delete { path, guard } => Mutation::Delete { path, guard: guard.as_ref() },
        TxnOp::Move { source, destination, source_guard, destination_guard, content } => Mutation::Move {
            source,
            destination,
            source_guard: source_guard.as_ref(),
            destination_guard: destination_guard.as_ref(),
            content: content.as_deref(),
        },
    }
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
    let mut name = RECORD_PREFIX.as_bytes().to_vec();
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::backend::{Fence, Guard, Locking};
    use crate::op::{EditGuard, Info, Limits, Request, RootSpec, WriteGuard};

    /// The unit tests' locks: one call at a time, so nothing to take.
    #[derive(Debug)]
    struct Uncontended;

    impl Locking for Uncontended {
        fn lock(&self, _: &[&str]) -> Result<Guard, FsError> {
            Ok(Guard::remote())
        }
    }

    struct Fixture {
        root: tempfile::TempDir,
        state: tempfile::TempDir,
        backend: Backend,
    }

    fn fixture() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join(INTENTS)).unwrap();
        let fence = Fence {
            protected: &[],
            read_denied: &[],
            submounts: &[],
            allow_backslash: false,
            host_root: false,
        };
        let spec = RootSpec { path: root.path().to_path_buf(), writable: true };
        let backend = Backend::new(&[spec], &fence, Limits::default(), Arc::new(Uncontended))
            .unwrap()
            .with_intents(sys::open_dir(&state.path().join(INTENTS)).ok());
        Fixture { root, state, backend }
    }

    impl Fixture {
        fn roots(&self) -> [RootSpec; 1] {
            [RootSpec { path: self.root.path().to_path_buf(), writable: true }]
        }

        fn path(&self, name: &str) -> String {
            format!("{}/{name}", self.root.path().canonicalize().unwrap().display())
        }

        /// Every file below the root by its relative path, and every name left over by fsd
        /// (temporary files, intent records).
        fn tree(&self) -> BTreeMap<String, Vec<u8>> {
            fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
                for entry in std::fs::read_dir(dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        walk(&path, base, out);
                    } else {
                        let rel = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                        out.insert(rel, std::fs::read(&path).unwrap());
                    }
                }
            }
            let mut out = BTreeMap::new();
            walk(self.root.path(), self.root.path(), &mut out);
            out
        }

        fn records(&self) -> usize {
            std::fs::read_dir(self.state.path().join(INTENTS)).unwrap().count()
        }

        fn version(&self, name: &str) -> Option<String> {
            let stat = Request::Stat { path: self.path(name), no_follow: true };
            match self.backend.handle(Mode::WorkspaceWrite, stat) {
                Ok(Outcome::Stat { info: Some(Info { version, .. }), .. }) => Some(version),
                _ => None,
            }
        }

        fn transact(&self, ops: Vec<TxnOp>) -> Result<Outcome, Failure> {
            self.backend.handle(Mode::WorkspaceWrite, Request::Transact { ops })
        }
    }

    /// A guard as the generator picks it: none, the version the file has, or a version it has not.
    #[derive(Debug, Clone, Copy)]
    enum Pick {
        None,
        Current,
        Stale,
    }

    /// One operation as generated, over a few names that overlap between operations.
    #[derive(Debug, Clone)]
    enum Gen {
        Write {
            name: usize,
            content: String,
            guard: Pick,
            create_only: bool,
        },
        Edit {
            name: usize,
            old: String,
            new: String,
            guard: Pick,
        },
        Delete {
            name: usize,
            guard: Pick,
        },
        Move {
            from: usize,
            to: usize,
            guard: Pick,
            to_guard: Pick,
        },
        /// A write of `fsd-fault-txn-fail-<k>`: commit step `k` fails.
        Fail {
            step: usize,
        },
    }

    const NAMES: [&str; 5] = ["a", "b", "c", "d/e", "d/f"];

    fn content() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["x", "y", "xy", "yx", "xx", "hello\n", ""]).prop_map(str::to_owned)
    }

    fn pick() -> impl Strategy<Value = Pick> {
        prop_oneof![Just(Pick::None), Just(Pick::Current), Just(Pick::Current), Just(Pick::Stale)]
    }

    fn operation() -> impl Strategy<Value = Gen> {
        let name = 0..NAMES.len();
        prop_oneof![
            3 => (name.clone(), content(), pick(), any::<bool>())
                .prop_map(|(name, content, guard, create_only)| Gen::Write { name, content, guard, create_only }),
            2 => (name.clone(), prop::sample::select(vec!["x", "y", "hello"]), content(), pick())
                .prop_map(|(name, old, new, guard)| Gen::Edit { name, old: old.to_owned(), new, guard }),
            2 => (name.clone(), pick()).prop_map(|(name, guard)| Gen::Delete { name, guard }),
            2 => (name.clone(), name, pick(), pick()).prop_map(|(from, to, guard, to_guard)| Gen::Move { from, to, guard, to_guard }),
            1 => (1usize..5).prop_map(|step| Gen::Fail { step }),
        ]
    }

    /// The model: the tree after a transaction that commits, or `None`: it fails, changing
    /// nothing.
    fn model(before: &BTreeMap<String, Vec<u8>>, ops: &[Gen]) -> Option<BTreeMap<String, Vec<u8>>> {
        let mut after = before.clone();
        let mut named = std::collections::BTreeSet::new();
        let mut steps = 0usize;
        let mut fail_at = None;
        let guard_holds = |pick: Pick, present: bool| match pick {
            Pick::None => true,
            Pick::Current => present,
            Pick::Stale => false,
        };
        for op in ops {
            let ok = match op {
                Gen::Write { name, content, guard, create_only } => {
                    let n = NAMES[*name].to_owned();
                    let present = after.contains_key(&n);
                    let ok = named.insert(n.clone())
                        && match (guard, create_only) {
                            (Pick::None, true) => !present,
                            (Pick::None, false) => true,
                            (pick, _) => guard_holds(*pick, present),
                        };
                    steps += 1;
                    after.insert(n, content.clone().into_bytes());
                    ok
                }
                Gen::Edit { name, old, new, guard } => {
                    let n = NAMES[*name].to_owned();
                    let fresh = named.insert(n.clone());
                    let text = after.get(&n).map(|b| String::from_utf8(b.clone()).unwrap());
                    steps += 1;
                    match text {
                        Some(text)
                            if fresh
                                && guard_holds(*guard, true)
                                && text.matches(old.as_str()).count() == 1 =>
                        {
                            after.insert(n, text.replacen(old.as_str(), new, 1).into_bytes());
                            true
                        }
                        _ => false,
                    }
                }
                Gen::Delete { name, guard } => {
                    let n = NAMES[*name].to_owned();
                    steps += 1;
                    named.insert(n.clone()) && guard_holds(*guard, true) && after.remove(&n).is_some()
                }
                Gen::Move { from, to, guard, to_guard } => {
                    let (f, t) = (NAMES[*from].to_owned(), NAMES[*to].to_owned());
                    steps += 2;
                    let fresh = named.insert(f.clone()) & named.insert(t.clone());
                    let dst_present = after.contains_key(&t);
                    let dst_ok = match to_guard {
                        Pick::None => true,
                        Pick::Current => dst_present,
                        Pick::Stale => false,
                    };
                    if !fresh || f == t || !guard_holds(*guard, true) || !dst_ok {
                        false
                    } else {
                        match after.remove(&f) {
                            Some(bytes) => {
                                after.insert(t, bytes);
                                true
                            }
                            None => false,
                        }
                    }
                }
                Gen::Fail { step } => {
                    let n = format!("fsd-fault-txn-fail-{step}");
                    let fresh = named.insert(n.clone());
                    // The first step any hook names is where the commit fails.
                    fail_at = Some(fail_at.map_or(*step, |at: usize| at.min(*step)));
                    steps += 1;
                    after.insert(n, Vec::new());
                    fresh
                }
            };
            if !ok {
                return None;
            }
        }
        // An injected failure fires only at a step the commit reaches, and only in a commit of
        // the transaction's own (one write, edit or delete is the pipeline's single commit).
        let single = ops.len() == 1 && !matches!(ops[0], Gen::Move { .. });
        match fail_at {
            Some(step) if step <= steps && !single => None,
            _ => Some(after),
        }
    }

    fn to_ops(fixture: &Fixture, ops: &[Gen]) -> Vec<TxnOp> {
        let guard = |pick: Pick, name: &str| match pick {
            Pick::None => None,
            Pick::Current => Some(EditGuard {
                version: fixture.version(name).unwrap_or_else(|| "0:0".to_owned()),
                target_key: None,
            }),
            Pick::Stale => Some(EditGuard { version: "1:1".to_owned(), target_key: None }),
        };
        let write_guard = |pick: Pick, create_only: bool, name: &str| match (pick, create_only) {
            (Pick::None, true) => Some(WriteGuard::CreateIfAbsent),
            (Pick::None, false) => None,
            (pick, _) => guard(pick, name)
                .map(|g| WriteGuard::ReplaceIfVersion { version: g.version, target_key: None }),
        };
        ops.iter()
            .map(|op| match op {
                Gen::Write { name, content, guard: pick, create_only } => TxnOp::Write {
                    path: fixture.path(NAMES[*name]),
                    content: content.clone(),
                    guard: write_guard(*pick, *create_only, NAMES[*name]),
                    match_style: false,
                },
                Gen::Edit { name, old, new, guard: pick } => TxnOp::Edit {
                    path: fixture.path(NAMES[*name]),
                    old: old.clone(),
                    new: new.clone(),
                    replace_all: false,
                    guard: guard(*pick, NAMES[*name]),
                },
                Gen::Delete { name, guard: pick } => {
                    TxnOp::Delete { path: fixture.path(NAMES[*name]), guard: guard(*pick, NAMES[*name]) }
                }
                Gen::Move { from, to, guard: pick, to_guard } => TxnOp::Move {
                    source: fixture.path(NAMES[*from]),
                    destination: fixture.path(NAMES[*to]),
                    source_guard: guard(*pick, NAMES[*from]),
                    destination_guard: write_guard(*to_guard, false, NAMES[*to]),
                    content: None,
                },
                Gen::Fail { step } => TxnOp::Write {
                    path: fixture.path(&format!("fsd-fault-txn-fail-{step}")),
                    content: String::new(),
                    guard: None,
                    match_style: false,
                },
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Random transactions over overlapping targets, one after another on one tree: after
        /// each, the tree is the model's all-or-nothing result, with nothing of fsd's left.
        #[test]
        fn transactions_are_all_or_nothing(batches in prop::collection::vec(prop::collection::vec(operation(), 1..6), 1..8)) {
            let fixture = fixture();
            for ops in &batches {
                let before = fixture.tree();
                let expected = model(&before, ops);
                let result = fixture.transact(to_ops(&fixture, ops));
                let after = fixture.tree();
                prop_assert_eq!(result.is_ok(), expected.is_some(), "ops {:?} gave {:?}", ops, result.as_ref().err());
                prop_assert_eq!(&after, expected.as_ref().unwrap_or(&before), "ops {:?}", ops);
                prop_assert_eq!(fixture.records(), 0);
                if let Err(failure) = &result {
                    prop_assert!(failure.operation.is_some(), "{:?}", failure);
                }
            }
        }
    }

    /// A worker killed after any commit step of a transaction that replaces, creates, deletes
    /// and moves: recovery and the sweep leave the tree as it was before, with no temporary
    /// file and no record.
    #[test]
    fn recovery_rolls_back_a_transaction_killed_at_every_step() {
        for step in 1..=5 {
            let fixture = fixture();
            std::fs::write(fixture.root.path().join("a"), "old a").unwrap();
            std::fs::write(fixture.root.path().join("gone"), "deleted").unwrap();
            std::fs::write(fixture.root.path().join("src"), "moved").unwrap();
            let before = fixture.tree();
            let ops = vec![
                TxnOp::Write {
                    path: fixture.path("a"),
                    content: "new a".into(),
                    guard: None,
                    match_style: false,
                },
                TxnOp::Write {
                    path: fixture.path("new"),
                    content: "created".into(),
                    guard: None,
                    match_style: false,
                },
                TxnOp::Delete { path: fixture.path("gone"), guard: None },
                TxnOp::Move {
                    source: fixture.path("src"),
                    destination: fixture.path("dst"),
                    source_guard: None,
                    destination_guard: None,
                    content: None,
                },
                TxnOp::Write {
                    path: fixture.path(&format!("fsd-fault-txn-die-{step}")),
                    content: String::new(),
                    guard: None,
                    match_style: false,
                },
            ];
            let died = fixture.transact(ops);
            assert!(matches!(died, Err(Failure { error: FsError::Aborted, .. })), "{step}: {died:?}");
            assert_eq!(fixture.records(), 1, "{step}");
            let report = recover(fixture.state.path(), &fixture.roots(), |_| true);
            assert_eq!((report.records, report.rolled_back, report.undone), (1, 1, step), "{step}");
            drop(super::super::journal::Sweeper::start(&[RootSpec {
                path: fixture.root.path().to_path_buf(),
                writable: true,
            }]));
            assert_eq!(fixture.tree(), before, "{step}");
            assert_eq!(fixture.records(), 0, "{step}");
        }
    }

    /// A record is a worker's writing, read by the privileged supervisor: one forged to name a
    /// directory outside the writable roots (here, an exchange of two files there, as a rollback
    /// would undo a replace) is left alone, and removed.
    #[test]
    fn a_forged_record_naming_a_directory_outside_the_roots_moves_nothing() {
        let fixture = fixture();
        let outside = tempfile::tempdir().unwrap();
        let outside_path = outside.path().canonicalize().unwrap();
        std::fs::write(outside_path.join("passwd"), "root:x:0:0\n").unwrap();
        std::fs::write(outside_path.join("passwd-"), "old\n").unwrap();
        std::fs::write(outside_path.join("staged"), "x\n").unwrap();
        let dir = sys::open_dir(&outside_path).unwrap();
        let stamp = |name: &str| Some(Stamp::of(&sys::meta_at(dir.as_fd(), OsStr::new(name)).unwrap()));
        let slot = SlotRecord {
            root: hex(outside_path.as_os_str().as_bytes()),
            dir: Vec::new(),
            name: hex(b"passwd"),
            temp: hex(b"passwd-"),
            kind: Action::Replace,
            staged: stamp("passwd"),
            old: stamp("passwd-"),
        };
        // A second step not committed (its temporary name still holds its staged file), so the
        // first is to be undone: an exchange of the two files.
        let pending = SlotRecord {
            root: hex(outside_path.as_os_str().as_bytes()),
            dir: Vec::new(),
            name: hex(b"created"),
            temp: hex(b"staged"),
            kind: Action::Create,
            staged: stamp("staged"),
            old: None,
        };
        let slots = vec![slot, pending];
        let record = Record { format: FORMAT.to_owned(), owner: "forged 1".to_owned(), slots };
        let at = fixture.state.path().join(INTENTS).join(format!("{RECORD_PREFIX}forged"));
        std::fs::write(&at, serde_json::to_vec(&record).unwrap()).unwrap();
        let report = recover(fixture.state.path(), &fixture.roots(), |_| true);
        assert_eq!((report.records, report.undone), (1, 0));
        assert_eq!(std::fs::read_to_string(outside_path.join("passwd")).unwrap(), "root:x:0:0\n");
        assert_eq!(std::fs::read_to_string(outside_path.join("passwd-")).unwrap(), "old\n");
        assert!(!at.exists());
    }

    /// A record that is a link (here to an endless device) is not followed: unreadable, removed.
    #[test]
    fn a_record_that_is_a_link_is_not_followed() {
        let fixture = fixture();
        let at = fixture.state.path().join(INTENTS).join(format!("{RECORD_PREFIX}link"));
        std::os::unix::fs::symlink("/dev/zero", &at).unwrap();
        let report = recover(fixture.state.path(), &fixture.roots(), |_| true);
        assert_eq!((report.records, report.unreadable), (1, 1));
        assert!(std::fs::symlink_metadata(&at).is_err());
    }

    /// Killed after its last step, a transaction is finished, not rolled back.
    #[test]
    fn recovery_finishes_a_transaction_killed_after_its_last_step() {
        let fixture = fixture();
        std::fs::write(fixture.root.path().join("a"), "old").unwrap();
        let ops = vec![
            TxnOp::Write { path: fixture.path("a"), content: "new".into(), guard: None, match_style: false },
            TxnOp::Write {
                path: fixture.path("fsd-fault-txn-die-2"),
                content: "marker".into(),
                guard: None,
                match_style: false,
            },
        ];
        assert!(fixture.transact(ops).is_err());
        let report = recover(fixture.state.path(), &fixture.roots(), |_| true);
        assert_eq!((report.finished, report.rolled_back), (1, 0));
        drop(super::super::journal::Sweeper::start(&[RootSpec {
            path: fixture.root.path().to_path_buf(),
            writable: true,
        }]));
        let expected: BTreeMap<String, Vec<u8>> =
            [("a".to_owned(), b"new".to_vec()), ("fsd-fault-txn-die-2".to_owned(), b"marker".to_vec())]
                .into();
        assert_eq!(fixture.tree(), expected);
    }

    /// An outside save over a target after the commit and before the recovery is newer than
    /// the transaction: it stays, and so does every other file's rollback.
    #[test]
    fn recovery_keeps_an_outside_save_made_after_the_commit() {
        let fixture = fixture();
        std::fs::write(fixture.root.path().join("a"), "old a").unwrap();
        std::fs::write(fixture.root.path().join("b"), "old b").unwrap();
        std::fs::write(fixture.root.path().join("gone"), "deleted").unwrap();
        let ops = vec![
            TxnOp::Write {
                path: fixture.path("a"),
                content: "new a".into(),
                guard: None,
                match_style: false,
            },
            TxnOp::Write {
                path: fixture.path("b"),
                content: "new b".into(),
                guard: None,
                match_style: false,
            },
            TxnOp::Delete { path: fixture.path("gone"), guard: None },
            TxnOp::Write {
                path: fixture.path("fsd-fault-txn-die-3"),
                content: String::new(),
                guard: None,
                match_style: false,
            },
        ];
        assert!(fixture.transact(ops).is_err());
        // An editor saves over `a` (by rename) and makes `gone` again.
        std::fs::write(fixture.root.path().join("save"), "outside").unwrap();
        std::fs::rename(fixture.root.path().join("save"), fixture.root.path().join("a")).unwrap();
        std::fs::write(fixture.root.path().join("gone"), "made again").unwrap();
        recover(fixture.state.path(), &fixture.roots(), |_| true);
        drop(super::super::journal::Sweeper::start(&[RootSpec {
            path: fixture.root.path().to_path_buf(),
            writable: true,
        }]));
        let tree = fixture.tree();
        assert_eq!(tree.get("a").map(Vec::as_slice), Some(&b"outside"[..]));
        assert_eq!(tree.get("b").map(Vec::as_slice), Some(&b"old b"[..]));
        assert_eq!(tree.get("gone").map(Vec::as_slice), Some(&b"made again"[..]));
        let kept: Vec<_> =
            tree.iter().filter(|(k, _)| k.starts_with("gone.kept-")).map(|(_, v)| v.clone()).collect();
        assert_eq!(kept, vec![b"deleted".to_vec()], "{tree:?}");
        assert!(!tree.keys().any(|k| k.starts_with(".fsd-tmp-")), "{tree:?}");
    }

    #[test]
    fn bounds_are_refused_up_front_with_the_limit() {
        let fixture = fixture();
        let limits = Limits { max_transaction_operations: 2, max_transaction_bytes: 4, ..Limits::default() };
        let fence = Fence {
            protected: &[],
            read_denied: &[],
            submounts: &[],
            allow_backslash: false,
            host_root: false,
        };
        let spec = RootSpec { path: fixture.root.path().to_path_buf(), writable: true };
        let backend = Backend::new(&[spec], &fence, limits, Arc::new(Uncontended))
            .unwrap()
            .with_intents(sys::open_dir(&fixture.state.path().join(INTENTS)).ok());
        let write = |name: &str, content: &str| TxnOp::Write {
            path: fixture.path(name),
            content: content.into(),
            guard: None,
            match_style: false,
        };
        let cases = [
            (vec![write("a", ""), write("b", ""), write("c", "")], 3, 2),
            (vec![write("a", "abc"), write("b", "de")], 5, 4),
        ];
        for (ops, size, limit) in cases {
            match backend.handle(Mode::WorkspaceWrite, Request::Transact { ops }) {
                Err(Failure { error: FsError::TooLarge { size: s, limit: l }, .. }) => {
                    assert_eq!((s, l), (size, limit))
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(fixture.tree().is_empty());
    }
}
