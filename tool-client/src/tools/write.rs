//! The write tool: the policy picks the guard (replace at the observed version, or create only),
//! the daemon writes atomically, the observation is recorded after success.

use serde_json::{Map, Value, json};

use super::{Session, ToolResult, args, diff_meta, escalation_fields};
use crate::failure::ToolError;

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let allowed = session.allowed_args(&["file_path", "content"]);
    let map = args::object(args, &allowed)?;
    let file_path = args::non_empty(map, "file_path")?;
    let content = args::string(map, "content")?;
    let path = session.absolute(&file_path);
    let guard = session.write_guard(&path);
    let planned = escalation_fields::PlannedCall::write(&path, &content).with_write_guard(guard.clone());
    escalation_fields::resolve(session, map, "write", &[planned]).await?;
    let reply = session
        .daemon
        .write_text(&path, content, guard.as_ref(), true)
        .await
        .map_err(|e| ToolError::from_mutation(&path, &e))?;
    let target = reply.target;
    session.record_present(&[&path], &target, &reply.version);
    let created = reply.created;
    let verb = if created { "Created file" } else { "Updated file" };
    let text = format!("<path>{}</path>\n<type>file</type>\n<content>\n{verb}\n</content>", target.display);
    let mut meta = Map::new();
    meta.insert("operation".into(), json!(if created { "create" } else { "update" }));
    meta.insert("affectedPaths".into(), json!([target.display]));
    // Creations store no diff (the seed): the content is in the call's arguments.
    if !created {
        meta.insert("diffs".into(), json!([diff_meta(&target.display, reply.change.as_ref())]));
    }
    Ok(ToolResult::text_ok(text, meta))
}
