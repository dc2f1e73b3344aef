//! The parsed form of a patch: operations in patch order and the chunks of an update.

/// A parsed patch. An empty `ops` list is a valid patch (the tool reports
/// "Success. No operations in patch.").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Patch {
    pub ops: Vec<Op>,
}

/// One file operation. `line` is the 1-based line of the operation's header in the text the
/// model sent (a heredoc wrapper and leading blank lines still count), so reports point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create or overwrite. `contents` is every `+` line with `\n` appended, so it is empty or
    /// ends with `\n`.
    Add {
        path: String,
        contents: String,
        line: usize,
    },
    Delete {
        path: String,
        line: usize,
    },
    /// Edit in place, or edit and rename when `move_to` is set. Never has zero chunks.
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
        line: usize,
    },
}

/// What an operation does, for reports ("add", "delete", "update", "move").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Add,
    Delete,
    Update,
    /// An update with `*** Move to:`.
    Move,
}

impl OpKind {
    /// The lowercase word the tool's reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Add => "add",
            OpKind::Delete => "delete",
            OpKind::Update => "update",
            OpKind::Move => "move",
        }
    }

    /// The letter of Codex's success summary (`A`, `M`, `D`); a move reports `M`.
    pub fn summary_letter(self) -> char {
        match self {
            OpKind::Add => 'A',
            OpKind::Delete => 'D',
            OpKind::Update | OpKind::Move => 'M',
        }
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Op {
    /// The path named in the header, as written in the patch (the source of a move).
    pub fn path(&self) -> &str {
        match self {
            Op::Add { path, .. } | Op::Delete { path, .. } | Op::Update { path, .. } => path,
        }
    }

    /// The destination of a move, if any.
    pub fn move_to(&self) -> Option<&str> {
        match self {
            Op::Update { move_to, .. } => move_to.as_deref(),
            Op::Add { .. } | Op::Delete { .. } => None,
        }
    }

    /// The path that exists after the operation: the move destination, else `path()`.
    /// Codex's summary line names this one.
    pub fn target_path(&self) -> &str {
        self.move_to().unwrap_or_else(|| self.path())
    }

    pub fn kind(&self) -> OpKind {
        match self {
            Op::Add { .. } => OpKind::Add,
            Op::Delete { .. } => OpKind::Delete,
            Op::Update { move_to: None, .. } => OpKind::Update,
            Op::Update { move_to: Some(_), .. } => OpKind::Move,
        }
    }

    /// 1-based line of the header in the patch text.
    pub fn line(&self) -> usize {
        match self {
            Op::Add { line, .. } | Op::Delete { line, .. } | Op::Update { line, .. } => *line,
        }
    }

    /// The chunks of an update; empty for add and delete.
    pub fn chunks(&self) -> &[Chunk] {
        match self {
            Op::Update { chunks, .. } => chunks,
            Op::Add { .. } | Op::Delete { .. } => &[],
        }
    }
}

/// One `@@` section of an update.
///
/// `old_lines` are the context and `-` lines in order, `new_lines` the context and `+` lines;
/// an empty line in the patch counts as empty context in both. A chunk with a context and no
/// lines at all comes from a chained `@@` header and only moves the search cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The text after `@@ `: a whole line that must occur before the chunk's lines.
    pub context: Option<String>,
    pub old_lines: Vec<String>,
    pub new_lines: Vec<String>,
    /// Set by `*** End of File`: the old lines must be the last lines of the file.
    pub end_of_file: bool,
    /// 1-based patch line of the `@@` header, or of the chunk's first line when it has none.
    pub line: usize,
}
