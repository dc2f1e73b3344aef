//! The tools as one enum, instead of name strings matched wherever a face needs to know something:
//! the name the model calls, what the MCP annotations claim, and whether a call changes files.

use serde_json::Value;

/// A model-facing tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    Read,
    ReadImage,
    Write,
    Edit,
    ApplyPatch,
    StrReplaceEditor,
}

impl Tool {
    /// Every tool, in schema order.
    pub const ALL: [Tool; 6] =
        [Tool::Read, Tool::ReadImage, Tool::Write, Tool::Edit, Tool::ApplyPatch, Tool::StrReplaceEditor];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Read => "read",
            Tool::ReadImage => "read_image",
            Tool::Write => "write",
            Tool::Edit => "edit",
            Tool::ApplyPatch => "apply_patch",
            Tool::StrReplaceEditor => "str_replace_editor",
        }
    }

    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The MCP title.
    pub fn title(self) -> &'static str {
        match self {
            Tool::Read => "Read file",
            Tool::ReadImage => "Read image",
            Tool::Write => "Write file",
            Tool::Edit => "Edit file",
            Tool::ApplyPatch => "Apply patch",
            Tool::StrReplaceEditor => "View and edit files",
        }
    }

    /// Whether it never changes a file under a root. read_image also saves the image, but in the
    /// client's own attachment store, never under a root.
    pub fn read_only(self) -> bool {
        matches!(self, Tool::Read | Tool::ReadImage)
    }

    /// Whether repeating a call leaves the files as one call did: writing the same content again
    /// leaves the same file; a second identical edit fails or edits again (new_string may contain
    /// old_string).
    pub fn idempotent(self) -> bool {
        matches!(self, Tool::Read | Tool::ReadImage | Tool::Write)
    }

    /// Whether a call of it may change files (and so takes the escalation fields).
    pub fn may_mutate(self) -> bool {
        !self.read_only()
    }

    /// Whether this call changes files: the editor's view does not.
    pub fn mutates(self, args: &Value) -> bool {
        match self {
            Tool::StrReplaceEditor => args.get("command").and_then(Value::as_str) != Some("view"),
            other => other.may_mutate(),
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_round_trip_and_only_mutations_mutate() {
        for tool in Tool::ALL {
            assert_eq!(Tool::parse(tool.name()), Some(tool));
        }
        assert_eq!(Tool::parse("shell"), None);
        let check =
            |tool: Tool, args: Value, expected: bool| assert_eq!(tool.mutates(&args), expected, "{tool}");
        check(Tool::Read, json!({}), false);
        check(Tool::ReadImage, json!({}), false);
        check(Tool::Write, json!({}), true);
        check(Tool::Edit, json!({}), true);
        check(Tool::ApplyPatch, json!({}), true);
        check(Tool::StrReplaceEditor, json!({"command": "view"}), false);
        check(Tool::StrReplaceEditor, json!({"command": "insert"}), true);
    }
}
