//! Snapshots of every text a daemon failure renders as, for reads and mutations: each code,
//! each `reason`, each I/O `step`, each escalation denial and ticket reason, byte-exact. A code
//! added to `ErrorCode` without a row here fails `every_code_has_a_snapshot`.

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
    stale("changed_while_removing", "file changed on disk while it was being deleted (the change was kept)");
    stale("destination_gone", "destination disappeared after the move");
    check(
        wire(
            ErrorCode::StaleVersion,
            &[("reason", "changed_while_removing"), ("kept", "/ws/a.txt.kept-0123abcd")],
        ),
        false,
        &format!(
            "{m}file changed on disk while it was being deleted (the change was kept; an earlier change, whose name was taken again, was kept as \"/ws/a.txt.kept-0123abcd\") — re-read the file, then retry"
        ),
    );
    check(
        wire(
            ErrorCode::StaleVersion,
            &[("reason", "changed_while_writing"), ("kept", "/ws/a.txt.kept-0123abcd")],
        ),
        false,
        &format!(
            "{m}file changed on disk while it was being written (the newest change was kept; an earlier change it replaced was kept as \"/ws/a.txt.kept-0123abcd\") — re-read the file, then retry"
        ),
    );
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
    check(wire(ErrorCode::NotRegularFile, &[]), true, "Error: cannot read \"/ws/a.txt\": not a regular file");
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

/// A code, its metadata, and the texts a read and a mutation render them as.
type Snapshot = (ErrorCode, &'static [(&'static str, &'static str)], &'static str, &'static str);

/// Every failure the daemon can send (each code, every `reason` it has, every I/O `step`, and
/// unknown values as a newer daemon might send them) and the texts a read and a mutation render
/// it as. The daemon's status message in these is `LABEL`, which no text may contain.
#[rustfmt::skip]
const SNAPSHOTS: &[Snapshot] = {
    use ErrorCode as C;
    &[
    (C::NotFound, &[],
        "Error: cannot read \"/ws/a.txt\": not found",
        "Error: cannot modify \"/ws/a.txt\": not found"),
    (C::NotDirectory, &[],
        "Error: cannot read \"/ws/a.txt\": a path component is not a directory",
        "Error: cannot modify \"/ws/a.txt\": a path component is not a directory"),
    (C::NotText, &[],
        "Error: cannot read \"/ws/a.txt\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)",
        "Error: cannot modify \"/ws/a.txt\": the file is not UTF-8 text (it has invalid UTF-8 or NUL bytes)"),
    (C::NotRegularFile, &[],
        "Error: cannot read \"/ws/a.txt\": not a regular file",
        "Error: cannot modify \"/ws/a.txt\": not a regular file"),
    (C::PermissionDenied, &[],
        "Error: cannot read \"/ws/a.txt\": permission denied",
        "Error: cannot modify \"/ws/a.txt\": permission denied"),
    (C::PermissionDenied, &[("step", "open"), ("errno", "13")],
        "Error: cannot read \"/ws/a.txt\": cannot open file: Permission denied (os error 13)",
        "Error: cannot modify \"/ws/a.txt\": cannot open file: Permission denied (os error 13)"),
    (C::SandboxDenied, &[("reason", "protected"), ("name", ".git")],
        "Error: cannot read \"/ws/a.txt\": .git is a protected path [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": .git is a protected path [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "git_directory"), ("name", "/ws/vendor/x/.git")],
        "Error: cannot read \"/ws/a.txt\": /ws/vendor/x/.git is a git directory (protected) [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": /ws/vendor/x/.git is a git directory (protected) [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "git_directory"), ("name", "/ws/x"), ("entry", "HEAD")],
        "Error: cannot read \"/ws/a.txt\": HEAD would make /ws/x a git directory (protected) [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": HEAD would make /ws/x a git directory (protected) [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "submount"), ("name", "/ws/mnt")],
        "Error: cannot read \"/ws/a.txt\": /ws/mnt is a mount point below the root (not in allow_submounts) [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": /ws/mnt is a mount point below the root (not in allow_submounts) [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "not_writable_root")],
        "Error: cannot read \"/ws/a.txt\": not inside a writable root [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": not inside a writable root [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "outside_roots")],
        "Error: cannot read \"/ws/a.txt\": path resolves outside every root of this daemon [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": path resolves outside every root of this daemon [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "same_file")],
        "Error: cannot read \"/ws/a.txt\": source and destination are the same file [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": source and destination are the same file [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "repeated_target")],
        "Error: cannot read \"/ws/a.txt\": another operation of the same atomic patch changes this file too [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": another operation of the same atomic patch changes this file too [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "no_state_dir")],
        "Error: cannot read \"/ws/a.txt\": the file service keeps no state_dir, which atomic patches need [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": the file service keeps no state_dir, which atomic patches need [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "read_only"), ("mode", "read-only")],
        "Error: cannot read \"/ws/a.txt\" [sandbox: file access denied under read-only mode]",
        "Error: cannot modify \"/ws/a.txt\" [sandbox: file access denied under read-only mode]"),
    (C::SandboxDenied, &[("reason", "root")],
        "Error: cannot read \"/ws/a.txt\": a root itself cannot be removed [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": a root itself cannot be removed [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "mount"), ("name", "/ws/mnt")],
        "Error: cannot read \"/ws/a.txt\": /ws/mnt is another mount below the tree (a removal does not cross it) [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": /ws/mnt is another mount below the tree (a removal does not cross it) [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "above_max"), ("requested", "danger-full-access"), ("max_mode", "workspace-write")],
        "Error: cannot read \"/ws/a.txt\": danger-full-access is above this client's maximum mode workspace-write [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": danger-full-access is above this client's maximum mode workspace-write [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "escalation_disabled"), ("requested", "danger-full-access")],
        "Error: cannot read \"/ws/a.txt\": escalation to danger-full-access is disabled on this daemon [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation to danger-full-access is disabled on this daemon [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "escalation_disabled")],
        "Error: cannot read \"/ws/a.txt\": escalation is disabled on this daemon [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation is disabled on this daemon [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "needs_approval"), ("requested", "danger-full-access")],
        "Error: cannot read \"/ws/a.txt\": danger-full-access needs an approved escalation with a justification [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": danger-full-access needs an approved escalation with a justification [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "needs_ticket"), ("requested", "danger-full-access")],
        "Error: cannot read \"/ws/a.txt\": danger-full-access needs a signed escalation ticket [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": danger-full-access needs a signed escalation ticket [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "no_signed_escalation")],
        "Error: cannot read \"/ws/a.txt\": this daemon does not take signed escalations [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": this daemon does not take signed escalations [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "no_mode")],
        "Error: cannot read \"/ws/a.txt\": the escalation names no mode [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": the escalation names no mode [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "not_wider"), ("requested", "read-only")],
        "Error: cannot read \"/ws/a.txt\": read-only needs no escalation [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": read-only needs no escalation [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "a reason from a newer daemon")],
        "Error: cannot read \"/ws/a.txt\" [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\" [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[],
        "Error: cannot read \"/ws/a.txt\" [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\" [sandbox: file access denied under workspace-write mode]"),
    (C::IoError, &[("step", "rename")],
        "Error: cannot read \"/ws/a.txt\": cannot rename into place",
        "Error: cannot modify \"/ws/a.txt\": cannot rename into place"),
    (C::IoError, &[("reason", "mode_stuck"), ("abandoned_workers", "2")],
        "Error: cannot read \"/ws/a.txt\": workspace-write mode is not serving: 2 of its workers are stuck in the filesystem and were abandoned",
        "Error: cannot modify \"/ws/a.txt\": workspace-write mode is not serving: 2 of its workers are stuck in the filesystem and were abandoned"),
    (C::IoError, &[("reason", "dispatch_failed")],
        "Error: cannot read \"/ws/a.txt\": the file service could not run the call",
        "Error: cannot modify \"/ws/a.txt\": the file service could not run the call"),
    (C::IoError, &[("reason", "no_descriptor")],
        "Error: cannot read \"/ws/a.txt\": the file service's worker sent no descriptor",
        "Error: cannot modify \"/ws/a.txt\": the file service's worker sent no descriptor"),
    (C::IoError, &[("reason", "check_failed")],
        "Error: cannot read \"/ws/a.txt\": the file service's check of this call failed",
        "Error: cannot modify \"/ws/a.txt\": the file service's check of this call failed"),
    (C::IoError, &[("reason", "check_pool_stopped")],
        "Error: cannot read \"/ws/a.txt\": the file service's check threads stopped",
        "Error: cannot modify \"/ws/a.txt\": the file service's check threads stopped"),
    (C::IoError, &[],
        "Error: cannot read \"/ws/a.txt\": an I/O error",
        "Error: cannot modify \"/ws/a.txt\": an I/O error"),
    (C::StaleVersion, &[("reason", "changed")],
        "Error: cannot read \"/ws/a.txt\": file changed on disk since it was read — read it again",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk since it was read — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "gone")],
        "Error: cannot read \"/ws/a.txt\": file no longer exists — read it again",
        "Error: cannot modify \"/ws/a.txt\": file no longer exists — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "symlink")],
        "Error: cannot read \"/ws/a.txt\": file was replaced by a symbolic link — read it again",
        "Error: cannot modify \"/ws/a.txt\": file was replaced by a symbolic link — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "other_file")],
        "Error: cannot read \"/ws/a.txt\": path now resolves to a different file than the one that was read — read it again",
        "Error: cannot modify \"/ws/a.txt\": path now resolves to a different file than the one that was read — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "changed_while_writing")],
        "Error: cannot read \"/ws/a.txt\": file changed on disk while it was being written — read it again",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk while it was being written — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "changed_while_removing")],
        "Error: cannot read \"/ws/a.txt\": file changed on disk while it was being deleted (the change was kept) — read it again",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk while it was being deleted (the change was kept) — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "destination_gone")],
        "Error: cannot read \"/ws/a.txt\": destination disappeared after the move — read it again",
        "Error: cannot modify \"/ws/a.txt\": destination disappeared after the move — re-read the file, then retry"),
    (C::StaleVersion, &[("reason", "changed_while_read")],
        "Error: cannot read \"/ws/a.txt\": file changed while it was read — read it again",
        "Error: cannot modify \"/ws/a.txt\": file changed while it was read — re-read the file, then retry"),
    (C::StaleVersion, &[],
        "Error: cannot read \"/ws/a.txt\": file changed on disk since it was read — read it again",
        "Error: cannot modify \"/ws/a.txt\": file changed on disk since it was read — re-read the file, then retry"),
    (C::NotObserved, &[],
        "Error: cannot read \"/ws/a.txt\": file has not been read",
        "Error: cannot modify \"/ws/a.txt\": file has not been read — read the file, then retry"),
    (C::AmbiguousEdit, &[("count", "3")],
        "Error: cannot read \"/ws/a.txt\": the string to replace was found 3 times",
        "Error: cannot modify \"/ws/a.txt\": the string to replace was found 3 times"),
    (C::AmbiguousEdit, &[],
        "Error: cannot read \"/ws/a.txt\": the string to replace was found several times",
        "Error: cannot modify \"/ws/a.txt\": the string to replace was found several times"),
    (C::RateLimited, &[],
        "Error: cannot read \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 1000 ms, then retry",
        "Error: cannot modify \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 1000 ms, then retry"),
    (C::EditNotFound, &[],
        "Error: cannot read \"/ws/a.txt\": the string to replace was not found",
        "Error: cannot modify \"/ws/a.txt\": the string to replace was not found"),
    (C::Aborted, &[("reason", "no_free_worker")],
        "Error: cannot read \"/ws/a.txt\": no worker became free before the call's deadline",
        "Error: cannot modify \"/ws/a.txt\": no worker became free before the call's deadline"),
    (C::Aborted, &[("reason", "stream_idle"), ("limit_ms", "30000")],
        "Error: cannot read \"/ws/a.txt\": the stream was not read for 30000 ms and was cancelled",
        "Error: cannot modify \"/ws/a.txt\": the stream was not read for 30000 ms and was cancelled"),
    (C::Aborted, &[("reason", "upload_too_slow"), ("limit", "16384")],
        "Error: cannot read \"/ws/a.txt\": the upload's body came slower than 16384 bytes a second and was cut off; nothing was written",
        "Error: cannot modify \"/ws/a.txt\": the upload's body came slower than 16384 bytes a second and was cut off; nothing was written"),
    (C::Aborted, &[("reason", "cancelled")],
        "Error: cannot read \"/ws/a.txt\": the call was cancelled",
        "Error: cannot modify \"/ws/a.txt\": the call was cancelled"),
    (C::Aborted, &[("reason", "truncated")],
        "Error: cannot read \"/ws/a.txt\": the upload ended before its last byte",
        "Error: cannot modify \"/ws/a.txt\": the upload ended before its last byte"),
    (C::Aborted, &[],
        "Error: cannot read \"/ws/a.txt\": the call was aborted; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the call was aborted; the outcome is unknown"),
    (C::TooLarge, &[("size", "9"), ("limit", "4")],
        "Error: cannot read \"/ws/a.txt\": file is 9 bytes, over the limit of 4 bytes",
        "Error: cannot modify \"/ws/a.txt\": file is 9 bytes, over the limit of 4 bytes"),
    (C::TooLarge, &[("reason", "too_many_entries"), ("limit", "10000")],
        "Error: cannot read \"/ws/a.txt\": directory has more than 10000 entries",
        "Error: cannot modify \"/ws/a.txt\": directory has more than 10000 entries"),
    (C::TooLarge, &[],
        "Error: cannot read \"/ws/a.txt\": the file is too large",
        "Error: cannot modify \"/ws/a.txt\": the file is too large"),
    (C::NoSpace, &[("step", "write_temp"), ("errno", "28")],
        "Error: cannot read \"/ws/a.txt\": cannot write temporary file: No space left on device (os error 28)",
        "Error: cannot modify \"/ws/a.txt\": cannot write temporary file: No space left on device (os error 28)"),
    (C::NoSpace, &[],
        "Error: cannot read \"/ws/a.txt\": no space left on the file system",
        "Error: cannot modify \"/ws/a.txt\": no space left on the file system"),
    (C::InvalidPath, &[("reason", "too_long"), ("limit", "4096")],
        "Error: cannot read \"/ws/a.txt\": path is longer than 4096 bytes",
        "Error: cannot modify \"/ws/a.txt\": path is longer than 4096 bytes"),
    (C::InvalidPath, &[("reason", "component_too_long"), ("limit", "255")],
        "Error: cannot read \"/ws/a.txt\": a path component is longer than 255 bytes",
        "Error: cannot modify \"/ws/a.txt\": a path component is longer than 255 bytes"),
    (C::InvalidPath, &[],
        "Error: cannot read \"/ws/a.txt\": invalid path",
        "Error: cannot modify \"/ws/a.txt\": invalid path"),
    (C::NotEmpty, &[],
        "Error: cannot read \"/ws/a.txt\": directory is not empty",
        "Error: cannot modify \"/ws/a.txt\": directory is not empty"),
    (C::RateLimited, &[("retry_after_ms", "250"), ("budget", "calls_per_second")],
        "Error: cannot read \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 250 ms, then retry",
        "Error: cannot modify \"/ws/a.txt\": the file service is limiting this client's calls (nothing was done) — wait 250 ms, then retry"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "unknown")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: unknown or already spent escalation [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: unknown or already spent escalation [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "not_approved")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation was not approved [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation was not approved [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "expired")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation expired [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation expired [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "wrong_caller")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation belongs to another session or client [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation belongs to another session or client [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "wrong_mode")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation approved another mode [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation approved another mode [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "bad_signature")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation ticket is not signed by the configured approver [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation ticket is not signed by the configured approver [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "mismatch")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: this call differs from every call the approver signed [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: this call differs from every call the approver signed [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "reads_spent")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: the escalation's reads of the files it changes are used up [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: the escalation's reads of the files it changes are used up [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "unbound_change")],
        "Error: cannot read \"/ws/a.txt\": an escalated write or edit must carry its change, so the approver sees what it approves [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": an escalated write or edit must carry its change, so the approver sees what it approves [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "hard_linked")],
        "Error: cannot read \"/ws/a.txt\": the file has more than one hard link, and its requester may not access it itself [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": the file has more than one hard link, and its requester may not access it itself [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "not_approved_object")],
        "Error: cannot read \"/ws/a.txt\": the path now leads to another file or directory than the one the approver was shown; a new approval is needed [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": the path now leads to another file or directory than the one the approver was shown; a new approval is needed [sandbox: file access denied under workspace-write mode]"),
    (C::SandboxDenied, &[("reason", "ticket_refused"), ("ticket", "new")],
        "Error: cannot read \"/ws/a.txt\": escalation ticket refused: it does not hold for this call [sandbox: file access denied under workspace-write mode]",
        "Error: cannot modify \"/ws/a.txt\": escalation ticket refused: it does not hold for this call [sandbox: file access denied under workspace-write mode]"),
    (C::IoError, &[("step", "walk"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot resolve path: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot resolve path: Input/output error (os error 5)"),
    (C::IoError, &[("step", "make_dir"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot create parent directory: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot create parent directory: Input/output error (os error 5)"),
    (C::IoError, &[("step", "open"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot open file: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot open file: Input/output error (os error 5)"),
    (C::IoError, &[("step", "metadata"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot read file metadata: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot read file metadata: Input/output error (os error 5)"),
    (C::IoError, &[("step", "read"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot read file: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot read file: Input/output error (os error 5)"),
    (C::IoError, &[("step", "list"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot list directory: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot list directory: Input/output error (os error 5)"),
    (C::IoError, &[("step", "create_temp"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot create temporary file: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot create temporary file: Input/output error (os error 5)"),
    (C::IoError, &[("step", "write_temp"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot write temporary file: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot write temporary file: Input/output error (os error 5)"),
    (C::IoError, &[("step", "set_mode"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot set file mode: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot set file mode: Input/output error (os error 5)"),
    (C::IoError, &[("step", "sync"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot sync: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot sync: Input/output error (os error 5)"),
    (C::IoError, &[("step", "rename"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot rename into place: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot rename into place: Input/output error (os error 5)"),
    (C::IoError, &[("step", "remove"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot remove file: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot remove file: Input/output error (os error 5)"),
    (C::IoError, &[("step", "keep_owner"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot keep the replaced file's owner: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot keep the replaced file's owner: Input/output error (os error 5)"),
    (C::IoError, &[("step", "keep_attributes"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": cannot keep the replaced file's ACL or extended attributes: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": cannot keep the replaced file's ACL or extended attributes: Input/output error (os error 5)"),
    (C::IoError, &[("step", "a step from a newer daemon"), ("errno", "5")],
        "Error: cannot read \"/ws/a.txt\": an I/O step failed: Input/output error (os error 5)",
        "Error: cannot modify \"/ws/a.txt\": an I/O step failed: Input/output error (os error 5)"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "send_failed")],
        "Error: cannot read \"/ws/a.txt\": the worker could not take the call; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the worker could not take the call; the outcome is unknown"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "lock_wait")],
        "Error: cannot read \"/ws/a.txt\": the worker went away while waiting for a lock; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the worker went away while waiting for a lock; the outcome is unknown"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "unexpected_message")],
        "Error: cannot read \"/ws/a.txt\": the worker sent an unexpected message; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the worker sent an unexpected message; the outcome is unknown"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "deadline")],
        "Error: cannot read \"/ws/a.txt\": the call exceeded its deadline and its worker was killed; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the call exceeded its deadline and its worker was killed; the outcome is unknown"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "died")],
        "Error: cannot read \"/ws/a.txt\": the worker died; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the worker died; the outcome is unknown"),
    (C::Aborted, &[("reason", "worker_lost"), ("lost", "new")],
        "Error: cannot read \"/ws/a.txt\": the call's worker was lost; the outcome is unknown",
        "Error: cannot modify \"/ws/a.txt\": the call's worker was lost; the outcome is unknown"),
    (C::InvalidPath, &[("reason", "empty")],
        "Error: cannot read \"/ws/a.txt\": path is empty",
        "Error: cannot modify \"/ws/a.txt\": path is empty"),
    (C::InvalidPath, &[("reason", "too_long")],
        "Error: cannot read \"/ws/a.txt\": path is too long",
        "Error: cannot modify \"/ws/a.txt\": path is too long"),
    (C::InvalidPath, &[("reason", "nul")],
        "Error: cannot read \"/ws/a.txt\": path contains a NUL byte",
        "Error: cannot modify \"/ws/a.txt\": path contains a NUL byte"),
    (C::InvalidPath, &[("reason", "drive_letter")],
        "Error: cannot read \"/ws/a.txt\": path has a drive-letter prefix (a Windows path)",
        "Error: cannot modify \"/ws/a.txt\": path has a drive-letter prefix (a Windows path)"),
    (C::InvalidPath, &[("reason", "relative")],
        "Error: cannot read \"/ws/a.txt\": path must be absolute",
        "Error: cannot modify \"/ws/a.txt\": path must be absolute"),
    (C::InvalidPath, &[("reason", "component_too_long")],
        "Error: cannot read \"/ws/a.txt\": a path component is too long",
        "Error: cannot modify \"/ws/a.txt\": a path component is too long"),
    (C::InvalidPath, &[("reason", "not_utf8")],
        "Error: cannot read \"/ws/a.txt\": path is not valid UTF-8",
        "Error: cannot modify \"/ws/a.txt\": path is not valid UTF-8"),
    (C::InvalidPath, &[("reason", "backslash")],
        "Error: cannot read \"/ws/a.txt\": path contains a backslash (a Windows separator)",
        "Error: cannot modify \"/ws/a.txt\": path contains a backslash (a Windows separator)"),
    (C::InvalidPath, &[("reason", "bad_escape")],
        "Error: cannot read \"/ws/a.txt\": path has an escape that is not a character",
        "Error: cannot modify \"/ws/a.txt\": path has an escape that is not a character"),
    (C::InvalidPath, &[("reason", "escaped_separator")],
        "Error: cannot read \"/ws/a.txt\": an escape in the path stands for '/' or NUL",
        "Error: cannot modify \"/ws/a.txt\": an escape in the path stands for '/' or NUL"),
    (C::InvalidPath, &[("reason", "trailing_slash")],
        "Error: cannot read \"/ws/a.txt\": path ends with a slash but does not name a directory",
        "Error: cannot modify \"/ws/a.txt\": path ends with a slash but does not name a directory"),
    (C::InvalidPath, &[("reason", "too_many_links")],
        "Error: cannot read \"/ws/a.txt\": too many levels of symbolic links",
        "Error: cannot modify \"/ws/a.txt\": too many levels of symbolic links"),
    (C::ReadDenied, &[],
        "Error: cannot read \"/ws/a.txt\": denied by the daemon's read_denied patterns (no mode or approval grants access to it; do not retry with sandbox_permissions)",
        "Error: cannot modify \"/ws/a.txt\": denied by the daemon's read_denied patterns (no mode or approval grants access to it; do not retry with sandbox_permissions)"),
    (C::ReadDenied, &[("reason", "read_denied"), ("pattern", "**/*.txt"), ("name", "/ws/a.txt"), ("escalation", "never")],
        "Error: cannot read \"/ws/a.txt\": denied by the daemon's read_denied pattern \"**/*.txt\" (no mode or approval grants access to it; do not retry with sandbox_permissions)",
        "Error: cannot modify \"/ws/a.txt\": denied by the daemon's read_denied pattern \"**/*.txt\" (no mode or approval grants access to it; do not retry with sandbox_permissions)"),
    // Through a link, or below a denied directory: what matched is named.
    (C::ReadDenied, &[("reason", "read_denied"), ("pattern", "**/.ssh"), ("name", "/home/u/.ssh"), ("escalation", "never")],
        "Error: cannot read \"/ws/a.txt\": \"/home/u/.ssh\" is denied by the daemon's read_denied pattern \"**/.ssh\" (no mode or approval grants access to it; do not retry with sandbox_permissions)",
        "Error: cannot modify \"/ws/a.txt\": \"/home/u/.ssh\" is denied by the daemon's read_denied pattern \"**/.ssh\" (no mode or approval grants access to it; do not retry with sandbox_permissions)"),
    (C::InvalidPath, &[("reason", "new")],
        "Error: cannot read \"/ws/a.txt\": invalid path",
        "Error: cannot modify \"/ws/a.txt\": invalid path"),
    ]
};

/// The daemon's status message: a log label that must never reach the model.
const LABEL: &str = "DAEMON-LABEL";

fn sent(code: ErrorCode, meta: &[(&str, &str)]) -> DaemonError {
    let mut wire = WireError::new(code, "/ws/a.txt", LABEL);
    if !meta.iter().any(|(k, _)| *k == "mode") {
        wire = wire.with("mode", "workspace-write");
    }
    for (key, value) in meta {
        wire = wire.with(key, *value);
    }
    DaemonError::Refused(wire)
}

/// A mode whose workers are not up is no fence's refusal: no sandbox marker (which would invite
/// an escalation), the code `UNAVAILABLE`.
#[test]
fn an_unserved_mode_is_unavailable_not_a_sandbox_denial() {
    let error = sent(ErrorCode::SandboxDenied, &[("reason", "mode_unserved")]);
    for (got, verb) in [
        (ToolError::from_read("/ws/a.txt", &error), "read"),
        (ToolError::from_mutation("/ws/a.txt", &error), "modify"),
    ] {
        assert_eq!(
            got.text(),
            format!(
                "Error: cannot {verb} \"/ws/a.txt\": the file service cannot serve workspace-write mode now (nothing \
                 was done); ask the user to check the daemon's log"
            )
        );
        assert_eq!(got.code, "UNAVAILABLE");
    }
}

#[test]
fn every_failure_renders_as_its_snapshot() {
    for &(code, meta, read, modify) in SNAPSHOTS {
        let error = sent(code, meta);
        for (got, want) in [
            (ToolError::from_read("/ws/a.txt", &error), read),
            (ToolError::from_mutation("/ws/a.txt", &error), modify),
        ] {
            assert_eq!(got.text(), want, "{code:?} {meta:?}");
            assert_eq!(got.code, code.as_str(), "{code:?} {meta:?}");
            assert!(!got.text().contains(LABEL), "the daemon's label reached the model: {}", got.text());
            assert_eq!(
                got.text().matches("file access denied").count(),
                usize::from(code == ErrorCode::SandboxDenied)
            );
        }
    }
}

#[test]
fn every_code_has_a_snapshot() {
    for code in ErrorCode::ALL {
        assert!(
            SNAPSHOTS.iter().any(|(c, meta, _, _)| c == code && meta.is_empty()),
            "{code:?} has no bare row"
        );
    }
}
