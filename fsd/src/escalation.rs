//! Signed escalation: the daemon describes the calls a client wants to make at a wider mode in
//! canonical bytes (its own resolution of every path, the current version, the content digest),
//! keeps them pending with a nonce and an expiry, and accepts a retried call only with an Ed25519
//! signature over exactly those bytes by the configured approver key, once per approved call.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use crate::backend::Mode;
use crate::op::Op;

/// One approved call, as the daemon resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalOp {
    pub op: Op,
    /// Target key and display path of the (source) target.
    pub target_key: String,
    pub display: String,
    /// The version found when described, or `None` for an absent target.
    pub version: Option<String>,
    /// For moves: the destination's key and display path.
    pub destination: Option<(String, String)>,
    pub content_sha256: Vec<u8>,
}

/// What an approver is shown besides the canonical fields: a diff the daemon made. Not part of
/// what a call is compared against (the digest is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preview {
    pub lines: Vec<String>,
}

impl CanonicalOp {
    /// Whether `call` is this approved call. An approval without a content digest (the
    /// operations of an apply_patch, described before their content is known) binds the
    /// operation, the resolved targets and their versions, not the content.
    pub fn admits(&self, call: &CanonicalOp) -> bool {
        self.op == call.op
            && self.target_key == call.target_key
            && self.version == call.version
            && self.destination == call.destination
            && (self.content_sha256.is_empty() || self.content_sha256 == call.content_sha256)
    }
}

/// A described escalation waiting for its signed calls.
#[derive(Debug)]
struct Pending {
    nonce: Vec<u8>,
    description: String,
    session: String,
    client: String,
    mode: Mode,
    expires: u64,
    /// Approved calls; each is used once.
    ops: Vec<(CanonicalOp, bool)>,
}

/// Why a ticket is refused. Every refusal is final for that ticket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("unknown or already spent escalation")]
    Unknown,
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
}

/// The pending escalations and the approver's public key.
#[derive(Debug)]
pub struct Escalations {
    key: VerifyingKey,
    ttl: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // getrandom failing means no entropy: an all-zero id is still unique enough to be refused
    // as a replay, and the nonce check below then fails closed.
    let _ = getrandom::fill(&mut buf);
    hex::encode(buf)
}

/// Escapes what could disguise a path or reason in front of a person: control, bidi and
/// non-ASCII characters become `\u{…}`.
pub fn escape(text: &str) -> String {
    text.chars()
        .map(
            |c| if c.is_ascii_graphic() || c == ' ' { c.to_string() } else { c.escape_unicode().to_string() },
        )
        .collect()
}

/// A ticket as a call presents it, with who presents it.
#[derive(Debug, Clone, Copy)]
pub struct Ticket<'a> {
    pub id: &'a str,
    pub nonce: &'a [u8],
    pub signature: &'a [u8],
    pub session: &'a str,
    pub client: &'a str,
    pub mode: Mode,
}

/// The request the client made, to be described.
#[derive(Debug)]
pub struct Describe<'a> {
    pub session: &'a str,
    pub client: &'a str,
    pub mode: Mode,
    pub justification: &'a str,
    pub ops: Vec<(CanonicalOp, Preview)>,
}

/// A description ready for the approver.
#[derive(Debug, Clone)]
pub struct Described {
    pub id: String,
    pub nonce: Vec<u8>,
    pub text: String,
    pub expires: u64,
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
        Ok(Escalations { key, ttl, pending: Mutex::new(HashMap::new()) })
    }

    /// Stores a pending escalation and returns its canonical description.
    pub fn describe(&self, request: Describe<'_>) -> Described {
        let id = random_hex(16);
        let nonce_hex = random_hex(16);
        let nonce = hex::decode(&nonce_hex).unwrap_or_default();
        let expires = now() + self.ttl.as_secs().max(1);
        let mut text = format!(
            "fsd escalation v1\nid: {id}\nnonce: {nonce_hex}\nsession: {}\nclient: {}\nmode: {}\njustification: {}\nexpires: {expires}\n",
            escape(request.session),
            escape(request.client),
            request.mode.as_str(),
            escape(request.justification),
        );
        for (i, (op, preview)) in request.ops.iter().enumerate() {
            text.push_str(&format!("op {}: {} {}\n", i + 1, op.op.name(), escape(&op.display)));
            text.push_str(&format!("  target: {}\n", escape(&op.target_key)));
            text.push_str(&format!("  current: {}\n", op.version.as_deref().unwrap_or("absent")));
            if let Some((key, display)) = &op.destination {
                text.push_str(&format!("  destination: {} ({})\n", escape(display), escape(key)));
            }
            if !op.content_sha256.is_empty() {
                text.push_str(&format!("  content-sha256: {}\n", hex::encode(&op.content_sha256)));
            }
            if !preview.lines.is_empty() {
                text.push_str("  diff:\n");
                for line in &preview.lines {
                    text.push_str(&format!("    {}\n", escape(line)));
                }
            }
        }
        let pending = Pending {
            nonce: nonce.clone(),
            description: text.clone(),
            session: request.session.to_owned(),
            client: request.client.to_owned(),
            mode: request.mode,
            expires,
            ops: request.ops.into_iter().map(|(op, _)| (op, false)).collect(),
        };
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        // Expired entries go whenever a new one arrives: the table stays bounded by the rate of
        // requests within one TTL.
        let t = now();
        table.retain(|_, p| p.expires > t);
        table.insert(id.clone(), pending);
        Described { id, nonce, text, expires }
    }

    /// The checks every use of a ticket passes: nonce, expiry, caller, mode, signature.
    fn verify(&self, pending: &Pending, ticket: &Ticket<'_>) -> Result<(), TicketError> {
        if pending.nonce != ticket.nonce {
            return Err(TicketError::Unknown);
        }
        if pending.expires <= now() {
            return Err(TicketError::Expired);
        }
        if pending.session != ticket.session || pending.client != ticket.client {
            return Err(TicketError::WrongCaller);
        }
        if pending.mode != ticket.mode {
            return Err(TicketError::WrongMode);
        }
        let signature = Signature::from_slice(ticket.signature).map_err(|_| TicketError::BadSignature)?;
        self.key.verify(pending.description.as_bytes(), &signature).map_err(|_| TicketError::BadSignature)
    }

    /// Checks a ticket for one call and spends that call's approval.
    pub fn redeem(&self, ticket: &Ticket<'_>, call: &CanonicalOp) -> Result<(), TicketError> {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get_mut(ticket.id).ok_or(TicketError::Unknown)?;
        if let Err(e) = self.verify(pending, ticket) {
            if e == TicketError::Expired {
                table.remove(ticket.id);
            }
            return Err(e);
        }
        let slot = pending
            .ops
            .iter_mut()
            .find(|(op, used)| !used && op.admits(call))
            .ok_or(TicketError::Mismatch)?;
        slot.1 = true;
        if pending.ops.iter().all(|(_, used)| *used) {
            table.remove(ticket.id);
        }
        Ok(())
    }

    /// Checks a ticket for a read of one of the approved targets (an apply_patch preflight);
    /// reads spend nothing.
    pub fn check_read(&self, ticket: &Ticket<'_>, target_key: &str) -> Result<(), TicketError> {
        let table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let pending = table.get(ticket.id).ok_or(TicketError::Unknown)?;
        self.verify(pending, ticket)?;
        let approved = pending.ops.iter().any(|(op, _)| {
            op.target_key == target_key || op.destination.as_ref().is_some_and(|(key, _)| key == target_key)
        });
        if approved { Ok(()) } else { Err(TicketError::Mismatch) }
    }

    /// Spends whatever is left of an escalation (the client finished its patch).
    pub fn release(&self, id: &str, session: &str) {
        let mut table = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if table.get(id).is_some_and(|p| p.session == session) {
            table.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn op(path: &str) -> CanonicalOp {
        CanonicalOp {
            op: Op::WriteText,
            target_key: format!("host:{path}"),
            display: format!("/{path}"),
            version: None,
            destination: None,
            content_sha256: vec![1, 2, 3],
        }
    }

    fn setup() -> (SigningKey, Escalations, Described) {
        let signing = SigningKey::from_bytes(&[7u8; 32]);
        let esc = Escalations::new(&hex::encode(signing.verifying_key().to_bytes()), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        let described = esc.describe(Describe {
            session: "s1",
            client: "uid:0",
            mode: Mode::DangerFullAccess,
            justification: "needed\u{202e}",
            ops: vec![(op("etc/x"), Preview { lines: vec!["+new\u{202e}".into()] })],
        });
        (signing, esc, described)
    }

    #[test]
    fn a_ticket_is_good_once_for_the_approved_call_only() {
        let (signing, esc, d) = setup();
        assert!(d.text.contains("justification: needed\\u{202e}\n"), "{}", d.text);
        assert!(d.text.contains("  diff:\n    +new\\u{202e}\n"), "{}", d.text);
        let sig = signing.sign(d.text.as_bytes()).to_bytes();
        let redeem = |call: &CanonicalOp, session: &str, mode: Mode, sig: &[u8]| {
            let ticket =
                Ticket { id: &d.id, nonce: &d.nonce, signature: sig, session, client: "uid:0", mode };
            esc.redeem(&ticket, call)
        };
        let forged = SigningKey::from_bytes(&[8u8; 32]).sign(d.text.as_bytes()).to_bytes();
        assert_eq!(
            redeem(&op("etc/x"), "s1", Mode::DangerFullAccess, &forged),
            Err(TicketError::BadSignature)
        );
        assert_eq!(redeem(&op("etc/y"), "s1", Mode::DangerFullAccess, &sig), Err(TicketError::Mismatch));
        assert_eq!(redeem(&op("etc/x"), "s2", Mode::DangerFullAccess, &sig), Err(TicketError::WrongCaller));
        assert_eq!(redeem(&op("etc/x"), "s1", Mode::WorkspaceWrite, &sig), Err(TicketError::WrongMode));
        assert_eq!(redeem(&op("etc/x"), "s1", Mode::DangerFullAccess, &sig), Ok(()));
        assert_eq!(redeem(&op("etc/x"), "s1", Mode::DangerFullAccess, &sig), Err(TicketError::Unknown));
    }

    #[test]
    fn escaping_shows_what_is_there() {
        assert_eq!(escape("a b/c"), "a b/c");
        assert_eq!(escape("x\ny"), "x\\u{a}y");
        assert_eq!(escape("é"), "\\u{e9}");
    }
}
