//! Splitting a file's text into lines that remember their own endings.
//!
//! apply_patch alone treats `\r\n`, a lone `\r` and `\n` each as a line end (CONTRACT "Text and
//! lines"; Codex's preserve mode), so that untouched lines can be written back byte for byte.

/// One line of the file: its text without the ending, and the ending (empty only for a last
/// line that has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileLine<'a> {
    pub text: &'a str,
    pub ending: &'a str,
}

#[derive(Debug)]
pub(crate) struct FileText<'a> {
    /// A leading UTF-8 BOM, kept on write-back but never part of the first line's text.
    pub bom: bool,
    pub lines: Vec<FileLine<'a>>,
    /// The ending for changed and inserted lines: the file's first ending, LF when it has none.
    pub preferred: &'a str,
}

pub(crate) fn split(original: &str) -> FileText<'_> {
    let (bom, mut rest) = fsd_text::split_bom(original);
    let bom = !bom.is_empty();
    let mut lines = Vec::new();
    while !rest.is_empty() {
        let Some(at) = rest.find(['\r', '\n']) else {
            lines.push(FileLine { text: rest, ending: "" });
            break;
        };
        let len = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
        lines.push(FileLine { text: &rest[..at], ending: &rest[at..at + len] });
        rest = &rest[at + len..];
    }
    let preferred = match lines.first() {
        Some(first) if !first.ending.is_empty() => first.ending,
        _ => "\n",
    };
    FileText { bom, lines, preferred }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, bom: bool, expected: &[(&str, &str)], preferred: &str) {
        let t = split(input);
        let got: Vec<(&str, &str)> = t.lines.iter().map(|l| (l.text, l.ending)).collect();
        assert_eq!(got, expected, "input {input:?}");
        assert_eq!(t.bom, bom, "bom of {input:?}");
        assert_eq!(t.preferred, preferred, "preferred ending of {input:?}");
    }

    #[test]
    fn splits_on_every_ending() {
        check("", false, &[], "\n");
        check("\n", false, &[("", "\n")], "\n");
        check("a", false, &[("a", "")], "\n");
        check("a\nb", false, &[("a", "\n"), ("b", "")], "\n");
        check("a\r\nb\r\n", false, &[("a", "\r\n"), ("b", "\r\n")], "\r\n");
        check("a\rb\r", false, &[("a", "\r"), ("b", "\r")], "\r");
        check(
            "one\r\ntwo\rthree\nfour\r\n",
            false,
            &[("one", "\r\n"), ("two", "\r"), ("three", "\n"), ("four", "\r\n")],
            "\r\n",
        );
        // `\n\r` is LF then a lone CR, not one ending.
        check("a\n\rb", false, &[("a", "\n"), ("", "\r"), ("b", "")], "\n");
        check("\u{feff}x\r\ny", true, &[("x", "\r\n"), ("y", "")], "\r\n");
        check("\u{feff}", true, &[], "\n");
        // Only a leading BOM is special.
        check("a\n\u{feff}b\n", false, &[("a", "\n"), ("\u{feff}b", "\n")], "\n");
    }
}
