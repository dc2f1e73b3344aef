//! Finding where a run of patch lines sits in the file, with Codex's four fuzz passes.
//!
//! Each pass scans every candidate position before the next, looser pass runs, so an exact
//! match anywhere after the cursor beats a fuzzy match earlier; within a pass the earliest
//! position wins (no uniqueness check, as in Codex).

type LineEq = fn(&str, &str) -> bool;

const PASSES: [LineEq; 4] = [
    |file, patch| file == patch,
    |file, patch| file.trim_end() == patch.trim_end(),
    |file, patch| file.trim() == patch.trim(),
    |file, patch| file.trim().chars().map(fold_punctuation).eq(patch.trim().chars().map(fold_punctuation)),
];

/// Maps the typographic characters models and editors swap in for ASCII ones (the same set as
/// Codex), so `-` in a patch finds an EN DASH in the file and the other way round.
fn fold_punctuation(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// Index of the first file line where `pattern` matches, scanning from `start`. With `eof`, only
/// the position that puts the pattern's last line on the file's last line is tried. An empty
/// pattern matches at `start`.
pub(crate) fn seek<S: AsRef<str>>(lines: &[&str], pattern: &[S], start: usize, eof: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    let last = lines.len().checked_sub(pattern.len())?;
    let first = if eof { last.max(start) } else { start };
    if first > last {
        return None;
    }
    PASSES.iter().find_map(|eq| {
        (first..=last).find(|&pos| pattern.iter().zip(&lines[pos..]).all(|(p, l)| eq(l, p.as_ref())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(file: &[&str], pattern: &[&str], start: usize, eof: bool, expected: Option<usize>) {
        assert_eq!(
            seek(file, pattern, start, eof),
            expected,
            "seek {pattern:?} in {file:?} from {start} eof={eof}"
        );
    }

    #[test]
    fn passes_and_positions() {
        let abc = ["a", "b", "c", "b"];
        check(&abc, &["b"], 0, false, Some(1));
        check(&abc, &["b"], 2, false, Some(3));
        check(&abc, &["b"], 4, false, None);
        check(&abc, &["b", "c"], 0, false, Some(1));
        check(&abc, &["a", "b", "c", "b", "x"], 0, false, None);
        check(&abc, &[], 2, false, Some(2));
        // End of file: only the last position counts, and never before the cursor.
        check(&abc, &["b"], 0, true, Some(3));
        check(&abc, &["a"], 0, true, None);
        check(&abc, &["c", "b"], 3, true, None);
        check(&[], &["a"], 0, false, None);
        // An exact match later wins over a fuzzy match earlier.
        check(&["x  ", "x"], &["x"], 0, false, Some(1));
        // Trailing whitespace, a stray CR in the patch, indentation.
        check(&["  fn f() {  "], &["  fn f() {"], 0, false, Some(0));
        check(&["x"], &["x\r"], 0, false, Some(0));
        check(&["        return 1"], &["return 1"], 0, false, Some(0));
        // Typographic punctuation both ways.
        check(&["a \u{2013} b"], &["a - b"], 0, false, Some(0));
        check(&["say \"hi\" it's"], &["say \u{201C}hi\u{201D} it\u{2019}s"], 0, false, Some(0));
        check(&["a\u{00A0}b\u{3000}c"], &["a b c"], 0, false, Some(0));
        check(&["top\u{2011}level"], &["top-level"], 0, false, Some(0));
        // Inner whitespace still counts.
        check(&["a  b"], &["a b"], 0, false, None);
    }
}
