//! The local backend: one request in, one outcome out. The service hands every operation here as
//! a plain value so that the fences can later run this code in confined worker processes without
//! the service or the tools changing. Nothing here knows gRPC, models or tools.

pub mod approved;
pub mod bytes;
mod commit;
mod gitdir;
mod hexname;
pub mod journal;
mod locking;
mod moves;
pub(crate) mod pipeline;
mod read;
pub mod record;
pub mod resolve;
mod rewind;
mod settle;
pub mod text;
pub mod txn;
mod version;
mod write;
pub use write::stranded;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use locking::{Guard, Locking};
use resolve::{Resolved, Root, WalkOptions};

use fsd_proto::names::for_people;

use crate::error::{Denial, Failure, FsError};
use crate::op::{
    Binding, Bindings, Change, Last, Limits, Made, Mode, ObjectId, Op, Outcome, Request, Requester, RootSpec,
    Shown, Target,
};
use crate::sys;

/// What the walk refuses beyond the roots, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    /// Names read-only under workspace-write wherever they appear below a root.
    pub protected: &'a [String],
    /// Globs of paths no call reaches at any mode (`config::guarded`: anchored already).
    pub read_denied: &'a [String],
    /// Mounts below a root the walk may enter (`allow_submounts`).
    pub submounts: &'a [PathBuf],
    /// Whether a backslash may appear in a name (`allow_backslash`).
    pub allow_backslash: bool,
    /// Whether to open the filesystem root too (danger-full-access only): a confined worker
    /// holds no descriptor outside its roots, so only Landlock would stop its use.
    pub host_root: bool,
}

/// The local backend.
#[derive(Debug)]
pub struct Backend {
    /// Configured roots, then (last) the filesystem root, used only by danger-full-access.
    roots: Vec<Root>,
    configured: usize,
    protected: Vec<OsString>,
    read_denied: Vec<fsd_proto::glob::Glob>,
    allow_backslash: bool,
    limits: Limits,
    locks: Arc<dyn Locking>,
    /// Where temporary files are recorded until their names are gone (see `journal`).
    journal: journal::Journal,
    /// The state directory's intent records (`txn`), opened before confinement; none without a
    /// `state_dir`.
    intents: Option<std::os::fd::OwnedFd>,
    /// The bindings of the approved call being run ([`Request::Bound`]): each of its paths'
    /// walks must stand on the object its approver was shown. Empty for every other call.
    bound: std::sync::Mutex<Bindings>,
    /// For a read of the approved call being run: the target keys (spelled as a description
    /// spells them) each bound path must resolve to, the names its approver listed on the
    /// directories it binds. Empty for every other call.
    named: std::sync::Mutex<Vec<(String, Vec<String>)>>,
    /// For the approved call being run: the directories earlier calls of its approval made,
    /// as their workers vouched (checked by this one), which its walks may stand in.
    vouched: std::sync::Mutex<Vec<Made>>,
    /// What the approved call being run made below the last directory its approval names:
    /// that directory and the ones beyond it its walk stood in, for its worker to vouch for.
    made: std::sync::Mutex<Option<(ObjectId, Vec<ObjectId>)>>,
    /// Whom the approved call being run is for and what it does on the path it names: none
    /// for every other call.
    for_whom: std::sync::Mutex<Option<ForWhom>>,
    /// The change record (`record`); none without a `state_dir` or with it off.
    record: Option<record::Store>,
    /// Who the call being served changes things for ([`Request::Recorded`]).
    author: std::sync::Mutex<Option<crate::op::Author>>,
    /// A rewind is committing: its change is recorded as one.
    rewinding: std::sync::atomic::AtomicBool,
    /// The sequence number of the last change this worker recorded.
    last_recorded: std::sync::atomic::AtomicU64,
    /// In an approved call's process: where its change goes to its worker (`record`), and its
    /// side of the handshake that makes it wait until the worker recorded it.
    carrier: std::sync::Mutex<Option<(std::fs::File, Option<crate::sys::call::ProcessSide>)>>,
}

/// Clears the bindings of the approved call being run when it ends, however it ends.
pub struct BoundCall<'b>(&'b Backend);

impl Drop for BoundCall<'_> {
    fn drop(&mut self) {
        self.0.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        self.0.named.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        self.0.vouched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        *self.0.for_whom.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// Whom an approved call is made for, and what it does on the path it names (a move's source):
/// the walk of that path acts within the requester's own authority on a file other names share
/// (`Shown::beyond`), whatever the network process checked before.
#[derive(Debug, Clone)]
pub struct ForWhom {
    pub path: String,
    pub requester: Requester,
    pub op: Op,
}

impl ForWhom {
    /// For an approved `request` (a dry run's: the call it runs) made for `requester`.
    pub fn of(request: &Request, requester: Requester) -> ForWhom {
        let op = match request {
            Request::Check { request } => request.op(),
            request => request.op(),
        };
        ForWhom { path: request.path().to_owned(), requester, op }
    }
}

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("root {path}: {source}")]
    Canonicalize { path: PathBuf, source: std::io::Error },
    #[error("root {path}: {source}")]
    Open { path: PathBuf, source: sys::Errno },
    #[error("root {0} is not a directory")]
    NotDirectory(PathBuf),
    #[error("no root configured: pass --writable-root or --readable-root")]
    NoRoots,
    #[error("allow_submounts {path}: {source}")]
    Submount { path: PathBuf, source: sys::Errno },
}

impl Backend {
    pub fn new(
        specs: &[RootSpec],
        fence: &Fence<'_>,
        limits: Limits,
        locks: Arc<dyn Locking>,
    ) -> Result<Backend, StartError> {
        if specs.is_empty() {
            return Err(StartError::NoRoots);
        }
        let mut merged: Vec<RootSpec> = Vec::new();
        for spec in specs {
            let path = std::fs::canonicalize(&spec.path)
                .map_err(|source| StartError::Canonicalize { path: spec.path.clone(), source })?;
            if !path.is_dir() {
                return Err(StartError::NotDirectory(path));
            }
            // The same directory named twice is writable if either names it so.
            match merged.iter_mut().find(|m| m.path == path) {
                Some(m) => m.writable |= spec.writable,
                None => merged.push(RootSpec { path, writable: spec.writable }),
            }
        }
        let mut allowed = Vec::new();
        for path in fence.submounts {
            let mount = sys::open_root(path)
                .and_then(|fd| sys::meta(sys::borrow(&fd)))
                .map_err(|source| StartError::Submount { path: path.clone(), source })?
                .mount;
            allowed.push(mount);
        }
        let mut roots = Vec::new();
        for (index, spec) in merged.iter().enumerate() {
            let open = |source| StartError::Open { path: spec.path.clone(), source };
            let fd = sys::open_root(&spec.path).map_err(open)?;
            let own = sys::meta(sys::borrow(&fd)).map_err(open)?;
            let mounts = std::iter::once(own.mount).chain(allowed.iter().copied()).collect();
            roots.push(Root {
                id: format!("r{index}"),
                path: spec.path.clone(),
                fd,
                writable: spec.writable,
                mounts: Some(mounts),
                dir: (own.dev, own.ino),
                mount: own.mount,
            });
        }
        let configured = roots.len();
        let journal = journal::Journal::open(&merged.iter().map(|m| m.path.clone()).collect::<Vec<_>>());
        if fence.host_root {
            let slash = PathBuf::from("/");
            let fd =
                sys::open_root(&slash).map_err(|source| StartError::Open { path: slash.clone(), source })?;
            let own = sys::meta(sys::borrow(&fd))
                .map_err(|source| StartError::Open { path: slash.clone(), source })?;
            roots.push(Root {
                id: "host".to_owned(),
                path: slash,
                fd,
                writable: true,
                mounts: None,
                dir: (own.dev, own.ino),
                mount: own.mount,
            });
        }
        Ok(Backend {
            roots,
            configured,
            protected: fence.protected.iter().map(OsString::from).collect(),
            read_denied: fence.read_denied.iter().map(|p| fsd_proto::glob::Glob::new(p)).collect(),
            allow_backslash: fence.allow_backslash,
            limits,
            locks,
            journal,
            intents: None,
            bound: Default::default(),
            named: Default::default(),
            vouched: Default::default(),
            made: Default::default(),
            for_whom: Default::default(),
            record: None,
            author: Default::default(),
            rewinding: Default::default(),
            last_recorded: Default::default(),
            carrier: Default::default(),
        })
    }

    /// Drops the temporary-file journal (a read-only worker makes no temporary file).
    pub fn without_journal(mut self) -> Backend {
        self.journal = journal::Journal::none();
        self
    }

    /// Where transactions write their intent records (`state_dir/txn`, see `txn`).
    pub fn with_intents(mut self, dir: Option<std::os::fd::OwnedFd>) -> Backend {
        self.intents = dir;
        self
    }

    /// Holds the next walks of the paths `bindings` names to the objects they bind, until the
    /// returned guard drops (one call: a worker serves its calls one at a time).
    pub fn bind(&self, bindings: Bindings, for_whom: Option<ForWhom>) -> BoundCall<'_> {
        self.bind_named(bindings, Vec::new(), Vec::new(), for_whom)
    }

    /// [`Backend::bind`], with the target keys each bound path must also resolve to (`named`:
    /// a read held to the names its approval lists, `escalation::WorkerCheck::check`) and the
    /// directories earlier calls of its approval made (`vouched`, checked by this worker), and
    /// whom it is made for (`for_whom`: none for a plain call).
    pub fn bind_named(
        &self,
        bindings: Bindings,
        named: Vec<(String, Vec<String>)>,
        vouched: Vec<Made>,
        for_whom: Option<ForWhom>,
    ) -> BoundCall<'_> {
        *self.for_whom.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = for_whom;
        *self.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = bindings;
        *self.named.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = named;
        *self.vouched.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = vouched;
        *self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        BoundCall(self)
    }

    /// What the approved call just run made below the last directory its approval names
    /// (see [`Backend::made`]); taken once.
    pub fn take_made(&self) -> Option<(ObjectId, Vec<ObjectId>)> {
        self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// Whether the walk of `path` may end at `key`: any key, unless the approved call being run
    /// names the targets this path may resolve to.
    fn named_target(&self, path: &str, key: &str) -> bool {
        let named = self.named.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        named.iter().filter(|(p, _)| p == path).all(|(_, keys)| keys.iter().any(|k| *k == for_people(key)))
    }

    /// The binding of `path` in the approved call being run, if any.
    fn binding_of(&self, path: &str) -> Option<Binding> {
        let bound = self.bound.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        bound.iter().find(|(p, _)| p == path).map(|(_, b)| b.clone())
    }

    /// Whether the walk `resolved` of `path`, the path the approved call being run names, ends
    /// on a file other names share that the call's requester could not itself act on so.
    fn beyond_requester(&self, path: &str, resolved: &Resolved) -> bool {
        let for_whom = self.for_whom.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(for_whom) = for_whom.as_ref().filter(|f| f.path == path) else { return false };
        resolved.meta.as_ref().is_some_and(|meta| Shown::of(meta).beyond(for_whom.requester, for_whom.op))
    }

    /// Whether the approved call being run was approved to create `path`, which then never
    /// replaces what appears at the name meanwhile (a link included).
    fn creation_only(&self, path: &str) -> bool {
        self.binding_of(path).is_some_and(|b| b.last == Last::Absent)
    }

    /// The temporary-file journal's directories (`journal::Journal::dirs`).
    pub fn journal_dirs(&self) -> Vec<std::os::fd::OwnedFd> {
        self.journal.dirs()
    }

    /// The journal scope of a resolved target's directory (none outside the configured roots).
    fn journal_scope(&self, resolved: &Resolved) -> journal::Scope<'_> {
        let dir = &resolved.rel[..resolved.rel.len().saturating_sub(1)];
        self.journal.scope(resolved.root, dir).recording(self.record.as_ref())
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// (path, writable) of each configured root.
    pub fn root_list(&self) -> Vec<(String, bool)> {
        self.roots[..self.configured].iter().map(|r| (resolve::path_string(&r.path), r.writable)).collect()
    }

    pub fn protected_names(&self) -> Vec<String> {
        self.protected.iter().map(|p| p.to_string_lossy().into_owned()).collect()
    }

    /// Runs one operation at the call's effective mode.
    pub fn handle(&self, mode: Mode, request: Request) -> Result<Outcome, Failure> {
        match request {
            Request::Stat { path, no_follow } => self.stat(mode, &path, no_follow),
            Request::CheckWrite { path, no_follow } => self.check_write(mode, &path, no_follow),
            Request::ReadText { path, max_bytes } => self.read_text(mode, &path, max_bytes),
            Request::ReadBytes { path, max_bytes } => self.read_bytes(mode, &path, max_bytes),
            Request::ListDir { path } => self.list_dir(mode, &path),
            // Every change goes through the one pipeline (`pipeline`).
            Request::WriteText { .. }
            | Request::EditText { .. }
            | Request::MoveFile { .. }
            | Request::DeleteFile { .. }
            | Request::Remove { .. } => match pipeline::Mutation::of(&request) {
                Some(mutation) => self.mutate(mode, mutation),
                None => Err(Failure::new(FsError::NotRegularFile, request.path())),
            },
            Request::Check { request } => self.dry_run(mode, &request),
            Request::Transact { ops } => self.transact(mode, ops),
            Request::Recorded { author, request } => self.recorded(mode, author, *request),
            Request::Checkpoint { author, label } => self.checkpoint(author, label),
            Request::Changes(query) => self.changes(query),
            Request::Rewind { author, query, keep_checkpoint } => {
                self.rewind(mode, author, query, keep_checkpoint)
            }
            // The approval is the worker's to check before the call gets here (`worker`).
            Request::Bound { bindings, requester, request, .. } => {
                let _bound = self.bind(bindings, Some(ForWhom::of(&request, requester)));
                self.handle(mode, *request)
            }
            // Only ever checked (`pipeline::Backend::dry_run`): an approved patch commits as the
            // writes and moves its approval lists.
            Request::PatchText { path, .. } => {
                Err(Failure::new(FsError::WriteTemp(std::io::Error::other("a patch is only checked")), path))
            }
            // The bytes travel on a pipe: `write_bytes` is called with it by the worker.
            Request::WriteBytes { path, .. } => {
                Err(Failure::new(FsError::WriteTemp(std::io::Error::other("no body was sent")), path))
            }
        }
    }

    /// The roots a mode may reach: danger-full-access adds the filesystem root.
    fn roots_for(&self, mode: Mode) -> &[Root] {
        match mode {
            Mode::DangerFullAccess => &self.roots,
            _ => &self.roots[..self.configured],
        }
    }

    fn walk(&self, mode: Mode, path: &str, options: WalkOptions) -> Result<Resolved, Failure> {
        let roots = self.roots_for(mode);
        // A write into a protected directory would be refused after creating the directories
        // on its way; refuse it before anything is created. The resolved check still follows.
        if options.create_parents && mode == Mode::WorkspaceWrite {
            let named = resolve::raw_components(path, self.allow_backslash).unwrap_or_default();
            if let Some(name) = named.iter().find(|c| self.protected.contains(c)) {
                let denial = Denial::Protected(resolve::escape_bytes(name.as_bytes()));
                return Err(Failure::new(FsError::Denied(denial), path));
            }
        }
        // A directory on the way to a denied name is not made for a call that will be refused.
        let may_create = |root: usize, rel: &[OsString]| {
            self.may_write(mode, root, rel)?;
            self.read_denied(root, rel)
        };
        let mut resolved = resolve::resolve(roots, path, self.allow_backslash, options, &may_create)
            .map_err(|e| Failure::new(e, path))?;
        // Every call resolves here, at every mode: a denied target is refused whatever the call
        // (a read, a write or an edit whose outcome holds the old text, a move or a delete).
        self.read_denied(resolved.root, &resolved.rel).map_err(|e| Failure::new(e, path))?;
        // An approved call acts only on what its approver was shown: this walk is the one the
        // call acts on, so it is the one held to the approval (dropped on a refusal, the walk's
        // own directories go with it).
        if let Some(binding) = self.binding_of(path) {
            let vouched = self.vouched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            binding.holds(&resolved, &vouched).map_err(|e| self.fail(e, &resolved))?;
            // The directories this walk made, with the ones beyond the approved directory it
            // stood in before them: what a later call of the same approval may stand in.
            if resolved.made.any()
                && let Some(below) = binding.dirs.last()
            {
                let beyond = resolved.dirs.get(binding.dirs.len()..).unwrap_or_default().to_vec();
                *self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((*below, beyond));
            }
            let key = resolve::target_key(&self.roots, resolved.root, &resolved.rel);
            if !self.named_target(path, &key) {
                return Err(self.fail(FsError::Denied(Denial::NotApproved), &resolved));
            }
            // What this walk found, not what the network process says was shown: a file other
            // names share is acted on within its requester's own authority only.
            if self.beyond_requester(path, &resolved) {
                return Err(self.fail(FsError::Denied(Denial::HardLinked), &resolved));
            }
            resolved.bound = true;
        }
        Ok(resolved)
    }

    /// Whether the resolved path `rel` below `root`, or a directory holding it, matches a
    /// `read_denied` glob: the one check of that rule, on names as the walk resolved them (a
    /// link is judged by where it leads). Patterns match the escaped absolute path.
    pub(super) fn read_denied(&self, root: usize, rel: &[OsString]) -> Result<(), FsError> {
        if self.read_denied.is_empty() {
            return Ok(());
        }
        let full = resolve::display_path(&self.roots, root, rel);
        // The path and each directory above it, longest first: `/a/b/c`, `/a/b`, `/a`.
        let prefixes =
            std::iter::successors(Some(full.as_str()), |p| p.rfind('/').filter(|&i| i > 0).map(|i| &p[..i]));
        for prefix in prefixes {
            if let Some(pattern) = self.read_denied.iter().find(|p| p.matches(prefix)) {
                return Err(FsError::ReadDenied {
                    pattern: pattern.as_str().to_owned(),
                    name: prefix.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// What an approval of `path` binds when a directory on its way is missing: the deepest
    /// ancestor that exists, and how many names below it the call would make; with the target
    /// key the call's walk will resolve to once it made them (the ancestor's, then the names).
    /// `None` when not even that resolves, or the rest holds a `..` (the call would fail, and
    /// is refused).
    fn binding_below(&self, mode: Mode, path: &str) -> Option<(Binding, String)> {
        let mut known = resolve::raw_components(path, self.allow_backslash).ok()?;
        let options = WalkOptions { follow_final: true, create_parents: false };
        let mut rest = Vec::new();
        loop {
            let name = known.pop()?;
            if name == ".." {
                return None;
            }
            rest.push(name);
            let prefix: Vec<String> = known.iter().map(|c| resolve::escape_bytes(c.as_bytes())).collect();
            match self.walk(mode, &format!("/{}", prefix.join("/")), options) {
                Ok(found) => {
                    let rel: Vec<std::ffi::OsString> =
                        found.rel.iter().cloned().chain(rest.iter().rev().cloned()).collect();
                    let key = resolve::target_key(&self.roots, found.root, &rel);
                    return Binding::below(&found, rest.len()).map(|binding| (binding, key));
                }
                Err(Failure { error: FsError::NotFound | FsError::NotDirectory, .. }) => {}
                Err(_) => return None,
            }
        }
    }

    /// Resolves for reading: links followed, nothing created.
    fn walk_read(&self, mode: Mode, path: &str) -> Result<Resolved, Failure> {
        self.walk(mode, path, WalkOptions { follow_final: true, create_parents: false })
    }

    fn target(&self, resolved: &Resolved) -> Target {
        Target {
            key: resolve::target_key(&self.roots, resolved.root, &resolved.rel),
            display: resolve::display_path(&self.roots, resolved.root, &resolved.rel),
        }
    }

    /// Whether `mode` may change what `resolved` names: the fence on its resolved components,
    /// and the protected names among the links the walk followed to reach it (a `.claude` that
    /// is a link to another directory protects that directory's files when reached through it).
    fn may_change(&self, mode: Mode, resolved: &Resolved) -> Result<(), FsError> {
        if mode == Mode::WorkspaceWrite
            && let Some(name) = resolved.links.iter().find(|c| self.protected.contains(c))
        {
            return Err(FsError::Denied(Denial::Protected(resolve::escape_bytes(name.as_bytes()))));
        }
        self.may_write(mode, resolved.root, &resolved.rel)
    }

    /// Whether `mode` may change `rel` below `root`: the fence as the resolver enforces it.
    fn may_write(&self, mode: Mode, root: usize, rel: &[OsString]) -> Result<(), FsError> {
        match mode {
            Mode::ReadOnly => Err(FsError::Denied(Denial::ReadOnly)),
            Mode::WorkspaceWrite => {
                if !self.roots[root].writable || root >= self.configured {
                    return Err(FsError::Denied(Denial::NotWritableRoot));
                }
                if let Some(name) = rel.iter().find(|c| self.protected.contains(c)) {
                    return Err(FsError::Denied(Denial::Protected(resolve::escape_bytes(name.as_bytes()))));
                }
                if let Some(depth) = self.git_dir_above(root, rel)? {
                    let shown = resolve::display_path(&self.roots, root, &rel[..depth]);
                    return Err(FsError::Denied(Denial::GitDirectory(shown)));
                }
                if let Some((name, dir)) = rel.split_last()
                    && self.would_become_git_dir(root, dir, name)?
                {
                    let shown = resolve::display_path(&self.roots, root, dir);
                    let entry = resolve::escape_bytes(name.as_bytes());
                    return Err(FsError::Denied(Denial::WouldBeGitDirectory { dir: shown, entry }));
                }
                #[cfg(feature = "fault-injection")]
                gitdir::pause_after_git_check(rel);
                Ok(())
            }
            Mode::DangerFullAccess => Ok(()),
        }
    }

    /// Whether `mode` may write `path` (the fence, not the guards), writing nothing: the dry
    /// plan of a write of it (`pipeline`; a path whose directories are missing is judged by the
    /// names the write would make). Answers the stat of the target.
    fn check_write(&self, mode: Mode, path: &str, no_follow: bool) -> Result<Outcome, Failure> {
        match self.plan_written(mode, path, !no_follow, None, true) {
            // Nothing to judge: the stat says what is missing.
            Ok(_) | Err(Failure { error: FsError::NotFound, .. }) => {}
            Err(failure) => return Err(failure),
        }
        self.stat(mode, path, no_follow)
    }

    /// Whether `meta` is the directory of one of the roots.
    fn is_root_dir(&self, meta: &sys::Meta) -> bool {
        self.roots.iter().any(|r| r.is_dir(meta))
    }

    /// A failure that names the resolved target (and, for a save kept at another name in its
    /// directory, that name's full path).
    fn fail(&self, error: FsError, resolved: &Resolved) -> Failure {
        let error = match error {
            FsError::KeptAside { reason, kept } => {
                let mut path = self.roots[resolved.root].path.clone();
                for dir in resolved.rel.iter().take(resolved.rel.len().saturating_sub(1)) {
                    path.push(dir);
                }
                path.push(kept);
                FsError::KeptAside { reason, kept: path }
            }
            error => error,
        };
        let target = self.target(resolved);
        Failure { error, path: target.display, target_key: Some(target.key.into()), operation: None }
    }

    /// Bounds a before/after pair for the reply.
    fn change(&self, before: Option<&str>, before_known: bool, after: Option<&str>) -> Change {
        let bound = self.limits.max_diff_text_bytes as usize;
        let fits = |t: Option<&str>| t.is_none_or(|t| t.len() <= bound);
        if before_known && fits(before) && fits(after) {
            Change { before: before.map(str::to_owned), after: after.map(str::to_owned), omitted: false }
        } else {
            Change { before: None, after: None, omitted: true }
        }
    }
}
