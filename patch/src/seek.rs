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
    if start > last {
        return None;
    }
    if eof {
        let at_end = |eq: &LineEq| pattern.iter().zip(&lines[last..]).all(|(p, l)| eq(l, p.as_ref()));
        return PASSES.iter().any(at_end).then_some(last);
    }
    PASSES.iter().find_map(|eq| first_match(lines, pattern, start, eq))
}

/// The first position at or after `start` where every line of `pattern` is `eq` to the file's,
/// found by Knuth–Morris–Pratt over lines: each pass's `eq` is the equality of a normal form of
/// the line (an equivalence), which is all the failure table needs. Trying every position
/// instead costs file lines × pattern lines, so a hunk of a hundred `x` lines against a file of
/// a hundred thousand (a patch an agent may send for approval, checked by the daemon) took
/// seconds; this is linear in both.
fn first_match<S: AsRef<str>>(
    lines: &[&str],
    pattern: &[S],
    start: usize,
    eq: impl Fn(&str, &str) -> bool,
) -> Option<usize> {
    let at = |i: usize| pattern[i].as_ref();
    // fail[i]: the length of the longest proper prefix of pattern[..=i] that is also its suffix.
    let mut fail = vec![0usize; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && !eq(at(i), at(k)) {
            k = fail[k - 1];
        }
        if eq(at(i), at(k)) {
            k += 1;
        }
        fail[i] = k;
    }
    let mut matched = 0;
    for (j, line) in lines.iter().enumerate().skip(start) {
        while matched > 0 && !eq(line, at(matched)) {
            matched = fail[matched - 1];
        }
        if eq(line, at(matched)) {
            matched += 1;
        }
        if matched == pattern.len() {
            return Some(j + 1 - matched);
        }
    }
    None
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
        // Partial matches that restart inside themselves.
        check(&["a", "a", "b", "a", "a", "a", "b"], &["a", "a", "a", "b"], 0, false, Some(3));
        check(&["a", "b", "a", "b", "a", "c"], &["a", "b", "a", "c"], 0, false, Some(2));
        check(&["a", "b", "a", "b", "a", "c"], &["a", "b", "a", "c"], 3, false, None);
        // A fuzzy pass restarts the same way (indentation on every line).
        check(&["  a", "  a", "  b"], &["a", "b"], 0, false, Some(1));
    }

    /// A hunk that almost matches everywhere: the search stays linear in file and hunk lines
    /// (counted comparisons, not time), and finds the same position as trying each one.
    #[test]
    fn a_hunk_that_almost_matches_everywhere_costs_linear_comparisons() {
        let file: Vec<&str> = std::iter::repeat_n("x", 100_000).chain(["x", "y"]).collect();
        let pattern: Vec<&str> = std::iter::repeat_n("x", 100).chain(["y"]).collect();
        let count = std::cell::Cell::new(0u64);
        let eq = |a: &str, b: &str| {
            count.set(count.get() + 1);
            a == b
        };
        assert_eq!(first_match(&file, &pattern, 0, eq), Some(file.len() - pattern.len()));
        let linear = 2 * (file.len() + pattern.len()) as u64;
        assert!(
            count.get() <= 2 * linear,
            "{} comparisons for {} + {} lines",
            count.get(),
            file.len(),
            pattern.len()
        );
        // Every position tried in turn agrees, on a smaller copy.
        let small: Vec<&str> = file[file.len() - 500..].to_vec();
        let naive =
            (0..=small.len() - pattern.len()).find(|&p| pattern.iter().zip(&small[p..]).all(|(a, b)| a == b));
        assert_eq!(first_match(&small, &pattern, 0, |a, b| a == b), naive);
        assert_eq!(seek(&file, &pattern, 0, false), Some(file.len() - pattern.len()));
    }
}
