//! The code blocks a document marks for its test: a `<!-- KIND: NAME -->` line right above a
//! fenced block names it, so a test runs what the reader copies and the two cannot drift.

use std::collections::BTreeMap;

/// The blocks of `markdown` marked `<!-- {kind}: NAME -->`, by name.
pub fn marked_blocks(markdown: &str, kind: &str) -> BTreeMap<String, String> {
    let prefix = format!("<!-- {kind}: ");
    let mut out = BTreeMap::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix(prefix.as_str()).and_then(|l| l.strip_suffix(" -->")) else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "{name}: the marker must sit right above a code block");
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        out.insert(name.to_owned(), body.join("\n"));
    }
    out
}
