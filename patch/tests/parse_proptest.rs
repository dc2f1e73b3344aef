//! Property tests of the apply_patch parser: `parse` returns (Ok or a `ParseError` with a line
//! inside the input) and never panics, on arbitrary text and on text assembled from the
//! grammar's own markers (where the parser's deeper branches are), and whatever parses can be
//! applied to arbitrary file text without a panic.
#![forbid(unsafe_code)]

use fsd_patch::{Op, apply_chunks, parse};
use proptest::prelude::*;

/// Lines that steer the parser into its branches, and lines that almost do.
fn line() -> impl Strategy<Value = String> {
    let markers = prop::sample::select(vec![
        "*** Begin Patch",
        "*** End Patch",
        "*** Add File: a.txt",
        "*** Add File: ",
        "*** Update File: a.txt",
        "*** Update File: /abs/../x",
        "*** Delete File: a.txt",
        "*** Move to: b.txt",
        "*** Move to:",
        "*** End of File",
        "@@",
        "@@ fn main",
        "@@ -1,2 +1,3 @@",
        "<<EOF",
        "<<'EOF'",
        "<<\"EOF\"",
        "EOF",
        "+",
        "-",
        " ",
        "",
        "\r",
        "*** ",
        "***",
    ]);
    prop_oneof![
        4 => markers.prop_map(str::to_owned),
        2 => ("[-+ ]", any::<String>()).prop_map(|(p, t)| format!("{p}{}", t.replace('\n', ""))),
        1 => any::<String>(),
    ]
}

fn patch_text() -> impl Strategy<Value = String> {
    (prop::collection::vec(line(), 0..24), prop::sample::select(vec!["\n", "\r\n"]), any::<bool>()).prop_map(
        |(lines, ending, trailing)| {
            let mut text = lines.join(ending);
            if trailing {
                text.push_str(ending);
            }
            text
        },
    )
}

fn check(input: &str, file: &str) -> Result<(), TestCaseError> {
    match parse(input) {
        Ok(patch) => {
            for op in &patch.ops {
                if let Op::Update { chunks, .. } = op {
                    // Ok or a hunk error: either way no panic.
                    let _ = apply_chunks(file, chunks);
                }
            }
        }
        Err(e) => {
            let lines = input.split('\n').count().max(1);
            prop_assert!(e.line <= lines + 1, "error line {} beyond the {lines} lines of the input", e.line);
            prop_assert!(!e.message.is_empty());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn parse_never_panics_on_arbitrary_text(input in any::<String>(), file in any::<String>()) {
        check(&input, &file)?;
    }

    #[test]
    fn parse_never_panics_on_grammar_shaped_text(input in patch_text(), file in "(a\n|b\r\n|\u{e9}\n|\n|x)*") {
        check(&input, &file)?;
    }
}
