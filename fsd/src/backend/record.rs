//! The change record (docs/rewind.md): every change committed through the pipeline, who made it,
//! when, its targets, each one's version before and after, and the content each replaced or
//! removed, kept once by its SHA-256 in `state_dir/changes/blobs`. Checkpoints are points in the
//! same sequence.
//!
//! The record is one JSON-lines file (`log`), appended under an open-file-description lock on
//! `next` (the next sequence number, the bytes the kept before-images take and when the oldest
//! kept change was made). The lock is held from the before-images (`Backend::record_images`, in
//! `Backend::commit_all` before it places anything) to the change's line
//! (`Backend::record_after`), so a prune by another worker never removes a before-image a change
//! not yet written names. The bounds (`max_bytes`, `max_age_secs`) drop the oldest whole changes,
//! rewriting the log with a `dropped` line first that the listing reports.
//!
//! A before-image is hashed before the commit, but its blob is, where it can be, the replaced or
//! removed file itself: once the commit has taken that file out of the tree (to a journaled
//! temporary name), [`Store::retire`] renames it into `blobs` instead of unlinking it, so a
//! change costs the record a rename rather than a copy; it is proven there, out of the tree's
//! reach, to be the bytes hashed ([`Store::take_in`]). Where it cannot be (the store on another
//! filesystem or mount, a file with other hard links or another owner, more bytes waiting than
//! `MAX_WAITING_BYTES`), the bytes are copied before the commit; a file that did not come out
//! of the tree as hashed is copied after it, from the bytes held meanwhile ([`Store::settle`]).
//!
//! An approved call at danger-full-access runs in a process of its own whose Landlock domain
//! holds the approved objects only, not the record. Its worker hands it a carrier, an unlinked
//! file in the record's directory opened before the fork; the call's process takes its
//! before-images (in memory) and writes the whole change into the carrier once committed, and
//! the worker records it from there when the process ended ([`Backend::record_carried`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::Backend;
use super::pipeline::{Checked, Planned};
use super::resolve::Resolved;
use super::version;
use crate::config::RecordSettings;
use crate::error::{Failure, FsError};
use crate::op::{
    Author, ChangeEntry, Changes, ChangesQuery, FileDiff, Mode, Outcome, Request, Target, Visible,
};
use crate::sys::{self, Errno, Kind, Meta};

/// The record's directory beneath `state_dir`.
pub const DIR: &str = "changes";
/// Its before-images, by digest.
pub const BLOBS: &str = "blobs";
const LOG: &str = "log";
const NEXT: &str = "next";
/// The most bytes of before-images held in memory while their files wait to move into the store
/// (a transaction's files together); an image that would pass it is copied before the commit.
const MAX_WAITING_BYTES: usize = 8 << 20;

/// The record a worker writes: its directory and the blobs beneath it.
#[derive(Debug)]
pub struct Store {
    dir: OwnedFd,
    blobs: OwnedFd,
    /// The device and mount `blobs` is on: a file elsewhere cannot be renamed into it.
    at: (u64, u64),
    settings: RecordSettings,
    /// Before-images hashed for the change being committed whose blob is to be their file itself.
    /// One change at a time: it is filled and emptied under the counter's lock.
    waiting: Mutex<Vec<Waiting>>,
}

/// Removes the file a commit took out of the tree at `name` in `dir`: into `record` when it
/// is a before-image that waits for it ([`Store::retire`]), else unlinked. The one way such a
/// file leaves.
pub(super) fn retire(record: Option<&Store>, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    match record {
        Some(record) => record.retire(dir, name),
        None => sys::remove(dir, name),
    }
}

/// What [`Store::take_in`] did with the object at a retired name.
enum TakenIn {
    /// It is the image's blob now.
    Moved,
    /// It is gone, as its removal would have made it: another object than the file hashed,
    /// or that file no longer holding the bytes hashed (copied from them instead).
    Removed,
    /// Still at its name, for the caller to remove.
    Left,
    /// Neither removable nor put back (a directory whose name was taken again meanwhile):
    /// left under a temporary name in `blobs`, logged.
    Stranded(Errno),
}

/// A before-image waiting for its file to leave the tree ([`Store::retire`]).
#[derive(Debug)]
struct Waiting {
    digest: String,
    /// The file its bytes were read from, as it was when read.
    held: Meta,
    /// The bytes, for a copy should the file not come out as hashed (emptied once moved).
    bytes: Vec<u8>,
    size: u64,
    moved: bool,
}

impl Store {
    /// Opens the record the supervisor made (`state_dir/changes`), before confinement.
    pub fn open(state_dir: &std::path::Path, settings: RecordSettings) -> Result<Store, Errno> {
        let dir = sys::open_dir(&state_dir.join(DIR))?;
        let blobs = sys::open_dir(&state_dir.join(DIR).join(BLOBS))?;
        let meta = sys::meta(blobs.as_fd())?;
        Ok(Store { dir, blobs, at: (meta.dev, meta.mount), settings, waiting: Mutex::default() })
    }

    /// The counter file, locked: held until the returned guard drops.
    fn lock(&self) -> Result<Counter, FsError> {
        let file = sys::open_update(self.dir.as_fd(), OsStr::new(NEXT)).map_err(FsError::Open)?;
        sys::lock_wait(&file).map_err(FsError::Open)?;
        let mut text = String::new();
        (&file).read_to_string(&mut text).map_err(FsError::Read)?;
        let mut parts = text.split_whitespace().map(|p| p.parse::<u64>().unwrap_or(0));
        let (next, bytes, oldest) =
            (parts.next().unwrap_or(1).max(1), parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        Ok(Counter { file, next, bytes, oldest })
    }

    /// Keeps `bytes` by their digest (once: a digest already kept is not written again).
    /// Returns the digest and the bytes newly kept. Blobs are not synced (the record is
    /// history, not the files): one a crash cut short has the wrong size and is written again,
    /// and [`Store::blob`] checks the digest of what it returns.
    fn keep(&self, bytes: &[u8]) -> Result<(String, u64), FsError> {
        let digest = hex::encode(sha2::Sha256::digest(bytes));
        let Some(how) = self.missing(&digest, bytes.len())? else { return Ok((digest, 0)) };
        let name = OsString::from(&digest);
        let temp = sys::temp_name().map_err(FsError::CreateTemp)?;
        let mut file = sys::create_exclusive(self.blobs.as_fd(), &temp).map_err(FsError::CreateTemp)?;
        let written = file.write_all(bytes).map_err(FsError::WriteTemp);
        let placed = written.and_then(|()| {
            sys::rename(self.blobs.as_fd(), &temp, self.blobs.as_fd(), &name, how)
                .or_else(|e| if e == Errno::EXIST { Ok(()) } else { Err(e) })
                .map_err(FsError::Rename)
        });
        if placed.is_err() {
            let _ = sys::remove(self.blobs.as_fd(), &temp);
        }
        placed.map(|()| (digest, bytes.len() as u64))
    }

    /// How a blob of `size` bytes is to be placed at `digest` (`None`: it is there already,
    /// holding what its digest names). One that does not (a crash cut it short, or a writer
    /// that still held its file open changed it) is replaced.
    fn missing(&self, digest: &str, size: usize) -> Result<Option<sys::RenameHow>, FsError> {
        match sys::meta_at(self.blobs.as_fd(), OsStr::new(digest)) {
            Ok(meta) if meta.size == size as u64 && self.blob(digest).is_some() => Ok(None),
            Ok(_) => Ok(Some(sys::RenameHow::Replace)),
            Err(Errno::NOENT) => Ok(Some(sys::RenameHow::NoReplace)),
            Err(e) => Err(FsError::Metadata(e)),
        }
    }

    /// Keeps `bytes`, read from the file `held`, as [`Store::keep`] does, unless that file can
    /// become their blob itself once its change has taken it out of the tree: then they wait
    /// for it ([`Store::retire`]), and the bytes are counted when the change is recorded.
    fn keep_or_wait(&self, bytes: Vec<u8>, held: &Meta) -> Result<(String, u64), FsError> {
        let digest = hex::encode(sha2::Sha256::digest(&bytes));
        if self.missing(&digest, bytes.len())?.is_none() {
            return Ok((digest, 0));
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.iter().any(|w| w.digest == digest) {
            return Ok((digest, 0));
        }
        let held_bytes: usize = waiting.iter().map(|w| w.bytes.len()).sum();
        // Only a file this worker owns: it is made owner-read-only in the store (`take_in`),
        // which another owner's file would refuse, or leave unreadable to the worker.
        let movable = held.kind == Kind::File
            && held.nlink == 1
            && held.uid == sys::effective_ids().0
            && (held.dev, held.mount) == self.at
            && held_bytes + bytes.len() <= MAX_WAITING_BYTES;
        if !movable {
            drop(waiting);
            return self.keep(&bytes);
        }
        let size = bytes.len() as u64;
        waiting.push(Waiting { digest: digest.clone(), held: *held, bytes, size, moved: false });
        Ok((digest, 0))
    }

    /// Removes the file at `name` in `dir`, which a commit has just taken out of the tree (a
    /// replaced file after its exchange, a removed one set aside): when it is a before-image
    /// waiting for its blob, it goes into `blobs` instead ([`Store::take_in`]). Anything else is
    /// unlinked, as without a record.
    pub(super) fn retire(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.iter().any(|w| !w.moved)
            && let Ok(out) = sys::meta_at(dir, name)
            && out.kind == Kind::File
            && let Some(image) = waiting.iter_mut().find(|w| !w.moved && out.same_content(&w.held))
        {
            match self.take_in(dir, name, image) {
                TakenIn::Moved => {
                    image.moved = true;
                    image.bytes = Vec::new();
                    return Ok(());
                }
                // Copied when the change is recorded (`settle`).
                TakenIn::Removed => return Ok(()),
                // Not removed: the journal entry stays, and a sweep leaves what is not fsd's.
                TakenIn::Stranded(errno) => return Err(errno),
                TakenIn::Left => {}
            }
        }
        drop(waiting);
        sys::remove(dir, name)
    }

    /// Moves what is at `name` in `dir` into the store as `image`'s blob. The name is in the
    /// tree, where anyone may swap another object onto it after it was looked at, and the file
    /// may have been written since it was hashed with its mtime put back: so it is renamed
    /// first to a name of its own in `blobs`, out of the tree's reach, and only there proven
    /// to be one regular file with one link holding exactly the bytes hashed. Proven, it is
    /// made readable by its owner only (no execute, no set-id bit survives) and given its
    /// digest's name; anything else is removed there, as at its name (or, a directory, put back
    /// at its name, where removal would have refused it too).
    fn take_in(&self, dir: BorrowedFd<'_>, name: &OsStr, image: &Waiting) -> TakenIn {
        let blobs = self.blobs.as_fd();
        let Ok(temp) = sys::temp_name() else { return TakenIn::Left };
        if let Err(errno) = sys::rename(dir, name, blobs, &temp, sys::RenameHow::NoReplace) {
            tracing::debug!(%errno, "a before-image's file could not move into the record");
            return TakenIn::Left;
        }
        let proven = sys::meta_at(blobs, &temp).is_ok_and(|m| m.kind == Kind::File)
            && sys::open_read(blobs, &temp).is_ok_and(|file| {
                let held = sys::meta(file.as_fd());
                let mut bytes = Vec::new();
                held.is_ok_and(|m| m.nlink == 1 && m.same_content(&image.held))
                    && (&file).take(image.size + 1).read_to_end(&mut bytes).is_ok()
                    && hex::encode(sha2::Sha256::digest(&bytes)) == image.digest
                    && sys::set_mode(&file, 0o400).is_ok()
            });
        if proven
            && sys::rename(blobs, &temp, blobs, OsStr::new(&image.digest), sys::RenameHow::NoReplace).is_ok()
        {
            return TakenIn::Moved;
        }
        match sys::remove(blobs, &temp) {
            Ok(()) => TakenIn::Removed,
            Err(_) => {
                if let Err(errno) = sys::rename(blobs, &temp, dir, name, sys::RenameHow::NoReplace) {
                    tracing::warn!(%errno, ?temp, "an object swapped onto a retired file's name is left in the record's blobs");
                    return TakenIn::Stranded(errno);
                }
                TakenIn::Left
            }
        }
    }

    /// Once a change is committed: copies the before-images whose file did not move into the
    /// store (it never came out of the tree as hashed, or the rename failed). Returns the bytes
    /// the change's blobs newly take. One that cannot be copied now is logged: its change is
    /// on disk already, and a rewind to it finds that content missing.
    fn settle(&self) -> u64 {
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner));
        let mut stored = 0;
        for image in waiting {
            if image.moved {
                stored += image.size;
                continue;
            }
            match self.keep(&image.bytes) {
                Ok((_, new)) => stored += new,
                Err(error) => {
                    tracing::warn!(%error, digest = image.digest, "a before-image could not be kept");
                }
            }
        }
        stored
    }

    /// Drops what waits from a change that is not recorded, and the blobs its files became:
    /// still under the lock that change holds, each was missing when it was hashed, so no
    /// change recorded since names them (one recorded before may, whose blob was missing or
    /// spoiled: missing again is what it had).
    pub(super) fn forget_waiting(&self) {
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner));
        for image in waiting.iter().filter(|w| w.moved) {
            let _ = sys::remove(self.blobs.as_fd(), OsStr::new(&image.digest));
        }
    }

    /// A kept before-image's bytes; none when they are not what the digest names (a blob a
    /// crash cut short, or one changed on disk), so nothing is ever restored from them.
    pub(super) fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        let file = sys::open_read(self.blobs.as_fd(), OsStr::new(digest)).ok()?;
        let mut bytes = Vec::new();
        // Bounded: a writer that still holds a moved blob open may have grown it.
        file.take(self.settings.max_file_bytes.saturating_add(1)).read_to_end(&mut bytes).ok()?;
        (hex::encode(sha2::Sha256::digest(&bytes)) == digest).then_some(bytes)
    }

    /// Every line of the log, parsed (a line cut short by a crash mid-append is skipped).
    pub(super) fn lines(&self) -> Result<Vec<Line>, FsError> {
        let mut file = match sys::open_read(self.dir.as_fd(), OsStr::new(LOG)) {
            Ok(file) => file,
            Err(Errno::NOENT) => return Ok(Vec::new()),
            Err(e) => return Err(FsError::Open(e)),
        };
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(FsError::Read)?;
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }

    /// Appends one line under the counter's lock.
    fn append(&self, line: &Line) -> Result<(), FsError> {
        let mut text =
            serde_json::to_string(line).map_err(|e| FsError::WriteTemp(std::io::Error::other(e)))?;
        text.push('\n');
        let mut log = sys::open_append(self.dir.as_fd(), OsStr::new(LOG)).map_err(FsError::Open)?;
        log.write_all(text.as_bytes()).map_err(FsError::WriteTemp)
    }

    /// Drops the oldest whole changes while the kept before-images pass `max_bytes` or the
    /// oldest change passes `max_age_secs` (the newest change is always kept), rewrites the log
    /// with the `dropped` line first, and removes the before-images no kept change names.
    fn prune(&self, counter: &mut Counter, now_ms: u64) -> Result<(), FsError> {
        let lines = self.lines()?;
        let (mut through, mut dropped) = (0, 0);
        let mut kept: Vec<Line> = Vec::new();
        for line in lines {
            match line {
                Line::Dropped { through: t, changes, .. } => {
                    through = through.max(t);
                    dropped += changes;
                }
                other => kept.push(other),
            }
        }
        let oldest_allowed = now_ms.saturating_sub(self.settings.max_age_secs.saturating_mul(1000));
        // From the newest back: the suffix of changes whose images fit.
        let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
        let mut start = kept.len();
        let mut newest_seen = false;
        for (i, line) in kept.iter().enumerate().rev() {
            let Line::Change(entry) = line else { continue };
            let mut with = sizes.clone();
            for (digest, size) in entry.images() {
                with.insert(digest.to_owned(), size);
            }
            let total: u64 = with.values().sum();
            let fits = total <= self.settings.max_bytes && entry.at_ms >= oldest_allowed;
            if newest_seen && !fits {
                break;
            }
            newest_seen = true;
            sizes = with;
            start = i;
        }
        // Checkpoints before the first change kept stay (they name points, and hold nothing).
        let before: Vec<Line> =
            kept[..start].iter().filter(|l| matches!(l, Line::Checkpoint(_))).cloned().collect();
        for line in &kept[..start] {
            if let Line::Change(entry) = line {
                through = through.max(entry.seq);
                dropped += 1;
            }
        }
        if start == 0 {
            counter.bytes = sizes.values().sum();
            return Ok(());
        }
        let rest: Vec<Line> = kept.split_off(start);
        let mut text = serde_json::to_string(&Line::Dropped { through, changes: dropped, at_ms: now_ms })
            .map_err(|e| FsError::WriteTemp(std::io::Error::other(e)))?;
        text.push('\n');
        for line in before.iter().chain(&rest) {
            text.push_str(
                &serde_json::to_string(line).map_err(|e| FsError::WriteTemp(std::io::Error::other(e)))?,
            );
            text.push('\n');
        }
        let temp = sys::temp_name().map_err(FsError::CreateTemp)?;
        let mut file = sys::create_exclusive(self.dir.as_fd(), &temp).map_err(FsError::CreateTemp)?;
        file.write_all(text.as_bytes()).map_err(FsError::WriteTemp)?;
        sys::rename(self.dir.as_fd(), &temp, self.dir.as_fd(), OsStr::new(LOG), sys::RenameHow::Replace)
            .map_err(FsError::Rename)?;
        let names = sys::list_names(
            sys::open_dir_for_listing(self.blobs.as_fd(), OsStr::new("")).map_err(FsError::Open)?,
            usize::MAX,
        )
        .map_err(FsError::List)?;
        for name in names {
            if !sizes.contains_key(name.to_string_lossy().as_ref()) {
                let _ = sys::remove(self.blobs.as_fd(), &name);
            }
        }
        counter.bytes = sizes.values().sum();
        counter.oldest =
            rest.iter().find_map(|l| if let Line::Change(e) = l { Some(e.at_ms) } else { None }).unwrap_or(0);
        tracing::info!(through, dropped, "change record: oldest changes dropped to stay within its bounds");
        Ok(())
    }
}

/// The counter file, locked; its numbers as read, written back by [`Counter::save`].
struct Counter {
    file: File,
    next: u64,
    bytes: u64,
    oldest: u64,
}

impl Counter {
    fn save(&self) -> Result<(), FsError> {
        let text = format!("{} {} {}\n{}", self.next, self.bytes, self.oldest, " ".repeat(8));
        sys::write_all_at(&self.file, 0, text.as_bytes()).map_err(FsError::WriteTemp)
    }

    /// Takes the next sequence number.
    fn take(&mut self) -> u64 {
        let seq = self.next;
        self.next += 1;
        seq
    }
}

/// One line of the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Line {
    Change(Entry),
    Checkpoint(Point),
    /// The bounds dropped every change up to `through` (`changes` of them, in all).
    Dropped {
        through: u64,
        changes: u64,
        at_ms: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Point {
    seq: u64,
    at_ms: u64,
    author: Author,
    label: String,
}

/// One committed change.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Entry {
    pub(super) seq: u64,
    pub(super) at_ms: u64,
    pub(super) author: Author,
    pub(super) op: String,
    pub(super) files: Vec<FileChange>,
    /// The call failed after its change reached the disk (its sync failed, say): the change is
    /// there, though the caller was answered an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) failed: bool,
}

impl Entry {
    /// The before-images it names, with their sizes.
    fn images(&self) -> impl Iterator<Item = (&str, u64)> {
        self.files
            .iter()
            .filter_map(|f| f.before.as_ref())
            .filter_map(|i| i.digest.as_deref().map(|d| (d, i.size)))
    }
}

/// One target of a change: what was there before (`None`: nothing) and the version fsd left
/// (`None`: nothing).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FileChange {
    pub(super) key: String,
    pub(super) display: String,
    pub(super) before: Option<Image>,
    pub(super) after: Option<String>,
}

/// What a target held before a change.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Image {
    pub(super) kind: ImageKind,
    /// The content's digest (`None`: not kept, larger than `max_file_bytes` or not a file).
    pub(super) digest: Option<String>,
    pub(super) size: u64,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ImageKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// A change's before-images, taken before its commit, with the record's lock held until its
/// line is written ([`Backend::record_after`]).
pub(crate) struct Pending {
    /// The record's lock; none in an approved call's process, which carries its change to its
    /// worker instead (the before-images' bytes in `carried`).
    counter: Option<Counter>,
    files: Vec<(Target, Option<Image>, ResolvedAt)>,
    stored: u64,
    carried: Vec<(String, Vec<u8>)>,
}

/// What an approved call's process hands its worker: its change, with the before-images' bytes
/// (hex) by digest, for the worker to keep and record.
#[derive(Debug, Serialize, Deserialize)]
struct Carried {
    entry: Entry,
    blobs: Vec<(String, String)>,
}

/// Where a target is, to look at what the commit left there.
struct ResolvedAt {
    parent: Option<OwnedFd>,
    name: OsString,
}

/// `entry` with the next sequence number.
fn counter_take(counter: &mut Counter, entry: Entry) -> Entry {
    Entry { seq: counter.take(), ..entry }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn kind_of(kind: Kind) -> ImageKind {
    match kind {
        Kind::File => ImageKind::File,
        Kind::Directory => ImageKind::Directory,
        Kind::Symlink => ImageKind::Symlink,
        Kind::Other => ImageKind::Other,
    }
}

impl Backend {
    /// The change record this worker writes, and who the call being served is made for.
    pub fn with_record(mut self, store: Option<Store>) -> Backend {
        self.record = store;
        self
    }

    /// Who the call being served changes things for (`None`: the daemon's own call, unrecorded).
    pub fn set_author(&self, author: Option<Author>) {
        *self.author.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = author;
    }

    /// Serves a call made for `author` (a worker strips the wrapper itself, `worker::run`).
    pub(super) fn recorded(&self, mode: Mode, author: Author, request: Request) -> Result<Outcome, Failure> {
        self.set_author(Some(author));
        self.handle(mode, request)
    }

    /// Stops recording in this process (an approved call's own process, whose Landlock domain
    /// holds only the approved objects, not the record), or, with a `carrier`
    /// ([`Backend::record_carrier`]), carries the change to its worker in it, then (with its
    /// side of the handshake) waits until the worker has recorded it.
    pub fn forget_record(&self, carrier: Option<(File, Option<sys::call::ProcessSide>)>) {
        match carrier {
            Some(carrier) => {
                *self.carrier.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(carrier)
            }
            None => self.set_author(None),
        }
    }

    /// An unlinked file in the record's directory, made by a worker before it forks an approved
    /// call's process, which writes the change into it: the process's end (writing), then the
    /// worker's (reading). `None`: nothing to record (no record, or a call made by no client).
    pub fn record_carrier(&self) -> Option<(File, File)> {
        let (Some(store), Some(_)) = (self.record.as_ref(), self.author()) else { return None };
        let made = sys::temp_name().and_then(|temp| {
            let file = sys::create_exclusive(store.dir.as_fd(), &temp)?;
            let read = sys::open_read(store.dir.as_fd(), &temp);
            sys::remove(store.dir.as_fd(), &temp)?;
            Ok((file, read?))
        });
        match made {
            Ok(file) => Some(file),
            Err(errno) => {
                tracing::warn!(%errno, "no carrier for an approved call's change: it goes unrecorded");
                None
            }
        }
    }

    /// Records the change an approved call's process wrote into its carrier, however the
    /// process ended: a change is written there only once committed, and one cut short does
    /// not parse (nothing recorded).
    pub fn record_carried(&self, carrier: &File) {
        let Some(store) = self.record.as_ref() else { return };
        let size = sys::meta(carrier.as_fd()).map_or(0, |m| m.size);
        if size == 0 {
            return;
        }
        let carried = sys::read_at_most(carrier, 0, usize::try_from(size).unwrap_or(usize::MAX))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Carried>(&bytes).ok());
        let Some(Carried { entry, blobs }) = carried else {
            tracing::warn!(
                "an approved call's change could not be read from its carrier: it goes unrecorded"
            );
            return;
        };
        let kept = store.lock().and_then(|mut counter| {
            let mut stored = 0;
            for (digest, hex_bytes) in blobs {
                let bytes =
                    hex::decode(hex_bytes).map_err(|e| FsError::WriteTemp(std::io::Error::other(e)))?;
                let (kept, new) = store.keep(&bytes)?;
                if kept != digest {
                    return Err(FsError::WriteTemp(std::io::Error::other(
                        "a carried image is not its digest",
                    )));
                }
                stored += new;
            }
            Ok((counter_take(&mut counter, entry), counter, stored))
        });
        match kept {
            Ok((entry, mut counter, stored)) => self.write_entry(store, &mut counter, entry, stored),
            Err(error) => tracing::warn!(%error, "an approved call's change could not be recorded"),
        }
    }

    fn author(&self) -> Option<Author> {
        self.author.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Takes the record's lock for a change about to be committed (`None`: nothing is
    /// recorded: no record, or a call made by no client).
    pub(crate) fn record_begin(&self) -> Result<Option<Pending>, FsError> {
        let (Some(store), Some(_)) = (self.record.as_ref(), self.author()) else { return Ok(None) };
        let carried = self.carrier.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
        let counter = if carried { None } else { Some(store.lock()?) };
        // Under the lock: whatever a change cut short left waiting is not this one's (its
        // blobs stay: other changes may have been recorded since, naming them).
        store.waiting.lock().unwrap_or_else(PoisonError::into_inner).clear();
        Ok(Some(Pending { counter, files: Vec::new(), stored: 0, carried: Vec::new() }))
    }

    /// Keeps the before-images of a checked change's targets, before its commit places
    /// anything. One that cannot be kept fails the change: nothing is committed unrecorded.
    pub(crate) fn record_images(
        &self,
        pending: &mut Option<Pending>,
        checked: &Checked<'_>,
    ) -> Result<(), Failure> {
        let (Some(pending), Some(store)) = (pending.as_mut(), self.record.as_ref()) else { return Ok(()) };
        for planned in std::iter::once(&checked.plan.target).chain(&checked.plan.destination) {
            let image = self.image(store, planned, pending).map_err(|e| self.fail(e, &planned.resolved))?;
            pending.files.push((planned.target.clone(), image, at(&planned.resolved)));
        }
        Ok(())
    }

    /// What a planned target holds now, its content kept when it is a file within bounds (in an
    /// approved call's process, carried: kept by its worker, and left out when the process may
    /// not read it, as a change that only writes it holds no right to).
    fn image(
        &self,
        store: &Store,
        planned: &Planned,
        pending: &mut Pending,
    ) -> Result<Option<Image>, FsError> {
        let resolved = &planned.resolved;
        let Some(parent) = resolved.parent.as_ref().filter(|_| !planned.beyond) else { return Ok(None) };
        let meta = match sys::meta_at(parent.as_fd(), resolved.name()) {
            Ok(meta) => meta,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(FsError::Metadata(e)),
        };
        let within = meta.kind == Kind::File && meta.size <= store.settings.max_file_bytes;
        // The bytes, and the file they were read from as it was then.
        let read_held = || -> Result<(Vec<u8>, Meta), FsError> {
            let file = sys::open_read(parent.as_fd(), resolved.name()).map_err(FsError::Open)?;
            let bytes = super::read::read_bounded(&file, &meta, store.settings.max_file_bytes)?;
            Ok((bytes, sys::meta(file.as_fd()).map_err(FsError::Metadata)?))
        };
        let read = || read_held().map(|(bytes, _)| bytes);
        let digest = match (within, pending.counter.is_some()) {
            (false, _) => None,
            (true, true) => {
                let (bytes, held) = read_held()?;
                let (digest, new) = store.keep_or_wait(bytes, &held)?;
                pending.stored += new;
                Some(digest)
            }
            (true, false) => read().ok().map(|bytes| {
                let digest = hex::encode(sha2::Sha256::digest(&bytes));
                if !pending.carried.iter().any(|(d, _)| *d == digest) {
                    pending.carried.push((digest.clone(), bytes));
                }
                digest
            }),
        };
        Ok(Some(Image {
            kind: kind_of(meta.kind),
            digest,
            size: meta.size,
            mode: meta.mode & 0o7777,
            uid: meta.uid,
            gid: meta.gid,
            version: version_at(parent.as_fd(), resolved.name()).unwrap_or_else(|| version::of_meta(&meta)),
        }))
    }

    /// A change whose before-images could not all be taken, so nothing was placed: nothing is
    /// recorded, and nothing waits for a file any more.
    pub(crate) fn record_abandoned(&self, pending: Option<Pending>) {
        if let (Some(_), Some(store)) = (pending, self.record.as_ref()) {
            store.forget_waiting();
        }
    }

    /// After a commit that failed: records the change when it reached the disk all the same
    /// (a target no longer in the state its before-image says: placed, then its sync failed),
    /// marked `failed`. Under the call's locks still, so nothing else changed them meanwhile;
    /// a commit undone (a transaction's) left each target as it was, the change time aside.
    pub(crate) fn record_failed(&self, pending: Option<Pending>, op: &str) {
        let Some(pending) = pending else { return };
        let placed = pending.files.iter().any(|(_, before, at)| {
            let now = at.parent.as_ref().and_then(|p| version_at(p.as_fd(), &at.name));
            !same_state(now.as_deref(), before.as_ref().map(|i| i.version.as_str()))
        });
        if placed {
            self.record_change(Some(pending), op, true);
        } else if let Some(store) = self.record.as_ref() {
            store.forget_waiting();
        }
    }

    /// Writes a committed change's line: each target's version now. A record that cannot be
    /// written is logged: the change is made and answered all the same.
    pub(crate) fn record_after(&self, pending: Option<Pending>, op: &str) {
        self.record_change(pending, op, false);
    }

    /// [`Backend::record_after`], `failed`: the call answered an error (see `record_failed`).
    fn record_change(&self, pending: Option<Pending>, op: &str, failed: bool) {
        let (Some(mut pending), Some(store), Some(author)) = (pending, self.record.as_ref(), self.author())
        else {
            return;
        };
        let files = pending
            .files
            .drain(..)
            .map(|(target, before, at)| {
                let after = at.parent.as_ref().and_then(|p| version_at(p.as_fd(), &at.name));
                FileChange { key: target.key, display: target.display, before, after }
            })
            .collect();
        let at_ms = now_ms();
        // A rewind commits through the transaction or the single change's commit: it is
        // recorded as what it is.
        let op = if self.rewinding.load(std::sync::atomic::Ordering::Relaxed) { "rewind" } else { op };
        let entry = Entry { seq: 0, at_ms, author, op: op.to_owned(), files, failed };
        let Some(counter) = pending.counter.as_mut() else {
            // An approved call's process: the change goes to its worker, in the carrier.
            let carried = Carried {
                entry,
                blobs: pending.carried.drain(..).map(|(d, bytes)| (d, hex::encode(bytes))).collect(),
            };
            let mut carrier = self.carrier.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let written = serde_json::to_vec(&carried)
                .map_err(std::io::Error::other)
                .and_then(|bytes| carrier.as_ref().map_or(Ok(()), |(c, _)| sys::write_all_at(c, 0, &bytes)));
            if let Err(error) = written {
                tracing::warn!(%error, "a committed change could not be carried to its worker");
            }
            // Once only: the worker reads one word, records, and answers once.
            if let Some(handshake) = carrier.as_mut().and_then(|(_, handshake)| handshake.take()) {
                handshake.carried();
            }
            return;
        };
        let entry = counter_take(counter, entry);
        self.last_recorded.store(entry.seq, std::sync::atomic::Ordering::Relaxed);
        let stored = pending.stored + store.settle();
        self.write_entry(store, counter, entry, stored);
    }

    /// Appends a change's line under the lock `counter` holds, with the bytes its before-images
    /// newly took, pruning past the bounds. A record that cannot be written is logged: the
    /// change is made and answered all the same.
    fn write_entry(&self, store: &Store, counter: &mut Counter, entry: Entry, stored: u64) {
        let at_ms = entry.at_ms;
        counter.bytes += stored;
        if counter.oldest == 0 {
            counter.oldest = at_ms;
        }
        let written = store.append(&Line::Change(entry)).and_then(|()| {
            let over = counter.bytes > store.settings.max_bytes
                || counter.oldest < at_ms.saturating_sub(store.settings.max_age_secs.saturating_mul(1000));
            if over { store.prune(counter, at_ms) } else { Ok(()) }
        });
        if let Err(error) = written.and_then(|()| counter.save()) {
            tracing::warn!(%error, "a committed change could not be recorded");
        }
    }

    /// Names a point in the record: its sequence number.
    pub(super) fn checkpoint(&self, author: Author, label: String) -> Result<Outcome, Failure> {
        let store = self
            .record
            .as_ref()
            .ok_or_else(|| Failure::new(FsError::Denied(crate::error::Denial::NoChangeRecord), ""))?;
        let fail = |e| Failure::new(e, "");
        let mut counter = store.lock().map_err(fail)?;
        let id = counter.take();
        store.append(&Line::Checkpoint(Point { seq: id, at_ms: now_ms(), author, label })).map_err(fail)?;
        counter.save().map_err(fail)?;
        Ok(Outcome::Checkpoint { id })
    }

    /// The recorded changes after a point and, per file, its diff from then to now.
    pub(super) fn changes(&self, query: ChangesQuery) -> Result<Outcome, Failure> {
        let store = self
            .record
            .as_ref()
            .ok_or_else(|| Failure::new(FsError::Denied(crate::error::Denial::NoChangeRecord), ""))?;
        let lines = store.lines().map_err(|e| Failure::new(e, ""))?;
        let mut listing = Changes::default();
        let mut files: Vec<(FileDiff, Option<Image>, Option<String>, bool)> = Vec::new();
        for line in lines {
            let entry = match line {
                Line::Dropped { through, changes, .. } => {
                    listing.dropped_through = Some(through);
                    listing.dropped_changes = changes;
                    continue;
                }
                Line::Checkpoint(_) => continue,
                Line::Change(entry) => entry,
            };
            if entry.seq <= query.since
                || query.identity.as_ref().is_some_and(|i| *i != entry.author.identity)
                || query.session.as_ref().is_some_and(|s| Some(s) != entry.author.session.as_ref())
            {
                continue;
            }
            for file in &entry.files {
                let target = Target { key: file.key.clone(), display: file.display.clone() };
                match files.iter_mut().find(|(d, ..)| d.target.key == file.key) {
                    Some((diff, _, after, escalated)) => {
                        if !diff.authors.contains(&entry.author.identity) {
                            diff.authors.push(entry.author.identity.clone());
                        }
                        *after = file.after.clone();
                        *escalated |= entry.author.escalated;
                    }
                    None => files.push((
                        FileDiff {
                            target,
                            authors: vec![entry.author.identity.clone()],
                            existed: file.before.is_some(),
                            exists: false,
                            changed_outside: false,
                            shown: Visible::NotText,
                        },
                        file.before.clone(),
                        file.after.clone(),
                        entry.author.escalated,
                    )),
                }
            }
            listing.entries.push(ChangeEntry {
                seq: entry.seq,
                at_ms: entry.at_ms,
                targets: entry
                    .files
                    .iter()
                    .map(|f| Target { key: f.key.clone(), display: f.display.clone() })
                    .collect(),
                author: entry.author,
                op: entry.op,
                failed: entry.failed,
            });
        }
        for (mut diff, before, after, escalated) in files {
            let now = self.now_at(query.reader_mode, &diff.target.display);
            diff.exists = now.as_ref().is_some_and(|(v, _)| v.is_some());
            diff.changed_outside =
                now.as_ref().is_some_and(|(v, _)| !same_state(v.as_deref(), after.as_deref()));
            diff.shown = match now {
                _ if escalated => Visible::Escalated,
                None => Visible::NotReadable,
                Some((_, content)) => {
                    let old = match &before {
                        None => Some(Vec::new()),
                        Some(image) => image.digest.as_deref().and_then(|d| store.blob(d)),
                    };
                    match (old.map(String::from_utf8), content.map(String::from_utf8)) {
                        (Some(Ok(old)), Some(Ok(new))) => {
                            Visible::Diff(unified(&old, &new, &diff.target.display))
                        }
                        _ => Visible::NotText,
                    }
                }
            };
            listing.files.push(diff);
        }
        Ok(Outcome::Changes(listing))
    }

    /// A file as the caller may read it at its own mode now: its version (`None`: nothing
    /// there) and content (`None`: not a file within the reply bound); `None`: it may not.
    pub(super) fn now_at(&self, mode: Mode, display: &str) -> Option<(Option<String>, Option<Vec<u8>>)> {
        let options = super::resolve::WalkOptions { follow_final: false, create_parents: false };
        let resolved = match self.walk(mode, display, options) {
            Ok(resolved) => resolved,
            Err(Failure { error: FsError::NotFound, .. }) => return Some((None, Some(Vec::new()))),
            Err(_) => return None,
        };
        let Some(meta) = resolved.meta else { return Some((None, Some(Vec::new()))) };
        let parent = resolved.parent.as_ref()?;
        let content = (meta.kind == Kind::File)
            .then(|| sys::open_read(parent.as_fd(), resolved.name()).ok())
            .flatten()
            .and_then(|f| super::read::read_bounded(&f, &meta, self.limits.max_diff_text_bytes).ok());
        Some((
            Some(version_at(parent.as_fd(), resolved.name()).unwrap_or_else(|| version::of_meta(&meta))),
            content,
        ))
    }
}

/// The version of what `name` in `dir` holds (`None`: nothing): a file's as a guard names it
/// (opened, with its generation), anything else's from its metadata.
pub(super) fn version_at(dir: std::os::fd::BorrowedFd<'_>, name: &OsStr) -> Option<String> {
    let meta = sys::meta_at(dir, name).ok()?;
    if meta.kind == Kind::File
        && let Ok(file) = sys::open_read(dir, name)
        && let Ok(opened) = sys::meta(file.as_fd())
    {
        return Some(version::of_file(&file, &opened));
    }
    Some(version::of_meta(&meta))
}

/// Whether what a target holds now (`now`) is what the record says fsd left there (`left`):
/// the same version but for its change time, which a rewind's restored mode moves on.
pub(super) fn same_state(now: Option<&str>, left: Option<&str>) -> bool {
    let without_ctime = |v: &str| v.rsplitn(3, '.').nth(2).map(str::to_owned);
    match (now, left) {
        (None, None) => true,
        (Some(now), Some(left)) => without_ctime(now) == without_ctime(left),
        _ => false,
    }
}

fn at(resolved: &Resolved) -> ResolvedAt {
    ResolvedAt {
        parent: resolved.parent.as_ref().and_then(|p| p.try_clone().ok()),
        name: resolved.name().to_owned(),
    }
}

/// The unified diff of a file's content at the point and now.
pub(super) fn unified(old: &str, new: &str, display: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a{display}"), &format!("b{display}"))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob is kept once by its digest; one a crash cut short is written again, and one whose
    /// bytes are not what its digest names is never returned (nothing is restored from it) and
    /// is written again by the next change that keeps that content.
    #[test]
    fn a_blob_is_returned_only_when_its_bytes_are_what_its_digest_names() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(state.path().join(DIR).join(BLOBS)).unwrap();
        let settings = RecordSettings {
            max_bytes: 1 << 20,
            max_age_secs: 3600,
            max_file_bytes: 1 << 20,
            operators: Vec::new(),
        };
        let store = Store::open(state.path(), settings).unwrap();
        let path = |digest: &str| state.path().join(DIR).join(BLOBS).join(digest);
        let (digest, kept) = store.keep(b"hello\n").unwrap();
        assert_eq!(kept, 6);
        assert_eq!(store.keep(b"hello\n").unwrap(), (digest.clone(), 0));
        assert_eq!(store.blob(&digest).as_deref(), Some(&b"hello\n"[..]));
        // Cut short by a crash (renamed before its data reached the disk).
        std::fs::write(path(&digest), b"").unwrap();
        assert_eq!(store.blob(&digest), None);
        assert_eq!(store.keep(b"hello\n").unwrap(), (digest.clone(), 6));
        assert_eq!(store.blob(&digest).as_deref(), Some(&b"hello\n"[..]));
        // Changed on disk, same size.
        std::fs::write(path(&digest), b"HELLO\n").unwrap();
        assert_eq!(store.blob(&digest), None);
        // Kept again, not taken for kept because its size is right.
        assert_eq!(store.keep(b"hello\n").unwrap(), (digest.clone(), 6));
        assert_eq!(store.blob(&digest).as_deref(), Some(&b"hello\n"[..]));
    }

    /// How a before-image read from a file of the tree is kept, by what happens to that file
    /// after it was hashed: moved into the store (owner-read-only) when it leaves the tree as
    /// hashed, else copied (before the commit for a file with another link, after it for one
    /// changed since, its mtime put back or not). Another object swapped onto its temporary
    /// name never lands in the store.
    #[test]
    fn a_before_image_is_its_file_moved_into_the_store_when_it_leaves_the_tree_as_hashed() {
        use std::os::unix::fs::MetadataExt;

        #[derive(Debug, PartialEq)]
        enum Kept {
            /// The blob is the tree's file itself (same inode).
            Moved,
            /// The blob is a copy, of the bytes hashed.
            Copied,
        }
        fn check(case: &str, expected: Kept) {
            let state = tempfile::tempdir().unwrap();
            let tree = tempfile::tempdir_in(state.path()).unwrap();
            std::fs::create_dir_all(state.path().join(DIR).join(BLOBS)).unwrap();
            let settings = RecordSettings {
                max_bytes: 1 << 20,
                max_age_secs: 3600,
                max_file_bytes: 1 << 20,
                operators: vec![],
            };
            let store = Store::open(state.path(), settings).unwrap();
            let file = tree.path().join("f");
            std::fs::write(&file, b"before\n").unwrap();
            if case == "another link" {
                std::fs::hard_link(&file, tree.path().join("g")).unwrap();
            }
            if case == "set-user-id" {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
            }
            let copied_first = case == "another link";
            let ino = std::fs::metadata(&file).unwrap().ino();
            let dir = sys::open_dir(tree.path()).unwrap();
            let opened = sys::open_read(dir.as_fd(), OsStr::new("f")).unwrap();
            let held = sys::meta(opened.as_fd()).unwrap();
            let (digest, now) = store.keep_or_wait(b"before\n".to_vec(), &held).unwrap();
            let blob = state.path().join(DIR).join(BLOBS).join(&digest);
            // Copied at once only when the file cannot become the blob.
            assert_eq!(blob.exists(), copied_first, "{case}");
            assert_eq!(now, if copied_first { 7 } else { 0 }, "{case}");
            match case {
                "changed after it was hashed" => std::fs::write(&file, b"after, longer\n").unwrap(),
                "rewritten, its mtime put back" => {
                    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
                    std::fs::write(&file, b"BEFORE\n").unwrap();
                    std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
                }
                _ => {}
            }
            // The commit takes it out of the tree (here, to a temporary name), then retires it.
            std::fs::rename(&file, tree.path().join(".fsd-tmp-x")).unwrap();
            if case == "a directory swapped onto its temporary name" {
                // What `take_in` finds once it moved the name: a directory, not the file
                // looked at a moment before. It goes back to its name; nothing is kept.
                std::fs::create_dir(tree.path().join("d")).unwrap();
                let image = Waiting { digest: digest.clone(), held, bytes: vec![], size: 7, moved: false };
                assert!(
                    matches!(store.take_in(dir.as_fd(), OsStr::new("d"), &image), TakenIn::Left),
                    "{case}"
                );
                assert!(tree.path().join("d").is_dir(), "{case}: the directory is back at its name");
                assert!(!blob.exists(), "{case}");
            }
            store.retire(dir.as_fd(), OsStr::new(".fsd-tmp-x")).unwrap();
            assert!(!tree.path().join(".fsd-tmp-x").exists(), "{case}: the temporary name is gone");
            let settled = store.settle();
            assert_eq!(settled, if copied_first { 0 } else { 7 }, "{case}");
            assert_eq!(store.blob(&digest).as_deref(), Some(&b"before\n"[..]), "{case}");
            let kept =
                if std::fs::metadata(&blob).unwrap().ino() == ino { Kept::Moved } else { Kept::Copied };
            assert_eq!(kept, expected, "{case}");
            if kept == Kept::Moved {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&blob).unwrap().permissions().mode() & 0o7777;
                assert_eq!(mode, 0o400, "{case}: no execute, no set-id bit survives in the store");
            }
            let strays = std::fs::read_dir(state.path().join(DIR).join(BLOBS)).unwrap().count();
            assert_eq!(strays, 1, "{case}: the blob and nothing else");
            assert!(store.waiting.lock().unwrap().is_empty(), "{case}: nothing waits after settling");
        }
        check("one link", Kept::Moved);
        check("another link", Kept::Copied);
        check("set-user-id", Kept::Moved);
        check("changed after it was hashed", Kept::Copied);
        check("rewritten, its mtime put back", Kept::Copied);
        check("a directory swapped onto its temporary name", Kept::Moved);
    }
}
