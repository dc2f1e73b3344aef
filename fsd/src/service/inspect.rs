//! Inspect: what a change's preflight asks about each of its targets (may the mode change it,
//! what is there, its text), in one call instead of two or three per target. Each question is
//! the single call's, made through the same service path (budget, grant, ticket, worker or
//! direct read), so every answer, a refusal included, is the one that call gives.

use fsd_proto::v1;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::FsdService;
use super::grant::Caller;
use super::wire;
use crate::op::{self, Op, Outcome};

/// The replies of one Inspect, one per target, in order.
pub type Answers = ReceiverStream<Result<v1::InspectReply, Status>>;

impl FsdService {
    /// Answers `message`'s targets one after another on a task of their own; a client that
    /// stops reading stops the questions (one reply waits at most).
    pub(super) fn inspect_targets(
        &self,
        caller: Caller,
        message: v1::InspectRequest,
    ) -> Result<Answers, Status> {
        // Held as an open stream is: one reply (one file's text) waits for the reader at most,
        // and a reader that reads nothing for the idle timeout ends it.
        let first = message.targets.first().map_or("", |t| t.path.as_str());
        let permit = self.budgets.stream(&caller.identity).map_err(|r| r.into_wire(first).into_status())?;
        // Counted, and its span told its outcome, as it opens (as a streamed read is), at the
        // mode it asks for (each question is granted its own, and audited, as it is asked);
        // each question is counted as its own call when it is answered, and its worker calls
        // are children of this call's span, which lasts until the last answer.
        let asked = message.context.as_ref().and_then(|c| super::mode_from_wire(c.mode()));
        let mode = asked.unwrap_or(self.default_mode.min(self.max_for(&caller)));
        crate::metrics::call(Op::Inspect.name(), mode, caller.face, "ok", std::time::Instant::now());
        crate::traces::outcome(Op::Inspect.name(), mode, "ok", &caller.session, &caller.call);
        let (tx, rx) = mpsc::channel(1);
        let service = self.clone();
        let questions = async move {
            let _permit = permit;
            let context = message.context;
            for target in message.targets {
                let reply = service.inspected(&caller, context.as_ref(), target).await;
                match tokio::time::timeout(service.stream_idle, tx.send(Ok(reply))).await {
                    Ok(Ok(())) => {}
                    // The reader went away, or stopped reading: no more questions.
                    Ok(Err(_)) | Err(_) => break,
                }
            }
        };
        tokio::spawn(crate::traces::as_parts(questions));
        Ok(ReceiverStream::new(rx))
    }

    /// The answers for one target.
    async fn inspected(
        &self,
        caller: &Caller,
        context: Option<&v1::CallContext>,
        target: v1::InspectTarget,
    ) -> v1::InspectReply {
        let path = target.path;
        let check = op::Request::CheckWrite { path: path.clone(), no_follow: target.no_follow };
        let write_check = self.called(caller, context, check).await;
        let checked = matches!(&write_check, Ok(Outcome::Stat { .. }));
        let write_check = stat_answer(write_check);
        if !checked {
            return v1::InspectReply { write_check: Some(write_check), ..Default::default() };
        }
        // The write check's stat is this one when it did not follow a final link either.
        let stat = match target.no_follow {
            true => write_check.clone(),
            false => {
                let stat = op::Request::Stat { path: path.clone(), no_follow: true };
                stat_answer(self.called(caller, context, stat).await)
            }
        };
        let readable = matches!(
            &stat.answer,
            Some(v1::inspect_stat::Answer::Reply(v1::StatReply { info: Some(info), .. }))
                if matches!(info.r#type(), v1::FileType::File | v1::FileType::Symlink)
        );
        let text = match target.read && readable {
            true => {
                let read = self.called(caller, context, op::Request::ReadText { path, max_bytes: 0 }).await;
                let answer = match read.map(wire::read_text_reply) {
                    Ok(Some(reply)) => v1::inspect_read::Answer::Reply(reply),
                    Ok(None) => v1::inspect_read::Answer::Error(wire::call_error(&super::unexpected())),
                    Err(status) => v1::inspect_read::Answer::Error(wire::call_error(&status)),
                };
                Some(v1::InspectRead { answer: Some(answer) })
            }
            false => None,
        };
        v1::InspectReply { write_check: Some(write_check), stat: Some(stat), text }
    }
}

fn stat_answer(result: Result<Outcome, Status>) -> v1::InspectStat {
    let answer = match result.map(wire::stat_reply) {
        Ok(Some(reply)) => v1::inspect_stat::Answer::Reply(reply),
        Ok(None) => v1::inspect_stat::Answer::Error(wire::call_error(&super::unexpected())),
        Err(status) => v1::inspect_stat::Answer::Error(wire::call_error(&status)),
    };
    v1::InspectStat { answer: Some(answer) }
}
