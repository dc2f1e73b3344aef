//! The least authority an approved call runs with in a danger-full-access worker. Such a worker
//! runs as the daemon (root) to reach any file an approver may let a call touch; each approved
//! call runs in a process of its own (`sys::call`) that keeps, of that authority, only what its
//! kind of call needs: Landlock rights on the approved objects alone, and the few capabilities
//! below. The tables are data, each entry with its reason; `docs/escalation.md` says the same to
//! operators.

use rustix::thread::CapabilitySet;

use crate::op::Request;
use crate::op::Scope;
use crate::sys::confine::Grant;

/// What an approved call does to its objects, which decides the rights it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stat or a write check: metadata, and the file opened for its version's generation.
    Look,
    /// A file's content (readText, readBytes, a stream).
    Read,
    /// A directory's entries.
    List,
    /// A write, edit, move, deletion, upload or removal.
    Change,
}

impl Kind {
    pub fn of(request: &Request) -> Kind {
        match request.plain() {
            Request::Stat { .. } | Request::CheckWrite { .. } => Kind::Look,
            Request::ReadText { .. } | Request::ReadBytes { .. } => Kind::Read,
            Request::ListDir { .. } => Kind::List,
            Request::WriteText { .. }
            | Request::EditText { .. }
            | Request::MoveFile { .. }
            | Request::DeleteFile { .. }
            | Request::WriteBytes { .. }
            | Request::Remove { .. }
            | Request::PatchText { .. }
            | Request::Transact { .. } => Kind::Change,
            Request::Bound { request, .. } | Request::Recorded { request, .. } => Kind::of(request),
            // A dry run (an escalation's preview) reads what the call it checks would change,
            // and changes nothing.
            Request::Check { request } => match Kind::of(request) {
                Kind::Change => Kind::Read,
                kind => kind,
            },
            // The change record's own calls are never approved ones: they reach no file.
            Request::Checkpoint { .. } | Request::Changes(_) | Request::Rewind { .. } => Kind::Look,
        }
    }

    /// Where the call's process keeps Landlock rights, and which; every other path of the
    /// filesystem is refused to it.
    pub fn grant(self, binding: &crate::op::Binding) -> (Scope, Grant) {
        use crate::op::Last;
        match (self, &binding.last) {
            // The file itself: not its siblings, not the directory. A stat opens it too: a
            // version holds the inode's generation, which only an open file tells.
            (Kind::Look | Kind::Read, Last::Is(..)) if binding.missing == 0 => {
                (Scope::Object, Grant::ReadFile)
            }
            // A target an approved change may have replaced already (the reads an apply_patch
            // preflight takes): whatever file is in the approved directory.
            (Kind::Look | Kind::Read, _) => (Scope::Directory, Grant::Read),
            // The directory and what is in it: each entry's version holds its inode's generation,
            // which only an open file tells (no content is read).
            (Kind::List, _) => (Scope::Object, Grant::Read),
            // Names are made, replaced and removed in the directory: the atomic replace's
            // temporary file, a move's two ends, the directories a write makes below it.
            (Kind::Change, _) => (Scope::Directory, Grant::Write),
        }
    }

    /// The capabilities the call's process keeps; every other one is dropped.
    pub fn capabilities(self) -> &'static [Keep] {
        match self {
            Kind::Look | Kind::Read | Kind::List => READ,
            Kind::Change => CHANGE,
        }
    }
}

/// A capability an approved call keeps, and why.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub capability: CapabilitySet,
    pub name: &'static str,
    pub why: &'static str,
}

/// What a read, a listing or a stat keeps.
pub const READ: &[Keep] = &[Keep {
    capability: CapabilitySet::DAC_READ_SEARCH,
    name: "DAC_READ_SEARCH",
    why: "walking to the approved object through directories, and reading a file, whose modes exclude the daemon's uid",
}];

/// What a change keeps.
pub const CHANGE: &[Keep] = &[
    Keep {
        capability: CapabilitySet::DAC_READ_SEARCH,
        name: "DAC_READ_SEARCH",
        why: "walking to the approved object through directories whose modes exclude the daemon's uid",
    },
    Keep {
        capability: CapabilitySet::DAC_OVERRIDE,
        name: "DAC_OVERRIDE",
        why: "writing into the approved directory and file when their modes exclude the daemon's uid (another user's 0700 directory)",
    },
    Keep {
        capability: CapabilitySet::CHOWN,
        name: "CHOWN",
        why: "keeping a replaced file's owner and group on the new content (the atomic replace's temporary file)",
    },
    Keep {
        capability: CapabilitySet::FOWNER,
        name: "FOWNER",
        why: "keeping a replaced file's mode and attributes on the temporary file once it is given to its owner",
    },
    Keep {
        capability: CapabilitySet::FSETID,
        name: "FSETID",
        why: "keeping a replaced file's set-group-id bit when its group is not the daemon's",
    },
];

/// What a change keeps when it runs as the owner of everything it changes ([`owner`]): its own
/// permissions decide what it may write.
pub const OWNER: &[Keep] = &[Keep {
    capability: CapabilitySet::DAC_READ_SEARCH,
    name: "DAC_READ_SEARCH",
    why: "walking to the owner's directory through directories the owner may not search (another user's 0700 directory on the way)",
}];

/// A directory or file an approved change acts on, as the identity choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// The identity an approved change runs as instead of root: the one user other than root who
/// owns every directory it makes, replaces or removes names in (`dirs`, each writable and
/// searchable by its owner) and every existing file it acts on (`files`, all of one group),
/// with that group (the files', or the first directory's when the change creates). Such a user
/// could make the change itself, so the change needs no more than that user's authority; a
/// call that touches anything of anyone else, or of root, keeps root ([`CHANGE`]).
pub fn owner(dirs: &[Owned], files: &[Owned]) -> Option<(u32, u32)> {
    let uid = dirs.first()?.uid;
    let writable = |d: &Owned| d.uid == uid && d.mode & 0o300 == 0o300;
    if uid == 0 || !dirs.iter().all(writable) || !files.iter().all(|f| f.uid == uid) {
        return None;
    }
    let gid = files.first().map_or(dirs[0].gid, |f| f.gid);
    files.iter().all(|f| f.gid == gid).then_some((uid, gid))
}

/// The set a table keeps.
pub fn kept(table: &[Keep]) -> CapabilitySet {
    table.iter().fold(CapabilitySet::empty(), |set, keep| set | keep.capability)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_kept_has_a_reason_and_reads_keep_no_write_authority() {
        for table in [READ, CHANGE, OWNER] {
            let mut seen = CapabilitySet::empty();
            for keep in table {
                assert!(!keep.why.trim().is_empty(), "{} has no reason", keep.name);
                assert_eq!(format!("{:?}", keep.capability), format!("CapabilitySet({})", keep.name));
                assert!(!seen.contains(keep.capability), "{} listed twice", keep.name);
                seen |= keep.capability;
            }
        }
        let writing = CapabilitySet::DAC_OVERRIDE | CapabilitySet::CHOWN | CapabilitySet::FOWNER;
        assert!((kept(READ) & writing).is_empty());
        assert!((kept(OWNER) & writing).is_empty());
        // Nothing that changes the system, whatever the call.
        let system = CapabilitySet::SYS_ADMIN
            | CapabilitySet::SETUID
            | CapabilitySet::SETGID
            | CapabilitySet::SETPCAP
            | CapabilitySet::NET_ADMIN
            | CapabilitySet::SYS_MODULE
            | CapabilitySet::SYS_PTRACE
            | CapabilitySet::MKNOD
            | CapabilitySet::LINUX_IMMUTABLE
            | CapabilitySet::KILL;
        assert!((kept(CHANGE) & system).is_empty());
    }

    #[test]
    fn each_kind_of_call_keeps_rights_on_its_object_only() {
        use crate::op::{Binding, Last, ObjectId};
        let object = ObjectId { dev: 1, ino: 2, mount: 3 };
        let shown = crate::op::Shown { uid: 0, gid: 0, mode: 0o600, nlink: 1 };
        let file = Binding { dirs: vec![object], missing: 0, last: Last::Is(object, shown) };
        let absent = Binding { dirs: vec![object], missing: 2, last: Last::Absent };
        let cases = [
            (Kind::Look, &file, (Scope::Object, Grant::ReadFile)),
            (Kind::Look, &absent, (Scope::Directory, Grant::Read)),
            (Kind::Read, &file, (Scope::Object, Grant::ReadFile)),
            (Kind::Read, &absent, (Scope::Directory, Grant::Read)),
            (Kind::List, &file, (Scope::Object, Grant::Read)),
            (Kind::Change, &file, (Scope::Directory, Grant::Write)),
            (Kind::Change, &absent, (Scope::Directory, Grant::Write)),
        ];
        for (kind, binding, grant) in cases {
            assert_eq!(kind.grant(binding), grant, "{kind:?} {binding:?}");
        }
    }

    #[test]
    fn a_change_runs_as_the_one_user_who_owns_all_it_changes() {
        let dir = |uid, mode| Owned { uid, gid: 7, mode };
        let file = |uid, gid| Owned { uid, gid, mode: 0o644 };
        let cases = [
            (vec![dir(1000, 0o700)], vec![file(1000, 100)], Some((1000, 100))),
            (vec![dir(1000, 0o755)], vec![], Some((1000, 7))),
            (vec![dir(1000, 0o700), dir(1000, 0o750)], vec![file(1000, 100)], Some((1000, 100))),
            // Root's, another user's, a directory its owner may not write: root keeps the call.
            (vec![dir(0, 0o700)], vec![file(0, 0)], None),
            (vec![dir(1000, 0o700)], vec![file(1001, 100)], None),
            (vec![dir(1000, 0o700), dir(1001, 0o700)], vec![], None),
            (vec![dir(1000, 0o500)], vec![], None),
            (vec![dir(1000, 0o700)], vec![file(1000, 100), file(1000, 101)], None),
            (vec![], vec![], None),
        ];
        for (dirs, files, expected) in cases {
            assert_eq!(owner(&dirs, &files), expected, "{dirs:?} {files:?}");
        }
    }
}
