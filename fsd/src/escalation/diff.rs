//! The diff an approver is shown, bounded without hiding anything silently: so many lines, each
//! cut at so many characters (as shown, escaped), and a description's diffs together at so many
//! bytes. Whatever is left out is said in a line of its own (`! …`), which no diff line can
//! imitate (every diff line starts with `+`, `-`, ` `, `@` or `\`), and the diff's header then
//! says the preview is partial: the content digest still binds the whole change.

use super::escape;

/// Diff lines shown per call.
pub const MAX_LINES: usize = 200;
/// Characters of one diff line shown (escaped: an escaped character counts as what it shows).
pub const MAX_LINE_CHARS: usize = 240;
/// Bytes of diff text one description shows, over all its calls: an escalation may list
/// thousands of calls, and a person reads it whole.
pub const MAX_DESCRIPTION_BYTES: usize = 256 << 10;

/// One line of the diff part of a call's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// A diff line as shown: escaped, at most [`MAX_LINE_CHARS`] characters.
    Line(String),
    /// The line just shown (diff line `line`, 1-based) was cut: `more_bytes` of it not shown.
    Cut { line: usize, more_bytes: usize },
    /// Diff lines left out after those shown.
    MoreLines(usize),
    /// What the daemon says instead of a diff it could not make: its own words, not content.
    Note(&'static str),
}

impl Shown {
    /// Whether this line says something is not shown.
    pub fn omits(&self) -> bool {
        matches!(self, Shown::Cut { .. } | Shown::MoreLines(_))
    }

    /// The line as the description carries it (without its indent).
    pub fn render(&self) -> String {
        match self {
            Shown::Line(text) => text.clone(),
            Shown::Cut { line, more_bytes } => {
                format!("! diff line {line}: {more_bytes} more bytes not shown")
            }
            Shown::MoreLines(lines) => format!("! {lines} more diff lines not shown"),
            Shown::Note(note) => format!("({note})"),
        }
    }
}

/// Characters of a justification shown.
pub const MAX_JUSTIFICATION_CHARS: usize = 1000;

/// `line` escaped and cut at `max` shown characters, with the bytes of it left out.
pub fn cut(line: &str, max: usize) -> (String, usize) {
    let mut shown = String::new();
    let mut chars = 0;
    for (at, c) in line.char_indices() {
        let escaped = escape(c.encode_utf8(&mut [0; 4]));
        let width = escaped.chars().count();
        if chars + width > max {
            return (shown, line.len() - at);
        }
        chars += width;
        shown.push_str(&escaped);
    }
    (shown, 0)
}

/// The diff lines of one call as shown: at most [`MAX_LINES`], each cut, every omission said.
pub fn bounded<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut more = 0;
    for (index, line) in lines.into_iter().enumerate() {
        if index >= MAX_LINES {
            more += 1;
            continue;
        }
        let line = line.as_ref();
        let (shown, more_bytes) = cut(line, MAX_LINE_CHARS);
        out.push(Shown::Line(shown));
        if more_bytes > 0 {
            out.push(Shown::Cut { line: index + 1, more_bytes });
        }
    }
    if more > 0 {
        out.push(Shown::MoreLines(more));
    }
    out
}

/// The `diff` part of one call's description, given what is left of the description's budget
/// (spent by what this returns). A diff past the budget is left out whole, and said so.
pub fn render(lines: &[Shown], budget: &mut usize) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let body: Vec<String> = lines.iter().map(|l| format!("    {}\n", l.render())).collect();
    let size: usize = body.iter().map(String::len).sum();
    if size > *budget {
        // Those it would have shown and those it already left out.
        let not_shown: usize = lines
            .iter()
            .map(|l| match l {
                Shown::Line(_) => 1,
                Shown::MoreLines(more) => *more,
                Shown::Cut { .. } | Shown::Note(_) => 0,
            })
            .sum();
        return format!(
            "  diff: not shown (partial preview: this description's diffs reached {MAX_DESCRIPTION_BYTES} bytes; {not_shown} diff lines of this call not shown; content-sha256 binds the whole change)\n"
        );
    }
    *budget -= size;
    let header = if lines.iter().any(Shown::omits) {
        "  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n"
    } else {
        "  diff:\n"
    };
    let mut text = String::with_capacity(header.len() + size);
    text.push_str(header);
    body.iter().for_each(|line| text.push_str(line));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_and_say_so() {
        let check = |line: &str, shown: &str, more_bytes: usize| {
            assert_eq!(cut(line, MAX_LINE_CHARS), (shown.to_owned(), more_bytes), "{line:?}");
        };
        check("+short", "+short", 0);
        let exact = format!("+{}", "a".repeat(MAX_LINE_CHARS - 1));
        check(&exact, &exact, 0);
        check(&format!("{exact}b"), &exact, 1);
        // Escaped characters count as what they show: a control character is 6 (`\u{1b}`).
        let escapes = "\u{1b}".repeat(MAX_LINE_CHARS);
        check(&escapes, &"\\u{1b}".repeat(MAX_LINE_CHARS / 6), MAX_LINE_CHARS - MAX_LINE_CHARS / 6);
        // A multi-byte character left out counts its bytes.
        let wide = format!("{}é", "x".repeat(MAX_LINE_CHARS));
        check(&wide, &"x".repeat(MAX_LINE_CHARS), 2);
        // Padding pushes what follows it past the cut, which says it is there.
        let padded = format!("+ok{}rm -rf /", " ".repeat(400));
        check(&padded, &format!("+ok{}", " ".repeat(MAX_LINE_CHARS - 3)), 400 - (MAX_LINE_CHARS - 3) + 8);
    }

    /// The whole `diff` part of a call as the approver's person reads it.
    #[test]
    fn a_partial_preview_says_what_it_leaves_out() {
        let long = format!("+{}\u{202e}evil", "a".repeat(300));
        let mut lines = vec!["@@ -1 +1,300 @@".to_owned(), "-old\u{1b}[2J".to_owned(), long];
        lines.extend((0..300).map(|n| format!("+line {n}")));
        let shown = bounded(lines.iter().map(String::as_str));
        let mut budget = MAX_DESCRIPTION_BYTES;
        let text = render(&shown, &mut budget);
        let mut expected = String::from(
            "  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n    @@ -1 +1,300 @@\n    -old\\u{1b}[2J\n",
        );
        expected.push_str(&format!("    +{}\n", "a".repeat(MAX_LINE_CHARS - 1)));
        expected.push_str(&format!("    ! diff line 3: {} more bytes not shown\n", 301 - MAX_LINE_CHARS + 7));
        for n in 0..MAX_LINES - 3 {
            expected.push_str(&format!("    +line {n}\n"));
        }
        expected.push_str("    ! 103 more diff lines not shown\n");
        assert_eq!(text, expected);
        let header = text.find('\n').map_or(0, |at| at + 1);
        assert_eq!(budget, MAX_DESCRIPTION_BYTES - (text.len() - header), "the budget pays for the lines");
        // A whole diff that fits is not marked partial.
        let small = bounded(["@@ -1 +1 @@", "-a", "+b"]);
        let text = render(&small, &mut budget);
        assert_eq!(text, "  diff:\n    @@ -1 +1 @@\n    -a\n    +b\n");
        // Past the description's budget a call's diff is left out whole, and said so.
        let mut spent = 10;
        assert_eq!(
            render(&small, &mut spent),
            format!(
                "  diff: not shown (partial preview: this description's diffs reached {MAX_DESCRIPTION_BYTES} bytes; 3 diff lines of this call not shown; content-sha256 binds the whole change)\n"
            )
        );
        assert_eq!(spent, 10);
        // Lines the call's diff had already left out are not shown either, and counted.
        let mut spent = 10;
        assert_eq!(
            render(&shown, &mut spent),
            format!(
                "  diff: not shown (partial preview: this description's diffs reached {MAX_DESCRIPTION_BYTES} bytes; 303 diff lines of this call not shown; content-sha256 binds the whole change)\n"
            )
        );
        assert_eq!(
            render(&[Shown::Note("every occurrence")], &mut budget),
            "  diff:\n    (every occurrence)\n"
        );
    }
}
