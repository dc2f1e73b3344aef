//! The standalone `str_replace_editor` tool (seed `004_…`): one schema, four commands (view,
//! create, str_replace, insert) over the provider, absolute paths only. Where the seed quotes no
//! wording, the texts are the ones models were trained on (Anthropic's reference implementation
//! and openhands-aci, `reference/editors.md` §2, §3, §10); the choices are pinned by
//! `tests/tests/editor.rs`.
//!
//! | situation                                   | code                  |
//! |---------------------------------------------|-----------------------|
//! | relative path, missing or mistyped parameter, bad `view_range` / `insert_line`, unknown command | `INVALID_ARGS` |
//! | path missing (view/str_replace/insert)      | `FS_NOT_FOUND` (absence recorded first) |
//! | create on an existing path                  | `FS_ALREADY_EXISTS`   |
//! | non-view command on a directory             | `FS_NOT_REGULAR_FILE` |
//! | `old_str` not found / found more than once  | `FS_EDIT_NOT_FOUND` / `FS_AMBIGUOUS_EDIT` |
//! | policy and provider refusals                | their own codes (`FS_NOT_OBSERVED`, `FS_STALE_VERSION`, ...) |

mod lines;
mod mutate;
mod view;

use serde_json::{Map, Value, json};

use super::{Session, ToolResult};
use crate::failure::ToolError;

/// The default model-facing description: the docstring models know from SWE-agent and
/// openhands-aci, adjusted to what this tool does (no `undo_edit`; listings also skip
/// `node_modules` and `__pycache__`). Config `description` replaces it.
pub const DEFAULT_DESCRIPTION: &str = "Custom editing tool for viewing, creating and editing files\n* State is persistent across command calls and discussions with the user\n* If `path` is a file, `view` displays the result of applying `cat -n`. If `path` is a directory, `view` lists non-hidden files and directories up to 2 levels deep, skipping `node_modules` and `__pycache__`\n* The `create` command cannot be used if the specified `path` already exists\n* If a `command` generates a long output, it will be truncated and marked with `<response clipped>`\n\nNotes for using the `str_replace` command:\n* The `old_str` parameter should match EXACTLY one or more consecutive lines from the original file. Be mindful of whitespaces!\n* If the `old_str` parameter is not unique in the file, the replacement will not be performed. Make sure to include enough context in `old_str` to make it unique\n* The `new_str` parameter should contain the edited lines that should replace the `old_str`";

const COMMANDS: &str = "view, create, str_replace, insert";

/// The tool schema, with the configured description when there is one. Command-specific fields
/// accept `null` as a placeholder when the command does not use them.
pub fn schema(description: Option<&str>) -> Value {
    json!({
        "name": super::Tool::StrReplaceEditor.name(),
        "description": description.unwrap_or(DEFAULT_DESCRIPTION),
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "enum": ["view", "create", "str_replace", "insert"],
                    "description": "The commands to run. Allowed options are: `view`, `create`, `str_replace`, `insert`."
                },
                "path": {"type": "string", "description": "Absolute path to file or directory, e.g. `/repo/file.py` or `/repo`."},
                "file_text": {"type": ["string", "null"], "description": "Required parameter of `create` command, with the content of the file to be created."},
                "old_str": {"type": ["string", "null"], "description": "Required parameter of `str_replace` command containing the string in `path` to replace."},
                "new_str": {"type": ["string", "null"], "description": "Optional parameter of `str_replace` command containing the new string (if not given, no string will be added). Required parameter of `insert` command containing the string to insert."},
                "insert_line": {"type": ["integer", "null"], "description": "Required parameter of `insert` command. The `new_str` will be inserted AFTER the line `insert_line` of `path`."},
                "insert_text": {"type": ["string", "null"], "description": "Alternative name of the `new_str` parameter of `insert` command, containing the text to insert."},
                "view_range": {
                    "type": ["array", "null"],
                    "items": {"type": "integer"},
                    "description": "Optional parameter of `view` command when `path` points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting `[start_line, -1]` shows all lines from `start_line` to the end of the file."
                }
            },
            "required": ["command", "path"],
            "additionalProperties": false
        }
    })
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
enum Command {
    View { range: Option<(i64, i64)> },
    Create { file_text: String },
    StrReplace { old: String, new: String },
    Insert { after: i64, text: String },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::View { .. } => "view",
            Command::Create { .. } => "create",
            Command::StrReplace { .. } => "str_replace",
            Command::Insert { .. } => "insert",
        }
    }
}

const FIELDS: &[&str] =
    &["command", "path", "file_text", "old_str", "new_str", "insert_line", "insert_text", "view_range"];

fn missing(param: &str, command: &str) -> ToolError {
    ToolError::invalid_args(format!("Parameter `{param}` is required for command: {command}"))
}

fn invalid(param: &str, value: &Value, hint: &str) -> ToolError {
    ToolError::invalid_args(format!("Invalid `{param}` parameter: {value}. {hint}"))
}

/// A field the command uses: absent and `null` are both "not given".
fn string(map: &Map<String, Value>, param: &str) -> Result<Option<String>, ToolError> {
    match map.get(param) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(param, other, "It should be a string.")),
    }
}

fn parse_range(value: Option<&Value>) -> Result<Option<(i64, i64)>, ToolError> {
    let shape = || ToolError::invalid_args("Invalid `view_range`. It should be a list of two integers.");
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => match items.as_slice() {
            [a, b] => Ok(Some((a.as_i64().ok_or_else(shape)?, b.as_i64().ok_or_else(shape)?))),
            _ => Err(shape()),
        },
        Some(_) => Err(shape()),
    }
}

/// Checks the arguments the schema cannot: the command, an absolute path, and the fields the
/// command needs. Fields it does not use are ignored, so `null` placeholders are harmless.
/// Escalation fields (`sandbox_permissions`, `justification`), accepted while advertised, are
/// left to `escalation::resolve` at each mutation.
fn parse<'a>(
    session: &Session,
    args: &'a Value,
) -> Result<(Command, String, &'a Map<String, Value>), ToolError> {
    let map = args.as_object().ok_or_else(|| ToolError::invalid_args("arguments must be a JSON object"))?;
    let allowed = session.allowed_args(FIELDS);
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ToolError::invalid_args(format!("unknown argument \"{unknown}\"")));
    }
    let command = match map.get("command") {
        Some(Value::String(c)) => c.as_str(),
        None | Some(Value::Null) => {
            return Err(ToolError::invalid_args(format!(
                "Parameter `command` is required. Allowed commands are: {COMMANDS}"
            )));
        }
        Some(other) => return Err(invalid("command", other, &format!("Allowed commands are: {COMMANDS}"))),
    };
    if !["view", "create", "str_replace", "insert"].contains(&command) {
        return Err(ToolError::invalid_args(format!(
            "Unrecognized command {command}. The allowed commands for the str_replace_editor tool are: {COMMANDS}"
        )));
    }
    let path = match string(map, "path")? {
        Some(p) if !p.is_empty() => p,
        _ => return Err(missing("path", command)),
    };
    if !path.starts_with('/') {
        return Err(ToolError::invalid_args(format!(
            "The path {path} is not an absolute path, it should start with `/`. Maybe you meant {}?",
            session.absolute(&path)
        )));
    }
    let parsed = match command {
        "view" => Command::View { range: parse_range(map.get("view_range"))? },
        "create" => Command::Create {
            file_text: string(map, "file_text")?.ok_or_else(|| missing("file_text", command))?,
        },
        "str_replace" => {
            let old = string(map, "old_str")?.ok_or_else(|| missing("old_str", command))?;
            // Omission deletes; an explicit null is refused so a dropped value never deletes.
            let new = match map.get("new_str") {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) => {
                    return Err(invalid(
                        "new_str",
                        &Value::Null,
                        "To delete `old_str`, omit `new_str` instead of passing null.",
                    ));
                }
                Some(other) => return Err(invalid("new_str", other, "It should be a string.")),
            };
            if old.is_empty() {
                return Err(ToolError::invalid_args(
                    "No replacement was performed. `old_str` must not be empty.",
                ));
            }
            if old == new {
                return Err(ToolError::invalid_args(format!(
                    "Invalid `new_str` parameter: {new}. No replacement was performed. `new_str` and `old_str` must be different."
                )));
            }
            Command::StrReplace { old, new }
        }
        _ => {
            let after = match map.get("insert_line") {
                None | Some(Value::Null) => return Err(missing("insert_line", command)),
                Some(v) => v.as_i64().ok_or_else(|| invalid("insert_line", v, "It should be an integer."))?,
            };
            let text = match (string(map, "new_str")?, string(map, "insert_text")?) {
                (Some(a), Some(b)) if a != b => {
                    return Err(ToolError::invalid_args(
                        "Parameters `new_str` and `insert_text` were both given with different values; give only one of them for command: insert",
                    ));
                }
                (Some(a), _) | (None, Some(a)) => a,
                (None, None) => return Err(missing("new_str", command)),
            };
            Command::Insert { after, text }
        }
    };
    Ok((parsed, session.absolute(&path), map))
}

pub async fn run(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let (command, path, map) = parse(session, args)?;
    let name = command.name();
    // view reads at the session's mode; escalation applies to the mutating call only.
    let mut result = match command {
        Command::View { range } => view::run(session, &path, range).await?,
        Command::Create { file_text } => mutate::create(session, map, &path, file_text).await?,
        Command::StrReplace { old, new } => mutate::str_replace(session, map, &path, &old, &new).await?,
        Command::Insert { after, text } => mutate::insert(session, map, &path, after, &text).await?,
    };
    result.meta.insert("command".into(), json!(name));
    Ok(result)
}

/// The text for a path that does not exist (the reference implementation's).
pub(super) fn not_found(path: &str) -> ToolError {
    ToolError::new("FS_NOT_FOUND", format!("The path {path} does not exist. Please provide a valid path."))
}

/// The text for a non-view command on a directory.
pub(super) fn is_directory(path: &str) -> ToolError {
    ToolError::new(
        "FS_NOT_REGULAR_FILE",
        format!("The path {path} is a directory and only the `view` command can be used on directories"),
    )
}
