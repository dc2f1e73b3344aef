//! The read tool: one readText RPC for a small file (the daemon fstats and reads on one handle),
//! a stream for a large one, the window cut here, the observation recorded after success.

use fsd_proto::v1::{self, stream_text_reply::Item};
use fsd_proto::{ErrorCode, WireError};
use serde_json::{Map, Value, json};

use super::{Session, ToolResult, args, escalation};
use crate::failure::ToolError;
use crate::window::{self, NotText, Window, WindowBuilder, WindowSpec};

fn not_text(path: &str) -> ToolError {
    ToolError::from_read_wire(path, &WireError::new(ErrorCode::NotText, path, "not text"))
}

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let allowed = session.allowed_args(&["file_path", "offset", "limit"]);
    let map = args::object(args, &allowed)?;
    let file_path = args::non_empty(map, "file_path")?;
    let config = &session.tools.config;
    let max_limit = config.read_limit;
    let offset = args::positive(map, "offset")?.unwrap_or(1);
    let limit = args::positive(map, "limit")?.unwrap_or(max_limit);
    if limit > max_limit {
        return Err(ToolError::invalid_args(format!("limit must be less than or equal to {max_limit}")));
    }
    let spec = WindowSpec {
        offset,
        limit,
        max_line_chars: config.read_max_line_length,
        max_bytes: config.read_max_bytes,
    };
    let stream_min = config.read_stream_min_size;
    let path = session.absolute(&file_path);
    // An approved read is one call at the wider mode; the observation it records lets an
    // approved edit of the same file follow.
    escalation::resolve(session, map, "read", &[escalation::PlannedCall::read(&path)]).await?;

    // Files at or above readStreamMinSize stream; the daemon says FS_TOO_LARGE for those.
    let request = v1::ReadTextRequest {
        context: session.context(),
        path: path.clone(),
        max_bytes: stream_min.saturating_sub(1).max(1),
    };
    let (target, version, window) = match session.client.read_text(request).await {
        Ok(reply) => {
            let reply = reply.into_inner();
            let mut builder = WindowBuilder::new(spec);
            builder.feed(reply.text.as_bytes()).map_err(|_| not_text(&path))?;
            let window = builder.finish().map_err(|_| not_text(&path))?;
            (reply.target.unwrap_or_default(), reply.version, window)
        }
        Err(status) => match WireError::from_status(&status) {
            Some(wire) if wire.code == ErrorCode::TooLarge => stream(session, &path, spec).await?,
            Some(wire) => {
                if wire.code == ErrorCode::NotFound {
                    session.record_absent(&path, wire.get("target_key"));
                }
                return Err(ToolError::from_read_wire(&path, &wire));
            }
            None => return Err(ToolError::unavailable(&status)),
        },
    };

    if let Some(total) = window.total {
        let empty_ok = offset == 1 && total == 0;
        if offset > total && !empty_ok {
            return Err(ToolError::invalid_args(format!(
                "offset {offset} is out of range for \"{path}\" ({total} lines)"
            )));
        }
    }
    session.record_present(&[&path], &target, &version);
    let text = window::render(&target.display_path, &window, offset, spec.max_line_chars);
    let mut meta = Map::new();
    meta.insert("path".into(), json!(target.display_path));
    meta.insert("offset".into(), json!(offset));
    meta.insert("lines".into(), json!(window.lines.len()));
    if let Some(total) = window.total {
        meta.insert("totalLines".into(), json!(total));
    }
    if window.capped {
        meta.insert("truncatedByBytes".into(), json!(true));
    }
    Ok(ToolResult::text_ok(text, meta))
}

/// Streams a large file through the window builder, stopping as soon as the window is complete.
async fn stream(
    session: &mut Session,
    path: &str,
    spec: WindowSpec,
) -> Result<(v1::Target, String, Window), ToolError> {
    let request = v1::StreamTextRequest { context: session.context(), path: path.to_owned(), chunk_bytes: 0 };
    let mut stream =
        session.client.stream_text(request).await.map_err(|s| ToolError::from_read(path, &s))?.into_inner();
    let mut header = None;
    let mut builder = WindowBuilder::new(spec);
    loop {
        let message = stream.message().await.map_err(|s| ToolError::from_read(path, &s))?;
        let Some(message) = message else { break };
        match message.item {
            Some(Item::Header(h)) => header = Some((h.target.unwrap_or_default(), h.version)),
            // Sent only after the last chunk: the version with the digest of everything read.
            Some(Item::Trailer(t)) => {
                if let Some((_, version)) = header.as_mut() {
                    *version = t.version;
                }
            }
            Some(Item::Chunk(bytes)) => {
                builder.feed(&bytes).map_err(|e: NotText| {
                    let _ = e;
                    not_text(path)
                })?;
                if builder.done_early() {
                    // Dropping the stream cancels it; the daemon stops reading.
                    break;
                }
            }
            None => {}
        }
    }
    drop(stream);
    let (target, version) = header.ok_or_else(|| {
        ToolError::new("FS_IO_ERROR", format!("cannot read \"{path}\": the stream ended without a header"))
    })?;
    let window = builder.finish().map_err(|_| not_text(path))?;
    Ok((target, version, window))
}
