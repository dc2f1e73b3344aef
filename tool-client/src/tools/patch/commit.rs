//! Commit: the prepared operations run in order through the provider, each guarded by the
//! version preflight saw (or an earlier operation produced). The first failure or unknown
//! outcome stops the patch; nothing is rolled back.

use std::collections::HashMap;

use fsd_proto::ErrorCode;

use super::Prepared;
use crate::daemon::{DaemonError, Version, VersionGuard, WriteGuard};
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
    Version(Version),
    Absent,
}

fn write_guard(expect: Option<&Expect>) -> WriteGuard {
    match expect {
        Some(Expect::Version(v)) => WriteGuard::ReplaceIfVersion(VersionGuard::new(v.clone(), None)),
        Some(Expect::Absent) | None => WriteGuard::CreateIfAbsent,
    }
}

fn edit_guard(expect: Option<&Expect>) -> Option<VersionGuard> {
    match expect {
        Some(Expect::Version(v)) => Some(VersionGuard::new(v.clone(), None)),
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
    failure: &DaemonError,
) -> Status {
    let error = ToolError::from_mutation(spelled, failure);
    match failure.code() {
        Some(ErrorCode::IoError) => {
            let fresh = session.daemon.stat(path, false).await;
            let unchanged = match (fresh, expect) {
                (Ok(stat), Some(Expect::Version(v))) => {
                    stat.info.is_some_and(|i| fsd_proto::version::same(&i.version.0, &v.0))
                }
                (Ok(stat), Some(Expect::Absent) | None) => stat.info.is_none(),
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
                let content = p.content.clone().unwrap_or_default();
                let guard = write_guard(src_expect.as_ref());
                match session.daemon.write_text(&src, content, Some(&guard), false).await {
                    Ok(reply) => {
                        let target = reply.target;
                        session.record_present(&[&src], &target, &reply.version);
                        expect.insert(src.clone(), Expect::Version(reply.version));
                        (Status::Completed, (target.display, None))
                    }
                    Err(s) => (
                        classify(session, &src, &spelled, src_expect.as_ref(), &s).await,
                        (src.clone(), None),
                    ),
                }
            }
            (fsd_patch::Op::Delete { .. }, _) => {
                match session.daemon.delete_file(&src, edit_guard(src_expect.as_ref()).as_ref()).await {
                    Ok(target) => {
                        session.learn(&[&src, &target.display], &target.key.0);
                        session.observations.record_absent(target.key.clone());
                        expect.insert(src.clone(), Expect::Absent);
                        (Status::Completed, (target.display, None))
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
                let moved = session
                    .daemon
                    .move_file(
                        &src,
                        dst,
                        edit_guard(src_expect.as_ref()).as_ref(),
                        Some(&write_guard(dst_expect.as_ref())),
                        p.content.clone(),
                    )
                    .await;
                match moved {
                    Ok(reply) => {
                        let source = reply.source;
                        let destination = reply.destination;
                        session.record_present(&[dst], &destination, &reply.destination_version);
                        expect.insert(dst.clone(), Expect::Version(reply.destination_version));
                        if reply.source_remains {
                            let error = ToolError::source_removal_failed(reply.source_removal_errno);
                            let detail = format!("destination {to} was written; source {spelled} remains");
                            (
                                Status::Failed { error, detail: Some(detail) },
                                (source.display, Some(destination.display)),
                            )
                        } else {
                            session.learn(&[&src, &source.display], &source.key.0);
                            session.observations.record_absent(source.key.clone());
                            expect.insert(src.clone(), Expect::Absent);
                            (Status::Completed, (source.display, Some(destination.display)))
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
