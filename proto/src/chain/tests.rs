//! The chain and its verifier, table-driven: an intact log, and each way of breaking one.

use super::*;

const EVERY: u64 = 3;

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// A log as the writer makes it: eight records, a checkpoint after each three (lines 4 and 8)
/// and the shutdown checkpoint; eleven lines.
fn written(key: Option<SigningKey>) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    let mut writer = Writer::new(&path, file, LogKind::Audit, EVERY, key).unwrap();
    for n in 1..=8 {
        writer.append(&format!("{{\"op\":\"write\",\"path\":\"/w/f{n}\"}}"), "t").unwrap();
    }
    writer.checkpoint(CheckpointKind::Shutdown, "t").unwrap();
    std::fs::read_to_string(&path).unwrap().lines().map(str::to_owned).collect()
}

/// Recomputes every hash after an edit, as anyone can; checkpoints keep their signatures, or are
/// signed again with `key` (someone else's).
fn relinked(lines: &[String], key: Option<&SigningKey>) -> Vec<String> {
    let mut at = Link::START;
    let mut out = Vec::new();
    for line in lines {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        let object = value.as_object_mut().unwrap();
        object.remove("hash");
        let (line, next) = match (object.get("checkpoint").cloned(), key) {
            (Some(kind), Some(key)) => {
                let kind = CheckpointKind::parse(kind.as_str().unwrap()).unwrap();
                checkpoint(LogKind::Audit, kind, EVERY, "t", Some(key), at)
            }
            _ => {
                object.insert("seq".into(), (at.seq + 1).into());
                object.insert("prev".into(), hex::encode(at.hash).into());
                let text = value.to_string();
                finish(text.strip_suffix('}').unwrap().to_owned(), at)
            }
        };
        out.push(line);
        at = next;
    }
    out
}

/// A name, a log, the key it is checked against, and the verdict.
type Case<'a> = (&'a str, Vec<u8>, Option<&'a VerifyingKey>, Result<Verified, Broken>);

fn text(lines: &[String]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
}

#[test]
fn the_verifier_names_the_first_broken_line_and_why() {
    let signer = key(1);
    let public = signer.verifying_key();
    let public_hex = hex::encode(public.to_bytes());
    let intact = written(Some(signer.clone()));
    assert_eq!(intact.len(), 11);
    let with = |edit: &dyn Fn(&mut Vec<String>)| {
        let mut lines = intact.clone();
        edit(&mut lines);
        text(&lines)
    };
    let thief = key(2);
    let unsigned = written(None);
    // Five records and no interval checkpoint, though the shutdown one says every 3.
    let sparse = {
        let mut at = Link::START;
        let mut lines = Vec::new();
        for n in 1..=5 {
            let (line, next) = seal(&format!("{{\"n\":{n}}}"), at).unwrap();
            lines.push(line);
            at = next;
        }
        lines.push(checkpoint(LogKind::Audit, CheckpointKind::Shutdown, EVERY, "t", Some(&signer), at).0);
        lines
    };
    let ok = |records, checkpoints, keys: &[&str], unsigned| {
        Ok(Verified { records, checkpoints, keys: keys.iter().map(|k| (*k).to_owned()).collect(), unsigned })
    };
    let broken = |line, why| Err(Broken { line, why });
    let cases: Vec<Case<'_>> = vec![
        ("intact, with the trusted key", text(&intact), Some(&public), ok(8, 3, &[&public_hex], 0)),
        ("intact, against the key it names", text(&intact), None, ok(8, 3, &[&public_hex], 0)),
        (
            "one byte edited",
            with(&|l| l[1] = l[1].replace("/w/f2", "/w/g2")),
            Some(&public),
            broken(2, Why::Edited),
        ),
        (
            "one byte edited that breaks the JSON",
            with(&|l| l[1] = l[1].replacen('"', "'", 1)),
            Some(&public),
            broken(2, Why::Edited),
        ),
        (
            "two records swapped",
            with(&|l| l.swap(4, 5)),
            Some(&public),
            broken(5, Why::Reordered { found: 6, expected: 5 }),
        ),
        (
            "a record removed",
            with(&|l| drop(l.remove(1))),
            Some(&public),
            broken(2, Why::Missing { found: 3, expected: 2 }),
        ),
        (
            "the first records removed",
            with(&|l| drop(l.drain(..2))),
            None,
            broken(1, Why::Missing { found: 3, expected: 1 }),
        ),
        (
            "the last records cut",
            with(&|l| l.truncate(9)),
            Some(&public),
            broken(10, Why::Unclosed { uncovered: 1 }),
        ),
        (
            "cut after a checkpoint",
            with(&|l| l.truncate(8)),
            Some(&public),
            broken(9, Why::Unclosed { uncovered: 0 }),
        ),
        (
            "cut inside a line",
            {
                let mut bytes = text(&intact);
                bytes.truncate(bytes.len() - 20);
                bytes
            },
            Some(&public),
            broken(11, Why::Cut),
        ),
        ("empty", Vec::new(), Some(&public), broken(1, Why::Unclosed { uncovered: 0 })),
        (
            "edited and every hash recomputed: the next checkpoint's signature fails",
            text(&relinked(&with_lines(&intact, |l| l[1] = l[1].replace("/w/f2", "/w/g2")), None)),
            Some(&public),
            broken(4, Why::BadSignature { key: public_hex.clone() }),
        ),
        (
            "a checkpoint forged with another key",
            text(&relinked(&intact, Some(&thief))),
            Some(&public),
            broken(4, Why::BadSignature { key: public_hex.clone() }),
        ),
        (
            "forged with another key, verified against the key it names: that key is reported",
            text(&relinked(&intact, Some(&thief))),
            None,
            ok(8, 3, &[&hex::encode(thief.verifying_key().to_bytes())], 0),
        ),
        (
            "a checkpoint's kind changed and its hash recomputed",
            text(&relinked(&with_lines(&intact, |l| l[3] = l[3].replace("interval", "shutdown")), None)),
            Some(&public),
            broken(4, Why::BadSignature { key: public_hex.clone() }),
        ),
        ("unsigned checkpoints, no key given", text(&unsigned), None, ok(8, 3, &[], 3)),
        ("unsigned checkpoints, a key given", text(&unsigned), Some(&public), broken(4, Why::Unsigned)),
        (
            "a missing checkpoint",
            text(&sparse),
            Some(&public),
            broken(4, Why::MissingCheckpoint { every: EVERY }),
        ),
        ("not a chained record", b"{\"op\":\"write\"}\n".to_vec(), None, broken(1, Why::NotARecord)),
    ];
    for (name, log, trusted, expected) in cases {
        assert_eq!(verify(&log, LogKind::Audit, trusted), expected, "{name}");
    }
}

fn with_lines(lines: &[String], edit: impl Fn(&mut Vec<String>)) -> Vec<String> {
    let mut lines = lines.to_vec();
    edit(&mut lines);
    lines
}

/// A checkpoint of one log does not verify in the other: the log is part of what is signed.
#[test]
fn a_checkpoint_belongs_to_its_log() {
    let signer = key(1);
    let log = text(&written(Some(signer.clone())));
    assert_eq!(
        verify(&log, LogKind::Decisions, Some(&signer.verifying_key())),
        Err(Broken {
            line: 4,
            why: Why::BadSignature { key: hex::encode(signer.verifying_key().to_bytes()) }
        })
    );
}

/// A writer that starts again continues the chain where the file ends, and a line left cut by a
/// killed writer stays the one broken line.
#[test]
fn a_restarted_writer_continues_the_chain() {
    let signer = key(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    for _ in 0..2 {
        let mut writer = Writer::new(&path, open(), LogKind::Decisions, 2, Some(signer.clone())).unwrap();
        writer.append("{\"decision\":\"approved\"}", "t").unwrap();
        writer.checkpoint(CheckpointKind::Shutdown, "t").unwrap();
    }
    let log = std::fs::read(&path).unwrap();
    let verified = verify(&log, LogKind::Decisions, Some(&signer.verifying_key())).unwrap();
    assert_eq!((verified.records, verified.checkpoints), (2, 2), "{}", String::from_utf8_lossy(&log));
    // Killed in the middle of a line, then started again.
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"decis").unwrap();
    let mut writer = Writer::new(&path, open(), LogKind::Decisions, 2, Some(signer.clone())).unwrap();
    writer.append("{\"decision\":\"refused\"}", "t").unwrap();
    writer.checkpoint(CheckpointKind::Shutdown, "t").unwrap();
    let log = std::fs::read(&path).unwrap();
    let lines = log.split(|b| *b == b'\n').count() - 1;
    assert_eq!(
        verify(&log, LogKind::Decisions, Some(&signer.verifying_key())),
        Err(Broken { line: lines - 2, why: Why::NotARecord })
    );
}

/// A writer killed between checkpoints: the next one counts the records it left unsealed, so
/// no more than `every` records ever stand between two checkpoints.
#[test]
fn a_restarted_writer_keeps_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    let mut killed = Writer::new(&path, open(), LogKind::Audit, 2, None).unwrap();
    killed.append("{\"n\":1}", "t").unwrap();
    drop(killed);
    let mut writer = Writer::new(&path, open(), LogKind::Audit, 2, None).unwrap();
    for n in 2..=4 {
        writer.append(&format!("{{\"n\":{n}}}"), "t").unwrap();
    }
    writer.checkpoint(CheckpointKind::Shutdown, "t").unwrap();
    let log = std::fs::read(&path).unwrap();
    let kinds: Vec<Option<String>> = String::from_utf8_lossy(&log)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["checkpoint"].as_str().map(str::to_owned)
        })
        .collect();
    let interval = Some("interval".to_owned());
    let shutdown = Some("shutdown".to_owned());
    assert_eq!(kinds, [None, None, interval.clone(), None, None, interval, shutdown]);
    assert_eq!(verify(&log, LogKind::Audit, None).map(|v| v.checkpoints), Ok(3));
}

/// Key files: a private key must be 0600 and not the public one; a public key is hex or a file.
#[test]
fn key_files_are_checked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("audit.key");
    std::fs::write(&private, format!("{}\n", hex::encode([7u8; 32]))).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(read_signing_key(&private), Err(KeyError::Open(_))));
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let signer = read_signing_key(&private).unwrap();
    let public = dir.path().join("audit.pub");
    std::fs::write(&public, format!("{}\n", hex::encode(signer.verifying_key().to_bytes()))).unwrap();
    assert!(matches!(read_signing_key(&public), Err(KeyError::Public(_))));
    assert_eq!(read_public_key(public.to_str().unwrap()).unwrap(), signer.verifying_key());
    assert_eq!(
        read_public_key(&hex::encode(signer.verifying_key().to_bytes())).unwrap(),
        signer.verifying_key()
    );
    assert!(matches!(read_public_key(private.parent().unwrap().to_str().unwrap()), Err(KeyError::Io(..))));
}

/// A name, a log, the checkpoint hashes expected, and the verdict (records and checkpoints).
type Expecting<'a> = (&'a str, Vec<u8>, Vec<[u8; 32]>, Result<(u64, u64), Broken>);

/// A log cut back to an earlier run's shutdown checkpoint is a whole signed log; a checkpoint
/// hash kept from after the cut finds it, and one the log holds changes nothing.
#[test]
fn an_expected_checkpoint_finds_a_cut_back_to_an_earlier_one() {
    let signer = key(1);
    let public = signer.verifying_key();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    // Two runs, each ending with its shutdown checkpoint; the writer reports each checkpoint.
    let mut sealed = Vec::new();
    for _ in 0..2 {
        let mut writer = Writer::new(&path, open(), LogKind::Audit, 2, Some(signer.clone())).unwrap();
        for n in 0..3 {
            sealed.extend(writer.append(&format!("{{\"n\":{n}}}"), "t").unwrap());
        }
        sealed.push(writer.checkpoint(CheckpointKind::Shutdown, "t").unwrap());
    }
    let kinds: Vec<CheckpointKind> = sealed.iter().map(|s| s.kind).collect();
    use CheckpointKind::{Interval, Shutdown};
    assert_eq!(kinds, [Interval, Shutdown, Interval, Shutdown]);
    let all = std::fs::read_to_string(&path).unwrap().lines().map(str::to_owned).collect::<Vec<_>>();
    // What each reported hash names is the checkpoint line the log holds.
    for s in &sealed {
        assert!(all.iter().any(|l| l.ends_with(&format!(",\"hash\":\"{}\"}}", s.hash_hex()))), "{s:?}");
    }
    let first_run = all.iter().position(|l| l.contains("\"shutdown\"")).unwrap() + 1;
    let cut = text(&all[..first_run]);
    let later = sealed[3].link.hash;
    let record =
        hash_field(serde_json::from_str::<serde_json::Value>(&all[0]).unwrap()["hash"].as_str().unwrap())
            .unwrap();
    let earlier = sealed[1].link.hash;
    let cases: Vec<Expecting> = vec![
        ("the whole log, no hash expected", text(&all), vec![], Ok((6, 4))),
        ("the whole log, the last hash expected", text(&all), vec![earlier, later], Ok((6, 4))),
        ("cut back to the first run's end, no hash expected", cut.clone(), vec![], Ok((3, 2))),
        ("cut back, the first run's hash expected", cut.clone(), vec![earlier], Ok((3, 2))),
        (
            "cut back, the second run's hash expected",
            cut,
            vec![earlier, later],
            Err(Broken { line: first_run + 1, why: Why::ExpectedCheckpoint { hash: hex::encode(later) } }),
        ),
        (
            "a record's hash is no checkpoint's",
            text(&all),
            vec![sealed[0].link.hash, record],
            Err(Broken { line: all.len() + 1, why: Why::ExpectedCheckpoint { hash: hex::encode(record) } }),
        ),
    ];
    for (name, log, expected, verdict) in cases {
        let got = verify_expecting(&log, LogKind::Audit, Some(&public), &expected)
            .map(|v| (v.records, v.checkpoints));
        assert_eq!(got, verdict, "{name}");
    }
}
