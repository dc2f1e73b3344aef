//! Random patches and files must never make `parse` or `apply_chunks` panic, and every result
//! must keep the crate's invariants (a non-empty result ends with a line ending).

#![forbid(unsafe_code)]

use fsd_patch::{Op, apply_chunks, parse};

/// A fixed-seed generator so that a failure is reproducible without a dependency.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const PATCH_LINES: &[&str] = &[
    "*** Begin Patch",
    " *** Begin Patch ",
    "*** End Patch",
    "*** Update File: f",
    "*** Add File: g",
    "*** Delete File: d",
    "*** Move to: h",
    "*** End of File",
    "@@",
    "@@ a",
    "@@ b",
    "@@ -1,2 +1,3 @@ a",
    "-a",
    "-b",
    "-",
    "+b",
    "+",
    "+é",
    " a",
    " b",
    " ",
    "",
    "\t",
    "\r",
    "<<'EOF'",
    "EOF",
    "é",
    "*** Frob",
];

const BODY_LINES: &[&str] =
    &["@@", "@@ a", "-a", "-b", "+b", "+", " a", " b", "", "*** End of File", "-a\u{2013}"];

const FILE_PIECES: &[&str] = &["a", "b", "", "é", "\r", "\n", "\r\n", "a\u{2013}", " a ", "\u{feff}"];

#[test]
fn random_inputs_never_panic() {
    let mut rng = Lcg(0x5eed);
    let mut applied = 0;
    for _ in 0..20_000 {
        let sep = if rng.below(4) == 0 { "\r\n" } else { "\n" };
        let mut lines = vec!["*** Begin Patch"];
        for _ in 0..=rng.below(3) {
            if rng.below(6) == 0 {
                lines.push(rng.pick(PATCH_LINES));
            } else {
                lines.push("*** Update File: f");
            }
            for _ in 0..rng.below(7) {
                lines.push(rng.pick(BODY_LINES));
            }
        }
        if rng.below(8) != 0 {
            lines.push("*** End Patch");
        }
        let patch = lines.join(sep);
        let Ok(parsed) = parse(&patch) else {
            continue;
        };
        for op in &parsed.ops {
            assert!(op.line() >= 1 && op.line() <= lines.len(), "op line out of range in {patch:?}");
            if let Op::Add { contents, .. } = op {
                assert!(contents.is_empty() || contents.ends_with('\n'));
            }
            if !matches!(op, Op::Update { .. }) {
                continue;
            }
            let file: String = (0..rng.below(10)).map(|_| rng.pick(FILE_PIECES)).collect();
            if let Ok(out) = apply_chunks(&file, op.chunks()) {
                applied += 1;
                let body = out.strip_prefix('\u{feff}').unwrap_or(&out);
                assert!(
                    body.is_empty() || body.ends_with(['\n', '\r']),
                    "unterminated result {out:?} from {file:?} and {patch:?}"
                );
            }
        }
    }
    assert!(applied > 100, "the generator rarely produced applicable patches ({applied})");
}
