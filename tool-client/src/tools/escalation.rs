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

/// Applies the seed's rules to a call's fields and, for a wider mode, asks the approver.
/// Sets the session's mode and ticket for this one call.
pub fn resolve(session: &mut Session, map: &Map<String, Value>, tool: &str, paths: &[String]) -> Result<(), ToolError> {
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
    let approved = session.approver.decide(&Ask { tool, paths, mode: name, justification: &reason });
    if !approved {
        return Err(ToolError::new(
            "FS_SANDBOX_DENIED",
            format!(
                "escalation to {name} was not approved [sandbox: file access denied under {} mode]",
                mode_name(offer.effective as i32)
            ),
        ));
    }
    let ticket = v1::EscalationTicket { approved_mode: requested as i32, justification: reason, ..Default::default() };
    session.call_mode = Some((requested, Some(ticket)));
    Ok(())
}
