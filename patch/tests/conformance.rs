//! Runs the shared Codex apply_patch scenarios through `parse` and `apply_chunks`.
//!
//! The tool layer owns the filesystem, so this test plays it with an in-memory tree: every
//! operation of a patch is checked first and the tree changes only if all succeed (the seed's
//! "rejected patch changes nothing"). The final tree is compared byte for byte with
//! `expected/`, except where the seed overrides Codex (015: nothing is written).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fsd_patch::{Op, apply_chunks, parse};

type Tree = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The patch parses and every operation succeeds.
    Applies,
    /// `parse` refuses the patch.
    ParseFails,
    /// The patch parses but an operation fails, so nothing changes.
    Refused,
}

/// Every scenario of the fixture and what we expect of it. A fixture directory missing from
/// this table, or a table entry missing from the fixture, fails the test.
const SCENARIOS: &[(&str, Outcome)] = &[
    ("001_add_file", Outcome::Applies),
    ("002_multiple_operations", Outcome::Applies),
    ("003_multiple_chunks", Outcome::Applies),
    ("004_move_to_new_directory", Outcome::Applies),
    // Seed: an empty patch succeeds with zero operations (Codex refuses it); the tree is
    // unchanged either way.
    ("005_rejects_empty_patch", Outcome::Applies),
    ("006_rejects_missing_context", Outcome::Refused),
    ("007_rejects_missing_file_delete", Outcome::Refused),
    ("008_rejects_empty_update_hunk", Outcome::ParseFails),
    ("009_requires_existing_file_for_update", Outcome::Refused),
    ("010_move_overwrites_existing_destination", Outcome::Applies),
    ("011_add_overwrites_existing_file", Outcome::Applies),
    ("012_delete_directory_fails", Outcome::Refused),
    ("013_rejects_invalid_hunk_header", Outcome::ParseFails),
    ("014_update_file_appends_trailing_newline", Outcome::Applies),
    // Seed: refused in preflight, so `created.txt` is not left behind as in Codex's CLI.
    ("015_failure_after_partial_success_leaves_changes", Outcome::Refused),
    ("016_pure_addition_update_chunk", Outcome::Applies),
    ("017_whitespace_padded_hunk_header", Outcome::Applies),
    ("018_whitespace_padded_patch_markers", Outcome::Applies),
    ("019_unicode_simple", Outcome::Applies),
    ("020_delete_file_success", Outcome::Applies),
    ("020_whitespace_padded_patch_marker_lines", Outcome::Applies),
    ("021_update_file_deletion_only", Outcome::Applies),
    ("022_update_file_end_of_file_marker", Outcome::Applies),
    ("023_preserves_crlf_line_endings", Outcome::Applies),
    ("024_preserves_mixed_line_endings", Outcome::Applies),
];

/// Scenarios whose expected tree is not the fixture's `expected/` but the untouched input.
const EXPECT_INPUT_UNCHANGED: &[&str] = &["015_failure_after_partial_success_leaves_changes"];

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance/apply_patch")
}

fn read_tree(dir: &Path) -> Tree {
    fn walk(base: &Path, dir: &Path, tree: &mut Tree) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())).path();
            if path.is_dir() {
                walk(base, &path, tree);
            } else {
                let rel = path.strip_prefix(base).unwrap_or(&path).to_string_lossy().into_owned();
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                tree.insert(rel, bytes);
            }
        }
    }
    let mut tree = Tree::new();
    if dir.is_dir() {
        walk(dir, dir, &mut tree);
    }
    tree
}

fn is_dir(tree: &Tree, path: &str) -> bool {
    let prefix = format!("{}/", path.trim_end_matches('/'));
    tree.keys().any(|k| k.starts_with(&prefix))
}

/// Applies every operation to a copy of `tree`; any failure leaves `tree` as it was.
fn simulate(tree: &Tree, ops: &[Op]) -> Result<Tree, String> {
    let mut next = tree.clone();
    for op in ops {
        match op {
            Op::Add { path, contents, .. } => {
                if is_dir(&next, path) {
                    return Err(format!("add {path}: is a directory"));
                }
                next.insert(path.clone(), contents.as_bytes().to_vec());
            }
            Op::Delete { path, .. } => {
                if next.remove(path).is_none() {
                    return Err(format!("delete {path}: not a file"));
                }
            }
            Op::Update { path, move_to, chunks, .. } => {
                let Some(bytes) = next.get(path) else {
                    return Err(format!("update {path}: missing"));
                };
                let text = String::from_utf8(bytes.clone()).map_err(|e| format!("update {path}: {e}"))?;
                let updated = apply_chunks(&text, chunks)
                    .map_err(|e| format!("update {path}, chunk at patch line {}: {e}", e.chunk_line))?;
                if let Some(dest) = move_to {
                    next.remove(path);
                    next.insert(dest.clone(), updated.into_bytes());
                } else {
                    next.insert(path.clone(), updated.into_bytes());
                }
            }
        }
    }
    Ok(next)
}

fn show(tree: &Tree) -> String {
    tree.iter().map(|(k, v)| format!("{k}: {:?}", String::from_utf8_lossy(v))).collect::<Vec<_>>().join("\n")
}

#[test]
fn codex_scenarios() {
    let root = fixture_root();
    assert!(
        root.is_dir(),
        "conformance fixtures not found at {} (expected the shared apply_patch scenarios there; \
         this test must not pass without them)",
        root.display()
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<String> = SCENARIOS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(on_disk, listed, "the fixture's scenario directories differ from this test's table");

    let mut failures = Vec::new();
    for &(name, outcome) in SCENARIOS {
        let dir = root.join(name);
        let patch = std::fs::read_to_string(dir.join("patch.txt")).unwrap();
        let input = read_tree(&dir.join("input"));
        let expected = if EXPECT_INPUT_UNCHANGED.contains(&name) {
            input.clone()
        } else {
            read_tree(&dir.join("expected"))
        };
        let parsed = parse(&patch);
        // The tree each outcome leaves: a refused or unparsable patch leaves the input.
        let result: Result<Tree, String> = match (&parsed, outcome) {
            (Err(_), Outcome::ParseFails) => Ok(input.clone()),
            (Err(e), _) => Err(format!("unexpected parse error at line {}: {e}", e.line)),
            (Ok(p), Outcome::ParseFails) => Err(format!("parsed although it must fail: {p:?}")),
            (Ok(p), Outcome::Applies) => {
                simulate(&input, &p.ops).map_err(|e| format!("unexpected failure: {e}"))
            }
            (Ok(p), Outcome::Refused) => match simulate(&input, &p.ops) {
                Ok(tree) => Err(format!("applied although it must fail:\n{}", show(&tree))),
                Err(_) => Ok(input.clone()),
            },
        };
        match result {
            Err(why) => failures.push(format!("{name}: {why}")),
            Ok(tree) if tree != expected => failures.push(format!(
                "{name}: tree differs\n--- got\n{}\n--- expected\n{}",
                show(&tree),
                show(&expected)
            )),
            Ok(_) => {}
        }
    }
    assert!(failures.is_empty(), "{} scenario(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}

/// The scenarios that only update existing files, compared directly: the bytes `apply_chunks`
/// returns must be the expected file's bytes (023 and 024 pin CR and CRLF handling).
#[test]
fn update_only_scenarios_byte_exact() {
    let root = fixture_root();
    assert!(root.is_dir(), "conformance fixtures not found at {}", root.display());
    let mut covered = Vec::new();
    for &(name, _) in SCENARIOS {
        let dir = root.join(name);
        let Ok(patch) = parse(&std::fs::read_to_string(dir.join("patch.txt")).unwrap()) else {
            continue;
        };
        let input = read_tree(&dir.join("input"));
        let expected = read_tree(&dir.join("expected"));
        let all_updates = !patch.ops.is_empty()
            && patch.ops.iter().all(|op| matches!(op, Op::Update { .. }) && input.contains_key(op.path()));
        if !all_updates {
            continue;
        }
        for op in &patch.ops {
            let original = String::from_utf8(input[op.path()].clone()).unwrap();
            let result = apply_chunks(&original, op.chunks());
            match (result, expected.get(op.target_path())) {
                (Ok(text), Some(want)) => assert_eq!(
                    text.as_bytes(),
                    &want[..],
                    "{name}: {} differs from expected/{}",
                    op.path(),
                    op.target_path()
                ),
                // A failing hunk must be a scenario that leaves the file as it was.
                (Err(e), Some(want)) => assert_eq!(
                    original.as_bytes(),
                    &want[..],
                    "{name}: {} failed ({e}) but expected/ changed it",
                    op.path()
                ),
                (Ok(_), None) => panic!("{name}: expected/{} is missing", op.target_path()),
                (Err(e), None) => panic!("{name}: {e}"),
            }
        }
        covered.push(name);
    }
    assert_eq!(
        covered,
        [
            "003_multiple_chunks",
            "004_move_to_new_directory",
            "006_rejects_missing_context",
            "010_move_overwrites_existing_destination",
            "014_update_file_appends_trailing_newline",
            "016_pure_addition_update_chunk",
            "017_whitespace_padded_hunk_header",
            "018_whitespace_padded_patch_markers",
            "019_unicode_simple",
            "020_whitespace_padded_patch_marker_lines",
            "021_update_file_deletion_only",
            "022_update_file_end_of_file_marker",
            "023_preserves_crlf_line_endings",
            "024_preserves_mixed_line_endings",
        ]
    );
}
