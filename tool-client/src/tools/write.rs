//! The write tool: the policy picks the guard (replace at the observed version, or create only),
//! the daemon writes atomically, the observation is recorded after success.

use fsd_policy::WriteGuard;
use fsd_proto::v1;
use serde_json::{Map, Value, json};

use super::{Session, ToolResult, args, diff_meta, escalation};
use crate::failure::ToolError;

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let allowed = session.allowed_args(&["file_path", "content"]);
    let map = args::object(args, &allowed)?;
    let file_path = args::non_empty(map, "file_path")?;
    let content = args::string(map, "content")?;
    let path = session.absolute(&file_path);
    let guard = if session.policy_on() {
        let key = session.key_of(&path).cloned();
        let kind = match session.observations.write_intent(key.as_ref()) {
            WriteGuard::CreateIfAbsent => v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {}),
            WriteGuard::ReplaceIfVersion(version) => {
                v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
                    version: version.0,
                    target_key: key.map(|k| k.0).unwrap_or_default(),
                })
            }
        };
        Some(v1::WriteGuard { kind: Some(kind) })
    } else {
        None
    };
    let planned = escalation::PlannedCall::write(&path, &content).with_write_guard(guard.clone());
    escalation::resolve(session, map, "write", &[planned]).await?;
    let request = v1::WriteTextRequest {
        context: session.context(),
        path: path.clone(),
        content,
        guard,
        match_existing_style: true,
    };
    let reply = session
        .client
        .write_text(request)
        .await
        .map_err(|s| ToolError::from_mutation(&path, &s))?
        .into_inner();
    let target = reply.target.unwrap_or_default();
    session.record_present(&[&path], &target, &reply.version);
    let created = reply.operation == v1::WriteOperation::Create as i32;
    let verb = if created { "Created file" } else { "Updated file" };
    let text =
        format!("<path>{}</path>\n<type>file</type>\n<content>\n{verb}\n</content>", target.display_path);
    let mut meta = Map::new();
    meta.insert("operation".into(), json!(if created { "create" } else { "update" }));
    meta.insert("affectedPaths".into(), json!([target.display_path]));
    // Creations store no diff (the seed): the content is in the call's arguments.
    if !created {
        meta.insert("diffs".into(), json!([diff_meta(&target.display_path, reply.change.as_ref())]));
    }
    Ok(ToolResult::text_ok(text, meta))
}
