//! Sessions on one daemon: observations never cross sessions, and two sessions racing guarded
//! edits of one file end with exactly one winner and one stale refusal.

use crate::common;

use std::sync::{Arc, Barrier};

use common::*;
use serde_json::json;

#[test]
fn one_sessions_read_does_not_authorize_anothers_write() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let p = d.path("a.txt");
    let mut a = d.session();
    let mut b = d.session();
    assert!(!a.read("a.txt").is_error());
    let not_observed = format!(
        "Error: cannot modify \"{}\": file has not been read — read the file, then retry",
        p.display()
    );
    err(
        &b.call("write", json!({"file_path": "a.txt", "content": "from b\n"})),
        "FS_NOT_OBSERVED",
        &not_observed,
    );
    err(
        &b.call("edit", json!({"file_path": "a.txt", "old_string": "alpha", "new_string": "b"})),
        "FS_NOT_OBSERVED",
        &not_observed,
    );
    assert_eq!(d.read("a.txt"), b"alpha\n");
    // A's own observation still works.
    ok(
        &a.call("write", json!({"file_path": "a.txt", "content": "from a\n"})),
        &write_envelope(&p, "Updated file"),
    );
    // And B's creation does not authorize A to overwrite B's file.
    ok(
        &b.call("write", json!({"file_path": "b.txt", "content": "b\n"})),
        &write_envelope(&d.path("b.txt"), "Created file"),
    );
    err(
        &a.call("write", json!({"file_path": "b.txt", "content": "a\n"})),
        "FS_NOT_OBSERVED",
        &format!(
            "Error: cannot modify \"{}\": file has not been read — read the file, then retry",
            d.path("b.txt").display()
        ),
    );
    assert_eq!(d.read("b.txt"), b"b\n");
    assert!(a.finish().success());
    assert!(b.finish().success());
}

#[test]
fn racing_guarded_edits_have_exactly_one_winner() {
    let d = Daemon::start();
    let p = d.path("race.txt");
    let original = "left = 1\nright = 1\n";
    // Several rounds, so both interleavings get their chance; each round must have one winner.
    for round in 0..5 {
        d.write("race.txt", original);
        let mut sessions = [d.session(), d.session()];
        for s in &mut sessions {
            assert!(!s.read("race.txt").is_error());
        }
        let barrier = Arc::new(Barrier::new(2));
        let edits = [("left = 1", "left = 2"), ("right = 1", "right = 2")];
        let handles: Vec<_> = sessions
            .into_iter()
            .zip(edits)
            .map(|(mut s, (old, new))| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let reply = s
                        .call("edit", json!({"file_path": "race.txt", "old_string": old, "new_string": new}));
                    (reply, old, new)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<_> = results.iter().filter(|(r, ..)| !r.is_error()).collect();
        let losers: Vec<_> = results.iter().filter(|(r, ..)| r.is_error()).collect();
        assert_eq!(winners.len(), 1, "round {round}: exactly one edit wins: {results:?}");
        assert_eq!(losers.len(), 1, "round {round}");
        let (won, old, new) = winners[0];
        ok(won, &format!("The file {} has been updated successfully.", p.display()));
        err(
            &losers[0].0,
            "FS_STALE_VERSION",
            &format!(
                "Error: cannot modify \"{}\": file changed on disk since it was read — re-read the file, then retry",
                p.display()
            ),
        );
        assert_eq!(
            String::from_utf8(d.read("race.txt")).unwrap(),
            original.replace(old, new),
            "round {round}"
        );
    }
}
