//! The change record's calls (docs/rewind.md): Checkpoint and ListChanges. Each runs in a
//! workspace-write worker, the mode whose workers hold the record (`backend::record`); who may
//! see whose changes is decided here, from the authenticated identity and `change_operators`.

use fsd_proto::{ErrorCode, Reason, WireError, v1};
use tonic::{Request, Response, Status};

use super::grant::{Caller, Decision, Step};
use super::{FsdService, unexpected, wire};
use crate::op::{self, Mode, Op, Outcome};

impl FsdService {
    /// Names a point in the record for the caller.
    pub(super) async fn checkpoint_call(
        &self,
        request: Request<v1::CheckpointRequest>,
    ) -> Result<Response<v1::CheckpointReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let _in_flight = self.budgets.call(&caller.identity).map_err(|r| r.into_wire("").into_status())?;
        let label = request.into_inner().label;
        let call = op::Request::Checkpoint { author: caller.author(false), label };
        match self.record_call(&caller, call).await? {
            Outcome::Checkpoint { id } => Ok(Response::new(v1::CheckpointReply { id })),
            _ => Err(unexpected()),
        }
    }

    /// Lists the changes after a point, with each changed file's diff where the caller may see it.
    pub(super) async fn list_changes_call(
        &self,
        request: Request<v1::ListChangesRequest>,
    ) -> Result<Response<v1::ListChangesReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let _in_flight = self.budgets.call(&caller.identity).map_err(|r| r.into_wire("").into_status())?;
        let message = request.into_inner();
        let query = op::ChangesQuery {
            since: message.since,
            identity: self.whose(&caller, &message.identity).map_err(WireError::into_status)?,
            session: message.this_session.then(|| caller.session.clone()),
            reader_mode: self.own_mode(&caller),
        };
        match self.record_call(&caller, op::Request::Changes(query)).await? {
            Outcome::Changes(changes) => Ok(Response::new(wire::changes_reply(changes))),
            _ => Err(unexpected()),
        }
    }

    /// Restores the files the selected changes after a point changed; audited.
    pub(super) async fn rewind_call(
        &self,
        request: Request<v1::RewindRequest>,
    ) -> Result<Response<v1::RewindReply>, Status> {
        let caller = Caller::of(&request, request.get_ref().context.as_ref());
        let _in_flight = self.budgets.call(&caller.identity).map_err(|r| r.into_wire("").into_status())?;
        let message = request.into_inner();
        // A rewind writes: a caller whose own mode writes nothing may not make one (its changes
        // were approved one call at a time, and undoing them is a change of its own).
        let whose = match self.own_mode(&caller) {
            Mode::ReadOnly => Err(crate::error::Failure::new(
                crate::error::FsError::Denied(crate::error::Denial::ReadOnly),
                String::new(),
            )
            .into_wire()),
            _ => self.whose(&caller, &message.identity),
        };
        let result = match whose {
            Ok(identity) => {
                let query = op::ChangesQuery {
                    since: message.since,
                    identity,
                    session: message.this_session.then(|| caller.session.clone()),
                    reader_mode: self.own_mode(&caller),
                };
                let call = op::Request::Rewind {
                    author: caller.author(false),
                    query,
                    keep_checkpoint: message.keep_checkpoint,
                };
                self.dispatcher.call(Mode::WorkspaceWrite, &caller.client(), call).await
            }
            Err(refused) => Err(refused),
        };
        let code = result.as_ref().err().map(|w| w.code.as_str()).unwrap_or("ok");
        let decision = Decision::of_call(result.as_ref().err().map(|w| w.code));
        let point = format!("since {}", message.since);
        self.audit(&caller, Step::Call(Op::Rewind), &point, Mode::WorkspaceWrite, decision, code);
        match result.map_err(WireError::into_status)? {
            Outcome::Rewind(rewound) => Ok(Response::new(wire::rewind_reply(rewound))),
            _ => Err(unexpected()),
        }
    }

    /// Whose changes a caller asks for: its own (`""`), or, for an operator, another
    /// identity's (`None`: every identity's, `*`).
    pub(super) fn whose(&self, caller: &Caller, asked: &str) -> Result<Option<String>, WireError> {
        let own = caller.client();
        if asked.is_empty() || asked == own {
            return Ok(Some(own));
        }
        if !self.change_operators.contains(&own) {
            return Err(WireError::new(ErrorCode::PermissionDenied, "", "another identity's changes")
                .with_reason(Reason::OthersChanges));
        }
        Ok((asked != "*").then(|| asked.to_owned()))
    }

    /// The mode the caller runs at without asking: what it may read now.
    fn own_mode(&self, caller: &Caller) -> Mode {
        self.default_mode.min(self.max_for(caller))
    }

    /// Runs a call of the record in a workspace-write worker (the record's holders).
    async fn record_call(&self, caller: &Caller, call: op::Request) -> Result<Outcome, Status> {
        self.dispatcher
            .call(Mode::WorkspaceWrite, &caller.client(), call)
            .await
            .map_err(WireError::into_status)
    }
}
