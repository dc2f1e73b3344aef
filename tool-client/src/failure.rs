//! Tool failures and the model-facing error texts: every failure renders as `Error: <message>`
//! with its stable code kept beside it. The FS_NOT_OBSERVED and FS_STALE_VERSION remedies are
//! added here and only here.

use fsd_proto::{ErrorCode, WireError};

/// A failed tool call: a stable code and the message the model reads after `Error: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub code: String,
    pub message: String,
}

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
        ToolError::new(
            ErrorCode::NotObserved.as_str(),
            format!("cannot modify \"{path}\": file has not been read — read the file, then retry"),
        )
    }

    /// The daemon went away mid-session.
    /// The daemon restarted under the session: its observations are gone.
    pub fn restarted() -> ToolError {
        ToolError::new(
            "UNAVAILABLE",
            "The file service restarted, so earlier reads no longer count. Read files again before you \
             edit or overwrite them, then retry this call.",
        )
    }

    pub fn unavailable(status: &tonic::Status) -> ToolError {
        ToolError::new("UNAVAILABLE", format!("the file service is unavailable: {}", status.message()))
    }

    /// Maps a provider failure of a mutation on `path` to the model's text.
    pub fn from_mutation(path: &str, status: &tonic::Status) -> ToolError {
        let Some(wire) = WireError::from_status(status) else {
            return ToolError::unavailable(status);
        };
        match wire.code {
            ErrorCode::NotObserved => ToolError::not_observed(path),
            ErrorCode::StaleVersion => ToolError::new(
                wire.code.as_str(),
                format!("cannot modify \"{path}\": {}{STALE_REMEDY}", wire.message),
            ),
            ErrorCode::SandboxDenied => sandbox_denied("modify", path, &wire),
            ErrorCode::RateLimited => rate_limited("modify", path, &wire),
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
    pub fn from_read(path: &str, status: &tonic::Status) -> ToolError {
        let Some(wire) = WireError::from_status(status) else {
            return ToolError::unavailable(status);
        };
        ToolError::from_read_wire(path, &wire)
    }

    pub fn from_read_wire(path: &str, wire: &WireError) -> ToolError {
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
            _ => ToolError::new(code, format!("cannot read \"{path}\": {}", wire.message)),
        }
    }

    /// The text the model reads.
    pub fn text(&self) -> String {
        format!("Error: {}", self.message)
    }
}

/// A refusal by the mode fence, with the seed's marker.
fn sandbox_denied(verb: &str, path: &str, wire: &WireError) -> ToolError {
    let mode = wire.get("mode").unwrap_or("workspace-write");
    ToolError::new(
        ErrorCode::SandboxDenied.as_str(),
        format!("cannot {verb} \"{path}\": {} [sandbox: file access denied under {mode} mode]", wire.message),
    )
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

    fn check(status: tonic::Status, read: bool, expected: &str) {
        let got = if read {
            ToolError::from_read("/ws/a.txt", &status)
        } else {
            ToolError::from_mutation("/ws/a.txt", &status)
        };
        assert_eq!(got.text(), expected);
    }

    #[test]
    fn provider_codes_render_as_the_seed_says() {
        let wire = |code, msg: &str| {
            WireError::new(code, "/ws/a.txt", msg).with("mode", "workspace-write").into_status()
        };
        check(
            wire(ErrorCode::NotObserved, "file already exists"),
            false,
            "Error: cannot modify \"/ws/a.txt\": file has not been read — read the file, then retry",
        );
        check(
            wire(ErrorCode::StaleVersion, "file changed on disk since it was read"),
            false,
            "Error: cannot modify \"/ws/a.txt\": file changed on disk since it was read — re-read the file, then retry",
        );
        check(wire(ErrorCode::NotFound, "not found"), true, "Error: cannot read \"/ws/a.txt\": not found");
        check(
            wire(ErrorCode::NotRegularFile, "not a regular file"),
            true,
            "Error: cannot read \"/ws/a.txt\": not a regular file",
        );
        check(
            wire(ErrorCode::SandboxDenied, "path resolves outside every root of this daemon"),
            false,
            "Error: cannot modify \"/ws/a.txt\": path resolves outside every root of this daemon [sandbox: file access denied under workspace-write mode]",
        );
        let limited = |budget: &str, ms: &str| {
            WireError::new(ErrorCode::RateLimited, "/ws/a.txt", "the caller's budget is spent")
                .with("retry_after_ms", ms)
                .with("budget", budget)
                .into_status()
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
            tonic::Status::unavailable("connection reset"),
            true,
            "Error: the file service is unavailable: connection reset",
        );
    }
}
