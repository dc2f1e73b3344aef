//! The apply_patch reports, to the seed's character: success summaries grouped A/M/D, the
//! preflight rejection, and the stopped-commit report with only the sections that apply.

use serde_json::{Map, Value, json};

use super::commit::{Outcome, Status};
use super::preflight::Problem;
use super::{Planned, Prepared};
use crate::failure::{STALE_REMEDY, ToolError};
use crate::tools::ToolResult;

/// Before/after texts larger than this are left out of the diff metadata.
const MAX_DIFF_TEXT: usize = 1 << 20;

pub(super) fn syntax_error(e: &fsd_patch::ParseError) -> ToolError {
    let message = if e.message.starts_with("The first line") || e.message.starts_with("The last line") {
        format!("Invalid patch: {}", e.message)
    } else {
        format!("Invalid patch hunk on line {}: {}", e.line, e.message)
    };
    ToolError::new("PATCH_SYNTAX", message)
}

pub(super) fn empty() -> ToolResult {
    let mut meta = Map::new();
    meta.insert("phase".into(), json!("commit"));
    meta.insert("cancelled".into(), json!(false));
    meta.insert("operations".into(), json!([]));
    meta.insert("affectedPaths".into(), json!([]));
    ToolResult::text_ok("Success. No operations in patch.".to_owned(), meta)
}

/// Indents the continuation lines of a multi-line diagnostic under its bullet.
fn indent(text: &str) -> String {
    text.replace('\n', "\n  ")
}

pub(super) fn rejected(problems: &[Problem]) -> ToolError {
    let mut text = format!("Patch rejected before any change ({} problems):", problems.len());
    for p in problems {
        text.push_str(&format!(
            "\n- operation {} ({}, patch line {}): {}",
            p.planned.index,
            p.planned.describe(),
            p.planned.op.line(),
            indent(&p.error.message)
        ));
    }
    let code = problems.first().map_or_else(|| "PATCH_REJECTED".to_owned(), |p| p.error.code.clone());
    ToolError::new(code, text)
}

fn status_name(status: &Status) -> &'static str {
    match status {
        Status::Completed => "completed",
        Status::Failed { .. } => "failed",
        Status::Unknown { .. } => "unknown",
        Status::NotExecuted => "skipped",
        Status::Undone => "undone",
    }
}

fn bounded(text: &str) -> bool {
    text.len() <= MAX_DIFF_TEXT
}

/// The diff metadata of one completed operation (LF text; creations store none).
fn diffs(p: &Prepared, display: &(String, Option<String>)) -> Vec<Value> {
    let lf = |t: &str| t.replace("\r\n", "\n");
    let diff = |path: &str, old: &str, new: &str| json!({"path": path, "oldText": old, "newText": new, "diff": crate::tools::unified_diff(path, old, new)});
    let before = p.before.as_deref().filter(|t| bounded(t)).map(lf);
    match (&p.planned.op, before) {
        (fsd_patch::Op::Add { .. }, _) => vec![],
        (fsd_patch::Op::Delete { .. }, Some(old)) => {
            vec![json!({"path": display.0, "oldText": old, "newText": ""})]
        }
        (fsd_patch::Op::Update { move_to: None, .. }, Some(old)) => {
            match p.content.as_deref().filter(|t| bounded(t)) {
                Some(new) => vec![diff(&display.0, &old, &lf(new))],
                None => vec![],
            }
        }
        (fsd_patch::Op::Update { move_to: Some(_), .. }, Some(old)) => {
            let new = p.content.as_deref().map(lf).unwrap_or_else(|| old.clone());
            let dst = display.1.clone().unwrap_or_default();
            vec![json!({"path": display.0, "oldText": old, "newText": ""}), diff(&dst, &old, &new)]
        }
        _ => vec![],
    }
}

fn operation_line(planned: &Planned, error: &ToolError, remedy: bool) -> String {
    let remedy = if remedy && !error.message.ends_with(STALE_REMEDY) { STALE_REMEDY } else { "" };
    format!(
        "- operation {} ({}, patch line {}): {}{remedy}",
        planned.index,
        planned.describe(),
        planned.op.line(),
        indent(&error.message)
    )
}

/// `applyPatchAtomic`: a commit that failed changed nothing (the operations before the failing
/// one were undone), or one cut by a lost daemon applied all operations or none. Same sections as
/// the in-order report, the completed ones now "Undone".
fn atomic_stopped(prepared: &[Prepared], outcome: &Outcome) -> String {
    let total = prepared.len();
    let of = |status: fn(&Status) -> bool| -> Vec<&Prepared> {
        prepared.iter().zip(&outcome.statuses).filter(|(_, s)| status(s)).map(|(p, _)| p).collect()
    };
    let mut lines = Vec::new();
    let unknown = outcome.statuses.iter().find_map(|s| match s {
        Status::Unknown { error } => Some(error),
        _ => None,
    });
    if let Some(error) = unknown {
        // The daemon was lost mid-commit: the whole transaction applied or none of it.
        lines.push(format!(
            "Patch outcome unknown: the commit was cut; all {total} operations were applied or none."
        ));
        lines.push("Outcome unknown:".to_owned());
        lines.extend(of(|s| matches!(s, Status::Unknown { .. })).iter().map(|p| {
            format!(
                "- operation {} ({}, patch line {})",
                p.planned.index,
                p.planned.describe(),
                p.planned.op.line()
            )
        }));
        let remedy = if error.message.ends_with(STALE_REMEDY) { "" } else { STALE_REMEDY };
        lines.push(format!("Cause: {}{remedy}", indent(&error.message)));
        return lines.join("\n");
    }
    let failed = prepared.iter().zip(&outcome.statuses).find_map(|(p, s)| match s {
        Status::Failed { error, .. } => Some((p, error)),
        _ => None,
    });
    let index = failed.map_or(1, |(p, _)| p.planned.index);
    lines.push(format!("Patch rolled back: operation {index} of {total} failed, so no file was changed."));
    let undone = of(|s| matches!(s, Status::Undone));
    if !undone.is_empty() {
        lines.push("Undone:".to_owned());
        lines.extend(undone.iter().map(|p| p.planned.summary()));
    }
    if let Some((p, error)) = failed {
        lines.push("Failed:".to_owned());
        lines.push(operation_line(&p.planned, error, false));
    }
    let skipped = of(|s| matches!(s, Status::NotExecuted));
    if !skipped.is_empty() {
        lines.push("Not executed:".to_owned());
        lines.extend(
            skipped.iter().map(|p| format!("- operation {} ({})", p.planned.index, p.planned.describe())),
        );
    }
    lines.join("\n")
}

pub(super) fn committed(prepared: &[Prepared], outcome: &Outcome) -> ToolResult {
    let total = prepared.len();
    let completed: Vec<&Prepared> = prepared
        .iter()
        .zip(&outcome.statuses)
        .filter(|(_, s)| matches!(s, Status::Completed))
        .map(|(p, _)| p)
        .collect();
    let stopped = completed.len() < total;

    let text = if stopped && outcome.atomic {
        atomic_stopped(prepared, outcome)
    } else if !stopped {
        let mut lines = vec!["Success. Updated the following files:".to_owned()];
        for letter in ['A', 'M', 'D'] {
            lines.extend(
                completed
                    .iter()
                    .filter(|p| p.planned.kind().summary_letter() == letter)
                    .map(|p| p.planned.summary()),
            );
        }
        lines.join("\n")
    } else {
        let mut lines = vec![format!("Patch stopped after {} of {total} operations.", completed.len())];
        if !completed.is_empty() {
            lines.push("Completed:".to_owned());
            lines.extend(completed.iter().map(|p| p.planned.summary()));
        }
        let failed: Vec<String> = prepared
            .iter()
            .zip(&outcome.statuses)
            .filter_map(|(p, s)| match s {
                Status::Failed { error, detail } => {
                    let mut line = operation_line(&p.planned, error, false);
                    if let Some(detail) = detail {
                        line.push_str(&format!("\n  {detail}"));
                    }
                    Some(line)
                }
                _ => None,
            })
            .collect();
        if !failed.is_empty() {
            lines.push("Failed:".to_owned());
            lines.extend(failed);
        }
        let unknown: Vec<String> = prepared
            .iter()
            .zip(&outcome.statuses)
            .filter_map(|(p, s)| match s {
                Status::Unknown { error } => Some(operation_line(&p.planned, error, true)),
                _ => None,
            })
            .collect();
        if !unknown.is_empty() {
            lines.push("Outcome unknown:".to_owned());
            lines.extend(unknown);
        }
        let skipped: Vec<String> = prepared
            .iter()
            .zip(&outcome.statuses)
            .filter(|(_, s)| matches!(s, Status::NotExecuted))
            .map(|(p, _)| format!("- operation {} ({})", p.planned.index, p.planned.describe()))
            .collect();
        if !skipped.is_empty() {
            lines.push("Not executed:".to_owned());
            lines.extend(skipped);
        }
        lines.join("\n")
    };

    let mut operations = Vec::new();
    let mut affected = Vec::new();
    let mut all_diffs = Vec::new();
    for ((p, status), display) in prepared.iter().zip(&outcome.statuses).zip(&outcome.displays) {
        let diagnostic = match status {
            Status::Failed { error, .. } | Status::Unknown { error } => Some(error.message.clone()),
            _ => None,
        };
        operations.push(json!({
            "index": p.planned.index,
            "kind": p.planned.kind().as_str(),
            "path": p.planned.op.path(),
            "destination": p.planned.op.move_to(),
            "displayPath": display.0,
            "destinationDisplayPath": display.1,
            "patchLine": p.planned.op.line(),
            "status": status_name(status),
            "diagnostic": diagnostic,
        }));
        if matches!(status, Status::Completed | Status::Failed { detail: Some(_), .. }) {
            affected.push(display.0.clone());
            if let Some(dst) = &display.1 {
                affected.push(dst.clone());
            }
        }
        if matches!(status, Status::Completed) {
            all_diffs.extend(diffs(p, display));
        }
    }
    let mut meta = Map::new();
    meta.insert("phase".into(), json!("commit"));
    meta.insert("cancelled".into(), json!(false));
    meta.insert("stopped".into(), json!(stopped));
    if outcome.atomic {
        meta.insert("atomic".into(), json!(true));
    }
    meta.insert("operations".into(), Value::Array(operations));
    meta.insert("affectedPaths".into(), json!(affected));
    meta.insert("diffs".into(), Value::Array(all_diffs));
    ToolResult::text_ok(text, meta)
}
