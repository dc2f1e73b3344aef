//! `view`: one stat for type routing (a miss records confirmed absence), then a file as `cat -n`
//! numbered lines or a directory as a two-level listing. A file view counts as a read.

use fsd_proto::{ErrorCode, WireError, v1};
use serde_json::{Map, json};

use super::lines::{self, DIR_CLIPPED, FILE_CLIPPED};
use super::{Session, ToolResult, not_found};
use crate::failure::ToolError;

/// Entries a directory view leaves out: hidden ones, dependencies and Python caches.
fn excluded(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules" || name == "__pycache__"
}

pub async fn run(
    session: &mut Session,
    path: &str,
    range: Option<(i64, i64)>,
) -> Result<ToolResult, ToolError> {
    let request = v1::StatRequest { context: session.context(), path: path.to_owned(), no_follow: false };
    let reply = session.client.stat(request).await.map_err(|s| ToolError::from_read(path, &s))?.into_inner();
    let target = reply.target.unwrap_or_default();
    let Some(info) = reply.info else {
        let key = (!target.target_key.is_empty()).then_some(target.target_key.as_str());
        session.record_absent(path, key);
        return Err(not_found(path));
    };
    if info.r#type == v1::FileType::Directory as i32 {
        if let Some((a, b)) = range {
            return Err(ToolError::invalid_args(format!(
                "Invalid `view_range` parameter: [{a}, {b}]. The `view_range` parameter is not allowed when `path` points to a directory."
            )));
        }
        return directory(session, path, &target.display_path).await;
    }
    file(session, path, range).await
}

async fn file(session: &mut Session, path: &str, range: Option<(i64, i64)>) -> Result<ToolResult, ToolError> {
    let request = v1::ReadTextRequest { context: session.context(), path: path.to_owned(), max_bytes: 0 };
    let reply = match session.client.read_text(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            return Err(match WireError::from_status(&status) {
                Some(wire) if wire.code == ErrorCode::NotFound => {
                    session.record_absent(path, wire.get("target_key"));
                    not_found(path)
                }
                Some(wire) => ToolError::from_read_wire(path, &wire),
                None => ToolError::unavailable(&status),
            });
        }
    };
    let target = reply.target.unwrap_or_default();
    let (_, body) = lines::split_bom(&reply.text);
    let text = lines::lf(body);
    let all = lines::lines(&text);
    let n = all.len();
    let (first, shown) = match range {
        None => (1, &all[..]),
        Some((start, end)) => {
            let r = format!("[{start}, {end}]");
            // The empty file has no line 1, but `[1, -1]` still shows it (as read's offset 1).
            if start < 1 || start as u64 > n.max(1) as u64 {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its first element `{start}` should be within the range of lines of the file: [1, {n}]"
                )));
            }
            let last = if end == -1 {
                n
            } else if end < start {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its second element `{end}` should be larger or equal than its first `{start}`"
                )));
            } else if end as u64 > n as u64 {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `view_range`: {r}. Its second element `{end}` should be less than or equal to the number of lines in the file: `{n}`"
                )));
            } else {
                end as usize
            };
            let start = start as usize;
            (start, if start > last { &all[..0] } else { &all[start - 1..last] })
        }
    };
    session.record_present(&[path], &target, &reply.version);
    let display = &target.display_path;
    let rendered =
        format!("Here's the result of running `cat -n` on {display}:\n{}", lines::number(shown, first));
    let max = session.tools.config.max_output_chars as usize;
    let clipped = lines::clip(&rendered, max, FILE_CLIPPED);
    let mut meta = Map::new();
    meta.insert("path".into(), json!(display));
    meta.insert("totalLines".into(), json!(n));
    meta.insert("clipped".into(), json!(clipped.is_some()));
    Ok(ToolResult::text_ok(clipped.unwrap_or(rendered), meta))
}

/// One directory's visible children, by name order (the daemon's), dirs marked.
async fn children(session: &mut Session, path: &str) -> Result<Vec<(String, bool, String)>, tonic::Status> {
    let request = v1::ListDirRequest { context: session.context(), path: path.to_owned() };
    let reply = session.client.list_dir(request).await?.into_inner();
    Ok(reply
        .entries
        .into_iter()
        .filter(|e| !excluded(&e.name))
        .map(|e| {
            let dir = e.r#type == v1::FileType::Directory as i32;
            (e.name, dir, e.target.map(|t| t.display_path).unwrap_or_default())
        })
        .collect())
}

/// The openhands-aci listing (the root with a `/`, then each entry and, under each directory, its
/// own entries; directories end with `/`), with the exclusions named in the header. Listing
/// stops early once the text is past the clip point: the rest would be cut anyway.
async fn directory(session: &mut Session, path: &str, display: &str) -> Result<ToolResult, ToolError> {
    let max = session.tools.config.max_output_chars as usize;
    let top = children(session, path).await.map_err(|s| ToolError::from_read(path, &s))?;
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
