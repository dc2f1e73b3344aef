//! The sandbox escalation fields of read and the mutating tools: advertised only while the
//! daemon's hello says a wider mode is possible, checked by the seed's rules, checked by the
//! daemon before anyone is asked (RequestEscalation), approved (by the client's own approver,
//! or by the daemon's approver under signed trust, which the client never sees), and stamped
//! on that one call only. Every escalation text the model reads is written here.

use serde_json::{Map, Value, json};

use fsd_proto::ErrorCode;

use super::Session;
pub use crate::daemon::{Change, PlannedCall};
use crate::daemon::{DaemonError, Decider, Hello, Mode, Operation, Report, Ticket, VersionGuard, WriteGuard};
use crate::failure::ToolError;
pub use crate::local_approver::RefusedBy;
use crate::local_approver::{Ask, Verdict};

pub const MODE_FIELD: &str = "sandbox_permissions";
pub const REASON_FIELD: &str = "justification";

/// What hello says about escalation for this client: the call's effective mode and whether any
/// wider mode can be reached.
#[derive(Debug, Clone)]
pub struct Offer {
    pub effective: Mode,
    pub wider: Vec<Mode>,
}

impl Offer {
    pub fn from_hello(hello: &Hello) -> Option<Offer> {
        if hello.escalation.is_empty() || hello.escalation == "deny" {
            return None;
        }
        let effective = hello.default_mode.min(hello.max_mode)?;
        let wider: Vec<Mode> = hello
            .available
            .iter()
            .copied()
            .filter(|m| *m > effective && Some(*m) <= hello.max_mode)
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

/// Whether `path` lies in `root` (lexically, on component boundaries).
fn under(root: &str, path: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/')) || root.is_empty()
}

/// The narrowest offered mode whose grant covers `path` for this kind of call, judged from the
/// roots hello lists (the daemon still decides). `None`: no wider mode would help.
pub fn needed(offer: &Offer, hello: &Hello, path: &str, writing: bool) -> Option<Mode> {
    let in_writable = hello.writable_roots.iter().any(|r| under(r, path));
    let in_readable = in_writable || hello.readable_roots.iter().any(|r| under(r, path));
    let protected = path.split('/').any(|c| hello.protected_names.iter().any(|p| p == c));
    let covers = |mode: Mode| match mode {
        Mode::DangerFullAccess => true,
        Mode::WorkspaceWrite if writing => in_writable && !protected,
        Mode::WorkspaceWrite | Mode::ReadOnly if !writing => in_readable,
        _ => false,
    };
    // Denied although the current mode covers it: something other than the mode refused.
    if covers(offer.effective) {
        return None;
    }
    offer.wider.iter().copied().filter(|m| covers(*m)).min()
}

/// The hint a denied call carries while escalation is possible: the one mode it needs.
pub fn hint(mode: Mode) -> String {
    format!(
        "\nTo request approval for this call, retry it now with sandbox_permissions set to \"{}\" and a justification.",
        mode.name()
    )
}

impl PlannedCall {
    fn new(op: Operation, path: &str) -> PlannedCall {
        PlannedCall {
            op,
            path: path.to_owned(),
            destination: None,
            content_sha256: Vec::new(),
            change: None,
            write_guard: None,
            edit_guard: None,
        }
    }

    pub fn read(path: &str) -> PlannedCall {
        PlannedCall::new(Operation::ReadText, path)
    }

    pub fn write(path: &str, content: &str) -> PlannedCall {
        PlannedCall {
            content_sha256: fsd_proto::digest::content(content.as_bytes()),
            change: Some(Change::Content(content.to_owned())),
            ..PlannedCall::new(Operation::WriteText, path)
        }
    }

    pub fn edit(path: &str, old: &str, new: &str, replace_all: bool) -> PlannedCall {
        PlannedCall {
            content_sha256: fsd_proto::digest::edit(old, new, replace_all),
            change: Some(Change::Replace { old: old.to_owned(), new: new.to_owned(), all: replace_all }),
            ..PlannedCall::new(Operation::EditText, path)
        }
    }

    pub fn unbound(op: Operation, path: &str, destination: Option<&str>) -> PlannedCall {
        PlannedCall { destination: destination.map(str::to_owned), ..PlannedCall::new(op, path) }
    }

    #[must_use]
    pub fn with_write_guard(mut self, guard: Option<WriteGuard>) -> PlannedCall {
        self.write_guard = guard;
        self
    }

    #[must_use]
    pub fn with_edit_guard(mut self, guard: Option<VersionGuard>) -> PlannedCall {
        self.edit_guard = guard;
        self
    }
}

/// The text of a refused escalation: says it was refused, by whom, why when given, that
/// nothing changed, and that retrying the same request will not help.
pub fn refused(by: RefusedBy, mode: &str, effective: &str, reason: &str) -> ToolError {
    let who = match by {
        RefusedBy::ApproverRules => "refused by the approver's rules",
        RefusedBy::ApproverPerson => "refused by the person approving escalations",
        RefusedBy::Unreachable => "not decided: the approver could not be reached",
        RefusedBy::ClientRules => "refused by this client's escalation rules",
        RefusedBy::User => "refused by the user",
        RefusedBy::NoApprover => "refused: no approver is configured for this client",
        RefusedBy::NoOne => "refused: no one could be asked (there is no terminal to prompt on)",
        RefusedBy::NoElicitation => {
            "refused: the MCP host cannot ask the user (it does not support elicitation)"
        }
    };
    let reason = reason.trim();
    let because = if reason.is_empty() { String::new() } else { format!(" (reason: {reason})") };
    ToolError::new(
        ErrorCode::SandboxDenied.as_str(),
        format!(
            "escalation to {mode} was {who}{because}; nothing was changed. Do not retry this call with sandbox_permissions; continue under {effective} mode or ask the user. [sandbox: file access denied under {effective} mode]"
        ),
    )
}

/// The text for a target outside the grant that this session has not been approved to read.
pub fn read_first(path: &str, mode: &str) -> ToolError {
    ToolError::new(
        ErrorCode::NotObserved.as_str(),
        format!(
            "cannot modify \"{path}\" under {mode} mode before reading it: read it first with the read tool, sandbox_permissions set to \"{mode}\" and a justification (an approved read also shows whether it exists), then retry this call"
        ),
    )
}

/// A refusal by the daemon's checks before approval, in the tool's own words.
pub fn checked(call: &PlannedCall, error: &DaemonError) -> ToolError {
    let DaemonError::Refused(wire) = error else { return ToolError::from_read(&call.path, error) };
    if wire.code == ErrorCode::NotObserved
        && let Some(mode) = wire.get("read_first")
    {
        return read_first(&call.path, mode);
    }
    match (&call.change, wire.code) {
        (Some(Change::Replace { old, .. }), ErrorCode::EditNotFound | ErrorCode::AmbiguousEdit) => {
            super::edit::edit_error(&call.path, old, error)
        }
        _ if call.op == Operation::ReadText => ToolError::from_read_wire(&call.path, wire),
        _ => ToolError::from_mutation_wire(&call.path, wire),
    }
}

/// Why a call does not go ahead at the mode it asked for.
#[derive(Debug)]
pub enum Stop {
    /// Refused, with the text the model reads.
    Error(ToolError),
    /// The daemon's checks refused call `index` before anyone was asked.
    Checked { index: usize, error: DaemonError },
}

/// Whether the call's fields ask for a mode wider than the current one (the daemon decides).
pub fn wants_wider(session: &Session, map: &Map<String, Value>) -> bool {
    let requested = map.get(MODE_FIELD).and_then(Value::as_str).and_then(Mode::parse);
    session.escalation.as_ref().zip(requested).is_some_and(|(offer, mode)| mode > offer.effective)
}

/// Applies the seed's rules to a call's fields and, for a wider mode, has the daemon check the
/// calls and then obtains approval: from the client's approver (`client` trust), or from the
/// daemon's own approver (`signed` trust: the client learns only the decision). Sets the
/// session's mode and ticket for this one tool call.
pub async fn resolve(
    session: &mut Session,
    map: &Map<String, Value>,
    tool: &str,
    calls: &[PlannedCall],
) -> Result<(), ToolError> {
    match decide(session, map, tool, calls, None).await {
        Ok(()) => Ok(()),
        Err(Stop::Error(error)) => Err(error),
        Err(Stop::Checked { index, error }) => Err(match (calls.get(index), &error) {
            (Some(call), _) => checked(call, &error),
            (None, DaemonError::Refused(wire)) => ToolError::from_mutation_wire(&wire.path, wire),
            (None, _) => ToolError::from_mutation("", &error),
        }),
    }
}

/// [`resolve`], with the daemon's refusal before approval as it came (for tools that word it
/// themselves).
pub async fn resolve_checked(
    session: &mut Session,
    map: &Map<String, Value>,
    tool: &str,
    calls: &[PlannedCall],
) -> Result<(), Stop> {
    decide(session, map, tool, calls, None).await
}

/// [`resolve`] for the operations of an apply_patch: the daemon applies every hunk of `patch`
/// before anyone is asked, and the approval binds what the patch writes.
pub async fn resolve_patch(
    session: &mut Session,
    map: &Map<String, Value>,
    calls: &[PlannedCall],
    patch: &str,
) -> Result<(), Stop> {
    decide(session, map, "apply_patch", calls, Some(patch)).await
}

async fn decide(
    session: &mut Session,
    map: &Map<String, Value>,
    tool: &str,
    calls: &[PlannedCall],
    patch: Option<&str>,
) -> Result<(), Stop> {
    let mut paths: Vec<String> = calls.iter().map(|c| c.path.clone()).collect();
    paths.extend(calls.iter().filter_map(|c| c.destination.clone()));
    let paths = &paths[..];
    session.daemon.set_call_mode(None);
    let Some(offer) = session.escalation.clone() else { return Ok(()) };
    let requested = match map.get(MODE_FIELD) {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(Mode::parse(name).ok_or_else(|| {
            Stop::Error(ToolError::invalid_args(format!(
                "{MODE_FIELD} must be one of read-only, workspace-write, danger-full-access"
            )))
        })?),
        Some(_) => {
            return Err(Stop::Error(ToolError::invalid_args(format!("{MODE_FIELD} must be a string"))));
        }
    };
    let reason = match map.get(REASON_FIELD) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(Stop::Error(ToolError::invalid_args(format!("{REASON_FIELD} must be a string"))));
        }
    };
    let Some(requested) = requested.filter(|m| *m != offer.effective) else {
        if requested.is_none() && !reason.trim().is_empty() {
            let error = ToolError::invalid_args(format!("{REASON_FIELD} was given without {MODE_FIELD}"));
            return Err(Stop::Error(error));
        }
        return Ok(());
    };
    if reason.trim().is_empty() {
        return Err(Stop::Error(ToolError::invalid_args(format!(
            "{REASON_FIELD} must be a non-empty reason when {MODE_FIELD} differs from the current mode ({})",
            offer.effective.name()
        ))));
    }
    if requested < offer.effective {
        session.daemon.set_call_mode(Some((requested, None)));
        return Ok(());
    }
    session.escalation_asked = true;
    let name = requested.name();
    let effective = offer.effective.name();
    // Signed trust with an approver page: a host that can open a URL sends the person there
    // while the daemon's approver waits for the page's decision.
    let sent = match (&session.host, &session.tools.config.approver_url) {
        (Some(host), Some(base)) if session.hello.escalation == "signed" => host
            .send_to(
                crate::local_approver::page_url(base, &session.daemon.call_id()),
                crate::local_approver::page_message(tool, name, paths),
            )
            .map(|id| (host.clone(), id)),
        _ => None,
    };
    // The daemon's checks first, at both trust levels: what would fail reaches nobody.
    let decision = session.daemon.request_escalation(requested, &reason, calls, patch).await;
    if let Some((host, id)) = sent {
        host.sent_done(id);
    }
    let decision = match decision {
        Ok(decision) => decision,
        Err(error) => {
            let index = error.wire().and_then(|w| calls.iter().position(|c| c.path == w.path)).unwrap_or(0);
            return Err(Stop::Checked { index, error });
        }
    };
    let ticket = match decision.decided_by {
        Decider::Client => {
            // Shown and judged as the daemon will act on them (a path the daemon did not list,
            // as an older daemon lists none, as written), the model's spelling beside.
            let resolved: Vec<String> = paths
                .iter()
                .enumerate()
                .map(|(i, raw)| {
                    decision.resolved_paths.get(i).filter(|r| !r.is_empty()).unwrap_or(raw).clone()
                })
                .collect();
            let ask = Ask { tool, paths: &resolved, requested: paths, mode: name, justification: &reason };
            let path = resolved.first().cloned().unwrap_or_default();
            match session.decide(&ask).await {
                Verdict::Approved => {
                    // For the daemon's audit log: every decision is one record.
                    let by = match session.approver {
                        crate::local_approver::Approver::Rules(_) => Decider::ClientRules,
                        _ => Decider::Person,
                    };
                    let report = Report { approved: true, by, mode: requested, path: &path, reason: "" };
                    session.daemon.report_decision(report, &decision.digest).await;
                    Ticket {
                        approved_mode: requested,
                        justification: reason,
                        escalation_id: String::new(),
                        nonce: Default::default(),
                    }
                }
                Verdict::Refused { by, reason } => {
                    // For the daemon's audit log: every decision is one record.
                    let decided_by = match by {
                        RefusedBy::ClientRules => Decider::ClientRules,
                        RefusedBy::User => Decider::Person,
                        _ => Decider::Unreachable,
                    };
                    let report = Report {
                        approved: false,
                        by: decided_by,
                        mode: requested,
                        path: &path,
                        reason: &reason,
                    };
                    session.daemon.report_decision(report, &decision.digest).await;
                    return Err(Stop::Error(refused(by, name, effective, &reason)));
                }
            }
        }
        _ if decision.approved && !decision.escalation_id.is_empty() => Ticket {
            approved_mode: requested,
            justification: reason,
            escalation_id: decision.escalation_id,
            nonce: decision.nonce,
        },
        decided => {
            let by = match decided {
                Decider::Person => RefusedBy::ApproverPerson,
                Decider::Rules => RefusedBy::ApproverRules,
                _ => RefusedBy::Unreachable,
            };
            return Err(Stop::Error(refused(by, name, effective, &decision.reason)));
        }
    };
    session.daemon.set_call_mode(Some((requested, Some(ticket))));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every escalation text the model can read, as it reads it.
    #[test]
    fn escalation_texts() {
        let check = |error: ToolError, want: &str| assert_eq!(error.text(), want);
        let mode = "danger-full-access";
        let ws = "workspace-write";
        check(
            refused(RefusedBy::ApproverRules, mode, ws, ""),
            "Error: escalation to danger-full-access was refused by the approver's rules; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::ApproverPerson, mode, ws, "not on a Friday"),
            "Error: escalation to danger-full-access was refused by the person approving escalations (reason: not on a Friday); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::Unreachable, mode, ws, ""),
            "Error: escalation to danger-full-access was not decided: the approver could not be reached; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::ClientRules, mode, ws, ""),
            "Error: escalation to danger-full-access was refused by this client's escalation rules; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::User, mode, ws, "  "),
            "Error: escalation to danger-full-access was refused by the user; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::NoApprover, mode, ws, ""),
            "Error: escalation to danger-full-access was refused: no approver is configured for this client; nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::NoElicitation, mode, ws, ""),
            "Error: escalation to danger-full-access was refused: the MCP host cannot ask the user (it does not support elicitation); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            refused(RefusedBy::NoOne, mode, ws, ""),
            "Error: escalation to danger-full-access was refused: no one could be asked (there is no terminal to prompt on); nothing was changed. Do not retry this call with sandbox_permissions; continue under workspace-write mode or ask the user. [sandbox: file access denied under workspace-write mode]",
        );
        check(
            read_first("/etc/app.conf", mode),
            "Error: cannot modify \"/etc/app.conf\" under danger-full-access mode before reading it: read it first with the read tool, sandbox_permissions set to \"danger-full-access\" and a justification (an approved read also shows whether it exists), then retry this call",
        );
        assert_eq!(
            hint(Mode::WorkspaceWrite),
            "\nTo request approval for this call, retry it now with sandbox_permissions set to \"workspace-write\" and a justification."
        );
    }

    #[test]
    fn the_hint_names_the_narrowest_mode_that_covers_the_path() {
        let hello = Hello {
            writable_roots: vec!["/ws".into()],
            readable_roots: vec!["/ref".into()],
            protected_names: vec![".git".into()],
            ..Default::default()
        };
        let both =
            Offer { effective: Mode::ReadOnly, wider: vec![Mode::WorkspaceWrite, Mode::DangerFullAccess] };
        let check = |offer: &Offer, path: &str, writing: bool, want: Option<Mode>| {
            assert_eq!(needed(offer, &hello, path, writing), want, "{path} writing={writing}");
        };
        check(&both, "/ws/a.txt", true, Some(Mode::WorkspaceWrite));
        check(&both, "/ws/.git/config", true, Some(Mode::DangerFullAccess));
        check(&both, "/wsx/a.txt", true, Some(Mode::DangerFullAccess));
        check(&both, "/etc/hosts", false, Some(Mode::DangerFullAccess));
        check(&both, "/ref/a", false, None);
        let ws_only = Offer { effective: Mode::ReadOnly, wider: vec![Mode::WorkspaceWrite] };
        check(&ws_only, "/etc/hosts", true, None);
    }
}
