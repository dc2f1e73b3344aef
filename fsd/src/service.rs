//! The gRPC edge: maps `fsd.v1` messages to backend requests and outcomes back to replies,
//! resolves each call's effective mode, and turns failures into statuses. Generated proto types
//! stop here; the backend never sees them.

use std::sync::Arc;

use fsd_proto::v1::{self, fsd_server::Fsd};
use fsd_proto::{ErrorCode, WireError};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::backend::{self, Backend, Mode, Outcome, StreamItem};
use crate::config::{Config, Escalation};
use crate::error::Failure;
use crate::sys;

/// The service state shared by every connection.
#[derive(Debug, Clone)]
pub struct FsdService {
    backend: Arc<Backend>,
    default_mode: Mode,
    max_mode: Mode,
    escalation: Escalation,
    max_message_bytes: u64,
}

impl FsdService {
    pub fn new(backend: Arc<Backend>, config: &Config) -> FsdService {
        FsdService {
            backend,
            default_mode: config.default_mode,
            max_mode: config.max_mode,
            escalation: config.escalation,
            max_message_bytes: config.max_message_bytes,
        }
    }

    /// The mode a call runs at: the daemon's default unless the call asks for another; wider
    /// than the default only with an escalation the daemon's trust level accepts.
    fn mode(&self, context: Option<&v1::CallContext>, path: &str) -> Result<Mode, Status> {
        let requested = context.map(|c| c.mode()).unwrap_or(v1::Mode::Unspecified);
        let Some(requested) = mode_from_wire(requested) else {
            return Ok(self.default_mode);
        };
        if requested <= self.default_mode {
            return Ok(requested);
        }
        let deny = |why: String| {
            Err(WireError::new(ErrorCode::SandboxDenied, path, why)
                .with("mode", self.default_mode.as_str())
                .into_status())
        };
        if requested > self.max_mode {
            return deny(format!(
                "{} is above this client's maximum mode {}",
                requested.as_str(),
                self.max_mode.as_str()
            ));
        }
        match self.escalation {
            Escalation::Deny => deny(format!("escalation to {} is disabled on this daemon", requested.as_str())),
            Escalation::Client => {
                let approved = context
                    .and_then(|c| c.escalation.as_ref())
                    .and_then(|t| mode_from_wire(t.approved_mode()));
                match approved {
                    Some(approved) if approved >= requested => Ok(requested),
                    _ => deny(format!("{} needs an approved escalation ticket", requested.as_str())),
                }
            }
        }
    }

    /// Runs one backend operation on the blocking pool.
    async fn run(&self, mode: Mode, request: backend::Request) -> Result<Outcome, Status> {
        let backend = self.backend.clone();
        let op = op_name(&request);
        let started = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || backend.handle(mode, request))
            .await
            .map_err(|e| Status::internal(format!("backend task failed: {e}")))?;
        match &result {
            Ok(_) => tracing::debug!(op, mode = mode.as_str(), micros = started.elapsed().as_micros() as u64, "ok"),
            Err(f) => tracing::info!(op, mode = mode.as_str(), path = %f.path, code = %f.error.code(), error = %f.error, "refused"),
        }
        result.map_err(|f| failure_status(f, mode))
    }
}

fn op_name(request: &backend::Request) -> &'static str {
    match request {
        backend::Request::Stat { .. } => "stat",
        backend::Request::ReadText { .. } => "readText",
        backend::Request::ReadBytes { .. } => "readBytes",
        backend::Request::ListDir { .. } => "listDir",
        backend::Request::WriteText { .. } => "writeText",
        backend::Request::EditText { .. } => "editText",
        backend::Request::MoveFile { .. } => "moveFile",
        backend::Request::DeleteFile { .. } => "deleteFile",
    }
}

fn failure_status(failure: Failure, mode: Mode) -> Status {
    failure.into_wire().with("mode", mode.as_str()).into_status()
}

fn unexpected() -> Status {
    Status::internal("backend returned an outcome of another operation")
}

pub fn mode_from_wire(mode: v1::Mode) -> Option<Mode> {
    match mode {
        v1::Mode::Unspecified => None,
        v1::Mode::ReadOnly => Some(Mode::ReadOnly),
        v1::Mode::WorkspaceWrite => Some(Mode::WorkspaceWrite),
        v1::Mode::DangerFullAccess => Some(Mode::DangerFullAccess),
    }
}

pub fn mode_to_wire(mode: Mode) -> v1::Mode {
    match mode {
        Mode::ReadOnly => v1::Mode::ReadOnly,
        Mode::WorkspaceWrite => v1::Mode::WorkspaceWrite,
        Mode::DangerFullAccess => v1::Mode::DangerFullAccess,
    }
}

fn target(t: backend::Target) -> Option<v1::Target> {
    Some(v1::Target { target_key: t.key, display_path: t.display })
}

fn file_type(t: backend::FileType) -> i32 {
    match t {
        backend::FileType::File => v1::FileType::File as i32,
        backend::FileType::Directory => v1::FileType::Directory as i32,
        backend::FileType::Other => v1::FileType::Other as i32,
        backend::FileType::Symlink => v1::FileType::Symlink as i32,
    }
}

fn change(c: backend::Change) -> Option<v1::TextChange> {
    Some(v1::TextChange { before: c.before, after: c.after, omitted: c.omitted })
}

fn write_guard(g: Option<v1::WriteGuard>) -> Option<backend::WriteGuard> {
    match g?.kind? {
        v1::write_guard::Kind::CreateIfAbsent(_) => Some(backend::WriteGuard::CreateIfAbsent),
        v1::write_guard::Kind::ReplaceIfVersion(r) => Some(backend::WriteGuard::ReplaceIfVersion {
            version: r.version,
            target_key: (!r.target_key.is_empty()).then_some(r.target_key),
        }),
    }
}

fn edit_guard(g: Option<v1::EditGuard>) -> Option<backend::EditGuard> {
    g.map(|g| backend::EditGuard {
        version: g.version,
        target_key: (!g.target_key.is_empty()).then_some(g.target_key),
    })
}

type StreamReply = ReceiverStream<Result<v1::StreamTextReply, Status>>;

#[tonic::async_trait]
impl Fsd for FsdService {
    async fn hello(&self, _request: Request<v1::HelloRequest>) -> Result<Response<v1::HelloReply>, Status> {
        let limits = self.backend.limits();
        let modes = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::DangerFullAccess]
            .into_iter()
            .map(|mode| v1::ModeStatus {
                mode: mode_to_wire(mode) as i32,
                available: mode <= self.max_mode,
                enforcement: if mode <= self.max_mode { "path-walk" } else { "refused" }.to_owned(),
                reason: if mode <= self.max_mode {
                    "confined by the resolver's walk from the root descriptors; kernel (Landlock) \
                     confinement is not enabled in this build"
                        .to_owned()
                } else {
                    format!("above this daemon's max_mode {}", self.max_mode.as_str())
                },
            })
            .collect();
        let roots = self.backend.root_list();
        Ok(Response::new(v1::HelloReply {
            protocol_version: fsd_proto::PROTOCOL_VERSION,
            daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
            landlock_abi: sys::landlock_abi(),
            modes,
            default_mode: mode_to_wire(self.default_mode) as i32,
            max_mode: mode_to_wire(self.max_mode) as i32,
            escalation: self.escalation.as_str().to_owned(),
            limits: Some(v1::Limits {
                max_message_bytes: self.max_message_bytes,
                max_editable_file_bytes: limits.max_editable_bytes,
                max_read_bytes: limits.max_read_bytes,
                max_diff_text_bytes: limits.max_diff_text_bytes,
                max_dir_entries: limits.max_dir_entries as u64,
                max_path_bytes: backend::resolve::MAX_PATH_BYTES as u64,
            }),
            readable_roots: roots.iter().map(|(p, _)| p.clone()).collect(),
            writable_roots: roots.iter().filter(|(_, w)| *w).map(|(p, _)| p.clone()).collect(),
            protected_names: self.backend.protected_names(),
        }))
    }

    async fn stat(&self, request: Request<v1::StatRequest>) -> Result<Response<v1::StatReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        match self.run(mode, backend::Request::Stat { path: r.path, no_follow: r.no_follow }).await? {
            Outcome::Stat { target: t, info } => Ok(Response::new(v1::StatReply {
                target: target(t),
                info: info.map(|i| v1::FsInfo { version: i.version, r#type: file_type(i.file_type), size: i.size }),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn read_text(&self, request: Request<v1::ReadTextRequest>) -> Result<Response<v1::ReadTextReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        match self.run(mode, backend::Request::ReadText { path: r.path, max_bytes: r.max_bytes }).await? {
            Outcome::ReadText { target: t, version, text } => {
                Ok(Response::new(v1::ReadTextReply { target: target(t), version, text }))
            }
            _ => Err(unexpected()),
        }
    }

    type StreamTextStream = StreamReply;

    async fn stream_text(&self, request: Request<v1::StreamTextRequest>) -> Result<Response<StreamReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        // A few chunks in flight at most: memory stays constant whatever the file's size.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || {
            let mut sink = |item: StreamItem| {
                let reply = match item {
                    StreamItem::Header { target: t, version, size } => v1::StreamTextReply {
                        item: Some(v1::stream_text_reply::Item::Header(v1::StreamHeader { target: target(t), version, size })),
                    },
                    StreamItem::Chunk(bytes) => {
                        v1::StreamTextReply { item: Some(v1::stream_text_reply::Item::Chunk(bytes.into())) }
                    }
                };
                tx.blocking_send(Ok(reply)).is_ok()
            };
            if let Err(failure) = backend.stream_text(mode, &r.path, r.chunk_bytes as usize, &mut sink) {
                let _ = tx.blocking_send(Err(failure_status(failure, mode)));
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn read_bytes(&self, request: Request<v1::ReadBytesRequest>) -> Result<Response<v1::ReadBytesReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        match self.run(mode, backend::Request::ReadBytes { path: r.path, max_bytes: r.max_bytes }).await? {
            Outcome::ReadBytes { target: t, version, data } => {
                Ok(Response::new(v1::ReadBytesReply { target: target(t), version, data: data.into() }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn list_dir(&self, request: Request<v1::ListDirRequest>) -> Result<Response<v1::ListDirReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        match self.run(mode, backend::Request::ListDir { path: r.path }).await? {
            Outcome::ListDir { target: t, entries } => Ok(Response::new(v1::ListDirReply {
                target: target(t),
                entries: entries
                    .into_iter()
                    .map(|e| v1::DirEntry {
                        name: e.name,
                        raw_name: e.raw_name.into(),
                        r#type: file_type(e.file_type),
                        target: target(e.target),
                        version: e.version,
                        size: e.size,
                    })
                    .collect(),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn write_text(&self, request: Request<v1::WriteTextRequest>) -> Result<Response<v1::WriteTextReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        let req = backend::Request::WriteText {
            path: r.path,
            content: r.content,
            guard: write_guard(r.guard),
            match_style: r.match_existing_style,
        };
        match self.run(mode, req).await? {
            Outcome::WriteText { target: t, operation, version, change: c } => Ok(Response::new(v1::WriteTextReply {
                target: target(t),
                operation: match operation {
                    backend::WriteOperation::Create => v1::WriteOperation::Create as i32,
                    backend::WriteOperation::Update => v1::WriteOperation::Update as i32,
                },
                version,
                change: change(c),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn edit_text(&self, request: Request<v1::EditTextRequest>) -> Result<Response<v1::EditTextReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        let req = backend::Request::EditText {
            path: r.path,
            old: r.old_string,
            new: r.new_string,
            replace_all: r.replace_all,
            guard: edit_guard(r.guard),
        };
        match self.run(mode, req).await? {
            Outcome::EditText { target: t, version, replacements, change: c } => Ok(Response::new(v1::EditTextReply {
                target: target(t),
                version,
                replacements: u32::try_from(replacements).unwrap_or(u32::MAX),
                change: change(c),
            })),
            _ => Err(unexpected()),
        }
    }

    async fn move_file(&self, request: Request<v1::MoveFileRequest>) -> Result<Response<v1::MoveFileReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.source)?;
        let req = backend::Request::MoveFile {
            source: r.source,
            destination: r.destination,
            source_guard: edit_guard(r.source_guard),
            destination_guard: write_guard(r.destination_guard),
            content: r.content,
        };
        match self.run(mode, req).await? {
            Outcome::MoveFile { source, destination, destination_version, source_change, destination_change, source_removal_error } => {
                Ok(Response::new(v1::MoveFileReply {
                    source: target(source),
                    destination: target(destination),
                    destination_version,
                    source_change: change(source_change),
                    destination_change: change(destination_change),
                    source_remains: source_removal_error.is_some(),
                    source_removal_error: source_removal_error.unwrap_or_default(),
                }))
            }
            _ => Err(unexpected()),
        }
    }

    async fn delete_file(&self, request: Request<v1::DeleteFileRequest>) -> Result<Response<v1::DeleteFileReply>, Status> {
        let r = request.into_inner();
        let mode = self.mode(r.context.as_ref(), &r.path)?;
        match self.run(mode, backend::Request::DeleteFile { path: r.path, guard: edit_guard(r.guard) }).await? {
            Outcome::DeleteFile { target: t, change: c } => {
                Ok(Response::new(v1::DeleteFileReply { target: target(t), change: change(c) }))
            }
            _ => Err(unexpected()),
        }
    }
}
