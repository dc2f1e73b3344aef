//! The Codex `apply_patch` format as pure logic: parse a patch, apply update chunks to text.
//!
//! Nothing here touches the filesystem. The tool layer reads files, checks policy, runs the
//! whole-patch preflight and renders reports; it calls [`parse`] once per patch and
//! [`apply_chunks`] once per `*** Update File` with the file's current text.
//!
//! Where this crate departs from Codex on purpose (each pinned by a test):
//! * a pure-addition chunk under `@@ context` is inserted right after that context line
//!   (Codex appends it at the end of the file, openai/codex#30946);
//! * chained `@@` headers (`@@ class A` then `@@ def f():`) narrow the search step by step
//!   instead of being rejected (openai/codex#7619 was never merged, yet models emit them);
//! * a unified-diff header such as `@@ -12,5 +12,6 @@ fn main()` is read as the context
//!   `fn main()` (or as a bare `@@`), since no real line looks like the numbers;
//! * blank lines between operations are skipped instead of being rejected as hunk headers, and
//!   a blank line between two `+` lines of an added file is an empty line of that file;
//! * a trailing blank line after a chunk's `+` lines does not turn a pure addition into a
//!   search for a blank line;
//! * `\r\n`, a lone `\r` and `\n` all end a line when matching (Codex's preserve mode), and
//!   untouched lines keep their bytes;
//! * a leading UTF-8 BOM is kept and ignored for matching.

#![forbid(unsafe_code)]

mod align;
mod apply;
mod lines;
mod model;
mod parse;
mod seek;

pub use apply::{HunkError, HunkErrorKind, apply_chunks};
pub use model::{Chunk, Op, OpKind, Patch};
pub use parse::{ParseError, parse};
