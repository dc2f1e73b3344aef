//! The read tool: one readText RPC for a small file (the daemon fstats and reads on one handle),
//! a stream for a large one, the window cut here, the observation recorded after success.

use fsd_proto::{ErrorCode, WireError};
use serde_json::{Map, Value, json};

use super::{Session, ToolResult, args, escalation_fields};
use crate::daemon::{DaemonError, StreamError};
use crate::failure::ToolError;
use crate::window::{self, WindowBuilder, WindowSpec};

pub(super) fn not_text(path: &str) -> ToolError {
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
    escalation_fields::resolve(session, map, "read", &[escalation_fields::PlannedCall::read(&path)]).await?;

    // Files at or above readStreamMinSize stream; the daemon says FS_TOO_LARGE for those.
    let (target, version, window) =
        match session.daemon.read_text(&path, stream_min.saturating_sub(1).max(1)).await {
            Ok(read) => {
                let mut builder = WindowBuilder::new(spec);
                builder.feed(read.text.as_bytes()).map_err(|_| not_text(&path))?;
                let window = builder.finish().map_err(|_| not_text(&path))?;
                (read.target, read.version, window)
            }
            Err(DaemonError::Refused(wire)) if wire.code == ErrorCode::TooLarge => {
                let streamed =
                    session.daemon.read_window(&path, spec).await.map_err(|e| stream_error(&path, e))?;
                (streamed.target, streamed.version, streamed.window)
            }
            Err(DaemonError::Refused(wire)) => {
                if wire.code == ErrorCode::NotFound {
                    session.record_absent(&path, wire.get("target_key"));
                }
                return Err(ToolError::from_read_wire(&path, &wire));
            }
            Err(error) => return Err(ToolError::from_read(&path, &error)),
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
    let text = window::render(&target.display, &window, offset, spec.max_line_chars);
    let mut meta = Map::new();
    meta.insert("path".into(), json!(target.display));
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

/// A failed windowed read of a large file, in the read tool's words.
pub(super) fn stream_error(path: &str, error: StreamError) -> ToolError {
    match error {
        StreamError::Daemon(error) => ToolError::from_read(path, &error),
        StreamError::NotText => not_text(path),
        StreamError::NoHeader => ToolError::new(
            "FS_IO_ERROR",
            format!("cannot read \"{path}\": the stream ended without a header"),
        ),
    }
}
