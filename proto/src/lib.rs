//! The `fsd.v1` wire contract: generated message and service types, plus the stable error codes
//! and their mapping to and from `tonic::Status` with a `google.rpc.ErrorInfo` detail.
#![forbid(unsafe_code)]

pub mod chain;
mod code;
pub mod codec;
pub mod digest;
pub mod glob;
pub mod names;
pub mod reason;
pub mod time;
pub mod version;

pub use code::{ErrorCode, WireError};
pub use reason::{Reason, Step, TicketRefusal, Word, WorkerLost};

/// Generated types of package `fsd.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("fsd.v1");
}

/// The encoded `google.protobuf.FileDescriptorSet` of `fsd/v1/fsd.proto`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fsd_descriptor.bin"));

/// Generated types of package `fsd.approver.v1`: the network face of `fsd-approver`.
#[allow(clippy::all, missing_docs)]
pub mod approver {
    tonic::include_proto!("fsd.approver.v1");
}

/// The bytes an approval's signature covers: the daemon's description followed by the line
/// naming who decided (`person`, or `rules FILE: rule N`), so the approver vouches for both.
/// Newlines in `decider` are escaped: it is one line whatever the approver sent.
pub fn signed_decision(description: &str, decider: &str) -> String {
    let decider = decider.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r");
    format!("{description}decided-by: {decider}\n")
}

/// The protocol version `hello` reports; bumped only on an incompatible wire change.
pub const PROTOCOL_VERSION: u32 = 1;

/// The request metadata naming the tool call a daemon call serves (`read`, `edit`, …), sent by
/// `fsd-tools`; the daemon puts it on the call's trace span (`gen_ai.tool.name`) and nowhere else.
pub const TOOL_HEADER: &str = "fsd-tool";
