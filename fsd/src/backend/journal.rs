//! The temporary-file journal, and the sweep that removes what a killed worker left.
//!
//! An atomic replace has a name on disk for a while (`.fsd-tmp-<128-bit hex>`: the new content
//! before its rename, the old content after a `RENAME_EXCHANGE`). A SIGKILL in that window
//! leaves the name behind. Removing files by that name pattern alone would be a "delete user
//! files that look like ours" primitive, so the daemon removes only what it can show it made:
//!
//! - Before it creates a temporary file, a worker records it as an extended attribute on the
//!   root directory the file is below: `user.fsd.tmp.<hex>` (the temporary name's random part),
//!   valued with the owner (daemon instance and worker pid), the directory below the root, and,
//!   once the file exists, its identity (device, inode, birth time) and, for a replace, the
//!   identity of the file the exchange will put at that name. The attribute is removed once the
//!   name is gone again. Nothing is written into the tree itself; `git status` and
//!   listings see nothing.
//! - The supervisor sweeps: at start-up every entry of every root, but only when it can take an
//!   exclusive `flock` on the root (no other daemon serves it; each daemon holds a shared lock for
//!   its lifetime), and after it reaps a dead worker the entries of that worker. An entry's file
//!   is removed only if it is a regular file at that name whose identity is one the entry names, or,
//!   for an entry recorded before the file's identity was known, an empty file (nothing was
//!   written into it yet). The directory is reached from the root descriptor one component at a
//!   time, never through a symbolic link. The entry is then dropped either way.
//! - A guarded removal first renames the file it checked to a temporary name, then removes it
//!   there only if it is still that file (see `moves::remove_checked`). Its entry names the
//!   checked file and, after ` restore `, the original name (hex): a file at the temporary
//!   name that is not the checked one is an outside save caught in the rename, and the sweep
//!   renames it back (never over a name taken since: then it is kept beside that name, visible,
//!   as `<name>.kept-<8 hex>`) instead of leaving it hidden.
//! - Where the attribute cannot be written (a filesystem without user extended attributes, a
//!   root the worker may not change, no space for the attribute) the write goes on unjournaled:
//!   such a temporary file is still removed on every error path, only not after a SIGKILL.
//!   Writes outside the configured roots (danger-full-access) are never journaled.
//!
//! - While a daemon serves a root, the root carries one more attribute, `user.fsd.journal` (the
//!   anchor, 384 bytes), set by the supervisor at start-up and removed by the last daemon to
//!   stop. Entries do not fit in an ext4 inode's own attribute space, so they live in the
//!   directory's attribute block; without the anchor that block is allocated by each write's
//!   first entry and freed by its last removal, and freeing waits for the block's I/O (0.15 ms
//!   on this disk when quiet, 2.8 ms while other builds wrote, against 4 µs with the block kept).
//!   The anchor is too large for the inode's own space (up to 512-byte inodes), so it keeps the
//!   block. The sweep ignores it.
//!
//! The journal covers process death, not power loss: the attributes are not fsynced.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::record::Store;
use crate::op::{RootSpec, TEMP_PREFIX};
use crate::sys::{self, Errno, Kind, Meta};

/// The extended attribute names of journal entries start with this.
pub const ENTRY_PREFIX: &str = "user.fsd.tmp.";
/// The environment variable that hands the supervisor's instance id to its children.
pub const INSTANCE_ENV: &str = "FSD_JOURNAL_INSTANCE";
const FORMAT: &str = "fsd-journal-1";
/// Separates a removal entry's identity from the hex of the name it restores (a reader that
/// predates removals matches no identity with it, so it removes nothing).
const RESTORE: &str = " restore ";
/// The anchor's name (outside `ENTRY_PREFIX`, so no sweep reads it as an entry).
pub const ANCHOR: &str = "user.fsd.journal";
/// Larger than the attribute space of an ext4 inode of up to 512 bytes (348 bytes), so the
/// anchor always lives in the attribute block, and small enough to leave most of a 4 KiB block
/// to entries.
const ANCHOR_BYTES: usize = 384;

/// The anchor's value: what it is for, padded to `ANCHOR_BYTES`.
fn anchor_value() -> Vec<u8> {
    let mut value = format!(
        "{FORMAT} anchor: kept while an fsd daemon journals its temporary files below this directory, \
         so that the directory's extended attribute block is not allocated and freed on every write\n"
    )
    .into_bytes();
    value.resize(ANCHOR_BYTES, b' ');
    value
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

/// A worker's journal: a descriptor per configured root it may write entries on.
#[derive(Debug)]
pub struct Journal {
    roots: Vec<Option<OwnedFd>>,
    owner: String,
}

impl Journal {
    /// Opens each configured root (canonical paths, in backend order) before confinement.
    pub fn open(roots: &[PathBuf]) -> Journal {
        let roots = roots.iter().map(|path| sys::open_dir(path).ok()).collect();
        Journal { roots, owner: owner() }
    }

    /// Where the temporary files of a target in `rel_dir` below root `root` are journaled.
    pub(super) fn scope<'a>(&'a self, root: usize, rel_dir: &[OsString]) -> Scope<'a> {
        let fd = self.roots.get(root).and_then(Option::as_ref).map(AsFd::as_fd);
        let dir = rel_dir.iter().map(|c| c.as_bytes()).collect::<Vec<_>>().join(&b'/');
        Scope { fd, owner: &self.owner, dir, record: None }
    }
}

/// The journal of one target directory.
#[derive(Debug)]
pub(super) struct Scope<'a> {
    fd: Option<BorrowedFd<'a>>,
    owner: &'a str,
    dir: Vec<u8>,
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
        let key = entry_key(temp);
        Entry {
            fd: self.fd,
            key,
            owner: self.owner,
            dir: self.dir,
            written: false,
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
        let hex: String = name.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        entry.record(Some(format!("{}{RESTORE}{hex}", identity_of(checked))));
        entry
    }
}

/// The journal key of a temporary name (none for a name without the prefix).
fn entry_key(temp: &OsStr) -> Option<OsString> {
    temp.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes()).map(|hex| {
        let mut key = ENTRY_PREFIX.as_bytes().to_vec();
        key.extend_from_slice(hex);
        OsString::from_vec(key)
    })
}

/// One journaled temporary file; `end` drops the record once the name is gone.
#[derive(Debug)]
pub(super) struct Entry<'a> {
    fd: Option<BorrowedFd<'a>>,
    key: Option<OsString>,
    owner: &'a str,
    dir: Vec<u8>,
    written: bool,
    /// The identity recorded for the file a replace swaps out, once recorded.
    replaced: Option<String>,
    record: Option<&'a Store>,
}

impl Entry<'_> {
    fn record(&mut self, identity: Option<String>) {
        let (Some(fd), Some(key)) = (self.fd, &self.key) else { return };
        let identity = identity.unwrap_or_else(|| "-".to_owned());
        let mut value = format!("{FORMAT}\n{}\n{identity}\n", self.owner).into_bytes();
        value.extend_from_slice(&self.dir);
        match sys::set_xattr(fd, key, &value) {
            Ok(()) => self.written = true,
            Err(errno) => {
                tracing::debug!(%errno, "temporary file not journaled");
                warn_once(errno);
            }
        }
    }

    /// Adds the created file's identity, before anything is written into it, and that of the
    /// file a replace will swap out to the temporary name.
    pub(super) fn identify(&mut self, created: &Meta, replaced: Option<&Meta>) {
        if self.written {
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
        if self.written {
            let hex: String = name.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
            self.record(Some(format!("-{RESTORE}{hex}")));
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
    pub(super) fn end(self) {
        if let (true, Some(fd), Some(key)) = (self.written, self.fd, &self.key)
            && let Err(errno) = sys::remove_xattr(fd, key)
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

/// The supervisor's side: the roots, each held with a shared lock for the daemon's lifetime.
#[derive(Debug)]
pub struct Sweeper {
    roots: Vec<(PathBuf, OwnedFd)>,
    /// Roots not swept because another daemon serves them, and why the lock said so.
    shared: Vec<(PathBuf, sys::Errno)>,
}

impl Sweeper {
    /// Opens and locks every root; sweeps the roots no other daemon serves; anchors the
    /// writable ones.
    pub fn start(roots: &[RootSpec]) -> Sweeper {
        let mut held = Vec::new();
        let mut shared = Vec::new();
        for RootSpec { path, writable } in roots {
            let Ok(path) = std::fs::canonicalize(path) else { continue };
            let Ok(fd) = sys::open_dir(&path) else { continue };
            match sys::try_lock_exclusive(fd.as_fd()) {
                Ok(()) => {
                    let report = sweep_root(fd.as_fd(), |_| true);
                    if report.entries > 0 {
                        tracing::info!(root = %path.display(), entries = report.entries, removed = report.removed, "swept temporary files left by a previous run");
                    }
                }
                Err(errno) => shared.push((path.clone(), errno)),
            }
            if let Err(errno) = sys::lock_shared(fd.as_fd()) {
                tracing::warn!(root = %path.display(), %errno, "cannot hold the root's shared lock");
            }
            // Where this fails, entries will too, and the workers say so (warn_once). A
            // read-only root is never written, not even an attribute.
            if *writable && let Err(errno) = sys::set_xattr(fd.as_fd(), OsStr::new(ANCHOR), &anchor_value()) {
                tracing::debug!(root = %path.display(), %errno, "no journal anchor");
            }
            held.push((path, fd));
        }
        Sweeper { roots: held, shared }
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
        for (path, fd) in &self.roots {
            let report = sweep_root(fd.as_fd(), |o| o == owner);
            if report.removed > 0 {
                tracing::info!(root = %path.display(), pid, removed = report.removed, "removed temporary files of a dead worker");
            }
        }
    }
}

/// The daemon stops (its workers are gone, or never started): the last daemon on a root removes
/// the anchor.
impl Drop for Sweeper {
    fn drop(&mut self) {
        for (path, fd) in &self.roots {
            // Turns this daemon's shared lock into an exclusive one only if no other daemon holds
            // the root; one that does still journals there and keeps the anchor.
            if sys::try_lock_exclusive(fd.as_fd()).is_err() {
                continue;
            }
            match sys::remove_xattr(fd.as_fd(), OsStr::new(ANCHOR)) {
                Ok(()) | Err(Errno::NODATA) => {}
                Err(errno) => {
                    tracing::warn!(root = %path.display(), %errno, "cannot remove the journal anchor")
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
    dir: &'v [u8],
}

fn parse(value: &[u8]) -> Option<Record<'_>> {
    let mut parts = value.splitn(4, |&b| b == b'\n');
    if parts.next()? != FORMAT.as_bytes() {
        return None;
    }
    let owner = std::str::from_utf8(parts.next()?).ok()?;
    let identity = std::str::from_utf8(parts.next()?).ok()?;
    let dir = parts.next()?;
    let (identity, restore) = match identity.split_once(RESTORE) {
        Some((identity, hex)) => (identity, Some(unhex(hex)?)),
        None => (identity, None),
    };
    Some(Record { owner, identity: (identity != "-").then_some(identity), restore, dir })
}

fn unhex(hex: &str) -> Option<OsString> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok());
    let bytes = bytes.collect::<Option<Vec<u8>>>()?;
    (!bytes.contains(&b'/') && bytes != b"." && bytes != b"..").then(|| OsString::from_vec(bytes))
}

/// Sweeps the entries of one root whose owner `matches`.
fn sweep_root(root: BorrowedFd<'_>, matches: impl Fn(&str) -> bool) -> SweepReport {
    let mut report = SweepReport::default();
    let Ok(names) = sys::list_xattrs(root) else { return report };
    for key in names.iter().filter(|n| n.as_bytes().starts_with(ENTRY_PREFIX.as_bytes())) {
        let Ok(value) = sys::get_xattr(root, key) else { continue };
        let record = parse(&value);
        // A value this version cannot read has no owner: only a start-up sweep drops it.
        if !matches(record.as_ref().map_or("", |r| r.owner)) {
            continue;
        }
        report.entries += 1;
        match record.map(|record| settle(root, key, &record)) {
            Some(Settled::Removed) => report.removed += 1,
            Some(Settled::Restored) => report.restored += 1,
            Some(Settled::Left) | None => {}
        }
        if let Err(errno) = sys::remove_xattr(root, key) {
            tracing::warn!(%errno, "cannot drop a journal entry");
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

/// Removes the entry's temporary file if it is the one the entry describes; for a removal's
/// entry, puts anything else back at its name.
fn settle(root: BorrowedFd<'_>, key: &OsStr, record: &Record<'_>) -> Settled {
    let Some(hex) = key.as_bytes().strip_prefix(ENTRY_PREFIX.as_bytes()) else { return Settled::Left };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_foreign_values_do_not_parse() {
        let value = b"fsd-journal-1\nabc 42\n1:2:3.4\nsub/dir";
        let record = parse(value).expect("parses");
        assert_eq!((record.owner, record.identity, record.dir), ("abc 42", Some("1:2:3.4"), &b"sub/dir"[..]));
        let record = parse(b"fsd-journal-1\nabc 42\n-\n").expect("parses");
        assert_eq!((record.identity, record.dir), (None, &b""[..]));
        for foreign in [&b""[..], b"fsd-journal-0\na\n-\n", b"something else"] {
            assert!(parse(foreign).is_none(), "{foreign:?}");
        }
    }

    /// An entry records the file a replace will swap out when staging already knows it, and
    /// says so, so an unchanged target is not recorded a second time before the exchange.
    #[test]
    fn an_entry_knows_which_replaced_file_it_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "a").unwrap();
        std::fs::write(dir.path().join("b"), "b").unwrap();
        let root = sys::open_dir(dir.path()).unwrap();
        let meta = |name: &str| sys::meta_at(root.as_fd(), OsStr::new(name)).unwrap();
        let (created, replaced) = (meta("a"), meta("b"));
        let journal = Journal::open(&[dir.path().to_path_buf()]);
        let temp = sys::temp_name().unwrap();
        let mut entry = journal.scope(0, &[]).begin(&temp);
        assert!(!entry.names_replaced(&replaced), "nothing recorded as replaced yet");
        entry.identify(&created, Some(&replaced));
        assert!(entry.names_replaced(&replaced));
        assert!(!entry.names_replaced(&created));
        let key = entry.key.clone().unwrap();
        let value = sys::get_xattr(root.as_fd(), &key).expect("this filesystem takes user xattrs");
        let record = parse(&value).unwrap();
        let both = format!("{},{}", identity_of(&created), identity_of(&replaced));
        assert_eq!(record.identity, Some(both.as_str()));
        entry.end();
        assert_eq!(sys::get_xattr(root.as_fd(), &key).err(), Some(Errno::NODATA), "end drops the entry");
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
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, "checked").unwrap();
            let root = sys::open_dir(dir.path()).unwrap();
            let checked = sys::meta_at(root.as_fd(), OsStr::new("f")).unwrap();
            let journal = Journal::open(&[dir.path().to_path_buf()]);
            let temp = sys::temp_name().unwrap();
            let _entry = journal.scope(0, &[]).begin_removal(&temp, OsStr::new("f"), &checked);
            let save = |text: &str| {
                std::fs::write(dir.path().join("save"), text).unwrap();
                std::fs::rename(dir.path().join("save"), &path).unwrap();
            };
            if !matches!(then, Then::Nothing) {
                save("first save");
            }
            std::fs::rename(&path, dir.path().join(&temp)).unwrap();
            if matches!(then, Then::SavedTwice) {
                save("second save");
            }
            let got = sweep_root(root.as_fd(), |_| true);
            assert_eq!((got.entries, got.removed, got.restored), (1, report.0, report.1), "{then:?}");
            assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), expected_name, "{then:?}");
            assert!(!dir.path().join(&temp).exists(), "{then:?}: a save is hidden at the temporary name");
            let kept: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("f.kept-"))
                .map(|p| std::fs::read_to_string(p).unwrap())
                .collect();
            assert_eq!(kept.first().map(String::as_str), expected_kept, "{then:?}");
            let entries = sys::list_xattrs(root.as_fd()).unwrap();
            assert!(!entries.iter().any(|n| n.as_bytes().starts_with(ENTRY_PREFIX.as_bytes())), "{then:?}");
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
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("target"), "target").unwrap();
            let path = dir.path().join("l");
            std::os::unix::fs::symlink("target", &path).unwrap();
            let root = sys::open_dir(dir.path()).unwrap();
            let checked = sys::meta_at(root.as_fd(), OsStr::new("l")).unwrap();
            let journal = Journal::open(&[dir.path().to_path_buf()]);
            let temp = sys::temp_name().unwrap();
            let _entry = journal.scope(0, &[]).begin_removal(&temp, OsStr::new("l"), &checked);
            if saved {
                std::fs::write(dir.path().join("save"), "saved").unwrap();
                std::fs::rename(dir.path().join("save"), &path).unwrap();
            }
            std::fs::rename(&path, dir.path().join(&temp)).unwrap();
            let got = sweep_root(root.as_fd(), |_| true);
            assert_eq!((got.entries, got.removed, got.restored), (1, report.0, report.1), "{saved}");
            assert_eq!(std::fs::read_to_string(&path).ok().as_deref(), expected_name, "{saved}");
            assert!(std::fs::symlink_metadata(dir.path().join(&temp)).is_err(), "{saved}");
            assert_eq!(std::fs::read_to_string(dir.path().join("target")).unwrap(), "target");
        }
        check(false, None, (1, 0));
        check(true, Some("saved"), (0, 1));
    }

    #[test]
    fn restore_names_round_trip_and_never_leave_the_directory() {
        let value = b"fsd-journal-1\nabc 42\n1:2:3.4 restore 612e74\nsub";
        let record = parse(value).expect("parses");
        assert_eq!((record.identity, record.restore.as_deref()), (Some("1:2:3.4"), Some(OsStr::new("a.t"))));
        for bad in ["2f", "2e2e", "2e", "", "6", "zz"] {
            let value = format!("fsd-journal-1\nabc 42\n1:2:3.4 restore {bad}\nsub");
            assert!(parse(value.as_bytes()).is_none(), "{bad}");
        }
    }
}
