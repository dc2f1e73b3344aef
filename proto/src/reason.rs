//! The words an fsd error's metadata carries beside its code, one enum per key: why it failed
//! (`reason`), why an escalation ticket did not hold (`ticket`), which I/O step failed (`step`),
//! how a call's worker was lost (`lost`). The daemon sets them only through these types
//! ([`WireError::with_reason`](crate::WireError::with_reason) and its siblings) and clients read
//! them only through them ([`WireError::reason`](crate::WireError::reason), ...).
//!
//! A daemon newer than its client may send a word the client does not know. The accessors answer
//! `None` for it as for an absent one, and the client words the failure from its code alone: the
//! documented fallback that keeps a fleet of mixed versions working (a new word never turns into
//! a wrong one). Inside one daemon there is no such fallback: its processes are one build, and an
//! unknown word on an IPC frame is a decode error ([`crate::WireError`]'s serde form).

/// One metadata key's words: the key, and each word's wire spelling.
pub trait Word: Copy + Sized + 'static {
    /// The metadata key the word travels under.
    const KEY: &'static str;
    /// Every word, in declaration order.
    const ALL: &'static [Self];
    /// The word's wire spelling.
    fn as_str(self) -> &'static str;
    /// A wire spelling's word; `None` for one this build does not know.
    fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|w| w.as_str() == text)
    }
}

macro_rules! words {
    ($(#[$doc:meta])* $name:ident => $key:literal { $($(#[$vdoc:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name { $($(#[$vdoc])* $variant,)* }

        impl $name {
            /// The word's wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// A wire spelling's word; `None` for one this build does not know.
            pub fn parse(text: &str) -> Option<$name> {
                <$name as Word>::parse(text)
            }
        }

        impl Word for $name {
            const KEY: &'static str = $key;
            const ALL: &'static [$name] = &[$($name::$variant,)*];
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// Why a call failed: the `reason` metadata, read together with the code.
    Reason => "reason" {
        // FS_STALE_VERSION: why a guard no longer holds.
        /// The file's bytes are not the ones the guard names.
        Changed => "changed",
        /// The guarded file is gone.
        Gone => "gone",
        /// The name now holds a symbolic link.
        Symlink => "symlink",
        /// The path now resolves to another target key.
        OtherFile => "other_file",
        /// Replaced by someone else between the check and the rename (the replace was undone).
        ChangedWhileWriting => "changed_while_writing",
        /// Replaced by someone else between a removal's check and its move of the name aside.
        ChangedWhileRemoving => "changed_while_removing",
        /// A move's destination vanished right after the move.
        DestinationGone => "destination_gone",
        /// The file was truncated, grew or was rewritten while it was read.
        ChangedWhileRead => "changed_while_read",
        // FS_INVALID_PATH: what is wrong with a request path (or a request body).
        Empty => "empty",
        /// Longer than the daemon's limit (metadata `limit`).
        TooLong => "too_long",
        Nul => "nul",
        DriveLetter => "drive_letter",
        Relative => "relative",
        /// A component longer than the daemon's limit (metadata `limit`).
        ComponentTooLong => "component_too_long",
        NotUtf8 => "not_utf8",
        Backslash => "backslash",
        BadEscape => "bad_escape",
        EscapedSeparator => "escaped_separator",
        TrailingSlash => "trailing_slash",
        TooManyLinks => "too_many_links",
        /// A request body with a string field that is not UTF-8 (metadata `field`).
        InvalidUtf8 => "invalid_utf8",
        /// A request body the decoder refused otherwise (metadata `field`).
        Malformed => "malformed",
        // FS_SANDBOX_DENIED: why the fence refused (the mode travels as `mode`).
        ReadOnly => "read_only",
        NotWritableRoot => "not_writable_root",
        /// A path component is a protected name (metadata `name`).
        Protected => "protected",
        SameFile => "same_file",
        /// A transaction that names one target in two of its operations.
        RepeatedTarget => "repeated_target",
        /// A transaction on a daemon configured without a `state_dir` for its intent records.
        NoStateDir => "no_state_dir",
        /// The daemon keeps no change record (no `state_dir`, or `change_record = false`).
        NoChangeRecord => "no_change_record",
        /// A rewind to a point whose later history the record's bounds dropped.
        HistoryDropped => "history_dropped",
        /// A git directory, or the piece that would make one (metadata `name`, `entry`).
        GitDirectory => "git_directory",
        /// A mount below the root not in `allow_submounts` (metadata `name`).
        Submount => "submount",
        /// A removal of a root itself.
        Root => "root",
        /// A tree removal that would cross into another mount (metadata `name`).
        Mount => "mount",
        OutsideRoots => "outside_roots",
        /// The call's mode has no workers now.
        ModeUnserved => "mode_unserved",
        // FS_SANDBOX_DENIED: why a wider mode was refused (`requested`, `max_mode`, `ticket`).
        AboveMax => "above_max",
        EscalationDisabled => "escalation_disabled",
        NeedsApproval => "needs_approval",
        NeedsTicket => "needs_ticket",
        NoSignedEscalation => "no_signed_escalation",
        NoMode => "no_mode",
        NotWider => "not_wider",
        /// The ticket does not hold for this call (metadata `ticket`).
        TicketRefused => "ticket_refused",
        /// An escalated write or edit that does not carry its change.
        UnboundChange => "unbound_change",
        /// An approved call whose walk met another object than the approver was shown.
        NotApprovedObject => "not_approved_object",
        /// A change at an escalated mode that carries no valid approver signature.
        UnsignedEscalation => "unsigned_escalation",
        /// An escalation of a hard-linked file beyond its requester's own authority.
        HardLinked => "hard_linked",
        // FS_PERMISSION_DENIED.
        /// A listing or rewind of another identity's changes by one `change_operators` does
        /// not name.
        OthersChanges => "others_changes",
        // FS_READ_DENIED.
        /// A path the daemon's `read_denied` patterns name (metadata `pattern`, `name`,
        /// `escalation = never`).
        ReadDenied => "read_denied",
        // FS_EDIT_NOT_FOUND: a transaction's patch whose hunk (metadata `hunk_index`) does not
        // match the file's current text.
        /// The hunk's `@@` context line was not found.
        HunkContext => "hunk_context",
        /// The hunk's old lines were not found.
        HunkLines => "hunk_lines",
        // FS_TOO_LARGE.
        /// A listing over the entry limit (metadata `limit`).
        TooManyEntries => "too_many_entries",
        // FS_ABORTED.
        Cancelled => "cancelled",
        /// An upload that ended before its last byte.
        Truncated => "truncated",
        /// An upload whose body came slower than the daemon's minimum rate (metadata `limit`).
        UploadTooSlow => "upload_too_slow",
        NoFreeWorker => "no_free_worker",
        /// The call's worker was lost (metadata `lost`); the outcome is unknown.
        WorkerLost => "worker_lost",
        /// A stream nobody read for `limit_ms`.
        StreamIdle => "stream_idle",
        // FS_IO_ERROR.
        /// The mode's workers are stuck in the kernel (metadata `mode`, `abandoned_workers`).
        ModeStuck => "mode_stuck",
        UnexpectedReply => "unexpected_reply",
        /// The daemon could not run the call (sent by older daemons; still read by clients).
        DispatchFailed => "dispatch_failed",
        NoDescriptor => "no_descriptor",
        CheckFailed => "check_failed",
        CheckPoolStopped => "check_pool_stopped",
    }
}

words! {
    /// Why a signed escalation ticket does not hold: the `ticket` metadata of `ticket_refused`.
    TicketRefusal => "ticket" {
        Unknown => "unknown",
        NotApproved => "not_approved",
        Expired => "expired",
        WrongCaller => "wrong_caller",
        WrongMode => "wrong_mode",
        BadSignature => "bad_signature",
        Mismatch => "mismatch",
        ReadsSpent => "reads_spent",
    }
}

words! {
    /// Which step of a call an I/O failure happened in: the `step` metadata (with `errno`).
    Step => "step" {
        Walk => "walk",
        MakeDir => "make_dir",
        Open => "open",
        Metadata => "metadata",
        Read => "read",
        List => "list",
        CreateTemp => "create_temp",
        WriteTemp => "write_temp",
        SetMode => "set_mode",
        Sync => "sync",
        Rename => "rename",
        Remove => "remove",
        KeepOwner => "keep_owner",
        KeepAttributes => "keep_attributes",
    }
}

words! {
    /// How a call's worker was lost: the `lost` metadata of `worker_lost`.
    WorkerLost => "lost" {
        SendFailed => "send_failed",
        LockWait => "lock_wait",
        UnexpectedMessage => "unexpected_message",
        Deadline => "deadline",
        Died => "died",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<W: Word + PartialEq + std::fmt::Debug>() {
        let mut seen = std::collections::HashSet::new();
        for &word in W::ALL {
            assert!(seen.insert(word.as_str()), "{} spelled twice", word.as_str());
            assert_eq!(W::parse(word.as_str()), Some(word));
        }
        assert_eq!(W::parse("a_word_of_a_newer_daemon"), None);
    }

    #[test]
    fn every_word_has_one_spelling_that_parses_back() {
        round_trips::<Reason>();
        round_trips::<TicketRefusal>();
        round_trips::<Step>();
        round_trips::<WorkerLost>();
    }
}
