//! Git directories, found by what they are rather than by name: writes into one are refused
//! (its `config` or hooks would run code on the user's next git command), and so is the last
//! piece that would give a directory the shape git's discovery looks for.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;

use super::resolve::Resolved;
use super::{Backend, moves};
use crate::error::{Failure, FsError};
use crate::op::Mode;
use crate::sys;

impl Backend {
    /// The depth of the first git directory among the directories holding `rel` below `root`
    /// (0: the root itself), found by what it is, not by its name: a `.git` renamed by a shell,
    /// a bare repository, the target of a `.git` file's `gitdir:`. Writing its `config` or hooks
    /// would run code on the next git command. The walk opens the resolved components again,
    /// none of which is a link.
    pub(super) fn git_dir_above(&self, root: usize, rel: &[OsString]) -> Result<Option<usize>, FsError> {
        let Some(dirs) = rel.len().checked_sub(1) else { return Ok(None) };
        let mut dir = self.roots[root]
            .fd
            .try_clone()
            .map_err(|e| FsError::Walk(sys::Errno::from_io_error(&e).unwrap_or(sys::Errno::IO)))?;
        for (depth, name) in rel[..dirs].iter().enumerate() {
            if is_git_dir(&dir) {
                return Ok(Some(depth));
            }
            dir = match sys::open_component(sys::borrow(&dir), name) {
                Ok(next) => next,
                // Not there yet (a parent about to be created): nothing below it to protect.
                Err(sys::Errno::NOENT) => return Ok(None),
                Err(errno) => return Err(FsError::Walk(errno)),
            };
        }
        Ok(is_git_dir(&dir).then_some(dirs))
    }

    /// Whether writing or creating `name` in the directory `dir` below `root` would give that
    /// directory the shape git's repository discovery looks for: a model could otherwise build a
    /// bare repository piece by piece (`x/config` with `core.fsmonitor`, `x/objects/`, `x/refs/`,
    /// then `x/HEAD`), which the user's next git command inside `x` would run. Only the last piece
    /// is refused, whichever it is; a missing entry of that name counts as the kind that
    /// completes the shape. A directory that already has it is `git_dir_above`'s refusal.
    pub(super) fn would_become_git_dir(
        &self,
        root: usize,
        dir: &[OsString],
        name: &OsStr,
    ) -> Result<bool, FsError> {
        let Some(name) = name.to_str().filter(|n| GIT_DIR_ENTRIES.contains(n)) else { return Ok(false) };
        let mut fd = self.roots[root]
            .fd
            .try_clone()
            .map_err(|e| FsError::Walk(sys::Errno::from_io_error(&e).unwrap_or(sys::Errno::IO)))?;
        for component in dir {
            fd = match sys::open_component(sys::borrow(&fd), component) {
                Ok(next) => next,
                // A directory about to be made holds nothing but this name.
                Err(sys::Errno::NOENT) => return Ok(false),
                Err(errno) => return Err(FsError::Walk(errno)),
            };
        }
        let kind = |entry: &str| match sys::meta_at(sys::borrow(&fd), OsStr::new(entry)) {
            Ok(meta) => Some(meta.kind),
            Err(_) if entry == name => Some(sys::Kind::File),
            Err(_) => None,
        };
        Ok(git_dir_shape(kind))
    }

    /// Asked again once a write made `resolved`'s name, when that name is a piece of a git
    /// directory: two calls can each pass the check before either makes its piece (the check
    /// and the creation take no lock on the directory). Whichever looks after both pieces are
    /// there finds the shape complete and removes its own piece (`placed`, only if it is still
    /// that file), so the directory never keeps it.
    pub(super) fn undo_git_piece(
        &self,
        mode: Mode,
        resolved: &Resolved,
        placed: &sys::Meta,
    ) -> Result<(), Failure> {
        let Err(denied) = self.git_piece_still_allowed(mode, resolved) else { return Ok(()) };
        if let Some(parent) = resolved.parent.as_ref()
            && let Err(error) =
                moves::remove_checked(parent.as_fd(), resolved.name(), placed, self.journal_scope(resolved))
        {
            tracing::warn!(%error, "a git directory's last piece, made by a racing write, could not be removed");
        }
        Err(denied)
    }

    /// [`Backend::undo_git_piece`]'s question alone, for a move (which undoes by renaming back).
    pub(super) fn git_piece_still_allowed(&self, mode: Mode, resolved: &Resolved) -> Result<(), Failure> {
        let name = resolved.name();
        if mode != Mode::WorkspaceWrite || !name.to_str().is_some_and(|n| GIT_DIR_ENTRIES.contains(&n)) {
            return Ok(());
        }
        self.may_write(mode, resolved.root, &resolved.rel).map_err(|e| self.fail(e, resolved))
    }
}

/// Test hook: a write of a git directory's piece into a directory named `fsd-fault-pause-git`
/// pauses a second once the fence allowed it, so two calls can both pass the check before either
/// makes its piece.
#[cfg(feature = "fault-injection")]
pub(super) fn pause_after_git_check(rel: &[OsString]) {
    if let [.., dir, name] = rel
        && dir == "fsd-fault-pause-git"
        && name.to_str().is_some_and(|n| GIT_DIR_ENTRIES.contains(&n))
    {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The entries that together make a git directory (see [`git_dir_shape`]).
pub(super) const GIT_DIR_ENTRIES: [&str; 4] = ["HEAD", "objects", "refs", "commondir"];

/// Whether a directory whose entries have the kinds `kind` gives (`None`: absent) is a git
/// directory as git's discovery sees one: a `HEAD` (a file, or a link as older gits wrote it)
/// beside `objects` and `refs`, or beside `commondir` (a linked worktree's git directory). Git
/// only checks that `objects` and `refs` can be searched, which a link to a directory (or an
/// executable file) passes: any kind counts.
fn git_dir_shape(kind: impl Fn(&str) -> Option<sys::Kind>) -> bool {
    if !matches!(kind("HEAD"), Some(sys::Kind::File | sys::Kind::Symlink)) {
        return false;
    }
    let present = |name: &str| kind(name).is_some();
    (present("objects") && present("refs")) || present("commondir")
}

/// A git directory: a repository, bare or not, or a linked worktree's git directory.
fn is_git_dir(dir: &std::os::fd::OwnedFd) -> bool {
    git_dir_shape(|name| sys::meta_at(sys::borrow(dir), OsStr::new(name)).ok().map(|m| m.kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::Kind::{Directory as D, File as F, Symlink as L};

    /// `entries` exist; does writing or creating `name` (absent: as a file) complete the shape?
    fn check(entries: &[(&str, sys::Kind)], name: &str, expected: bool) {
        let kind = |entry: &str| {
            let found = entries.iter().find(|(n, _)| *n == entry).map(|(_, k)| *k);
            found.or((entry == name).then_some(F))
        };
        assert_eq!(git_dir_shape(kind), expected, "{entries:?} + {name}");
    }

    #[test]
    fn the_last_piece_of_a_git_directory_is_found_in_any_order() {
        // Each of the three pieces last.
        check(&[("objects", D), ("refs", D)], "HEAD", true);
        check(&[("HEAD", F), ("refs", D)], "objects", true);
        check(&[("HEAD", F), ("objects", D)], "refs", true);
        // A linked worktree's git directory.
        check(&[("HEAD", F)], "commondir", true);
        check(&[("commondir", F)], "HEAD", true);
        // Links and files pass git's search check too; a link can be HEAD.
        check(&[("objects", L), ("refs", F)], "HEAD", true);
        check(&[("HEAD", L), ("objects", D)], "refs", true);
        // Not yet: pieces on their own, or with ordinary neighbours.
        check(&[], "HEAD", false);
        check(&[], "config", false);
        check(&[("HEAD", F), ("objects", D)], "config", false);
        check(&[("objects", D)], "HEAD", false);
        check(&[("refs", D), ("config", F)], "objects", false);
        check(&[("HEAD", F)], "refs", false);
        // A directory named HEAD is no HEAD.
        check(&[("HEAD", D), ("objects", D)], "refs", false);
    }
}
