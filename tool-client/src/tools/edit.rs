//! The edit tool: literal replacement with the stale check before matching, inside the daemon's
//! one critical section; texts for no match and several matches are the ones models know.

use fsd_policy::EditRefusal;
use fsd_proto::ErrorCode;
use serde_json::{Map, Value, json};

use super::{Session, ToolResult, args, diff_meta, escalation_fields};
use crate::daemon::DaemonError;
use crate::failure::ToolError;

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let allowed = session.allowed_args(&["file_path", "old_string", "new_string", "replace_all"]);
    let map = args::object(args, &allowed)?;
    let file_path = args::non_empty(map, "file_path")?;
    let old_string = args::non_empty(map, "old_string")?;
    let new_string = args::string(map, "new_string")?;
    let replace_all = args::boolean(map, "replace_all")?.unwrap_or(false);
    if old_string == new_string {
        return Err(ToolError::invalid_args("old_string and new_string must differ"));
    }
    let path = session.absolute(&file_path);
    // The observation first: an edit the policy refuses never reaches an approver.
    let guard = match session.edit_guard(&path) {
        Ok(guard) => guard,
        Err(EditRefusal::NotObserved) => return Err(ToolError::not_observed(&path)),
        // A re-read confirmed absence: say so instead of repeating the stale remedy.
        Err(EditRefusal::ObservedAbsent) => {
            return Err(ToolError::new(
                ErrorCode::NotFound.as_str(),
                format!("cannot modify \"{path}\": not found"),
            ));
        }
    };
    let planned = escalation_fields::PlannedCall::edit(&path, &old_string, &new_string, replace_all)
        .with_edit_guard(guard.clone());
    escalation_fields::resolve(session, map, "edit", &[planned]).await?;
    let reply =
        match session.daemon.edit_text(&path, &old_string, &new_string, replace_all, guard.as_ref()).await {
            Ok(reply) => reply,
            Err(error) => return Err(edit_error(&path, &old_string, &error)),
        };
    let target = reply.target;
    session.record_present(&[&path], &target, &reply.version);
    let text = if replace_all {
        format!("The file {} has been updated. All occurrences were successfully replaced.", target.display)
    } else {
        format!("The file {} has been updated successfully.", target.display)
    };
    let mut meta = Map::new();
    meta.insert("replacements".into(), json!(reply.replacements));
    meta.insert("affectedPaths".into(), json!([target.display]));
    meta.insert("diffs".into(), json!([diff_meta(&target.display, reply.change.as_ref())]));
    Ok(ToolResult::text_ok(text, meta))
}

pub(super) fn edit_error(path: &str, old_string: &str, error: &DaemonError) -> ToolError {
    match error.wire() {
        Some(wire) if wire.code == ErrorCode::EditNotFound => ToolError::new(
            wire.code.as_str(),
            format!("String to replace not found in file.\nString: {old_string}"),
        ),
        Some(wire) if wire.code == ErrorCode::AmbiguousEdit => {
            let count = wire.get("count").unwrap_or("several");
            ToolError::new(
                wire.code.as_str(),
                format!(
                    "Found {count} matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.\nString: {old_string}"
                ),
            )
        }
        _ => ToolError::from_mutation(path, error),
    }
}
