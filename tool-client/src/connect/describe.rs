//! Why a daemon could not be reached, in words that name the problem and the fix.

use super::Endpoint;

/// An error and its sources, outermost first, without repeating a message a wrapper already
/// carries ("transport error: client error (Connect): invalid peer certificate: UnknownIssuer").
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// A status as one line: its code and message, without tonic's metadata dump.
pub(super) fn status_text(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// Why a socket to `endpoint` could not be opened, in words that name the problem: a missing
/// socket, a socket nobody listens on, one this user may not open (with its owner and group),
/// a refused TCP port.
pub fn describe_connect_failure(endpoint: &Endpoint, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match (endpoint, error.kind()) {
        (Endpoint::Unix(path), ErrorKind::NotFound) => format!(
            "no daemon at {endpoint}: the socket {} does not exist (is fsd running with --listen {endpoint}?)",
            path.display()
        ),
        (Endpoint::Unix(path), ErrorKind::ConnectionRefused) => format!(
            "no daemon at {endpoint}: nothing listens on the socket {} (the daemon stopped)",
            path.display()
        ),
        (Endpoint::Unix(path), ErrorKind::PermissionDenied) => permission_denied(endpoint, path),
        (Endpoint::Tcp(_) | Endpoint::Web(_), ErrorKind::ConnectionRefused) => {
            format!("no daemon at {endpoint}: the connection was refused (nothing listens on that port)")
        }
        _ => format!("cannot connect to {endpoint}: {error}"),
    }
}

/// Permission denied on a Unix socket: whose socket it is, and who is asking.
fn permission_denied(endpoint: &Endpoint, path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self").map(|m| (m.uid(), m.gid())).ok();
    let who = match me {
        Some((uid, _)) => format!("this user ({})", name_of("/etc/passwd", uid, "uid")),
        None => "this user".to_owned(),
    };
    match std::fs::metadata(path) {
        Ok(meta) => format!(
            "permission denied on the socket of {endpoint}: it belongs to {} and group {} (mode {:04o}) and \
             {who} is neither; add this user to the group, or run as the owner",
            name_of("/etc/passwd", meta.uid(), "uid"),
            name_of("/etc/group", meta.gid(), "gid"),
            meta.mode() & 0o7777,
        ),
        Err(_) => format!(
            "permission denied on the socket of {endpoint}: {who} may not search a directory above {}",
            path.display()
        ),
    }
}

/// `alice (uid 1000)` from a passwd- or group-format file; the number alone when not listed.
fn name_of(file: &str, id: u32, kind: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let name = text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let listed: u32 = fields.nth(1)?.parse().ok()?;
        (listed == id).then(|| name.to_owned())
    });
    match name {
        Some(name) => format!("{name} ({kind} {id})"),
        None => format!("{kind} {id}"),
    }
}
