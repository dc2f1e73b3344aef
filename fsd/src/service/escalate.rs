//! RequestEscalation and ReleaseEscalation. The daemon checks every call first (observation,
//! staleness, edit matching: what would fail never reaches a person or a rule file), then, under
//! signed trust, sends its own description (resolved targets, versions, digests, a diff) to its
//! approver and answers the caller with the decision only. Under signed trust nothing the
//! caller may not read reaches it: not the description, not the diff, and not whether a target
//! outside its grant exists (such a target gets the same answer whatever is there, until an
//! approver lets the caller read it). Client trust believes the client, so its checks speak
//! about every target.

use fsd_proto::approver::Decider as ApproverDecider;
use fsd_proto::v1;
use fsd_proto::{ErrorCode, WireError, digest};
use tonic::{Request, Response, Status};

use super::FsdService;
use super::grant::{Caller, Decision, Extra, Step};
use super::patched::{Effect, PatchCheck};
use super::wire::{self, Called, mode_from_wire};
use crate::approver_client::{self, Answer};
use crate::config::Escalation;
use crate::error::EscalationDenial;
use crate::escalation::diff::{self, Shown};
use crate::escalation::{AFTER_EARLIER, CanonicalOp, Describe, Preview, escape, lexical};
use crate::op::{self, Mode, Op, Outcome, WriteOperation};
use fsd_patch::Op as PatchOp;

/// The most calls one escalation request may list, whatever the budgets say.
const MAX_ESCALATED_OPS: usize = 10_000;

/// A refusal's reason as the caller sees it: escaped, bounded.
fn bounded_reason(reason: &str) -> String {
    escape(reason).chars().take(500).collect()
}

/// Whether a call outside a patch would be approved without the approver seeing its change: a
/// write without its content, an edit without its strings, a move with new content (which only
/// a patch gives, and the daemon then computes). Such a request is refused before any check.
fn unbound(op: Op, wire: &v1::EscalatedOp) -> bool {
    match op {
        Op::WriteText => wire.content.is_none(),
        Op::EditText => wire.old_string.is_none() || wire.new_string.is_none(),
        Op::MoveFile => !wire.content_sha256.is_empty(),
        _ => false,
    }
}

/// What the approver is told of a path the caller wrote differently from the one shown.
fn requested_as(requested: &str, shown: &str) -> Option<String> {
    (requested != shown).then(|| requested.to_owned())
}

/// A check's refusal of the call's own guard or match, said of the path as the caller wrote
/// it (the answer it would have had from the call itself, before any approval).
fn as_requested(mut w: WireError, path: &str) -> WireError {
    if matches!(
        w.code,
        ErrorCode::StaleVersion | ErrorCode::NotObserved | ErrorCode::EditNotFound | ErrorCode::AmbiguousEdit
    ) {
        w.path = fsd_proto::names::sanitize(path);
        w.metadata.remove("target_key");
    }
    w
}

/// The answer about a target outside the caller's grant that no approval lets it know about yet:
/// an approved read of it at `requested` comes first.
fn read_first(path: &str, requested: Mode) -> WireError {
    WireError::new(
        ErrorCode::NotObserved,
        path,
        "outside this client's grant: an approved read of the target comes first",
    )
    .with("read_first", requested.as_str())
}

/// Whether this network process plays a compromised one that skips its own refusal of a
/// hard-linked file (the test hook `FSD_FAULT_SKIP_HARD_LINK_CHECK`): the worker performing the
/// call must refuse it still. Never in a release build.
fn skips_own_checks() -> bool {
    #[cfg(feature = "fault-injection")]
    return crate::escalation::fault::skips_hard_link_check();
    #[cfg(not(feature = "fault-injection"))]
    false
}

/// The text a write replaces as its dry run saw it (`""` for a creation), `None` when it is
/// not text or too large to show.
fn text_before(checked: Option<&Outcome>) -> Option<String> {
    match checked {
        Some(Outcome::WriteText { operation: WriteOperation::Create, .. }) => Some(String::new()),
        Some(Outcome::WriteText { change, .. }) => change.before.clone(),
        _ => None,
    }
}

/// What a call changes, taken out of its request for the check threads.
#[derive(Debug, Default)]
struct Change {
    content: Option<String>,
    old: Option<String>,
    new: Option<String>,
    replace_all: bool,
}

impl Change {
    fn take(wire: &mut v1::EscalatedOp) -> Change {
        Change {
            content: wire.content.take(),
            old: wire.old_string.take(),
            new: wire.new_string.take(),
            replace_all: wire.replace_all,
        }
    }
}

/// What a preview of one call's content is held to: the caller, and each path of the call with
/// its target key and the object the daemon's resolution found (the source first).
struct Seen<'a> {
    caller: &'a Caller,
    targets: Vec<(&'a str, &'a str, Option<&'a crate::op::Binding>)>,
}

impl FsdService {
    /// A preview (a dry run: of a call, or of a patch's hunks) as the worker
    /// of the requested mode is handed it. Under signed trust that worker reads nothing unbound
    /// beyond a read-only worker's authority (`worker::run`): a target outside it is previewed
    /// only bound to the objects the daemon resolved, with the caller's latest approval naming
    /// it (an approved read comes first), which the worker checks itself.
    fn previewed(&self, seen: &Seen<'_>, request: op::Request) -> op::Request {
        if self.escalation != Escalation::Signed {
            return request;
        }
        let client = seen.caller.client();
        let Some((_, first, _)) = seen.targets.first() else { return request };
        let Some(approval) = self.known.approval(&seen.caller.session, &client, first) else {
            return request;
        };
        let bindings: Option<Vec<_>> = seen
            .targets
            .iter()
            .map(|(path, _, bound)| bound.map(|b| ((*path).to_owned(), b.clone())))
            .collect();
        match bindings {
            Some(bindings) => op::Request::Bound {
                bindings,
                approval: Some((*approval).clone()),
                made: Vec::new(),
                requester: seen.caller.requester(),
                request: Box::new(request),
            },
            None => request,
        }
    }

    /// A preview's refusal by the worker's own check of its approval (none, or one past its
    /// expiry or naming another object), said as the caller hears of a target it may not
    /// preview: an approved read of it comes first.
    fn preview_refused(w: WireError, path: &str, requested: Mode) -> WireError {
        if w.code == ErrorCode::SandboxDenied && w.reason() == Some(fsd_proto::Reason::UnsignedEscalation) {
            return read_first(path, requested);
        }
        w
    }

    /// The call as a worker of `mode` would run it, all but its commit (`op::Request::Check`:
    /// the pipeline's dry run, in the worker): the failure it would meet (the fence, the guard
    /// against the current file, an edit's match), else the outcome it would have, whose
    /// change (before and after) is the approver's only. Only for targets the caller may know
    /// about. The network process matches no file content itself.
    async fn check(
        &self,
        mode: Mode,
        op: Op,
        wire: &v1::EscalatedOp,
        seen: &Seen<'_>,
    ) -> Result<Option<Outcome>, Status> {
        let path = wire.path.clone();
        let edit_guard = || {
            wire.edit_guard.as_ref().map(|g| op::EditGuard { version: g.version.clone(), target_key: None })
        };
        let change = match op {
            Op::EditText => op::Request::EditText {
                path,
                old: wire.old_string.clone().unwrap_or_default(),
                new: wire.new_string.clone().unwrap_or_default(),
                replace_all: wire.replace_all,
                guard: edit_guard(),
            },
            // A patch's write carries no content: its hunks are applied after the check.
            Op::WriteText => op::Request::WriteText {
                path,
                content: wire.content.clone().unwrap_or_default(),
                guard: wire::write_guard(wire.write_guard.clone()),
                match_style: false,
            },
            Op::DeleteFile => op::Request::DeleteFile { path, guard: edit_guard() },
            Op::MoveFile => op::Request::MoveFile {
                source: path,
                destination: wire.destination.clone(),
                source_guard: edit_guard(),
                destination_guard: None,
                content: None,
            },
            _ => return Ok(None),
        };
        let check = self.previewed(seen, op::Request::Check { request: Box::new(change) });
        match self.dispatch(mode, check).await {
            Ok(outcome) => Ok(Some(outcome)),
            Err(w) => Err(as_requested(Self::preview_refused(w, &wire.path, mode), &wire.path).into_status()),
        }
    }

    /// What `chunks` make of the file at `path` (or of `base`, what an earlier operation of
    /// the same patch left), as a worker of `mode` applies them in a dry run
    /// (`op::Request::PatchText`). A hunk that does not match is named by its patch line.
    async fn patched(
        &self,
        mode: Mode,
        path: &str,
        chunks: &[fsd_patch::Chunk],
        base: Option<String>,
        seen: &Seen<'_>,
    ) -> Result<String, Status> {
        let hunks = chunks.iter().map(op::Hunk::of).collect();
        let request = op::Request::PatchText { path: path.to_owned(), hunks, base };
        let check = self.previewed(seen, op::Request::Check { request: Box::new(request) });
        match self.dispatch(mode, check).await {
            Ok(Outcome::Patched { after, .. }) => Ok(after),
            Ok(_) => Err(WireError::new(ErrorCode::IoError, path, "unexpected outcome").into_status()),
            Err(w) => {
                let line =
                    w.get("hunk_index").and_then(|i| i.parse::<usize>().ok()).and_then(|i| chunks.get(i));
                let w = match line {
                    Some(chunk) => w.with("patch_line", chunk.line.to_string()),
                    None => Self::preview_refused(w, path, mode),
                };
                Err(as_requested(w, path).into_status())
            }
        }
    }

    /// Whether the caller's own grant reaches `path` and may read what is there (an absent
    /// target too: the grant tells it so already): then anything about it may be said. A file
    /// its workers may not open is no more the caller's to probe (an edit's match) or to read
    /// with the approval of a change than one outside its grant.
    async fn visible(&self, base: Mode, path: &str) -> bool {
        let denied = |w: &WireError| matches!(w.code, ErrorCode::SandboxDenied | ErrorCode::PermissionDenied);
        let stat = op::Request::Stat { path: path.to_owned(), no_follow: true };
        if matches!(self.dispatch(base, stat).await, Err(w) if denied(&w)) {
            return false;
        }
        let probe = op::Request::ReadBytes { path: path.to_owned(), max_bytes: 1 };
        !matches!(self.dispatch(base, probe).await, Err(w) if denied(&w))
    }

    /// The digest an approval binds and the diff its approver sees (never the caller).
    /// `before`: the text a write replaces (as its check saw it, or as an earlier operation of
    /// the same patch left it; `None`: not text, or too large to show).
    /// `change`: the call's content (a write's, an edit's strings), taken from the request.
    /// The diff and the digest are linear in the content's size: made on the check threads,
    /// never on this runtime thread other clients' calls are scheduled on.
    async fn preview(
        &self,
        op: Op,
        path: &str,
        change: Change,
        before: Option<String>,
        digested: Option<Vec<u8>>,
    ) -> Result<(Vec<u8>, Preview), Status> {
        // The test hook holds a write's preview whose digest is made here (a patch's was made,
        // and held, where its hunks were applied) and an edit's (its match ran in the worker's
        // dry run).
        let run = |hold, work| self.previewed_off_runtime(path, hold, work);
        let previewed = match (op, change) {
            (Op::WriteText, Change { content: Some(content), .. }) => {
                let current = before;
                run(
                    digested.is_none(),
                    Box::new(move || {
                        let lines = match current {
                            Some(old) => {
                                let diff = similar::TextDiff::configure()
                                    .timeout(std::time::Duration::from_millis(100))
                                    .diff_lines(old.as_str(), content.as_str())
                                    .unified_diff()
                                    .context_radius(2)
                                    .to_string();
                                diff::bounded(diff.lines())
                            }
                            None => vec![Shown::Note("the current content is not text or too large to show")],
                        };
                        // A patch's result was digested on the check threads already (`digested`).
                        let digest = digested.unwrap_or_else(|| digest::content(content.as_bytes()));
                        (digest, lines)
                    }),
                )
                .await
            }
            (Op::EditText, Change { old: Some(old), new: Some(new), replace_all, .. }) => {
                run(
                    true,
                    Box::new(move || {
                        let removed = old.lines().map(|l| format!("-{l}"));
                        let added = new.lines().map(|l| format!("+{l}"));
                        let mut lines = diff::bounded(removed.chain(added));
                        if replace_all {
                            lines.insert(0, Shown::Note("every occurrence"));
                        }
                        (digest::edit(&old, &new, replace_all), lines)
                    }),
                )
                .await
            }
            // Nothing else has content the daemon computed (a patch's move has: `digested`); a
            // digest the client sent beside a delete or a read is its word, never bound or shown.
            _ => return Ok((digested.unwrap_or_default(), Preview::default())),
        };
        previewed.map_err(|e| e.into_wire(path).into_status())
    }

    /// Runs a preview's `work` on the check threads.
    async fn previewed_off_runtime(
        &self,
        path: &str,
        hold: bool,
        work: Box<dyn FnOnce() -> (Vec<u8>, Vec<Shown>) + Send>,
    ) -> Result<(Vec<u8>, Preview), crate::dispatch::cpu::CpuError> {
        #[cfg(feature = "fault-injection")]
        let held = hold.then(|| path.to_owned());
        #[cfg(not(feature = "fault-injection"))]
        let _ = (hold, path);
        let (digest, lines) = self
            .dispatcher
            .cpu()
            .run(move || {
                #[cfg(feature = "fault-injection")]
                if let Some(path) = held {
                    crate::dispatch::cpu::hold::check(&path);
                }
                work()
            })
            .await?;
        Ok((digest, Preview { lines, ..Preview::default() }))
    }

    /// One requested call: checked (where the caller may know the answer), then described.
    /// `patch`: the apply_patch this call is operation `index` of.
    async fn canonical_escalated(
        &self,
        caller: &Caller,
        base: Mode,
        requested: Mode,
        op: Op,
        wire: &mut v1::EscalatedOp,
        patch: Option<(&mut PatchCheck, usize)>,
    ) -> Result<(CanonicalOp, Preview), Status> {
        // Before anything is resolved: a change described without its content is never shown.
        if patch.is_none() && unbound(op, wire) {
            return Err(EscalationDenial::UnboundChange.into_wire(&wire.path, base).into_status());
        }
        let unresolved = |key: String| CanonicalOp {
            op,
            target_key: key,
            display: lexical(&wire.path),
            version: None,
            destination: None,
            content_sha256: Vec::new(),
            bound: None,
            destination_bound: None,
        };
        let client = caller.client();
        // A target outside the caller's grant: one answer whatever is there, until an approver
        // let this caller read (or change) it. A read is what earns that, so reads go through.
        let gated = self.escalation == Escalation::Signed;
        let visible = !gated
            || (self.visible(base, &wire.path).await
                && (op != Op::MoveFile || self.visible(base, &wire.destination).await));
        let resolved = self.canonical(requested, op, &wire.path, op.follows_link()).await;
        // A read-denied path is refused at every mode: no approver is asked for what no
        // approval could grant (the answer depends on the path's name, not on what is there).
        if let Err(status) = &resolved
            && WireError::from_status(status).is_some_and(|w| w.code == ErrorCode::ReadDenied)
        {
            return Err(status.clone());
        }
        if !visible {
            let known = match &resolved {
                Ok(resolved) => self.known.knows(&caller.session, &client, &resolved.key),
                Err(_) => false,
            };
            if !known && op != Op::ReadText {
                return Err(read_first(&wire.path, requested).into_status());
            }
            if let Err(status) = &resolved {
                // An approved read will meet this failure itself; the approver sees it now.
                let why = WireError::from_status(status).map(|w| w.code.as_str()).unwrap_or("FS_IO_ERROR");
                let op = unresolved(format!("unresolved:{why}"));
                let preview =
                    Preview { requested: requested_as(&wire.path, &op.display), ..Preview::default() };
                return Ok((op, preview));
            }
        }
        let resolved = resolved?;
        // A file other names share is acted on under all of them: the approval reaches only
        // what its requester could reach itself (an approver sees one name, not the others).
        // The worker performing the call holds the same rule on what its own walk finds.
        let requester = crate::op::Requester { uid: caller.identity.uid };
        if let Some(crate::op::Last::Is(_, shown)) = resolved.binding.as_ref().map(|b| b.last)
            && shown.beyond(requester, op)
            && !skips_own_checks()
        {
            return Err(EscalationDenial::HardLinked.into_wire(&wire.path, base).into_status());
        }
        let (target_key, display, version, bound) =
            (resolved.key, resolved.display, resolved.version, resolved.binding);
        let (destination, destination_bound) = match op {
            Op::MoveFile => {
                let dst = self.canonical(requested, op, &wire.destination, true).await?;
                (Some((dst.key, dst.display)), dst.binding)
            }
            _ => (None, None),
        };
        // Beside each resolved path, the caller's spelling of it when that differs.
        let requested_path = requested_as(&wire.path, &display);
        let requested_destination =
            destination.as_ref().and_then(|(_, d)| requested_as(&wire.destination, d));
        let spelled =
            move |preview: Preview| Preview { requested: requested_path, requested_destination, ..preview };
        let mut targets = vec![(wire.path.as_str(), target_key.as_str(), bound.as_ref())];
        if let Some((key, _)) = &destination {
            targets.push((wire.destination.as_str(), key.as_str(), destination_bound.as_ref()));
        }
        let seen = Seen { caller, targets };
        let Some((patch, index)) = patch else {
            let checked = self.check(requested, op, wire, &seen).await?;
            // Checked: the content goes to the check threads, not copied.
            let change = Change::take(wire);
            let before = text_before(checked.as_ref());
            let (content_sha256, preview) = self.preview(op, &wire.path, change, before, None).await?;
            let preview = spelled(preview);
            return Ok((
                CanonicalOp {
                    op,
                    target_key,
                    display,
                    version,
                    destination,
                    content_sha256,
                    bound,
                    destination_bound,
                },
                preview,
            ));
        };
        // An operation of a patch: its hunks are applied by the worker, in a dry run, to the
        // file as it is (or to what an earlier operation of the patch left), and the approval
        // binds the result. The network process matches no file content.
        let earlier = patch.earlier(&target_key).map(|t| t.map(str::to_owned));
        let checked = match earlier {
            Some(_) => None,
            None => self.check(requested, op, wire, &seen).await?,
        };
        let source = Seen { caller, targets: seen.targets[..1].to_vec() };
        let effect = match patch.op(index) {
            Some(PatchOp::Add { contents, .. }) => Effect::Write(contents.clone()),
            Some(PatchOp::Delete { .. }) => Effect::Remove,
            Some(PatchOp::Update { chunks, move_to, .. }) => {
                let after = match (chunks.is_empty() && move_to.is_some(), &earlier) {
                    (true, _) => None,
                    (false, Some(None)) => {
                        let gone = WireError::new(
                            ErrorCode::NotFound,
                            &wire.path,
                            "the file to update does not exist",
                        );
                        return Err(gone.into_status());
                    }
                    (false, Some(Some(base))) => {
                        Some(self.patched(requested, &wire.path, chunks, Some(base.clone()), &source).await?)
                    }
                    (false, None) => Some(self.patched(requested, &wire.path, chunks, None, &source).await?),
                };
                match (after, move_to) {
                    (after, Some(_)) => Effect::Move(after),
                    (Some(after), None) => Effect::Write(after),
                    (None, None) => Effect::Remove,
                }
            }
            None => return Err(Status::invalid_argument("no such operation of the escalated patch")),
        };
        // The digest of what the hunks produce: linear in the file's size, so on the check
        // threads, never on this runtime thread other clients' calls are scheduled on.
        let produced = match &effect {
            Effect::Write(content) | Effect::Move(Some(content)) => Some(content.clone()),
            Effect::Move(None) | Effect::Remove => None,
        };
        let digested = match produced {
            Some(content) => {
                #[cfg(feature = "fault-injection")]
                let held = wire.path.clone();
                let digest = self.dispatcher.cpu().run(move || {
                    #[cfg(feature = "fault-injection")]
                    crate::dispatch::cpu::hold::check(&held);
                    digest::content(content.as_bytes())
                });
                Some(digest.await.map_err(|e| e.into_wire(&wire.path).into_status())?)
            }
            None => None,
        };
        let change = match &effect {
            Effect::Write(content) => Change { content: Some(content.clone()), ..Change::default() },
            _ => Change::default(),
        };
        patch.record(&target_key, destination.as_ref().map(|(key, _)| key.as_str()), &effect);
        let after_earlier = earlier.is_some();
        let before = match earlier {
            Some(earlier) => Some(earlier.unwrap_or_default()),
            None => text_before(checked.as_ref()),
        };
        let (content_sha256, preview) = self.preview(op, &wire.path, change, before, digested).await?;
        let preview = spelled(preview);
        let version = if after_earlier { Some(AFTER_EARLIER.to_owned()) } else { version };
        let call = CanonicalOp {
            op,
            target_key,
            display,
            version,
            destination,
            content_sha256,
            bound,
            destination_bound,
        };
        Ok((call, preview))
    }

    pub(super) async fn describe(
        &self,
        request: Request<v1::EscalationRequest>,
    ) -> Result<Response<v1::EscalationDescription>, Status> {
        let caller = Caller::of(&request, request.get_ref().context());
        let mut r = request.into_inner();
        let first = r.ops.first().map(|o| o.path.clone()).unwrap_or_default();
        #[cfg(feature = "fault-injection")]
        if r.justification == "forge previews"
            && let Some(report) = self.forged_previews(&caller, &first).await
        {
            return Err(WireError::new(ErrorCode::IoError, &first, report).into_status());
        }
        let (base, requested, _in_flight, ops_permit) = self.admit(&caller, &r, &first)?;
        let ops = self.canonical_ops(&caller, base, requested, &mut r).await?;
        let client = caller.client();
        // Audit records name the first call's path as the daemon resolved it.
        let shown = ops.first().map(|(op, _)| op.display.clone()).unwrap_or_default();
        let raw_first = first.clone();
        let first = shown;
        let extra = Extra { requested: Some(&raw_first), ..Extra::default() };
        let request = Describe {
            session: &caller.session,
            call: &caller.call,
            client: &client,
            mode: requested,
            justification: &r.justification,
            ops,
        };
        let Some(escalations) = self.escalations.as_ref().filter(|_| self.escalation == Escalation::Signed)
        else {
            return Ok(self.client_trusted(&caller, &request, &first, requested, extra));
        };
        let keys: Vec<String> = request
            .ops
            .iter()
            .flat_map(|(op, _)| {
                std::iter::once(op.target_key.clone()).chain(op.destination.clone().map(|d| d.0))
            })
            .collect();
        // The pending-escalation budget: held until this escalation is spent, refused or expired.
        self.sweep();
        self.start_sweeper(escalations);
        let permit = match self.budgets.escalation(&caller.identity) {
            Ok(permit) => permit,
            Err(refusal) => {
                let code = ErrorCode::RateLimited.as_str();
                let step = Step::Escalate(Op::Describe);
                self.audit_record(&caller, step, &first, requested, Decision::Refused, code, extra);
                // The caller hears of its own spelling, never of the daemon's resolution.
                return Err(refusal.into_wire(&raw_first).into_status());
            }
        };
        let described = escalations.describe(request, vec![permit, ops_permit]);
        let audit_by = |decision: Decision, result: &str, decided_by: Option<&str>| {
            let extra = Extra { digest: Some(&described.digest), decided_by, ..extra };
            let step = Step::Escalate(Op::Describe);
            self.audit_record(&caller, step, &first, requested, decision, result, extra);
        };
        let out = self.approver_decision(escalations, &described, &caller, &client, &keys, audit_by).await;
        Ok(Response::new(out))
    }

    /// The checks before any resolution or read: trust allows escalations, the mode is wider
    /// than the caller's and within its maximum, the number of calls is bounded; then the
    /// caller's budgets. Returns the caller's mode, the requested one and the budgets' permits.
    fn admit(
        &self,
        caller: &Caller,
        r: &v1::EscalationRequest,
        first: &str,
    ) -> Result<(Mode, Mode, crate::budget::Permit, crate::budget::Permit), Status> {
        let refuse = |denial: EscalationDenial| denial.into_wire(first, self.default_mode).into_status();
        if self.escalation == Escalation::Deny {
            return Err(refuse(EscalationDenial::Disabled(None)));
        }
        let max = self.max_for(caller);
        let base = self.default_mode.min(max);
        let requested = mode_from_wire(r.requested_mode()).ok_or_else(|| refuse(EscalationDenial::NoMode))?;
        if requested <= base {
            return Err(refuse(EscalationDenial::NotWider(requested)));
        }
        if requested > max {
            self.audit(
                caller,
                Step::Escalate(Op::Describe),
                first,
                requested,
                Decision::Refused,
                ErrorCode::SandboxDenied.as_str(),
            );
            return Err(refuse(EscalationDenial::AboveMax { requested, max }));
        }
        let most = self.budgets.limits().escalated_ops.min(MAX_ESCALATED_OPS);
        if r.ops.is_empty() || r.ops.len() > most {
            return Err(Status::invalid_argument(format!("an escalation lists between 1 and {most} calls")));
        }
        // The caller's budgets, before any check costs the daemon a resolution or a read: the
        // request is a call like any other, and its operations count until it is decided.
        let budgeted = self.budgets.call(&caller.identity).and_then(|call| {
            let ops = self.budgets.escalated_ops(&caller.identity, r.ops.len())?;
            Ok((call, ops))
        });
        let (in_flight, ops_permit) = match budgeted {
            Ok(permits) => permits,
            Err(refusal) => {
                let code = ErrorCode::RateLimited.as_str();
                self.audit(caller, Step::Escalate(Op::Describe), first, requested, Decision::Refused, code);
                return Err(refusal.into_wire(first).into_status());
            }
        };
        Ok((base, requested, in_flight, ops_permit))
    }

    /// Every listed call checked and resolved, in order; the first refusal is audited and ends
    /// the request.
    async fn canonical_ops(
        &self,
        caller: &Caller,
        base: Mode,
        requested: Mode,
        r: &mut v1::EscalationRequest,
    ) -> Result<Vec<(CanonicalOp, Preview)>, Status> {
        let mut patch = r.patch.as_deref().map(|text| PatchCheck::new(text, &r.ops)).transpose()?;
        let mut ops = Vec::with_capacity(r.ops.len());
        for (index, wire) in r.ops.iter_mut().enumerate() {
            let Some(op) = Op::escalatable(&wire.op) else {
                return Err(Status::invalid_argument(format!("cannot escalate operation {:?}", wire.op)));
            };
            let patch = patch.as_mut().map(|p| (p, index));
            match self.canonical_escalated(caller, base, requested, op, wire, patch).await {
                Ok(described) => ops.push(described),
                Err(status) => {
                    let code = WireError::from_status(&status).map(|w| w.code.as_str()).unwrap_or("error");
                    self.audit(
                        caller,
                        Step::Escalate(Op::Describe),
                        &wire.path,
                        requested,
                        Decision::Checked,
                        code,
                    );
                    return Err(status);
                }
            }
        }
        Ok(ops)
    }

    /// Client trust: the checks passed; the client's own approver decides, and reports its
    /// decision naming this digest.
    fn client_trusted(
        &self,
        caller: &Caller,
        request: &Describe<'_>,
        first: &str,
        requested: Mode,
        extra: Extra<'_>,
    ) -> Response<v1::EscalationDescription> {
        let digest = crate::escalation::client_digest(request);
        let step = Step::Escalate(Op::Describe);
        let extra = Extra { digest: Some(&digest), ..extra };
        self.audit_record(caller, step, first, requested, Decision::Checked, "ok", extra);
        // The client's approver shows and judges what the daemon will act on.
        let resolved_paths = request
            .ops
            .iter()
            .map(|(op, _)| op.display.clone())
            .chain(request.ops.iter().filter_map(|(op, _)| op.destination.clone().map(|(_, d)| d)))
            .collect();
        Response::new(v1::EscalationDescription {
            decided_by: v1::Decider::Client as i32,
            digest,
            resolved_paths,
            ..Default::default()
        })
    }

    /// Expiries are audited when they happen, not at the next request: one sweeper per service.
    fn start_sweeper(&self, escalations: &std::sync::Arc<crate::escalation::Escalations>) {
        self.sweeper.call_once(|| {
            // Holds no more than the escalations (weakly) and the log: it ends with the service.
            let pending = std::sync::Arc::downgrade(escalations);
            let audit = self.audit.clone();
            let every = (escalations.ttl() / 4)
                .clamp(std::time::Duration::from_millis(250), std::time::Duration::from_secs(5));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let Some(escalations) = pending.upgrade() else { break };
                    super::grant::sweep(&escalations, audit.as_deref());
                }
            });
        });
    }

    /// Signed trust: the approver's answer to the daemon's description, audited and recorded,
    /// as the caller hears it (the decision only).
    async fn approver_decision(
        &self,
        escalations: &crate::escalation::Escalations,
        described: &crate::escalation::Described,
        caller: &Caller,
        client: &str,
        keys: &[String],
        audit_by: impl Fn(Decision, &str, Option<&str>),
    ) -> v1::EscalationDescription {
        let audit = |decision: Decision, result: &str| audit_by(decision, result, None);
        audit(Decision::Pending, "ok");
        let endpoint = self.approver_endpoint.as_ref();
        let answer = match endpoint {
            Some(endpoint) => {
                let (token, tls) = (self.approver_token.as_ref(), self.approver_tls.as_ref());
                approver_client::ask(endpoint, token, tls, &described.text, escalations.ttl()).await
            }
            None => {
                Err(approver_client::ApproverError::Connect("(none)".into(), "no approver_endpoint".into()))
            }
        };
        let reply = |approved: bool, by: v1::Decider, reason: String| v1::EscalationDescription {
            escalation_id: if approved { described.id.clone() } else { String::new() },
            nonce: if approved { described.nonce.clone().into() } else { Default::default() },
            expires_unix: if approved { i64::try_from(described.expires).unwrap_or(i64::MAX) } else { 0 },
            approved,
            decided_by: by as i32,
            reason,
            // Signed trust: the digest is of a description the caller may not read; not sent.
            digest: String::new(),
            resolved_paths: Vec::new(),
        };
        let decider_of = |by: ApproverDecider| match by {
            ApproverDecider::Person => v1::Decider::Person,
            _ => v1::Decider::Rules,
        };
        match answer {
            Ok(Answer::Approved { signature, by, decider }) => {
                match escalations.approve(&described.id, &signature, &decider) {
                    Ok(()) => {
                        audit_by(Decision::Approved, "ok", Some(&decider));
                        // What a later preview of these targets shows its worker.
                        let signed = escalations.signed(&described.id).map(std::sync::Arc::new);
                        for key in keys {
                            self.known.record(&caller.session, client, key, signed.clone());
                        }
                        reply(true, decider_of(by), String::new())
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the approver's signature does not verify with approver_public_key");
                        audit(Decision::Refused, "bad_signature");
                        reply(false, v1::Decider::Unreachable, String::new())
                    }
                }
            }
            Ok(Answer::Refused { reason, by, decider }) => {
                escalations.refuse(&described.id);
                audit_by(Decision::Refused, "ok", Some(&decider));
                reply(false, decider_of(by), bounded_reason(&reason))
            }
            Err(e) => {
                escalations.refuse(&described.id);
                tracing::warn!(error = %e, "no decision from the approver");
                audit(Decision::Refused, "unreachable");
                reply(false, v1::Decider::Unreachable, String::new())
            }
        }
    }

    /// Test hook (cargo feature `fault-injection`): what a compromised network process could
    /// ask a danger-full-access worker to preview. With `FSD_FAULT_FORGE_PREVIEW` naming a
    /// file, a RequestEscalation justified `forge previews` sends, instead of its checks, an unbound read of that file, an
    /// unbound dry run of a write of it (whose outcome holds the text it replaces), and both
    /// bound to that file with the approval of `first` (another object the caller may preview),
    /// and fails with what each returned: `content:` and its start, or `refused:` and the code.
    #[cfg(feature = "fault-injection")]
    async fn forged_previews(&self, caller: &Caller, first: &str) -> Option<String> {
        let target = std::env::var("FSD_FAULT_FORGE_PREVIEW").ok()?;
        let mode = Mode::DangerFullAccess;
        let shown = |result: Result<Outcome, WireError>| match result {
            Ok(Outcome::ReadText { text, .. }) => {
                format!("content:{}", text.trim().chars().take(12).collect::<String>())
            }
            Ok(Outcome::WriteText { change, .. }) => match change.before {
                Some(text) => format!("content:{}", text.trim().chars().take(12).collect::<String>()),
                None => "no-content".to_owned(),
            },
            Ok(_) => "other".to_owned(),
            Err(w) => format!("refused:{}", w.code.as_str()),
        };
        let read = op::Request::ReadText { path: target.clone(), max_bytes: 1 << 20 };
        let write = op::Request::WriteText {
            path: target.clone(),
            content: String::new(),
            guard: None,
            match_style: false,
        };
        let check = op::Request::Check { request: Box::new(write) };
        let unbound_read = shown(self.dispatch(mode, read.clone()).await);
        let unbound_check = shown(self.dispatch(mode, check.clone()).await);
        let client = caller.client();
        let approval = match self.canonical(mode, Op::ReadText, first, true).await {
            Ok(other) => self.known.approval(&caller.session, &client, &other.key),
            Err(_) => None,
        };
        let binding = self.canonical(mode, Op::ReadText, &target, true).await.ok().and_then(|c| c.binding);
        let (bound_read, bound_check) = match (approval, binding) {
            (Some(approval), Some(binding)) => {
                let bound = |request| op::Request::Bound {
                    bindings: vec![(target.clone(), binding.clone())],
                    approval: Some((*approval).clone()),
                    made: Vec::new(),
                    requester: caller.requester(),
                    request: Box::new(request),
                };
                (
                    shown(self.dispatch(mode, bound(read)).await),
                    shown(self.dispatch(mode, bound(check)).await),
                )
            }
            _ => ("no-approval".to_owned(), "no-approval".to_owned()),
        };
        Some(format!(
            "forged: read={unbound_read} check={unbound_check} bound-read={bound_read} bound-check={bound_check}"
        ))
    }

    pub(super) fn release(&self, request: Request<v1::ReleaseEscalationRequest>) {
        let caller = Caller::of(&request, request.get_ref().context());
        let r = request.get_ref();
        if let Some(escalations) = &self.escalations {
            escalations.release(&r.escalation_id, &caller.session, &caller.client());
        }
        // A decision of the client's own approver: audited as the client reports it.
        if let (Escalation::Client, Some(decided)) = (self.escalation, &r.client_decision) {
            let by = match decided.decided_by() {
                v1::Decider::Person => "client:person",
                v1::Decider::ClientRules => "client:rules",
                _ => "client:none",
            };
            let mode = mode_from_wire(decided.requested_mode()).unwrap_or(self.default_mode);
            let decision = if decided.approved { Decision::Approved } else { Decision::Refused };
            // The client's word: bounded and escaped like every other name it sends.
            let digest: String = escape(&decided.digest).chars().take(64).collect();
            let digest = (!digest.is_empty()).then_some(digest.as_str());
            let step = Step::Escalate(Op::Describe);
            let extra = Extra { digest, ..Extra::default() };
            self.audit_record(&caller, step, &decided.path, mode, decision, by, extra);
        }
    }
}
