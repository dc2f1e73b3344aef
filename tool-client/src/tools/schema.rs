//! Tool schemas (snake_case fields, `file_path` first) and the guidance paragraphs, rendered only
//! for visible tools. The model-facing descriptions and guidance are data files in `text/`,
//! included at build time (one line each; the trailing newline is dropped).

use serde_json::{Value, json};

use super::Tool;

const READ_GUIDANCE: &str = include_str!("text/read.guidance.txt").trim_ascii_end();
const WRITE_GUIDANCE: &str = include_str!("text/write.guidance.txt").trim_ascii_end();
const WRITE_GUIDANCE_EDIT: &str = include_str!("text/write.guidance-edit.txt").trim_ascii_end();
const PATCH_GUIDANCE: &str = include_str!("text/apply_patch.guidance.txt").trim_ascii_end();
/// With `applyPatchAtomic`: only the sentence about a failed commit differs.
const PATCH_GUIDANCE_ATOMIC: &str = include_str!("text/apply_patch.guidance-atomic.txt").trim_ascii_end();
const EDIT_GUIDANCE: &str = include_str!("text/edit.guidance.txt").trim_ascii_end();

/// The guidance for a set of visible tools, in tool order, blank-line separated.
pub fn guidance_for(visible: &[Tool], atomic_patch: bool) -> String {
    let mut parts = Vec::new();
    if visible.contains(&Tool::Read) {
        parts.push(READ_GUIDANCE.to_owned());
    }
    if visible.contains(&Tool::Write) {
        let edit = if visible.contains(&Tool::Edit) { WRITE_GUIDANCE_EDIT } else { "" };
        parts.push(format!("{WRITE_GUIDANCE}{edit}."));
    }
    if visible.contains(&Tool::Edit) {
        parts.push(EDIT_GUIDANCE.to_owned());
    }
    if visible.contains(&Tool::ApplyPatch) {
        parts.push(if atomic_patch { PATCH_GUIDANCE_ATOMIC } else { PATCH_GUIDANCE }.to_owned());
    }
    parts.join("\n\n")
}

/// The schema of one tool as a configuration shows it (the editor's description is configurable).
/// Neither read_image nor str_replace_editor contributes guidance: their seeds quote none.
pub fn schema_for(tool: Tool, config: &crate::config::ClientConfig) -> Value {
    match tool {
        Tool::StrReplaceEditor => super::editor::schema(config.description.as_deref()),
        other => schema(other),
    }
}

/// The schema of one tool.
pub fn schema(tool: Tool) -> Value {
    match tool {
        Tool::Read => json!({
            "name": Tool::Read.name(),
            "description": include_str!("text/read.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to read: an absolute path, or a path relative to the session's working directory."},
                    "offset": {"type": "integer", "minimum": 1, "description": "The 1-based line number to start reading from. Defaults to 1."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read. Defaults to, and may not exceed, the configured maximum (2000 by default)."}
                },
                "required": ["file_path"],
                "additionalProperties": false
            }
        }),
        Tool::Write => json!({
            "name": Tool::Write.name(),
            "description": include_str!("text/write.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to write: an absolute path, or a path relative to the session's working directory. Emit file_path before content."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["file_path", "content"],
                "additionalProperties": false
            }
        }),
        Tool::Edit => json!({
            "name": Tool::Edit.name(),
            "description": include_str!("text/edit.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to edit: an absolute path, or a path relative to the session's working directory. Emit file_path before old_string and new_string."},
                    "old_string": {"type": "string", "description": "The exact text to replace, including whitespace and indentation."},
                    "new_string": {"type": "string", "description": "The replacement text; must differ from old_string."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence of old_string instead of exactly one. Defaults to false."}
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false
            }
        }),
        Tool::ApplyPatch => json!({
            "name": Tool::ApplyPatch.name(),
            "description": include_str!("text/apply_patch.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "input": {"type": "string", "description": "The entire patch text, from *** Begin Patch to *** End Patch."}
                },
                "required": ["input"],
                "additionalProperties": false
            }
        }),
        Tool::ReadImage => super::image::schema(),
        Tool::StrReplaceEditor => super::editor::schema(None),
        Tool::Checkpoint => json!({
            "name": Tool::Checkpoint.name(),
            "description": include_str!("text/checkpoint.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "description": "A name for the point, repeated in the reply. Optional."}
                },
                "additionalProperties": false
            }
        }),
        Tool::Changes => json!({
            "name": Tool::Changes.name(),
            "description": include_str!("text/changes.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "since": since("listed"),
                    "this_session": this_session()
                },
                "required": ["since"],
                "additionalProperties": false
            }
        }),
        Tool::Rewind => json!({
            "name": Tool::Rewind.name(),
            "description": include_str!("text/rewind.description.txt").trim_ascii_end(),
            "input_schema": {
                "type": "object",
                "properties": {
                    "since": since("undone"),
                    "this_session": this_session(),
                    "keep_checkpoint": {"type": "boolean", "description": "Restore a conflicting file too; the version it holds now stays in the record. Defaults to false."}
                },
                "required": ["since"],
                "additionalProperties": false
            }
        }),
    }
}

/// The point a listing or a rewind starts after; `done` says what happens to the changes.
fn since(done: &str) -> Value {
    json!({"type": "integer", "minimum": 0, "description": format!("A checkpoint's id: the changes after it are {done}.")})
}

/// Whether only this session's changes count.
fn this_session() -> Value {
    json!({"type": "boolean", "description": "Only this session's changes; false: every change made with this client's identity. Defaults to true."})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(visible: &[Tool], expected: &str) {
        assert_eq!(guidance_for(visible, false), expected, "{visible:?}");
    }

    #[test]
    fn guidance_follows_visible_tools() {
        check(
            &[Tool::Read, Tool::Write, Tool::Edit],
            "Use the read tool — not shell commands like cat — to inspect text files. Use offset and limit to continue reading large files.\n\nRead an existing file before overwriting it with write (the default fs-observation-policy requires it) and prefer edit for targeted changes.\n\nRead a file before editing it (the default fs-observation-policy requires it), unless you just created or edited it in this session.",
        );
        check(
            &[Tool::Write],
            "Read an existing file before overwriting it with write (the default fs-observation-policy requires it).",
        );
        check(
            &[Tool::Edit],
            "Read a file before editing it (the default fs-observation-policy requires it), unless you just created or edited it in this session.",
        );
        check(&[], "");
    }

    /// `applyPatchAtomic` changes the sentence about a failed commit, and only it.
    #[test]
    fn the_atomic_guidance_differs_only_in_its_rollback_sentence() {
        let seed = guidance_for(&[Tool::ApplyPatch], false);
        let atomic = guidance_for(&[Tool::ApplyPatch], true);
        let (kept, seed_tail) = seed.split_once("once applying starts, ").unwrap();
        let (atomic_kept, atomic_tail) = atomic.split_once("once applying starts, ").unwrap();
        assert_eq!(kept, atomic_kept);
        assert_eq!(
            seed_tail,
            "operations run in order, stop at the first failure, and are not rolled back, so re-read affected files before retrying when needed."
        );
        assert_eq!(
            atomic_tail,
            "the operations commit together: if one fails, the ones before it are rolled back and no file changes, so fix the failing operation and retry the whole patch."
        );
        for tools in [&[Tool::Read, Tool::Write, Tool::Edit][..], &[Tool::Write], &[]] {
            assert_eq!(guidance_for(tools, true), guidance_for(tools, false));
        }
    }

    #[test]
    fn file_path_comes_first() {
        for tool in [Tool::Read, Tool::Write, Tool::Edit] {
            let s = schema(tool);
            let first = s["input_schema"]["properties"].as_object().and_then(|p| p.keys().next().cloned());
            assert_eq!(first.as_deref(), Some("file_path"), "{tool}");
        }
    }

    /// The change record's tools as the model reads them, byte-exact (descriptions included).
    #[test]
    fn the_change_tools_schemas_are_their_snapshots() {
        let check = |tool: Tool, expected: &str| {
            let got = serde_json::to_string(&schema(tool)).unwrap_or_default();
            assert_eq!(got, expected, "{tool}");
        };
        check(
            Tool::Checkpoint,
            r#"{"name":"checkpoint","description":"Names the current point in the file service's record of changes and returns its id. Pass the id to changes to list what was changed after it, or to rewind to undo that.","input_schema":{"type":"object","properties":{"label":{"type":"string","description":"A name for the point, repeated in the reply. Optional."}},"additionalProperties":false}}"#,
        );
        check(
            Tool::Changes,
            r#"{"name":"changes","description":"Lists the file changes recorded after a checkpoint (by default this session's), oldest first, with who made each, and for every file changed since, the unified diff from its content at the checkpoint to its content now. Changes nothing.","input_schema":{"type":"object","properties":{"since":{"type":"integer","minimum":0,"description":"A checkpoint's id: the changes after it are listed."},"this_session":{"type":"boolean","description":"Only this session's changes; false: every change made with this client's identity. Defaults to true."}},"required":["since"],"additionalProperties":false}}"#,
        );
        check(
            Tool::Rewind,
            r#"{"name":"rewind","description":"Restores every file changed after a checkpoint (by default by this session) to its content at the checkpoint, as one change that can itself be rewound. A file changed since by anything else (an editor, a shell, another session) is not overwritten: it is left as it is and reported as a conflict with its diff, unless keep_checkpoint is true.","input_schema":{"type":"object","properties":{"since":{"type":"integer","minimum":0,"description":"A checkpoint's id: the changes after it are undone."},"this_session":{"type":"boolean","description":"Only this session's changes; false: every change made with this client's identity. Defaults to true."},"keep_checkpoint":{"type":"boolean","description":"Restore a conflicting file too; the version it holds now stays in the record. Defaults to false."}},"required":["since"],"additionalProperties":false}}"#,
        );
        // They add no guidance: the instructions stay the other tools'.
        assert_eq!(guidance_for(&[Tool::Checkpoint, Tool::Changes, Tool::Rewind], false), "");
    }
}
