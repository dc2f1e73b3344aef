//! The sandbox escalation fields of the mutating tools: advertised only while the daemon's hello
//! says a wider mode is possible, checked by the seed's rules, approved by the client's approver,
//! and stamped on that one call only.

use fsd_proto::v1;
use serde_json::{Map, Value, json};

use super::Session;
use crate::approver::Ask;
use crate::failure::ToolError;

pub const MODE_FIELD: &str = "sandbox_permissions";
pub const REASON_FIELD: &str = "justification";

pub fn mode_name(mode: i32) -> &'static str {
    match v1::Mode::try_from(mode) {
        Ok(v1::Mode::ReadOnly) => "read-only",
        Ok(v1::Mode::DangerFullAccess) => "danger-full-access",
        _ => "workspace-write",
    }
}

fn mode_from_name(name: &str) -> Option<v1::Mode> {
    match name {
        "read-only" => Some(v1::Mode::ReadOnly),
        "workspace-write" => Some(v1::Mode::WorkspaceWrite),
        "danger-full-access" => Some(v1::Mode::DangerFullAccess),
        _ => None,
    }
}

/// What hello says about escalation for this client: the call's effective mode and whether any
/// wider mode can be reached.
#[derive(Debug, Clone)]
pub struct Offer {
    pub effective: v1::Mode,
    pub wider: Vec<v1::Mode>,
}

impl Offer {
    pub fn from_hello(hello: &v1::HelloReply) -> Option<Offer> {
        if hello.escalation.is_empty() || hello.escalation == "deny" {
            return None;
        }
        let effective = v1::Mode::try_from(hello.default_mode.min(hello.max_mode)).ok()?;
        let wider: Vec<v1::Mode> = hello
            .modes
            .iter()
            .filter(|m| m.available && m.mode > effective as i32 && m.mode <= hello.max_mode)
            .filter_map(|m| v1::Mode::try_from(m.mode).ok())
            .collect();
        (!wider.is_empty()).then_some(Offer { effective, wider })
    }
}

/// Adds the two fields to a tool's input schema.
pub fn extend_schema(schema: &mut Value) {
    if let Some(props) = schema.pointer_mut("/input_schema/properties").and_then(Value::as_object_mut) {
        props.insert(
            MODE_FIELD.into(),
            json!({
                "type": "string",
                "enum": ["read-only", "workspace-write", "danger-full-access"],
                "description": "Run this one call in a different sandbox mode. A wider mode needs approval; omit it (or repeat the current mode) to run as usual."
            }),
        );
        props.insert(
            REASON_FIELD.into(),
            json!({
                "type": "string",
                "description": "Why this call needs a different mode; required whenever sandbox_permissions differs from the current mode. Write it in the language of the current user request."
            }),
        );
    }
}

/// The hint a denied mutation carries while escalation is possible.
pub fn hint(offer: &Offer) -> String {
    let wider: Vec<&str> = offer.wider.iter().map(|m| mode_name(*m as i32)).collect();
    format!(
        "\nTo request approval for this call, retry it now with sandbox_permissions set to {} and a justification.",
        wider.iter().map(|m| format!("\"{m}\"")).collect::<Vec<_>>().join(" or ")
    )
}

/// One call a tool will make at the wider mode, for the daemon to describe (signed trust).
#[derive(Debug, Clone)]
pub struct PlannedCall {
    pub op: &'static str,
    pub path: String,
    pub destination: Option<String>,
    /// Empty: the content is not bound (apply_patch, planned before its content is known).
    pub content_sha256: Vec<u8>,
    /// The change itself, sent so the daemon shows the approver its own diff.
    pub change: Option<Change>,
}

/// A write's new content or an edit's replacement.
#[derive(Debug, Clone)]
pub enum Change {
    Content(String),
    Replace { old: String, new: String, all: bool },
}

impl PlannedCall {
    pub fn write(path: &str, content: &str) -> PlannedCall {
        let content_sha256 = fsd_proto::digest::content(content.as_bytes());
        let change = Some(Change::Content(content.to_owned()));
        PlannedCall { op: "writeText", path: path.to_owned(), destination: None, content_sha256, change }
    }

    pub fn edit(path: &str, old: &str, new: &str, replace_all: bool) -> PlannedCall {
        let content_sha256 = fsd_proto::digest::edit(old, new, replace_all);
        let change = Some(Change::Replace { old: old.to_owned(), new: new.to_owned(), all: replace_all });
        PlannedCall { op: "editText", path: path.to_owned(), destination: None, content_sha256, change }
    }

    pub fn unbound(op: &'static str, path: &str, destination: Option<&str>) -> PlannedCall {
        PlannedCall {
            op,
            path: path.to_owned(),
            destination: destination.map(str::to_owned),
            content_sha256: Vec::new(),
            change: None,
        }
    }
}

/// Runs the configured approver command on the daemon's description; its stdout is the
/// signature (hex) when it approves (exit 0).
async fn run_approver(command: &[String], description: &str) -> Result<Option<Vec<u8>>, ToolError> {
    use tokio::io::AsyncWriteExt;
    let failed =
        |why: String| ToolError::new("FS_SANDBOX_DENIED", format!("the approver could not be run: {why}"));
    let (program, args) = command.split_first().ok_or_else(|| failed("approverCommand is empty".into()))?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| failed(format!("{program}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(description.as_bytes()).await.map_err(|e| failed(e.to_string()))?;
    }
    let output = child.wait_with_output().await.map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    hex::decode(text.trim()).map(Some).map_err(|_| failed("it printed no signature".into()))
}

/// Asks an `fsd-approver serve` endpoint; `None` when it refuses.
async fn ask_approver_service(endpoint: &str, description: &str) -> Result<Option<Vec<u8>>, ToolError> {
    use fsd_proto::approver::{ApproveRequest, approver_client::ApproverClient};
    let failed = |why: String| {
        ToolError::new("FS_SANDBOX_DENIED", format!("the approver could not be reached: {why}"))
    };
    let endpoint = crate::connect::Endpoint::parse(endpoint).map_err(|e| failed(e.to_string()))?;
    let channel = crate::connect::channel(&endpoint).await.map_err(|e| failed(e.to_string()))?;
    let reply = ApproverClient::new(channel)
        .approve(ApproveRequest { description: description.to_owned() })
        .await
        .map_err(|s| failed(s.message().to_owned()))?
        .into_inner();
    Ok(reply.approved.then(|| reply.signature.to_vec()))
}

/// Applies the seed's rules to a call's fields and, for a wider mode, obtains approval: from
/// the client's approver (`client` trust), or a signature over the daemon's own description of
/// `calls` (`signed` trust). Sets the session's mode and ticket for this one tool call.
pub async fn resolve(
    session: &mut Session,
    map: &Map<String, Value>,
    tool: &str,
    calls: &[PlannedCall],
) -> Result<(), ToolError> {
    let mut paths: Vec<String> = calls.iter().map(|c| c.path.clone()).collect();
    paths.extend(calls.iter().filter_map(|c| c.destination.clone()));
    let paths = &paths[..];
    session.call_mode = None;
    let Some(offer) = session.escalation.clone() else { return Ok(()) };
    let requested = match map.get(MODE_FIELD) {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(mode_from_name(name).ok_or_else(|| {
            ToolError::invalid_args(format!(
                "{MODE_FIELD} must be one of read-only, workspace-write, danger-full-access"
            ))
        })?),
        Some(_) => return Err(ToolError::invalid_args(format!("{MODE_FIELD} must be a string"))),
    };
    let reason = match map.get(REASON_FIELD) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ToolError::invalid_args(format!("{REASON_FIELD} must be a string"))),
    };
    let Some(requested) = requested.filter(|m| *m != offer.effective) else {
        if requested.is_none() && !reason.trim().is_empty() {
            return Err(ToolError::invalid_args(format!("{REASON_FIELD} was given without {MODE_FIELD}")));
        }
        return Ok(());
    };
    if reason.trim().is_empty() {
        return Err(ToolError::invalid_args(format!(
            "{REASON_FIELD} must be a non-empty reason when {MODE_FIELD} differs from the current mode ({})",
            mode_name(offer.effective as i32)
        )));
    }
    if requested < offer.effective {
        session.call_mode = Some((requested, None));
        return Ok(());
    }
    let name = mode_name(requested as i32);
    let denied = || {
        ToolError::new(
            "FS_SANDBOX_DENIED",
            format!(
                "escalation to {name} was not approved [sandbox: file access denied under {} mode]",
                mode_name(offer.effective as i32)
            ),
        )
    };
    if session.hello.escalation == "signed" {
        let request = v1::EscalationRequest {
            context: session.context(),
            requested_mode: requested as i32,
            justification: reason.clone(),
            ops: calls
                .iter()
                .map(|c| {
                    let (content, old_string, new_string, replace_all) = match &c.change {
                        Some(Change::Content(content)) => (Some(content.clone()), None, None, false),
                        Some(Change::Replace { old, new, all }) => {
                            (None, Some(old.clone()), Some(new.clone()), *all)
                        }
                        None => (None, None, None, false),
                    };
                    v1::EscalatedOp {
                        op: c.op.to_owned(),
                        path: c.path.clone(),
                        destination: c.destination.clone().unwrap_or_default(),
                        content_sha256: c.content_sha256.clone().into(),
                        content,
                        old_string,
                        new_string,
                        replace_all,
                    }
                })
                .collect(),
        };
        let first = paths.first().cloned().unwrap_or_default();
        let described = session
            .client
            .request_escalation(request)
            .await
            .map_err(|s| ToolError::from_mutation(&first, &s))?
            .into_inner();
        let config = &session.tools.config;
        let signature = match (&config.approver_endpoint, &config.approver_command) {
            (Some(endpoint), _) => ask_approver_service(endpoint, &described.description).await?,
            (None, Some(command)) if !command.is_empty() => {
                run_approver(command, &described.description).await?
            }
            _ => None,
        };
        let Some(signature) = signature else {
            return Err(denied());
        };
        let ticket = v1::EscalationTicket {
            approved_mode: requested as i32,
            justification: reason,
            escalation_id: described.escalation_id,
            nonce: described.nonce,
            signature: signature.into(),
        };
        session.call_mode = Some((requested, Some(ticket)));
        return Ok(());
    }
    let approved = session.approver.decide(&Ask { tool, paths, mode: name, justification: &reason });
    if !approved {
        return Err(denied());
    }
    let ticket =
        v1::EscalationTicket { approved_mode: requested as i32, justification: reason, ..Default::default() };
    session.call_mode = Some((requested, Some(ticket)));
    Ok(())
}
