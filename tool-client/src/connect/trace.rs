//! The W3C trace context a tool call continues into the daemon: an MCP `tools/call`'s
//! `params._meta` (`traceparent`, `tracestate`: the OpenTelemetry MCP semantic conventions), a
//! JSON line's `_meta`, or else the process's `TRACEPARENT`/`TRACESTATE` environment (the
//! OpenTelemetry convention for a process started inside a trace). Every daemon call made while
//! a tool call runs carries it as gRPC metadata (`SessionClient`'s one delegate), so the daemon's
//! spans are children of the agent host's, with the tool's name beside it (`fsd-tool`). This
//! process makes no spans of its own and sends nothing to a collector; it passes on what it was
//! given, checked only for being a header value.

use std::sync::OnceLock;

use serde_json::{Map, Value};
use tonic::metadata::{MetadataMap, MetadataValue};

/// Longer than any valid header the W3C format allows (traceparent is 55 characters; tracestate
/// at most 32 members of 256): anything past it is not passed on.
const MAX_LEN: usize = 8192;

/// A trace context to pass on.
#[derive(Debug, Clone)]
pub struct Carried {
    traceparent: MetadataValue<tonic::metadata::Ascii>,
    tracestate: Option<MetadataValue<tonic::metadata::Ascii>>,
}

tokio::task_local! {
    static CURRENT: Carried;
    static TOOL: &'static str;
}

fn value(text: &str) -> Option<MetadataValue<tonic::metadata::Ascii>> {
    (!text.is_empty() && text.len() <= MAX_LEN).then(|| MetadataValue::try_from(text).ok()).flatten()
}

impl Carried {
    fn new(traceparent: &str, tracestate: Option<&str>) -> Option<Carried> {
        Some(Carried { traceparent: value(traceparent)?, tracestate: tracestate.and_then(value) })
    }

    /// From a `_meta` object (MCP request params, a JSON line).
    pub fn from_meta(meta: &Map<String, Value>) -> Option<Carried> {
        let traceparent = meta.get("traceparent")?.as_str()?;
        Carried::new(traceparent, meta.get("tracestate").and_then(Value::as_str))
    }

    /// From `TRACEPARENT` and `TRACESTATE`, read once.
    fn from_env() -> Option<&'static Carried> {
        static ENV: OnceLock<Option<Carried>> = OnceLock::new();
        ENV.get_or_init(|| {
            let traceparent = std::env::var("TRACEPARENT").ok()?;
            Carried::new(&traceparent, std::env::var("TRACESTATE").ok().as_deref())
        })
        .as_ref()
    }
}

/// Runs one tool call with `carried` as the trace context of its daemon calls (without one, the
/// environment's, if any).
pub async fn within<F: Future>(carried: Option<Carried>, call: F) -> F::Output {
    match carried {
        Some(carried) => CURRENT.scope(carried, call).await,
        None => call.await,
    }
}

/// Runs one tool call's work with `tool` (its name) as the tool its daemon calls serve.
pub async fn tool<F: Future>(tool: &'static str, call: F) -> F::Output {
    TOOL.scope(tool, call).await
}

/// Adds the current tool call's trace context, and its tool's name, to a daemon call's metadata.
pub fn inject(metadata: &mut MetadataMap) {
    if let Ok(tool) = TOOL.try_with(|tool| *tool) {
        metadata.insert(fsd_proto::TOOL_HEADER, MetadataValue::from_static(tool));
    }
    let add = |carried: &Carried, metadata: &mut MetadataMap| {
        metadata.insert("traceparent", carried.traceparent.clone());
        if let Some(tracestate) = &carried.tracestate {
            metadata.insert("tracestate", tracestate.clone());
        }
    };
    if CURRENT.try_with(|carried| add(carried, metadata)).is_err()
        && let Some(carried) = Carried::from_env()
    {
        add(carried, metadata);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// A tool call's `_meta` reaches the metadata of the daemon calls made inside it, and only
    /// those; a value that is not a header value is not passed on.
    #[tokio::test]
    async fn meta_rides_on_the_calls_of_its_tool_call() {
        let cases = [
            (json!({"traceparent": PARENT, "tracestate": "k=v"}), Some(PARENT), Some("k=v")),
            (json!({"traceparent": PARENT}), Some(PARENT), None),
            (json!({"traceparent": "bad\nvalue"}), None, None),
            (json!({"tracestate": "k=v"}), None, None),
            (json!({"traceparent": 7}), None, None),
        ];
        for (meta, parent, state) in cases {
            let carried = meta.as_object().and_then(Carried::from_meta);
            let metadata = within(
                carried,
                tool("edit", async {
                    let mut metadata = MetadataMap::new();
                    inject(&mut metadata);
                    metadata
                }),
            )
            .await;
            let get = |key| metadata.get(key).and_then(|v| v.to_str().ok());
            assert_eq!((get("traceparent"), get("tracestate")), (parent, state), "{meta}");
            assert_eq!(get(fsd_proto::TOOL_HEADER), Some("edit"), "{meta}");
        }
        let mut outside = MetadataMap::new();
        inject(&mut outside);
        assert!(outside.get("traceparent").is_none() || std::env::var("TRACEPARENT").is_ok());
        assert!(outside.get(fsd_proto::TOOL_HEADER).is_none());
    }
}
