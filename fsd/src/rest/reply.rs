//! What the REST face answers: JSON bodies, the spec's `{code, message}` errors mapped from the
//! daemon's codes, directory listings and RFC 3339 times. Pure functions; no I/O.

use bytes::Bytes;
use fsd_proto::{ErrorCode, WireError};
use hyper::{Response, StatusCode, header};
use serde::Serialize;
use tonic::body::Body;

use crate::op::{DirEntry, FileType};

/// One error of the REST face: the HTTP status and the spec's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `Retry-After` of a refusal over budget, in whole seconds.
    pub retry_after: Option<u64>,
}

impl RestError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> RestError {
        RestError { status, code, message: message.into(), retry_after: None }
    }

    pub fn invalid(message: impl Into<String>) -> RestError {
        RestError::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    /// A daemon failure as the reference runtime's clients expect it. Messages are the daemon's
    /// reasons: they never carry file content.
    pub fn from_wire(wire: &WireError) -> RestError {
        let (status, code) = status_of(wire.code);
        let mut error = RestError::new(status, code, wire.message.clone());
        let retry_ms = wire.get("retry_after_ms").and_then(|ms| ms.parse::<u64>().ok());
        error.retry_after = retry_ms.map(|ms| ms.div_ceil(1000).max(1));
        error
    }

    pub fn into_response(self) -> Response<Body> {
        #[derive(Serialize)]
        struct Error<'a> {
            code: &'a str,
            message: &'a str,
        }
        let mut response = json(self.status, &Error { code: self.code, message: &self.message });
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

/// The HTTP status and spec code of a daemon code.
pub fn status_of(code: ErrorCode) -> (StatusCode, &'static str) {
    match code {
        ErrorCode::NotFound | ErrorCode::NotDirectory => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        ErrorCode::PermissionDenied | ErrorCode::SandboxDenied => {
            (StatusCode::FORBIDDEN, "PERMISSION_DENIED")
        }
        ErrorCode::InvalidPath
        | ErrorCode::NotRegularFile
        | ErrorCode::NotText
        | ErrorCode::EditNotFound
        | ErrorCode::AmbiguousEdit => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
        ErrorCode::StaleVersion | ErrorCode::NotObserved => {
            (StatusCode::PRECONDITION_FAILED, "PRECONDITION_FAILED")
        }
        ErrorCode::NotEmpty => (StatusCode::CONFLICT, "CONFLICT"),
        ErrorCode::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "TOO_LARGE"),
        ErrorCode::NoSpace => (StatusCode::INSUFFICIENT_STORAGE, "NO_SPACE"),
        ErrorCode::Aborted => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        ErrorCode::IoError => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        ErrorCode::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "FS_RATE_LIMITED"),
        // Its own code, not PERMISSION_DENIED: no credential or mode would change the answer.
        ErrorCode::ReadDenied => (StatusCode::FORBIDDEN, "FS_READ_DENIED"),
    }
}

pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(Body::new(http_body_util::Full::new(Bytes::from(bytes))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

/// `/metrics`: the daemon's Prometheus metrics in the text format (`crate::metrics`).
pub fn metrics() -> Response<Body> {
    crate::metrics::response()
}

pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

/// `FileEntry` of the spec.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub modified_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DirectoryListing {
    pub path: String,
    pub entries: Vec<FileEntry>,
}

/// A listing entry as the spec has it: files and directories only. A link was already resolved
/// inside the fence by the worker; one that leads outside (or nowhere) is "other" and skipped.
pub fn file_entry(entry: DirEntry) -> Option<FileEntry> {
    let kind = match entry.file_type {
        FileType::File => "file",
        FileType::Directory => "directory",
        FileType::Other | FileType::Symlink => return None,
    };
    Some(FileEntry {
        name: entry.name,
        size: entry.size.unwrap_or(0),
        kind,
        modified_at: rfc3339(entry.modified.unwrap_or((0, 0))),
        mode: entry.mode.map(|m| format!("{:04o}", m & 0o7777)),
    })
}

/// UTC RFC 3339 with nanoseconds when there are any: `2026-12-01T09:04:00.5Z`.
pub fn rfc3339((secs, nanos): (i64, u32)) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let fraction = if nanos == 0 {
        String::new()
    } else {
        let digits = format!("{nanos:09}");
        format!(".{}", digits.trim_end_matches('0'))
    };
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}{fraction}Z")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The mode query of a PUT: `^0[0-7]{3}$` exactly.
pub fn parse_mode(text: &str) -> Option<u32> {
    let b = text.as_bytes();
    if b.len() != 4 || b[0] != b'0' || !b[1..].iter().all(|c| (b'0'..=b'7').contains(c)) {
        return None;
    }
    u32::from_str_radix(&text[1..], 8).ok()
}

/// The entity tag of an `If-Match` value (one tag; weak tags compare as their opaque part).
pub fn entity_tag(value: &str) -> Option<&str> {
    let value = value.trim();
    let value = value.strip_prefix("W/").unwrap_or(value);
    value.strip_prefix('"')?.strip_suffix('"').filter(|v| !v.contains('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        let check = |t: (i64, u32), want: &str| assert_eq!(rfc3339(t), want);
        check((0, 0), "1970-01-01T00:00:00Z");
        check((1_796_115_840, 0), "2026-12-01T09:04:00Z");
        check((951_782_400, 500_000_000), "2000-02-29T00:00:00.5Z");
        check((-1, 0), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn modes_match_the_spec_pattern() {
        let check = |text: &str, want: Option<u32>| assert_eq!(parse_mode(text), want, "{text}");
        check("0644", Some(0o644));
        check("0755", Some(0o755));
        check("0000", Some(0));
        check("644", None);
        check("0648", None);
        check("04755", None);
        check("1644", None);
        check("+644", None);
        check("", None);
    }

    #[test]
    fn entity_tags_are_unquoted() {
        let check = |text: &str, want: Option<&str>| assert_eq!(entity_tag(text), want, "{text}");
        check("\"v1.a.b\"", Some("v1.a.b"));
        check(" W/\"v1.a\" ", Some("v1.a"));
        check("v1.a", None);
        check("\"a\", \"b\"", None);
    }

    #[test]
    fn codes_map_to_the_reference_statuses() {
        let check = |code: ErrorCode, status: u16, name: &str| {
            let (s, n) = status_of(code);
            assert_eq!((s.as_u16(), n), (status, name), "{code}");
        };
        check(ErrorCode::NotFound, 404, "NOT_FOUND");
        check(ErrorCode::SandboxDenied, 403, "PERMISSION_DENIED");
        check(ErrorCode::InvalidPath, 400, "INVALID_ARGUMENT");
        check(ErrorCode::NotRegularFile, 400, "INVALID_ARGUMENT");
        check(ErrorCode::NotEmpty, 409, "CONFLICT");
        check(ErrorCode::StaleVersion, 412, "PRECONDITION_FAILED");
        check(ErrorCode::NotObserved, 412, "PRECONDITION_FAILED");
        check(ErrorCode::TooLarge, 413, "TOO_LARGE");
        check(ErrorCode::NoSpace, 507, "NO_SPACE");
        check(ErrorCode::Aborted, 503, "UNAVAILABLE");
        check(ErrorCode::IoError, 500, "INTERNAL");
        check(ErrorCode::RateLimited, 429, "FS_RATE_LIMITED");
        check(ErrorCode::ReadDenied, 403, "FS_READ_DENIED");
    }
}
