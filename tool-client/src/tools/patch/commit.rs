//! Commit: the prepared operations run in order through the provider, each guarded by the
//! version preflight saw (or an earlier operation produced). The first failure or unknown
//! outcome stops the patch; nothing is rolled back. With `applyPatchAtomic` ([`run_atomic`])
//! they are one daemon transaction instead: all of them or none.

use std::collections::HashMap;

use fsd_proto::ErrorCode;

use super::Prepared;
use crate::daemon::{DaemonError, TxnChange, TxnResult, Version, VersionGuard, WriteGuard};
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
    /// Atomic: it was part of a transaction that failed at a later operation, so it was undone
    /// (or never made visible).
    Undone,
}

/// Every operation's status and the display paths the commit touched.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    pub statuses: Vec<Status>,
    pub displays: Vec<(String, Option<String>)>,
    /// Committed as one transaction (`applyPatchAtomic`).
    pub atomic: bool,
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
        let src_expect = expect.get(&src).cloned().or_else(|| source_expect(p));
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
    Outcome { statuses, displays, atomic: false }
}

/// The expectation preflight gives an operation's source: the version it saw, or absent for a
/// file an add creates.
fn source_expect(p: &Prepared) -> Option<Expect> {
    match (&p.src_version, p.planned.kind()) {
        (Some(v), _) => Some(Expect::Version(v.clone())),
        (None, fsd_patch::OpKind::Add) if !p.target_exists => Some(Expect::Absent),
        (None, _) => None,
    }
}

/// `applyPatchAtomic`: the operations, each with the guard the in-order commit would give it,
/// as one transaction. Committed, every operation is completed; refused or failed, nothing
/// changed, and the failing operation (the daemon's `operation`) says why; cut (a lost worker or
/// daemon), the outcome of all of them is unknown.
pub(super) async fn run_atomic(session: &mut Session, prepared: &[Prepared]) -> Outcome {
    let mut changes = Vec::with_capacity(prepared.len());
    for p in prepared {
        let src = p.planned.src.clone();
        let src_expect = source_expect(p);
        let change = match (&p.planned.op, &p.planned.dst) {
            (fsd_patch::Op::Add { .. } | fsd_patch::Op::Update { move_to: None, .. }, _) => {
                TxnChange::Write {
                    path: src,
                    content: p.content.clone().unwrap_or_default(),
                    guard: Some(write_guard(src_expect.as_ref())),
                }
            }
            (fsd_patch::Op::Delete { .. }, _) => {
                TxnChange::Delete { path: src, guard: edit_guard(src_expect.as_ref()) }
            }
            (fsd_patch::Op::Update { move_to: Some(_), .. }, Some(dst)) => {
                let dst_expect = match &p.dst_version {
                    Some(v) => Some(Expect::Version(v.clone())),
                    None if !p.target_exists => Some(Expect::Absent),
                    None => None,
                };
                TxnChange::Move {
                    source: src,
                    destination: dst.clone(),
                    source_guard: edit_guard(src_expect.as_ref()),
                    destination_guard: Some(write_guard(dst_expect.as_ref())),
                    content: p.content.clone(),
                }
            }
            (fsd_patch::Op::Update { move_to: Some(_), .. }, None) => {
                let error = ToolError::new("PATCH_SYNTAX", "move without a destination");
                return stopped_at(prepared, changes.len(), Status::Failed { error, detail: None });
            }
        };
        changes.push(change);
    }
    let displays = prepared.iter().map(|p| (p.planned.src.clone(), p.planned.dst.clone())).collect();
    match session.daemon.transact(changes).await {
        Ok(results) => {
            let mut displays = Vec::with_capacity(prepared.len());
            for (p, result) in prepared.iter().zip(results) {
                let src = p.planned.src.clone();
                displays.push(match result {
                    TxnResult::Written(reply) => {
                        session.record_present(&[&src], &reply.target, &reply.version);
                        (reply.target.display, None)
                    }
                    TxnResult::Edited(reply) | TxnResult::Patched(reply) => {
                        session.record_present(&[&src], &reply.target, &reply.version);
                        (reply.target.display, None)
                    }
                    TxnResult::Deleted(target) => {
                        session.learn(&[&src, &target.display], &target.key.0);
                        session.observations.record_absent(target.key.clone());
                        (target.display, None)
                    }
                    TxnResult::Moved(reply) => {
                        if let Some(dst) = &p.planned.dst {
                            session.record_present(&[dst], &reply.destination, &reply.destination_version);
                        }
                        session.learn(&[&src, &reply.source.display], &reply.source.key.0);
                        session.observations.record_absent(reply.source.key.clone());
                        (reply.source.display, Some(reply.destination.display))
                    }
                });
            }
            let statuses = prepared.iter().map(|_| Status::Completed).collect();
            Outcome { statuses, displays, atomic: true }
        }
        Err(failure) => {
            // The operation the daemon names (from 0); a failure of the whole call, the first.
            let index = failure
                .wire()
                .and_then(|w| w.get("operation"))
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|i| *i < prepared.len())
                .unwrap_or(0);
            let spelled = prepared.get(index).map(|p| p.planned.op.path().to_owned()).unwrap_or_default();
            let error = ToolError::from_mutation(&spelled, &failure);
            let status = match failure.code() {
                Some(ErrorCode::Aborted) | None => {
                    // All or none of them happened: nothing is known about any target now.
                    for p in prepared {
                        for path in std::iter::once(&p.planned.src).chain(&p.planned.dst) {
                            if let Some(key) = session.key_of(path).cloned() {
                                session.observations.forget(&key);
                            }
                        }
                    }
                    // No operation is to blame: every one of them is unknown.
                    let statuses =
                        prepared.iter().map(|_| Status::Unknown { error: error.clone() }).collect();
                    return Outcome { statuses, displays, atomic: true };
                }
                Some(_) => Status::Failed { error, detail: None },
            };
            let mut outcome = stopped_at(prepared, index, status);
            outcome.displays = displays;
            outcome
        }
    }
}

/// An atomic commit that stopped at operation `index` (from 0) with `status`: the ones before
/// it undone, the ones after it not executed.
fn stopped_at(prepared: &[Prepared], index: usize, status: Status) -> Outcome {
    let mut status = Some(status);
    let statuses = (0..prepared.len())
        .map(|i| match i.cmp(&index) {
            std::cmp::Ordering::Less => Status::Undone,
            std::cmp::Ordering::Equal => status.take().unwrap_or(Status::NotExecuted),
            std::cmp::Ordering::Greater => Status::NotExecuted,
        })
        .collect();
    let displays = prepared.iter().map(|p| (p.planned.src.clone(), p.planned.dst.clone())).collect();
    Outcome { statuses, displays, atomic: true }
}
