//! Preflight: every operation is checked in order against current files and the observation
//! policy, with the effects of the operations before it simulated. Preflight reads record no
//! observation. Sandbox containment is not simulated: the daemon is asked for every target
//! (a stat with `check_write`, which writes nothing), so a patch with one operation the fence
//! refuses changes nothing. Every question about every target goes to the daemon in one call
//! first (`Inspect`); a question that call did not answer (a read a signed call did not ask up
//! front, a daemon that predates it) is asked on its own.

use std::collections::HashMap;

use fsd_policy::{EditRefusal, TargetKey, WriteGuard};
use fsd_proto::{ErrorCode, version};

use super::{Planned, Prepared};
use crate::daemon::{DaemonError, FileKind, InspectTarget, Inspected, Stat, TextRead, Version};
use crate::failure::ToolError;
use crate::tools::Session;

/// A refused operation.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub planned: Planned,
    pub error: ToolError,
}

/// What preflight believes a path holds at this point of the patch.
#[derive(Debug, Clone)]
struct Sim {
    exists: bool,
    /// The text, when read.
    text: Option<String>,
    /// The version on disk before the patch; `None` once an earlier operation changed it.
    disk_version: Option<Version>,
    target_key: Option<TargetKey>,
    /// An earlier operation of this patch wrote or removed it: it counts as observed.
    touched: bool,
    /// A final symlink (moving or deleting one is refused).
    symlink: bool,
    regular: bool,
}

struct State<'s> {
    session: &'s mut Session,
    sims: HashMap<String, Sim>,
    /// Targets the daemon already said the mode may write, with whether a final link counted.
    fenced: std::collections::HashSet<(String, bool)>,
    /// The daemon's answers about every target, asked up front: by path and whether the write
    /// check acts on a final link itself.
    answers: HashMap<(String, bool), Inspected>,
}

/// One of the daemon's answers.
type Answer<T> = Result<T, DaemonError>;

/// What preflight asks the daemon about each target of the patch, once each: the write check
/// (acting on a final link itself for a delete or a move's source), the stat and the text. A
/// signed call reads only what it updates (its ticket admits no read of what it deletes or
/// replaces whole).
fn targets(planned: &[Planned], signed: bool) -> Vec<InspectTarget> {
    let mut targets: Vec<InspectTarget> = Vec::new();
    let mut ask = |path: &str, no_follow: bool, read: bool| match targets
        .iter_mut()
        .find(|t| t.path == path && t.no_follow == no_follow)
    {
        Some(target) => target.read |= read,
        None => targets.push(InspectTarget { path: path.to_owned(), no_follow, read }),
    };
    for p in planned {
        match &p.op {
            fsd_patch::Op::Add { .. } => ask(&p.src, false, !signed),
            fsd_patch::Op::Delete { .. } => ask(&p.src, true, !signed),
            fsd_patch::Op::Update { move_to, .. } => {
                ask(&p.src, move_to.is_some(), true);
                if let Some(dst) = &p.dst {
                    ask(dst, false, !signed);
                }
            }
        }
    }
    targets
}

impl State<'_> {
    /// Asks the daemon about every target in one call. Any failure of that call leaves each
    /// question to be asked on its own, where it gets its own answer.
    async fn inspect(&mut self, planned: &[Planned]) {
        let targets = targets(planned, self.session.daemon.signed_call());
        if let Ok(Some(answers)) = self.session.daemon.inspect(&targets).await {
            self.answers = targets.into_iter().map(|t| (t.path, t.no_follow)).zip(answers).collect();
        }
    }

    /// The answered stat of `path` (no_follow), with the answered read when there is one.
    fn answered(&self, path: &str) -> Option<(Answer<Stat>, Option<Answer<TextRead>>)> {
        [true, false].iter().find_map(|no_follow| {
            let answer = self.answers.get(&(path.to_owned(), *no_follow))?;
            Some((answer.stat.clone()?, answer.text.clone()))
        })
    }

    /// Asks the daemon whether the call's mode may write `path` (roots, mode, protected paths,
    /// git directories, mounts), writing nothing. `no_follow`: the operation acts on a final
    /// link itself (delete, move source).
    async fn fence(&mut self, path: &str, spelled: &str, no_follow: bool) -> Result<(), ToolError> {
        if self.fenced.contains(&(path.to_owned(), no_follow)) {
            return Ok(());
        }
        let answered = self.answers.get(&(path.to_owned(), no_follow)).map(|a| a.write_check.clone());
        let checked = match answered {
            Some(answer) => answer,
            None => self.session.daemon.check_write(path, no_follow).await,
        };
        checked.map_err(|e| ToolError::from_mutation(spelled, &e))?;
        self.fenced.insert((path.to_owned(), no_follow));
        Ok(())
    }

    /// The current simulated state of a path, loading it from the daemon the first time.
    async fn sim(&mut self, path: &str, spelled: &str, need_text: bool) -> Result<Sim, ToolError> {
        if let Some(sim) =
            self.sims.get(path).filter(|s| s.text.is_some() || !need_text || !s.exists || s.touched)
        {
            return Ok(sim.clone());
        }
        let (stat, text) = match self.answered(path) {
            Some(answered) => answered,
            None => (self.session.daemon.stat(path, true).await, None),
        };
        let stat = stat.map_err(|e| ToolError::from_read(spelled, &e))?;
        let mut sim = Sim {
            exists: stat.info.is_some(),
            text: None,
            disk_version: stat.info.as_ref().map(|i| i.version.clone()),
            target_key: Some(stat.target.key.clone()),
            touched: false,
            symlink: stat.info.as_ref().is_some_and(|i| i.kind == FileKind::Symlink),
            regular: stat.info.as_ref().is_some_and(|i| i.kind == FileKind::File),
        };
        // A stat carries no digest: when its metadata differs from the observation's, the bytes
        // decide (a `touch` is not stale), so read them for the version that has one.
        let differs = sim.exists && self.observed_differs(&sim);
        if sim.exists && (need_text || sim.symlink || differs) {
            // Read through a link: an update writes through it to its target.
            let read = match text {
                Some(answered) => answered,
                None => self.session.daemon.read_text(path, 0).await,
            };
            match read {
                Ok(read) => {
                    sim.text = Some(read.text);
                    sim.disk_version = Some(read.version);
                    sim.target_key = Some(read.target.key);
                    sim.regular = true;
                }
                Err(error) => match &error {
                    DaemonError::Refused(w) if !need_text && w.code == ErrorCode::NotRegularFile => {
                        sim.regular = false
                    }
                    // Read only for its digest (not text, too large...): the stat's
                    // version stays, and the daemon's guard decides.
                    DaemonError::Refused(_) if !need_text && !sim.symlink => {}
                    _ => return Err(ToolError::from_read(spelled, &error)),
                },
            }
        }
        self.sims.insert(path.to_owned(), sim.clone());
        Ok(sim)
    }

    /// Whether the observed version of a path differs from its stat version by metadata.
    fn observed_differs(&self, sim: &Sim) -> bool {
        if !self.session.policy_on() {
            return false;
        }
        match (self.session.observations.edit_intent(sim.target_key.as_ref()), &sim.disk_version) {
            (Ok(observed), Some(disk)) => !version::same(&observed.0, &disk.0),
            _ => false,
        }
    }

    /// The policy check for changing an existing file (update, delete, move source).
    fn may_modify(&self, sim: &Sim, spelled: &str) -> Result<(), ToolError> {
        if sim.touched || !self.session.policy_on() {
            return Ok(());
        }
        match self.session.observations.edit_intent(sim.target_key.as_ref()) {
            Ok(version) if sim.disk_version.as_ref().is_some_and(|d| version::same(&version.0, &d.0)) => {
                Ok(())
            }
            Ok(_) => Err(stale(spelled)),
            Err(EditRefusal::NotObserved) => Err(ToolError::not_observed(spelled)),
            Err(EditRefusal::ObservedAbsent) => Err(not_found(spelled)),
        }
    }

    /// The policy check for writing a whole file that may exist (add, move destination).
    fn may_write(&self, sim: &Sim, spelled: &str) -> Result<(), ToolError> {
        if sim.touched || !sim.exists || !self.session.policy_on() {
            return Ok(());
        }
        match self.session.observations.write_intent(sim.target_key.as_ref()) {
            WriteGuard::ReplaceIfVersion(version)
                if sim.disk_version.as_ref().is_some_and(|d| version::same(&version.0, &d.0)) =>
            {
                Ok(())
            }
            WriteGuard::ReplaceIfVersion(_) => Err(stale(spelled)),
            WriteGuard::CreateIfAbsent => Err(ToolError::not_observed(spelled)),
        }
    }

    fn set(&mut self, path: &str, exists: bool, text: Option<String>) {
        let entry = self.sims.entry(path.to_owned()).or_insert(Sim {
            exists,
            text: None,
            disk_version: None,
            target_key: None,
            touched: true,
            symlink: false,
            regular: true,
        });
        entry.exists = exists;
        entry.text = text;
        entry.touched = true;
        entry.symlink = false;
        entry.regular = true;
    }
}

/// The pre-patch version of a path no earlier operation touched.
fn basis(sim: &Sim) -> Option<Version> {
    if sim.touched || !sim.exists { None } else { sim.disk_version.clone() }
}

fn stale(spelled: &str) -> ToolError {
    ToolError::stale(spelled)
}

fn not_found(spelled: &str) -> ToolError {
    ToolError::new(ErrorCode::NotFound.as_str(), format!("cannot modify \"{spelled}\": not found"))
}

fn symlink_source(verb: &str, spelled: &str) -> ToolError {
    ToolError::new(
        "PATCH_SYMLINK_SOURCE",
        format!("cannot {verb} \"{spelled}\": it is a symbolic link; patch the file it points to instead"),
    )
}

/// Checks one operation and simulates its effect.
async fn check(state: &mut State<'_>, planned: &Planned) -> Result<Prepared, ToolError> {
    let spelled = planned.op.path();
    match &planned.op {
        fsd_patch::Op::Add { contents, .. } => {
            state.fence(&planned.src, spelled, false).await?;
            let sim = state.sim(&planned.src, spelled, false).await?;
            if sim.exists && !sim.touched && !sim.regular && !sim.symlink {
                return Err(ToolError::new(
                    ErrorCode::NotRegularFile.as_str(),
                    format!("cannot write \"{spelled}\": not a regular file"),
                ));
            }
            state.may_write(&sim, spelled)?;
            let before = if sim.exists { sim.text.clone() } else { None };
            state.set(&planned.src, true, Some(contents.clone()));
            Ok(Prepared {
                planned: planned.clone(),
                content: Some(contents.clone()),
                before,
                target_exists: sim.exists,
                src_version: basis(&sim),
                dst_version: None,
            })
        }
        fsd_patch::Op::Delete { .. } => {
            state.fence(&planned.src, spelled, true).await?;
            // The text is only for the report's diff: a signed deletion's ticket admits no read
            // of what it deletes (the approver approved removing it, not showing it).
            let need_text = !state.session.daemon.signed_call();
            let sim = state.sim(&planned.src, spelled, need_text).await.map_err(|e| {
                // A directory or special file: report it as the delete it is.
                if e.code == ErrorCode::NotRegularFile.as_str() {
                    ToolError::new(e.code, format!("cannot delete \"{spelled}\": not a regular file"))
                } else {
                    e
                }
            })?;
            if !sim.exists {
                return Err(ToolError::new(
                    ErrorCode::NotFound.as_str(),
                    format!("cannot delete \"{spelled}\": not found"),
                ));
            }
            if sim.symlink && !sim.touched {
                return Err(symlink_source("delete", spelled));
            }
            state.may_modify(&sim, spelled)?;
            state.set(&planned.src, false, None);
            Ok(Prepared {
                planned: planned.clone(),
                content: None,
                src_version: basis(&sim),
                before: sim.text,
                target_exists: true,
                dst_version: None,
            })
        }
        fsd_patch::Op::Update { chunks, move_to, .. } => {
            state.fence(&planned.src, spelled, move_to.is_some()).await?;
            if let (Some(dst), Some(dst_spelled)) = (&planned.dst, move_to) {
                state.fence(dst, dst_spelled, false).await?;
            }
            let sim = state.sim(&planned.src, spelled, true).await?;
            if !sim.exists {
                return Err(ToolError::new(
                    ErrorCode::NotFound.as_str(),
                    format!("cannot read \"{spelled}\": not found"),
                ));
            }
            if move_to.is_some() && sim.symlink && !sim.touched {
                return Err(symlink_source("move", spelled));
            }
            state.may_modify(&sim, spelled)?;
            let text = sim.text.clone().unwrap_or_default();
            let new_text = if chunks.is_empty() {
                text.clone()
            } else {
                fsd_patch::apply_chunks(&text, chunks).map_err(|e| {
                    ToolError::new(
                        "PATCH_HUNK_MISMATCH",
                        format!("{} (hunk at patch line {})", e.message, e.chunk_line),
                    )
                })?
            };
            let (Some(dst), Some(dst_spelled)) = (&planned.dst, move_to) else {
                state.set(&planned.src, true, Some(new_text.clone()));
                return Ok(Prepared {
                    planned: planned.clone(),
                    content: Some(new_text),
                    before: Some(text),
                    target_exists: true,
                    src_version: basis(&sim),
                    dst_version: None,
                });
            };
            let dst_sim = state.sim(dst, dst_spelled, false).await?;
            if dst_sim.exists && !dst_sim.touched && !dst_sim.regular && !dst_sim.symlink {
                return Err(ToolError::new(
                    ErrorCode::NotRegularFile.as_str(),
                    format!("cannot write \"{dst_spelled}\": not a regular file"),
                ));
            }
            state.may_write(&dst_sim, dst_spelled)?;
            state.set(&planned.src, false, None);
            state.set(dst, true, Some(new_text.clone()));
            let content = (!chunks.is_empty()).then_some(new_text);
            Ok(Prepared {
                planned: planned.clone(),
                content,
                before: Some(text),
                target_exists: dst_sim.exists,
                src_version: basis(&sim),
                dst_version: basis(&dst_sim),
            })
        }
    }
}

/// Checks the whole patch; any problem refuses all of it.
pub(super) async fn run(session: &mut Session, planned: &[Planned]) -> Result<Vec<Prepared>, Vec<Problem>> {
    let mut state =
        State { session, sims: HashMap::new(), fenced: Default::default(), answers: HashMap::new() };
    state.inspect(planned).await;
    let mut prepared = Vec::new();
    let mut problems = Vec::new();
    for p in planned {
        // A refused operation has no simulated effect; later ones are still checked.
        match check(&mut state, p).await {
            Ok(ok) => prepared.push(ok),
            Err(error) => problems.push(Problem { planned: p.clone(), error }),
        }
    }
    if problems.is_empty() { Ok(prepared) } else { Err(problems) }
}
