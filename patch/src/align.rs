//! Pairing a chunk's new lines with its old lines, to know which lines the chunk leaves alone.
//!
//! A chunk only carries `old_lines` and `new_lines`; the context lines are the lines common to
//! both. Kept lines are written back with the file's own bytes (its text, which fuzzy matching
//! may have found slightly different, and its own ending), so they must be told apart from
//! inserted ones.

/// Above this many cells the middle of a chunk is not diffed: its lines are all treated as
/// replaced. Such chunks are rare and the result is still correct text; only the endings and
/// exact bytes of their inner context lines are lost.
const MAX_LCS_CELLS: usize = 1 << 20;

/// For each new line, the index of the old line it keeps, if any. Pairs are increasing in both
/// indices and equal texts only.
pub(crate) fn align(old: &[String], new: &[String]) -> Vec<Option<usize>> {
    let mut out = vec![None; new.len()];
    let prefix = old.iter().zip(new).take_while(|(o, n)| o == n).count();
    let max_suffix = old.len().min(new.len()) - prefix;
    let suffix = old.iter().rev().zip(new.iter().rev()).take(max_suffix).take_while(|(o, n)| o == n).count();
    for (i, slot) in out.iter_mut().enumerate().take(prefix) {
        *slot = Some(i);
    }
    for s in 0..suffix {
        out[new.len() - 1 - s] = Some(old.len() - 1 - s);
    }
    let old_mid = &old[prefix..old.len() - suffix];
    let new_mid = &new[prefix..new.len() - suffix];
    for (j, i) in lcs_pairs(old_mid, new_mid) {
        out[prefix + j] = Some(prefix + i);
    }
    out
}

/// Longest common subsequence pairs `(new index, old index)`, or none when too large.
fn lcs_pairs(old: &[String], new: &[String]) -> Vec<(usize, usize)> {
    let (m, n) = (old.len(), new.len());
    if m == 0 || n == 0 || (m + 1).saturating_mul(n + 1) > MAX_LCS_CELLS {
        return Vec::new();
    }
    let width = n + 1;
    // table[i * width + j] = LCS length of old[i..] and new[j..].
    let mut table = vec![0u32; (m + 1) * width];
    for i in (0..m).rev() {
        for j in (0..n).rev() {
            table[i * width + j] = if old[i] == new[j] {
                table[(i + 1) * width + j + 1] + 1
            } else {
                table[(i + 1) * width + j].max(table[i * width + j + 1])
            };
        }
    }
    let mut pairs = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < m && j < n {
        if old[i] == new[j] {
            pairs.push((j, i));
            i += 1;
            j += 1;
        } else if table[(i + 1) * width + j] >= table[i * width + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(old: &[&str], new: &[&str], expected: &[Option<usize>]) {
        let old: Vec<String> = old.iter().map(|s| s.to_string()).collect();
        let new: Vec<String> = new.iter().map(|s| s.to_string()).collect();
        assert_eq!(align(&old, &new), expected, "align {old:?} -> {new:?}");
    }

    #[test]
    fn pairs_context_lines() {
        check(&[], &[], &[]);
        check(&[], &["x"], &[None]);
        check(&["x"], &[], &[]);
        check(&["a", "b", "c"], &["a", "B", "c"], &[Some(0), None, Some(2)]);
        check(&["one", "two"], &["ONE", "two", "between"], &[None, Some(1), None]);
        check(
            &["a", "x", "m", "y", "z"],
            &["a", "X", "m", "Y", "z"],
            &[Some(0), None, Some(2), None, Some(4)],
        );
        // Repeated lines: prefix and suffix must not overlap.
        check(&["a", "a"], &["a", "a", "a"], &[Some(0), Some(1), None]);
        check(&["a", "b"], &["b", "b", "a"], &[Some(1), None, None]);
    }

    #[test]
    fn huge_middles_are_replaced_wholesale() {
        let old: Vec<String> = (0..2000).map(|i| format!("o{i}")).chain(["k".into()]).collect();
        let new: Vec<String> =
            ["k".to_string()].into_iter().chain((0..2000).map(|i| format!("n{i}"))).collect();
        assert!(align(&old, &new).iter().all(Option::is_none));
    }
}
