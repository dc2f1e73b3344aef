//! Snapshots of the failure texts the tools write themselves (beside the daemon failures that
//! `failure::tests` pins, the escalation texts in `escalation` and the image refusals in
//! `image::tests`): the edit tool's no-match and several-matches texts, the editor's path texts,
//! a streamed read's failures and the session's own refusals, byte-exact.

use fsd_proto::{ErrorCode, WireError};

use super::{edit, editor, read};
use crate::daemon::{DaemonError, Rejection, StreamError};
use crate::failure::ToolError;

fn refused(code: ErrorCode, meta: &[(&str, &str)]) -> DaemonError {
    let mut wire = WireError::new(code, "/ws/a.txt", "DAEMON-LABEL").with("mode", "workspace-write");
    for (key, value) in meta {
        wire = wire.with(key, *value);
    }
    DaemonError::Refused(wire)
}

fn check(got: ToolError, code: &str, expected: &str) {
    assert_eq!((got.code.as_str(), got.text().as_str()), (code, expected));
}

#[test]
fn the_tools_own_texts() {
    let old = "let x = 1;";
    check(
        edit::edit_error("/ws/a.txt", old, &refused(ErrorCode::EditNotFound, &[])),
        "FS_EDIT_NOT_FOUND",
        "Error: String to replace not found in file.\nString: let x = 1;",
    );
    check(
        edit::edit_error("/ws/a.txt", old, &refused(ErrorCode::AmbiguousEdit, &[("count", "3")])),
        "FS_AMBIGUOUS_EDIT",
        "Error: Found 3 matches of the string to replace, but replace_all is false. To replace all occurrences, set replace_all to true. To replace only one occurrence, please provide more context to uniquely identify the instance.\nString: let x = 1;",
    );
    check(
        edit::edit_error("/ws/a.txt", old, &refused(ErrorCode::StaleVersion, &[("reason", "changed")])),
        "FS_STALE_VERSION",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk since it was read — re-read the file, then retry",
    );
    check(
        edit::edit_error("/ws/a.txt", old, &DaemonError::Unavailable("connection reset".into())),
        "UNAVAILABLE",
        "Error: the file service is unavailable: connection reset",
    );
    check(
        editor::not_found("/ws/a.txt"),
        "FS_NOT_FOUND",
        "Error: The path /ws/a.txt does not exist. Please provide a valid path.",
    );
    check(
        editor::is_directory("/ws/d"),
        "FS_NOT_REGULAR_FILE",
        "Error: The path /ws/d is a directory and only the `view` command can be used on directories",
    );
    check(
        read::stream_error("/ws/big.txt", StreamError::NoHeader),
        "FS_IO_ERROR",
        "Error: cannot read \"/ws/big.txt\": the stream ended without a header",
    );
    check(
        read::stream_error("/ws/big.txt", StreamError::NotText),
        "FS_NOT_TEXT",
        "Error: cannot read \"/ws/big.txt\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)",
    );
    check(
        read::stream_error(
            "/ws/big.txt",
            StreamError::Daemon(refused(
                ErrorCode::Aborted,
                &[("reason", "stream_idle"), ("limit_ms", "400")],
            )),
        ),
        "FS_ABORTED",
        "Error: cannot read \"/ws/big.txt\": the stream was not read for 400 ms and was cancelled",
    );
    check(
        ToolError::not_observed("/ws/a.txt"),
        "FS_NOT_OBSERVED",
        "Error: cannot modify \"/ws/a.txt\": file has not been read — read the file, then retry",
    );
    check(
        ToolError::stale("/ws/a.txt"),
        "FS_STALE_VERSION",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk since it was read — re-read the file, then retry",
    );
    check(
        ToolError::restarted(),
        "UNAVAILABLE",
        "Error: The file service restarted, so earlier reads no longer count. Read files again before you edit or overwrite them, then retry this call.",
    );
    check(
        ToolError::from_read("/ws/a.txt", &DaemonError::Rejected(Rejection::Credentials)),
        "UNAVAILABLE",
        "Error: the file service did not accept this client's credentials (nothing was done); ask the user to check the client's token or certificate",
    );
    check(
        ToolError::from_mutation("/ws/a.txt", &DaemonError::Rejected(Rejection::Malformed)),
        "UNAVAILABLE",
        "Error: the file service rejected the call as malformed (nothing was done); this client and the daemon may be of different versions",
    );
    check(
        ToolError::from_mutation("/ws/a.txt", &DaemonError::Rejected(Rejection::Internal)),
        "UNAVAILABLE",
        "Error: the file service failed internally; the outcome is unknown",
    );
    check(
        ToolError::from_mutation("/ws/a.txt", &DaemonError::Rejected(Rejection::NewerCode)),
        "UNAVAILABLE",
        "Error: the file service refused the call with a failure this client does not know (the daemon is newer than this client); the outcome is unknown",
    );
    check(
        ToolError::source_removal_failed(Some(13)),
        "FS_IO_ERROR",
        "Error: source removal failed: cannot remove file: Permission denied (os error 13)",
    );
    check(ToolError::source_removal_failed(None), "FS_IO_ERROR", "Error: source removal failed");
    check(
        ToolError::invalid_args("limit must be a positive integer"),
        "INVALID_ARGS",
        "Error: limit must be a positive integer",
    );
}
