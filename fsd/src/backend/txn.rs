//! Transactions: an ordered list of guarded operations (write, edit, delete, move) over distinct
//! targets, checked together under all their locks and committed all-or-nothing, also across a
//! SIGKILL of the worker, the network process or the whole daemon (`docs/transactions.md`).
//!
//! The steps: every target is walked (plan); all their keys are locked in one request, which
//! the router takes together in one global order (`dispatch::locks`); every guard is checked and
//! every new content computed (check); then the pipeline's one commit step (`commit`,
//! `Backend::commit_all`) commits them together: each new file is staged beside its target, synced, under
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
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Backend;
use super::commit::Commit;
use super::moves::{self, Aside};
use super::pipeline::{Mutation, Plan};
use super::settle::{Spot, Undone, settle};
use crate::error::{Denial, Failure, FsError, StaleReason};
use crate::op::{Mode, Outcome, RootSpec, TxnOp};
use crate::sys::{self, Kind, Meta, RenameHow};

/// The state directory's subdirectory of intent records.
pub const INTENTS: &str = "txn";
pub(super) const FORMAT: &str = "fsd-txn-1";
pub(super) const RECORD_PREFIX: &str = "txn-";

/// What a slot's commit step does at its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Action {
    /// The staged file and the existing one exchange names.
    Replace,
    /// The staged file takes a free name.
    Create,
    /// The existing file goes to the temporary name.
    Remove,
    /// A move: the source file (`staged`) comes from its own name (`from`) by a rename, so its
    /// inode, links, attributes and mode travel. Onto a free name without replacing; over the
    /// destination's file (`old`) by an exchange, which puts that file at the source's name,
    /// whence the next slot (a `Remove` there) sets it aside.
    Rename,
}

/// Where a moved file came from: its root, directories and name, hex as a slot's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Origin {
    pub(super) root: String,
    pub(super) dir: Vec<String>,
    pub(super) name: String,
}

/// A file as the record knows it: the identity and content stamp `Meta::same_content` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, u32),
}

impl Stamp {
    pub(super) fn of(meta: &Meta) -> Stamp {
        Stamp { dev: meta.dev, ino: meta.ino, size: meta.size, mtime: meta.mtime }
    }

    pub(super) fn is(&self, meta: &Meta) -> bool {
        meta.kind == Kind::File && Stamp::of(meta) == *self
    }
}

/// One slot of an intent record. Names are hex (any bytes but `/`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SlotRecord {
    /// The root's absolute path and the directories below it, hex.
    pub(super) root: String,
    pub(super) dir: Vec<String>,
    pub(super) name: String,
    pub(super) temp: String,
    pub(super) kind: Action,
    pub(super) staged: Option<Stamp>,
    pub(super) old: Option<Stamp>,
    /// A `Rename`'s source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) from: Option<Origin>,
}

/// The intent record: written and synced before the first visible change.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Record {
    pub(super) format: String,
    /// The journal owner of the worker that commits (`<instance> <pid>`).
    pub(super) owner: String,
    pub(super) slots: Vec<SlotRecord>,
}

pub(super) use super::hexname::encode as hex;

fn unhex(text: &str) -> Option<OsString> {
    super::hexname::decode(text.as_bytes()).map(OsString::from_vec)
}

/// A name that stays in its directory.
fn component(text: &str) -> Option<OsString> {
    super::hexname::decode_name(text.as_bytes())
}

/// Undoes one slot's commit in `dir` (a `Rename`'s source directory: `from`), where its name
/// still holds what the transaction put there (else an outside change since is newer, and
/// stays). Returns whether it restored anything. An exchange is undone by rounds
/// ([`settle`]), not after a look at the name: a save renamed over the name, or a write into the
/// file there, between that look and the exchange would be taken out with the transaction's
/// file (see [`settled`]).
pub(super) fn undo(dir: BorrowedFd<'_>, from: Option<BorrowedFd<'_>>, slot: &SlotRecord) -> bool {
    let (Some(name), Some(temp)) = (component(&slot.name), component(&slot.temp)) else { return false };
    let holds_in = |dir: BorrowedFd<'_>, at: &OsStr, stamp: Option<Stamp>| {
        stamp.is_some_and(|s| sys::meta_at(dir, at).is_ok_and(|m| s.is(&m)))
    };
    let holds = |at: &OsStr, stamp: Option<Stamp>| holds_in(dir, at, stamp);
    let at_name = Spot { dir, name: &name };
    let staged = |m: &Meta| slot.staged.is_some_and(|s| s.is(m));
    match slot.kind {
        // The replaced file is at the temporary name (the step's exchange happened: no outside
        // writer names that one): exchanged back, the staged one goes there.
        Action::Replace if holds(&temp, slot.old) => {
            let back = Spot { dir, name: &temp };
            settled(settle(at_name, back, &staged), slot, || moves::keep_aside(dir, &name, &temp))
        }
        // Taken out as a checked removal takes a file out: a save renamed over the name (or a
        // write into the file there) between the look and the rename would otherwise go with
        // the transaction's file to the temporary name. What moved is looked at, and anything
        // but the transaction's file goes back to the name, or beside it.
        Action::Create => match sys::meta_at(dir, &name) {
            Ok(now) if slot.staged.is_some_and(|s| s.is(&now)) => {
                moves::set_aside(dir, &name, &temp, &now).is_ok()
            }
            _ => false,
        },
        Action::Remove if holds(&temp, slot.old) => {
            match sys::rename(dir, &temp, dir, &name, RenameHow::NoReplace) {
                Ok(()) => true,
                Err(errno) => {
                    // The name was taken again since: the removed file is kept beside it.
                    let kept = moves::keep_aside(dir, &name, &temp);
                    tracing::warn!(?kept, ?name, %errno, "a file a rolled-back transaction had removed is kept at another name: its name was taken again");
                    true
                }
            }
        }
        Action::Rename => {
            let (Some(from), Some(source)) = (from, slot.from.as_ref().and_then(|o| component(&o.name)))
            else {
                return false;
            };
            match slot.old {
                // The destination's file is back at the source's name (the next slot's undo put
                // it there): the two exchange names again.
                Some(_) if holds_in(from, &source, slot.old) => {
                    let back = Spot { dir: from, name: &source };
                    let keep = || {
                        let kept = moves::keep_beside(back, at_name);
                        kept.unwrap_or_else(|| source.clone())
                    };
                    settled(settle(at_name, back, &staged), slot, keep)
                }
                Some(_) => false,
                // Moved back as a checked removal takes a file out ([`moves::move_back`]): a
                // save renamed over the destination between the look and the rename is what
                // would move, and goes back.
                None => match sys::meta_at(dir, &name) {
                    Ok(now) if staged(&now) => {
                        let back = |name: &OsStr| {
                            let to = Spot { dir: from, name };
                            moves::move_back(at_name, to, &now, StaleReason::ChangedWhileRemoving)
                        };
                        match back(&source) {
                            Ok(()) => true,
                            Err(Aside::NotMoved(errno)) => {
                                // The source's name was taken again since: the moved file is
                                // kept beside it, visible, and its destination is free again.
                                let kept = moves::kept_name(&source, &temp).filter(|kept| back(kept).is_ok());
                                tracing::warn!(?kept, ?source, %errno, "a file a rolled-back transaction had moved is kept beside its old name: that name was taken again");
                                kept.is_some()
                            }
                            Err(Aside::Other(_)) => false,
                        }
                    }
                    _ => false,
                },
            }
        }
        _ => false,
    }
}

/// Whether a slot's undo by rounds restored what its name held before. The transaction's file
/// back out of the name: restored. The file the transaction replaced superseded at the name by a
/// newer outside change: not restored, that change stays, and the replaced file is left to go as
/// when the change came before the undo. Anything else the newest change superseded (an outside
/// change the undo took from the name) is someone's: it is kept beside the name (`keep`, which
/// says where).
fn settled(settled: Result<Undone, sys::Errno>, slot: &SlotRecord, keep: impl FnOnce() -> OsString) -> bool {
    match settled {
        Ok(Undone::At(out)) if slot.staged.is_some_and(|s| s.is(&out)) => true,
        Ok(Undone::At(out)) if slot.old.is_some_and(|s| s.is(&out)) => false,
        Ok(_) => {
            let kept = keep();
            tracing::warn!(
                ?kept,
                "a change a rolled-back transaction's undo took from a name is kept beside the newest one"
            );
            false
        }
        Err(errno) => {
            // Both names hold someone's content: neither is removed.
            tracing::warn!(%errno, "a rolled-back transaction's exchange could not be undone");
            false
        }
    }
}

/// Whether a slot's commit step happened (by what its names hold now).
fn committed(dir: BorrowedFd<'_>, from: Option<BorrowedFd<'_>>, slot: &SlotRecord) -> bool {
    let (Some(name), Some(temp)) = (component(&slot.name), component(&slot.temp)) else { return false };
    let holds = |dir: BorrowedFd<'_>, at: &OsStr, stamp: Option<Stamp>| {
        stamp.is_some_and(|s| sys::meta_at(dir, at).is_ok_and(|m| s.is(&m)))
    };
    match slot.kind {
        Action::Replace | Action::Create => !holds(dir, &temp, slot.staged),
        Action::Remove => !holds(dir, &name, slot.old),
        // The moved file is no longer at its source's name (and is at the destination: a
        // source gone elsewhere is not this transaction's doing).
        Action::Rename => match (from, slot.from.as_ref().and_then(|o| component(&o.name))) {
            (Some(from), Some(source)) => {
                !holds(from, &source, slot.staged) && holds(dir, &name, slot.staged)
            }
            _ => false,
        },
    }
}

/// The directory of a slot, reached from its root one component at a time, no link followed.
/// The root must be one of `roots` (the writable roots, canonical): the record was written by a
/// worker, and a forged one must not send the privileged recovery anywhere a worker cannot write.
fn open_slot_dir(slot: &SlotRecord, roots: &[PathBuf]) -> Option<OwnedFd> {
    open_dir_below(&slot.root, &slot.dir, roots)
}

/// A directory named by a root (hex, one of `roots`) and the directories below it (hex),
/// reached one component at a time, no link followed.
fn open_dir_below(root: &str, dir: &[String], roots: &[PathBuf]) -> Option<OwnedFd> {
    let root = unhex(root)?;
    if !roots.iter().any(|r| r.as_os_str() == root) {
        tracing::warn!(root = ?root, "an intent record names a directory outside the writable roots; left alone");
        return None;
    }
    let mut fd = sys::open_dir(Path::new(&root)).ok()?;
    for part in dir {
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
        let froms: Vec<Option<OwnedFd>> = record
            .slots
            .iter()
            .map(|slot| slot.from.as_ref().and_then(|o| open_dir_below(&o.root, &o.dir, &roots)))
            .collect();
        let from = |i: usize| froms[i].as_ref().map(AsFd::as_fd);
        let all = record
            .slots
            .iter()
            .zip(&dirs)
            .enumerate()
            .all(|(i, (slot, dir))| dir.as_ref().is_some_and(|d| committed(d.as_fd(), from(i), slot)));
        if all {
            report.finished += 1;
        } else {
            report.rolled_back += 1;
            for (i, (slot, dir)) in record.slots.iter().zip(&dirs).enumerate().rev() {
                if let Some(dir) = dir
                    && undo(dir.as_fd(), from(i), slot)
                {
                    report.undone += 1;
                    let _ = sys::sync_dir(dir.as_fd());
                    if let Some(from) = from(i) {
                        let _ = sys::sync_dir(from);
                    }
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
pub(super) fn fault_at(names: &[&OsStr], prefix: &str, step: usize) -> bool {
    let wanted = format!("{prefix}{step}");
    names.iter().any(|n| n.as_bytes() == wanted.as_bytes())
}

impl Backend {
    /// Refuses more staged bytes than a transaction may carry.
    pub(super) fn within_staged(&self, size: u64, path: &str) -> Result<(), Failure> {
        let limit = self.limits.max_transaction_bytes;
        if size > limit {
            return Err(Failure::new(FsError::TooLarge { size, limit }, path));
        }
        Ok(())
    }

    /// Runs a transaction (see the module's comment): planned, locked and checked as the
    /// pipeline does a single call, then committed by the pipeline's one commit step
    /// (`Backend::commit_all`). On failure nothing it changed stays changed, and the failure
    /// names the operation and how many were undone.
    pub(super) fn transact(&self, mode: Mode, ops: Vec<TxnOp>) -> Result<Outcome, Failure> {
        self.transact_mutations(mode, ops.iter().map(mutation).collect())
    }

    /// [`Backend::transact`] of the pipeline's changes themselves: a rewind's restores carry
    /// bytes no [`TxnOp`] does.
    pub(super) fn transact_mutations(
        &self,
        mode: Mode,
        mutations: Vec<Mutation<'_>>,
    ) -> Result<Outcome, Failure> {
        let first = mutations.first().map(Mutation::path).unwrap_or_default().to_owned();
        let limit = self.limits.max_transaction_operations;
        if mutations.len() > limit {
            let error = FsError::TooLarge { size: mutations.len() as u64, limit: limit as u64 };
            return Err(Failure::new(error, first));
        }
        let sent: u64 = mutations.iter().map(Mutation::sent).sum();
        self.within_staged(sent, &first)?;
        if self.intents.is_none() {
            return Err(Failure::new(FsError::Denied(Denial::NoStateDir), first));
        }
        let at = |op: usize| move |f: Failure| f.in_transaction(op, 0);

        // Plan: each operation as the pipeline plans the single call (walk, binding,
        // read_denied, the fence of a change); each target named once.
        let mut plans: Vec<Plan<'_>> = Vec::with_capacity(mutations.len());
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
        if plans.is_empty() {
            return Ok(Outcome::Transact { outcomes: Vec::new() });
        }
        // The pipeline's one lock site: every key in one request, taken in one global order.
        let refs: Vec<&Plan<'_>> = plans.iter().collect();
        let _held = self.lock_plans(&refs)?;

        // Check: every operation as the pipeline checks the single call, under the locks.
        let mut checked = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            checked.push(self.check(plan).map_err(at(i))?);
        }
        let outcomes = self.commit_all(Commit::Together(checked))?;
        Ok(Outcome::Transact { outcomes })
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
        TxnOp::Patch { path, hunks, guard } => Mutation::Patch { path, hunks, guard: guard.as_ref() },
        TxnOp::Move { source, destination, source_guard, destination_guard, content } => Mutation::Move {
            source,
            destination,
            source_guard: source_guard.as_ref(),
            destination_guard: destination_guard.as_ref(),
            content: content.as_deref(),
        },
    }
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
        super::super::journal::make_dir_for(root.path());
        let backend = Backend::new(&[spec], &fence, Limits::default(), Arc::new(Uncontended))
            .unwrap()
            .with_intents(sys::open_dir(&state.path().join(INTENTS)).ok());
        Fixture { root, state, backend }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            super::super::journal::remove_dir_for(self.root.path());
        }
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
        /// apply_patch hunks over the file's current text.
        Patch {
            name: usize,
            chunks: Vec<fsd_patch::Chunk>,
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

    /// The names an operation touches.
    fn names_of(op: &Gen) -> Vec<usize> {
        match op {
            Gen::Write { name, .. }
            | Gen::Edit { name, .. }
            | Gen::Delete { name, .. }
            | Gen::Patch { name, .. } => vec![*name],
            Gen::Move { from, to, .. } => vec![*from, *to],
            Gen::Fail { .. } => vec![],
        }
    }

    fn content() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "x",
            "y",
            "xy",
            "yx",
            "xx",
            "hello\n",
            "",
            "a\nb\nc\n",
            "a\nx\nb\n",
            "c\nb",
        ])
        .prop_map(str::to_owned)
    }

    /// One apply_patch hunk over lines of the contents above: it matches some files and not
    /// others (a context line, old lines, the end-of-file marker).
    fn chunk() -> impl Strategy<Value = fsd_patch::Chunk> {
        let line = || prop::sample::select(vec!["a", "b", "c", "x", ""]).prop_map(str::to_owned);
        let new_line = prop::sample::select(vec!["a", "z", "q"]).prop_map(str::to_owned);
        (
            prop::option::weighted(
                0.3,
                prop::sample::select(vec!["a", "b", "hello"]).prop_map(str::to_owned),
            ),
            prop::collection::vec(line(), 0..3),
            prop::collection::vec(new_line, 0..3),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(context, old_lines, new_lines, end_of_file)| fsd_patch::Chunk {
                context,
                old_lines,
                new_lines,
                end_of_file,
                line: 0,
            })
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
            // Mostly over the files the test starts from, so hunks meet lines.
            2 => (prop_oneof![3 => 0..2usize, 1 => name.clone()], prop::collection::vec(chunk(), 1..3), pick())
                .prop_map(|(name, chunks, guard)| Gen::Patch { name, chunks, guard }),
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
                // The hunks applied as the apply_patch tool applies them; one that does not
                // match refuses the whole transaction.
                Gen::Patch { name, chunks, guard } => {
                    let n = NAMES[*name].to_owned();
                    let fresh = named.insert(n.clone());
                    let text = after.get(&n).map(|b| String::from_utf8(b.clone()).unwrap());
                    steps += 1;
                    match text.map(|t| fsd_patch::apply_chunks(&t, chunks)) {
                        Some(Ok(patched)) if fresh && guard_holds(*guard, true) => {
                            after.insert(n, patched.into_bytes());
                            true
                        }
                        _ => false,
                    }
                }
                Gen::Move { from, to, guard, to_guard } => {
                    let (f, t) = (NAMES[*from].to_owned(), NAMES[*to].to_owned());
                    let fresh = named.insert(f.clone()) & named.insert(t.clone());
                    let dst_present = after.contains_key(&t);
                    // A rename; over a destination, an exchange and then the destination's file
                    // set aside from the source's name.
                    steps += 1 + usize::from(dst_present);
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
                Gen::Patch { name, chunks, guard: pick } => TxnOp::Patch {
                    path: fixture.path(NAMES[*name]),
                    hunks: chunks
                        .iter()
                        .map(|c| crate::op::Hunk {
                            context: c.context.clone(),
                            old_lines: c.old_lines.clone(),
                            new_lines: c.new_lines.clone(),
                            end_of_file: c.end_of_file,
                        })
                        .collect(),
                    guard: guard(*pick, NAMES[*name]),
                },
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
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Random transactions over overlapping targets, one after another on one tree: after
        /// each, the tree is the model's all-or-nothing result, with nothing of fsd's left.
        #[test]
        fn transactions_are_all_or_nothing(batches in prop::collection::vec(prop::collection::vec(operation(), 1..6), 1..8)) {
            use std::os::unix::fs::MetadataExt;
            let fixture = fixture();
            // Files of lines to start from, so edits and patches find some of theirs.
            std::fs::write(fixture.root.path().join("a"), "a\nb\nc\n").unwrap();
            std::fs::write(fixture.root.path().join("b"), "a\nx\nb\n").unwrap();
            let inode = |name: &str| std::fs::symlink_metadata(fixture.root.path().join(name)).ok().map(|m| m.ino());
            for ops in &batches {
                let before = fixture.tree();
                let inodes: Vec<Option<u64>> = NAMES.iter().map(|n| inode(n)).collect();
                let expected = model(&before, ops);
                let result = fixture.transact(to_ops(&fixture, ops));
                let after = fixture.tree();
                prop_assert_eq!(result.is_ok(), expected.is_some(), "ops {:?} gave {:?}", ops, result.as_ref().err());
                prop_assert_eq!(&after, expected.as_ref().unwrap_or(&before), "ops {:?}", ops);
                prop_assert_eq!(fixture.records(), 0);
                match &result {
                    Err(failure) => {
                        prop_assert!(failure.operation.is_some(), "{:?}", failure);
                        // Undone, the files are the very ones that were there.
                        let now: Vec<Option<u64>> = NAMES.iter().map(|n| inode(n)).collect();
                        for ((name, was), now) in NAMES.iter().zip(&inodes).zip(&now) {
                            if was.is_some() && before.get(*name) == after.get(*name) {
                                prop_assert_eq!(was, now, "{} after {:?}", name, ops);
                            }
                        }
                    }
                    // A move renames: the destination is the source's file itself (when no
                    // other operation of the batch touches either name).
                    Ok(_) => {
                        for (i, op) in ops.iter().enumerate() {
                            if let Gen::Move { from, to, .. } = op {
                                let alone = ops.iter().enumerate().all(|(j, other)| {
                                    j == i || !names_of(other).iter().any(|n| n == from || n == to)
                                });
                                if alone {
                                    prop_assert_eq!(inode(NAMES[*to]), inodes[*from], "ops {:?}", ops);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A worker killed after any commit step of a transaction that replaces, creates, deletes
    /// and moves: recovery and the sweep leave the tree as it was before, with no temporary
    /// file and no record.
    #[test]
    fn recovery_rolls_back_a_transaction_killed_at_every_step() {
        // Five steps (the move one rename); killed after the fifth, the marker's, it committed.
        for step in 1..=4 {
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
            drop(super::super::journal::Sweeper::start(
                &[RootSpec { path: fixture.root.path().to_path_buf(), writable: true }],
                sys::effective_ids(),
            ));
            assert_eq!(fixture.tree(), before, "{step}");
            assert_eq!(fixture.records(), 0, "{step}");
        }
    }

    /// A transaction's moves are renames: the file itself travels (inode, hard links, user
    /// attributes, mode), onto a free name and over an existing one; a move undone when a later
    /// step fails puts the same files back at their names.
    #[test]
    fn moves_in_a_transaction_are_renames_and_undo_as_renames() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let fixture = fixture();
        let root = fixture.root.path();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("a"), "a's bytes").unwrap();
        std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(root.join("a"), root.join("a-link")).unwrap();
        let attr = std::fs::File::open(root.join("a"))
            .map_err(|_| sys::Errno::IO)
            .and_then(|f| sys::set_xattr(f.as_fd(), OsStr::new("user.fsd-test"), b"kept"));
        std::fs::write(root.join("b"), "b's bytes").unwrap();
        std::fs::write(root.join("c"), "c's bytes").unwrap();
        let ino = |name: &str| std::fs::metadata(root.join(name)).unwrap().ino();
        let (a, b, c) = (ino("a"), ino("b"), ino("c"));
        let moves = |fail: bool| {
            let mut ops = vec![
                // Onto a free name in another directory, and over an existing file.
                TxnOp::Move {
                    source: fixture.path("a"),
                    destination: fixture.path("d/a"),
                    source_guard: None,
                    destination_guard: None,
                    content: None,
                },
                TxnOp::Move {
                    source: fixture.path("b"),
                    destination: fixture.path("c"),
                    source_guard: None,
                    destination_guard: None,
                    content: None,
                },
            ];
            if fail {
                ops.push(TxnOp::Write {
                    path: fixture.path("fsd-fault-txn-fail-4"),
                    content: String::new(),
                    guard: None,
                    match_style: false,
                });
            }
            ops
        };

        let failed = fixture.transact(moves(true));
        assert!(matches!(&failed, Err(Failure { operation: Some(at), .. }) if **at == (2, 2)), "{failed:?}");
        assert_eq!((ino("a"), ino("b"), ino("c")), (a, b, c));
        assert_eq!(std::fs::read(root.join("c")).unwrap(), b"c's bytes");
        assert!(!root.join("d/a").exists());

        fixture.transact(moves(false)).unwrap();
        let moved = std::fs::metadata(root.join("d/a")).unwrap();
        assert_eq!((moved.ino(), moved.nlink(), moved.mode() & 0o777), (a, 2, 0o600));
        assert_eq!(ino("c"), b);
        if attr.is_ok() {
            let file = std::fs::File::open(root.join("d/a")).unwrap();
            assert_eq!(sys::get_xattr(file.as_fd(), OsStr::new("user.fsd-test")).unwrap(), b"kept");
        }
        let tree = fixture.tree();
        let names: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(names, ["a-link", "c", "d/a"]);
        assert_eq!(tree["c"], b"b's bytes");
    }

    /// A worker killed after each step of a transaction of moves (a rename onto a free name in
    /// another directory, and a move over an existing file: its exchange, then the destination's
    /// file set aside): recovery puts the very same files back at their names.
    #[test]
    fn recovery_rolls_back_moves_killed_at_every_step() {
        use std::os::unix::fs::MetadataExt;
        for step in 1..=3 {
            let fixture = fixture();
            let root = fixture.root.path();
            std::fs::create_dir(root.join("d")).unwrap();
            for (name, content) in [("a", "a's bytes"), ("b", "b's bytes"), ("c", "c's bytes")] {
                std::fs::write(root.join(name), content).unwrap();
            }
            let inodes = || -> Vec<u64> {
                ["a", "b", "c"].iter().map(|n| std::fs::metadata(root.join(n)).unwrap().ino()).collect()
            };
            let (before, before_inodes) = (fixture.tree(), inodes());
            let ops = vec![
                TxnOp::Move {
                    source: fixture.path("a"),
                    destination: fixture.path("d/a"),
                    source_guard: None,
                    destination_guard: None,
                    content: None,
                },
                TxnOp::Move {
                    source: fixture.path("b"),
                    destination: fixture.path("c"),
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
            let report = recover(fixture.state.path(), &fixture.roots(), |_| true);
            assert_eq!((report.records, report.rolled_back, report.undone), (1, 1, step), "{step}");
            drop(super::super::journal::Sweeper::start(
                &[RootSpec { path: fixture.root.path().to_path_buf(), writable: true }],
                sys::effective_ids(),
            ));
            let mut after = fixture.tree();
            // The directory the move made stays, empty (the tree lists files only).
            after.retain(|k, _| !k.starts_with("d/"));
            assert_eq!(after, before, "{step}");
            assert_eq!(inodes(), before_inodes, "{step}");
            assert_eq!(fixture.records(), 0, "{step}");
        }
    }

    /// Every commit, a single call's and a transaction's, tells the pipeline's one place
    /// (`Backend::committed`) each name it changed, with the file before and the version after;
    /// a refused call tells it nothing.
    #[test]
    fn every_commit_reports_each_name_it_changed_once() {
        let fixture = fixture();
        let write = |name: &str| Request::WriteText {
            path: fixture.path(name),
            content: "x y\n".into(),
            guard: None,
            match_style: false,
        };
        let edit = |name: &str, old: &str| Request::EditText {
            path: fixture.path(name),
            old: old.into(),
            new: "z".into(),
            replace_all: false,
            guard: None,
        };
        let txn_write = |name: &str| TxnOp::Write {
            path: fixture.path(name),
            content: "t\n".into(),
            guard: None,
            match_style: false,
        };
        // A name, whether it held a file before, whether it holds one after.
        type Reported<'n> = Vec<(&'n str, bool, bool)>;
        let cases: Vec<(Request, Reported<'_>)> = vec![
            (write("n"), vec![("n", false, true)]),
            (write("n"), vec![("n", true, true)]),
            (edit("n", "x"), vec![("n", true, true)]),
            (edit("n", "absent"), vec![]),
            (
                Request::MoveFile {
                    source: fixture.path("n"),
                    destination: fixture.path("m"),
                    source_guard: None,
                    destination_guard: None,
                    content: None,
                },
                vec![("n", true, false), ("m", false, true)],
            ),
            (Request::DeleteFile { path: fixture.path("m"), guard: None }, vec![("m", true, false)]),
            (
                Request::Transact { ops: vec![txn_write("a"), txn_write("b"), txn_write("a2")] },
                vec![("a", false, true), ("b", false, true), ("a2", false, true)],
            ),
            (
                Request::Transact {
                    ops: vec![
                        TxnOp::Move {
                            source: fixture.path("a"),
                            destination: fixture.path("b"),
                            source_guard: None,
                            destination_guard: None,
                            content: None,
                        },
                        TxnOp::Delete { path: fixture.path("a2"), guard: None },
                    ],
                },
                vec![("a", true, false), ("b", true, true), ("a2", true, false)],
            ),
        ];
        super::super::commit::reported();
        for (request, expected) in cases {
            let what = format!("{request:?}");
            let _ = fixture.backend.handle(Mode::WorkspaceWrite, request);
            let reported = super::super::commit::reported();
            let names: Reported<'_> = reported
                .iter()
                .map(|(display, before, after)| {
                    (display.rsplit('/').next().unwrap_or_default(), *before, *after)
                })
                .collect();
            assert_eq!(names, expected, "{what}");
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
            from: None,
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
            from: None,
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
        drop(super::super::journal::Sweeper::start(
            &[RootSpec { path: fixture.root.path().to_path_buf(), writable: true }],
            sys::effective_ids(),
        ));
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
        drop(super::super::journal::Sweeper::start(
            &[RootSpec { path: fixture.root.path().to_path_buf(), writable: true }],
            sys::effective_ids(),
        ));
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

    /// A patch beside a write: its hunks applied to the current text (a BOM and CRLF endings
    /// kept), both committed; a hunk that does not match, a stale guard or a missing file
    /// refuses the whole transaction, naming the operation and the hunk, nothing changed.
    #[test]
    fn a_patch_commits_with_the_others_or_nothing_does() {
        use crate::error::HunkMiss;
        use crate::op::Hunk;
        let hunk = |context: Option<&str>, old: &[&str], new: &[&str]| Hunk {
            context: context.map(str::to_owned),
            old_lines: old.iter().map(|l| (*l).to_owned()).collect(),
            new_lines: new.iter().map(|l| (*l).to_owned()).collect(),
            end_of_file: false,
        };
        let original = "\u{feff}one\r\ntwo\r\nthree\r\n";
        type Expect = Result<&'static str, fn(&FsError) -> bool>;
        let cases: [(&str, Vec<Hunk>, Pick, Expect); 5] = [
            (
                "applies",
                vec![hunk(Some("one"), &["two"], &["2", "2b"])],
                Pick::Current,
                Ok("\u{feff}one\r\n2\r\n2b\r\nthree\r\n"),
            ),
            (
                "second hunk's lines",
                vec![hunk(None, &["one"], &["1"]), hunk(None, &["four"], &["4"])],
                Pick::None,
                Err(|e| matches!(e, FsError::HunkMismatch { hunk: 1, miss: HunkMiss::Lines })),
            ),
            (
                "context",
                vec![hunk(Some("zero"), &["two"], &["2"])],
                Pick::None,
                Err(|e| matches!(e, FsError::HunkMismatch { hunk: 0, miss: HunkMiss::Context })),
            ),
            (
                "stale before matching",
                vec![hunk(None, &["four"], &["4"])],
                Pick::Stale,
                Err(|e| matches!(e, FsError::Stale(StaleReason::Changed))),
            ),
            (
                "missing file",
                vec![hunk(None, &["two"], &["2"])],
                Pick::None,
                Err(|e| matches!(e, FsError::Stale(StaleReason::Gone))),
            ),
        ];
        for (name, hunks, pick, expect) in cases {
            let fixture = fixture();
            let file = if name == "missing file" { "absent" } else { "p" };
            std::fs::write(fixture.root.path().join("p"), original).unwrap();
            std::fs::write(fixture.root.path().join("w"), "old").unwrap();
            let before = fixture.tree();
            let guard = match pick {
                Pick::None => None,
                Pick::Current => Some(EditGuard { version: fixture.version("p").unwrap(), target_key: None }),
                Pick::Stale => Some(EditGuard { version: "1:1".into(), target_key: None }),
            };
            let write = TxnOp::Write {
                path: fixture.path("w"),
                content: "new".into(),
                guard: None,
                match_style: false,
            };
            let patch = TxnOp::Patch { path: fixture.path(file), hunks, guard };
            let result = fixture.transact(vec![write, patch]);
            match (expect, result) {
                (Ok(patched), Ok(Outcome::Transact { outcomes })) => {
                    let tree = fixture.tree();
                    assert_eq!(tree.get("p").map(Vec::as_slice), Some(patched.as_bytes()), "{name}");
                    assert_eq!(tree.get("w").map(Vec::as_slice), Some(&b"new"[..]), "{name}");
                    match &outcomes[..] {
                        [
                            Outcome::WriteText { .. },
                            Outcome::EditText { replacements: 1, version, change, .. },
                        ] => {
                            // The version after guards the next change.
                            let guard = Some(EditGuard { version: version.clone(), target_key: None });
                            let next = vec![TxnOp::Patch {
                                path: fixture.path("p"),
                                hunks: vec![hunk(None, &["2b"], &[])],
                                guard,
                            }];
                            assert!(fixture.transact(next).is_ok(), "{name}");
                            assert_eq!(change.before.as_deref(), Some("one\r\ntwo\r\nthree\r\n"), "{name}");
                            assert_eq!(
                                change.after.as_deref(),
                                Some("one\r\n2\r\n2b\r\nthree\r\n"),
                                "{name}"
                            );
                        }
                        other => panic!("{name}: {other:?}"),
                    }
                }
                (Err(refused), Err(failure)) => {
                    assert!(refused(&failure.error), "{name}: {failure:?}");
                    assert_eq!(failure.operation.as_deref(), Some(&(1, 0)), "{name}");
                    assert_eq!(fixture.tree(), before, "{name}");
                }
                (_, result) => panic!("{name}: {result:?}"),
            }
            assert_eq!(fixture.records(), 0, "{name}");
        }
    }
}
