//! Commit: the prepared operations run in order through the provider, each guarded by the
//! version preflight saw (or an earlier operation produced). The first failure or unknown
//! outcome stops the patch; nothing is rolled back.

use std::collections::HashMap;

use fsd_policy::TargetKey;
use fsd_proto::{ErrorCode, WireError, v1};

use super::Prepared;
use crate::failure::ToolError;
use crate::tools::Session;

/// How one operation ended.
#[derive(Debug, Clone)]
pub(super) enum Status {
    Completed,
    /// Refused or failed with the target known unchanged; `detail` is a second report line.
    Failed {
        error: ToolError,
        detail: Option<String>,
    },
    /// The target may or may not have changed.
    Unknown {
        error: ToolError,
    },
    NotExecuted,
}

/// Every operation's status and the display paths the commit touched.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    pub statuses: Vec<Status>,
    pub displays: Vec<(String, Option<String>)>,
}

/// The expected state of a path before the next operation on it.
#[derive(Debug, Clone)]
enum Expect {
    Version(String),
    Absent,
}

fn write_guard(expect: Option<&Expect>) -> v1::WriteGuard {
    let kind = match expect {
        Some(Expect::Version(v)) => v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
            version: v.clone(),
            target_key: String::new(),
        }),
        Some(Expect::Absent) | None => v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {}),
    };
    v1::WriteGuard { kind: Some(kind) }
}

fn edit_guard(expect: Option<&Expect>) -> Option<v1::EditGuard> {
    match expect {
        Some(Expect::Version(v)) => Some(v1::EditGuard { version: v.clone(), target_key: String::new() }),
        _ => None,
    }
}

/// Classifies a failed call: an I/O failure whose target is provably unchanged is "failed";
/// any doubt (a cancelled request, a vanished daemon, a changed target) is "unknown".
async fn classify(
    session: &mut Session,
    path: &str,
    spelled: &str,
    expect: Option<&Expect>,
    status: &tonic::Status,
) -> Status {
    let error = ToolError::from_mutation(spelled, status);
    match WireError::from_status(status).map(|w| w.code) {
        Some(ErrorCode::IoError) => {
            let context = session.context();
            let fresh = session
                .client
                .stat(v1::StatRequest {
                    context,
                    path: path.to_owned(),
                    no_follow: false,
                    check_write: false,
                })
                .await;
            let unchanged = match (fresh, expect) {
                (Ok(reply), Some(Expect::Version(v))) => {
                    reply.into_inner().info.is_some_and(|i| fsd_proto::version::same(&i.version, v))
                }
                (Ok(reply), Some(Expect::Absent) | None) => reply.into_inner().info.is_none(),
                (Err(_), _) => false,
            };
            if unchanged { Status::Failed { error, detail: None } } else { Status::Unknown { error } }
        }
        Some(ErrorCode::Aborted) | None => Status::Unknown { error },
        Some(_) => Status::Failed { error, detail: None },
    }
}

pub(super) async fn run(session: &mut Session, prepared: &[Prepared]) -> Outcome {
    let mut expect: HashMap<String, Expect> = HashMap::new();
    let mut statuses = Vec::with_capacity(prepared.len());
    let mut displays = Vec::with_capacity(prepared.len());
    let mut stopped = false;
    for p in prepared {
        if stopped {
            statuses.push(Status::NotExecuted);
            displays.push((p.planned.src.clone(), None));
            continue;
        }
        let src = p.planned.src.clone();
        let spelled = p.planned.op.path().to_owned();
        let src_expect = expect.get(&src).cloned().or_else(|| match (&p.src_version, p.planned.kind()) {
            (Some(v), _) => Some(Expect::Version(v.clone())),
            (None, fsd_patch::OpKind::Add) if !p.target_exists => Some(Expect::Absent),
            (None, _) => None,
        });
        let (status, display) = match (&p.planned.op, &p.planned.dst) {
            (fsd_patch::Op::Add { .. } | fsd_patch::Op::Update { move_to: None, .. }, _) => {
                let request = v1::WriteTextRequest {
                    context: session.context(),
                    path: src.clone(),
                    content: p.content.clone().unwrap_or_default(),
                    guard: Some(write_guard(src_expect.as_ref())),
                    match_existing_style: false,
                };
                match session.client.write_text(request).await {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        let target = reply.target.unwrap_or_default();
                        session.record_present(&[&src], &target, &reply.version);
                        expect.insert(src.clone(), Expect::Version(reply.version));
                        (Status::Completed, (target.display_path, None))
                    }
                    Err(s) => (
                        classify(session, &src, &spelled, src_expect.as_ref(), &s).await,
                        (src.clone(), None),
                    ),
                }
            }
            (fsd_patch::Op::Delete { .. }, _) => {
                let request = v1::DeleteFileRequest {
                    context: session.context(),
                    path: src.clone(),
                    guard: edit_guard(src_expect.as_ref()),
                };
                match session.client.delete_file(request).await {
                    Ok(reply) => {
                        let target = reply.into_inner().target.unwrap_or_default();
                        session.learn(&[&src, &target.display_path], &target.target_key);
                        session.observations.record_absent(TargetKey(target.target_key.clone()));
                        expect.insert(src.clone(), Expect::Absent);
                        (Status::Completed, (target.display_path, None))
                    }
                    Err(s) => (
                        classify(session, &src, &spelled, src_expect.as_ref(), &s).await,
                        (src.clone(), None),
                    ),
                }
            }
            (fsd_patch::Op::Update { move_to: Some(to), .. }, Some(dst)) => {
                let dst_expect = expect.get(dst).cloned().or_else(|| match &p.dst_version {
                    Some(v) => Some(Expect::Version(v.clone())),
                    None if !p.target_exists => Some(Expect::Absent),
                    None => None,
                });
                let request = v1::MoveFileRequest {
                    context: session.context(),
                    source: src.clone(),
                    destination: dst.clone(),
                    source_guard: edit_guard(src_expect.as_ref()),
                    destination_guard: Some(write_guard(dst_expect.as_ref())),
                    content: p.content.clone(),
                };
                match session.client.move_file(request).await {
                    Ok(reply) => {
                        let reply = reply.into_inner();
                        let source = reply.source.unwrap_or_default();
                        let destination = reply.destination.unwrap_or_default();
                        session.record_present(&[dst], &destination, &reply.destination_version);
                        expect.insert(dst.clone(), Expect::Version(reply.destination_version));
                        if reply.source_remains {
                            let error = ToolError::new(
                                ErrorCode::IoError.as_str(),
                                format!("source removal failed: {}", reply.source_removal_error),
                            );
                            let detail = format!("destination {to} was written; source {spelled} remains");
                            (
                                Status::Failed { error, detail: Some(detail) },
                                (source.display_path, Some(destination.display_path)),
                            )
                        } else {
                            session.learn(&[&src, &source.display_path], &source.target_key);
                            session.observations.record_absent(TargetKey(source.target_key.clone()));
                            expect.insert(src.clone(), Expect::Absent);
                            (Status::Completed, (source.display_path, Some(destination.display_path)))
                        }
                    }
                    Err(s) => (
                        classify(session, &src, &spelled, src_expect.as_ref(), &s).await,
                        (src.clone(), Some(dst.clone())),
                    ),
                }
            }
            (fsd_patch::Op::Update { move_to: Some(_), .. }, None) => {
                let error = ToolError::new("PATCH_SYNTAX", "move without a destination");
                (Status::Failed { error, detail: None }, (src.clone(), None))
            }
        };
        if !matches!(status, Status::Completed) {
            stopped = true;
            if matches!(status, Status::Unknown { .. }) {
                // Nothing is known about the target any more: the next mutation needs a read.
                if let Some(key) = session.key_of(&src).cloned() {
                    session.observations.forget(&key);
                }
            }
        }
        statuses.push(status);
        displays.push(display);
    }
    Outcome { statuses, displays }
}
