//! Signed escalation's two calls: RequestEscalation (the daemon's canonical description of the
//! calls a client wants to make at a wider mode, with a diff the daemon made) and
//! ReleaseEscalation.

use fsd_proto::v1;
use fsd_proto::{ErrorCode, WireError, digest};
use tonic::{Request, Response, Status};

use super::FsdService;
use super::grant::{Caller, Decision, Step};
use super::wire::{Called, mode_from_wire};
use crate::backend::{self, Mode, Outcome};
use crate::escalation::{CanonicalOp, Describe, Preview};
use crate::op::Op;

impl FsdService {
    /// The digest an approval binds and the diff its approver sees. When the client sent the
    /// change itself, both come from the daemon: the digest of what was sent, and a diff
    /// against the file as a worker of the requested mode reads it now.
    async fn preview(&self, mode: Mode, op: Op, wire: &v1::EscalatedOp, exists: bool) -> (Vec<u8>, Preview) {
        const MAX_PREVIEW_LINES: usize = 200;
        let bounded = |mut lines: Vec<String>| {
            if lines.len() > MAX_PREVIEW_LINES {
                let more = lines.len() - MAX_PREVIEW_LINES;
                lines.truncate(MAX_PREVIEW_LINES);
                lines.push(format!("… {more} more diff lines not shown"));
            }
            Preview { lines }
        };
        match (op, &wire.content, &wire.old_string, &wire.new_string) {
            (Op::WriteText, Some(content), _, _) => {
                let current = if exists {
                    let request = backend::Request::ReadText { path: wire.path.clone(), max_bytes: 1 << 20 };
                    match self.dispatch(mode, request).await {
                        Ok(Outcome::ReadText { text, .. }) => Some(text),
                        _ => None,
                    }
                } else {
                    Some(String::new())
                };
                let lines = match current {
                    Some(old) => similar::TextDiff::configure()
                        .timeout(std::time::Duration::from_millis(100))
                        .diff_lines(old.as_str(), content.as_str())
                        .unified_diff()
                        .context_radius(2)
                        .to_string()
                        .lines()
                        .map(str::to_owned)
                        .collect(),
                    None => vec!["(the current content is not text or too large to show)".to_owned()],
                };
                (digest::content(content.as_bytes()), bounded(lines))
            }
            (Op::EditText, _, Some(old), Some(new)) => {
                let mut lines: Vec<String> = old.lines().map(|l| format!("-{l}")).collect();
                lines.extend(new.lines().map(|l| format!("+{l}")));
                if wire.replace_all {
                    lines.insert(0, "(every occurrence)".to_owned());
                }
                (digest::edit(old, new, wire.replace_all), bounded(lines))
            }
            _ => (wire.content_sha256.to_vec(), Preview::default()),
        }
    }

    pub(super) async fn describe(
        &self,
        request: Request<v1::EscalationRequest>,
    ) -> Result<Response<v1::EscalationDescription>, Status> {
        let caller = Caller::of(&request, request.get_ref().context());
        let r = request.into_inner();
        let first = r.ops.first().map(|o| o.path.clone()).unwrap_or_default();
        let refuse = |why: String| {
            WireError::new(ErrorCode::SandboxDenied, &first, why)
                .with("mode", self.default_mode.as_str())
                .into_status()
        };
        let Some(escalations) = &self.escalations else {
            return Err(refuse("this daemon does not take signed escalations".into()));
        };
        let max = self.max_for(&caller);
        let base = self.default_mode.min(max);
        let requested =
            mode_from_wire(r.requested_mode()).ok_or_else(|| refuse("no mode requested".into()))?;
        if requested <= base {
            return Err(refuse(format!("{} needs no escalation", requested.as_str())));
        }
        if requested > max {
            self.audit(
                &caller,
                Step::Escalate(Op::Describe),
                &first,
                requested,
                Decision::Refused,
                ErrorCode::SandboxDenied.as_str(),
            );
            return Err(refuse(format!(
                "{} is above this client's maximum mode {}",
                requested.as_str(),
                max.as_str()
            )));
        }
        if r.ops.is_empty() || r.ops.len() > 10_000 {
            return Err(Status::invalid_argument("an escalation lists between 1 and 10000 calls"));
        }
        let mut ops = Vec::with_capacity(r.ops.len());
        for wire in &r.ops {
            let Some(op) = Op::escalatable(&wire.op) else {
                return Err(Status::invalid_argument(format!("cannot escalate operation {:?}", wire.op)));
            };
            let (target_key, display, version) =
                self.canonical(requested, op, &wire.path, op.follows_link()).await?;
            let destination = match op {
                Op::MoveFile => {
                    let (key, display, _) = self.canonical(requested, op, &wire.destination, true).await?;
                    Some((key, display))
                }
                _ => None,
            };
            let (content_sha256, preview) = self.preview(requested, op, wire, version.is_some()).await;
            ops.push((
                CanonicalOp { op, target_key, display, version, destination, content_sha256 },
                preview,
            ));
        }
        let described = escalations.describe(Describe {
            session: &caller.session,
            client: &caller.client(),
            mode: requested,
            justification: &r.justification,
            ops,
        });
        self.audit(&caller, Step::Escalate(Op::Describe), &first, requested, Decision::Pending, "ok");
        Ok(Response::new(v1::EscalationDescription {
            escalation_id: described.id,
            nonce: described.nonce.into(),
            description: described.text,
            expires_unix: i64::try_from(described.expires).unwrap_or(i64::MAX),
        }))
    }

    pub(super) fn release(&self, request: Request<v1::ReleaseEscalationRequest>) {
        let caller = Caller::of(&request, request.get_ref().context());
        if let Some(escalations) = &self.escalations {
            escalations.release(&request.get_ref().escalation_id, &caller.session);
        }
    }
}
