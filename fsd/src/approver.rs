//! The daemon's side of `fsd-approver serve`: it sends its own description of an escalation to
//! the approver and gets back a decision (and, when approved, the signature). The network
//! process makes this connection after confinement: Landlock (ABI up to 7) does not govern
//! connecting to a pathname Unix socket or a TCP port, only the socket file's permissions do.

use std::time::Duration;

use fsd_proto::approver::{ApproveRequest, Decider, approver_client::ApproverClient};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::escalation::ApproverEndpoint;

/// What the approver decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `decider`: who decided in the approver's words (`person`, `rules FILE: rule N`), which
    /// its signature covers ([`fsd_proto::signed_decision`]).
    Approved {
        signature: Vec<u8>,
        by: Decider,
        decider: String,
    },
    Refused {
        reason: String,
        by: Decider,
        decider: String,
    },
}

/// Why no decision came back.
#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("cannot reach the approver at {0}: {1}")]
    Connect(String, String),
    #[error("the approver at {0} failed: {1}")]
    Call(String, String),
    #[error("the approver at {0} did not answer within {1} s")]
    Timeout(String, u64),
}

async fn channel(endpoint: &ApproverEndpoint) -> Result<Channel, ApproverError> {
    let failed = |e: tonic::transport::Error| ApproverError::Connect(endpoint.to_string(), e.to_string());
    match endpoint {
        ApproverEndpoint::Unix(path) => {
            let path = path.clone();
            Endpoint::from_static("http://approver.local")
                .connect_timeout(Duration::from_secs(5))
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await
                .map_err(failed)
        }
        ApproverEndpoint::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))
            .map_err(failed)?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(failed),
    }
}

/// Asks the approver about `description`, waiting at most `within` (a person may be slow).
pub async fn ask(
    endpoint: &ApproverEndpoint,
    description: &str,
    within: Duration,
) -> Result<Answer, ApproverError> {
    let call = async {
        let mut client = ApproverClient::new(channel(endpoint).await?);
        let reply = client
            .approve(ApproveRequest { description: description.to_owned() })
            .await
            .map_err(|s| ApproverError::Call(endpoint.to_string(), s.message().to_owned()))?
            .into_inner();
        let by = reply.decided_by();
        let decider = reply.decider;
        Ok(if reply.approved {
            Answer::Approved { signature: reply.signature.to_vec(), by, decider }
        } else {
            Answer::Refused { reason: reply.reason, by, decider }
        })
    };
    tokio::time::timeout(within, call)
        .await
        .map_err(|_| ApproverError::Timeout(endpoint.to_string(), within.as_secs()))?
}
