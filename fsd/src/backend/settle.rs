//! The undo of an exchange that took out another file than the one it checked: a replace's
//! (`write::swap_back`), a guarded move's (`moves::swap_in`, `moves::move_checked`) and a
//! rolled-back transaction's (`txn::undo`). One exchange back is not enough: while the undo
//! runs, an outside writer may rename a save over the name or write into the file there, and
//! a blind exchange would then put an older file back at the name and take that newer change
//! out. The undo settles by rounds instead ([`settle`]), so the newest change ends at the name.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;

use crate::sys::{self, Errno, Meta, RenameHow};

/// How many exchanges an undo makes at most before it stops chasing outside changes.
const MAX_UNDO_EXCHANGES: usize = 16;

/// A name in a directory: one side of the undo's exchanges.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spot<'a> {
    pub(super) dir: BorrowedFd<'a>,
    pub(super) name: &'a OsStr,
}

/// Where an undo's exchanges stopped.
#[derive(Debug)]
pub(super) enum Undone {
    /// The file at the name is the newest; the other side holds the file it superseded, as this
    /// metadata describes it.
    At(Meta),
    /// Outside changes kept coming: the other side holds one newer than what the name holds.
    StillChanging,
}

/// The undo's exchanges of `back` and `name`, where `name` holds the file `put` recognises (the
/// one the exchange being undone took there, as it was then) and `back` the file to put back.
/// After each exchange, what comes out at `back` is looked at: the very file the exchange before
/// put at `name`, unchanged, means nothing touched the name meanwhile, and what is there now is
/// the newest. Anything else (that file written into, or a save renamed over it) was changed at
/// `name` after the file that has just gone there was last changed (it sat at `back`), so it is
/// the newer one and goes back to `name` by the next exchange, whose window is looked at the same
/// way. Each further round needs another outside change: at most [`MAX_UNDO_EXCHANGES`].
///
/// Where `back` is a temporary name no outside writer names, that reasoning is exact. Where it
/// is a visible name (a move's source), a save renamed over it between two exchanges is taken
/// for the file the undo had there, as a single exchange back would take it: only the name's
/// side is settled.
pub(super) fn settle(name: Spot<'_>, back: Spot<'_>, put: &dyn Fn(&Meta) -> bool) -> Result<Undone, Errno> {
    // From the second round: the file the exchange before put at `name`, as it went.
    let mut went: Option<Meta> = None;
    for round in 0..MAX_UNDO_EXCHANGES {
        // The file about to go to `name`, as it is before it goes: the next round's `went`.
        let going = sys::meta_at(back.dir, back.name);
        sys::rename(back.dir, back.name, name.dir, name.name, RenameHow::Exchange)?;
        #[cfg(feature = "fault-injection")]
        if round == 0 {
            super::write::pause_at_exchange(name.name);
        }
        if let Ok(came_out) = sys::meta_at(back.dir, back.name) {
            let unchanged = match &went {
                None => put(&came_out),
                Some(went) => came_out.same_content(went),
            };
            if unchanged {
                return Ok(Undone::At(came_out));
            }
        }
        // Without the metadata of what went to `name`, the next round could not tell whether it
        // was touched there: the newer file stays at `back`, to be kept.
        let Ok(going) = going else { return Ok(Undone::StillChanging) };
        went = Some(going);
        tracing::debug!(round, name = ?name.name, "an outside change met fsd's undo: it goes back to the name");
    }
    Ok(Undone::StillChanging)
}
