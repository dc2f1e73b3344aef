//! The backend's errors: one variant per failing step, errno kept, and the one function that maps
//! them to stable wire codes. Reasons travel as codes and metadata (`reason`, `name`, `count`,
//! `size`, `limit`), never as sentences: the tools write what the model reads. The messages here
//! are terse log and generic-client labels.

use fsd_proto::{ErrorCode, WireError};

use crate::sys::Errno;

/// Why a guard no longer holds: the `reason` metadata of `FS_STALE_VERSION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// The file's bytes are not the ones the guard names.
    Changed,
    /// The guarded file is gone.
    Gone,
    /// The name now holds a symbolic link.
    Symlink,
    /// The path now resolves to another target key.
    OtherFile,
    /// Replaced by someone else between the check and the rename (the replace was undone).
    ChangedWhileWriting,
    /// A move's destination vanished right after the move.
    DestinationGone,
    /// The file was truncated, grew or was rewritten while it was read.
    ChangedWhileRead,
}

impl StaleReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::Changed => "changed",
            StaleReason::Gone => "gone",
            StaleReason::Symlink => "symlink",
            StaleReason::OtherFile => "other_file",
            StaleReason::ChangedWhileWriting => "changed_while_writing",
            StaleReason::DestinationGone => "destination_gone",
            StaleReason::ChangedWhileRead => "changed_while_read",
        }
    }
}

/// Why the mode fence refused: the `reason` metadata of `FS_SANDBOX_DENIED` (the mode itself
/// travels as `mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The call's mode writes nothing.
    ReadOnly,
    /// The target is not below a writable root.
    NotWritableRoot,
    /// A path component is a protected name (metadata `name`).
    Protected(String),
    /// A move whose source and destination are one file.
    SameFile,
    /// A path component is a git directory found by what it is, whatever its name (metadata
    /// `name`: its display path).
    GitDirectory(String),
    /// A path component is a mount point below the root that `allow_submounts` does not name
    /// (metadata `name`: its display path).
    Submount(String),
    /// A removal of a root itself.
    Root,
    /// A tree removal that would cross into another mount (metadata `name`).
    Mount(String),
}

impl Denial {
    pub fn as_str(&self) -> &'static str {
        match self {
            Denial::ReadOnly => "read_only",
            Denial::NotWritableRoot => "not_writable_root",
            Denial::Protected(_) => "protected",
            Denial::SameFile => "same_file",
            Denial::GitDirectory(_) => "git_directory",
            Denial::Submount(_) => "submount",
            Denial::Root => "root",
            Denial::Mount(_) => "mount",
        }
    }
}

/// Why a backend operation failed. Errno travels untouched until [`FsError::code`].
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{0}")]
    InvalidPath(&'static str),
    #[error("path resolves outside every root of this daemon")]
    OutsideRoots,
    #[error("denied: {}", .0.as_str())]
    Denied(Denial),
    #[error("not found")]
    NotFound,
    #[error("a path component is not a directory")]
    NotDirectory,
    #[error("not a regular file")]
    NotRegularFile,
    #[error("too many levels of symbolic links")]
    TooManyLinks,
    #[error("{0}")]
    NotText(&'static str),
    #[error("file is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("stale: {}", .0.as_str())]
    Stale(StaleReason),
    #[error("file already exists")]
    AlreadyExists,
    #[error("edit: no match")]
    EditNotFound,
    #[error("edit: {0} matches")]
    AmbiguousEdit(usize),
    #[error("directory has more than {0} entries")]
    TooManyEntries(usize),
    #[error("cannot keep the replaced file's owner: {0}")]
    KeepOwner(#[source] Errno),
    #[error("cannot keep the replaced file's ACL or extended attributes: {0}")]
    KeepAttributes(#[source] Errno),
    #[error("cannot resolve path: {0}")]
    Walk(#[source] Errno),
    #[error("cannot create parent directory: {0}")]
    MakeDir(#[source] Errno),
    #[error("cannot open file: {0}")]
    Open(#[source] Errno),
    #[error("cannot read file metadata: {0}")]
    Metadata(#[source] Errno),
    #[error("cannot read file: {0}")]
    Read(#[source] std::io::Error),
    #[error("cannot list directory: {0}")]
    List(#[source] Errno),
    #[error("cannot create temporary file: {0}")]
    CreateTemp(#[source] Errno),
    #[error("cannot write temporary file: {0}")]
    WriteTemp(#[source] std::io::Error),
    #[error("cannot set file mode: {0}")]
    SetMode(#[source] Errno),
    #[error("cannot sync: {0}")]
    Sync(#[source] Errno),
    #[error("cannot rename into place: {0}")]
    Rename(#[source] Errno),
    #[error("cannot remove file: {0}")]
    Remove(#[source] Errno),
    #[error("the call was cancelled")]
    Aborted,
    #[error("directory is not empty")]
    NotEmpty,
    #[error("the upload ended before its last byte")]
    Truncated,
    #[error("removed {removed} entries, then: {source}")]
    Partial {
        removed: u64,
        #[source]
        source: Box<FsError>,
    },
}

fn io_errno(err: &std::io::Error) -> Option<Errno> {
    err.raw_os_error().map(Errno::from_raw_os_error)
}

fn from_errno(errno: Errno) -> ErrorCode {
    match errno {
        Errno::NOENT => ErrorCode::NotFound,
        Errno::NOTDIR => ErrorCode::NotDirectory,
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ErrorCode::PermissionDenied,
        Errno::NOSPC | Errno::DQUOT | Errno::FBIG => ErrorCode::NoSpace,
        Errno::NAMETOOLONG => ErrorCode::InvalidPath,
        Errno::LOOP => ErrorCode::InvalidPath,
        Errno::ISDIR | Errno::NXIO => ErrorCode::NotRegularFile,
        Errno::NOTEMPTY => ErrorCode::NotEmpty,
        _ => ErrorCode::IoError,
    }
}

impl FsError {
    /// The stable code: the one place errno becomes a wire code. Refusals the daemon decided
    /// itself (outside roots, mode, protected path) are classified by what it knows, not errno.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::InvalidPath(_) | FsError::TooManyLinks => ErrorCode::InvalidPath,
            FsError::OutsideRoots | FsError::Denied(_) => ErrorCode::SandboxDenied,
            FsError::NotFound => ErrorCode::NotFound,
            FsError::NotDirectory => ErrorCode::NotDirectory,
            FsError::NotRegularFile => ErrorCode::NotRegularFile,
            FsError::NotText(_) => ErrorCode::NotText,
            FsError::TooLarge { .. } | FsError::TooManyEntries(_) => ErrorCode::TooLarge,
            FsError::Stale(_) => ErrorCode::StaleVersion,
            FsError::AlreadyExists => ErrorCode::NotObserved,
            FsError::EditNotFound => ErrorCode::EditNotFound,
            FsError::AmbiguousEdit(_) => ErrorCode::AmbiguousEdit,
            FsError::KeepOwner(_) | FsError::KeepAttributes(_) => ErrorCode::PermissionDenied,
            FsError::Aborted | FsError::Truncated => ErrorCode::Aborted,
            FsError::NotEmpty => ErrorCode::NotEmpty,
            FsError::Partial { source, .. } => source.code(),
            FsError::Walk(e)
            | FsError::MakeDir(e)
            | FsError::Open(e)
            | FsError::Metadata(e)
            | FsError::List(e)
            | FsError::CreateTemp(e)
            | FsError::SetMode(e)
            | FsError::Sync(e)
            | FsError::Rename(e)
            | FsError::Remove(e) => from_errno(*e),
            FsError::Read(e) | FsError::WriteTemp(e) => match io_errno(e) {
                Some(errno) => from_errno(errno),
                None => ErrorCode::IoError,
            },
        }
    }
}

/// A failure with the place it happened, ready for the wire.
#[derive(Debug)]
pub struct Failure {
    pub error: FsError,
    /// The display path: resolved where resolution got that far, else the request's path.
    pub path: String,
    pub target_key: Option<String>,
}

impl Failure {
    pub fn new(error: FsError, path: impl Into<String>) -> Failure {
        // A request path as the client sent it may hold raw control characters; replies and
        // logs carry it defanged (display paths are escaped already and pass unchanged).
        Failure { error, path: fsd_proto::names::sanitize(&path.into()), target_key: None }
    }

    pub fn into_wire(self) -> WireError {
        let code = self.error.code();
        let mut wire = WireError::new(code, self.path, self.error.to_string());
        if let Some(key) = self.target_key {
            wire = wire.with("target_key", key);
        }
        match self.error {
            FsError::Stale(reason) => wire = wire.with("reason", reason.as_str()),
            FsError::OutsideRoots => wire = wire.with("reason", "outside_roots"),
            FsError::Denied(denial) => {
                wire = wire.with("reason", denial.as_str());
                if let Denial::Protected(name)
                | Denial::GitDirectory(name)
                | Denial::Submount(name)
                | Denial::Mount(name) = denial
                {
                    wire = wire.with("name", name);
                }
            }
            FsError::TooLarge { size, limit } => {
                wire = wire.with("size", size.to_string()).with("limit", limit.to_string());
            }
            FsError::AmbiguousEdit(count) => wire = wire.with("count", count.to_string()),
            FsError::Partial { removed, .. } => wire = wire.with("removed", removed.to_string()),
            _ => {}
        }
        wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: FsError, expected: ErrorCode) {
        assert_eq!(error.code(), expected, "{error:?}");
    }

    #[test]
    fn errno_and_decisions_map_to_codes() {
        check(FsError::Open(Errno::NOENT), ErrorCode::NotFound);
        check(FsError::Open(Errno::ACCESS), ErrorCode::PermissionDenied);
        check(FsError::Rename(Errno::NOSPC), ErrorCode::NoSpace);
        check(FsError::Walk(Errno::NOTDIR), ErrorCode::NotDirectory);
        check(FsError::Read(std::io::Error::from_raw_os_error(5)), ErrorCode::IoError);
        check(FsError::OutsideRoots, ErrorCode::SandboxDenied);
        check(FsError::Denied(Denial::Protected(".git".into())), ErrorCode::SandboxDenied);
        check(FsError::Stale(StaleReason::Changed), ErrorCode::StaleVersion);
        check(FsError::AlreadyExists, ErrorCode::NotObserved);
        check(FsError::TooLarge { size: 2, limit: 1 }, ErrorCode::TooLarge);
        check(FsError::KeepOwner(Errno::PERM), ErrorCode::PermissionDenied);
    }

    fn reasons(error: FsError, expected: &[(&str, &str)]) {
        let wire = Failure::new(error, "/ws/a").into_wire();
        for (key, value) in expected {
            assert_eq!(wire.get(key), Some(*value), "{key} of {wire:?}");
        }
    }

    #[test]
    fn reasons_travel_as_metadata() {
        reasons(FsError::Stale(StaleReason::Gone), &[("reason", "gone")]);
        reasons(FsError::Stale(StaleReason::OtherFile), &[("reason", "other_file")]);
        reasons(
            FsError::Denied(Denial::Protected(".git".into())),
            &[("reason", "protected"), ("name", ".git")],
        );
        reasons(FsError::Denied(Denial::ReadOnly), &[("reason", "read_only")]);
        reasons(FsError::OutsideRoots, &[("reason", "outside_roots")]);
        reasons(FsError::AmbiguousEdit(3), &[("count", "3")]);
        reasons(FsError::TooLarge { size: 9, limit: 4 }, &[("size", "9"), ("limit", "4")]);
    }
}
