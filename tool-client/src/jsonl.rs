//! The `fsd-tools session` protocol: one JSON request per line in, one result per line out.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::failure::ToolError;
use crate::tools::{Block, Session, ToolResult};

/// A result as a JSON line object.
pub fn result_json(id: Value, result: &ToolResult) -> Value {
    let content: Vec<Value> = result
        .content
        .iter()
        .map(|block| match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Image { mime_type, data } => json!({
                "type": "image",
                "mime_type": mime_type,
                "data": base64::engine::general_purpose::STANDARD.encode(data),
            }),
        })
        .collect();
    json!({
        "id": id,
        "is_error": result.is_error,
        "code": result.code,
        "text": result.text(),
        "content": content,
        "meta": Value::Object(result.meta.clone()),
    })
}

fn invalid(id: Value, message: &str) -> Value {
    result_json(id, &ToolResult::error(ToolError::new("INVALID_REQUEST", message)))
}

/// The reply to a line when there is no daemon to serve it (the embedded daemon did not start):
/// the line's id, and `reason` as the file service being unavailable.
pub fn unavailable(line: &str, reason: &str) -> Value {
    let id =
        serde_json::from_str::<Value>(line).ok().and_then(|v| v.get("id").cloned()).unwrap_or(Value::Null);
    result_json(id, &ToolResult::error(ToolError::unavailable(reason)))
}

/// Handles one input line.
pub async fn handle_line(session: &mut Session, line: &str) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return invalid(Value::Null, &format!("request is not valid JSON: {e}")),
    };
    let Some(object) = request.as_object() else {
        return invalid(Value::Null, "request must be a JSON object");
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if let Some(cwd) = object.get("cwd") {
        let Some(cwd) = cwd.as_str() else {
            return invalid(id, "cwd must be a string");
        };
        return match session.set_cwd(cwd.into()) {
            Ok(()) => {
                let mut meta = Map::new();
                meta.insert("cwd".into(), json!(cwd));
                result_json(id, &ToolResult { is_error: false, code: None, content: vec![], meta })
            }
            Err(e) => result_json(id, &ToolResult::error(e)),
        };
    }
    // The change record's requests (docs/rewind.md): no tool's, the host's own.
    if let Some(label) = object.get("checkpoint") {
        let Some(label) = label.as_str() else {
            return invalid(id, "checkpoint must be a string (the point's label)");
        };
        return result_json(id, &crate::record_commands::checkpoint(session, label).await);
    }
    if let Some(asked) = object.get("changes") {
        let Some(asked) = asked.as_object() else {
            return invalid(id, "changes must be an object: {\"since\", \"this_session\", \"identity\"}");
        };
        let query = crate::daemon::ChangesQuery {
            since: asked.get("since").and_then(Value::as_u64).unwrap_or(0),
            this_session: asked.get("this_session").and_then(Value::as_bool).unwrap_or(false),
            identity: asked.get("identity").and_then(Value::as_str).map(str::to_owned),
        };
        return result_json(id, &crate::record_commands::changes(session, &query).await);
    }
    if let Some(asked) = object.get("rewind") {
        let Some(asked) = asked.as_object() else {
            return invalid(
                id,
                "rewind must be an object: {\"since\", \"this_session\", \"identity\", \"keep_checkpoint\"}",
            );
        };
        let query = crate::daemon::ChangesQuery {
            since: asked.get("since").and_then(Value::as_u64).unwrap_or(0),
            this_session: asked.get("this_session").and_then(Value::as_bool).unwrap_or(false),
            identity: asked.get("identity").and_then(Value::as_str).map(str::to_owned),
        };
        let keep = asked.get("keep_checkpoint").and_then(Value::as_bool).unwrap_or(false);
        return result_json(id, &crate::record_commands::rewind(session, &query, keep).await);
    }
    let Some(tool) = object.get("tool").and_then(Value::as_str) else {
        return invalid(
            id,
            "request needs \"tool\" (a string), \"cwd\", \"checkpoint\", \"changes\" or \"rewind\"",
        );
    };
    let args = object.get("args").cloned().unwrap_or_else(|| json!({}));
    // A line may carry the W3C trace context its daemon calls continue (`_meta.traceparent`).
    let carried =
        object.get("_meta").and_then(Value::as_object).and_then(crate::connect::trace::Carried::from_meta);
    let result = crate::connect::trace::within(carried, session.call(tool, args)).await;
    result_json(id, &result)
}
