//! Rewind (docs/rewind.md): every file the selected changes after a point changed goes back to
//! its content at the point, as one transaction (`txn`: all or nothing, also across a crash,
//! whose recovery the supervisor runs). A file whose state is not the one the record says fsd
//! left there (an editor, a shell, a change of another identity since) is a conflict: left as it
//! is and reported, unless the caller keeps the checkpoint's version, whose replaced version the
//! rewind's own change then keeps in the record. The rewind is itself recorded, so it can be
//! rewound.

use std::collections::BTreeMap;
use std::os::fd::AsFd;

use super::Backend;
use super::pipeline::Mutation;
use super::record::{Image, ImageKind, Line, same_state};
use crate::error::{Denial, Failure, FsError};
use crate::op::{
    Author, ChangesQuery, EditGuard, FileDiff, Mode, Outcome, Rewound, Target, Visible, WriteGuard,
};
use crate::sys::{self, Errno};

/// One file's restore, owned until the transaction borrows it as a [`Mutation`].
enum Step {
    /// Its content at the point, bytes as the record kept them (text or not).
    Restore { path: String, content: Vec<u8>, guard: WriteGuard },
    /// It did not exist at the point.
    Delete { path: String, guard: EditGuard },
}

impl Step {
    fn mutation(&self) -> Mutation<'_> {
        match self {
            Step::Restore { path, content, guard } => Mutation::Restore { path, content, guard: Some(guard) },
            Step::Delete { path, guard } => Mutation::Delete { path, guard: Some(guard) },
        }
    }
}

/// One target the selected changes touched.
struct Touched {
    display: String,
    /// What it held at the point: the before-image of its first selected change.
    at_point: Option<Image>,
    /// What the record says fsd left there last, and whether that change is one selected.
    left: Option<String>,
    last_selected: bool,
    /// A change of it since the point was made under an escalation: a conflict shows it with
    /// its metadata only, as a listing does.
    escalated: bool,
}

impl Backend {
    /// Restores the files the selected changes after `query.since` changed (see the module).
    pub(super) fn rewind(
        &self,
        mode: Mode,
        author: Author,
        query: ChangesQuery,
        keep_checkpoint: bool,
    ) -> Result<Outcome, Failure> {
        let store =
            self.record.as_ref().ok_or_else(|| Failure::new(FsError::Denied(Denial::NoChangeRecord), ""))?;
        let fail = |e| Failure::new(e, "");
        let mut touched: BTreeMap<String, Touched> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for line in store.lines().map_err(fail)? {
            let entry = match line {
                Line::Dropped { through, .. } if through > query.since => {
                    return Err(fail(FsError::Denied(Denial::HistoryDropped)));
                }
                Line::Change(entry) if entry.seq > query.since => entry,
                _ => continue,
            };
            let selected = query.identity.as_ref().is_none_or(|i| *i == entry.author.identity)
                && query.session.as_ref().is_none_or(|s| Some(s) == entry.author.session.as_ref());
            for file in entry.files {
                let t = touched.entry(file.key.clone()).or_insert_with(|| Touched {
                    display: file.display.clone(),
                    at_point: None,
                    left: None,
                    last_selected: false,
                    escalated: false,
                });
                if selected && !order.contains(&file.key) {
                    order.push(file.key.clone());
                    t.at_point = file.before.clone();
                }
                // A target first changed by another identity, then by a selected change: its
                // point is the selected change's before (taken above, once).
                t.left = file.after;
                t.last_selected = selected;
                t.escalated |= entry.author.escalated;
            }
        }
        let mut rewound = Rewound::default();
        let mut ops: Vec<Step> = Vec::new();
        let mut modes: Vec<(String, Image)> = Vec::new();
        for key in &order {
            let Some(t) = touched.get(key) else { continue };
            let target = Target { key: key.clone(), display: t.display.clone() };
            let (now, _) = match self.now_at(mode, &t.display) {
                Some(found) => found,
                None => {
                    rewound.unrestorable.push(target);
                    continue;
                }
            };
            let content = match &t.at_point {
                None => None,
                Some(image) => match self.restorable(image) {
                    Some(text) => Some(text),
                    None => {
                        rewound.unrestorable.push(target);
                        continue;
                    }
                },
            };
            // Changed since by what this rewind does not undo: anyone the record did not see,
            // or a change it does not select (another session's or identity's).
            let unrecorded = !same_state(now.as_deref(), t.left.as_deref());
            let outside = !t.last_selected || unrecorded;
            if outside && !keep_checkpoint {
                // Shown as a listing shows it: to what the caller may read at its own mode now.
                let shown = match self.now_at(query.reader_mode, &t.display) {
                    _ if t.escalated => Visible::Escalated,
                    None => Visible::NotReadable,
                    Some((_, readable)) => {
                        let old = content.as_deref().map_or(Ok(""), std::str::from_utf8);
                        match (old, readable.map(String::from_utf8)) {
                            (Ok(old), Some(Ok(new))) => {
                                Visible::Diff(super::record::unified(old, &new, &t.display))
                            }
                            _ => Visible::NotText,
                        }
                    }
                };
                rewound.conflicts.push(FileDiff {
                    target,
                    authors: Vec::new(),
                    existed: t.at_point.is_some(),
                    exists: now.is_some(),
                    changed_outside: unrecorded,
                    shown,
                });
                continue;
            }
            let key_guard = Some(key.clone());
            let op = match (content, &now) {
                (None, None) => continue,
                (None, Some(version)) => Step::Delete {
                    path: t.display.clone(),
                    guard: EditGuard { version: version.clone(), target_key: key_guard },
                },
                (Some(content), now) => Step::Restore {
                    path: t.display.clone(),
                    content,
                    guard: match now {
                        Some(version) => {
                            WriteGuard::ReplaceIfVersion { version: version.clone(), target_key: key_guard }
                        }
                        None => WriteGuard::CreateIfAbsent,
                    },
                },
            };
            if outside {
                rewound.replaced.push(target.clone());
            }
            if let Some(image) = &t.at_point {
                modes.push((t.display.clone(), image.clone()));
            }
            rewound.restored.push(target);
            ops.push(op);
        }
        if ops.is_empty() {
            return Ok(Outcome::Rewind(rewound));
        }
        self.set_author(Some(author));
        self.rewinding.store(true, std::sync::atomic::Ordering::Relaxed);
        let committed = self.transact_mutations(mode, ops.iter().map(Step::mutation).collect());
        self.rewinding.store(false, std::sync::atomic::Ordering::Relaxed);
        committed?;
        rewound.change = Some(self.last_recorded.load(std::sync::atomic::Ordering::Relaxed));
        for (display, image) in &modes {
            self.restore_mode(mode, display, image);
        }
        Ok(Outcome::Rewind(rewound))
    }

    /// A before-image's content as the transaction writes it: a file's bytes the record kept,
    /// text or not (restored through the byte path, `Mutation::Restore`).
    fn restorable(&self, image: &Image) -> Option<Vec<u8>> {
        let store = self.record.as_ref()?;
        if image.kind != ImageKind::File {
            return None;
        }
        store.blob(image.digest.as_deref()?)
    }

    /// Gives a restored file the permission bits and owner it had at the point (a file made anew
    /// has the new-file default; the owner only where the worker may set it).
    fn restore_mode(&self, mode: Mode, display: &str, image: &Image) {
        let options = super::resolve::WalkOptions { follow_final: false, create_parents: false };
        let Ok(resolved) = self.walk(mode, display, options) else { return };
        let (Some(parent), Some(meta)) = (resolved.parent.as_ref(), resolved.meta) else { return };
        let Ok(file) = sys::open_read(parent.as_fd(), resolved.name()) else { return };
        if meta.mode & 0o7777 != image.mode
            && let Err(errno) = sys::set_mode(&file, image.mode)
        {
            tracing::warn!(%errno, "a rewound file's mode could not be restored");
        }
        if (meta.uid, meta.gid) != (image.uid, image.gid)
            && let Err(errno) = sys::set_owner(&file, image.uid, image.gid)
            && errno != Errno::PERM
        {
            tracing::warn!(%errno, "a rewound file's owner could not be restored");
        }
    }
}
