//! The apply_patch behind an escalation request, applied by the daemon before anyone is asked:
//! every hunk of every file must match what the file holds (or what an earlier operation of the
//! same patch left there), so a patch that would fail never reaches a person or a rule file,
//! and the approval binds the content the patch produces, shown to the approver as a diff.

use std::collections::HashMap;
use std::sync::Arc;

use fsd_patch::{HunkErrorKind, Op as PatchOp};
use fsd_proto::{ErrorCode, WireError, v1};
use tonic::Status;

/// The parsed patch and what its earlier operations did to each target.
#[derive(Debug)]
pub(super) struct PatchCheck {
    /// Shared with the check threads that apply them (`dispatch::cpu`).
    ops: Arc<Vec<PatchOp>>,
    /// Target key → content after an earlier operation (`None`: deleted or moved away).
    touched: HashMap<String, Option<String>>,
}

/// What one operation of the patch does to the file it names.
#[derive(Debug)]
pub(super) enum Effect {
    /// Writes this content (add, update).
    Write(String),
    /// Removes the file (delete).
    Remove,
    /// Moves it, with new content when the update changed it.
    Move(Option<String>),
}

/// How the escalated op must be spelled for each kind of patch operation.
fn expected_op(op: &PatchOp) -> &'static str {
    match op {
        PatchOp::Add { .. } => "writeText",
        PatchOp::Delete { .. } => "deleteFile",
        PatchOp::Update { move_to: Some(_), .. } => "moveFile",
        PatchOp::Update { move_to: None, .. } => "writeText",
    }
}

impl PatchCheck {
    /// Parses the patch and checks it lists the same operations as `ops`, in order.
    pub fn new(text: &str, ops: &[v1::EscalatedOp]) -> Result<PatchCheck, Status> {
        let patch = fsd_patch::parse(text)
            .map_err(|e| Status::invalid_argument(format!("the escalated patch does not parse: {e}")))?;
        let same = patch.ops.len() == ops.len()
            && patch.ops.iter().zip(ops).all(|(p, o)| expected_op(p) == o.op.as_str());
        if !same {
            return Err(Status::invalid_argument(
                "the escalated ops are not the operations of the escalated patch, in order",
            ));
        }
        Ok(PatchCheck { ops: Arc::new(patch.ops), touched: HashMap::new() })
    }

    /// What an earlier operation of this patch left at `key`: `None` when none touched it.
    pub fn earlier(&self, key: &str) -> Option<Option<&str>> {
        self.touched.get(key).map(Option::as_deref)
    }

    /// What applies operation `index`, apart from this check, so it can run on another thread.
    pub fn applier(&self, index: usize) -> Applier {
        Applier { ops: self.ops.clone(), index }
    }

    /// Applies operation `index` to `current` (see [`Applier::apply`]).
    #[cfg(test)]
    pub fn apply(&self, index: usize, path: &str, current: Option<&str>) -> Result<Effect, WireError> {
        self.applier(index).apply(path, current)
    }

    /// Records an operation's effect on its target (and a move's destination).
    pub fn record(&mut self, key: &str, destination: Option<&str>, effect: &Effect) {
        match effect {
            Effect::Write(content) => {
                self.touched.insert(key.to_owned(), Some(content.clone()));
            }
            Effect::Remove => {
                self.touched.insert(key.to_owned(), None);
            }
            Effect::Move(content) => {
                let moved = content.clone().or_else(|| self.touched.get(key).cloned().flatten());
                self.touched.insert(key.to_owned(), None);
                if let Some(dst) = destination {
                    self.touched.insert(dst.to_owned(), Some(moved.unwrap_or_default()));
                }
            }
        }
    }

    /// Whether operation `index` is an update (its target must exist and be text).
    pub fn updates(&self, index: usize) -> bool {
        matches!(self.ops.get(index), Some(PatchOp::Update { .. }))
    }
}

/// One operation of a patch, to apply to a file's text: linear in the file's size, which may be
/// `max_editable_file_bytes`, so it runs on a check thread (`dispatch::cpu`), not the runtime.
#[derive(Debug)]
pub(super) struct Applier {
    ops: Arc<Vec<PatchOp>>,
    index: usize,
}

impl Applier {
    /// Applies the operation to `current` (the file's text now: from an earlier operation, or
    /// read from disk; `None` when absent), without recording it.
    pub fn apply(&self, path: &str, current: Option<&str>) -> Result<Effect, WireError> {
        #[cfg(feature = "fault-injection")]
        crate::dispatch::cpu::hold::check(path);
        let Some(op) = self.ops.get(self.index) else {
            return Err(WireError::new(ErrorCode::IoError, path, "no such patch operation"));
        };
        let updated = |chunks: &[fsd_patch::Chunk]| -> Result<String, WireError> {
            let Some(text) = current else {
                return Err(WireError::new(ErrorCode::NotFound, path, "the file to update does not exist"));
            };
            fsd_patch::apply_chunks(text, chunks).map_err(|e| {
                let hunk = match e.kind {
                    HunkErrorKind::Context { .. } => "context",
                    HunkErrorKind::ExpectedLines { .. } => "lines",
                };
                WireError::new(ErrorCode::EditNotFound, path, "a hunk does not match the current file")
                    .with("patch_line", e.chunk_line.to_string())
                    .with("hunk", hunk)
            })
        };
        match op {
            PatchOp::Add { contents, .. } => Ok(Effect::Write(contents.clone())),
            PatchOp::Delete { .. } => Ok(Effect::Remove),
            PatchOp::Update { chunks, move_to: None, .. } => Ok(Effect::Write(updated(chunks)?)),
            PatchOp::Update { chunks, move_to: Some(_), .. } => {
                let content = if chunks.is_empty() { None } else { Some(updated(chunks)?) };
                Ok(Effect::Move(content))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(names: &[&str]) -> Vec<v1::EscalatedOp> {
        names.iter().map(|n| v1::EscalatedOp { op: (*n).into(), ..Default::default() }).collect()
    }

    const PATCH: &str = "*** Begin Patch\n*** Add File: a\n+one\n*** Update File: b\n@@\n-x\n+y\n*** Delete File: c\n*** Update File: d\n*** Move to: e\n@@\n-1\n+2\n*** End Patch";

    #[test]
    fn the_ops_must_be_the_patchs_operations_in_order() {
        let check = |names: &[&str], ok: bool| {
            assert_eq!(PatchCheck::new(PATCH, &ops(names)).is_ok(), ok, "{names:?}");
        };
        check(&["writeText", "writeText", "deleteFile", "moveFile"], true);
        check(&["writeText", "writeText", "deleteFile"], false);
        check(&["writeText", "deleteFile", "writeText", "moveFile"], false);
        check(&["writeText", "editText", "deleteFile", "moveFile"], false);
        assert!(PatchCheck::new("not a patch", &ops(&["writeText"])).is_err());
    }

    #[test]
    fn hunks_apply_to_the_current_text_or_fail_with_their_line() {
        let check = PatchCheck::new(PATCH, &ops(&["writeText", "writeText", "deleteFile", "moveFile"]))
            .unwrap_or_else(|e| panic!("{e}"));
        match check.apply(1, "/b", Some("w\nx\n")) {
            Ok(Effect::Write(text)) => assert_eq!(text, "w\ny\n"),
            other => panic!("{other:?}"),
        }
        let failed = check.apply(1, "/b", Some("w\nz\n")).err();
        let failed = failed.as_ref().map(|w| (w.code, w.get("patch_line"), w.get("hunk")));
        assert_eq!(failed, Some((ErrorCode::EditNotFound, Some("5"), Some("lines"))));
        assert_eq!(check.apply(1, "/b", None).err().map(|w| w.code), Some(ErrorCode::NotFound));
        match check.apply(3, "/d", Some("1\n")) {
            Ok(Effect::Move(Some(text))) => assert_eq!(text, "2\n"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn later_operations_see_what_earlier_ones_did() {
        let mut check = PatchCheck::new(PATCH, &ops(&["writeText", "writeText", "deleteFile", "moveFile"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check.earlier("k:a"), None);
        check.record("k:a", None, &Effect::Write("one\n".into()));
        check.record("k:c", None, &Effect::Remove);
        check.record("k:d", Some("k:e"), &Effect::Move(Some("2\n".into())));
        assert_eq!(check.earlier("k:a"), Some(Some("one\n")));
        assert_eq!(check.earlier("k:c"), Some(None));
        assert_eq!(check.earlier("k:d"), Some(None));
        assert_eq!(check.earlier("k:e"), Some(Some("2\n")));
    }
}
