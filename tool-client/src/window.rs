//! The read window: line splitting by CONTRACT's rules, long-line truncation, the byte cap, and
//! the envelope with its three footers. Works on a stream of byte chunks with bounded memory, so a
//! small read and a streamed one render through the same code.

/// Why the bytes are not text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotText {
    Nul,
    InvalidUtf8,
}

/// The caps of one read call.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpec {
    /// 1-based first line.
    pub offset: u64,
    pub limit: u64,
    pub max_line_chars: u64,
    pub max_bytes: u64,
}

/// One kept line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: u64,
    pub text: String,
    pub truncated: bool,
}

/// A finished window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub lines: Vec<Line>,
    /// Total lines, when the whole file was read.
    pub total: Option<u64>,
    pub capped: bool,
}

/// Consumes chunks, keeps only what the window shows, counts lines, validates the text.
#[derive(Debug)]
pub struct WindowBuilder {
    spec: WindowSpec,
    /// 1-based number of the line being read.
    line_no: u64,
    /// Bytes of the current line (window lines only), at most `keep` of them.
    current: Vec<u8>,
    current_len: u64,
    keep: usize,
    /// An incomplete UTF-8 sequence at the end of the last chunk.
    carry: Vec<u8>,
    lines: Vec<Line>,
    kept_bytes: u64,
    capped: bool,
    seen_any: bool,
    ended_with_newline: bool,
    at_start: bool,
}

impl WindowBuilder {
    pub fn new(spec: WindowSpec) -> WindowBuilder {
        // Enough bytes for max_line_chars characters of up to 4 bytes, a BOM and a CR.
        let keep =
            usize::try_from(spec.max_line_chars.saturating_mul(4).saturating_add(8)).unwrap_or(usize::MAX);
        WindowBuilder {
            spec,
            line_no: 1,
            current: Vec::new(),
            current_len: 0,
            keep,
            carry: Vec::new(),
            lines: Vec::new(),
            kept_bytes: 0,
            capped: false,
            seen_any: false,
            ended_with_newline: false,
            at_start: true,
        }
    }

    /// Whether the window is complete without the rest of the file (the byte cap hit).
    pub fn done_early(&self) -> bool {
        self.capped
    }

    fn in_window(&self) -> bool {
        self.line_no >= self.spec.offset && self.line_no < self.spec.offset.saturating_add(self.spec.limit)
    }

    /// Feeds the next chunk of file bytes.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), NotText> {
        if chunk.is_empty() {
            return Ok(());
        }
        if chunk.contains(&0) {
            return Err(NotText::Nul);
        }
        self.validate_utf8(chunk)?;
        self.seen_any = true;
        let mut rest = chunk;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.take(&rest[..i]);
                    self.end_line();
                    rest = &rest[i + 1..];
                    self.ended_with_newline = true;
                }
                None => {
                    self.take(rest);
                    self.ended_with_newline = false;
                    rest = &[];
                }
            }
            if self.capped {
                return Ok(());
            }
        }
        Ok(())
    }

    fn validate_utf8(&mut self, chunk: &[u8]) -> Result<(), NotText> {
        let mut joined;
        let bytes: &[u8] = if self.carry.is_empty() {
            chunk
        } else {
            joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(chunk);
            &joined
        };
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                self.carry = bytes[e.valid_up_to()..].to_vec();
                Ok(())
            }
            Err(_) => Err(NotText::InvalidUtf8),
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        self.current_len += bytes.len() as u64;
        if self.in_window() && self.current.len() < self.keep {
            let room = self.keep - self.current.len();
            self.current.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    fn end_line(&mut self) {
        if self.in_window() && !self.capped {
            let mut bytes = std::mem::take(&mut self.current);
            if bytes.last() == Some(&b'\r') && (bytes.len() as u64) == self.current_len {
                bytes.pop();
            }
            self.push_line(bytes);
        }
        self.current.clear();
        self.current_len = 0;
        self.line_no += 1;
    }

    fn push_line(&mut self, bytes: Vec<u8>) {
        let mut text = match String::from_utf8(bytes) {
            Ok(text) => text,
            // Cut inside a character by `keep`: drop the partial tail.
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                bytes.truncate(valid);
                String::from_utf8(bytes).unwrap_or_default()
            }
        };
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = text.strip_prefix(fsd_text::BOM) {
                text = rest.to_owned();
            }
        }
        let max = usize::try_from(self.spec.max_line_chars).unwrap_or(usize::MAX);
        let truncated = match text.char_indices().nth(max) {
            Some((cut, _)) => {
                text.truncate(cut);
                true
            }
            None => false,
        };
        let size = text.len() as u64;
        if !self.lines.is_empty() && self.kept_bytes + size > self.spec.max_bytes {
            self.capped = true;
            return;
        }
        self.kept_bytes += size;
        self.lines.push(Line { number: self.line_no, text, truncated });
    }

    /// Ends the input; a last line without a newline still counts.
    pub fn finish(mut self) -> Result<Window, NotText> {
        if self.capped {
            return Ok(Window { lines: self.lines, total: None, capped: true });
        }
        if !self.carry.is_empty() {
            return Err(NotText::InvalidUtf8);
        }
        // A last line without a newline still counts; the empty file has none.
        if self.seen_any && !self.ended_with_newline {
            self.end_line();
        }
        let total = self.line_no - 1;
        Ok(Window { capped: self.capped, lines: self.lines, total: Some(total) })
    }
}

/// The footer line, by the seed's three forms.
pub fn footer(window: &Window, offset: u64) -> String {
    let start = window.lines.first().map_or(offset, |l| l.number);
    let end = window.lines.last().map_or(offset.saturating_sub(1), |l| l.number);
    match window.total {
        _ if window.capped => {
            format!("(Output capped. Showing lines {start}-{end}. Use offset={} to continue.)", end + 1)
        }
        Some(total) if end < total => {
            format!("(Showing lines {start}-{end} of {total}. Use offset={} to continue.)", end + 1)
        }
        Some(total) => format!("(End of file - total {total} lines)"),
        None => format!("(Output capped. Showing lines {start}-{end}. Use offset={} to continue.)", end + 1),
    }
}

/// The whole read envelope.
pub fn render(display_path: &str, window: &Window, offset: u64, max_line_chars: u64) -> String {
    let mut out = format!("<path>{display_path}</path>\n<type>file</type>\n<content>\n");
    for line in &window.lines {
        out.push_str(&line.number.to_string());
        out.push_str(": ");
        out.push_str(&line.text);
        if line.truncated {
            out.push_str(&format!("... (line truncated to {max_line_chars} chars)"));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&footer(window, offset));
    out.push_str("\n</content>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(offset: u64, limit: u64) -> WindowSpec {
        WindowSpec { offset, limit, max_line_chars: 10, max_bytes: 40 }
    }

    /// Renders `input` fed in chunks of `chunk` bytes.
    fn run(input: &[u8], spec: WindowSpec, chunk: usize) -> Result<String, NotText> {
        let mut b = WindowBuilder::new(spec);
        for piece in input.chunks(chunk.max(1)) {
            b.feed(piece)?;
            if b.done_early() {
                break;
            }
        }
        let w = b.finish()?;
        Ok(render("/ws/f", &w, spec.offset, spec.max_line_chars))
    }

    fn check(input: &[u8], spec: WindowSpec, expected: Result<&str, NotText>) {
        for chunk in [1, 2, 3, 7, input.len().max(1)] {
            let got = run(input, spec, chunk);
            assert_eq!(got.as_deref().map_err(|e| *e), expected, "chunk size {chunk} of {input:?}");
        }
    }

    const HEAD: &str = "<path>/ws/f</path>\n<type>file</type>\n<content>\n";

    #[test]
    fn windows_and_footers() {
        let e = |body: &str| format!("{HEAD}{body}\n</content>");
        check(b"a\nb\n", spec(1, 10), Ok(&e("1: a\n2: b\n\n(End of file - total 2 lines)")));
        check(b"a\nb", spec(1, 10), Ok(&e("1: a\n2: b\n\n(End of file - total 2 lines)")));
        check(b"", spec(1, 10), Ok(&e("\n(End of file - total 0 lines)")));
        check(b"\n", spec(1, 10), Ok(&e("1: \n\n(End of file - total 1 lines)")));
        check(
            b"a\nb\nc\n",
            spec(2, 1),
            Ok(&e("2: b\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)")),
        );
        // CRLF endings are not shown; a lone CR is line text.
        check(b"a\r\nb\rc\r\n", spec(1, 10), Ok(&e("1: a\n2: b\rc\n\n(End of file - total 2 lines)")));
        // BOM hidden.
        check("\u{feff}x\n".as_bytes(), spec(1, 10), Ok(&e("1: x\n\n(End of file - total 1 lines)")));
        // Long line truncated by characters, not bytes.
        check(
            "ééééééééééééé\n".as_bytes(),
            spec(1, 10),
            Ok(&e("1: éééééééééé... (line truncated to 10 chars)\n\n(End of file - total 1 lines)")),
        );
        // Byte cap: 40 bytes of kept text; each line here is 9 bytes.
        let many = b"123456789\n123456789\n123456789\n123456789\n123456789\n123456789\n";
        check(
            many,
            spec(1, 10),
            Ok(&e(
                "1: 123456789\n2: 123456789\n3: 123456789\n4: 123456789\n\n(Output capped. Showing lines 1-4. Use offset=5 to continue.)",
            )),
        );
        check(b"a\0b", spec(1, 10), Err(NotText::Nul));
        check(b"a\xffb\n", spec(1, 10), Err(NotText::InvalidUtf8));
        check(b"ok\n\xe2\x82", spec(1, 10), Err(NotText::InvalidUtf8));
    }

    #[test]
    fn a_window_past_the_end_has_no_lines() {
        let mut b = WindowBuilder::new(spec(5, 10));
        assert!(b.feed(b"a\nb\n").is_ok());
        let w = b.finish().unwrap_or_else(|_| Window { lines: vec![], total: None, capped: false });
        assert_eq!((w.lines.len(), w.total), (0, Some(2)));
    }
}
