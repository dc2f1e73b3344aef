//! What an approval binds: the objects the walk of a path stood on when the approver was asked,
//! which the worker performing the approved call holds its own walk to, and what was signed.

use serde::{Deserialize, Serialize};

use super::Op;

/// One object as the kernel names it: device, inode and the mount it was reached on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectId {
    pub dev: u64,
    pub ino: u64,
    pub mount: u64,
}

/// What a person is shown of an existing final object besides its identity: who owns it, its
/// permission bits and its hard links (a file with more than one is reachable by other names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shown {
    pub uid: u32,
    pub gid: u32,
    /// `st_mode`, file type included.
    pub mode: u32,
    pub nlink: u64,
}

impl Shown {
    /// Whether a requester of Unix uid `uid` (`None`: a client with no Unix identity, which
    /// holds no authority of its own over any file) could itself read (or, with `write`, change)
    /// the content of this object. Group bits do not count (the daemon does not know the
    /// requester's groups): a refusal errs on the safe side.
    pub fn grants(&self, uid: Option<u32>, write: bool) -> bool {
        let bit = if write { 0o2 } else { 0o4 };
        match uid {
            Some(0) => true,
            Some(uid) if uid == self.uid => self.mode & (bit << 6) != 0,
            Some(_) => self.mode & bit != 0,
            None => false,
        }
    }

    /// A file other names share: more than one hard link (directories always have several).
    pub fn hard_linked(&self) -> bool {
        self.mode & 0o170000 != 0o040000 && self.nlink > 1
    }

    /// Whether an approved `op` on this object would act with more authority than its
    /// requester has: a file other names share (a root-only one among them, perhaps) that the
    /// requester could not itself read, or for a change write. An approver is shown one name,
    /// not the others, so such a call is refused whatever was approved. The one rule, applied
    /// twice: by the network process before anyone is asked (`service::escalate`), and by the
    /// worker performing the call on what its own walk found (`backend`), so a network process
    /// that skips its check, or a link made since, is still refused.
    pub fn beyond(&self, requester: Requester, op: Op) -> bool {
        self.hard_linked() && !self.grants(requester.uid, op.is_mutation())
    }
}

/// Whom an approved call is made for, as far as the files' own permissions go: its requester's
/// Unix uid (`None`: a client with no Unix identity, which holds no authority of its own over
/// any file). Handed with the call to the worker that performs it ([`Shown::beyond`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requester {
    pub uid: Option<u32>,
}

/// The final entry of a bound target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Last {
    /// Nothing at the name: an approved creation, which never replaces what appears there.
    Absent,
    /// This object.
    Is(ObjectId, Shown),
    /// Whatever an earlier call of the same approval left there (an apply_patch operation):
    /// the directories still bind.
    Unchecked,
}

/// The object an approval names, as the walk of its path resolved it when the approver was
/// asked: each directory it stood in (root first, mount included), the components below them
/// that did not exist yet (which only the approved call may create), and the final entry. The
/// worker performing the approved call walks the path again, once, and refuses
/// (`Denial::NotApproved`) if its own walk stands anywhere else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub dirs: Vec<ObjectId>,
    /// Directories below `dirs` missing when described (the final name not counted).
    pub missing: usize,
    pub last: Last,
}

/// What an approver signed, handed with an approved call to the worker that performs it, which
/// checks it itself (`escalation::WorkerCheck`): the network process cannot grant what no person approved.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedApproval {
    pub description: String,
    pub decider: String,
    pub signature: Vec<u8>,
}

impl std::fmt::Debug for SignedApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedApproval").field("decider", &self.decider).finish_non_exhaustive()
    }
}

/// The directories an approved call made below the deepest existing directory its approval
/// names (`makes-directories:`), vouched for by the worker that made them: a tag under a key
/// only workers hold (the network process never sees it), over the approval's description,
/// that directory and the ones made, outermost first. A later call of the same approval that
/// finds them on its way may walk through them as if it had made them itself; nothing else can
/// (`backend::resolve`'s `Binding::holds`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    pub below: ObjectId,
    pub dirs: Vec<ObjectId>,
    pub tag: Vec<u8>,
}

/// Which object of a bound path the call's process keeps rights on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The final entry itself (a file read, a directory listed).
    Object,
    /// The deepest existing directory the call changes names in: the target's parent, or the
    /// directory below which it makes the missing ones.
    Directory,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_file_is_acted_on_within_its_requesters_own_authority() {
        let file = |mode: u32, nlink: u64| Shown { uid: 1000, gid: 1000, mode: 0o100000 | mode, nlink };
        let dir = Shown { uid: 0, gid: 0, mode: 0o040700, nlink: 5 };
        // (object, requester's uid, call, beyond its authority)
        let cases = [
            (file(0o600, 1), Some(2000), Op::ReadText, false),
            (file(0o600, 2), Some(2000), Op::ReadText, true),
            (file(0o600, 2), Some(1000), Op::ReadText, false),
            (file(0o400, 2), Some(1000), Op::WriteText, true),
            (file(0o644, 2), Some(2000), Op::ReadText, false),
            (file(0o644, 2), Some(2000), Op::EditText, true),
            (file(0o646, 2), Some(2000), Op::MoveFile, false),
            (file(0o600, 2), Some(0), Op::DeleteFile, false),
            (file(0o666, 2), None, Op::ReadText, true),
            (dir, Some(2000), Op::ReadText, false),
        ];
        for (shown, uid, op, beyond) in cases {
            assert_eq!(shown.beyond(Requester { uid }, op), beyond, "{shown:?} {uid:?} {op:?}");
        }
    }
}
