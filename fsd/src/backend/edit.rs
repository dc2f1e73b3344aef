//! editText: the stale check, literal matching and the atomic write in one critical section under
//! the target's lock. A missing target is `FS_STALE_VERSION`, guarded or not.

use std::os::fd::AsFd;

use super::resolve::WalkOptions;
use super::write::{Place, current_checked, place_file, same_key};
use super::{Backend, read, text, version};
use crate::error::{Failure, FsError, StaleReason};
use crate::op::{EditGuard, Mode, Outcome};

impl Backend {
    pub(super) fn edit_text(
        &self,
        mode: Mode,
        path: &str,
        old: &str,
        new: &str,
        replace_all: bool,
        guard: Option<EditGuard>,
    ) -> Result<Outcome, Failure> {
        let options = WalkOptions { follow_final: true, create_parents: false };
        let resolved = match self.walk(mode, path, options) {
            Err(Failure { error: FsError::NotFound, path, .. }) => {
                return Err(Failure::new(FsError::Stale(StaleReason::Gone), path));
            }
            other => other?,
        };
        let fail = |e| self.fail(e, &resolved);
        if resolved.meta.is_none() {
            return Err(fail(FsError::Stale(StaleReason::Gone)));
        }
        self.may_change(mode, &resolved).map_err(fail)?;
        let target = self.target(&resolved);
        let _held = self.lock(&[&target.key], &resolved)?;

        let (file, meta) = current_checked(&resolved)
            .map_err(fail)?
            .ok_or_else(|| fail(FsError::Stale(StaleReason::Gone)))?;
        // The stale check comes before matching, so a stale edit never reports a match failure
        // against content the caller has not seen.
        if let Some(guard) = &guard {
            same_key(guard.target_key.as_ref(), &target.key).map_err(fail)?;
            if !version::holds(&guard.version, &file, &meta).map_err(fail)? {
                return Err(fail(FsError::Stale(StaleReason::Changed)));
            }
        }
        let edited = self.edited(&file, &meta, old, new, replace_all).map_err(fail)?;
        let after = &edited.after;
        let parent = resolved.parent.as_ref().ok_or_else(|| fail(FsError::NotRegularFile))?;
        let (file, new_meta) = place_file(
            parent.as_fd(),
            resolved.name(),
            after.as_bytes(),
            Place::Replace(&meta),
            self.journal_scope(&resolved),
        )
        .map_err(fail)?;
        Ok(Outcome::EditText {
            target,
            version: version::of_content(&file, &new_meta, after.as_bytes()),
            replacements: edited.count,
            change: self.change(Some(&edited.body), true, Some(&edited.replaced)),
        })
    }

    /// The literal replacement of an edit over the file under the lock: the file's text must
    /// decode, and the whole file, BOM included, stay within what a write of it could be.
    pub(super) fn edited(
        &self,
        file: &std::fs::File,
        meta: &crate::sys::Meta,
        old: &str,
        new: &str,
        replace_all: bool,
    ) -> Result<Edited, FsError> {
        let bytes = read::read_bounded(file, meta, self.limits.max_editable_bytes)?;
        let current = text::decode(&bytes)?;
        let (bom, body) = text::split_bom(current);
        let limit = self.limits.max_editable_bytes;
        let room = limit.saturating_sub(bom.len() as u64);
        let replaced = text::replace(body, old, new, replace_all, room).map_err(|e| match e {
            FsError::TooLarge { size, .. } => FsError::TooLarge { size: size + bom.len() as u64, limit },
            e => e,
        })?;
        Ok(Edited {
            after: format!("{bom}{}", replaced.text),
            body: body.to_owned(),
            replaced: replaced.text,
            count: replaced.count,
        })
    }
}

/// An edit's result: the whole new content (`after`, BOM included), the text before and after
/// without the BOM (the reply's change) and how many matches were replaced.
pub(super) struct Edited {
    pub(super) after: String,
    pub(super) body: String,
    pub(super) replaced: String,
    pub(super) count: usize,
}
