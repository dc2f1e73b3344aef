//! `/v1/files/{path}`: GET (bytes streamed from a worker's descriptor, or a listing), HEAD, PUT
//! (the body streamed through a pipe into a worker's atomic replace) and DELETE, with ETags that
//! are fsd versions and the If-Match / If-None-Match preconditions.

use bytes::Bytes;
use fsd_proto::{ErrorCode, WireError};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Method, Request, Response, StatusCode, header};
use tonic::body::Body;

use super::Face;
use super::reply::{self, DirectoryListing, RestError};
use crate::dispatch::stream::Replies;
use crate::identity::Identity;
use crate::op::{self, EditGuard, Outcome, WriteGuard};
use crate::service::BodySink;

/// The daemon path a request names: `{path}` percent-decoded and joined to the REST root. `..`
/// and links are left to the worker's walk, which never climbs above the root.
pub(super) fn daemon_path(root: &str, raw: &str) -> Result<String, RestError> {
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| RestError::invalid("path is not valid UTF-8 once decoded"))?;
    if decoded.contains('\0') {
        return Err(RestError::invalid("path contains a NUL byte"));
    }
    let rel = decoded.trim_start_matches('/');
    Ok(if rel.is_empty() { root.to_owned() } else { format!("{}/{rel}", root.trim_end_matches('/')) })
}

/// The ETag of a version: its metadata part, which GET and HEAD know before any byte is read,
/// so a PUT's ETag and the next GET's agree.
fn etag(version: &str) -> header::HeaderValue {
    let (version, _) = fsd_proto::version::split(version);
    header::HeaderValue::from_str(&format!("\"{version}\""))
        .unwrap_or(header::HeaderValue::from_static("\"\""))
}

/// The query parameter `name`, if present.
fn query<'q>(request: &'q Request<Incoming>, name: &str) -> Option<std::borrow::Cow<'q, str>> {
    let query = request.uri().query()?;
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| percent_encoding::percent_decode_str(value).decode_utf8_lossy())
    })
}

/// What the preconditions of a mutation ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Precondition {
    None,
    /// `If-Match: "<version>"`: only at this version.
    Version(String),
    /// `If-None-Match: *`: only if absent.
    Absent,
}

pub(super) fn precondition(headers: &HeaderMap) -> Result<Precondition, RestError> {
    let text = |name| {
        headers.get(name).map(|v| v.to_str().map_err(|_| RestError::invalid("malformed precondition")))
    };
    match (text(header::IF_MATCH).transpose()?, text(header::IF_NONE_MATCH).transpose()?) {
        (Some(_), Some(_)) => Err(RestError::invalid("send If-Match or If-None-Match, not both")),
        (Some(value), None) => match reply::entity_tag(value) {
            Some(tag) => Ok(Precondition::Version(tag.to_owned())),
            None => Err(RestError::invalid("If-Match takes one entity tag (an ETag this daemon sent)")),
        },
        (None, Some(value)) if value.trim() == "*" => Ok(Precondition::Absent),
        (None, Some(_)) => Err(RestError::invalid("If-None-Match supports only *")),
        (None, None) => Ok(Precondition::None),
    }
}

impl Face {
    pub(super) async fn files(
        &self,
        identity: Identity,
        request: Request<Incoming>,
        raw: &str,
    ) -> Response<Body> {
        let path = match daemon_path(&self.root, raw) {
            Ok(path) => path,
            Err(e) => return e.into_response(),
        };
        let result = match *request.method() {
            Method::GET => self.get(identity, &path).await,
            Method::HEAD => self.head(identity, &path).await,
            Method::PUT => self.put(identity, request, path).await,
            Method::DELETE => self.delete(identity, &request, path).await,
            _ => {
                Err(RestError::new(StatusCode::METHOD_NOT_ALLOWED, "INVALID_ARGUMENT", "method not allowed"))
            }
        };
        result.unwrap_or_else(RestError::into_response)
    }

    async fn get(&self, identity: Identity, path: &str) -> Result<Response<Body>, RestError> {
        let refused = match self.service.stream_as(identity.clone(), path, self.chunk).await {
            Ok((header, replies)) => return Ok(stream(header, replies)),
            Err(w) if w.code == ErrorCode::NotRegularFile => w,
            Err(w) => return Err(RestError::from_wire(&w)),
        };
        let listing = op::Request::ListDir { path: path.to_owned() };
        match self.service.call_as(identity, listing).await {
            Ok(Outcome::ListDir { target, entries }) => {
                let entries = entries.into_iter().filter_map(reply::file_entry).collect();
                Ok(reply::json(StatusCode::OK, &DirectoryListing { path: target.display, entries }))
            }
            // Neither a regular file nor a directory (a FIFO, a device): say what the read said.
            Err(w) if w.code == ErrorCode::NotDirectory => Err(RestError::from_wire(&refused)),
            Err(w) => Err(RestError::from_wire(&w)),
            Ok(_) => Err(unexpected()),
        }
    }

    async fn head(&self, identity: Identity, path: &str) -> Result<Response<Body>, RestError> {
        let stat = op::Request::Stat { path: path.to_owned(), no_follow: false };
        match self.service.call_as(identity, stat).await.map_err(|w| RestError::from_wire(&w))? {
            Outcome::Stat { info: None, .. } => Ok(reply::empty(StatusCode::NOT_FOUND)),
            Outcome::Stat { info: Some(info), .. } => {
                let mut response = reply::empty(StatusCode::OK);
                let headers = response.headers_mut();
                headers.insert(header::ETAG, etag(&info.version));
                match info.file_type {
                    op::FileType::File => {
                        let kind = header::HeaderValue::from_static("application/octet-stream");
                        headers.insert(header::CONTENT_TYPE, kind);
                        headers.insert(
                            header::CONTENT_LENGTH,
                            header::HeaderValue::from(info.size.unwrap_or(0)),
                        );
                    }
                    _ => {
                        headers.insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/json"),
                        );
                    }
                }
                Ok(response)
            }
            _ => Err(unexpected()),
        }
    }

    async fn put(
        &self,
        identity: Identity,
        request: Request<Incoming>,
        path: String,
    ) -> Result<Response<Body>, RestError> {
        let mode =
            match query(&request, "mode") {
                None => None,
                Some(text) => Some(reply::parse_mode(&text).ok_or_else(|| {
                    RestError::invalid(format!("mode {text:?} does not match ^0[0-7]{{3}}$"))
                })?),
            };
        let guard = match precondition(request.headers())? {
            Precondition::None => None,
            Precondition::Version(version) => {
                Some(WriteGuard::ReplaceIfVersion { version, target_key: None })
            }
            Precondition::Absent => Some(WriteGuard::CreateIfAbsent),
        };
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(size) = declared
            && size > self.max_upload
        {
            let message = format!("body is {size} bytes, over the limit of {} bytes", self.max_upload);
            return Err(RestError::new(StatusCode::PAYLOAD_TOO_LARGE, "TOO_LARGE", message));
        }
        let boundary = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .filter(|v| v.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
            .map(|v| {
                multer::parse_boundary(v).map_err(|_| RestError::invalid("multipart body without a boundary"))
            })
            .transpose()?;
        let write = op::Request::WriteBytes { path, mode, guard };
        let body = request.into_body();
        let (fed, result) = match boundary {
            None => self.service.write_stream_as(identity, write, |sink| feed_raw(body, sink)).await,
            Some(boundary) => {
                self.service
                    .write_stream_as(identity, write, |sink| feed_multipart(body, boundary, sink))
                    .await
            }
        };
        // A body the face itself refused (no `file` part, a malformed multipart) says so first.
        if let Some(Err(e)) = fed {
            return Err(e);
        }
        match result.map_err(|w| RestError::from_wire(&w))? {
            Outcome::WriteBytes { version, .. } => {
                let mut response = reply::empty(StatusCode::NO_CONTENT);
                response.headers_mut().insert(header::ETAG, etag(&version));
                Ok(response)
            }
            _ => Err(unexpected()),
        }
    }

    async fn delete(
        &self,
        identity: Identity,
        request: &Request<Incoming>,
        path: String,
    ) -> Result<Response<Body>, RestError> {
        let recursive = match query(request, "recursive").as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => {
                return Err(RestError::invalid(format!("recursive {other:?} is not true or false")));
            }
        };
        let guard = match precondition(request.headers())? {
            Precondition::None => None,
            Precondition::Version(version) => Some(EditGuard { version, target_key: None }),
            Precondition::Absent => {
                return Err(RestError::invalid("If-None-Match: * makes no sense for DELETE"));
            }
        };
        let remove = op::Request::Remove { path, recursive, guard };
        match self.service.call_as(identity, remove).await.map_err(|w| RestError::from_wire(&w))? {
            Outcome::Remove { .. } => Ok(reply::empty(StatusCode::NO_CONTENT)),
            _ => Err(unexpected()),
        }
    }
}

/// The file's bytes as the stream of the descriptor a worker opened yields them. A stream that
/// ends early (its reader stalled past the idle timeout, the file changed while it was read)
/// ends the body with an error: the connection is cut before Content-Length bytes, never a
/// short body that passes for the file.
fn stream(header: op::StreamHeader, replies: Replies<Result<Bytes, WireError>>) -> Response<Body> {
    use tokio_stream::StreamExt;
    let frames = replies.map(|item| match item {
        Ok(bytes) => Ok(Frame::data(bytes)),
        Err(error) => Err(std::io::Error::other(format!("{}: {}", error.code, error.message))),
    });
    let mut response = Response::new(Body::new(http_body_util::StreamBody::new(frames)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(header.size));
    headers.insert(header::ETAG, etag(&header.version));
    response
}

fn unexpected() -> RestError {
    RestError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", "the worker answered another operation")
}

/// Passes an octet-stream body on, chunk by chunk; finishes the sink only at its clean end.
async fn feed_raw(mut body: Incoming, mut sink: BodySink) -> Result<(), RestError> {
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return Ok(()) };
        if let Ok(data) = frame.into_data()
            && sink.send(&data).await.is_err()
        {
            return Ok(());
        }
    }
    let _ = sink.finish().await;
    Ok(())
}

/// Passes on the `file` part of a multipart body, streamed; the other parts are skipped.
async fn feed_multipart(body: Incoming, boundary: String, mut sink: BodySink) -> Result<(), RestError> {
    let mut multipart = multer::Multipart::new(http_body_util::BodyDataStream::new(body), boundary);
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => return Err(RestError::invalid("multipart body has no \"file\" part")),
            Err(e) => return Err(RestError::invalid(format!("malformed multipart body: {e}"))),
        };
        if field.name() != Some("file") {
            continue;
        }
        loop {
            match field.chunk().await {
                Ok(Some(data)) => {
                    if sink.send(&data).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    let _ = sink.finish().await;
                    return Ok(());
                }
                Err(e) => return Err(RestError::invalid(format!("malformed multipart body: {e}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_decoded_and_joined_to_the_root() {
        let check = |raw: &str, want: Result<&str, &str>| match (daemon_path("/ws", raw), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{raw}"),
            (Err(e), Err(want)) => assert!(e.message.contains(want), "{raw}: {}", e.message),
            (got, want) => panic!("{raw}: got {got:?}, want {want:?}"),
        };
        check("dir%2Fa.txt", Ok("/ws/dir/a.txt"));
        check("dir/a.txt", Ok("/ws/dir/a.txt"));
        check("", Ok("/ws"));
        check("%2E", Ok("/ws/."));
        check("%2Fetc%2Fpasswd", Ok("/ws/etc/passwd"));
        check("%2E%2E%2Fout", Ok("/ws/../out"));
        check("caf%C3%A9", Ok("/ws/café"));
        check("a%00b", Err("NUL"));
        check("%FF", Err("UTF-8"));
    }

    #[test]
    fn preconditions_become_guards() {
        let check = |pairs: &[(&'static str, &'static str)], want: Result<Precondition, &str>| {
            let mut headers = HeaderMap::new();
            for (k, v) in pairs {
                headers.insert(header::HeaderName::from_static(k), header::HeaderValue::from_static(v));
            }
            match (precondition(&headers), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want),
                (Err(e), Err(want)) => assert!(e.message.contains(want), "{}", e.message),
                (got, want) => panic!("got {got:?}, want {want:?}"),
            }
        };
        check(&[], Ok(Precondition::None));
        check(&[("if-match", "\"v1.a\"")], Ok(Precondition::Version("v1.a".into())));
        check(&[("if-none-match", "*")], Ok(Precondition::Absent));
        check(&[("if-none-match", "\"v1.a\"")], Err("only *"));
        check(&[("if-match", "*")], Err("one entity tag"));
        check(&[("if-match", "\"a\""), ("if-none-match", "*")], Err("not both"));
    }
}
