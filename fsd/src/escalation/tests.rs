//! Unit tests of escalation tickets: binding, signatures, budgets, read counts, rendering.

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
        bound: Some(binding(7)),
        destination_bound: None,
    }
}

/// A binding of a walk that stood in directory `ino` (on device 1, mount 2).
fn binding(ino: u64) -> Binding {
    Binding { dirs: vec![crate::op::ObjectId { dev: 1, ino, mount: 2 }], missing: 0, last: Last::Absent }
}

/// A read of `key` whose walk stood in directory 7, as `op`'s did.
fn read_of(key: &str) -> CanonicalOp {
    CanonicalOp { op: Op::ReadText, target_key: key.to_owned(), content_sha256: Vec::new(), ..op("etc/x") }
}

fn describe(esc: &Escalations, client: &str, permit: Option<crate::budget::Permit>) -> Described {
    let permits = permit.into_iter().collect();
    let preview = Preview { lines: diff::bounded(["+new\u{202e}"]), ..Preview::default() };
    let ops = vec![(op("etc/x"), preview)];
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client,
        mode: Mode::DangerFullAccess,
        justification: "needed\u{202e}",
        ops,
    };
    esc.describe(request, permits)
}

/// The ticket of `d` as session `s1` of `client` presents it, at danger-full-access.
fn ticket<'a>(d: &'a Described, client: &'a str) -> Ticket<'a> {
    Ticket { id: &d.id, nonce: &d.nonce, session: "s1", client, mode: Mode::DangerFullAccess }
}

/// `ops` described for uid 0 at danger-full-access, and approved by a person.
fn approved(signing: &SigningKey, esc: &Escalations, ops: Vec<(CanonicalOp, Preview)>) -> Described {
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client: "uid:0",
        mode: Mode::DangerFullAccess,
        justification: "why",
        ops,
    };
    let d = esc.describe(request, Vec::new());
    let signed = fsd_proto::signed_decision(&d.text, "person");
    assert_eq!(esc.approve(&d.id, &signing.sign(signed.as_bytes()).to_bytes(), "person"), Ok(()));
    d
}

fn setup(ttl: u64) -> (SigningKey, Escalations) {
    let signing = SigningKey::from_bytes(&[7u8; 32]);
    let public = hex::encode(signing.verifying_key().to_bytes());
    let esc = Escalations::new(&public, Duration::from_secs(ttl)).unwrap_or_else(|e| panic!("{e}"));
    (signing, esc)
}

#[test]
fn a_ticket_is_good_once_for_the_approved_call_only() {
    let (signing, esc) = setup(60);
    let d = describe(&esc, "uid:0", None);
    assert!(d.text.contains("justification: needed\\u{202e}\n"), "{}", d.text);
    assert!(d.text.contains("  diff:\n    +new\\u{202e}\n"), "{}", d.text);
    assert_eq!(d.digest, hex::encode(fsd_proto::digest::content(d.text.as_bytes())));
    let redeem = |call: &CanonicalOp, session: &str, mode: Mode| {
        let ticket = Ticket { id: &d.id, nonce: &d.nonce, session, client: "uid:0", mode };
        esc.redeem(&ticket, &call.display, call).map(drop)
    };
    // Not decided yet: nothing is admitted.
    assert_eq!(redeem(&op("etc/x"), "s1", Mode::DangerFullAccess), Err(TicketError::NotApproved));
    let sig = signing.sign(fsd_proto::signed_decision(&d.text, "person").as_bytes()).to_bytes();
    assert_eq!(redeem(&op("etc/y"), "s1", Mode::DangerFullAccess), Err(TicketError::NotApproved));
    assert_eq!(esc.approve(&d.id, &sig, "person"), Ok(()));
    assert_eq!(esc.decider_of(&d.id).as_deref(), Some("person"));
    assert_eq!(redeem(&op("etc/y"), "s1", Mode::DangerFullAccess), Err(TicketError::Mismatch));
    assert_eq!(redeem(&op("etc/x"), "s2", Mode::DangerFullAccess), Err(TicketError::WrongCaller));
    assert_eq!(redeem(&op("etc/x"), "s1", Mode::WorkspaceWrite), Err(TicketError::WrongMode));
    // Another client in a session of the same name cannot end it either.
    esc.release(&d.id, "s1", "uid:1");
    assert_eq!(redeem(&op("etc/x"), "s1", Mode::DangerFullAccess), Ok(()));
    assert_eq!(redeem(&op("etc/x"), "s1", Mode::DangerFullAccess), Err(TicketError::Unknown));
}

#[test]
fn a_call_after_an_earlier_one_is_admitted_at_any_version_but_only_with_its_content() {
    let approved = CanonicalOp { version: Some(AFTER_EARLIER.into()), ..op("etc/x") };
    let check = |call: CanonicalOp, want: bool| assert_eq!(approved.admits(&call), want, "{call:?}");
    check(CanonicalOp { version: Some("v2".into()), ..op("etc/x") }, true);
    check(op("etc/x"), true);
    check(CanonicalOp { content_sha256: vec![9], ..op("etc/x") }, false);
    check(op("etc/y"), false);
    let plain = CanonicalOp { version: Some("v1".into()), ..op("etc/x") };
    assert!(!plain.admits(&CanonicalOp { version: Some("v2".into()), ..op("etc/x") }));
}

#[test]
fn a_signature_by_another_key_refuses_the_escalation() {
    let (_, esc) = setup(60);
    let d = describe(&esc, "uid:0", None);
    let signed = fsd_proto::signed_decision(&d.text, "person");
    let forged = SigningKey::from_bytes(&[8u8; 32]).sign(signed.as_bytes()).to_bytes();
    assert_eq!(esc.approve(&d.id, &forged, "person"), Err(TicketError::BadSignature));
    let ticket = ticket(&d, "uid:0");
    assert_eq!(esc.redeem(&ticket, "/etc/x", &op("etc/x")).map(drop), Err(TicketError::Unknown));
}

#[test]
fn an_escalation_holds_its_clients_budget_until_it_is_decided_or_expires() {
    use crate::budget::{Budgets, Limits};
    use crate::identity::Identity;
    let budgets = Budgets::new(Limits { pending_escalations: 1, ..Limits::default() });
    let who = Identity { uid: Some(1), ..Identity::default() };
    let (_, esc) = setup(60);
    let first = describe(&esc, "uid:1", budgets.escalation(&who).ok());
    assert!(budgets.escalation(&who).is_err(), "the pending escalation holds the budget");
    esc.refuse(&first.id);
    let permit = budgets.escalation(&who);
    assert!(permit.is_ok(), "a refusal gives it back");
    drop(permit);
    let (_, short) = setup(1);
    let late = describe(&short, "uid:1", budgets.escalation(&who).ok());
    std::thread::sleep(Duration::from_millis(2100));
    let expired = short.purge();
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (expired[0].path.as_str(), expired[0].approved, expired[0].used, expired[0].total),
        ("/etc/x", false, 0, 1)
    );
    assert!(short.purge().is_empty(), "each expiry is returned once");
    let ticket = ticket(&late, "uid:1");
    assert_eq!(short.check(&ticket), Err(TicketError::Expired), "a late use is told it expired");
    assert_eq!(short.digest_of(&late.id), Some(late.digest.clone()));
    assert!(budgets.escalation(&who).is_ok(), "an expired escalation gives it back");
}

/// A ttl of one second is one second from when the escalation is described, whatever second
/// that falls in: described just before a second boundary, its ticket still serves after it
/// (a whole-second expiry ended it at that boundary), and not once its second is over.
#[test]
fn a_one_second_ticket_is_good_for_its_second_and_no_longer() {
    let (signing, esc) = setup(1);
    while now_ms() % 1000 < 850 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let d = describe(&esc, "uid:0", None);
    let signed = fsd_proto::signed_decision(&d.text, "person");
    assert_eq!(esc.approve(&d.id, &signing.sign(signed.as_bytes()).to_bytes(), "person"), Ok(()));
    // Past the second boundary, well within the second.
    std::thread::sleep(Duration::from_millis(300));
    let ticket = ticket(&d, "uid:0");
    assert_eq!(esc.check(&ticket), Ok(()), "usable right after approval");
    // The description signs the second the expiry falls in, rounded up: never an earlier one.
    assert!(d.text.contains(&format!("expires: {}\n", d.expires)), "{}", d.text);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(esc.check(&ticket), Err(TicketError::Expired), "refused once its second is over");
    assert_eq!(esc.redeem(&ticket, "/etc/x", &op("etc/x")).map(drop), Err(TicketError::Expired));
}

#[test]
fn a_taken_read_is_spent_not_expired_and_a_too_large_one_is_given_back() {
    let (signing, esc) = setup(2);
    let read = CanonicalOp { op: Op::ReadText, content_sha256: Vec::new(), ..op("etc/x") };
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client: "uid:0",
        mode: Mode::DangerFullAccess,
        justification: "why",
        ops: vec![(read, Preview::default())],
    };
    let d = esc.describe(request, Vec::new());
    let signed = fsd_proto::signed_decision(&d.text, "rules r.toml: rule 1");
    assert_eq!(
        esc.approve(&d.id, &signing.sign(signed.as_bytes()).to_bytes(), "rules r.toml: rule 1"),
        Ok(())
    );
    let ticket = ticket(&d, "uid:0");
    assert_eq!(
        esc.take_read(&ticket, "/unnamed", &read_of("host:etc/x"), true).map(|(taken, _)| taken),
        Ok(true)
    );
    assert_eq!(
        esc.take_read(&ticket, "/unnamed", &read_of("host:etc/x"), true).map(|(taken, _)| taken),
        Err(TicketError::Unknown)
    );
    esc.give_back_read(&ticket, "host:etc/x");
    assert_eq!(
        esc.take_read(&ticket, "/unnamed", &read_of("host:etc/x"), true).map(|(taken, _)| taken),
        Ok(true)
    );
    std::thread::sleep(Duration::from_millis(2100));
    assert!(esc.purge().is_empty(), "a spent escalation is not reported as expired");
    assert_eq!(esc.check(&ticket), Err(TicketError::Unknown));
}

#[test]
fn who_decided_is_signed_with_the_approval() {
    let check = |signed_as: &str, claimed: &str, want: Result<(), TicketError>| {
        let (signing, esc) = setup(60);
        let d = describe(&esc, "uid:0", None);
        let signed = fsd_proto::signed_decision(&d.text, signed_as);
        let sig = signing.sign(signed.as_bytes()).to_bytes();
        assert_eq!(esc.approve(&d.id, &sig, claimed), want, "{signed_as} / {claimed}");
    };
    check("rules /etc/r.toml: rule 2", "rules /etc/r.toml: rule 2", Ok(()));
    // Another decider than the one signed: a rule's approval cannot be passed off as a
    // person's, nor the other way round.
    check("rules /etc/r.toml: rule 2", "person", Err(TicketError::BadSignature));
    check("person", "rules /etc/r.toml: rule 2", Err(TicketError::BadSignature));
    // A signature over the description alone (the old form) names nobody: refused.
    let (signing, esc) = setup(60);
    let d = describe(&esc, "uid:0", None);
    let bare = signing.sign(d.text.as_bytes()).to_bytes();
    assert_eq!(esc.approve(&d.id, &bare, ""), Err(TicketError::BadSignature));
}

#[test]
fn an_approval_without_content_admits_no_content() {
    let moved = CanonicalOp {
        op: Op::MoveFile,
        content_sha256: Vec::new(),
        destination: Some(("host:etc/y".into(), "/etc/y".into())),
        ..op("etc/x")
    };
    assert!(moved.admits(&moved.clone()));
    assert!(!moved.admits(&CanonicalOp { content_sha256: vec![4, 5, 6], ..moved.clone() }));
}

/// The description as an approver reads it: the resolved paths first, the requested ones
/// beside them only where they differ.
#[test]
fn the_description_shows_the_resolved_path_and_the_requested_one_beside_it() {
    let (_, esc) = setup(60);
    let ops = vec![
        (
            CanonicalOp { display: "/etc/passwd".into(), ..op("etc/passwd") },
            Preview { requested: Some(r"/\x65tc/./passwd".into()), ..Preview::default() },
        ),
        (
            CanonicalOp {
                op: Op::MoveFile,
                display: "/etc/a".into(),
                content_sha256: Vec::new(),
                destination: Some(("host:etc/b".into(), "/etc/b".into())),
                ..op("etc/a")
            },
            Preview { requested_destination: Some("/etc/c/../b".into()), ..Preview::default() },
        ),
    ];
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client: "uid:0",
        mode: Mode::DangerFullAccess,
        justification: "why",
        ops,
    };
    let d = esc.describe(request, Vec::new());
    let body = d.text.split_once("justification: why\n").map(|(_, rest)| rest).unwrap_or_default();
    let body = body.split_once('\n').map(|(_, rest)| rest).unwrap_or_default();
    assert_eq!(
        body,
        "op 1: writeText /etc/passwd\n  requested-as: /\\x65tc/./passwd\n  target: host:etc/passwd\n  current: absent\n  resolved: 1:7@2\n  object: absent\n  content-sha256: 010203\nop 2: moveFile /etc/a\n  target: host:etc/a\n  current: absent\n  resolved: 1:7@2\n  object: absent\n  destination: /etc/b\n  destination-target: host:etc/b\n  destination-requested-as: /etc/c/../b\n",
        "{}",
        d.text
    );
}

/// A preview that cannot show everything says so where the person reads it: a cut line, the
/// lines left out, a cut reason; and nothing in them can restyle the person's terminal.
#[test]
fn a_partial_preview_is_said_to_be_partial_in_the_description() {
    let (_, esc) = setup(60);
    let huge = format!("+{}\u{1b}[8m{}", " ".repeat(300), "x".repeat(1 << 20));
    let lines = ["@@ -0,0 +1 @@".to_owned(), huge];
    let preview = Preview { lines: diff::bounded(lines.iter()), ..Preview::default() };
    let justification = format!("the user asked\u{202e}{}", "!".repeat(2000));
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client: "uid:0",
        mode: Mode::DangerFullAccess,
        justification: &justification,
        ops: vec![(CanonicalOp { display: "/etc/x".into(), ..op("etc/x") }, preview)],
    };
    let d = esc.describe(request, Vec::new());
    let body = d.text.split_once("mode: danger-full-access\n").map(|(_, rest)| rest).unwrap_or_default();
    let expires = format!("expires: {}\n", d.expires);
    let body = body.replace(&expires, "expires: <expiry>\n");
    assert_eq!(
        body,
        format!(
            "justification: the user asked\\u{{202e}}{}\njustification-not-shown: {} more bytes\nexpires: <expiry>\nop 1: writeText /etc/x\n  target: host:etc/x\n  current: absent\n  resolved: 1:7@2\n  object: absent\n  content-sha256: 010203\n  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n    @@ -0,0 +1 @@\n    +{}\n    ! diff line 2: {} more bytes not shown\n",
            "!".repeat(1000 - 14 - 8),
            2000 - (1000 - 14 - 8),
            " ".repeat(239),
            61 + 4 + (1 << 20),
        )
    );
}

/// A change's approval lets the client read what it changes as often as its preflight
/// needs: once per change naming the target (a stat or a write check is free), no more.
#[test]
fn a_change_admits_one_read_of_each_target_per_change() {
    let (signing, esc) = setup(60);
    let moved = CanonicalOp {
        op: Op::MoveFile,
        content_sha256: Vec::new(),
        destination: Some(("host:etc/b".into(), "/etc/b".into())),
        destination_bound: Some(binding(7)),
        ..op("etc/a")
    };
    let ops = vec![
        (op("etc/x"), Preview::default()),
        (op("etc/a"), Preview::default()),
        (moved, Preview::default()),
    ];
    let d = approved(&signing, &esc, ops);
    let ticket = ticket(&d, "uid:0");
    let check = |key: &str, content: bool, want: Result<bool, TicketError>| {
        assert_eq!(
            esc.take_read(&ticket, "/unnamed", &read_of(key), content).map(|(taken, _)| taken),
            want,
            "{key} content={content}"
        );
    };
    check("host:etc/x", false, Ok(false));
    check("host:etc/x", true, Ok(false));
    check("host:etc/x", false, Ok(false));
    check("host:etc/x", true, Err(TicketError::ReadsSpent));
    // Written, then moved: two changes name it, two reads.
    check("host:etc/a", true, Ok(false));
    check("host:etc/a", true, Ok(false));
    check("host:etc/a", true, Err(TicketError::ReadsSpent));
    check("host:etc/b", true, Ok(false));
    check("host:etc/b", true, Err(TicketError::ReadsSpent));
    check("host:etc/y", false, Err(TicketError::Mismatch));
}

/// A stat under an approved read leaves the read for the content it was approved for; an
/// approved deletion lets its client look at the file, not read it.
#[test]
fn a_stat_takes_no_approved_read_and_a_deletion_admits_no_content_read() {
    let (signing, esc) = setup(60);
    let read = CanonicalOp { op: Op::ReadText, content_sha256: Vec::new(), ..op("etc/r") };
    let delete = CanonicalOp { op: Op::DeleteFile, content_sha256: Vec::new(), ..op("etc/d") };
    let ops = vec![(read, Preview::default()), (delete.clone(), Preview::default())];
    let d = approved(&signing, &esc, ops);
    let ticket = ticket(&d, "uid:0");
    let check = |key: &str, content: bool, want: Result<bool, TicketError>| {
        assert_eq!(
            esc.take_read(&ticket, "/unnamed", &read_of(key), content).map(|(taken, _)| taken),
            want,
            "{key} content={content}"
        );
    };
    check("host:etc/r", false, Ok(false));
    check("host:etc/r", false, Ok(false));
    check("host:etc/r", true, Ok(true));
    check("host:etc/r", false, Ok(false));
    check("host:etc/d", false, Ok(false));
    check("host:etc/d", true, Err(TicketError::ReadsSpent));
    assert_eq!(
        esc.redeem(&ticket, &delete.display, &delete).map(drop),
        Ok(()),
        "the deletion itself is admitted"
    );
}

#[test]
fn known_targets_are_per_caller() {
    let known = Known::default();
    known.record("s1", "uid:1", "host:etc/x", None);
    assert!(known.knows("s1", "uid:1", "host:etc/x"));
    assert!(!known.knows("s2", "uid:1", "host:etc/x"));
    assert!(!known.knows("s1", "uid:2", "host:etc/x"));
    assert!(!known.knows("s1", "uid:1", "host:etc/y"));
}

#[test]
fn approver_endpoints() {
    let check = |text: &str, want: Option<ApproverEndpoint>| {
        assert_eq!(ApproverEndpoint::parse(text), want, "{text}")
    };
    check("unix:/run/a.sock", Some(ApproverEndpoint::Unix("/run/a.sock".into())));
    check("tcp:127.0.0.1:7000", Some(ApproverEndpoint::Tcp("127.0.0.1:7000".into())));
    check("unix:relative", None);
    check("tcp:host", None);
    check("http://x", None);
}

#[test]
fn a_requested_path_is_read_as_the_daemon_reads_it() {
    let check = |path: &str, want: &str| assert_eq!(lexical(path), want, "{path}");
    check("/etc/passwd", "/etc/passwd");
    check(r"/\x65tc/passwd", "/etc/passwd");
    check("/etc//./passwd", "/etc/passwd");
    check(r"/etc/\x2e/passwd", "/etc/passwd");
    check(r"/srv/donn\u{e9}es", "/srv/données");
    check(r"/tmp/a\x1bb", r"/tmp/a\x1bb");
    check("/srv/a/../b", "/srv/a/../b");
    check("/", "/");
    // Not absolute: refused by the daemon, so shown as sent, never as a path under `/`.
    check("relative/a.txt", "relative/a.txt");
    check("", "");
}

#[test]
fn escaping_shows_what_is_there() {
    assert_eq!(escape("a b/c"), "a b/c");
    assert_eq!(escape("x\ny"), "x\\u{a}y");
    assert_eq!(escape("é"), "\\u{e9}");
}

/// A call that is the approved one by path and content but meets another object (a directory
/// on the way swapped, the final entry replaced, another version) spends the escalation: one
/// approval is one try. Other content is refused and leaves the approval for the right call.
#[test]
fn a_call_that_meets_another_object_spends_the_escalation() {
    let (signing, esc) = setup(60);
    let moved_dir = CanonicalOp { bound: Some(binding(8)), ..op("etc/x") };
    let replaced = CanonicalOp {
        bound: Some(Binding {
            last: Last::Is(
                crate::op::ObjectId { dev: 1, ino: 9, mount: 2 },
                crate::op::Shown { uid: 0, gid: 0, mode: 0o600, nlink: 1 },
            ),
            ..binding(7)
        }),
        ..op("etc/x")
    };
    let newer = CanonicalOp { version: Some("v2".into()), ..op("etc/x") };
    for other in [moved_dir, replaced, newer] {
        let d = approved(&signing, &esc, vec![(op("etc/x"), Preview::default())]);
        let ticket = ticket(&d, "uid:0");
        let content = CanonicalOp { content_sha256: vec![9], ..op("etc/x") };
        assert_eq!(esc.redeem(&ticket, &content.display, &content).map(drop), Err(TicketError::Mismatch));
        assert_eq!(esc.check(&ticket), Ok(()), "other content leaves the approval");
        assert_eq!(
            esc.redeem(&ticket, &other.display, &other).map(drop),
            Err(TicketError::Mismatch),
            "{other:?}"
        );
        assert_eq!(
            esc.redeem(&ticket, "/etc/x", &op("etc/x")).map(drop),
            Err(TicketError::Unknown),
            "{other:?}"
        );
    }
    // An approved read of a path whose walk met another object: spent too.
    let read = CanonicalOp { op: Op::ReadText, content_sha256: Vec::new(), ..op("etc/r") };
    let d = approved(&signing, &esc, vec![(read.clone(), Preview::default())]);
    let ticket = ticket(&d, "uid:0");
    let swapped = CanonicalOp { bound: Some(binding(8)), ..read.clone() };
    assert_eq!(
        esc.take_read(&ticket, &swapped.display, &swapped, true).map(|(t, _)| t),
        Err(TicketError::Mismatch)
    );
    assert_eq!(esc.take_read(&ticket, &read.display, &read, true).map(|(t, _)| t), Err(TicketError::Unknown));
}

/// The approver is shown the object a path resolved to: the directories walked, and the final
/// entry's owner, mode and links, a file with more than one name said in words.
#[test]
fn the_description_shows_the_resolved_object_and_a_hard_linked_file() {
    let (_, esc) = setup(60);
    let shown = crate::op::Shown { uid: 0, gid: 0, mode: 0o100600, nlink: 2 };
    let object = crate::op::ObjectId { dev: 1, ino: 9, mount: 2 };
    let linked = CanonicalOp {
        version: Some("v1".into()),
        bound: Some(Binding { last: Last::Is(object, shown), ..binding(7) }),
        ..op("etc/x")
    };
    let made = CanonicalOp { bound: Some(Binding { missing: 2, ..binding(7) }), ..op("etc/new/deeper/y") };
    let request = Describe {
        session: "s1",
        call: "s1-1",
        client: "uid:0",
        mode: Mode::DangerFullAccess,
        justification: "why",
        ops: vec![(linked, Preview::default()), (made, Preview::default())],
    };
    let text = esc.describe(request, Vec::new()).text;
    let ops = &text[text.find("op 1:").unwrap()..];
    assert_eq!(
        ops,
        "op 1: writeText /etc/x\n  target: host:etc/x\n  current: v1\n  resolved: 1:7@2\n  object: 1:9@2 owner 0:0 mode 0600 links 2\n  hard-linked: this file has 2 names; the call changes it under all of them\n  content-sha256: 010203\nop 2: writeText /etc/new/deeper/y\n  target: host:etc/new/deeper/y\n  current: absent\n  resolved: 1:7@2\n  makes-directories: 2\n  object: absent\n  content-sha256: 010203\n"
    );
}

/// The worker's own check of an approval: the approver's signature over a description that
/// lists this change, on the objects the worker's walk is held to, with the content it writes.
#[test]
fn a_worker_performs_only_a_change_its_approver_signed() {
    use crate::op::Request;
    let (signing, esc) = setup(60);
    let approved_op = CanonicalOp { content_sha256: fsd_proto::digest::content(b"new\n"), ..op("etc/x") };
    let d = approved(&signing, &esc, vec![(approved_op, Preview::default())]);
    let signature = signing.sign(fsd_proto::signed_decision(&d.text, "person").as_bytes()).to_bytes();
    let approval = SignedApproval {
        description: d.text.clone(),
        decider: "person".into(),
        signature: signature.to_vec(),
    };
    let check = WorkerCheck { key: signing.verifying_key(), vouch_key: [7; crate::digest::KEY_BYTES] };
    let write = |content: &str| Request::WriteText {
        path: "/etc/x".into(),
        content: content.into(),
        guard: None,
        match_style: false,
    };
    let bound = |ino: u64| vec![("/etc/x".to_owned(), binding(ino))];
    // The change is held to the name listed: its walk must resolve to `host:etc/x`, so the same
    // signature on another name of the directory (an absent one, for a creation) is refused.
    let listed = vec![("/etc/x".to_owned(), vec!["host:etc/x".to_owned()])];
    assert_eq!(check.check(&write("new\n"), &bound(7), Some(&approval)), Ok(listed));
    let sibling = Request::WriteText {
        path: "/etc/y".into(),
        content: "new\n".into(),
        guard: None,
        match_style: false,
    };
    let sibling_bound = vec![("/etc/y".to_owned(), binding(7))];
    assert_eq!(
        check.check(&sibling, &sibling_bound, Some(&approval)),
        Ok(vec![("/etc/y".to_owned(), vec!["host:etc/x".to_owned()])])
    );
    assert_eq!(check.check(&write("evil\n"), &bound(7), Some(&approval)), Err(Unsigned::NotListed));
    assert_eq!(check.check(&write("new\n"), &bound(8), Some(&approval)), Err(Unsigned::NotListed));
    assert_eq!(check.check(&write("new\n"), &Vec::new(), Some(&approval)), Err(Unsigned::NotListed));
    assert_eq!(check.check(&write("new\n"), &bound(7), None), Err(Unsigned::Missing));
    let other_decider = SignedApproval { decider: "rules x.toml: rule 1".into(), ..approval.clone() };
    assert_eq!(check.check(&write("new\n"), &bound(7), Some(&other_decider)), Err(Unsigned::BadSignature));
    let delete = Request::DeleteFile { path: "/etc/x".into(), guard: None };
    assert_eq!(check.check(&delete, &bound(7), Some(&approval)), Err(Unsigned::NotListed));
    let read = Request::ReadText { path: "/etc/x".into(), max_bytes: 0 };
    assert_eq!(check.check(&read, &Vec::new(), None), Ok(Vec::new()), "an unbound read is a reader's");
    // What a worker vouches for within one approval, another worker with the same key accepts
    // within that approval only; a tag it did not make, or made for another approval, is dropped.
    let id = |ino| crate::op::ObjectId { dev: 1, ino, mount: 2 };
    let made = check.vouch(&approval, id(7), vec![id(70)]);
    assert_eq!(check.vouched(Some(&approval), vec![made.clone()]), vec![made.clone()]);
    let other = SignedApproval { description: format!("{}x", approval.description), ..approval.clone() };
    assert_eq!(check.vouched(Some(&other), vec![made.clone()]), Vec::new());
    let forged = crate::op::Made { dirs: vec![id(71)], ..made.clone() };
    assert_eq!(check.vouched(Some(&approval), vec![forged]), Vec::new());
    let elsewhere = WorkerCheck { vouch_key: [8; crate::digest::KEY_BYTES], ..check.clone() };
    assert_eq!(elsewhere.vouched(Some(&approval), vec![made]), Vec::new());
    // A bound read (or a dry run: a preview) is held to the name the approval lists on the
    // directories it binds, whatever file is there now; on other directories it is not listed.
    let named = vec![("/etc/x".to_owned(), vec!["host:etc/x".to_owned()])];
    let shown = crate::op::Shown { uid: 0, gid: 0, mode: 0o100600, nlink: 1 };
    let replaced =
        Binding { last: Last::Is(crate::op::ObjectId { dev: 1, ino: 99, mount: 2 }, shown), ..binding(7) };
    let preview = Request::Check { request: Box::new(write("other\n")) };
    for request in [&read, &preview] {
        assert_eq!(check.check(request, &bound(7), Some(&approval)), Ok(named.clone()));
        let bound_replaced = vec![("/etc/x".to_owned(), replaced.clone())];
        assert_eq!(check.check(request, &bound_replaced, Some(&approval)), Ok(named.clone()));
        assert_eq!(check.check(request, &bound(8), Some(&approval)), Err(Unsigned::NotListed));
        assert_eq!(check.check(request, &bound(7), None), Err(Unsigned::Missing));
    }
}
