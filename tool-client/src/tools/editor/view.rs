//! `view`: a file as `cat -n` numbered lines or a directory as a two-level listing. A file view
//! counts as a read. A file below readStreamMinSize (most views) is one readText; anything else
//! (a directory, another type, a large file, a failure) is routed by a stat as before the read
//! was tried (a miss records confirmed absence), so its outcome and text are the stat's. Files at
//! or above readStreamMinSize are streamed with constant memory, like read's.

use fsd_proto::ErrorCode;
use serde_json::{Map, json};

use super::lines::{self, DIR_CLIPPED, FILE_CLIPPED};
use super::{Session, ToolResult, not_found};
use crate::daemon::{DaemonError, FileKind, StreamError, Target};
use crate::failure::ToolError;
use crate::window::WindowSpec;

/// Entries a directory view leaves out: hidden ones, dependencies and Python caches.
fn excluded(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules" || name == "__pycache__"
}

pub async fn run(
    session: &mut Session,
    path: &str,
    range: Option<(i64, i64)>,
) -> Result<ToolResult, ToolError> {
    // The read first: one daemon call for the common view instead of a stat and a read.
    let max_bytes = session.tools.config.read_stream_min_size.saturating_sub(1).max(1);
    if let Ok(reply) = session.daemon.read_text(path, max_bytes).await {
        return file(session, path, Some(shown_of(reply)), range).await;
    }
    let reply = session.daemon.stat(path, false).await.map_err(|e| ToolError::from_read(path, &e))?;
    let target = reply.target;
    let Some(info) = reply.info else {
        let key = (!target.key.0.is_empty()).then_some(target.key.0.as_str());
        session.record_absent(path, key);
        return Err(not_found(path));
    };
    if info.kind == FileKind::Directory {
        if let Some((a, b)) = range {
            return Err(ToolError::invalid_args(format!(
                "Invalid `view_range` parameter: [{a}, {b}]. The `view_range` parameter is not allowed when `path` points to a directory."
            )));
        }
        return directory(session, path, &target.display).await;
    }
    let large = info.size.is_none_or(|s| s >= session.tools.config.read_stream_min_size);
    let whole = if large { None } else { whole(session, path).await? };
    file(session, path, whole, range).await
}

/// The lines a file view shows, and what is known of the whole file.
struct Shown {
    target: Target,
    version: fsd_policy::Version,
    /// The first line number and the texts from there (for a stream, only the range's lines).
    first: usize,
    lines: Vec<String>,
    /// The file's line count; unknown when a stream stopped once the view was past the clip.
    total: Option<usize>,
}

fn read_error(session: &mut Session, path: &str, error: &DaemonError) -> ToolError {
    match error.wire() {
        Some(wire) if wire.code == ErrorCode::NotFound => {
            session.record_absent(path, wire.get("target_key"));
            not_found(path)
        }
        _ => ToolError::from_read(path, error),
    }
}

/// A file below readStreamMinSize: one readText, the whole text.
async fn whole(session: &mut Session, path: &str) -> Result<Option<Shown>, ToolError> {
    let max_bytes = session.tools.config.read_stream_min_size.saturating_sub(1).max(1);
    let reply = match session.daemon.read_text(path, max_bytes).await {
        Ok(reply) => reply,
        Err(error) if error.code() == Some(ErrorCode::TooLarge) => return Ok(None),
        Err(error) => return Err(read_error(session, path, &error)),
    };
    Ok(Some(shown_of(reply)))
}

/// A whole file's lines as a view shows them.
fn shown_of(reply: crate::daemon::TextRead) -> Shown {
    let (_, body) = lines::split_bom(&reply.text);
    let text = lines::lf(body);
    let all: Vec<String> = lines::lines(&text).into_iter().map(str::to_owned).collect();
    let total = Some(all.len());
    Shown { target: reply.target, version: reply.version, first: 1, lines: all, total }
}

/// A large file: streamed through the read tool's window builder with constant memory. Only the
/// requested lines are kept, and the stream stops once they are past what the clip would keep.
async fn streamed(session: &mut Session, path: &str, range: Option<(i64, i64)>) -> Result<Shown, ToolError> {
    let max = session.tools.config.max_output_chars;
    let (offset, limit) = match range {
        Some((start, end)) if start >= 1 && end >= start => (start as u64, (end - start + 1) as u64),
        Some((start, _)) if start >= 1 => (start as u64, u64::MAX),
        _ => (1, u64::MAX),
    };
    // Kept bytes beyond 4x the clip are surely clipped: stop there.
    let spec = WindowSpec { offset, limit, max_line_chars: max, max_bytes: max.saturating_mul(4) };
    let streamed = match session.daemon.read_window(path, spec).await {
        Ok(streamed) => streamed,
        Err(StreamError::Daemon(error)) => return Err(read_error(session, path, &error)),
        Err(error) => return Err(crate::tools::read::stream_error(path, error)),
    };
    let (target, version, window) = (streamed.target, streamed.version, streamed.window);
    let total = window.total.map(|t| t as usize);
    let lines = window.lines.into_iter().map(|l| l.text).collect();
    Ok(Shown { target, version, first: offset as usize, lines, total })
}

/// A file's view: its whole text when it was read whole (`whole`), else streamed.
async fn file(
    session: &mut Session,
    path: &str,
    whole: Option<Shown>,
    range: Option<(i64, i64)>,
) -> Result<ToolResult, ToolError> {
    let shown = match whole {
        Some(shown) => shown,
        None => streamed(session, path, range).await?,
    };
    let (first, texts): (usize, Vec<&str>) = match (range, shown.total) {
        (None, _) => (shown.first, shown.lines.iter().map(String::as_str).collect()),
        (Some((start, end)), total) => {
            let r = format!("[{start}, {end}]");
            // A stream that stopped early has lines, so its start is in range, and its output is
            // clipped anyway; only a complete count can put the end out of range.
            let n = total.unwrap_or(usize::MAX);
            // The empty file has no line 1, but `[1, -1]` still shows it (as read's offset 1).
            if start < 1 || start as u64 > n.max(1) as u64 {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its first element `{start}` should be within the range of lines of the file: [1, {n}]"
                )));
            }
            if end != -1 && end < start {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its second element `{end}` should be larger or equal than its first `{start}`"
                )));
            }
            if end != -1 && end as u64 > n as u64 {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its second element `{end}` should be less than or equal to the number of lines in the file: `{n}`"
                )));
            }
            let start = start as usize;
            let last = if end == -1 { usize::MAX } else { end as usize };
            let texts = shown
                .lines
                .iter()
                .enumerate()
                .filter(|(i, _)| (start..=last).contains(&(shown.first + i)))
                .map(|(_, t)| t.as_str())
                .collect();
            (start, texts)
        }
    };
    session.record_present(&[path], &shown.target, &shown.version);
    let display = &shown.target.display;
    let rendered =
        format!("Here's the result of running `cat -n` on {display}:\n{}", lines::number(&texts, first));
    let max = session.tools.config.max_output_chars as usize;
    let clipped = lines::clip(&rendered, max, FILE_CLIPPED);
    let mut meta = Map::new();
    meta.insert("path".into(), json!(display));
    if let Some(total) = shown.total {
        meta.insert("totalLines".into(), json!(total));
    }
    meta.insert("clipped".into(), json!(clipped.is_some()));
    Ok(ToolResult::text_ok(clipped.unwrap_or(rendered), meta))
}

/// One directory's visible children, by name order (the daemon's), dirs marked.
async fn children(session: &mut Session, path: &str) -> Result<Vec<(String, bool, String)>, DaemonError> {
    let entries = session.daemon.list_dir(path).await?;
    Ok(entries
        .into_iter()
        .filter(|e| !excluded(&e.name))
        .map(|e| {
            let dir = e.kind == FileKind::Directory;
            (e.name, dir, e.target.map(|t| t.display).unwrap_or_default())
        })
        .collect())
}

/// The openhands-aci listing (the root with a `/`, then each entry and, under each directory, its
/// own entries; directories end with `/`), with the exclusions named in the header. Listing
/// stops early once the text is past the clip point: the rest would be cut anyway.
async fn directory(session: &mut Session, path: &str, display: &str) -> Result<ToolResult, ToolError> {
    let max = session.tools.config.max_output_chars as usize;
    let top = children(session, path).await.map_err(|e| ToolError::from_read(path, &e))?;
    let base = display.trim_end_matches('/');
    let mut out = format!(
        "Here's the files and directories up to 2 levels deep in {display}, excluding hidden items, node_modules and __pycache__:\n{base}/"
    );
    let mut entries = 0usize;
    for (name, dir, child_path) in top {
        if out.len() > max.saturating_mul(4) {
            break;
        }
        entries += 1;
        out.push_str(&format!("\n{base}/{name}{}", if dir { "/" } else { "" }));
        if !dir {
            continue;
        }
        // A subdirectory that cannot be listed (permissions, a race) still shows itself.
        if let Ok(grandchildren) = children(session, &child_path).await {
            for (inner, inner_dir, _) in grandchildren {
                entries += 1;
                out.push_str(&format!("\n{base}/{name}/{inner}{}", if inner_dir { "/" } else { "" }));
            }
        }
    }
    let clipped = lines::clip(&out, max, DIR_CLIPPED);
    let mut meta = Map::new();
    meta.insert("path".into(), json!(display));
    meta.insert("entries".into(), json!(entries));
    meta.insert("clipped".into(), json!(clipped.is_some()));
    Ok(ToolResult::text_ok(clipped.unwrap_or(out), meta))
}
