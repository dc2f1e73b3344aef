//! The objects an approved call may act on, opened for the confinement of the process that
//! performs it (`crate::role_confinement::approved_call`): by the same walk as the call, held to the same
//! binding, so the rights the process keeps are on the very inodes the approver was shown.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};

use super::resolve::{self, WalkOptions};
use super::{Backend, Mode};
use crate::error::{Denial, Failure, FsError};
use crate::op::{Binding, Last, ObjectId, Scope};
use crate::sys;

impl Backend {
    /// An `O_PATH` descriptor of the object `scope` names for `path` (walked with `follow` for
    /// its final link), checked to be the object `binding` names; anything else is
    /// `not_approved_object`.
    pub fn approved_object(
        &self,
        mode: Mode,
        path: &str,
        binding: &Binding,
        follow: bool,
        scope: Scope,
    ) -> Result<OwnedFd, Failure> {
        let refused = || Failure::new(FsError::Denied(Denial::NotApproved), path);
        let options = WalkOptions { follow_final: follow, create_parents: false };
        let (expected, fd) = match (scope, &binding.last) {
            (Scope::Object, Last::Is(object, _)) => {
                let resolved = self.walk(mode, path, options)?;
                let parent = resolved.parent.as_ref().ok_or_else(refused)?;
                let fd = sys::open_component(parent.as_fd(), resolved.name()).map_err(|_| refused())?;
                (*object, fd)
            }
            (Scope::Object, _) => return Err(refused()),
            (Scope::Directory, _) if binding.missing == 0 => {
                let resolved = self.walk(mode, path, options)?;
                (*binding.dirs.last().ok_or_else(refused)?, resolved.parent.ok_or_else(refused)?)
            }
            (Scope::Directory, _) => {
                // The deepest directory that exists: the path less its final name and the
                // directories the call would make, walked like any ancestor (no binding names
                // it), then held to the approval's last directory below.
                let mut known: Vec<OsString> =
                    resolve::raw_components(path, self.allow_backslash).map_err(|e| Failure::new(e, path))?;
                let keep = known.len().checked_sub(binding.missing + 1).ok_or_else(refused)?;
                known.truncate(keep);
                let prefix: Vec<String> =
                    known.iter().map(|c| resolve::escape_bytes(c.as_encoded_bytes())).collect();
                let ancestor = format!("/{}", prefix.join("/"));
                let resolved = self.walk(mode, &ancestor, WalkOptions { follow_final: true, ..options })?;
                let parent = resolved.parent.as_ref().ok_or_else(refused)?;
                let fd = sys::open_component(parent.as_fd(), resolved.name()).map_err(|_| refused())?;
                (*binding.dirs.last().ok_or_else(refused)?, fd)
            }
        };
        let found = sys::meta(fd.as_fd()).map_err(|_| refused())?;
        if ObjectId::of(&found) != expected {
            return Err(refused());
        }
        Ok(fd)
    }

    /// Descriptors of the configured roots (not the filesystem root danger-full-access adds),
    /// for a process that may read beneath them and nothing else (`role_confinement::reader`).
    pub fn root_descriptors(&self) -> Result<Vec<OwnedFd>, sys::Errno> {
        self.roots[..self.configured]
            .iter()
            .map(|root| {
                root.fd.try_clone().map_err(|e| sys::Errno::from_io_error(&e).unwrap_or(sys::Errno::IO))
            })
            .collect()
    }
}
