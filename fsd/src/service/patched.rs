//! The apply_patch behind an escalation request, checked before anyone is asked: its operations
//! must be the ones listed, and every hunk of every file must match what the file holds (or
//! what an earlier operation of the same patch left there), which the worker's dry run decides
//! (`op::Request::PatchText`), so a patch that would fail never reaches a person or a rule
//! file. This keeps what each operation did, so a later one applies to it; the approval binds
//! the content the patch produces, shown to the approver as a diff.

use std::collections::HashMap;

use fsd_patch::Op as PatchOp;
use fsd_proto::v1;
use tonic::Status;

/// The parsed patch and what its earlier operations did to each target.
#[derive(Debug)]
pub(super) struct PatchCheck {
    ops: Vec<PatchOp>,
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
        Ok(PatchCheck { ops: patch.ops, touched: HashMap::new() })
    }

    /// What an earlier operation of this patch left at `key`: `None` when none touched it.
    pub fn earlier(&self, key: &str) -> Option<Option<&str>> {
        self.touched.get(key).map(Option::as_deref)
    }

    /// Operation `index` of the patch.
    pub fn op(&self, index: usize) -> Option<&PatchOp> {
        self.ops.get(index)
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
