//! Test files: ASCII text of exact sizes, with marker lines the edit and patch benchmarks flip.

use std::io::Write;
use std::path::Path;

use crate::Res;

/// Bytes per line of the fixtures (63 characters and `\n`).
pub const LINE: usize = 64;

/// `lines` lines of 64 bytes; line 32 (1-based) is `marker`, padded.
pub fn text(lines: usize, marker: &str) -> String {
    let mut out = String::with_capacity(lines * LINE);
    for i in 1..=lines {
        let body = if i == 32 { marker.to_owned() } else { format!("line {i:05} of a benchmark fixture") };
        out.push_str(&format!("{body:-<63}\n"));
    }
    out
}

/// The 4 KiB file every per-call benchmark uses, with `marker-A` on line 32.
pub fn four_k() -> String {
    text(4096 / LINE, "marker-A")
}

/// A workspace in /tmp holding `f4k.txt` ([`four_k`]): the directory (removed when dropped), the
/// workspace's canonical root and the file's path, as the 64-in-flight benchmarks use it.
pub fn four_k_workspace(prefix: &str) -> Res<(tempfile::TempDir, std::path::PathBuf, String)> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let file = root.join("f4k.txt");
    std::fs::write(&file, four_k())?;
    let path = file.to_string_lossy().into_owned();
    Ok((dir, root, path))
}

/// The same file with `marker-B`: writes alternate between the two so each one changes bytes.
pub fn four_k_b() -> String {
    text(4096 / LINE, "marker-B")
}

/// A one-hunk patch of `path` flipping the marker `from` -> `to` (three lines of context).
pub fn hunk(path: &str, from: &str, to: &str) -> String {
    let line = |i: usize| format!("line {i:05} of a benchmark fixture");
    let pad = |s: String| format!("{s:-<63}");
    format!(
        "*** Update File: {path}\n@@\n {}\n {}\n {}\n-{}\n+{}\n {}\n {}\n {}\n",
        pad(line(29)),
        pad(line(30)),
        pad(line(31)),
        pad(from.to_owned()),
        pad(to.to_owned()),
        pad(line(33)),
        pad(line(34)),
        pad(line(35)),
    )
}

/// A patch of several files, each with one hunk.
pub fn patch(paths: &[String], from: &str, to: &str) -> String {
    let mut out = String::from("*** Begin Patch\n");
    for p in paths {
        out.push_str(&hunk(p, from, to));
    }
    out.push_str("*** End Patch\n");
    out
}

/// A file of `mib` MiB of text lines, written for real (no holes), in 1 MiB writes.
pub fn big(path: &Path, mib: u64) -> Res<()> {
    let block = text(1 << 14, "big-file");
    let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    for _ in 0..mib {
        file.write_all(block.as_bytes())?;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_hunks_line_up() {
        assert_eq!(four_k().len(), 4096);
        assert_eq!(text(1 << 14, "x").len(), 1 << 20);
        let a = four_k();
        let patched = fsd_patch_check(&a);
        assert!(patched);
    }

    /// The hunk's context and old line are lines 29–35 of the fixture.
    fn fsd_patch_check(a: &str) -> bool {
        let h = hunk("f", "marker-A", "marker-B");
        let old: Vec<&str> = h.lines().skip(2).filter(|l| !l.starts_with('+')).map(|l| &l[1..]).collect();
        let lines: Vec<&str> = a.lines().collect();
        lines[28..35] == old[..]
    }
}
