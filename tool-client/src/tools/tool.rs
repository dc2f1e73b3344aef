//! The tools as one enum, instead of name strings matched wherever a face needs to know something:
//! the name the model calls, what the MCP annotations claim, and whether a call changes files.
//! `checkpoint`, `changes` and `rewind` are the change record's (docs/rewind.md), off unless the
//! client config turns them on.

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
    Checkpoint,
    Changes,
    Rewind,
}

impl Tool {
    /// Every tool, in schema order.
    pub const ALL: [Tool; 9] = [
        Tool::Read,
        Tool::ReadImage,
        Tool::Write,
        Tool::Edit,
        Tool::ApplyPatch,
        Tool::StrReplaceEditor,
        Tool::Checkpoint,
        Tool::Changes,
        Tool::Rewind,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Read => "read",
            Tool::ReadImage => "read_image",
            Tool::Write => "write",
            Tool::Edit => "edit",
            Tool::ApplyPatch => "apply_patch",
            Tool::StrReplaceEditor => "str_replace_editor",
            Tool::Checkpoint => "checkpoint",
            Tool::Changes => "changes",
            Tool::Rewind => "rewind",
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
            Tool::Checkpoint => "Checkpoint",
            Tool::Changes => "List changes",
            Tool::Rewind => "Rewind changes",
        }
    }

    /// Whether it changes nothing: no file under a root, no record. read_image also saves the
    /// image, but in the client's own attachment store, never under a root; changes only reads
    /// the record.
    pub fn read_only(self) -> bool {
        matches!(self, Tool::Read | Tool::ReadImage | Tool::Changes)
    }

    /// Whether repeating a call leaves the files as one call did: writing the same content again
    /// leaves the same file; a second identical edit fails or edits again (new_string may contain
    /// old_string); a second checkpoint is a new point, and a second rewind is a change of its own.
    pub fn idempotent(self) -> bool {
        matches!(self, Tool::Read | Tool::ReadImage | Tool::Write | Tool::Changes)
    }

    /// Whether a call of it may change files (overwrite or remove what they hold). A checkpoint
    /// only adds a point to the record; a rewind puts files back, replacing what they hold now.
    pub fn may_mutate(self) -> bool {
        !self.read_only() && self != Tool::Checkpoint
    }

    /// Whether it is one of the change record's tools (docs/rewind.md).
    pub fn of_the_record(self) -> bool {
        matches!(self, Tool::Checkpoint | Tool::Changes | Tool::Rewind)
    }

    /// Whether it takes the escalation fields: the file tools that may change files, and read
    /// (an approved read lets an approved edit follow). The change record's tools take none.
    pub fn takes_escalation(self) -> bool {
        (self.may_mutate() || self == Tool::Read) && !self.of_the_record()
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
        check(Tool::Checkpoint, json!({}), false);
        check(Tool::Changes, json!({"since": 1}), false);
        check(Tool::Rewind, json!({"since": 1}), true);
    }

    /// What each tool claims, as MCP annotations carry it: (read-only, destructive, idempotent),
    /// and which take the escalation fields.
    #[test]
    fn claims_are_truthful() {
        let check = |tool: Tool, expected: (bool, bool, bool)| {
            assert_eq!((tool.read_only(), tool.may_mutate(), tool.idempotent()), expected, "{tool}")
        };
        check(Tool::Read, (true, false, true));
        check(Tool::ReadImage, (true, false, true));
        check(Tool::Write, (false, true, true));
        check(Tool::Edit, (false, true, false));
        check(Tool::ApplyPatch, (false, true, false));
        check(Tool::StrReplaceEditor, (false, true, false));
        check(Tool::Checkpoint, (false, false, false));
        check(Tool::Changes, (true, false, true));
        check(Tool::Rewind, (false, true, false));
        let escalating: Vec<Tool> = Tool::ALL.into_iter().filter(|t| t.takes_escalation()).collect();
        assert_eq!(
            escalating,
            [Tool::Read, Tool::Write, Tool::Edit, Tool::ApplyPatch, Tool::StrReplaceEditor]
        );
    }
}
