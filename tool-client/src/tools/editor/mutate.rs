//! The editor's mutations. create always goes through guarded creation (createIfAbsent), so an
//! existing path, even one a concurrent create just made, is `FS_ALREADY_EXISTS`. str_replace and
//! insert re-read the file first: the read names the target for the policy, gives the match lines
//! for the error texts and the snippet, and its version is the compare-and-swap basis when the
//! policy is off. With the policy on, the guard is the observed version, and a re-read at another
//! version is stale before any matching (as the daemon orders it). The re-read itself is not an
//! observation: only view (or another read) authorizes a mutation. A requested wider mode
//! (`sandbox_permissions`) is resolved first and covers the whole call: the re-read of the
//! approved target (a signed ticket admits reads of the targets it names) and the one mutation.
//! insert is the exception: its content depends on the re-read, so it re-reads first (with an
//! approved read when the session's mode cannot) and asks approval for exactly that content.

use fsd_policy::{EditRefusal, Version};
use fsd_proto::ErrorCode;
use serde_json::{Map, Value, json};

use crate::tools::escalation_fields::{self, PlannedCall};

use super::lines::{self, FILE_CLIPPED};
use super::{Session, ToolResult, is_directory, not_found};
use crate::daemon::{DaemonError, FileKind, Target, TextChange, VersionGuard, WriteGuard};
use crate::failure::ToolError;
use crate::tools::diff_meta;

/// The file as the re-read saw it.
struct Current {
    target: Target,
    version: Version,
    text: String,
}

pub async fn create(
    session: &mut Session,
    args: &Map<String, Value>,
    path: &str,
    file_text: String,
) -> Result<ToolResult, ToolError> {
    escalation_fields::resolve(session, args, "str_replace_editor", &[PlannedCall::write(path, &file_text)])
        .await?;
    let reply =
        match session.daemon.write_text(path, file_text, Some(&WriteGuard::CreateIfAbsent), false).await {
            Ok(reply) => reply,
            Err(error) => {
                return Err(match error.code() {
                    // The daemon answers createIfAbsent on an existing file (or a directory there)
                    // with these; for create they mean the path is taken.
                    Some(ErrorCode::NotObserved | ErrorCode::NotRegularFile) => ToolError::new(
                        "FS_ALREADY_EXISTS",
                        format!(
                            "File already exists at: {path}. Cannot overwrite files using command `create`."
                        ),
                    ),
                    _ => ToolError::from_mutation(path, &error),
                });
            }
        };
    let target = reply.target;
    session.record_present(&[path], &target, &reply.version);
    let display = target.display;
    // The diff card of a creation starts from empty text.
    let change = reply.change.map(|c| TextChange { before: Some(c.before.unwrap_or_default()), ..c });
    let mut meta = Map::new();
    meta.insert("operation".into(), json!("create"));
    meta.insert("affectedPaths".into(), json!([display]));
    meta.insert("diffs".into(), json!([diff_meta(&display, change.as_ref())]));
    Ok(ToolResult::text_ok(format!("File created successfully at: {display}"), meta))
}

/// Re-reads the file, mapping a miss to recorded absence and a directory to the view-only text.
async fn reread(session: &mut Session, path: &str) -> Result<Current, ToolError> {
    let error = match session.daemon.read_text(path, 0).await {
        Ok(read) => return Ok(Current { target: read.target, version: read.version, text: read.text }),
        Err(error) => error,
    };
    let DaemonError::Refused(wire) = &error else {
        return Err(ToolError::from_mutation(path, &error));
    };
    match wire.code {
        ErrorCode::NotFound => {
            session.record_absent(path, wire.get("target_key"));
            Err(not_found(path))
        }
        ErrorCode::NotRegularFile => {
            let stat = session.daemon.stat(path, false).await;
            let dir = stat.ok().and_then(|s| s.info).map(|i| i.kind) == Some(FileKind::Directory);
            Err(if dir { is_directory(path) } else { ToolError::from_mutation(path, &error) })
        }
        _ => Err(ToolError::from_mutation(path, &error)),
    }
}

/// The re-read of an escalated insert, before anyone is asked to approve its content: at the
/// session's own mode, or, when that mode may not read the file, with an approved read of it
/// (asked first, on its own).
async fn reread_escalated(
    session: &mut Session,
    args: &Map<String, Value>,
    path: &str,
) -> Result<Current, ToolError> {
    session.daemon.set_call_mode(None);
    let refused = match session.daemon.read_text(path, 0).await {
        Ok(read) => return Ok(Current { target: read.target, version: read.version, text: read.text }),
        Err(DaemonError::Refused(wire)) => {
            matches!(wire.code, ErrorCode::SandboxDenied | ErrorCode::PermissionDenied)
        }
        Err(_) => false,
    };
    if refused {
        escalation_fields::resolve(session, args, "str_replace_editor", &[PlannedCall::read(path)]).await?;
    }
    reread(session, path).await
}

/// For a call that asks for a wider mode: the observed version its change is guarded by, or the
/// policy's refusal before anyone is asked to approve it.
fn escalated_guard(
    session: &Session,
    args: &Map<String, Value>,
    path: &str,
) -> Result<Option<VersionGuard>, ToolError> {
    if !escalation_fields::wants_wider(session, args) {
        return Ok(None);
    }
    session.edit_guard(path).map_err(|_| ToolError::not_observed(path))
}

fn several(old: &str, list: &str) -> ToolError {
    ToolError::new(
        ErrorCode::AmbiguousEdit.as_str(),
        format!(
            "No replacement was performed. Multiple occurrences of old_str `{old}` in lines [{list}]. Please ensure it is unique."
        ),
    )
}

/// Too many occurrences for the daemon to list their lines (it says how many): the editor's
/// words still, which know no `replace_all`.
fn several_unlisted(old: &str, count: Option<&str>) -> ToolError {
    let count = count.map(|n| format!("{n} occurrences, ")).unwrap_or_default();
    ToolError::new(
        ErrorCode::AmbiguousEdit.as_str(),
        format!(
            "No replacement was performed. Multiple occurrences of old_str `{old}` ({count}too many to list their lines). Please ensure it is unique."
        ),
    )
}

/// The daemon's checks refused an escalated replacement before anyone was asked: the
/// editor's own words.
fn checked(planned: &PlannedCall, old: &str, path: &str, error: &DaemonError) -> ToolError {
    match error.wire() {
        Some(w) if w.code == ErrorCode::EditNotFound => not_verbatim(old, path),
        Some(w) if w.code == ErrorCode::AmbiguousEdit => match w.get("lines") {
            Some(lines) => several(old, &lines.replace(',', ", ")),
            None => several_unlisted(old, w.get("count")),
        },
        _ => escalation_fields::checked(planned, error),
    }
}

fn not_verbatim(old: &str, path: &str) -> ToolError {
    ToolError::new(
        ErrorCode::EditNotFound.as_str(),
        format!("No replacement was performed, old_str `{old}` did not appear verbatim in {path}."),
    )
}

/// The guard version: the re-read one, when the policy is off or the re-read shows the observed
/// state (same metadata, or same bytes: a `touch` is not stale); else the call is stale. The
/// re-read version is the exact basis of the text the mutation is computed from.
fn basis(session: &Session, path: &str, current: &Current) -> Result<Version, ToolError> {
    if !session.policy_on() {
        return Ok(current.version.clone());
    }
    match session.observations.edit_intent(Some(&current.target.key)) {
        Ok(version) if fsd_proto::version::same(&version.0, &current.version.0) => {
            Ok(current.version.clone())
        }
        Ok(_) => Err(ToolError::stale(path)),
        // Absence was observed but the file is here now: this session has not read it.
        Err(EditRefusal::NotObserved | EditRefusal::ObservedAbsent) => Err(ToolError::not_observed(path)),
    }
}

/// The success text: a `cat -n` snippet of lines `from..=to` (clamped) of the new LF text.
fn snippet(session: &Session, head: &str, new_text: &str, from: usize, to: usize, tail: &str) -> String {
    let all = lines::lines(new_text);
    let to = to.min(all.len());
    let shown = if from > to { &all[..0] } else { &all[from - 1..to] };
    let numbered = lines::number(shown, from);
    let max = session.tools.config.max_output_chars as usize;
    let numbered = lines::clip(&numbered, max, FILE_CLIPPED).map(|c| format!("{c}\n")).unwrap_or(numbered);
    format!("{head}\n{numbered}{tail}")
}

fn mutation_meta(display: &str, change: Option<&TextChange>) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("operation".into(), json!("update"));
    meta.insert("affectedPaths".into(), json!([display]));
    meta.insert("diffs".into(), json!([diff_meta(display, change)]));
    meta
}

pub async fn str_replace(
    session: &mut Session,
    args: &Map<String, Value>,
    path: &str,
    old: &str,
    new: &str,
) -> Result<ToolResult, ToolError> {
    // Escalated, the observation and the version are checked before anyone is asked.
    let guard = escalated_guard(session, args, path)?;
    let planned = PlannedCall::edit(path, old, new, false).with_edit_guard(guard);
    match escalation_fields::resolve_checked(
        session,
        args,
        "str_replace_editor",
        std::slice::from_ref(&planned),
    )
    .await
    {
        Ok(()) => {}
        Err(escalation_fields::Stop::Error(error)) => return Err(error),
        // The daemon's checks refused it before anyone was asked: in the editor's own words.
        Err(escalation_fields::Stop::Checked { error, .. }) => {
            return Err(checked(&planned, old, path, &error));
        }
    }
    let current = reread(session, path).await?;
    let version = basis(session, path, &current)?;
    let (_, body) = lines::split_bom(&current.text);
    let text = lines::lf(body);
    let (old_lf, new_lf) = (lines::lf(old), lines::lf(new));
    let starts = lines::match_starts(&text, &old_lf);
    let at = match starts.as_slice() {
        [at] => *at,
        [] => {
            return Err(not_verbatim(old, path));
        }
        _ => {
            let found = lines::start_lines(&text, &starts);
            let list = found.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
            return Err(several(old, &list));
        }
    };
    // The daemon matches and writes under the target lock; the guard makes it the text read here.
    let guard = VersionGuard::new(version, Some(current.target.key.clone()));
    let reply = session
        .daemon
        .edit_text(path, old, new, false, Some(&guard))
        .await
        .map_err(|e| ToolError::from_mutation(path, &e))?;
    let target = reply.target;
    session.record_present(&[path], &target, &reply.version);
    let display = target.display;
    let after = format!("{}{new_lf}{}", &text[..at], &text[at + old_lf.len()..]);
    let line = lines::line_of(&text, at);
    let added = new_lf.matches('\n').count();
    let head = format!(
        "The file {display} has been edited. Here's the result of running `cat -n` on a snippet of {display}:"
    );
    let tail = "Review the changes and make sure they are as expected. Edit the file again if necessary.";
    let out = snippet(session, &head, &after, line.saturating_sub(4).max(1), line + 4 + added, tail);
    let mut meta = mutation_meta(&display, reply.change.as_ref());
    meta.insert("replacements".into(), json!(reply.replacements));
    Ok(ToolResult::text_ok(out, meta))
}

pub async fn insert(
    session: &mut Session,
    args: &Map<String, Value>,
    path: &str,
    after: i64,
    text: &str,
) -> Result<ToolResult, ToolError> {
    // Escalated, the approval binds the content the insert writes, so it is computed first:
    // the observation is checked, the file re-read (at the session's own mode, or with an
    // approved read when that mode cannot read it), and only then is anyone asked.
    let wider = escalation_fields::wants_wider(session, args);
    if wider {
        escalated_guard(session, args, path)?;
    } else {
        // The fields' own rules (a narrower mode, a reason without a mode); nobody is asked.
        escalation_fields::resolve(session, args, "str_replace_editor", &[PlannedCall::read(path)]).await?;
    }
    let current =
        if wider { reread_escalated(session, args, path).await? } else { reread(session, path).await? };
    let version = basis(session, path, &current)?;
    let (bom, body) = lines::split_bom(&current.text);
    let range_error = |n: usize| {
        ToolError::invalid_args(format!(
            "Invalid `insert_line` parameter: {after}. It should be within the range of lines of the file: [0, {n}]"
        ))
    };
    let at = usize::try_from(after).map_err(|_| range_error(lines::count_lines(body)))?;
    let new_body = lines::insert(body, at, text).map_err(range_error)?;
    let content = format!("{bom}{new_body}");
    let guard = WriteGuard::ReplaceIfVersion(VersionGuard::new(version, Some(current.target.key.clone())));
    if wider {
        let planned = PlannedCall::write(path, &content).with_write_guard(Some(guard.clone()));
        escalation_fields::resolve(session, args, "str_replace_editor", &[planned]).await?;
    }
    // The content already carries the file's BOM and endings.
    let reply = session
        .daemon
        .write_text(path, content, Some(&guard), false)
        .await
        .map_err(|e| ToolError::from_mutation(path, &e))?;
    let target = reply.target;
    session.record_present(&[path], &target, &reply.version);
    let display = target.display;
    let inserted = lines::lf(text).matches('\n').count() + 1;
    let head = format!(
        "The file {display} has been edited. Here's the result of running `cat -n` on a snippet of the edited file:"
    );
    let tail = "Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.";
    let out =
        snippet(session, &head, &lines::lf(&new_body), at.saturating_sub(3).max(1), at + inserted + 4, tail);
    Ok(ToolResult::text_ok(out, mutation_meta(&display, reply.change.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fsd_proto::WireError;

    /// What the model reads when the daemon's checks find the string more than once, with the
    /// match lines and (past what its metadata holds) without them.
    #[test]
    fn several_occurrences_are_worded_as_the_editor_words_them() {
        let planned = PlannedCall::edit("/w/a.txt", "port", "host", false);
        let check = |metadata: &[(&str, &str)], expected: &str| {
            let mut wire = WireError::new(ErrorCode::AmbiguousEdit, "/w/a.txt", "ambiguous");
            for (key, value) in metadata {
                wire = wire.with(key, *value);
            }
            let error = checked(&planned, "port", "/w/a.txt", &DaemonError::Refused(wire));
            assert_eq!((error.code.as_str(), error.message.as_str()), ("FS_AMBIGUOUS_EDIT", expected));
        };
        check(
            &[("count", "2"), ("lines", "1,2")],
            "No replacement was performed. Multiple occurrences of old_str `port` in lines [1, 2]. Please ensure it is unique.",
        );
        check(
            &[("count", "2000")],
            "No replacement was performed. Multiple occurrences of old_str `port` (2000 occurrences, too many to list their lines). Please ensure it is unique.",
        );
        check(
            &[],
            "No replacement was performed. Multiple occurrences of old_str `port` (too many to list their lines). Please ensure it is unique.",
        );
    }
}
