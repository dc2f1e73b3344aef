//! Confinement at birth, one linear function per process role. Each step narrows what the
//! process can do; a step that fails stops the process before it serves anything.

use std::path::PathBuf;

use rustix::thread::CapabilitySet;

use crate::config::{Config, LandlockPolicy, WorkerIdentity};
use crate::op::Mode;
use crate::sys::confine::{self as step, ConfineError, Enforcement, Grant};

/// How a process ended up confined, for hello and the logs.
#[derive(Debug, Clone)]
pub struct Confinement {
    pub landlock: Enforcement,
}

impl Confinement {
    pub fn describe(&self) -> &'static str {
        match self.landlock {
            Enforcement::Full => "landlock",
            Enforcement::Partial => "landlock (partial: some newer rights unsupported)",
            Enforcement::None => "none (best-effort: the kernel lacks Landlock)",
        }
    }
}

/// The Landlock grants of a mode: beneath every root, read; beneath writable roots under
/// workspace-write, the write set too; danger-full-access writes anywhere the daemon may.
fn grants(config: &Config, mode: Mode) -> Vec<(PathBuf, Grant)> {
    match mode {
        Mode::ReadOnly => config.roots.iter().map(|r| (r.path.clone(), Grant::Read)).collect(),
        Mode::WorkspaceWrite => config
            .roots
            .iter()
            .map(|r| (r.path.clone(), if r.writable { Grant::Write } else { Grant::Read }))
            // Transactions' intent records (`backend::txn`), outside every root.
            .chain(config.state_dir.iter().map(|d| (d.join(crate::backend::txn::INTENTS), Grant::Write)))
            // The writable roots' temporary-file journal directories (`backend::journal`), on tmpfs.
            .chain(
                crate::backend::journal::dirs_of(&writable_roots(config))
                    .into_iter()
                    .map(|d| (d, Grant::Write)),
            )
            // The change record (`backend::record`), when it is kept.
            .chain(
                config
                    .state_dir
                    .iter()
                    .filter(|_| config.record.is_some())
                    .map(|d| (d.join(crate::backend::record::DIR), Grant::Write)),
            )
            .collect(),
        Mode::DangerFullAccess => vec![(PathBuf::from("/"), Grant::Write)],
    }
}

fn writable_roots(config: &Config) -> Vec<PathBuf> {
    config.roots.iter().filter(|r| r.writable).map(|r| r.path.clone()).collect()
}

/// Confines a worker of `mode`. Called once, single-threaded, after it opened its root
/// descriptors and IPC socket and before it reads its first request.
pub fn worker(config: &Config, mode: Mode, identity: WorkerIdentity) -> Result<Confinement, ConfineError> {
    // Before the identity changes: the journal's base is checked to be the daemon's own.
    let grants = grants(config, mode);
    let keep = if mode == Mode::DangerFullAccess {
        None
    } else if identity.root_capabilities {
        // A root worker the operator asked for keeps only what keeping owners and modes of
        // replaced files needs; Landlock still confines root.
        Some(step::worker_capabilities())
    } else {
        // Whoever the worker runs as (uid 0 included, when root owns the workspace), it has no
        // capability: it can do to the workspace what its owner could, nothing more.
        Some(CapabilitySet::empty())
    };
    // 1. The bounding set first, while CAP_SETPCAP is still held: no exec regains the rest.
    if let Some(keep) = keep {
        step::drop_bounding_set(keep)?;
    }
    // 2. The worker identity (see `Config::worker_identity`); danger-full-access keeps the
    //    daemon's. Leaving root clears the capability sets by itself.
    if mode != Mode::DangerFullAccess {
        step::switch_ids(identity.uid, identity.gid, false)?;
    }
    // 3. Capabilities: the allowed few (or none).
    if let Some(keep) = keep {
        step::set_capabilities(keep)?;
    }
    // 4. No exec can ever gain privileges again (also required by Landlock and seccomp).
    step::no_new_privs()?;
    // 5. Landlock: every right the ABI knows is handled; only the mode's are granted.
    let required = config.landlock == LandlockPolicy::Required && mode != Mode::DangerFullAccess;
    let landlock = step::landlock(&grants, required)?;
    // 6. Seccomp last: the allowlist of descriptor-relative calls (and, in a danger-full-access
    //    worker, what forking and confining a process per approved call takes).
    step::seccomp_worker(mode == Mode::DangerFullAccess)?;
    Ok(Confinement { landlock })
}

/// The Landlock grants of a direct read thread: reading beneath every root, nothing else.
pub fn direct_grants(config: &Config) -> Vec<(PathBuf, Grant)> {
    grants(config, Mode::ReadOnly)
}

/// Confines one direct read thread of the network process (`dispatch::direct`), on that
/// thread, before the rest of the process confines itself: the identity a read-only worker
/// has (effective uid, gid and groups; the real and saved uid stay the daemon's, `act_as`), no
/// capability, no_new_privs, a Landlock domain of its own that grants
/// reading beneath the roots and nothing else (required: the caller serves nothing unless it is
/// fully enforced), and the direct allowlist. In the kernel a thread's ids, capabilities,
/// Landlock domain and seccomp filters are its own (the raw calls, not libc's process-wide
/// ones), so the network process's other threads keep theirs, and these keep these.
pub fn direct_reader(
    grants: &[(PathBuf, Grant)],
    identity: WorkerIdentity,
) -> Result<Confinement, ConfineError> {
    step::drop_bounding_set(CapabilitySet::empty())?;
    // Effective ids only: the worker's uid may not signal the daemon's own threads.
    step::act_as(identity.uid, identity.gid)?;
    step::set_capabilities(CapabilitySet::empty())?;
    step::no_new_privs()?;
    let landlock = step::landlock(grants, true)?;
    step::seccomp_direct()?;
    Ok(Confinement { landlock })
}

/// Confines the process one approved call runs in (forked by a danger-full-access worker,
/// `worker::Call::in_own_process`) to what its kind of call needs: Landlock rights on the
/// approved objects only (`rules`: each opened by the call's own walk, held to its binding), the
/// identity of the one user who owns all a change changes where there is one (`owner`,
/// `escalation::authority::owner`), the capabilities of its kind (`escalation::authority`,
/// every other one dropped), and the plain worker's seccomp filter stacked on the danger
/// worker's. No exec is possible (seccomp), so the bounding set does not matter; no_new_privs
/// is inherited. Returns the capabilities it holds (read before seccomp: from then on they
/// cannot change).
pub fn approved_call(
    rules: &[(std::os::fd::OwnedFd, Grant)],
    kind: crate::escalation::authority::Kind,
    owner: Option<(u32, u32)>,
    worker: u32,
    required: bool,
    filter: &step::ApprovedCallFilter,
) -> Result<(Enforcement, CapabilitySet), ConfineError> {
    use crate::escalation::authority;
    // 1. Landlock: a domain nested in the worker's, granting the approved objects only.
    let landlock = step::landlock_objects(rules, required)?;
    // 2. The owner's identity, capabilities kept across the switch so step 3 chooses them.
    let keep = match owner {
        Some((uid, gid)) => {
            step::switch_ids(uid, gid, true)?;
            authority::kept(authority::OWNER)
        }
        None => authority::kept(kind.capabilities()),
    };
    // 3. Killed with its worker (after the switch, which would clear the setting): a worker
    //    killed as hung never leaves the call running.
    crate::sys::call::die_with_parent(worker).map_err(ConfineError::ParentDeath)?;
    // 4. Capabilities: the few of its kind.
    step::set_capabilities(keep)?;
    let held = step::effective_capabilities()?;
    // 5. Seccomp: no fork, Landlock, capability or id change from here on.
    step::seccomp_approved_call(filter)?;
    Ok((landlock, held))
}

/// Confines the process a danger-full-access worker forks, under signed trust, for a read no
/// approval binds (the checks and previews made before anyone is asked,
/// `worker::Call::as_reader`) to a read-only worker's authority: a Landlock domain nested in
/// the worker's that grants reading beneath the roots (`roots`: the worker's descriptors of
/// them) and nothing else, the worker identity with no capability, killed with its worker, and
/// the approved call's seccomp stack. Returns the capabilities it holds (none).
pub fn reader(
    roots: &[(std::os::fd::OwnedFd, Grant)],
    identity: WorkerIdentity,
    worker: u32,
    required: bool,
    filter: &step::ApprovedCallFilter,
) -> Result<(Enforcement, CapabilitySet), ConfineError> {
    // 1. Landlock: reading beneath the roots, as a read-only worker may.
    let landlock = step::landlock_objects(roots, required)?;
    // 2. The identity of a read-only worker: its owner's permissions decide what it reads.
    step::switch_ids(identity.uid, identity.gid, false)?;
    // 3. Killed with its worker (after the switch, which would clear the setting).
    crate::sys::call::die_with_parent(worker).map_err(ConfineError::ParentDeath)?;
    // 4. No capability, whoever it runs as (uid 0 included, when root owns the workspace).
    step::set_capabilities(CapabilitySet::empty())?;
    let held = step::effective_capabilities()?;
    // 5. Seccomp: no fork, Landlock, capability or id change from here on.
    step::seccomp_approved_call(filter)?;
    Ok((landlock, held))
}

/// Confines the network process after it bound its listeners: no capabilities and a seccomp
/// allowlist without any call that changes a path. With `reader` (the direct read path serves,
/// `dispatch::direct`), it reads as a read-only worker does: that worker's effective uid and
/// groups (`act_as`: the real and saved uid stay the daemon's), a
/// Landlock domain that grants reading beneath the roots and nothing else (required fully
/// enforced: the direct read threads were, under the same rules), and the direct read's calls
/// added to its allowlist, so a plain read runs on the runtime thread that received it
/// (`dispatch::inline`). Without, no filesystem right at all, and no call that names a path.
/// Must run before any thread starts but the direct read threads and the approver's connector,
/// which confined themselves already (ids, Landlock and seccomp bind the calling thread and the
/// threads it creates later).
pub fn network(
    config: &Config,
    reader: Option<(&[(PathBuf, Grant)], WorkerIdentity)>,
) -> Result<Confinement, ConfineError> {
    step::drop_bounding_set(CapabilitySet::empty())?;
    if let Some((_, identity)) = reader {
        // Effective ids only: the worker's uid may not signal the network process.
        step::act_as(identity.uid, identity.gid)?;
    }
    step::set_capabilities(CapabilitySet::empty())?;
    step::no_new_privs()?;
    let required = config.landlock == LandlockPolicy::Required;
    let landlock = match reader {
        Some((grants, _)) => step::landlock(grants, true)?,
        None => step::landlock(&[], required)?,
    };
    // Hello reports the ABI; the allowlist has no Landlock call, so it is asked now.
    step::landlock_abi();
    match reader {
        Some(_) => step::seccomp_network_reader()?,
        None => step::seccomp_network()?,
    }
    Ok(Confinement { landlock })
}
