//! The two processes of `fsd-approver serve` and what they say to each other. The keeper holds
//! the signing key, the queue, the decision log and the deciders (rule file, terminal); it parses
//! no HTTP. The front (re-executed as `fsd-approver front`, on a socket pair that is its stdin)
//! serves everything spoken over a network: the daemons' gRPC, the web page, the webhook. The
//! front asks; the keeper decides and signs. One JSON object per line each way.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::config::Config;

/// What the front tells the keeper.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToKeeper {
    /// A daemon's request (its description, verbatim), from the sandbox its token names (empty
    /// when no `[[daemon]]` is configured).
    Ask { ask: u64, sandbox: String, description: String },
    /// The daemon stopped waiting for `ask` (its own deadline, or it went away).
    Gone { ask: u64 },
    /// A person on the page decided the request `key`.
    Decide { ticket: u64, key: String, person: String, approve: bool, reason: String },
    /// The front could not start serving (its whole error, e.g. `cannot serve: …`).
    Failed { reason: String },
}

/// What the keeper tells the front.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToFront {
    /// The first message: what to serve.
    /// `socket_group`: `--socket-group` as typed, for errors (`socket_gid` is what it names).
    Start {
        config: Box<Config>,
        listen: String,
        socket_mode: u32,
        socket_gid: Option<u32>,
        socket_group: Option<String>,
    },
    /// The answer to a daemon's `ask`.
    Answer { ask: u64, reply: Reply },
    /// A request now waits in the queue.
    Queued { entry: Entry },
    /// A request waits no more (decided, expired or withdrawn).
    Removed { key: String },
    /// The outcome of a page's `Decide`: `None`, done, or why not (shown to the person).
    Decided { ticket: u64, refusal: Option<String> },
}

/// A decision as the daemon receives it (`fsd.approver.v1.ApproveReply`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub approved: bool,
    /// Hex of the Ed25519 signature, when approved.
    pub signature: String,
    pub reason: String,
    /// `fsd.approver.v1.Decider` as its number.
    pub decided_by: i32,
    pub decider: String,
}

/// One waiting request, as the page and the webhook see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Names the request on the page: the start of its description's SHA-256 (no authority).
    pub key: String,
    pub sandbox: String,
    pub description: String,
    pub arrived: u64,
    pub expires: u64,
}

/// Writes one message as a line.
pub async fn send<W: AsyncWriteExt + Unpin, T: Serialize>(out: &mut W, message: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line).await?;
    out.flush().await
}

/// Reads the next message; `None` when the other process has closed its end.
pub async fn recv<R: AsyncBufReadExt + Unpin, T: for<'de> Deserialize<'de>>(
    input: &mut R,
) -> std::io::Result<Option<T>> {
    let mut line = String::new();
    if input.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line).map(Some).map_err(std::io::Error::other)
}

/// What a description says, for the page's headline and the webhook (the daemon's lines, not
/// re-derived): the one parser of a description's fields outside the rule file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub mode: String,
    pub client: String,
    pub session: String,
    /// The client's id of the call that asked (a page link names the request by it).
    pub call: String,
    pub justification: String,
    /// `(op, path)` of each operation, in order.
    pub ops: Vec<(String, String)>,
}

impl Summary {
    pub fn of(description: &str) -> Summary {
        let mut s = Summary::default();
        for line in description.lines() {
            if let Some(v) = line.strip_prefix("mode: ") {
                s.mode = v.to_owned();
            } else if let Some(v) = line.strip_prefix("call: ") {
                s.call = v.to_owned();
            } else if let Some(v) = line.strip_prefix("client: ") {
                s.client = v.to_owned();
            } else if let Some(v) = line.strip_prefix("session: ") {
                s.session = v.to_owned();
            } else if let Some(v) = line.strip_prefix("justification: ") {
                s.justification = v.to_owned();
            } else if let Some(rest) = line.strip_prefix("op ")
                && let Some((op, path)) = rest.split_once(": ").and_then(|(_, o)| o.split_once(' '))
            {
                s.ops.push((op.to_owned(), path.to_owned()));
            }
        }
        s
    }
}

/// The description's expiry (`expires: <unix seconds>`).
pub fn expires(description: &str) -> Option<u64> {
    description.lines().find_map(|l| l.strip_prefix("expires: ")?.parse().ok())
}

/// The page's name of a request: 16 hex digits of its description's SHA-256.
pub fn key_of(description: &str) -> String {
    let mut key = hex::encode(fsd_proto::digest::content(description.as_bytes()));
    key.truncate(16);
    key
}
