//! Path resolution: a component-by-component walk from the opened root directories. Each
//! component is opened `O_PATH|O_NOFOLLOW`; a symlink is followed by walking its target (relative
//! or absolute) with a bounded hop count; `..` never climbs above the root it is in. No string is
//! validated and then handed to the kernel again: every later syscall is relative to the
//! descriptors this walk returns.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::error::{Denial, FsError, PathProblem};
pub use crate::op::path_string;
use crate::op::{Binding, Last, MAX_COMPONENT_BYTES, MAX_PATH_BYTES, Made, ObjectId, Shown};
use crate::sys::{self, Errno, Kind, Meta};

/// At most this many symlinks are followed in one resolution (the kernel's own limit).
const MAX_LINK_HOPS: usize = 40;

/// A directory tree the daemon serves, opened once at startup.
#[derive(Debug)]
pub struct Root {
    pub id: String,
    pub path: PathBuf,
    pub fd: OwnedFd,
    pub writable: bool,
    /// The mounts a walk below this root may be on: the root's own, then the operator's
    /// `allow_submounts`. `None` (the filesystem root of danger-full-access): any mount.
    pub mounts: Option<Vec<u64>>,
    /// The root directory's device and inode: a walk that reaches it from another root is in
    /// this one.
    pub dir: (u64, u64),
    /// The mount the root directory is on.
    pub mount: u64,
}

impl Root {
    /// Whether `meta` is this root's directory (reached by any path).
    pub fn is_dir(&self, meta: &Meta) -> bool {
        self.dir == (meta.dev, meta.ino)
    }

    fn object(&self) -> ObjectId {
        ObjectId { dev: self.dir.0, ino: self.dir.1, mount: self.mount }
    }

    fn components(&self) -> Vec<&OsStr> {
        components(self.path.as_os_str())
    }

    /// Whether an object on mount `mount` may be reached below this root. A bind mount (or any
    /// other filesystem) mounted inside a root would otherwise put whatever it shows inside
    /// the fence, and Landlock, which follows mounts, would not stop it either.
    pub fn may_enter(&self, mount: u64) -> bool {
        self.mounts.as_ref().is_none_or(|allowed| allowed.contains(&mount))
    }
}

/// Asked before a missing parent directory is created: may `mode` create `rel` below `root`?
pub type MayCreate<'a> = &'a dyn Fn(usize, &[OsString]) -> Result<(), FsError>;

/// Where a path leads: the parent directory's handle and the final name, with identity.
#[derive(Debug)]
pub struct Resolved {
    pub root: usize,
    /// Components below the root, the final name included (empty for the root itself).
    pub rel: Vec<OsString>,
    /// The parent directory of the final component; `None` when the target is a root.
    pub parent: Option<OwnedFd>,
    /// What the final name is now (`None`: absent). Never a symlink when links are followed.
    pub meta: Option<Meta>,
    /// The parent directories this walk created, removed again unless the call keeps them.
    pub made: MadeDirs,
    /// The names of the links the walk followed on its way, which `rel` no longer shows: a
    /// protected name that is a link protects what it leads to (`Backend::may_change`).
    pub links: Vec<OsString>,
    /// Every directory the walk stands in, from its root down to `parent`: what an approval of
    /// this target binds ([`Binding`]).
    pub dirs: Vec<ObjectId>,
    /// Whether an approved call's [`Binding`] was checked on this walk: its later opens of the
    /// final name must find the same object too ([`Resolved::same_final`]).
    pub bound: bool,
}

/// The directories one walk created, outermost first. Dropped without [`MadeDirs::keep`] (the
/// call failed), each is removed again, deepest first, if it is still the directory made: rmdir
/// refuses one that holds anything, so what another call put there meanwhile stays, and so do
/// the directories above it.
#[derive(Debug, Default)]
pub struct MadeDirs {
    dirs: Vec<(OwnedFd, OsString, (u64, u64))>,
    kept: std::cell::Cell<bool>,
}

impl MadeDirs {
    /// The call succeeded: its directories stay.
    pub fn keep(&self) {
        self.kept.set(true);
    }

    /// Whether the walk made any directory.
    pub fn any(&self) -> bool {
        !self.dirs.is_empty()
    }
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        if self.kept.get() {
            return;
        }
        for (parent, name, made) in self.dirs.drain(..).rev() {
            let ours = sys::meta_at(parent.as_fd(), &name)
                .is_ok_and(|m| m.kind == Kind::Directory && (m.dev, m.ino) == made);
            if !ours {
                continue;
            }
            if let Err(errno) = sys::remove_dir(parent.as_fd(), &name) {
                tracing::debug!(?name, %errno, "a directory a failed write made stays");
            }
        }
    }
}

impl Resolved {
    /// The final component's name (empty for a root).
    pub fn name(&self) -> &OsStr {
        self.rel.last().map(OsString::as_os_str).unwrap_or(OsStr::new(""))
    }

    /// What an approval of this target binds: the directories walked and the final object.
    pub fn binding(&self) -> Binding {
        Binding {
            dirs: self.dirs.clone(),
            missing: 0,
            last: match &self.meta {
                Some(meta) => Last::Is(ObjectId::of(meta), Shown::of(meta)),
                None => Last::Absent,
            },
        }
    }

    /// Whether `opened` (what a later look at the final name found, `None`: nothing) is the
    /// object a bound walk resolved: an approved call acts only on what its approver was shown,
    /// whatever was put at the name since. Unbound walks are not held to it (an editor's save
    /// between a walk and its open is no error for them).
    pub fn same_final(&self, opened: Option<&Meta>) -> Result<(), FsError> {
        if self.bound && self.meta.as_ref().map(ObjectId::of) != opened.map(ObjectId::of) {
            return Err(FsError::Denied(Denial::NotApproved));
        }
        Ok(())
    }
}

// The walk's side of the approval vocabulary (`crate::op::binding`): the objects a walk stood on.

impl ObjectId {
    pub fn of(meta: &Meta) -> ObjectId {
        ObjectId { dev: meta.dev, ino: meta.ino, mount: meta.mount }
    }
}

impl Shown {
    pub(super) fn of(meta: &Meta) -> Shown {
        Shown { uid: meta.uid, gid: meta.gid, mode: meta.mode, nlink: meta.nlink }
    }
}

impl Binding {
    /// The binding of a target whose directories are missing from some point on: `found` is
    /// the walk of the deepest ancestor that resolved, `below` the components after it (the
    /// final name included).
    pub fn below(found: &Resolved, below: usize) -> Option<Binding> {
        let mut dirs = found.dirs.clone();
        let missing = match &found.meta {
            // The ancestor's own name is missing too: made by the call, like the ones below.
            None => below,
            Some(meta) if meta.kind == Kind::Directory => {
                dirs.push(ObjectId::of(meta));
                below.checked_sub(1)?
            }
            Some(_) => return None,
        };
        Some(Binding { dirs, missing, last: Last::Absent })
    }

    /// Whether `resolved` (this call's walk) is the bound object: the same directories, any
    /// more of them made by this very walk, and the same final entry.
    /// `vouched`: the directories earlier calls of the same approval made, as their workers
    /// vouched (checked by this worker), which the walk may stand in as if it made them.
    pub fn holds(&self, resolved: &Resolved, vouched: &[Made]) -> Result<(), FsError> {
        let refused = Err(FsError::Denied(Denial::NotApproved));
        let (known, more) = match resolved.dirs.split_at_checked(self.dirs.len()) {
            Some(split) => split,
            None => return refused,
        };
        let made = |d: &ObjectId| resolved.made.dirs.iter().any(|(_, _, made)| *made == (d.dev, d.ino));
        // One chain vouched below the last directory approved: each directory beyond it made
        // by this walk, or the one that chain has at that depth.
        let below = |v: &&Made| Some(&v.below) == self.dirs.last();
        let made_or_vouched = |v: Option<&Made>| {
            more.iter().enumerate().all(|(i, d)| made(d) || v.is_some_and(|v| v.dirs.get(i) == Some(d)))
        };
        let made_here = more.len() <= self.missing
            && (made_or_vouched(None) || vouched.iter().filter(below).any(|v| made_or_vouched(Some(v))));
        if known != self.dirs.as_slice() || !made_here {
            return refused;
        }
        let walked = resolved.meta.as_ref().map(ObjectId::of);
        let same = match self.last {
            Last::Absent => walked.is_none(),
            Last::Is(object, _) => walked == Some(object),
            Last::Unchecked => true,
        };
        if same { Ok(()) } else { refused }
    }
}

/// How to treat the final component and missing parents.
#[derive(Debug, Clone, Copy)]
pub struct WalkOptions {
    /// Follow a final symlink (reads and writes through links) or stop at it (delete, move).
    pub follow_final: bool,
    /// Create missing parent directories (writes), after `may_create` allows each one.
    pub create_parents: bool,
}

/// Splits a path into its normal components, dropping empty ones and `.`.
pub fn components(path: &OsStr) -> Vec<&OsStr> {
    path.as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(OsStr::from_bytes)
        .collect()
}

/// Checks a request path before any syscall.
pub fn validate(path: &str) -> Result<(), FsError> {
    if path.is_empty() {
        return Err(FsError::InvalidPath(PathProblem::Empty));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(FsError::InvalidPath(PathProblem::TooLong));
    }
    if path.as_bytes().contains(&0) {
        return Err(FsError::InvalidPath(PathProblem::Nul));
    }
    let bytes = path.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(FsError::InvalidPath(PathProblem::DriveLetter));
    }
    if !path.starts_with('/') {
        return Err(FsError::InvalidPath(PathProblem::Relative));
    }
    if components(OsStr::new(path)).iter().any(|c| c.len() > MAX_COMPONENT_BYTES) {
        return Err(FsError::InvalidPath(PathProblem::ComponentTooLong));
    }
    Ok(())
}

/// The raw name bytes of a request path's components: each is unescaped
/// ([`fsd_proto::names`]), so a name as a listing displays it reaches exactly that file. A
/// backslash that starts no escape is refused unless the operator allows it:
/// `..\\..\\etc\\passwd` or `C:\\Users\\x.txt` would otherwise become one literal name.
pub fn raw_components(path: &str, allow_backslash: bool) -> Result<Vec<OsString>, FsError> {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::new();
    for c in components(OsStr::new(path)) {
        let text = c.to_str().ok_or(FsError::InvalidPath(PathProblem::NotUtf8))?;
        let raw = match fsd_proto::names::unescape(text, allow_backslash) {
            Ok(raw) => raw,
            Err(fsd_proto::names::Unescape::LoneBackslash) => {
                return Err(FsError::InvalidPath(PathProblem::Backslash));
            }
            Err(fsd_proto::names::Unescape::BadCodePoint) => {
                return Err(FsError::InvalidPath(PathProblem::BadEscape));
            }
        };
        if raw.contains(&b'/') || raw.contains(&0) {
            return Err(FsError::InvalidPath(PathProblem::EscapedSeparator));
        }
        if raw.len() > MAX_COMPONENT_BYTES {
            return Err(FsError::InvalidPath(PathProblem::ComponentTooLong));
        }
        // An escaped `.` (`\x2e`) is still this directory: kept, it would give one file a
        // second target key (and so a second lock), and let `root/\x2e` pass for a name below
        // the root.
        if raw == b"." {
            continue;
        }
        out.push(OsString::from_vec(raw));
    }
    Ok(out)
}

/// A trailing slash says the target is a directory: one that is not (a file, a link, nothing)
/// is refused rather than served as if the slash were not there.
fn check_trailing_slash(path: &str, meta: Option<&Meta>) -> Result<(), FsError> {
    if path.len() > 1 && path.ends_with('/') && meta.is_none_or(|m| m.kind != Kind::Directory) {
        return Err(FsError::InvalidPath(PathProblem::TrailingSlash));
    }
    Ok(())
}

/// The root with the longest component prefix of `path`, and the remaining components.
fn pick_root<'p>(roots: &[Root], path: &[&'p OsStr]) -> Option<(usize, Vec<&'p OsStr>)> {
    let mut best: Option<(usize, usize)> = None;
    for (index, root) in roots.iter().enumerate() {
        let prefix = root.components();
        if prefix.len() <= path.len()
            && prefix.iter().zip(path).all(|(a, b)| a == b)
            && best.is_none_or(|(_, len)| prefix.len() > len)
        {
            best = Some((index, prefix.len()));
        }
    }
    best.map(|(index, len)| (index, path[len..].to_vec()))
}

/// The walker's state: the root it is in and the open directories below it.
struct Walk<'r> {
    roots: &'r [Root],
    root: usize,
    /// `dirs[i]` is the directory `rel[..i]`; `dirs` is one longer than `rel`'s directory part.
    dirs: Vec<OwnedFd>,
    /// The identity of each of `dirs`.
    ids: Vec<ObjectId>,
    rel: Vec<OsString>,
}

impl<'r> Walk<'r> {
    fn enter_root(&mut self, root: usize) -> Result<(), FsError> {
        self.root = root;
        self.rel.clear();
        self.dirs.clear();
        self.ids.clear();
        let dup = self.roots[root].fd.try_clone().map_err(|e| FsError::Walk(errno_of(&e)))?;
        self.dirs.push(dup);
        self.ids.push(self.roots[root].object());
        Ok(())
    }

    fn current(&self) -> Result<&OwnedFd, FsError> {
        self.dirs.last().ok_or(FsError::OutsideRoots)
    }
}

fn errno_of(err: &std::io::Error) -> Errno {
    Errno::from_io_error(err).unwrap_or(Errno::IO)
}

/// Resolves an absolute request path against the roots.
///
/// `may_create(root, rel_of_new_dir)` is asked before each missing parent is created.
pub fn resolve(
    roots: &[Root],
    path: &str,
    allow_backslash: bool,
    options: WalkOptions,
    may_create: MayCreate<'_>,
) -> Result<Resolved, FsError> {
    validate(path)?;
    let all = raw_components(path, allow_backslash)?;
    let all: Vec<&OsStr> = all.iter().map(OsString::as_os_str).collect();
    let (root, rest) = pick_root(roots, &all).ok_or(FsError::OutsideRoots)?;
    let mut walk = Walk { roots, root, dirs: Vec::new(), ids: Vec::new(), rel: Vec::new() };
    walk.enter_root(root)?;

    let mut queue: std::collections::VecDeque<OsString> = rest.into_iter().map(OsStr::to_os_string).collect();
    let mut hops = 0usize;
    let mut last: Option<(OsString, Option<Meta>)> = None;
    // Dropped on any error below, which removes what was made so far.
    let mut made = MadeDirs::default();
    let mut links = Vec::new();

    while let Some(mut name) = queue.pop_front() {
        if name == ".." {
            if walk.rel.is_empty() {
                return Err(FsError::OutsideRoots);
            }
            walk.rel.pop();
            walk.dirs.pop();
            walk.ids.pop();
            continue;
        }
        let is_final = queue.is_empty();
        let dir = walk.current()?;
        let handle = match sys::open_component(dir.as_fd(), &name) {
            Ok(handle) => handle,
            Err(Errno::NOENT) if is_final => {
                last = Some((name, None));
                break;
            }
            Err(Errno::NOENT) => {
                // `name` is missing, and so is everything after it until a `..` climbs back
                // out (a directory about to be made holds nothing, not even a link): each such
                // `..` cancels the component before it. A path that only passes through a
                // missing directory goes on from here, and one that climbs out of the roots
                // fails, before anything is created for it.
                let mut inside = vec![std::mem::take(&mut name)];
                while !inside.is_empty() {
                    let Some(next) = queue.pop_front() else { break };
                    if next == ".." {
                        inside.pop();
                    } else {
                        inside.push(next);
                    }
                }
                let mut inside = inside.into_iter();
                let Some(first) = inside.next() else { continue };
                name = first;
                for c in inside.rev() {
                    queue.push_front(c);
                }
                if queue.is_empty() {
                    last = Some((name, None));
                    break;
                }
                if !options.create_parents {
                    return Err(FsError::NotFound);
                }
                let mut rel = walk.rel.clone();
                rel.push(name.clone());
                may_create(walk.root, &rel)?;
                let created = match sys::make_dir(dir.as_fd(), &name) {
                    Ok(()) => true,
                    // Another call made it: its directory, not this call's to remove.
                    Err(Errno::EXIST) => false,
                    Err(errno) => return Err(FsError::MakeDir(errno)),
                };
                let handle = sys::open_component(dir.as_fd(), &name).map_err(FsError::Walk)?;
                if created {
                    let meta = sys::meta(handle.as_fd()).map_err(FsError::Metadata)?;
                    let parent = dir.try_clone().map_err(|e| FsError::Walk(errno_of(&e)))?;
                    made.dirs.push((parent, name.clone(), (meta.dev, meta.ino)));
                    // Asked again now that it exists: a call racing this one may have made
                    // what the first answer did not see (a git directory's other pieces). A
                    // refusal now removes it with the rest of `made`.
                    may_create(walk.root, &rel)?;
                }
                handle
            }
            Err(Errno::NOTDIR) => return Err(FsError::NotDirectory),
            Err(errno) => return Err(FsError::Walk(errno)),
        };
        let meta = sys::meta(handle.as_fd()).map_err(FsError::Metadata)?;
        if !walk.roots[walk.root].may_enter(meta.mount) {
            let mut rel = walk.rel.clone();
            rel.push(name);
            return Err(FsError::Denied(Denial::Submount(display_path(roots, walk.root, &rel))));
        }
        match meta.kind {
            Kind::Symlink if !is_final || options.follow_final => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(FsError::TooManyLinks);
                }
                let target = sys::read_link(handle.as_fd()).map_err(FsError::Walk)?;
                links.push(name);
                let target_components: Vec<OsString> =
                    components(&target).into_iter().map(OsStr::to_os_string).collect();
                if target.as_bytes().starts_with(b"/") {
                    let borrowed: Vec<&OsStr> = target_components.iter().map(OsString::as_os_str).collect();
                    let (next_root, rest) = pick_root(roots, &borrowed).ok_or(FsError::OutsideRoots)?;
                    let rest: Vec<OsString> = rest.into_iter().map(OsStr::to_os_string).collect();
                    walk.enter_root(next_root)?;
                    for c in rest.into_iter().rev() {
                        queue.push_front(c);
                    }
                } else {
                    for c in target_components.into_iter().rev() {
                        queue.push_front(c);
                    }
                }
            }
            // Another root reached from inside this one (a `..` or a relative link into a root
            // nested below it): the walk goes on in that root, whose own fence decides, as it
            // does for the same directory named by its own path.
            Kind::Directory if let Some(nested) = nested_root(roots, walk.root, &meta) => {
                walk.enter_root(nested)?;
                if is_final {
                    break;
                }
            }
            Kind::Directory if !is_final => {
                walk.rel.push(name);
                walk.dirs.push(handle);
                walk.ids.push(ObjectId::of(&meta));
            }
            _ if !is_final => return Err(FsError::NotDirectory),
            _ => {
                last = Some((name, Some(meta)));
                break;
            }
        }
    }

    match last {
        Some((name, meta)) => {
            check_trailing_slash(path, meta.as_ref())?;
            let parent = walk.dirs.pop().ok_or(FsError::OutsideRoots)?;
            let mut rel = walk.rel;
            rel.push(name);
            let dirs = walk.ids;
            Ok(Resolved { root: walk.root, rel, parent: Some(parent), meta, made, links, dirs, bound: false })
        }
        // The path ended on a directory we entered (or on `..`): the target is that directory.
        None => {
            let target = walk.dirs.pop().ok_or(FsError::OutsideRoots)?;
            let meta = sys::meta(target.as_fd()).map_err(FsError::Metadata)?;
            let parent = walk.dirs.pop();
            let mut dirs = walk.ids;
            dirs.pop();
            let (root, rel) = (walk.root, walk.rel);
            Ok(Resolved { root, rel, parent, meta: Some(meta), made, links, dirs, bound: false })
        }
    }
}

/// The root, other than `current`, whose directory `meta` is.
fn nested_root(roots: &[Root], current: usize, meta: &Meta) -> Option<usize> {
    roots.iter().enumerate().position(|(i, r)| i != current && r.is_dir(meta))
}

/// The opaque key of a resolved target: root id and the path below it.
pub fn target_key(roots: &[Root], root: usize, rel: &[OsString]) -> String {
    // Escaped, not lossy: two distinct names never share a key (and so a lock or an
    // observation).
    let mut key = roots[root].id.clone();
    key.push(':');
    for (i, c) in rel.iter().enumerate() {
        if i > 0 {
            key.push('/');
        }
        key.push_str(&fsd_proto::names::escape(c.as_bytes()));
    }
    key
}

/// The canonical absolute path of a resolved target, for display.
pub fn display_path(roots: &[Root], root: usize, rel: &[OsString]) -> String {
    let mut path: PathBuf = roots[root].path.clone();
    for c in rel {
        path.push(c);
    }
    path_string(&path)
}

/// Escapes a name for display (see [`fsd_proto::names::escape`]).
pub fn escape_bytes(bytes: &[u8]) -> String {
    fsd_proto::names::escape(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_refuses_bad_input_before_any_syscall() {
        let check = |path: &str, ok: bool| assert_eq!(validate(path).is_ok(), ok, "{path:?}");
        check("/ws/a.txt", true);
        check("C:/Users/x.txt", false);
        check("c:\\Users\\x.txt", false);
        check("", false);
        check("relative/a.txt", false);
        check("/ws/a\0b", false);
        check(&format!("/{}", "a".repeat(256)), false);
        check(&format!("/{}", "a".repeat(255)), true);
        check(&format!("/{}", "a/".repeat(2049)), false);
    }

    #[test]
    fn request_paths_unescape_to_raw_names() {
        let check = |path: &str, allow: bool, want: Option<&[&[u8]]>| {
            let got = raw_components(path, allow).ok();
            let got: Option<Vec<Vec<u8>>> = got.map(|v| v.iter().map(|c| c.as_bytes().to_vec()).collect());
            let want: Option<Vec<Vec<u8>>> = want.map(|w| w.iter().map(|c| c.to_vec()).collect());
            assert_eq!(got, want, "{path:?} {allow}");
        };
        check("/ws/a.txt", false, Some(&[b"ws", b"a.txt"]));
        check("/ws/..\\..\\etc\\passwd", false, None);
        check("/ws/C:\\Users\\x.txt", false, None);
        check("/ws/a\\b", true, Some(&[b"ws", b"a\\b"]));
        check("/ws/a\\\\b", false, Some(&[b"ws", b"a\\b"]));
        check("/ws/\\xffa", false, Some(&[b"ws", b"\xffa"]));
        check("/ws/\\\\xffa", false, Some(&[b"ws", b"\\xffa"]));
        check("/ws/a\\x2fb", false, None);
        check("/ws/a\\x00b", false, None);
        check("/ws/\\x2e/a.txt", false, Some(&[b"ws", b"a.txt"]));
        check("/ws/\\x2e\\x2e/a.txt", false, Some(&[b"ws", b"..", b"a.txt"]));
    }

    #[test]
    fn components_drop_empty_and_dot() {
        let got: Vec<_> = components(OsStr::new("//ws/./a//b/../c/")).into_iter().collect();
        let want: Vec<&OsStr> = ["ws", "a", "b", "..", "c"].into_iter().map(OsStr::new).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn escape_keeps_distinct_invalid_names_distinct() {
        assert_eq!(escape_bytes(b"caf\xc3\xa9"), "café");
        assert_eq!(escape_bytes(b"a\xffb"), "a\\xffb");
        assert_ne!(escape_bytes(b"\xffa"), escape_bytes(b"\\xffa"));
        assert_ne!(escape_bytes(b"\xfe"), escape_bytes(b"\xff"));
    }
}
