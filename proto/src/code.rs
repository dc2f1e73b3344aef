//! Stable error codes and their one encoding on the wire: a gRPC status whose
//! `google.rpc.ErrorInfo` detail carries the code as `reason`, `fsd` as `domain`, and the path.

use std::collections::HashMap;

use tonic_types::{ErrorDetails, StatusExt};

use crate::reason::{Reason, Step, TicketRefusal, Word, WorkerLost};

/// The `ErrorInfo.domain` of every fsd error.
pub const DOMAIN: &str = "fsd";

macro_rules! codes {
    ($($variant:ident => $text:literal, $grpc:ident;)*) => {
        /// A stable, machine-readable failure code. Clients branch on this, never on message text.
        /// Its serde form (fsd's IPC frames) knows only these codes: another is a decode error.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum ErrorCode { $($variant,)* }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code's wire spelling, e.g. `FS_NOT_FOUND`.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $text,)* }
            }

            /// Parses a wire spelling.
            pub fn parse(text: &str) -> Option<ErrorCode> {
                match text { $($text => Some(ErrorCode::$variant),)* _ => None }
            }

            /// The gRPC status code that carries it, so generic gRPC clients still branch sensibly.
            pub fn grpc_code(self) -> tonic::Code {
                match self { $(ErrorCode::$variant => tonic::Code::$grpc,)* }
            }
        }
    };
}

codes! {
    NotFound => "FS_NOT_FOUND", NotFound;
    NotDirectory => "FS_NOT_DIRECTORY", FailedPrecondition;
    NotText => "FS_NOT_TEXT", FailedPrecondition;
    NotRegularFile => "FS_NOT_REGULAR_FILE", FailedPrecondition;
    PermissionDenied => "FS_PERMISSION_DENIED", PermissionDenied;
    SandboxDenied => "FS_SANDBOX_DENIED", PermissionDenied;
    IoError => "FS_IO_ERROR", Internal;
    StaleVersion => "FS_STALE_VERSION", Aborted;
    NotObserved => "FS_NOT_OBSERVED", FailedPrecondition;
    AmbiguousEdit => "FS_AMBIGUOUS_EDIT", FailedPrecondition;
    EditNotFound => "FS_EDIT_NOT_FOUND", FailedPrecondition;
    Aborted => "FS_ABORTED", Cancelled;
    TooLarge => "FS_TOO_LARGE", ResourceExhausted;
    NoSpace => "FS_NO_SPACE", ResourceExhausted;
    InvalidPath => "FS_INVALID_PATH", InvalidArgument;
    NotEmpty => "FS_NOT_EMPTY", FailedPrecondition;
    RateLimited => "FS_RATE_LIMITED", ResourceExhausted;
    // A path the daemon's `read_denied` patterns name: refused at every mode, never escalated.
    ReadDenied => "FS_READ_DENIED", PermissionDenied;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decoded fsd error: what crosses the wire, independent of tonic. Its serde form (fsd's IPC
/// frames) carries the code and the metadata's words typed ([`Frame`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "Frame", try_from = "Frame")]
pub struct WireError {
    pub code: ErrorCode,
    /// A human-readable reason without the path repeated in a parseable form.
    pub message: String,
    /// The path the daemon was working on (display form).
    pub path: String,
    /// Further metadata: `target_key`, `size`, `mode`, `count`.
    pub metadata: HashMap<String, String>,
}

impl WireError {
    pub fn new(code: ErrorCode, path: impl Into<String>, message: impl Into<String>) -> WireError {
        WireError { code, message: message.into(), path: path.into(), metadata: HashMap::new() }
    }

    #[must_use]
    pub fn with(mut self, key: &str, value: impl Into<String>) -> WireError {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// Sets a word of the metadata (`reason`, `ticket`, `step`, `lost`): the only way the daemon
    /// sets one.
    #[must_use]
    pub fn with_word<W: Word>(self, word: W) -> WireError {
        self.with(W::KEY, word.as_str())
    }

    #[must_use]
    pub fn with_reason(self, reason: Reason) -> WireError {
        self.with_word(reason)
    }

    /// A word of the metadata; `None` when absent or when this build does not know it (a newer
    /// daemon's: see [`crate::reason`] for the fallback).
    pub fn word<W: Word>(&self) -> Option<W> {
        W::parse(self.get(W::KEY)?)
    }

    /// The `reason`; `None` when absent or newer than this build.
    pub fn reason(&self) -> Option<Reason> {
        self.word()
    }

    /// Encodes into a status with an `ErrorInfo` detail. Every error reaches the wire here, so
    /// this is where what it quotes is bounded (see [`bounded`]).
    pub fn into_status(self) -> tonic::Status {
        let (message, metadata) = bounded(self.message, self.path, self.metadata);
        let details = ErrorDetails::with_error_info(self.code.as_str(), DOMAIN, metadata);
        tonic::Status::with_error_details(self.code.grpc_code(), message, details)
    }

    /// Decodes a status; `None` when it carries no fsd `ErrorInfo` (a transport failure, say).
    pub fn from_status(status: &tonic::Status) -> Option<WireError> {
        let info = status.get_details_error_info()?;
        if info.domain != DOMAIN {
            return None;
        }
        let code = ErrorCode::parse(&info.reason)?;
        let mut metadata = info.metadata;
        let path = metadata.remove("path").unwrap_or_default();
        Some(WireError { code, message: status.message().to_owned(), path, metadata })
    }

    /// Whether `status` is an fsd error whose code this build does not know: a daemon newer than
    /// this client refused the call ([`WireError::from_status`] does not decode it).
    pub fn newer_code(status: &tonic::Status) -> bool {
        status
            .get_details_error_info()
            .is_some_and(|info| info.domain == DOMAIN && ErrorCode::parse(&info.reason).is_none())
    }
}

/// The longest path, name or other quoted value an error carries, in bytes (then cut, `...`).
pub const QUOTE_CAP: usize = 1024;
/// The longest message (reasons are short; only a bug would make one long).
const MESSAGE_CAP: usize = 256;
/// The longest target key an error carries whole. A longer one is left out, never cut: a cut
/// key could equal another file's key, and the client records observations under it.
const KEY_CAP: usize = 2048;

/// An error travels in the reply's trailers (`grpc-message`, percent-encoded, and the base64
/// `grpc-status-details-bin`), which clients bound: hyper's HTTP/2 client refuses header lists
/// over 16 KiB, gRPC C-core starts refusing over 8 KiB. A request path can be as long as the
/// message cap, and quoted whole it turned a refusal into a protocol error. Bounded as above,
/// the trailers stay under 8 KiB whatever the request held.
fn bounded(
    message: String,
    path: String,
    mut metadata: HashMap<String, String>,
) -> (String, HashMap<String, String>) {
    metadata.insert("path".to_owned(), path);
    if metadata.get("target_key").is_some_and(|key| key.len() > KEY_CAP) {
        metadata.remove("target_key");
    }
    for (key, value) in &mut metadata {
        if key != "target_key" {
            cut(value, QUOTE_CAP);
        }
    }
    let mut message = message;
    cut(&mut message, MESSAGE_CAP);
    (message, metadata)
}

/// Cuts `text` to at most `cap` bytes on a character boundary, marking the cut with `...`.
fn cut(text: &mut String, cap: usize) {
    if text.len() > cap {
        let mut at = cap;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str("...");
    }
}

/// A [`WireError`] as serde encodes it: the code and each word typed, the other metadata sorted.
/// A value this build does not know is a decode error: inside one daemon both ends are one
/// build, so an unknown value is a bug to refuse, never a code or reason to guess.
#[derive(serde::Serialize, serde::Deserialize)]
struct Frame {
    code: ErrorCode,
    message: String,
    path: String,
    reason: Option<Reason>,
    ticket: Option<TicketRefusal>,
    step: Option<Step>,
    lost: Option<WorkerLost>,
    /// The rest of the metadata; a word key here is a word the encoder did not know.
    metadata: Vec<(String, String)>,
}

/// Takes the word of `W` out of `metadata` when it is one this build knows.
fn take<W: Word>(metadata: &mut HashMap<String, String>) -> Option<W> {
    let word = W::parse(metadata.get(W::KEY)?)?;
    metadata.remove(W::KEY);
    Some(word)
}

impl From<WireError> for Frame {
    fn from(wire: WireError) -> Frame {
        let mut metadata = wire.metadata;
        let (reason, ticket, step, lost) =
            (take(&mut metadata), take(&mut metadata), take(&mut metadata), take(&mut metadata));
        let mut rest: Vec<(String, String)> = metadata.into_iter().collect();
        rest.sort();
        Frame {
            code: wire.code,
            message: wire.message,
            path: wire.path,
            reason,
            ticket,
            step,
            lost,
            metadata: rest,
        }
    }
}

impl TryFrom<Frame> for WireError {
    type Error = String;

    fn try_from(frame: Frame) -> Result<WireError, String> {
        let words = [Reason::KEY, TicketRefusal::KEY, Step::KEY, WorkerLost::KEY];
        if let Some((key, value)) = frame.metadata.iter().find(|(key, _)| words.contains(&key.as_str())) {
            return Err(format!("unknown {key} {value:?}"));
        }
        let mut wire = WireError {
            code: frame.code,
            message: frame.message,
            path: frame.path,
            metadata: HashMap::new(),
        };
        wire.metadata.extend(frame.metadata);
        let mut put = |key: &str, value: Option<&'static str>| {
            if let Some(value) = value {
                wire.metadata.insert(key.to_owned(), value.to_owned());
            }
        };
        put(Reason::KEY, frame.reason.map(Word::as_str));
        put(TicketRefusal::KEY, frame.ticket.map(Word::as_str));
        put(Step::KEY, frame.step.map(Word::as_str));
        put(WorkerLost::KEY, frame.lost.map(Word::as_str));
        Ok(wire)
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for WireError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_a_status() {
        for &code in ErrorCode::ALL {
            let sent = WireError::new(code, "/ws/a.txt", "reason").with("target_key", "r0:a.txt");
            let status = sent.clone().into_status();
            assert_eq!(status.code(), code.grpc_code());
            assert_eq!(WireError::from_status(&status), Some(sent));
        }
    }

    #[test]
    fn what_an_error_quotes_is_bounded() {
        let long = format!("/{}", "\u{e9}".repeat(10_000));
        let key = format!("r0:{}", "k".repeat(KEY_CAP - 3));
        let status = WireError::new(ErrorCode::RateLimited, long.clone(), "m".repeat(5000))
            .with("target_key", format!("{key}x"))
            .with("name", long.clone())
            .with("budget", "calls")
            .into_status();
        let wire = WireError::from_status(&status).unwrap();
        assert!(wire.path.len() <= QUOTE_CAP + 3 && wire.path.ends_with("..."), "{}", wire.path.len());
        assert!(long.starts_with(wire.path.trim_end_matches("...")));
        assert!(wire.get("name").is_some_and(|n| n.len() <= QUOTE_CAP + 3));
        assert_eq!(wire.get("target_key"), None, "a key too long to quote is left out, not cut");
        assert_eq!(wire.get("budget"), Some("calls"));
        assert!(wire.message.len() <= MESSAGE_CAP + 3);
        let details = status.details().len() * 4 / 3 + status.message().len() * 3;
        assert!(details < 8 << 10, "{details} bytes of trailers");

        // Short values and a key that fits pass unchanged.
        let sent =
            WireError::new(ErrorCode::NotFound, "/ws/a.txt", "not found").with("target_key", key.clone());
        assert_eq!(WireError::from_status(&sent.clone().into_status()), Some(sent));
    }

    #[test]
    fn a_status_without_detail_is_not_an_fsd_error() {
        assert_eq!(WireError::from_status(&tonic::Status::unavailable("gone")), None);
        assert!(!WireError::newer_code(&tonic::Status::unavailable("gone")));
    }

    #[test]
    fn a_code_newer_than_this_build_is_told_apart() {
        let details = ErrorDetails::with_error_info("FS_A_NEWER_CODE", DOMAIN, HashMap::new());
        let status = tonic::Status::with_error_details(tonic::Code::PermissionDenied, "label", details);
        assert_eq!(WireError::from_status(&status), None);
        assert!(WireError::newer_code(&status));
        assert!(!WireError::newer_code(&WireError::new(ErrorCode::NotFound, "/a", "m").into_status()));
    }
}
