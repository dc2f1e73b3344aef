//! The change record for people and agent hosts (docs/rewind.md): `fsd-tools checkpoint` and
//! `fsd-tools changes`, and the same requests on the JSON-lines session (`{"checkpoint": ...}`,
//! `{"changes": ...}`). The daemon sends numbers, identities and diffs; the sentences are written
//! here, and only here.

use serde_json::{Map, Value, json};

use crate::daemon::{ChangeListing, ChangedFile, ChangesQuery, Rewound, Target, Visibility};
use crate::failure::ToolError;
use crate::tools::{Session, ToolResult};

/// Names a point in the daemon's change record.
pub async fn checkpoint(session: &mut Session, label: &str) -> ToolResult {
    match session.daemon().checkpoint(label).await {
        Ok(id) => {
            let mut meta = Map::new();
            meta.insert("checkpoint".into(), json!(id));
            ToolResult::text_ok(checkpoint_text(id, label), meta)
        }
        Err(error) => ToolResult::error(ToolError::from_record(&error)),
    }
}

/// Lists the changes after a point, with each changed file's diff.
pub async fn changes(session: &mut Session, query: &ChangesQuery) -> ToolResult {
    match session.daemon().list_changes(query).await {
        Ok(listing) => ToolResult::text_ok(render(query.since, &listing), meta(&listing)),
        Err(error) => ToolResult::error(ToolError::from_record(&error)),
    }
}

/// Restores the files changed after a point.
pub async fn rewind(session: &mut Session, query: &ChangesQuery, keep_checkpoint: bool) -> ToolResult {
    match session.daemon().rewind(query, keep_checkpoint).await {
        Ok(rewound) => {
            let mut meta = Map::new();
            let paths = |t: &[Target]| t.iter().map(|t| t.display.clone()).collect::<Vec<_>>();
            meta.insert("change".into(), json!(rewound.change));
            meta.insert("restored".into(), json!(paths(&rewound.restored)));
            meta.insert(
                "conflicts".into(),
                json!(rewound.conflicts.iter().map(|c| c.target.display.clone()).collect::<Vec<_>>()),
            );
            meta.insert("replaced".into(), json!(paths(&rewound.replaced)));
            meta.insert("unrestorable".into(), json!(paths(&rewound.unrestorable)));
            ToolResult::text_ok(rewind_text(query.since, &rewound), meta)
        }
        Err(error) => ToolResult::error(ToolError::from_record(&error)),
    }
}

/// What a rewind's reply says: what was restored, each conflict with both versions' diff, what
/// was kept aside and what could not be restored.
pub fn rewind_text(since: u64, rewound: &Rewound) -> String {
    let mut out = match rewound.change {
        Some(change) => format!(
            "Rewound to point {since}: {} files restored as one change (#{change}; rewind it to undo this).",
            rewound.restored.len()
        ),
        None => format!("Nothing restored to point {since}."),
    };
    for target in &rewound.restored {
        out.push_str(&format!("\n  restored {}", target.display));
    }
    for target in &rewound.replaced {
        out.push_str(&format!(
            "\n  {} had been changed since by what this rewind does not undo (outside fsd, or another session or identity): that version is kept in change #{}",
            target.display,
            rewound.change.unwrap_or_default()
        ));
    }
    for conflict in &rewound.conflicts {
        let by = if conflict.changed_outside {
            "someone the record did not see"
        } else {
            "a change this rewind does not undo (another session's or identity's)"
        };
        out.push_str(&format!(
            "\n  left as it is: {} was changed since by {by} (rewind with keep_checkpoint to restore it anyway; its version now is kept in the record)",
            conflict.target.display
        ));
        out.push_str(&conflict_diff(conflict));
    }
    for target in &rewound.unrestorable {
        out.push_str(&format!(
            "\n  not restorable: {} (not a file, larger than the record keeps, or not readable by you)",
            target.display
        ));
    }
    out
}

/// A conflict's two versions: the diff from the point's content to what is there now.
fn conflict_diff(conflict: &ChangedFile) -> String {
    match &conflict.visibility {
        Visibility::Diff(diff) if !diff.is_empty() => format!("\n{}", diff.trim_end()),
        Visibility::Diff(_) => "\n  (same content as at the point)".to_owned(),
        _ => "\n  (content not shown)".to_owned(),
    }
}

/// What a checkpoint's reply says.
pub fn checkpoint_text(id: u64, label: &str) -> String {
    if label.is_empty() { format!("checkpoint {id}") } else { format!("checkpoint {id} \"{label}\"") }
}

/// A UTC time from milliseconds since the epoch.
fn when(at_ms: u64) -> String {
    format!("{}Z", fsd_proto::time::Civil::from_unix(at_ms / 1000).format('T'))
}

/// A listing as a person reads it: what the bounds dropped, each change with who made it, then
/// each file with its diff or why it is not shown.
pub fn render(since: u64, listing: &ChangeListing) -> String {
    let mut out = String::new();
    if let Some(through) = listing.dropped_through {
        let whole = if listing.dropped_changes == 1 { "change" } else { "changes" };
        out.push_str(&format!(
            "The record's bounds dropped the oldest history: {} whole {whole}, through change {through}.",
            listing.dropped_changes
        ));
        if since < through {
            out.push_str(" Changes after your point up to then are not listed and cannot be undone.");
        }
        out.push('\n');
    }
    if listing.changes.is_empty() {
        out.push_str(&format!("No changes recorded after point {since}."));
        return out;
    }
    out.push_str(&format!("{} changes after point {since}:\n", listing.changes.len()));
    for change in &listing.changes {
        let targets: Vec<&str> = change.targets.iter().map(|t| t.display.as_str()).collect();
        let mut who = change.identity.clone();
        if !change.call.is_empty() {
            who.push_str(&format!(", call {}", change.call));
        }
        if change.escalated {
            who.push_str(", escalated");
        }
        if change.failed {
            who.push_str(", failed after reaching the disk");
        }
        out.push_str(&format!(
            "  #{} {} {} {} ({who})\n",
            change.seq,
            when(change.at_ms),
            change.operation,
            targets.join(" -> ")
        ));
    }
    for file in &listing.files {
        let state = match (file.existed, file.exists) {
            (false, true) => "created",
            (true, false) => "removed",
            (false, false) => "created and removed",
            (true, true) => "changed",
        };
        out.push_str(&format!("\n{} ({state} by {})\n", file.target.display, file.authors.join(", ")));
        if file.changed_outside {
            out.push_str("  changed since by someone the record did not see (an editor, a shell)\n");
        }
        match &file.visibility {
            Visibility::Diff(diff) if diff.is_empty() => out.push_str("  same content as at the point\n"),
            Visibility::Diff(diff) => out.push_str(diff),
            Visibility::Escalated => out.push_str("  content not shown: changed under an escalation\n"),
            Visibility::NotReadable => out.push_str("  content not shown: you may not read this file now\n"),
            Visibility::NotText => {
                out.push_str("  content not shown: not text, or larger than the record keeps\n")
            }
        }
    }
    out.trim_end().to_owned()
}

/// The listing's facts for a host that acts on them.
fn meta(listing: &ChangeListing) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("dropped_through".into(), json!(listing.dropped_through));
    meta.insert("dropped_changes".into(), json!(listing.dropped_changes));
    let changes: Vec<Value> = listing
        .changes
        .iter()
        .map(|c| {
            json!({
                "seq": c.seq,
                "at_ms": c.at_ms,
                "identity": c.identity,
                "session": c.session,
                "call": c.call,
                "escalated": c.escalated,
                "failed": c.failed,
                "operation": c.operation,
                "targets": c.targets.iter().map(|t| t.display.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    meta.insert("changes".into(), Value::Array(changes));
    let files: Vec<Value> = listing
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.target.display,
                "authors": f.authors,
                "existed": f.existed,
                "exists": f.exists,
                "changed_outside": f.changed_outside,
                "diff": match &f.visibility { Visibility::Diff(d) => Some(d.clone()), _ => None },
            })
        })
        .collect();
    meta.insert("files".into(), Value::Array(files));
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{ChangedFile, RecordedChange, Target, TargetKey};

    fn target(path: &str) -> Target {
        Target { key: TargetKey(format!("w:{path}")), display: path.to_owned() }
    }

    fn change(seq: u64, operation: &str, path: &str, escalated: bool) -> RecordedChange {
        RecordedChange {
            seq,
            at_ms: 1_764_777_600_000 + seq * 1000,
            identity: "uid:1000".into(),
            session: "s-1".into(),
            call: format!("s-1-{seq}"),
            escalated,
            operation: operation.into(),
            targets: vec![target(path)],
            failed: false,
        }
    }

    fn file(path: &str, visibility: Visibility, existed: bool, exists: bool, outside: bool) -> ChangedFile {
        ChangedFile {
            target: target(path),
            authors: vec!["uid:1000".into()],
            existed,
            exists,
            changed_outside: outside,
            visibility,
        }
    }

    /// Every text a listing renders as, byte-exact.
    #[test]
    fn listings_render_as_their_snapshots() {
        let cases: Vec<(u64, ChangeListing, &str)> = vec![
            (3, ChangeListing::default(), "No changes recorded after point 3."),
            (
                0,
                ChangeListing {
                    dropped_through: Some(4),
                    dropped_changes: 2,
                    changes: vec![change(5, "writeText", "/ws/a.txt", false)],
                    files: vec![file(
                        "/ws/a.txt",
                        Visibility::Diff("--- a/ws/a.txt\n+++ b/ws/a.txt\n@@ -1 +1 @@\n-one\n+two\n".into()),
                        true,
                        true,
                        false,
                    )],
                },
                "The record's bounds dropped the oldest history: 2 whole changes, through change 4. Changes after your point up to then are not listed and cannot be undone.\n\
1 changes after point 0:\n  #5 2025-12-03T16:00:05Z writeText /ws/a.txt (uid:1000, call s-1-5)\n\n/ws/a.txt (changed by uid:1000)\n--- a/ws/a.txt\n+++ b/ws/a.txt\n@@ -1 +1 @@\n-one\n+two",
            ),
            (
                7,
                ChangeListing {
                    dropped_through: Some(4),
                    dropped_changes: 1,
                    changes: vec![
                        change(8, "moveFile", "/ws/b.txt", true),
                        change(9, "deleteFile", "/ws/c.txt", false),
                        RecordedChange { failed: true, ..change(10, "writeText", "/ws/d.txt", false) },
                        change(11, "writeBytes", "/ws/e.bin", false),
                    ],
                    files: vec![
                        file("/ws/b.txt", Visibility::Escalated, false, true, false),
                        file("/ws/c.txt", Visibility::NotReadable, true, false, false),
                        file("/ws/d.txt", Visibility::Diff(String::new()), false, false, true),
                        file("/ws/e.bin", Visibility::NotText, true, true, false),
                    ],
                },
                "The record's bounds dropped the oldest history: 1 whole change, through change 4.\n\
4 changes after point 7:\n  #8 2025-12-03T16:00:08Z moveFile /ws/b.txt (uid:1000, call s-1-8, escalated)\n  #9 2025-12-03T16:00:09Z deleteFile /ws/c.txt (uid:1000, call s-1-9)\n  #10 2025-12-03T16:00:10Z writeText /ws/d.txt (uid:1000, call s-1-10, failed after reaching the disk)\n  #11 2025-12-03T16:00:11Z writeBytes /ws/e.bin (uid:1000, call s-1-11)\n\n\
/ws/b.txt (created by uid:1000)\n  content not shown: changed under an escalation\n\n\
/ws/c.txt (removed by uid:1000)\n  content not shown: you may not read this file now\n\n\
/ws/d.txt (created and removed by uid:1000)\n  changed since by someone the record did not see (an editor, a shell)\n  same content as at the point\n\n\
/ws/e.bin (changed by uid:1000)\n  content not shown: not text, or larger than the record keeps",
            ),
        ];
        for (since, listing, expected) in cases {
            assert_eq!(render(since, &listing), expected);
        }
        assert_eq!(checkpoint_text(4, "before"), "checkpoint 4 \"before\"");
        let rewound = Rewound {
            change: Some(12),
            restored: vec![target("/ws/a.txt"), target("/ws/b.txt")],
            conflicts: vec![
                file(
                    "/ws/c.txt",
                    Visibility::Diff("--- a/ws/c.txt\n+++ b/ws/c.txt\n@@ -1 +1 @@\n-then\n+outside\n".into()),
                    true,
                    true,
                    true,
                ),
                file("/ws/f.txt", Visibility::Escalated, true, true, false),
            ],
            replaced: vec![target("/ws/b.txt")],
            unrestorable: vec![target("/ws/e.bin")],
        };
        assert_eq!(
            rewind_text(3, &rewound),
            "Rewound to point 3: 2 files restored as one change (#12; rewind it to undo this).\n  restored /ws/a.txt\n  restored /ws/b.txt\n  \
/ws/b.txt had been changed since by what this rewind does not undo (outside fsd, or another session or identity): that version is kept in change #12\n  \
left as it is: /ws/c.txt was changed since by someone the record did not see (rewind with keep_checkpoint to restore it anyway; its version now is kept in the record)\n\
--- a/ws/c.txt\n+++ b/ws/c.txt\n@@ -1 +1 @@\n-then\n+outside\n  \
left as it is: /ws/f.txt was changed since by a change this rewind does not undo (another session's or identity's) (rewind with keep_checkpoint to restore it anyway; its version now is kept in the record)\n  (content not shown)\n  \
not restorable: /ws/e.bin (not a file, larger than the record keeps, or not readable by you)"
        );
        assert_eq!(rewind_text(3, &Rewound::default()), "Nothing restored to point 3.");
        assert_eq!(checkpoint_text(4, ""), "checkpoint 4");
    }
}
