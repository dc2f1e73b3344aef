//! The apply_patch tool: parse, preflight the whole patch against simulated state (nothing is
//! written unless every operation passes), then commit in order through the provider and report
//! exactly what happened.

mod commit;
mod preflight;
mod report;

use serde_json::Value;

use super::escalation_fields::{PlannedCall, Stop};
use super::{Session, ToolResult, args};
use crate::daemon::{DaemonError, Operation, Version};
use crate::failure::ToolError;

/// One operation of the patch, with its paths as written and as resolved against the cwd.
#[derive(Debug, Clone)]
struct Planned {
    /// 1-based position in the patch.
    index: usize,
    op: fsd_patch::Op,
    /// Absolute source path (the file itself for add, update and delete).
    src: String,
    /// Absolute destination of a move.
    dst: Option<String>,
}

impl Planned {
    fn kind(&self) -> fsd_patch::OpKind {
        self.op.kind()
    }

    /// `update a.txt` or `move a.txt -> b.txt`, as the patch spells the paths.
    fn describe(&self) -> String {
        match self.op.move_to() {
            Some(to) => format!("move {} -> {}", self.op.path(), to),
            None => format!("{} {}", self.kind().as_str(), self.op.path()),
        }
    }

    /// The summary line `A path`, `M dest`, `D path`.
    fn summary(&self) -> String {
        format!("{} {}", self.kind().summary_letter(), self.op.target_path())
    }
}

/// What preflight decided for one operation: the content to write, and the versions its commit
/// must find (the compare-and-swap basis, whether or not the policy is on).
#[derive(Debug, Clone)]
struct Prepared {
    planned: Planned,
    /// New content of the file (add, update) or the move destination; `None` for delete and a
    /// move without content change.
    content: Option<String>,
    /// Text before, when known (for diffs).
    before: Option<String>,
    /// Whether the target (or move destination) exists before this operation.
    target_exists: bool,
    /// The version the source (the file itself for add/update/delete) has on disk before the
    /// patch, when no earlier operation touched it: the commit's compare-and-swap basis.
    src_version: Option<Version>,
    /// The same for a move destination.
    dst_version: Option<Version>,
}

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let allowed = session.allowed_args(&["input"]);
    let map = args::object(args, &allowed)?;
    let input = args::string(map, "input")?;
    let patch = match fsd_patch::parse(&input) {
        Ok(patch) => patch,
        Err(e) => return Err(report::syntax_error(&e)),
    };
    if patch.ops.is_empty() {
        return Ok(report::empty());
    }
    let planned: Vec<Planned> = patch
        .ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| Planned {
            index: i + 1,
            src: session.absolute(op.path()),
            dst: op.move_to().map(|to| session.absolute(to)),
            op,
        })
        .collect();
    // Each operation carries the guard it will run under, so the daemon refuses a stale or
    // already existing target before anyone is asked to approve the patch.
    let calls: Vec<PlannedCall> = planned
        .iter()
        .map(|p| match (&p.op, &p.dst) {
            (fsd_patch::Op::Delete { .. }, _) => PlannedCall::unbound(Operation::DeleteFile, &p.src, None)
                .with_edit_guard(session.edit_guard(&p.src).ok().flatten()),
            (fsd_patch::Op::Update { .. }, Some(dst)) => {
                PlannedCall::unbound(Operation::MoveFile, &p.src, Some(dst))
                    .with_edit_guard(session.edit_guard(&p.src).ok().flatten())
            }
            // Add overwrites and Update rewrites: the write tool's guard (replace at the
            // observed version, else create only).
            _ => PlannedCall::unbound(Operation::WriteText, &p.src, None)
                .with_write_guard(session.write_guard(&p.src)),
        })
        .collect();
    if super::escalation_fields::wants_wider(session, map) {
        // What the policy refuses is refused before anyone is asked to approve the patch.
        let unobserved = unobserved(&planned, |path| session.edit_guard(path).is_err());
        if !unobserved.is_empty() {
            return Err(report::rejected(&unobserved));
        }
    }
    match super::escalation_fields::resolve_patch(session, map, &calls, &input).await {
        Ok(()) => {}
        Err(Stop::Error(error)) => return Err(error),
        // The daemon's checks (staleness, every hunk against the current file) refused an
        // operation before anyone was asked: the same report preflight would have given.
        Err(Stop::Checked { index, error }) => {
            let (Some(planned), Some(call)) = (planned.get(index), calls.get(index)) else {
                return Err(match &error {
                    DaemonError::Refused(wire) => ToolError::from_mutation_wire(&wire.path, wire),
                    _ => ToolError::from_mutation("", &error),
                });
            };
            let error = hunk_mismatch(planned, &error)
                .unwrap_or_else(|| super::escalation_fields::checked(call, &error));
            return Err(report::rejected(&[preflight::Problem { planned: planned.clone(), error }]));
        }
    }
    let prepared = match preflight::run(session, &planned).await {
        Ok(prepared) => prepared,
        Err(problems) => return Err(report::rejected(&problems)),
    };
    let outcome = if session.tools.config().apply_patch_atomic {
        commit::run_atomic(session, &prepared).await
    } else {
        commit::run(session, &prepared).await
    };
    Ok(report::committed(&prepared, &outcome))
}

/// The operations that change a file this session has not read (`unread`), an earlier
/// operation of the patch aside.
fn unobserved(planned: &[Planned], unread: impl Fn(&str) -> bool) -> Vec<preflight::Problem> {
    let mut touched = std::collections::HashSet::new();
    let mut problems = Vec::new();
    for p in planned {
        let modifies = !matches!(p.op, fsd_patch::Op::Add { .. });
        if modifies && !touched.contains(&p.src) && unread(&p.src) {
            let error = ToolError::not_observed(p.op.path());
            problems.push(preflight::Problem { planned: p.clone(), error });
        }
        touched.insert(p.src.clone());
        touched.extend(p.dst.clone());
    }
    problems
}

/// A hunk the daemon could not apply, in preflight's words (the hunk is the model's own text).
fn hunk_mismatch(planned: &Planned, error: &DaemonError) -> Option<ToolError> {
    let wire = error.wire()?;
    if wire.code != fsd_proto::ErrorCode::EditNotFound {
        return None;
    }
    let line: usize = wire.get("patch_line")?.parse().ok()?;
    let chunk = planned.op.chunks().iter().find(|c| c.line == line)?;
    let message = match (wire.reason(), &chunk.context) {
        (Some(fsd_proto::Reason::HunkContext), Some(context)) => {
            format!("failed to find context '{context}'")
        }
        _ => {
            let at_end = if chunk.end_of_file { " at the end of the file" } else { "" };
            format!("failed to find expected lines{at_end}:\n{}", chunk.old_lines.join("\n"))
        }
    };
    Some(ToolError::new("PATCH_HUNK_MISMATCH", format!("{message} (hunk at patch line {line})")))
}
