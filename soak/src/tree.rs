//! What is on disk: leftover temporary files, the daemon's journal entries of a root, and
//! snapshots of a tree to prove that nothing outside the roots changed.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The prefix of fsd's temporary files (`.fsd-tmp-<128-bit hex>`).
pub const TEMP_PREFIX: &str = ".fsd-tmp-";
/// Where fsd journals its temporary files: this, then the daemon's uid, holds a directory per
/// root (`<major>:<minor>:<inode>` of the root), one file per entry.
pub const JOURNAL_BASE_PREFIX: &str = "/dev/shm/fsd-journal-";

/// Every `.fsd-tmp-*` name below `dir` (symlinks not followed).
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                out.push(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Where a root's journal directory is, whether or not it exists, for a daemon run by this
/// process's user.
pub fn journal_dir(root: &Path) -> PathBuf {
    let meta = std::fs::metadata(root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let base = format!("{JOURNAL_BASE_PREFIX}{}", rustix::process::geteuid().as_raw());
    Path::new(&base).join(format!("{major}:{minor}:{}", meta.ino()))
}

/// The journal entries of a root (names in its journal directory; none when it has none).
pub fn journal_entries(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(journal_dir(root)) else { return Vec::new() };
    let mut names: Vec<String> =
        entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// One node of a snapshot: type, mode bits and content (or link target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File { mode: u32, bytes: Vec<u8> },
    Dir { mode: u32 },
    Link(PathBuf),
    Other { mode: u32 },
}

/// Every node below `dir` except the subtree `skip`, by path relative to `dir`.
pub fn snapshot(dir: &Path, skip: Option<&Path>) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if skip.is_some_and(|s| path == s) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let rel = path.strip_prefix(dir).map(Path::to_path_buf).unwrap_or_else(|_| path.clone());
            let mode = meta.permissions().mode();
            let node = if meta.file_type().is_symlink() {
                Node::Link(std::fs::read_link(&path).unwrap_or_default())
            } else if meta.is_dir() {
                pending.push(path.clone());
                Node::Dir { mode }
            } else if meta.is_file() {
                Node::File { mode, bytes: std::fs::read(&path).unwrap_or_default() }
            } else {
                Node::Other { mode: meta.mode() }
            };
            out.insert(rel, node);
        }
    }
    out
}

/// The differences between two snapshots, one line each.
pub fn diff(before: &BTreeMap<PathBuf, Node>, after: &BTreeMap<PathBuf, Node>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, node) in before {
        match after.get(path) {
            None => out.push(format!("removed: {}", path.display())),
            Some(now) if now != node => out.push(format!("changed: {}", path.display())),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("added: {}", path.display()));
    }
    out
}
