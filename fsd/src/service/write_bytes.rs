//! fsd.v1's raw-byte operations: WriteBytes, a client stream (a header, then chunks) that flows
//! through a pipe into a worker's atomic replace in constant memory, the same path as a REST PUT;
//! and Remove, the REST DELETE's operation (a unary call through `unary`).

use fsd_proto::WireError;
use fsd_proto::v1::{self, write_bytes_request::Item};
use tonic::{Request, Response, Status, Streaming};

use super::grant::Caller;
use super::{FsdService, unexpected, wire};
use crate::identity::Identity;
use crate::op::Op;

impl FsdService {
    pub(super) async fn write_bytes_call(
        &self,
        request: Request<Streaming<v1::WriteBytesRequest>>,
    ) -> Result<Response<v1::WriteBytesReply>, Status> {
        let identity = request.extensions().get::<Identity>().cloned().unwrap_or_default();
        let face = super::grant::face_of(&request);
        let mut stream = request.into_inner();
        let header = match stream.message().await? {
            Some(v1::WriteBytesRequest { item: Some(Item::Header(header)) }) => header,
            _ => return Err(Status::invalid_argument("the first WriteBytes message must be its header")),
        };
        if header.mode.is_some_and(|m| m > 0o777) {
            return Err(Status::invalid_argument("mode holds permission bits only (at most 0777)"));
        }
        let context = header.context.clone();
        let caller = Caller {
            identity,
            session: context.as_ref().map(|c| c.session_id.clone()).unwrap_or_default(),
            call: context.as_ref().map(|c| c.call_id.clone()).unwrap_or_default(),
            face,
        };
        let mut call = wire::write_bytes(header);
        let path = call.path().to_owned();
        let refused = |r: crate::budget::Refusal| r.into_wire(&path).into_status();
        let _in_flight = self.budgets.call(&caller.identity).map_err(refused)?;
        let grant = self.mode(&caller, context.as_ref(), &path, Op::WriteBytes)?;
        self.redeem(&caller, &grant, &mut call).await?;
        self.may_create(&caller, grant.mode, &call).await.map_err(WireError::into_status)?;
        let feed = |mut sink: super::BodySink| async move {
            loop {
                match stream.message().await {
                    Ok(Some(v1::WriteBytesRequest { item: Some(Item::Chunk(bytes)) })) => {
                        if sink.send(&bytes).await.is_err() {
                            return Ok(());
                        }
                    }
                    Ok(None) => {
                        let _ = sink.finish().await;
                        return Ok(());
                    }
                    // Dropping the sink unfinished abandons the write: nothing is replaced.
                    Ok(Some(_)) => {
                        return Err(Status::invalid_argument("WriteBytes takes one header, then chunks"));
                    }
                    Err(status) => return Err(status),
                }
            }
        };
        let (fed, result) = self.stream_write(&caller, grant.mode, call, feed).await;
        if let Some(Err(status)) = fed {
            return Err(status);
        }
        let outcome = result.map_err(|w| w.into_status())?;
        wire::write_bytes_reply(outcome).map(Response::new).ok_or_else(unexpected)
    }
}
