//! Signed escalation: the daemon describes the calls a client wants to make at a wider mode in
//! canonical bytes (its own resolution of every path, the current version, the content digest),
//! sends them to its approver itself, keeps the approved ones pending with a nonce and an expiry,
//! and accepts a retried call only with the approver's Ed25519 signature over exactly those
//! bytes, once per approved call. The caller never sees the description, only the decision.
//!
//! Also here: what a caller has been approved to know ([`Known`]), which decides whether the
//! checks run before an approver may tell it anything about a target outside its grant.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use crate::op::{Binding, Last, Made, Mode, Op, SignedApproval};

/// One approved call, as the daemon resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalOp {
    pub op: Op,
    /// Target key and display path of the (source) target.
    pub target_key: String,
    pub display: String,
    /// The version found when described, or `None` for an absent target; [`AFTER_EARLIER`]
    /// when an earlier call of the same escalation changes the target first.
    pub version: Option<String>,
    /// For moves: the destination's key and display path.
    pub destination: Option<(String, String)>,
    pub content_sha256: Vec<u8>,
    /// The object the (source) path resolved to: each directory on the way with its mount,
    /// and the final entry. The worker performing the approved call holds its own walk to it.
    pub bound: Option<Binding>,
    /// The same for a move's destination.
    pub destination_bound: Option<Binding>,
}

/// What an approver is shown besides the canonical fields: a diff the daemon made, and the
/// paths as the caller wrote them where they differ from the ones the daemon acts on. Not part
/// of what a call is compared against (the digest and the resolved targets are).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    /// The diff as shown, bounded ([`diff::bounded`]).
    pub lines: Vec<diff::Shown>,
    /// The path as requested, when it is not the resolved one shown (`/\x65tc/x` for `/etc/x`).
    pub requested: Option<String>,
    /// The same for a move's destination.
    pub requested_destination: Option<String>,
}

/// The version of a target an earlier call of the same escalation (an apply_patch operation)
/// changes first: whatever that call leaves, which nobody can know when it is described.
pub const AFTER_EARLIER: &str = "after an earlier call of this escalation";

impl CanonicalOp {
    /// Whether `call` is this approved call: the operation, the resolved targets, their
    /// versions and the content digest. An approval without a digest (a delete, a move without
    /// new content) admits only a call without content: the daemon never describes a write or
    /// an edit without its change (`EscalationDenial::UnboundChange`), so nothing an approver
    /// did not see can be written with its ticket.
    pub fn admits(&self, call: &CanonicalOp) -> bool {
        let after_earlier = self.after_earlier();
        self.op == call.op
            && self.target_key == call.target_key
            && self.destination == call.destination
            && (after_earlier || self.version == call.version)
            && bound_holds(self.bound.as_ref(), call.bound.as_ref(), after_earlier)
            && bound_holds(self.destination_bound.as_ref(), call.destination_bound.as_ref(), false)
            && self.content_sha256 == call.content_sha256
    }

    /// [`CanonicalOp::admits`], or `call` stood in directories an earlier call of the same
    /// approval made where this one was approved to make them (`made`, as that call's worker
    /// vouched): admitted as if they were still missing.
    pub fn admits_after(&self, call: &CanonicalOp, made: &[Made]) -> bool {
        self.admits(call) || made.iter().filter_map(|m| call.folded(m)).any(|folded| self.admits(&folded))
    }

    /// This call as if the directories `made` vouches for, where its walk stood in them below
    /// the directory `made` names, were still missing: then its resolution stopped at the
    /// first of them, as the approval's did (its target key is the same either way: the
    /// missing names' below the directory that exists).
    fn folded(&self, made: &Made) -> Option<CanonicalOp> {
        let bound = self.bound.as_ref()?;
        let at = bound.dirs.iter().position(|d| *d == made.below)?;
        let beyond = &bound.dirs[at + 1..];
        if beyond.is_empty() || made.dirs.get(..beyond.len()) != Some(beyond) {
            return None;
        }
        let dirs = bound.dirs[..=at].to_vec();
        let bound = Binding { dirs, missing: bound.missing + beyond.len(), last: bound.last };
        Some(CanonicalOp { bound: Some(bound), ..self.clone() })
    }

    /// Whether `call`, made for `path`, is this approved call by path and content, and is
    /// still not admitted: it met another object than the one approved (another version, or a
    /// directory on the way or the final entry swapped, which may resolve the path elsewhere).
    fn met_another_object(&self, path: &str, call: &CanonicalOp, made: &[Made]) -> bool {
        self.op == call.op
            && (self.target_key == call.target_key || self.display == lexical(path))
            && self.content_sha256 == call.content_sha256
            && !self.admits_after(call, made)
    }

    /// Whether an earlier call of the same escalation changes the target first.
    fn after_earlier(&self) -> bool {
        self.version.as_deref() == Some(AFTER_EARLIER)
    }

    /// What the worker holds the approved call's walks to: each path and its binding (an
    /// earlier call of the escalation changes the final entry first: the directories still
    /// bind). `None` when a path has none: the call is refused rather than left unbound.
    pub fn bindings(&self, source: &str, destination: Option<&str>) -> Option<crate::op::Bindings> {
        let mut bound = self.bound.clone()?;
        if self.after_earlier() {
            bound.last = Last::Unchecked;
        }
        let mut bindings = vec![(source.to_owned(), bound)];
        if let Some(destination) = destination {
            bindings.push((destination.to_owned(), self.destination_bound.clone()?));
        }
        Some(bindings)
    }
}

/// Whether a call's walk (`call`) is the object an approval bound (`approved`): equal, or with
/// `directories_only`, the same directories (the final entry changes first).
fn bound_holds(approved: Option<&Binding>, call: Option<&Binding>, directories_only: bool) -> bool {
    match (approved, call) {
        (Some(a), Some(c)) if directories_only => a.dirs == c.dirs && a.missing == c.missing,
        (a, c) => a == c,
    }
}

/// A described escalation: asked (no signature yet) or approved (signed), waiting for its calls.
#[derive(Debug)]
struct Pending {
    nonce: Vec<u8>,
    description: String,
    /// SHA-256 of `description` (hex), for audit records.
    digest: String,
    /// The approver's signature over `description` and who decided
    /// ([`fsd_proto::signed_decision`]), verified when it arrived.
    signature: Option<(Vec<u8>, String)>,
    /// The client's budgets (the pending escalation, the operations it lists), held until the
    /// escalation is spent, refused, released or expired.
    _permits: Vec<crate::budget::Permit>,
    session: String,
    client: String,
    mode: Mode,
    /// When it expires, in Unix milliseconds: exact, whatever second the ttl started in. The
    /// description signs the second this falls in, rounded up, so no use is ever admitted past
    /// the expiry an approver signed.
    expires_ms: u64,
    /// Approved calls; each is used once.
    ops: Vec<(CanonicalOp, bool)>,
    /// The reads of its content a target of an approved change has left (one per change that
    /// names it): what the client's preflight needs (apply_patch reads each file it updates,
    /// the editor re-reads the file it edits), no more.
    content_reads: HashMap<String, usize>,
    /// The directories its calls made, as their workers vouched: a later call that stands in
    /// them is admitted where it was approved to make them (two new files in one new directory).
    made: Vec<Made>,
}

/// Where the daemon reaches `fsd-approver serve`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ApproverEndpoint {
    Unix(PathBuf),
    Tcp(String),
}

impl ApproverEndpoint {
    /// `unix:PATH` or `tcp:HOST:PORT`.
    pub fn parse(text: &str) -> Option<ApproverEndpoint> {
        if let Some(path) = text.strip_prefix("unix:").filter(|p| p.starts_with('/')) {
            return Some(ApproverEndpoint::Unix(PathBuf::from(path)));
        }
        let addr = text.strip_prefix("tcp:")?;
        let (host, port) = addr.rsplit_once(':')?;
        (!host.is_empty() && port.parse::<u16>().is_ok()).then(|| ApproverEndpoint::Tcp(addr.to_owned()))
    }

    /// The host of a `tcp:` endpoint, without an IPv6 address's brackets (the name its TLS
    /// certificate must carry).
    pub fn host(&self) -> Option<&str> {
        match self {
            ApproverEndpoint::Unix(_) => None,
            ApproverEndpoint::Tcp(addr) => {
                addr.rsplit_once(':').map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
            }
        }
    }

    /// Whether the endpoint stays on this host: a Unix socket, `localhost` or a loopback
    /// address (a name is not resolved: only these are known not to leave the host).
    pub fn on_loopback(&self) -> bool {
        match self.host() {
            None => true,
            Some(host) => {
                host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }
}

impl std::fmt::Display for ApproverEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApproverEndpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            ApproverEndpoint::Tcp(addr) => write!(f, "tcp:{addr}"),
        }
    }
}

/// The targets each caller (session and client) has been approved to read or change: what
/// the checks before an approver may talk about, and (signed trust) the approval that names
/// each, which a preview of its content carries to the worker that reads it. Bounded: past the
/// cap the oldest caller's set goes, which only makes the daemon ask for a read again.
#[derive(Debug, Default)]
pub struct Known {
    table: Mutex<KnownTable>,
}

/// (session, client).
type CallerId = (String, String);

#[derive(Debug, Default)]
struct KnownTable {
    /// Each key, with the latest approval naming it (none under client trust).
    keys: HashMap<CallerId, HashMap<String, Option<std::sync::Arc<SignedApproval>>>>,
    /// Callers in the order they first appeared, for eviction.
    order: std::collections::VecDeque<CallerId>,
}

impl Known {
    const MAX_CALLERS: usize = 4096;
    const MAX_KEYS: usize = 4096;

    pub fn record(
        &self,
        session: &str,
        client: &str,
        key: &str,
        approval: Option<std::sync::Arc<SignedApproval>>,
    ) {
        let mut guard = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let KnownTable { keys: table, order } = &mut *guard;
        let caller = (session.to_owned(), client.to_owned());
        if !table.contains_key(&caller) {
            if order.len() >= Self::MAX_CALLERS
                && let Some(oldest) = order.pop_front()
            {
                table.remove(&oldest);
            }
            order.push_back(caller.clone());
        }
        let keys = table.entry(caller).or_default();
        if keys.len() < Self::MAX_KEYS || keys.contains_key(key) {
            keys.insert(key.to_owned(), approval);
        }
    }

    pub fn knows(&self, session: &str, client: &str, key: &str) -> bool {
        let guard = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        guard.keys.get(&(session.to_owned(), client.to_owned())).is_some_and(|keys| keys.contains_key(key))
    }

    /// The latest approval that named `key` for this caller.
    pub fn approval(&self, session: &str, client: &str, key: &str) -> Option<std::sync::Arc<SignedApproval>> {
        let guard = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        guard.keys.get(&(session.to_owned(), client.to_owned()))?.get(key)?.clone()
    }
}

/// Why a ticket is refused. Every refusal is final for that ticket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("unknown or already spent escalation")]
    Unknown,
    #[error("the escalation was not approved")]
    NotApproved,
    #[error("the escalation expired")]
    Expired,
    #[error("the escalation belongs to another session or client")]
    WrongCaller,
    #[error("the escalation approved another mode")]
    WrongMode,
    #[error("the escalation ticket is not signed by the configured approver")]
    BadSignature,
    #[error("this call differs from every call the approver signed")]
    Mismatch,
    #[error("the escalation's reads of the files it changes are used up")]
    ReadsSpent,
}

impl TicketError {
    /// The `ticket` metadata of the refusal.
    pub fn refusal(&self) -> fsd_proto::TicketRefusal {
        use fsd_proto::TicketRefusal;
        match self {
            TicketError::Unknown => TicketRefusal::Unknown,
            TicketError::NotApproved => TicketRefusal::NotApproved,
            TicketError::Expired => TicketRefusal::Expired,
            TicketError::WrongCaller => TicketRefusal::WrongCaller,
            TicketError::WrongMode => TicketRefusal::WrongMode,
            TicketError::BadSignature => TicketRefusal::BadSignature,
            TicketError::Mismatch => TicketRefusal::Mismatch,
            TicketError::ReadsSpent => TicketRefusal::ReadsSpent,
        }
    }
}

/// The canonical description of `request`: the bytes an approver signs.
fn render(id: &str, nonce_hex: &str, expires: u64, request: &Describe<'_>) -> String {
    let (justification, more) = diff::cut(request.justification, diff::MAX_JUSTIFICATION_CHARS);
    let mut text = format!(
        "fsd escalation v1\nid: {id}\nnonce: {nonce_hex}\nsession: {}\ncall: {}\nclient: {}\nmode: {}\njustification: {justification}\n",
        escape(request.session),
        escape(request.call),
        escape(request.client),
        request.mode.as_str(),
    );
    if more > 0 {
        // Said where the person reads it: the rest of the reason is there, not shown.
        text.push_str(&format!("justification-not-shown: {more} more bytes\n"));
    }
    text.push_str(&format!("expires: {expires}\n"));
    let mut diff_budget = diff::MAX_DESCRIPTION_BYTES;
    for (i, (op, preview)) in request.ops.iter().enumerate() {
        text.push_str(&format!("op {}: {} {}\n", i + 1, op.op.name(), escape(&op.display)));
        if let Some(requested) = &preview.requested {
            text.push_str(&format!("  requested-as: {}\n", escape(requested)));
        }
        text.push_str(&format!("  target: {}\n", escape(&op.target_key)));
        text.push_str(&format!("  current: {}\n", op.version.as_deref().unwrap_or("absent")));
        render_bound(&mut text, "", op.bound.as_ref());
        if let Some((key, display)) = &op.destination {
            // The key on a line of its own, as the source's: a name may hold " (", so a key
            // beside the path could not be told from it.
            text.push_str(&format!("  destination: {}\n", escape(display)));
            text.push_str(&format!("  destination-target: {}\n", escape(key)));
            if let Some(requested) = &preview.requested_destination {
                text.push_str(&format!("  destination-requested-as: {}\n", escape(requested)));
            }
            render_bound(&mut text, "destination-", op.destination_bound.as_ref());
        }
        if !op.content_sha256.is_empty() {
            text.push_str(&format!("  content-sha256: {}\n", hex::encode(&op.content_sha256)));
        }
        text.push_str(&diff::render(&preview.lines, &mut diff_budget));
    }
    text
}

/// Why a worker refuses an approved call on its own check of the approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    #[error("the call carries no approval")]
    Missing,
    #[error("the approval is not signed by the configured approver")]
    BadSignature,
    #[error("the approval expired")]
    Expired,
    #[error("the approval lists no such call on that object with that content")]
    NotListed,
}

/// A worker's own check of the approvals of the calls it runs: under signed trust, a worker of
/// a mode wider than the daemon's default performs a change only with the approver's
/// signature over a description that lists that change, on the objects its walks are held to
/// (the bindings it was handed) with the content it writes, before the approval's expiry; and
/// an escalated read (one handed bindings: a redeemed ticket's) only with the signature over a
/// description that lists a call on the object it reads.
#[derive(Clone)]
pub struct WorkerCheck {
    key: VerifyingKey,
    /// The key of the tags workers vouch for the directories they made with ([`Made`]): the
    /// supervisor's, handed to workers only (`ipc_messages::Start`), never to the network process.
    vouch_key: [u8; crate::digest::KEY_BYTES],
}

impl std::fmt::Debug for WorkerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCheck").field("key", &self.key).finish_non_exhaustive()
    }
}

impl WorkerCheck {
    /// For a worker whose changes need the approval of the holder of `key` (the worker decides
    /// whether they do: `worker::run`); `vouch_key`: the workers' own key.
    pub fn new(key: Option<&str>, vouch_key: [u8; crate::digest::KEY_BYTES]) -> Result<WorkerCheck, String> {
        let key = key.ok_or("signed trust without approver_public_key")?;
        Ok(WorkerCheck { key: Escalations::new(key, Duration::ZERO)?.key, vouch_key })
    }

    /// The tag of what an approved call made: under the workers' key, over the approval's
    /// description (so it vouches within that approval only), the directory it made them
    /// below and the directories, outermost first.
    fn mac(
        &self,
        approval: &SignedApproval,
        below: &crate::op::ObjectId,
        dirs: &[crate::op::ObjectId],
    ) -> aegis::aegis128x2::Aegis128X2Mac<32> {
        let mut mac = aegis::aegis128x2::Aegis128X2Mac::<32>::new(&self.vouch_key);
        mac.update(b"fsd made v1\n");
        mac.update(&fsd_proto::digest::content(approval.description.as_bytes()));
        for id in std::iter::once(below).chain(dirs) {
            for n in [id.dev, id.ino, id.mount] {
                mac.update(&n.to_le_bytes());
            }
        }
        mac
    }

    /// Vouches for the directories an approved call of `approval` made below `below`.
    pub fn vouch(
        &self,
        approval: &SignedApproval,
        below: crate::op::ObjectId,
        dirs: Vec<crate::op::ObjectId>,
    ) -> Made {
        let tag = self.mac(approval, &below, &dirs).finalize().to_vec();
        Made { below, dirs, tag }
    }

    /// Of `made`, what a worker vouched for within `approval` (the others are dropped: a walk
    /// that meets their directories is refused as it would be without them).
    pub fn vouched(&self, approval: Option<&SignedApproval>, made: Vec<Made>) -> Vec<Made> {
        let Some(approval) = approval else { return Vec::new() };
        let genuine = |m: &Made| {
            <[u8; 32]>::try_from(m.tag.as_slice())
                .is_ok_and(|tag| self.mac(approval, &m.below, &m.dirs).verify(&tag).is_ok())
        };
        made.into_iter().filter(genuine).collect()
    }

    /// Checks `request` (its bindings and approval already taken off it) before it runs.
    /// Returns the target keys each bound path must resolve to ([`Named`]): for a read (a
    /// read, stat or listing, or a dry run: anything that changes nothing) the walk is held to
    /// the directories signed and to the name of a call listed on them, never a sibling; for a
    /// change, to the names of the listed calls with its objects and content.
    /// Whom `approval` was asked for, from its signed `client:` line (a Unix client's uid;
    /// any other client holds no authority of its own over a file): `None` unless the
    /// approver's signature holds, so the network process's word on it never counts.
    pub fn requester(&self, approval: &SignedApproval) -> Option<crate::op::Requester> {
        let signed = fsd_proto::signed_decision(&approval.description, &approval.decider);
        let signature = Signature::from_slice(&approval.signature).ok()?;
        self.key.verify(signed.as_bytes(), &signature).ok()?;
        let client = approval.description.lines().find_map(|l| l.strip_prefix("client: "))?;
        let uid = client.strip_prefix("uid:").and_then(|u| u.parse::<u32>().ok());
        Some(crate::op::Requester { uid })
    }

    pub fn check(
        &self,
        request: &crate::op::Request,
        bindings: &crate::op::Bindings,
        approval: Option<&SignedApproval>,
    ) -> Result<Named, Unsigned> {
        use crate::op::Request as R;
        let op = request.op();
        let mutation = op.is_mutation();
        // An unbound read: served only with a read-only worker's authority (`worker::run`);
        // an escalated read, and a preview beyond that authority, always come bound.
        if !mutation && bindings.is_empty() {
            return Ok(Vec::new());
        }
        let approval = approval.ok_or(Unsigned::Missing)?;
        let signed = fsd_proto::signed_decision(&approval.description, &approval.decider);
        let signature = Signature::from_slice(&approval.signature).map_err(|_| Unsigned::BadSignature)?;
        self.key.verify(signed.as_bytes(), &signature).map_err(|_| Unsigned::BadSignature)?;
        let text = &approval.description;
        let expires = text
            .lines()
            .find_map(|l| l.strip_prefix("expires: "))
            .and_then(|e| e.parse::<u64>().ok())
            .ok_or(Unsigned::NotListed)?;
        if now() > expires {
            return Err(Unsigned::Expired);
        }
        if !mutation {
            return bindings
                .iter()
                .map(|(path, binding)| Ok((path.clone(), listed_names(text, binding)?)))
                .collect();
        }
        // The lines the description holds for this very call: its objects and its content.
        let mut wanted = String::new();
        let path = request.path();
        let (source, destination) = match request {
            R::MoveFile { destination, .. } => (path, Some(destination.as_str())),
            _ => (path, None),
        };
        let bound = |p: &str| bindings.iter().find(|(b, _)| b == p).map(|(_, b)| b);
        render_bound(&mut wanted, "", Some(bound(source).ok_or(Unsigned::NotListed)?));
        if let Some(destination) = destination {
            render_bound(&mut wanted, "destination-", Some(bound(destination).ok_or(Unsigned::NotListed)?));
        }
        let digest = match request {
            R::WriteText { content, .. } | R::MoveFile { content: Some(content), .. } => {
                fsd_proto::digest::content(content.as_bytes())
            }
            R::EditText { old, new, replace_all, .. } => fsd_proto::digest::edit(old, new, *replace_all),
            _ => Vec::new(),
        };
        let content_line = format!("  content-sha256: {}\n", hex::encode(&digest));
        let head = format!(": {} ", op.name());
        // The names the listed calls act on: the walk of the call is held to them, so an
        // approval of a creation (whose object is "absent") makes no other absent name of the
        // same directory, and a move's destination is the one signed.
        let (mut sources, mut destinations) = (Vec::new(), Vec::new());
        for block in blocks(text) {
            let first = block.lines().next().unwrap_or_default();
            let objects = wanted.lines().all(|line| block.lines().any(|l| l == line));
            let named = first.starts_with("op ") && first.contains(&head);
            let content = if digest.is_empty() {
                !block.contains("\n  content-sha256: ")
            } else {
                block.contains(&content_line)
            };
            if !(named && objects && content) {
                continue;
            }
            let line = |key: &str| block.lines().find_map(|l| l.strip_prefix(key)).map(str::to_owned);
            sources.extend(line("  target: "));
            if destination.is_some() {
                destinations.extend(line("  destination-target: "));
            }
        }
        if sources.is_empty() || (destination.is_some() && destinations.is_empty()) {
            return Err(Unsigned::NotListed);
        }
        let mut named = vec![(source.to_owned(), sources)];
        if let Some(destination) = destination {
            named.push((destination.to_owned(), destinations));
        }
        Ok(named)
    }
}

/// For each bound path of a read, the target keys (as a description spells them) its walk may
/// resolve to.
pub type Named = Vec<(String, Vec<String>)>;

/// The targets a description lists on the directories `binding` names (its `resolved:` and
/// `makes-directories:` lines, as a call's source or a move's destination), whatever their
/// final entry is now: a read of any of them reads a file an approver let a call read or
/// change at that name (an approved change may have replaced it already). None: not listed.
fn listed_names(text: &str, binding: &Binding) -> Result<Vec<String>, Unsigned> {
    let dirs = Binding { last: Last::Unchecked, ..binding.clone() };
    let mut names = Vec::new();
    for prefix in ["", "destination-"] {
        let mut wanted = String::new();
        render_bound(&mut wanted, prefix, Some(&dirs));
        let key = format!("  {prefix}target: ");
        for block in blocks(text) {
            let lines: Vec<&str> = block.lines().collect();
            if lines.first().is_some_and(|l| l.starts_with("op "))
                && wanted.lines().all(|w| lines.contains(&w))
                && let Some(name) = lines.iter().find_map(|l| l.strip_prefix(key.as_str()))
            {
                names.push(name.to_owned());
            }
        }
    }
    if names.is_empty() { Err(Unsigned::NotListed) } else { Ok(names) }
}

/// The calls of a description, each from its `op N:` line to the next.
fn blocks(text: &str) -> impl Iterator<Item = &str> {
    let starts: Vec<usize> = text.match_indices("\nop ").map(|(i, _)| i + 1).collect();
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain(std::iter::once(text.len())).collect();
    starts.into_iter().zip(ends).map(move |(a, b)| &text[a..b])
}

/// The object a path resolved to, as the approver signs it: each directory walked (device,
/// inode, mount), how many the call would make, and the final entry with its owner, mode and
/// hard links (a file with more than one is reachable by other names, said in words).
fn render_bound(text: &mut String, prefix: &str, bound: Option<&Binding>) {
    let Some(bound) = bound else { return };
    let object = |o: &crate::op::ObjectId| format!("{}:{}@{}", o.dev, o.ino, o.mount);
    let dirs: Vec<String> = bound.dirs.iter().map(object).collect();
    text.push_str(&format!("  {prefix}resolved: {}\n", dirs.join(" ")));
    if bound.missing > 0 {
        text.push_str(&format!("  {prefix}makes-directories: {}\n", bound.missing));
    }
    match &bound.last {
        Last::Is(o, shown) => {
            text.push_str(&format!(
                "  {prefix}object: {} owner {}:{} mode {:04o} links {}\n",
                object(o),
                shown.uid,
                shown.gid,
                shown.mode & 0o7777,
                shown.nlink
            ));
            if shown.hard_linked() {
                text.push_str(&format!(
                    "  {prefix}hard-linked: this file has {} names; the call changes it under all of them\n",
                    shown.nlink
                ));
            }
        }
        Last::Absent => text.push_str(&format!("  {prefix}object: absent\n")),
        Last::Unchecked => {}
    }
}

/// Client trust: the digest of the daemon's description of a checked request (a fresh id makes
/// it name this request only), which the client's report of its decision names.
pub fn client_digest(request: &Describe<'_>) -> String {
    let text = render(&random_hex(16), "", now(), request);
    hex::encode(fsd_proto::digest::content(text.as_bytes()))
}

/// The pending escalations and the approver's public key.
#[derive(Debug)]
pub struct Escalations {
    key: VerifyingKey,
    ttl: Duration,
    pending: Mutex<HashMap<String, Pending>>,
    /// Escalations `purge` removed as expired, for a while: id → (expiry in ms, digest), so a late
    /// use is told it expired (and audited with the digest), not that it is unknown.
    expired: Mutex<HashMap<String, (u64, String)>>,
}

/// Lately expired escalations remembered at most, and for how long after their expiry (beyond,
/// a late use is told "unknown").
const MAX_TOMBSTONES: usize = 4096;
const TOMBSTONE_MS: u64 = 600_000;

fn now() -> u64 {
    now_ms() / 1000
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // getrandom failing means no entropy: an all-zero id is still unique enough to be refused
    // as a replay, and the nonce check below then fails closed.
    let _ = getrandom::fill(&mut buf);
    hex::encode(buf)
}

/// Escapes what could disguise a path or reason in front of a person: the one escaper of
/// person-facing text (`fsd_proto::names::for_people`).
pub use fsd_proto::names::for_people as escape;

/// A request path as the daemon reads it, before any resolution: each component's name escapes
/// decoded (then shown in the one display escaping), empty and `.` components dropped. A `..` is
/// kept: the daemon resolves it after links, which only a resolution can tell. A path that is not
/// absolute is kept as written: the daemon refuses it (`FS_INVALID_PATH`) and acts on no path.
pub fn lexical(path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_owned();
    }
    let mut out = String::with_capacity(path.len());
    for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        match fsd_proto::names::unescape(component, true) {
            Ok(raw) if raw == b"." => continue,
            Ok(raw) => {
                out.push('/');
                out.push_str(&fsd_proto::names::escape(&raw));
            }
            Err(_) => {
                out.push('/');
                out.push_str(component);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// A ticket as a call presents it, with who presents it. The signature stays in the daemon.
#[derive(Debug, Clone, Copy)]
pub struct Ticket<'a> {
    pub id: &'a str,
    pub nonce: &'a [u8],
    pub session: &'a str,
    pub client: &'a str,
    pub mode: Mode,
}

/// The request the client made, to be described.
#[derive(Debug)]
pub struct Describe<'a> {
    pub session: &'a str,
    /// The client's id of the call that asked: a page link can name this one request by it
    /// before the daemon has described it (the client cannot know the id or the digest then).
    pub call: &'a str,
    pub client: &'a str,
    pub mode: Mode,
    pub justification: &'a str,
    pub ops: Vec<(CanonicalOp, Preview)>,
}

/// An escalation that expired before every call it listed was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub digest: String,
    pub session: String,
    pub client: String,
    pub mode: Mode,
    /// The first call's path, as the approver was shown it.
    pub path: String,
    /// Whether the approver had approved it (else it was still waiting for a decision).
    pub approved: bool,
    pub used: usize,
    pub total: usize,
}

/// A description ready for the approver.
#[derive(Debug, Clone)]
pub struct Described {
    pub id: String,
    pub nonce: Vec<u8>,
    pub text: String,
    /// The expiry the description signs, in Unix seconds (the exact one rounded up).
    pub expires: u64,
    /// SHA-256 of `text` (hex): what audit records and the approver's log name.
    pub digest: String,
}

impl Escalations {
    /// `public_key`: the approver's Ed25519 public key, 32 bytes as hex.
    pub fn new(public_key: &str, ttl: Duration) -> Result<Escalations, String> {
        let bytes =
            hex::decode(public_key.trim()).map_err(|e| format!("approver_public_key is not hex: {e}"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "approver_public_key must be 32 bytes (64 hex digits)".to_owned())?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|e| format!("approver_public_key: {e}"))?;
        Ok(Escalations { key, ttl, pending: Mutex::new(HashMap::new()), expired: Mutex::default() })
    }

    /// How long an approver has to decide.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Forgets expired escalations, giving their budgets back, and returns them for the audit
    /// log (an expiry is a decision too).
    pub fn purge(&self) -> Vec<Expired> {
        let t = now_ms();
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let ids: Vec<String> =
            table.iter().filter(|(_, p)| p.expires_ms <= t).map(|(id, _)| id.clone()).collect();
        let mut tombstones = self.expired.lock().unwrap_or_else(PoisonError::into_inner);
        tombstones.retain(|_, (expires_ms, _)| expires_ms.saturating_add(TOMBSTONE_MS) > t);
        let mut expired = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(p) = table.remove(&id) else { continue };
            // Every call taken (reads are kept until released): spent, not expired.
            if p.ops.iter().all(|(_, used)| *used) {
                continue;
            }
            if tombstones.len() < MAX_TOMBSTONES {
                tombstones.insert(id, (p.expires_ms, p.digest.clone()));
            }
            expired.push(Expired {
                path: p.ops.first().map(|(op, _)| op.display.clone()).unwrap_or_default(),
                used: p.ops.iter().filter(|(_, used)| *used).count(),
                total: p.ops.len(),
                approved: p.signature.is_some(),
                digest: p.digest,
                session: p.session,
                client: p.client,
                mode: p.mode,
            });
        }
        expired
    }

    /// Stores a pending escalation (holding the client's budget `permits`) and returns its
    /// canonical description.
    pub fn describe(&self, request: Describe<'_>, permits: Vec<crate::budget::Permit>) -> Described {
        let id = random_hex(16);
        let nonce_hex = random_hex(16);
        let nonce = hex::decode(&nonce_hex).unwrap_or_default();
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let expires_ms = now_ms().saturating_add(ttl_ms);
        let expires = expires_ms.div_ceil(1000);
        let text = render(&id, &nonce_hex, expires, &request);
        let digest = hex::encode(fsd_proto::digest::content(text.as_bytes()));
        // One read of each changed target per change naming it (see `take_read`); a deletion
        // changes no content a client need read, so it admits none.
        let mut content_reads: HashMap<String, usize> = HashMap::new();
        let reads = |op: &CanonicalOp| !matches!(op.op, Op::ReadText | Op::DeleteFile);
        for (op, _) in request.ops.iter().filter(|(op, _)| reads(op)) {
            let keys = std::iter::once(&op.target_key).chain(op.destination.as_ref().map(|(key, _)| key));
            for key in keys {
                *content_reads.entry(key.clone()).or_default() += 1;
            }
        }
        let pending = Pending {
            nonce: nonce.clone(),
            description: text.clone(),
            digest: digest.clone(),
            signature: None,
            _permits: permits,
            session: request.session.to_owned(),
            client: request.client.to_owned(),
            mode: request.mode,
            expires_ms,
            content_reads,
            made: Vec::new(),
            ops: request.ops.into_iter().map(|(op, _)| (op, false)).collect(),
        };
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.insert(id.clone(), pending);
        Described { id, nonce, text, expires, digest }
    }

    /// Records the approver's signature, after checking it is the configured key's over exactly
    /// the description and `decider` (who the approver says decided); a bad one leaves the
    /// escalation refused.
    pub fn approve(&self, id: &str, signature: &[u8], decider: &str) -> Result<(), TicketError> {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get_mut(id).ok_or(TicketError::Unknown)?;
        let signed = fsd_proto::signed_decision(&pending.description, decider);
        let checked = Signature::from_slice(signature)
            .map_err(|_| TicketError::BadSignature)
            .and_then(|s| self.key.verify(signed.as_bytes(), &s).map_err(|_| TicketError::BadSignature));
        match checked {
            Ok(()) => {
                pending.signature = Some((signature.to_vec(), decider.to_owned()));
                Ok(())
            }
            Err(e) => {
                table.remove(id);
                Err(e)
            }
        }
    }

    /// Forgets a refused (or undecided) escalation: it no longer counts against the client.
    pub fn refuse(&self, id: &str) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// The checks every use of a ticket passes: nonce, expiry, caller, mode, signature.
    fn verify(&self, pending: &Pending, ticket: &Ticket<'_>) -> Result<(), TicketError> {
        if pending.nonce != ticket.nonce {
            return Err(TicketError::Unknown);
        }
        if pending.expires_ms <= now_ms() {
            return Err(TicketError::Expired);
        }
        if pending.session != ticket.session || pending.client != ticket.client {
            return Err(TicketError::WrongCaller);
        }
        if pending.mode != ticket.mode {
            return Err(TicketError::WrongMode);
        }
        let (signature, decider) = pending.signature.as_ref().ok_or(TicketError::NotApproved)?;
        let signature = Signature::from_slice(signature).map_err(|_| TicketError::BadSignature)?;
        let signed = fsd_proto::signed_decision(&pending.description, decider);
        self.key.verify(signed.as_bytes(), &signature).map_err(|_| TicketError::BadSignature)
    }

    /// Who the approver said approved a pending escalation (signed with its approval).
    pub fn decider_of(&self, id: &str) -> Option<String> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(id).and_then(|p| p.signature.as_ref().map(|(_, decider)| decider.clone()))
    }

    /// The digest of a pending (or lately expired) escalation's description, for audit records.
    pub fn digest_of(&self, id: &str) -> Option<String> {
        let pending =
            self.pending.lock().unwrap_or_else(PoisonError::into_inner).get(id).map(|p| p.digest.clone());
        pending.or_else(|| {
            self.expired.lock().unwrap_or_else(PoisonError::into_inner).get(id).map(|(_, d)| d.clone())
        })
    }

    /// Why a ticket's escalation is not pending: it expired lately, or it is unknown or spent.
    fn gone(&self, id: &str) -> TicketError {
        let expired = self.expired.lock().unwrap_or_else(PoisonError::into_inner).contains_key(id);
        if expired { TicketError::Expired } else { TicketError::Unknown }
    }

    /// Whether a valid ticket's approved calls name `path` (the caller's spelling, read as
    /// [`lexical`] reads it: the approver was shown that form).
    pub fn names(&self, ticket: &Ticket<'_>, path: &str) -> bool {
        let path = lexical(path);
        let path = path.as_str();
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(ticket.id).is_some_and(|p| {
            self.verify(p, ticket).is_ok()
                && p.ops.iter().any(|(op, _)| {
                    op.display == path || op.destination.as_ref().is_some_and(|(_, d)| d == path)
                })
        })
    }

    /// What the approver signed for an approved escalation, for the worker performing its calls.
    pub fn signed(&self, id: &str) -> Option<SignedApproval> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get(id)?;
        let (signature, decider) = pending.signature.clone()?;
        Some(SignedApproval { description: pending.description.clone(), decider, signature })
    }

    /// Records the directories a call of escalation `id` made (as its worker vouched), for its
    /// later calls; only its own caller's calls record (the service does, from the outcome).
    pub fn record_made(&self, id: &str, made: Made) {
        const MOST: usize = 64;
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pending) = table.get_mut(id)
            && pending.made.len() < MOST
        {
            pending.made.push(made);
        }
    }

    /// The directories the calls of escalation `id` made so far, for the worker of the next.
    pub fn made_of(&self, id: &str) -> Vec<Made> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        table.get(id).map(|p| p.made.clone()).unwrap_or_default()
    }

    /// Checks a ticket without looking at the call: known, approved, this caller, this mode.
    pub fn check(&self, ticket: &Ticket<'_>) -> Result<(), TicketError> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get(ticket.id).ok_or_else(|| self.gone(ticket.id))?;
        self.verify(pending, ticket)
    }

    /// Checks a ticket for one call and spends that call's approval; returns the approved call
    /// (what the worker holds the call to). A call that is an approved one by path and content
    /// but meets another object there (another version, a directory on the way or the file
    /// swapped) spends the whole escalation: a new approval is needed, so one approval is never
    /// a licence to retry a race. Any other mismatch leaves it (CONTRACT's rules).
    pub fn redeem(
        &self,
        ticket: &Ticket<'_>,
        path: &str,
        call: &CanonicalOp,
    ) -> Result<CanonicalOp, TicketError> {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get_mut(ticket.id).ok_or_else(|| self.gone(ticket.id))?;
        // An expired escalation stays until `purge`, which records its expiry.
        self.verify(pending, ticket)?;
        let made = &pending.made;
        let Some(slot) = pending.ops.iter_mut().find(|(op, used)| !used && op.admits_after(call, made))
        else {
            let other_object = pending
                .ops
                .iter()
                .any(|(op, used)| !used && op.met_another_object(path, call, &pending.made));
            if other_object {
                table.remove(ticket.id);
            }
            return Err(TicketError::Mismatch);
        };
        slot.1 = true;
        let approved = slot.0.clone();
        if pending.ops.iter().all(|(_, used)| *used) {
            table.remove(ticket.id);
        }
        Ok(approved)
    }

    /// Checks a ticket for a read of one of the approved targets: an approved read, which a
    /// read of its `content` takes (`Ok(true)`: good for one read, given back by
    /// [`Escalations::give_back_read`] when the read did not happen), or a target an approved
    /// change names (an apply_patch preflight, the editor's re-read: `Ok(false)`). A read of
    /// such a target's `content` takes one of the reads the change allows it (past them, or for
    /// a deletion, which allows none: [`TicketError::ReadsSpent`]). A look at either's metadata
    /// (a stat, a write check) takes nothing.
    pub fn take_read(
        &self,
        ticket: &Ticket<'_>,
        path: &str,
        call: &CanonicalOp,
        content: bool,
    ) -> Result<(bool, Binding), TicketError> {
        let target_key = call.target_key.as_str();
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get_mut(ticket.id).ok_or_else(|| self.gone(ticket.id))?;
        self.verify(pending, ticket)?;
        // Kept until released or expired (a read may be given back), but good for nothing more.
        if pending.ops.iter().all(|(_, used)| *used) {
            return Err(TicketError::Unknown);
        }
        let walked = call.bound.clone().ok_or(TicketError::Mismatch)?;
        // An approved read of the object the read's walk met; the approved path leading to
        // another object spends the escalation (see `redeem`).
        let approved_read = |op: &CanonicalOp| op.op == Op::ReadText && op.target_key == target_key;
        let shown = lexical(path);
        let other_object = |op: &CanonicalOp| {
            op.op == Op::ReadText
                && (op.target_key == target_key || op.display == shown)
                && op.bound.as_ref() != Some(&walked)
        };
        if pending.ops.iter().any(|(op, used)| !used && other_object(op)) {
            table.remove(ticket.id);
            return Err(TicketError::Mismatch);
        }
        // A look at an approved read's metadata takes nothing: the read is for its content.
        if !content && pending.ops.iter().any(|(op, _)| approved_read(op)) {
            return Ok((false, walked));
        }
        let read = pending.ops.iter_mut().find(|(op, used)| !used && approved_read(op));
        if let (true, Some(slot)) = (content, read) {
            slot.1 = true;
            return Ok((true, walked));
        }
        // A target an approved change names: the same directories (its file the change may
        // have replaced already, as the editor's re-read after its edit finds).
        let changed = |op: &CanonicalOp| {
            op.op != Op::ReadText
                && ((op.target_key == target_key && bound_holds(op.bound.as_ref(), Some(&walked), true))
                    || op.destination.as_ref().is_some_and(|(key, _)| key == target_key)
                        && bound_holds(op.destination_bound.as_ref(), Some(&walked), true))
        };
        if !pending.ops.iter().any(|(op, _)| changed(op)) {
            return Err(TicketError::Mismatch);
        }
        if content {
            match pending.content_reads.get_mut(target_key) {
                Some(left) if *left > 0 => *left -= 1,
                _ => return Err(TicketError::ReadsSpent),
            }
        }
        Ok((false, Binding { last: Last::Unchecked, ..walked }))
    }

    /// Gives back the approved read of `target_key` a read took and did not use.
    pub fn give_back_read(&self, ticket: &Ticket<'_>, target_key: &str) {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(pending) = table.get_mut(ticket.id) else { return };
        if pending.session != ticket.session || pending.client != ticket.client {
            return;
        }
        let taken = pending
            .ops
            .iter_mut()
            .find(|(op, used)| *used && op.op == Op::ReadText && op.target_key == target_key);
        if let Some(slot) = taken {
            slot.1 = false;
        }
    }

    /// Spends whatever is left of an escalation (the client finished its patch): only its own
    /// caller may, as only it may use it.
    pub fn release(&self, id: &str, session: &str, client: &str) {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if table.get(id).is_some_and(|p| p.session == session && p.client == client) {
            table.remove(id);
        }
    }
}

pub mod authority;
pub mod diff;

/// Test hook (cargo feature `fault-injection`): what a compromised network process could hand
/// the worker performing an approved change. `FSD_FAULT_TAMPER_APPROVAL=none` sends the call
/// without the approver's signature, `forged` with a signature that is not the approver's;
/// `FSD_FAULT_REDIRECT_APPROVED=PATH` sends an approved write to `PATH` instead, with the
/// approval and the binding of the name approved; `FSD_FAULT_SKIP_HARD_LINK_CHECK` has the
/// network process ask an approver about a hard-linked file beyond its requester's authority,
/// and `=lie` also tells the worker the requester is root.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use crate::op::{Bindings, Request, SignedApproval};

    pub fn redirected(request: Request, bindings: Bindings) -> (Request, Bindings) {
        let Ok(elsewhere) = std::env::var("FSD_FAULT_REDIRECT_APPROVED") else { return (request, bindings) };
        match request {
            Request::WriteText { path, content, guard, match_style } => {
                let bindings = bindings
                    .into_iter()
                    .map(|(p, b)| (if p == path { elsewhere.clone() } else { p }, b))
                    .collect();
                (Request::WriteText { path: elsewhere, content, guard, match_style }, bindings)
            }
            other => (other, bindings),
        }
    }

    pub fn skips_hard_link_check() -> bool {
        std::env::var_os("FSD_FAULT_SKIP_HARD_LINK_CHECK").is_some()
    }

    pub fn lies_about_the_requester() -> bool {
        std::env::var("FSD_FAULT_SKIP_HARD_LINK_CHECK").is_ok_and(|v| v == "lie")
    }

    pub fn tampered(approval: Option<SignedApproval>) -> Option<SignedApproval> {
        match std::env::var("FSD_FAULT_TAMPER_APPROVAL").as_deref() {
            Ok("none") => None,
            Ok("forged") => approval.map(|mut a| {
                a.signature.iter_mut().for_each(|b| *b ^= 0x5a);
                a
            }),
            _ => approval,
        }
    }
}

#[cfg(test)]
mod tests;
