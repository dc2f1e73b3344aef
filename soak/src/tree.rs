//! What is on disk: leftover temporary files, the daemon's journal entries on a root, and
//! snapshots of a tree to prove that nothing outside the roots changed.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The prefix of fsd's temporary files (`.fsd-tmp-<128-bit hex>`).
pub const TEMP_PREFIX: &str = ".fsd-tmp-";
/// The prefix of fsd's journal entries: extended attributes on a root directory.
pub const JOURNAL_PREFIX: &str = "user.fsd.tmp.";

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

/// The journal entries (extended attribute names) on a root directory.
pub fn journal_entries(root: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 64 << 10];
    let Ok(n) = rustix::fs::listxattr(root, &mut buf[..]) else { return Vec::new() };
    buf[..n]
        .split(|&b| b == 0)
        .filter(|name| name.starts_with(JOURNAL_PREFIX.as_bytes()))
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
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
