//! Grants: who is calling, the mode a call runs at (the default, a narrower one it asks for, or
//! a wider one its escalation earns under the daemon's trust level), the redemption of signed
//! tickets, and the audit records of all of it, built in one place.

use fsd_proto::v1;
use fsd_proto::{ErrorCode, digest};
use tonic::{Request, Status};

use super::FsdService;
use super::wire::mode_from_wire;
use crate::audit;
use crate::config::Escalation;
use crate::error::EscalationDenial;
use crate::escalation::{CanonicalOp, Escalations, Ticket, TicketError, escape, lexical};
use crate::identity::Identity;
use crate::op::Op;
use crate::op::{self, Mode, Outcome};

/// The mode a call runs at, and the signed ticket it must redeem first (signed trust only).
#[derive(Debug, Clone)]
pub(super) struct Grant {
    pub mode: Mode,
    pub ticket: Option<v1::EscalationTicket>,
}

/// Who is calling, as far as the transport tells.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub identity: Identity,
    pub session: String,
    pub call: String,
    /// How the call came (gRPC, gRPC-Web or REST), for the metrics.
    pub face: crate::metrics::Face,
}

impl Caller {
    pub fn of<T>(request: &Request<T>, context: Option<&v1::CallContext>) -> Caller {
        // The edge layer (`crate::edge`) authenticated the connection and the call before any
        // service sees it; without it (a service used directly) the caller is anonymous.
        let identity = request.extensions().get::<Identity>().cloned().unwrap_or_default();
        Caller {
            identity,
            session: context.map(|c| c.session_id.clone()).unwrap_or_default(),
            call: context.map(|c| c.call_id.clone()).unwrap_or_default(),
            face: face_of(request),
        }
    }

    /// `uid:1000`, `cert:NAME`, `token:NAME` or `tcp` (anonymous loopback TCP).
    pub fn client(&self) -> String {
        self.identity.label()
    }

    /// Whom an approved call is made for, as the worker performing it is told (it believes the
    /// approval's signed `client:` line over this when the two differ).
    pub fn requester(&self) -> op::Requester {
        #[cfg(feature = "fault-injection")]
        if crate::escalation::fault::lies_about_the_requester() {
            return op::Requester { uid: Some(0) };
        }
        op::Requester { uid: self.identity.uid }
    }

    /// Who its changes are recorded as made by (`backend::record`): the authenticated
    /// identity; the session and call ids only narrow a view.
    pub fn author(&self, escalated: bool) -> crate::op::Author {
        let given = |id: &str| (!id.is_empty()).then(|| id.to_owned());
        crate::op::Author {
            identity: self.client(),
            session: given(&self.session),
            call: given(&self.call),
            escalated,
        }
    }
}

/// The face a gRPC request came by: gRPC-Web when the HTTP face said so (`crate::rest`), else
/// gRPC.
pub(super) fn face_of<T>(request: &Request<T>) -> crate::metrics::Face {
    request.extensions().get::<crate::metrics::Face>().copied().unwrap_or(crate::metrics::Face::Grpc)
}

/// What an audit record is about: a call, or a step of an escalation (`escalate:OP`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Step {
    Call(Op),
    Escalate(Op),
}

/// How an audited step ended.
#[derive(Debug, Clone, Copy)]
pub(super) enum Decision {
    Allowed,
    Denied,
    Approved,
    Refused,
    Pending,
    /// A pending escalation reached its expiry before every call it listed was used.
    Expired,
    /// The checks before an approver: "ok" or the code the call would have failed with.
    Checked,
}

impl Decision {
    /// What the audit log records of a call that ran: denied when the fence or a read-denied
    /// pattern refused it, else allowed (whatever else then failed).
    pub(super) fn of_call(error: Option<ErrorCode>) -> Decision {
        match error {
            Some(ErrorCode::SandboxDenied | ErrorCode::ReadDenied) => Decision::Denied,
            _ => Decision::Allowed,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::Approved => "approved",
            Decision::Refused => "refused",
            Decision::Pending => "pending",
            Decision::Expired => "expired",
            Decision::Checked => "checked",
        }
    }
}

/// The optional parts of an audit record.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Extra<'a> {
    /// The digest of the description an approver decided on.
    pub digest: Option<&'a str>,
    /// The path as the request wrote it, when the record's path is the daemon's resolution.
    pub requested: Option<&'a str>,
    /// Who decided, as the signed approver said.
    pub decided_by: Option<&'a str>,
}

/// Forgets expired escalations, one audit record each: waiting for a decision, or approved and
/// not (wholly) used.
pub(super) fn sweep(escalations: &Escalations, audit: Option<&audit::Audit>) {
    for expired in escalations.purge() {
        let Some(log) = audit else { continue };
        let result = match (expired.approved, expired.used) {
            (false, _) => "undecided".to_owned(),
            (true, 0) => "unused".to_owned(),
            (true, used) => format!("{used} of {} calls used", expired.total),
        };
        log.record(&audit::Entry {
            time: audit::now(),
            session: &expired.session,
            call: "",
            client: expired.client.clone(),
            op: "escalate:describe",
            path: &expired.path,
            requested_path: None,
            mode: expired.mode.as_str(),
            decision: Decision::Expired.as_str(),
            result: &result,
            digest: Some(&expired.digest),
            decided_by: None,
        });
    }
}

impl FsdService {
    /// The highest mode this caller may reach.
    pub(super) fn max_for(&self, caller: &Caller) -> Mode {
        caller.identity.max_mode(&self.client_max_modes).unwrap_or(self.max_mode)
    }

    /// Writes one audit record.
    pub(super) fn audit(
        &self,
        caller: &Caller,
        step: Step,
        path: &str,
        mode: Mode,
        decision: Decision,
        result: &str,
    ) {
        self.audit_record(caller, step, path, mode, decision, result, Extra::default());
    }

    /// Writes one audit record. `path` is shown as the daemon acts on it (see
    /// [`audit::Entry::path`]), the request's own spelling beside it when that differs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn audit_record(
        &self,
        caller: &Caller,
        step: Step,
        path: &str,
        mode: Mode,
        decision: Decision,
        result: &str,
        extra: Extra<'_>,
    ) {
        crate::metrics::decision(matches!(step, Step::Escalate(_)), decision.as_str());
        let Some(log) = &self.audit else { return };
        let shown = lexical(path);
        let requested = extra.requested.unwrap_or(path);
        // The approver's words, shown like every other name it did not choose to be safe.
        let decided_by = extra.decided_by.filter(|d| !d.is_empty()).map(escape);
        let op = match step {
            Step::Call(op) => op.name().to_owned(),
            Step::Escalate(op) => format!("escalate:{}", op.name()),
        };
        log.record(&audit::Entry {
            time: audit::now(),
            session: &caller.session,
            call: &caller.call,
            client: caller.client(),
            op: &op,
            path: &shown,
            requested_path: (requested != shown).then_some(requested),
            mode: mode.as_str(),
            decision: decision.as_str(),
            result,
            digest: extra.digest,
            decided_by: decided_by.as_deref(),
        });
    }

    /// Forgets expired escalations, one audit record each.
    pub(super) fn sweep(&self) {
        if let Some(escalations) = &self.escalations {
            sweep(escalations, self.audit.as_deref());
        }
    }

    /// The mode a call runs at: the daemon's default (capped by the caller's maximum) unless the
    /// call asks for a narrower one; wider only with an escalation the trust level accepts.
    pub(super) fn mode(
        &self,
        caller: &Caller,
        context: Option<&v1::CallContext>,
        path: &str,
        op: Op,
    ) -> Result<Grant, Status> {
        let plain = |mode| Ok(Grant { mode, ticket: None });
        let max = self.max_for(caller);
        let base = self.default_mode.min(max);
        let requested = context.map(|c| c.mode()).unwrap_or(v1::Mode::Unspecified);
        let Some(requested) = mode_from_wire(requested) else {
            return plain(base);
        };
        if requested <= base {
            return plain(requested);
        }
        let deny = |denial: EscalationDenial| {
            self.audit(
                caller,
                Step::Escalate(op),
                path,
                requested,
                Decision::Refused,
                ErrorCode::SandboxDenied.as_str(),
            );
            Err(denial.into_wire(path, base).into_status())
        };
        if requested > max {
            return deny(EscalationDenial::AboveMax { requested, max });
        }
        match self.escalation {
            Escalation::Deny => deny(EscalationDenial::Disabled(Some(requested))),
            Escalation::Client => {
                let ticket = context.and_then(|c| c.escalation.as_ref());
                let approved = ticket.and_then(|t| mode_from_wire(t.approved_mode()));
                let justified = ticket.is_some_and(|t| !t.justification.trim().is_empty());
                match approved {
                    Some(approved) if approved >= requested && justified => {
                        self.audit(caller, Step::Escalate(op), path, requested, Decision::Approved, "ok");
                        plain(requested)
                    }
                    _ => deny(EscalationDenial::NeedsApproval(requested)),
                }
            }
            // The ticket is checked against the re-canonicalised call in `redeem`.
            Escalation::Signed => match context.and_then(|c| c.escalation.clone()) {
                Some(ticket) if !ticket.escalation_id.is_empty() => {
                    Ok(Grant { mode: requested, ticket: Some(ticket) })
                }
                _ => deny(EscalationDenial::NeedsTicket(requested)),
            },
        }
    }

    /// The daemon's own canonical form of a path: resolved in a worker of `mode`, with the
    /// object that resolution stood on (what an approval binds).
    pub(super) async fn canonical(
        &self,
        mode: Mode,
        op: Op,
        path: &str,
        follow: bool,
    ) -> Result<Canonical, Status> {
        let request = op::Request::Stat { path: path.to_owned(), no_follow: !follow };
        match self.dispatch(mode, request).await.map_err(|w| w.into_status())? {
            Outcome::Stat { target, info, binding } => Ok(Canonical {
                key: target.key,
                display: target.display,
                version: info.map(|i| i.version),
                binding,
            }),
            _ => Err(Status::internal(format!("{}: unexpected outcome", op.name()))),
        }
    }

    /// Describes one call as an approver would have seen it. Its content's digest is linear in
    /// its size: made on the check threads (the content lent to them and given back, never
    /// copied), not on this runtime thread other clients' calls are scheduled on.
    async fn canonical_op(&self, mode: Mode, request: &mut op::Request) -> Result<CanonicalOp, Status> {
        let op = match request.op() {
            op if op.is_mutation() => op,
            _ => Op::Read,
        };
        let lent = |content: &mut String| std::mem::take(content);
        let (digest, destination) = match request {
            op::Request::WriteText { path, content, .. } => {
                let lent = lent(content);
                let (back, digest) = self
                    .digested(path, move || {
                        let digest = digest::content(lent.as_bytes());
                        ((lent, String::new()), digest)
                    })
                    .await?;
                *content = back.0;
                (digest, None)
            }
            op::Request::EditText { path, old, new, replace_all, .. } => {
                let (old_lent, new_lent, all) = (lent(old), lent(new), *replace_all);
                let (back, digest) = self
                    .digested(path, move || {
                        let digest = digest::edit(&old_lent, &new_lent, all);
                        ((old_lent, new_lent), digest)
                    })
                    .await?;
                (*old, *new) = back;
                (digest, None)
            }
            op::Request::MoveFile { source, destination, content: Some(content), .. } => {
                let lent = lent(content);
                let (back, digest) = self
                    .digested(source, move || {
                        let digest = digest::content(lent.as_bytes());
                        ((lent, String::new()), digest)
                    })
                    .await?;
                *content = back.0;
                (digest, Some(destination.clone()))
            }
            op::Request::MoveFile { destination, .. } => (Vec::new(), Some(destination.clone())),
            _ => (Vec::new(), None),
        };
        let destination = destination.as_deref();
        let follow = request.op().follows_link();
        let source = self.canonical(mode, op, request.path(), follow).await?;
        let (destination, destination_bound) = match destination {
            Some(dst) => {
                let dst = self.canonical(mode, op, dst, true).await?;
                (Some((dst.key, dst.display)), dst.binding)
            }
            None => (None, None),
        };
        Ok(CanonicalOp {
            op,
            target_key: source.key,
            display: source.display,
            version: source.version,
            destination,
            content_sha256: digest,
            bound: source.binding,
            destination_bound,
        })
    }

    /// A digest made on the check threads, with what it was made of given back.
    async fn digested(
        &self,
        path: &str,
        work: impl FnOnce() -> ((String, String), Vec<u8>) + Send + 'static,
    ) -> Result<((String, String), Vec<u8>), Status> {
        #[cfg(feature = "fault-injection")]
        let held = path.to_owned();
        let digested = self.dispatcher.cpu().run(move || {
            #[cfg(feature = "fault-injection")]
            crate::dispatch::cpu::hold::check(&held);
            work()
        });
        digested.await.map_err(|e| e.into_wire(path).into_status())
    }

    /// Redeems a signed ticket for this call, or refuses it (audited either way). For a read
    /// that took an approved read, its target key, for [`FsdService::give_back_read`].
    pub(super) async fn redeem(
        &self,
        caller: &Caller,
        grant: &Grant,
        request: &mut op::Request,
    ) -> Result<Option<String>, Status> {
        let Some(ticket) = &grant.ticket else { return Ok(None) };
        let path = &request.path().to_owned();
        let request_op = request.op();
        // Reading bytes of a target is what a change's approval bounds; a stat is not.
        let content = matches!(request, op::Request::ReadText { .. } | op::Request::ReadBytes { .. });
        let digest = self.escalations.as_ref().and_then(|e| e.digest_of(&ticket.escalation_id));
        let extra = Extra { digest: digest.as_deref(), ..Extra::default() };
        let refuse = |denial: EscalationDenial| {
            self.audit_record(
                caller,
                Step::Escalate(request_op),
                path,
                grant.mode,
                Decision::Refused,
                ErrorCode::SandboxDenied.as_str(),
                extra,
            );
            denial.into_wire(path, self.default_mode).into_status()
        };
        let Some(escalations) = &self.escalations else {
            return Err(refuse(EscalationDenial::NoSignedEscalation));
        };
        let max = self.max_for(caller);
        if grant.mode > max {
            return Err(refuse(EscalationDenial::AboveMax { requested: grant.mode, max }));
        }
        let client = caller.client();
        let presented = presented(ticket, caller, &client, grant.mode);
        // The ticket first: a worker of the wider mode resolves nothing for a caller without
        // an approval (its errors would say what exists there).
        if let Err(e) = escalations.check(&presented) {
            return Err(refuse(EscalationDenial::Ticket(e)));
        }
        let call = match self.canonical_op(grant.mode, request).await {
            Ok(call) => call,
            // A path the approver saw (one that did not resolve when described): its own error.
            // Any other path: the same refusal whatever is there.
            Err(status) if escalations.names(&presented, path) => return Err(status),
            Err(_) => return Err(refuse(EscalationDenial::Ticket(TicketError::Mismatch))),
        };
        // Before the ticket is spent: its last call forgets the escalation.
        let decider = escalations.decider_of(&ticket.escalation_id);
        // What the approver signed, for the worker performing the call (a change or a read) to
        // check itself.
        let approval = escalations.signed(&ticket.escalation_id);
        #[cfg(feature = "fault-injection")]
        let approval = crate::escalation::fault::tampered(approval);
        let destination = match request.plain() {
            op::Request::MoveFile { destination, .. } => Some(destination.clone()),
            _ => None,
        };
        // The directories its earlier calls made, as their workers vouched (before the last
        // call's redemption forgets the escalation).
        let made = escalations.made_of(&ticket.escalation_id);
        let result = if call.op == Op::Read {
            let taken = escalations.take_read(&presented, path, &call, content);
            taken.map(|(taken, binding)| {
                (taken.then(|| call.target_key.clone()), vec![(path.clone(), binding)])
            })
        } else {
            escalations.redeem(&presented, path, &call).and_then(|approved| {
                // An approved call with nothing to hold it to is refused, not run unbound.
                let bindings =
                    approved.bindings(path, destination.as_deref()).ok_or(TicketError::Mismatch)?;
                Ok((None, bindings))
            })
        };
        match result {
            Ok((read, bindings)) => {
                // The worker that performs the call holds its own walk to what was approved.
                let plain = std::mem::replace(request, op::Request::ListDir { path: String::new() });
                #[cfg(feature = "fault-injection")]
                let (plain, bindings) = crate::escalation::fault::redirected(plain, bindings);
                let requester = caller.requester();
                *request =
                    op::Request::Bound { bindings, approval, made, requester, request: Box::new(plain) };
                let step = Step::Escalate(request_op);
                // The record names the path the call resolved to, and who approved it.
                let extra = Extra { requested: Some(path), decided_by: decider.as_deref(), ..extra };
                self.audit_record(caller, step, &call.display, grant.mode, Decision::Approved, "ok", extra);
                Ok(read)
            }
            Err(e) => Err(refuse(EscalationDenial::Ticket(e))),
        }
    }

    /// An approved call's outcome, the directories it made (as its worker vouched) recorded
    /// for its approval's later calls.
    pub(super) fn vouched(&self, grant: &Grant, outcome: Outcome) -> Outcome {
        let Outcome::Vouched { outcome, made } = outcome else { return outcome };
        if let (Some(escalations), Some(ticket)) = (&self.escalations, &grant.ticket) {
            escalations.record_made(&ticket.escalation_id, made);
        }
        *outcome
    }

    /// Gives back the approved read a read of `key` took when the daemon only said the file is
    /// too large for that call: the client reads it again, streamed, in the same tool call.
    pub(super) fn give_back_read(&self, caller: &Caller, grant: &Grant, key: &str) {
        let (Some(escalations), Some(ticket)) = (&self.escalations, &grant.ticket) else { return };
        let client = caller.client();
        escalations.give_back_read(&presented(ticket, caller, &client, grant.mode), key);
    }
}

/// A path as the daemon resolved it.
pub(super) struct Canonical {
    pub key: String,
    pub display: String,
    /// The version found, `None` for an absent target.
    pub version: Option<String>,
    /// The object the resolution stood on.
    pub binding: Option<op::Binding>,
}

/// The ticket a call presents: the escalation it names, for the caller's session and `client`.
fn presented<'a>(
    ticket: &'a v1::EscalationTicket,
    caller: &'a Caller,
    client: &'a str,
    mode: Mode,
) -> Ticket<'a> {
    Ticket { id: &ticket.escalation_id, nonce: &ticket.nonce, session: &caller.session, client, mode }
}
