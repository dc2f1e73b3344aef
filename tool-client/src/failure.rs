//! Tool failures and the model-facing error texts: every failure renders as `Error: <message>`
//! with its stable code kept beside it. The FS_NOT_OBSERVED and FS_STALE_VERSION remedies are
//! added here and only here. Stale and sandbox refusals are worded here from the daemon's
//! `reason` metadata (the daemon sends no sentences), each fact once.

use fsd_proto::{ErrorCode, WireError};

use crate::daemon::DaemonError;

/// A failed tool call: a stable code and the message the model reads after `Error: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub code: String,
    pub message: String,
}

/// The stale reason the tools find most: the bytes changed since the read.
const STALE_CHANGED: &str = "file changed on disk since it was read";

/// The remedy appended to stale-version failures.
pub const STALE_REMEDY: &str = " — re-read the file, then retry";

impl ToolError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError { code: code.into(), message: message.into() }
    }

    /// An argument mistake the schema cannot express.
    pub fn invalid_args(message: impl Into<String>) -> ToolError {
        ToolError::new("INVALID_ARGS", message)
    }

    /// The policy or the provider found no prior observation: one text whatever the source.
    pub fn not_observed(path: &str) -> ToolError {
        let path = &shown(path);
        ToolError::new(
            ErrorCode::NotObserved.as_str(),
            format!("cannot modify \"{path}\": file has not been read — read the file, then retry"),
        )
    }

    /// The observed version no longer holds, as the tools find it themselves before a call.
    pub fn stale(path: &str) -> ToolError {
        ToolError::new(
            ErrorCode::StaleVersion.as_str(),
            format!("cannot modify \"{path}\": {}{STALE_REMEDY}", STALE_CHANGED),
        )
    }

    /// The daemon restarted under the session: its observations are gone.
    pub fn restarted() -> ToolError {
        ToolError::new(
            "UNAVAILABLE",
            "The file service restarted, so earlier reads no longer count. Read files again before you \
             edit or overwrite them, then retry this call.",
        )
    }

    /// The daemon went away mid-session; `message` is what the transport said.
    pub fn unavailable(message: &str) -> ToolError {
        ToolError::new("UNAVAILABLE", format!("the file service is unavailable: {message}"))
    }

    /// Maps a provider failure of a mutation on `path` to the model's text.
    pub fn from_mutation(path: &str, error: &DaemonError) -> ToolError {
        match error {
            DaemonError::Refused(wire) => ToolError::from_mutation_wire(path, wire),
            DaemonError::Unavailable(message) => ToolError::unavailable(message),
        }
    }

    pub fn from_mutation_wire(path: &str, wire: &WireError) -> ToolError {
        let path = &shown(path);
        match wire.code {
            ErrorCode::NotObserved => ToolError::not_observed(path),
            ErrorCode::StaleVersion => ToolError::new(
                wire.code.as_str(),
                format!("cannot modify \"{path}\": {}{STALE_REMEDY}", stale_reason(wire)),
            ),
            ErrorCode::SandboxDenied => sandbox_denied("modify", path, wire),
            ErrorCode::RateLimited => rate_limited("modify", path, wire),
            ErrorCode::NotRegularFile => {
                ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": not a regular file"))
            }
            ErrorCode::NotFound => {
                ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": not found"))
            }
            _ => ToolError::new(wire.code.as_str(), format!("cannot modify \"{path}\": {}", wire.message)),
        }
    }

    /// Maps a provider failure of a read of `path` to the model's text.
    pub fn from_read(path: &str, error: &DaemonError) -> ToolError {
        match error {
            DaemonError::Refused(wire) => ToolError::from_read_wire(path, wire),
            DaemonError::Unavailable(message) => ToolError::unavailable(message),
        }
    }

    pub fn from_read_wire(path: &str, wire: &WireError) -> ToolError {
        let path = &shown(path);
        let code = wire.code.as_str();
        match wire.code {
            ErrorCode::NotFound => ToolError::new(code, format!("cannot read \"{path}\": not found")),
            ErrorCode::NotRegularFile => {
                ToolError::new(code, format!("cannot read \"{path}\": not a regular file"))
            }
            ErrorCode::NotText => ToolError::new(
                code,
                format!(
                    "cannot read \"{path}\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)"
                ),
            ),
            ErrorCode::SandboxDenied => sandbox_denied("read", path, wire),
            ErrorCode::RateLimited => rate_limited("read", path, wire),
            // A file rewritten in place under the read: nothing was returned; reading again helps.
            ErrorCode::StaleVersion => ToolError::new(
                code,
                format!("cannot read \"{path}\": {} — read it again", stale_reason(wire)),
            ),
            _ => ToolError::new(code, format!("cannot read \"{path}\": {}", wire.message)),
        }
    }

    /// The text the model reads.
    pub fn text(&self) -> String {
        format!("Error: {}", self.message)
    }
}

/// Why a guard no longer holds, from the daemon's `reason`.
fn stale_reason(wire: &WireError) -> &'static str {
    match wire.get("reason") {
        Some("gone") => "file no longer exists",
        Some("symlink") => "file was replaced by a symbolic link",
        Some("other_file") => "path now resolves to a different file than the one that was read",
        Some("changed_while_writing") => "file changed on disk while it was being written",
        Some("destination_gone") => "destination disappeared after the move",
        Some("changed_while_read") => "file changed while it was read",
        _ => STALE_CHANGED,
    }
}

/// A path as the model gave it, for an error text: a raw control, bidi or zero-width character
/// in it is escaped (`fsd_proto::names`), escapes it already holds are left as they are.
fn shown(path: &str) -> String {
    fsd_proto::names::sanitize(path)
}

/// A refusal by the mode fence, with the seed's marker. The marker names the mode and the
/// denial; the words before it add only what it does not say (which protected name, which root).
fn sandbox_denied(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let mode = wire.get("mode").unwrap_or("workspace-write");
    let fact = match wire.get("reason") {
        Some("protected") => {
            Some(format!("{} is a protected path", wire.get("name").unwrap_or("a path component")))
        }
        Some("git_directory") => {
            Some(format!("{} is a git directory (protected)", wire.get("name").unwrap_or("a path component")))
        }
        Some("submount") => Some(format!(
            "{} is a mount point below the root (not in allow_submounts)",
            wire.get("name").unwrap_or("a path component")
        )),
        Some("not_writable_root") => Some("not inside a writable root".to_owned()),
        Some("outside_roots") => Some("path resolves outside every root of this daemon".to_owned()),
        Some("same_file") => Some("source and destination are the same file".to_owned()),
        Some("read_only") => None,
        // Refusals decided outside the backend's fence (escalation, an unserved mode).
        _ => Some(wire.message.clone()),
    };
    let marker = format!("[sandbox: file access denied under {mode} mode]");
    let message = match fact {
        Some(fact) => format!("cannot {verb} \"{path}\": {fact} {marker}"),
        None => format!("cannot {verb} \"{path}\" {marker}"),
    };
    ToolError::new(ErrorCode::SandboxDenied.as_str(), message)
}

/// A per-client budget of the daemon is spent: nothing was done; the daemon says how long to
/// wait. The model is told to wait and retry, not that the file is at fault.
fn rate_limited(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let wait = wire.get("retry_after_ms").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1000);
    ToolError::new(
        ErrorCode::RateLimited.as_str(),
        format!(
            "cannot {verb} \"{path}\": the file service is limiting this client's calls (nothing was done) — wait {wait} ms, then retry"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: DaemonError, read: bool, expected: &str) {
        let got = if read {
            ToolError::from_read("/ws/a.txt", &error)
        } else {
            ToolError::from_mutation("/ws/a.txt", &error)
        };
        assert_eq!(got.text(), expected);
    }

    /// A daemon error as the daemon sends it: a code, a terse label and metadata.
    fn wire(code: ErrorCode, meta: &[(&str, &str)]) -> DaemonError {
        let mut wire = WireError::new(code, "/ws/a.txt", "label").with("mode", "workspace-write");
        for (key, value) in meta {
            wire = wire.with(key, *value);
        }
        DaemonError::Refused(wire)
    }

    /// Every text rendered from a stale or sandbox reason, and the seed's strings, byte-exact.
    #[test]
    fn provider_codes_render_as_the_seed_says() {
        let m = "Error: cannot modify \"/ws/a.txt\": ";
        let stale = |reason: &str, words: &str| {
            check(
                wire(ErrorCode::StaleVersion, &[("reason", reason)]),
                false,
                &format!("{m}{words} — re-read the file, then retry"),
            );
        };
        stale("changed", "file changed on disk since it was read");
        stale("gone", "file no longer exists");
        stale("symlink", "file was replaced by a symbolic link");
        stale("other_file", "path now resolves to a different file than the one that was read");
        stale("changed_while_writing", "file changed on disk while it was being written");
        stale("destination_gone", "destination disappeared after the move");
        stale("a reason from a newer daemon", "file changed on disk since it was read");
        assert_eq!(
            ToolError::stale("/ws/a.txt").text(),
            format!("{m}file changed on disk since it was read — re-read the file, then retry")
        );

        let marker = "[sandbox: file access denied under workspace-write mode]";
        let denied = |meta: &[(&str, &str)], read: bool, expected: &str| {
            check(wire(ErrorCode::SandboxDenied, meta), read, &format!("{expected} {marker}"));
        };
        denied(&[("reason", "protected"), ("name", ".git")], false, &format!("{m}.git is a protected path"));
        denied(&[("reason", "not_writable_root")], false, &format!("{m}not inside a writable root"));
        denied(
            &[("reason", "outside_roots")],
            true,
            "Error: cannot read \"/ws/a.txt\": path resolves outside every root of this daemon",
        );
        denied(&[("reason", "same_file")], false, &format!("{m}source and destination are the same file"));
        check(
            WireError::new(ErrorCode::SandboxDenied, "/ws/a.txt", "label")
                .with("mode", "read-only")
                .with("reason", "read_only")
                .into(),
            false,
            "Error: cannot modify \"/ws/a.txt\" [sandbox: file access denied under read-only mode]",
        );

        check(
            wire(ErrorCode::NotObserved, &[]),
            false,
            "Error: cannot modify \"/ws/a.txt\": file has not been read — read the file, then retry",
        );
        check(wire(ErrorCode::NotFound, &[]), true, "Error: cannot read \"/ws/a.txt\": not found");
        check(
            wire(ErrorCode::StaleVersion, &[("reason", "changed_while_read")]),
            true,
            "Error: cannot read \"/ws/a.txt\": file changed while it was read — read it again",
        );
        check(wire(ErrorCode::NotFound, &[]), false, "Error: cannot modify \"/ws/a.txt\": not found");
        check(
            wire(ErrorCode::NotRegularFile, &[]),
            true,
            "Error: cannot read \"/ws/a.txt\": not a regular file",
        );
        check(
            wire(ErrorCode::NotText, &[]),
            true,
            "Error: cannot read \"/ws/a.txt\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)",
        );
        let limited = |budget: &str, ms: &str| {
            WireError::new(ErrorCode::RateLimited, "/ws/a.txt", "the caller's budget is spent")
                .with("retry_after_ms", ms)
                .with("budget", budget)
                .into()
        };
        check(
            limited("calls_per_second", "250"),
            true,
            "Error: cannot read \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 250 ms, then retry",
        );
        check(
            limited("new_files_per_second", "1"),
            false,
            "Error: cannot modify \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 1 ms, then retry",
        );
        check(
            DaemonError::Unavailable("connection reset".into()),
            true,
            "Error: the file service is unavailable: connection reset",
        );
    }

    /// No rendered refusal says the same thing twice (the old daemon sentence repeated the
    /// marker's "file access denied under … mode").
    #[test]
    fn no_refusal_states_a_fact_twice() {
        for reason in ["protected", "not_writable_root", "outside_roots", "same_file", "read_only"] {
            let status = wire(ErrorCode::SandboxDenied, &[("reason", reason), ("name", ".git")]);
            let text = ToolError::from_mutation("/ws/a.txt", &status).text();
            assert_eq!(text.matches("file access denied").count(), 1, "{text}");
            assert_eq!(text.matches("workspace-write").count(), 1, "{text}");
        }
    }
}
