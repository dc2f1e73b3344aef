//! The temporary-file journal, and the sweep that removes what a killed worker left.
//!
//! An atomic replace has a name on disk for a while (`.fsd-tmp-<128-bit hex>`: the new content
//! before its rename, the old content after a `RENAME_EXCHANGE`). A SIGKILL in that window
//! leaves the name behind. Removing files by that name pattern alone would be a "delete user
//! files that look like ours" primitive, so the daemon removes only what it can show it made:
//!
//! - Before it creates a temporary file, a worker records it in the root's journal directory,
//!   `/dev/shm/fsd-journal-<daemon's uid>/<major>:<minor>:<inode>` of the root ([`base`],
//!   [`dir_name`]): a file named by the temporary name's random part, holding the owner (daemon
//!   instance and worker pid), the directory below the root and, once the file exists, its
//!   identity (device, inode, birth time) and, for a replace, the identity of the file the
//!   exchange will put at that name. The entry is removed once the name is gone again. Nothing is written into the tree itself, not
//!   even an attribute of a root: `git status`, listings and the root's ctime see nothing.
//! - The journal is on tmpfs so that an entry costs no disk I/O and joins none of the
//!   filesystem commits a durable replace makes: the same record as extended attributes on the
//!   root cost the write tool about a fifth of its floor (BENCHMARKS.md, "Where a durable
//!   write's time goes"). It outlives every process of the daemon, not the machine: the journal
//!   covers process death, not power loss (as before: the attributes were not fsynced either).
//! - The supervisor makes [`base`] (0711, its own, never a link: [`open_base`]) and a
//!   directory per writable root (0700, the workers' identity), where workspace-write workers
//!   get Landlock's write rights and nothing else outside the roots. It sweeps: at start-up
//!   every entry of every root, but only when it can take an exclusive `flock` on the root (no
//!   other daemon serves it; each daemon holds a shared lock for its lifetime), and after it
//!   reaps a dead worker the entries of that worker. An entry's file is removed only if it is a
//!   regular file at that name whose identity is one the entry names, or, for an entry recorded
//!   before the file's identity was known, an empty file (nothing was written into it yet). The
//!   directory is reached from the root descriptor one component at a time, never through a
//!   symbolic link. The entry is then dropped either way. Entries are read as untrusted: a
//!   forged one can at most remove a temporary name's file it describes exactly.
//! - A guarded removal first renames the file it checked to a temporary name, then removes it
//!   there only if it is still that file (see `moves::remove_checked`). Its entry names the
//!   checked file and, after ` restore `, the original name (hex): a file at the temporary
//!   name that is not the checked one is an outside save caught in the rename, and the sweep
//!   renames it back (never over a name taken since: then it is kept beside that name, visible,
//!   as `<name>.kept-<8 hex>`) instead of leaving it hidden.
//! - Where an entry cannot be written (no `/dev/shm`, a base another user owns, a full tmpfs,
//!   an approved call running as another user) the write goes on unjournaled: such a temporary
//!   file is still removed on every error path, only not after a SIGKILL. Writes outside the
//!   configured roots (danger-full-access) are never journaled.
//! - Daemons before this medium kept entries as `user.fsd.tmp.<hex>` attributes on the root
//!   and a `user.fsd.journal` anchor beside them; a start-up sweep still finishes and removes
//!   those ([`LEGACY_ENTRY_PREFIX`]).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::hexname::encode as hex;
use super::record::Store;
use crate::op::{RootSpec, TEMP_PREFIX};
use crate::sys::{self, Errno, Kind, Meta};

/// Where the journal directories of all roots of the daemons one user runs are: this, then the
/// user's uid ([`base`]). tmpfs on every Linux system and container runtime fsd supports (Docker
/// and Kubernetes give each container one).
pub const BASE_PREFIX: &str = "/dev/shm/fsd-journal-";

/// This daemon's base: [`BASE_PREFIX`] and the daemon's effective uid, read once, by the first
/// caller, before any identity change (a worker's first call is before its confinement), so
/// daemons of different users never share one.
pub fn base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| PathBuf::from(format!("{BASE_PREFIX}{}", sys::effective_ids().0)))
}

/// The environment variable that hands the supervisor's instance id to its children.
pub const INSTANCE_ENV: &str = "FSD_JOURNAL_INSTANCE";
const FORMAT: &str = "fsd-journal-2";
/// Separates a removal entry's identity from the hex of the name it restores (a reader that
/// predates removals matches no identity with it, so it removes nothing).
const RESTORE: &str = " restore ";
/// An entry's file is never larger than this (a 4096-byte directory in hex, two identities and
/// a restored name's hex fit with room to spare); the sweep reads no more.
const MAX_ENTRY: usize = 16 << 10;
/// The most entries one sweep of a root reads: far more than a daemon's workers ever have in
/// flight (a transaction's staged files included), few enough that a directory the workers'
/// user filled with junk cannot hold a start for long.
const MAX_ENTRIES: usize = 1 << 16;
/// Earlier daemons' entries: extended attributes on the root, this prefix, then the hex.
pub const LEGACY_ENTRY_PREFIX: &str = "user.fsd.tmp.";
/// Earlier daemons' anchor attribute on a writable root.
pub const LEGACY_ANCHOR: &str = "user.fsd.journal";
const LEGACY_FORMAT: &str = "fsd-journal-1";

/// The name of a root's journal directory below [`base`]: the root's device (major:minor) and
/// inode, `stat -c %Hd:%Ld:%i` of it, which name it whatever path it is served at.
pub fn dir_name(root: &Meta) -> OsString {
    OsString::from(format!("{}:{}:{}", root.dev >> 32, root.dev & 0xffff_ffff, root.ino))
}

/// Opens [`base`], accepting it only as a real directory this process's user owns that no one
/// else may write: anyone may create names in `/dev/shm`, so another user's directory (or a link)
/// there would let them forge, read or hide entries.
pub fn open_base(base: &Path) -> Result<OwnedFd, Errno> {
    let fd = sys::open_dir_no_follow(base)?;
    let meta = sys::meta(fd.as_fd())?;
    if meta.kind != Kind::Directory || meta.uid != sys::effective_ids().0 || meta.mode & 0o022 != 0 {
        return Err(Errno::PERM);
    }
    Ok(fd)
}

/// The journal directory of the root at `root`, its name and the directory opened (never
/// through a link), if the supervisor made it.
fn open_dir_of(base: BorrowedFd<'_>, root: &Path) -> Result<(OsString, OwnedFd), Errno> {
    let name = dir_name(&sys::meta(sys::open_dir(root)?.as_fd())?);
    let dir = sys::open_dir_for_listing(base, &name)?;
    Ok((name, dir))
}

/// The journal directory of each root that has one (Landlock's grants name them by path).
pub fn dirs_of(roots: &[PathBuf]) -> Vec<PathBuf> {
    let base = base();
    let Ok(base_fd) = open_base(base) else { return Vec::new() };
    roots
        .iter()
        .filter_map(|root| open_dir_of(base_fd.as_fd(), root).ok())
        .map(|(name, _)| base.join(name))
        .collect()
}

/// This daemon's instance id: random in the supervisor, inherited by its children.
pub fn instance() -> &'static str {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE.get_or_init(|| match std::env::var(INSTANCE_ENV) {
        Ok(id) if !id.is_empty() => id,
        _ => {
            let mut bytes = [0u8; 16];
            // Without randomness the id is still unique enough among live daemons: the pid.
            if getrandom::fill(&mut bytes).is_err() {
                return format!("pid{}", std::process::id());
            }
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }
    })
}

fn warn_once(errno: Errno) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(%errno, "cannot journal temporary files on a root; one left by a killed worker would stay");
    }
}

/// This process's owner string in entries (and in transactions' intent records): the daemon
/// instance and the pid.
pub fn owner() -> String {
    format!("{} {}", instance(), std::process::id())
}

/// The owner string of another process of this daemon (a worker that died).
pub fn owner_of(pid: u32) -> String {
    format!("{} {pid}", instance())
}

/// A worker's journal: the journal directory of each configured root that has one.
#[derive(Debug)]
pub struct Journal {
    dirs: Vec<Option<OwnedFd>>,
    owner: String,
}

impl Journal {
    /// Opens each configured root's journal directory (canonical paths, in backend order)
    /// before confinement.
    pub fn open(roots: &[PathBuf]) -> Journal {
        let base = open_base(base()).ok();
        let dirs = roots
            .iter()
            .map(|root| {
                base.as_ref().and_then(|base| open_dir_of(base.as_fd(), root).ok()).map(|(_, dir)| dir)
            })
            .collect();
        Journal { dirs, owner: owner() }
    }

    /// No journal: a read-only worker's, which writes nothing and so holds no descriptor of one.
    pub fn none() -> Journal {
        Journal { dirs: Vec::new(), owner: owner() }
    }

    /// The journal directories, for the Landlock domain of an approved call's process, which
    /// journals into them as its worker does.
    pub fn dirs(&self) -> Vec<OwnedFd> {
        self.dirs.iter().flatten().filter_map(|fd| fd.try_clone().ok()).collect()
    }

    /// Where the temporary files of a target in `rel_dir` below root `root` are journaled.
    pub(super) fn scope<'a>(&'a self, root: usize, rel_dir: &[OsString]) -> Scope<'a> {
        let fd = self.dirs.get(root).and_then(Option::as_ref).map(AsFd::as_fd);
        let dir = rel_dir.iter().map(|c| c.as_bytes()).collect::<Vec<_>>().join(&b'/');
        Scope { fd, owner: &self.owner, dir: hex(&dir), record: None }
    }
}

/// The journal of one target directory.
#[derive(Debug)]
pub(super) struct Scope<'a> {
    /// The root's journal directory.
    fd: Option<BorrowedFd<'a>>,
    owner: &'a str,
    /// The target's directory below the root, in hex.
    dir: String,
    /// The change record, where a replaced or removed file the record waits for goes
    /// ([`Entry::retire`]).
    record: Option<&'a Store>,
}

impl<'a> Scope<'a> {
    /// The same journal, whose temporary names retire into `record` what it waits for.
    pub(super) fn recording(self, record: Option<&'a Store>) -> Scope<'a> {
        Scope { record, ..self }
    }

    fn entry(self, temp: &OsStr) -> Entry<'a> {
        let name =
            temp.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes()).map(|hex| OsStr::from_bytes(hex).to_owned());
        Entry {
            fd: self.fd,
            name,
            file: None,
            owner: self.owner,
            dir: self.dir,
            replaced: None,
            record: self.record,
        }
    }

    /// Records a temporary name before the file is created.
    pub(super) fn begin(self, temp: &OsStr) -> Entry<'a> {
        let mut entry = self.entry(temp);
        entry.record(None);
        entry
    }

    /// Records a guarded removal before `name`, the file `checked` describes, is renamed to
    /// `temp`: in one write, so a sweep at any later moment knows both the file and its name.
    pub(super) fn begin_removal(self, temp: &OsStr, name: &OsStr, checked: &Meta) -> Entry<'a> {
        let mut entry = self.entry(temp);
        entry.record(Some(format!("{}{RESTORE}{}", identity_of(checked), hex(name.as_bytes()))));
        entry
    }
}

/// One journaled temporary file; `end` drops the record once the name is gone.
#[derive(Debug)]
pub(super) struct Entry<'a> {
    fd: Option<BorrowedFd<'a>>,
    /// The entry's name: the temporary name's random part (none for a name without the prefix).
    name: Option<OsString>,
    /// The entry's file, once written.
    file: Option<std::fs::File>,
    owner: &'a str,
    dir: String,
    /// The identity recorded for the file a replace swaps out, once recorded.
    replaced: Option<String>,
    record: Option<&'a Store>,
}

impl Entry<'_> {
    /// Writes the entry whole at its start. A later value may be shorter than the one before:
    /// what follows its last newline is that value's tail, which `parse` ignores. One write of
    /// less than a page is never torn by a kill; a longer one (a deep directory) can only tear
    /// inside the directory's hex, which no later value changes.
    fn record(&mut self, identity: Option<String>) {
        let (Some(fd), Some(name)) = (self.fd, &self.name) else { return };
        let identity = identity.unwrap_or_else(|| "-".to_owned());
        let value = format!("{FORMAT}\n{}\n{identity}\n{}\n", self.owner, self.dir);
        let written = match &self.file {
            Some(file) => sys::write_all_at(file, 0, value.as_bytes())
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO)),
            None => sys::create_exclusive(fd, name).and_then(|file| {
                let written = sys::write_all_at(&file, 0, value.as_bytes());
                self.file = Some(file);
                written.map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
            }),
        };
        if let Err(errno) = written {
            tracing::debug!(%errno, "temporary file not journaled");
            warn_once(errno);
            // A half-made entry would only say less than none: drop it.
            if self.file.take().is_some() {
                let _ = sys::remove(fd, name);
            }
        }
    }

    fn written(&self) -> bool {
        self.file.is_some()
    }

    /// Adds the created file's identity, before anything is written into it, and that of the
    /// file a replace will swap out to the temporary name.
    pub(super) fn identify(&mut self, created: &Meta, replaced: Option<&Meta>) {
        if self.written() {
            let mut identity = identity_of(created);
            self.replaced = replaced.map(identity_of);
            if let Some(replaced) = &self.replaced {
                identity.push(',');
                identity.push_str(replaced);
            }
            self.record(Some(identity));
        }
    }

    /// A replace is being undone: from now on the temporary name may hold an outside save, or
    /// fsd's file with an outside write into it, neither of which a sweep may remove. The entry
    /// becomes a removal's that names no removable file, so a sweep after a kill puts what it
    /// finds back at `name`, or beside it when `name` is taken (only an empty file, never
    /// written into, is removed).
    pub(super) fn restore_to(&mut self, name: &OsStr) {
        if self.written() {
            self.record(Some(format!("-{RESTORE}{}", hex(name.as_bytes()))));
        }
    }

    /// Whether the entry already names `replaced` as the file a replace swaps out (so a replace
    /// whose target did not change since staging writes the entry once, not twice).
    pub(super) fn names_replaced(&self, replaced: &Meta) -> bool {
        self.replaced.as_deref() == Some(identity_of(replaced).as_str())
    }

    /// Removes the replaced or removed file at the temporary name `temp` of `dir`: into the
    /// change record when it is a before-image the record waits for (`Store::retire`), else
    /// unlinked.
    pub(super) fn retire(&self, dir: BorrowedFd<'_>, temp: &OsStr) -> Result<(), Errno> {
        super::record::retire(self.record, dir, temp)
    }

    /// The temporary name is gone (renamed into place or removed), or deliberately left to
    /// someone else's content: the sweep must never touch it.
    pub(super) fn end(mut self) {
        if let (Some(_), Some(fd), Some(name)) = (self.file.take(), self.fd, &self.name)
            && let Err(errno) = sys::remove(fd, name)
        {
            tracing::warn!(%errno, "cannot drop a journal entry");
        }
    }
}

fn identity_of(meta: &Meta) -> String {
    format!("{}:{}:{}.{}", meta.dev, meta.ino, meta.btime.0, meta.btime.1)
}

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub entries: usize,
    pub removed: usize,
    /// Outside saves a killed removal had moved aside, put back at their names.
    pub restored: usize,
}

/// One root the supervisor holds.
#[derive(Debug)]
struct Held {
    path: PathBuf,
    fd: OwnedFd,
    /// Its journal directory's name below the base, and the directory, where there is one.
    journal: Option<(OsString, OwnedFd)>,
}

/// The supervisor's side: the roots, each held with a shared lock for the daemon's lifetime.
#[derive(Debug)]
pub struct Sweeper {
    base: Option<OwnedFd>,
    roots: Vec<Held>,
    /// Roots not swept because another daemon serves them, and why the lock said so.
    shared: Vec<(PathBuf, sys::Errno)>,
}

impl Sweeper {
    /// Opens and locks every root; sweeps the roots no other daemon serves; makes the journal
    /// directory of each writable one, owned by the workers' identity (`workers`: uid, gid).
    pub fn start(roots: &[RootSpec], workers: (u32, u32)) -> Sweeper {
        let base = make_base(base());
        let mut held = Vec::new();
        let mut shared = Vec::new();
        for RootSpec { path, writable } in roots {
            let Ok(path) = std::fs::canonicalize(path) else { continue };
            let Ok(fd) = sys::open_dir(&path) else { continue };
            let Ok(meta) = sys::meta(fd.as_fd()) else { continue };
            let name = dir_name(&meta);
            let open = |base: &OwnedFd| sys::open_dir_for_listing(base.as_fd(), &name).ok();
            let alone = sys::try_lock_exclusive(fd.as_fd());
            match alone {
                Ok(()) => {
                    let mut report = sweep_legacy(fd.as_fd());
                    if let Some(dir) = base.as_ref().and_then(open) {
                        report.add(sweep_dir(fd.as_fd(), dir.as_fd(), |_| true));
                        // A read-only root's directory, left by a run that wrote there, goes.
                        if !*writable && let Some(base) = &base {
                            let _ = sys::remove_dir(base.as_fd(), &name);
                        }
                    }
                    if report.entries > 0 {
                        tracing::info!(root = %path.display(), entries = report.entries, removed = report.removed, restored = report.restored, "swept temporary files left by a previous run");
                    }
                }
                Err(errno) => shared.push((path.clone(), errno)),
            }
            if let Err(errno) = sys::lock_shared(fd.as_fd()) {
                tracing::warn!(root = %path.display(), %errno, "cannot hold the root's shared lock");
            }
            // Made once this daemon holds the root: a daemon stopping meanwhile, which removes
            // the directory only while no other daemon holds the root, leaves it alone.
            let journal = base.as_ref().filter(|_| *writable).and_then(|base| {
                make_dir(base.as_fd(), &name, workers, &path);
                open(base).map(|dir| (name.clone(), dir))
            });
            held.push(Held { path, fd, journal });
        }
        Sweeper { base, roots: held, shared }
    }

    /// Logs the roots `start` left to another daemon. Called once the daemon is sure to serve,
    /// so a start that fails says only why.
    pub fn report_shared(&self) {
        for (path, errno) in &self.shared {
            tracing::info!(root = %path.display(), %errno, "another daemon serves this root; its temporary files are its own: no start-up sweep");
        }
    }

    /// A worker died: removes what it left (it can no longer be writing).
    pub fn worker_died(&self, pid: u32) {
        let owner = owner_of(pid);
        for Held { path, fd, journal } in &self.roots {
            let Some((_, dir)) = journal else { continue };
            let report = sweep_dir(fd.as_fd(), dir.as_fd(), |o| o == owner);
            if report.removed + report.restored > 0 {
                tracing::info!(root = %path.display(), pid, removed = report.removed, restored = report.restored, "removed temporary files of a dead worker");
            }
        }
    }
}

/// Makes the base (0711: the workers pass through to their roots' directories, no one lists
/// them) where it does not exist, and opens it only if it is this user's own.
fn make_base(base: &Path) -> Option<OwnedFd> {
    if let (Some(parent), Some(name)) = (base.parent(), base.file_name())
        && let Ok(parent) = sys::open_dir(parent)
    {
        match sys::make_dir_with_mode(parent.as_fd(), name, 0o711) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => tracing::debug!(%errno, "cannot make the journal's base"),
        }
    }
    match open_base(base) {
        Ok(fd) => Some(fd),
        Err(errno) => {
            tracing::warn!(base = %base.display(), %errno, "no temporary-file journal: a temporary file a killed worker leaves stays (the base must be a directory of this user that no one else may write)");
            None
        }
    }
}

/// Makes a writable root's journal directory (0700, the workers' identity) where it does not
/// exist, and gives it to the workers where it does.
fn make_dir(base: BorrowedFd<'_>, name: &OsStr, (uid, gid): (u32, u32), root: &Path) {
    match sys::make_dir_with_mode(base, name, 0o700) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(errno) => {
            tracing::warn!(root = %root.display(), %errno, "cannot make the root's journal directory");
            return;
        }
    }
    let given = sys::open_dir_for_listing(base, name)
        .and_then(|dir| sys::set_dir_owner_and_mode(dir.as_fd(), uid, gid, 0o700));
    if let Err(errno) = given {
        tracing::warn!(root = %root.display(), %errno, "cannot give the root's journal directory to the workers");
    }
}

/// The daemon stops (its workers are gone, or never started): the last daemon on a root removes
/// its journal directory, if nothing is left in it.
impl Drop for Sweeper {
    fn drop(&mut self) {
        let Some(base) = &self.base else { return };
        for Held { path, fd, journal } in &self.roots {
            let Some((name, _)) = journal else { continue };
            // Turns this daemon's shared lock into an exclusive one only if no other daemon holds
            // the root; one that does still journals there.
            if sys::try_lock_exclusive(fd.as_fd()).is_err() {
                continue;
            }
            match sys::remove_dir(base.as_fd(), name) {
                Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY) => {}
                Err(errno) => {
                    tracing::warn!(root = %path.display(), %errno, "cannot remove the root's journal directory")
                }
            }
        }
    }
}

/// One parsed entry.
struct Record<'v> {
    owner: &'v str,
    identity: Option<&'v str>,
    /// For a removal: the name the checked file had, to which anything else goes back.
    restore: Option<OsString>,
    dir: Vec<u8>,
}

/// Reads an entry: this format (the directory in hex, ended by a newline; anything after it is
/// a longer earlier value's tail), or an earlier daemon's attribute (the directory's bytes to
/// the end).
fn parse(value: &[u8]) -> Option<Record<'_>> {
    let mut parts = value.splitn(4, |&b| b == b'\n');
    let format = parts.next()?;
    let owner = std::str::from_utf8(parts.next()?).ok()?;
    let identity = std::str::from_utf8(parts.next()?).ok()?;
    let rest = parts.next()?;
    let dir = if format == FORMAT.as_bytes() {
        let end = rest.iter().position(|&b| b == b'\n')?;
        super::hexname::decode(rest.get(..end)?)?
    } else if format == LEGACY_FORMAT.as_bytes() {
        rest.to_vec()
    } else {
        return None;
    };
    let (identity, restore) = match identity.split_once(RESTORE) {
        Some((identity, hex)) => (identity, Some(super::hexname::decode_name(hex.as_bytes())?)),
        None => (identity, None),
    };
    Some(Record { owner, identity: (identity != "-").then_some(identity), restore, dir })
}

impl SweepReport {
    fn add(&mut self, other: SweepReport) {
        self.entries += other.entries;
        self.removed += other.removed;
        self.restored += other.restored;
    }

    fn count(&mut self, settled: Option<Settled>) {
        self.entries += 1;
        match settled {
            Some(Settled::Removed) => self.removed += 1,
            Some(Settled::Restored) => self.restored += 1,
            Some(Settled::Left) | None => {}
        }
    }
}

/// Sweeps the entries in a root's journal directory whose owner `matches`.
fn sweep_dir(root: BorrowedFd<'_>, journal: BorrowedFd<'_>, matches: impl Fn(&str) -> bool) -> SweepReport {
    let mut report = SweepReport::default();
    let listed =
        sys::open_dir_for_listing(journal, OsStr::new("")).and_then(|d| sys::list_names(d, MAX_ENTRIES));
    let names = match listed {
        Ok(names) => names,
        Err(Errno::NOSPC) => {
            tracing::warn!(
                max = MAX_ENTRIES,
                "a journal directory holds more entries than a sweep reads: not swept"
            );
            return report;
        }
        Err(errno) => {
            tracing::warn!(%errno, "cannot list a journal directory");
            return report;
        }
    };
    for name in names {
        // Entries are written by the workers' identity: read as untrusted (never through a
        // link, never a FIFO or device, never more than an entry's size).
        let value = sys::open_read(journal, &name).and_then(|file| {
            if sys::meta(file.as_fd())?.kind != Kind::File {
                return Err(Errno::INVAL);
            }
            sys::read_at_most(&file, 0, MAX_ENTRY)
        });
        let record = value.as_deref().ok().and_then(parse);
        // A value this version cannot read has no owner: only a start-up sweep drops it.
        if !matches(record.as_ref().map_or("", |r| r.owner)) {
            continue;
        }
        report.count(record.map(|record| settle(root, name.as_bytes(), &record)));
        if let Err(errno) = sys::remove(journal, &name) {
            tracing::warn!(%errno, "cannot drop a journal entry");
        }
    }
    report
}

/// Finishes what an earlier daemon's entries on the root's attributes name, and drops them and
/// its anchor (start-up only: no daemon of that kind serves the root).
fn sweep_legacy(root: BorrowedFd<'_>) -> SweepReport {
    let mut report = SweepReport::default();
    let Ok(names) = sys::list_xattrs(root) else { return report };
    for key in names {
        if key == LEGACY_ANCHOR {
            if let Err(errno) = sys::remove_xattr(root, &key) {
                tracing::warn!(%errno, "cannot drop an earlier daemon's journal anchor");
            }
            continue;
        }
        let Some(hex) = key.as_bytes().strip_prefix(LEGACY_ENTRY_PREFIX.as_bytes()) else { continue };
        let value = sys::get_xattr(root, &key);
        report.count(value.as_deref().ok().and_then(parse).map(|record| settle(root, hex, &record)));
        if let Err(errno) = sys::remove_xattr(root, &key) {
            tracing::warn!(%errno, "cannot drop an earlier daemon's journal entry");
        }
    }
    report
}

/// What the sweep did with an entry's temporary name.
enum Settled {
    Removed,
    Restored,
    Left,
}

/// Removes the entry's temporary file (`.fsd-tmp-<hex>`) if it is the one the entry
/// describes; for a removal's entry, puts anything else back at its name.
fn settle(root: BorrowedFd<'_>, hex: &[u8], record: &Record<'_>) -> Settled {
    if hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Settled::Left;
    }
    let mut name = TEMP_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(hex);
    let name = OsString::from_vec(name);
    let mut dir: Option<OwnedFd> = None;
    for component in record.dir.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        if component == b"." || component == b".." {
            return Settled::Left;
        }
        let parent = dir.as_ref().map_or(root, AsFd::as_fd);
        let Ok(next) = sys::open_component(parent, OsStr::from_bytes(component)) else {
            return Settled::Left;
        };
        if !sys::meta(next.as_fd()).is_ok_and(|m| m.kind == Kind::Directory) {
            return Settled::Left;
        }
        dir = Some(next);
    }
    let dir = dir.as_ref().map_or(root, AsFd::as_fd);
    let Ok(meta) = sys::meta_at(dir, &name) else { return Settled::Left };
    // A removal's entry may name a link (a guarded remove of one); its identity says which.
    let kind_fits = match &record.restore {
        Some(_) => meta.kind != Kind::Directory,
        None => meta.kind == Kind::File,
    };
    let ours = kind_fits
        && match record.identity {
            Some(identities) => identities.split(',').any(|i| i == identity_of(&meta)),
            None => meta.size == 0 && meta.kind == Kind::File,
        };
    if ours {
        return if sys::remove(dir, &name).is_ok() { Settled::Removed } else { Settled::Left };
    }
    match &record.restore {
        Some(original) if meta.kind != Kind::Directory => {
            match sys::rename(dir, &name, dir, original, sys::RenameHow::NoReplace) {
                Ok(()) => Settled::Restored,
                Err(errno) => {
                    // Its name was taken again: kept beside it, visible, as a live removal does.
                    let kept = super::moves::keep_aside(dir, original, &name);
                    tracing::warn!(?kept, ?original, %errno, "an outside save a killed removal moved aside is kept at another name");
                    Settled::Left
                }
            }
        }
        _ => Settled::Left,
    }
}

/// Makes a root's journal directory as a supervisor does, for tests that run a backend without
/// one; [`Sweeper`]'s drop, or [`remove_dir_for`], removes it.
#[cfg(test)]
pub(crate) fn make_dir_for(root: &Path) {
    let base = make_base(base()).expect("a journal base on this machine");
    let meta = sys::meta(sys::open_dir(root).unwrap().as_fd()).unwrap();
    make_dir(base.as_fd(), &dir_name(&meta), sys::effective_ids(), root);
}

/// Removes a root's journal directory made by [`make_dir_for`], if it is empty.
#[cfg(test)]
pub(crate) fn remove_dir_for(root: &Path) {
    let base = open_base(base()).expect("a journal base on this machine");
    let Ok(root) = sys::open_dir(root) else { return };
    let _ = sys::remove_dir(base.as_fd(), &dir_name(&sys::meta(root.as_fd()).unwrap()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory as a root, with its journal directory as the supervisor makes it.
    struct Fixture {
        dir: tempfile::TempDir,
        root: OwnedFd,
        journal: OwnedFd,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        make_dir_for(dir.path());
        let root = sys::open_dir(dir.path()).unwrap();
        let base = open_base(base()).unwrap();
        let (_, journal) = open_dir_of(base.as_fd(), dir.path()).expect("the journal directory was made");
        Fixture { dir, root, journal }
    }

    impl Fixture {
        fn entries(&self) -> Vec<OsString> {
            sys::list_names(sys::open_dir_for_listing(self.journal.as_fd(), OsStr::new("")).unwrap(), 100)
                .unwrap()
        }

        fn sweep(&self) -> SweepReport {
            sweep_dir(self.root.as_fd(), self.journal.as_fd(), |_| true)
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            remove_dir_for(self.dir.path());
        }
    }

    #[test]
    fn entries_round_trip_and_foreign_values_do_not_parse() {
        fn check(value: &[u8], expected: Option<(&str, Option<&str>, &[u8])>) {
            let got = parse(value).map(|r| (r.owner.to_owned(), r.identity.map(str::to_owned), r.dir));
            let expected = expected.map(|(o, i, d)| (o.to_owned(), i.map(str::to_owned), d.to_vec()));
            assert_eq!(got, expected, "{}", String::from_utf8_lossy(value));
        }
        check(
            b"fsd-journal-2\nabc 42\n1:2:3.4\n7375622f646972\n",
            Some(("abc 42", Some("1:2:3.4"), b"sub/dir")),
        );
        // A shorter value written over a longer one: the longer one's tail follows the newline.
        check(b"fsd-journal-2\nabc 42\n-\n\n:5:6.7,8:9:1.2\n6469\n", Some(("abc 42", None, b"")));
        // An earlier daemon's attribute: the directory's bytes to the end.
        check(b"fsd-journal-1\nabc 42\n1:2:3.4\nsub/dir", Some(("abc 42", Some("1:2:3.4"), b"sub/dir")));
        check(b"fsd-journal-1\nabc 42\n-\n", Some(("abc 42", None, b"")));
        check(b"fsd-journal-2\nabc 42\n-\n7375", None);
        check(b"fsd-journal-2\nabc 42\n-\n7g\n", None);
        check(b"", None);
        check(b"fsd-journal-0\na\n-\n", None);
        check(b"something else", None);
    }

    /// An entry records the file a replace will swap out when staging already knows it, and
    /// says so, so an unchanged target is not recorded a second time before the exchange; a
    /// shorter value later (an undone replace's) reads as that value alone.
    #[test]
    fn an_entry_knows_which_replaced_file_it_names() {
        let f = fixture();
        std::fs::write(f.dir.path().join("a"), "a").unwrap();
        std::fs::write(f.dir.path().join("b"), "b").unwrap();
        let meta = |name: &str| sys::meta_at(f.root.as_fd(), OsStr::new(name)).unwrap();
        let (created, replaced) = (meta("a"), meta("b"));
        let journal = Journal::open(&[f.dir.path().to_path_buf()]);
        let temp = sys::temp_name().unwrap();
        let mut entry = journal.scope(0, &[OsString::from("sub")]).begin(&temp);
        assert!(!entry.names_replaced(&replaced), "nothing recorded as replaced yet");
        entry.identify(&created, Some(&replaced));
        assert!(entry.names_replaced(&replaced));
        assert!(!entry.names_replaced(&created));
        let name = OsString::from(&temp.to_str().unwrap()[TEMP_PREFIX.len()..]);
        assert_eq!(
            f.entries(),
            std::slice::from_ref(&name),
            "the entry is named by the temporary name's random part"
        );
        let read = || std::fs::read(f.journal_path().join(&name)).unwrap();
        let value = read();
        let record = parse(&value).unwrap();
        let both = format!("{},{}", identity_of(&created), identity_of(&replaced));
        assert_eq!((record.identity, record.dir.as_slice()), (Some(both.as_str()), &b"sub"[..]));
        entry.restore_to(OsStr::new("b"));
        let value = read();
        let record = parse(&value).unwrap();
        assert_eq!((record.identity, record.restore.as_deref()), (None, Some(OsStr::new("b"))));
        entry.end();
        assert!(f.entries().is_empty(), "end drops the entry");
        assert!(sys::list_xattrs(f.root.as_fd()).unwrap().is_empty(), "the root carries no attribute");
    }

    /// A worker killed in a guarded removal, after it moved the name aside: the sweep removes
    /// the checked file, puts an outside save caught by the rename back at its name, and keeps
    /// one whose name was taken again at a visible name beside it (`<name>.kept-<8 hex>`).
    #[test]
    fn the_sweep_finishes_a_killed_removal_without_losing_an_outside_save() {
        #[derive(Debug, Clone, Copy)]
        enum Then {
            /// Nothing happened between the check and the rename.
            Nothing,
            /// An editor's save replaced the checked file before the rename.
            Saved,
            /// That, and another save took the name after the rename.
            SavedTwice,
        }
        fn check(
            then: Then,
            expected_name: Option<&str>,
            expected_kept: Option<&str>,
            report: (usize, usize),
        ) {
            let f = fixture();
            let path = f.dir.path().join("f");
            std::fs::write(&path, "checked").unwrap();
            let checked = sys::meta_at(f.root.as_fd(), OsStr::new("f")).unwrap();
            let journal = Journal::open(&[f.dir.path().to_path_buf()]);
            let temp = sys::temp_name().unwrap();
            let _entry = journal.scope(0, &[]).begin_removal(&temp, OsStr::new("f"), &checked);
            let save = |text: &str| {
                std::fs::write(f.dir.path().join("save"), text).unwrap();
                std::fs::rename(f.dir.path().join("save"), &path).unwrap();
            };
            if !matches!(then, Then::Nothing) {
                save("first save");
            }
            std::fs::rename(&path, f.dir.path().join(&temp)).unwrap();
            if matches!(then, Then::SavedTwice) {
                save("second save");
            }
            let got = f.sweep();
            assert_eq!((got.entries, got.removed, got.restored), (1, report.0, report.1), "{then:?}");
            assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), expected_name, "{then:?}");
            assert!(!f.dir.path().join(&temp).exists(), "{then:?}: a save is hidden at the temporary name");
            let kept: Vec<_> = std::fs::read_dir(f.dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("f.kept-"))
                .map(|p| std::fs::read_to_string(p).unwrap())
                .collect();
            assert_eq!(kept.first().map(String::as_str), expected_kept, "{then:?}");
            assert!(f.entries().is_empty(), "{then:?}");
        }
        check(Then::Nothing, None, None, (1, 0));
        check(Then::Saved, Some("first save"), None, (0, 1));
        check(Then::SavedTwice, Some("second save"), Some("first save"), (0, 0));
    }

    /// A killed guarded removal of a link: the sweep removes the checked link (not a file an
    /// editor put at the temporary name's place, not the link's target), and puts a save that
    /// replaced the link back.
    #[test]
    fn the_sweep_finishes_a_killed_removal_of_a_link() {
        fn check(saved: bool, expected_name: Option<&str>, report: (usize, usize)) {
            let f = fixture();
            std::fs::write(f.dir.path().join("target"), "target").unwrap();
            let path = f.dir.path().join("l");
            std::os::unix::fs::symlink("target", &path).unwrap();
            let checked = sys::meta_at(f.root.as_fd(), OsStr::new("l")).unwrap();
            let journal = Journal::open(&[f.dir.path().to_path_buf()]);
            let temp = sys::temp_name().unwrap();
            let _entry = journal.scope(0, &[]).begin_removal(&temp, OsStr::new("l"), &checked);
            if saved {
                std::fs::write(f.dir.path().join("save"), "saved").unwrap();
                std::fs::rename(f.dir.path().join("save"), &path).unwrap();
            }
            std::fs::rename(&path, f.dir.path().join(&temp)).unwrap();
            let got = f.sweep();
            assert_eq!((got.entries, got.removed, got.restored), (1, report.0, report.1), "{saved}");
            assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), expected_name, "{saved}");
            assert!(std::fs::symlink_metadata(f.dir.path().join(&temp)).is_err(), "{saved}");
            assert_eq!(std::fs::read_to_string(f.dir.path().join("target")).unwrap(), "target");
        }
        check(false, None, (1, 0));
        check(true, Some("saved"), (0, 1));
    }

    /// Entries are read as untrusted: a link, a FIFO, a directory or a value this version
    /// cannot read at an entry's name is dropped by a start-up sweep without touching the tree.
    #[test]
    fn the_sweep_reads_entries_as_untrusted() {
        let f = fixture();
        std::fs::write(f.dir.path().join("kept"), "kept").unwrap();
        let journal_path = f.journal_path();
        let hex = "0123456789abcdef0123456789abcdef";
        std::fs::write(f.dir.path().join(format!("{TEMP_PREFIX}{hex}")), "user data").unwrap();
        std::os::unix::fs::symlink(f.dir.path().join("kept"), journal_path.join(hex)).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            journal_path.join("f".repeat(32)),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        std::fs::create_dir(journal_path.join("e".repeat(32))).unwrap();
        std::fs::write(journal_path.join("d".repeat(32)), "not an entry").unwrap();
        let got = f.sweep();
        assert_eq!((got.entries, got.removed, got.restored), (4, 0, 0));
        assert_eq!(
            std::fs::read_to_string(f.dir.path().join(format!("{TEMP_PREFIX}{hex}"))).unwrap(),
            "user data"
        );
        assert_eq!(std::fs::read_to_string(f.dir.path().join("kept")).unwrap(), "kept");
        assert_eq!(
            f.entries(),
            [OsString::from("e".repeat(32))],
            "a directory cannot be removed as an entry"
        );
        std::fs::remove_dir(journal_path.join("e".repeat(32))).unwrap();
    }

    /// An earlier daemon's entries on the root's attributes: a start-up sweep finishes them and
    /// removes them and the anchor.
    #[test]
    fn a_start_up_sweep_finishes_an_earlier_daemons_attribute_entries() {
        let f = fixture();
        let hex = "00112233445566778899aabbccddeeff";
        let temp = f.dir.path().join(format!("{TEMP_PREFIX}{hex}"));
        std::fs::write(&temp, "").unwrap();
        let key = format!("{LEGACY_ENTRY_PREFIX}{hex}");
        sys::set_xattr(f.root.as_fd(), OsStr::new(&key), b"fsd-journal-1\nold 1\n-\n").expect("user xattrs");
        sys::set_xattr(f.root.as_fd(), OsStr::new(LEGACY_ANCHOR), b"anchor").unwrap();
        let got = sweep_legacy(f.root.as_fd());
        assert_eq!((got.entries, got.removed), (1, 1));
        assert!(!temp.exists(), "the empty temporary file it names is removed");
        assert!(sys::list_xattrs(f.root.as_fd()).unwrap().is_empty(), "no attribute is left");
    }

    impl Fixture {
        fn journal_path(&self) -> PathBuf {
            base().join(dir_name(&sys::meta(self.root.as_fd()).unwrap()))
        }
    }
}
