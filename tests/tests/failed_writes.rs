//! A write that fails leaves no trace of itself: the parent directories a writeBytes or a
//! writeText made for its target are removed again (deepest first, and only while empty) when the
//! call fails — a client that aborts its upload, a body over the size cap, a path refused after
//! the walk — while directories that were already there, or that now hold someone else's file,
//! stay.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::rpc::{Rpc, p};
use common::*;
use fsd_proto::v1::{self, write_bytes_request::Item};
use tokio_stream::StreamExt;

/// Waits until the worker that ran the failed call has finished with it: the network process
/// may answer (or the client may give up) before the worker's clean-up ran. Panics with what is
/// still there after ten seconds.
#[track_caller]
fn until_gone(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while path.exists() {
        assert!(Instant::now() < deadline, "{} is still there after the failed write", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn header(path: &Path) -> v1::WriteBytesRequest {
    let header = v1::WriteBytesHeader { context: None, path: p(path), guard: None, mode: None };
    v1::WriteBytesRequest { item: Some(Item::Header(header)) }
}

fn chunk(bytes: &[u8]) -> v1::WriteBytesRequest {
    v1::WriteBytesRequest { item: Some(Item::Chunk(bytes.to_vec().into())) }
}

/// Part of a body: more than its pipe holds, so that the upload takes a worker (which makes its
/// directories) before its body is complete.
fn part() -> v1::WriteBytesRequest {
    chunk(&[b'p'; 256 << 10])
}

#[test]
fn a_write_bytes_over_the_cap_removes_the_directories_it_made_and_only_those() {
    let d = Daemon::start_with(&[], "max_upload_bytes = 10\n");
    std::fs::create_dir(d.path("there")).unwrap();
    let mut rpc = Rpc::connect(&d);
    for target in ["made/a/b/big.bin", "there/made/big.bin"] {
        let messages = vec![header(&d.path(target)), chunk(&[7u8; 11])];
        let status = rpc.rt.block_on(rpc.client.write_bytes(tokio_stream::iter(messages))).unwrap_err();
        assert_eq!(common::rpc::wire(&status).code, fsd_proto::ErrorCode::TooLarge, "{target}: {status:?}");
    }
    until_gone(&d.path("made"));
    until_gone(&d.path("there/made"));
    assert!(d.path("there").is_dir(), "a directory that was there before the call was removed");
    // The same call within the cap makes the directories and keeps them.
    let messages = vec![header(&d.path("made/a/b/ok.bin")), chunk(&[7u8; 10])];
    rpc.rt.block_on(rpc.client.write_bytes(tokio_stream::iter(messages))).unwrap();
    assert_eq!(d.read("made/a/b/ok.bin"), [7u8; 10]);
}

/// The client goes away half-way through its body (its connection closes): the directories the
/// upload made go, except one that meanwhile holds another writer's file, and those above it.
#[test]
fn an_aborted_write_bytes_removes_its_empty_directories_and_keeps_anothers_file() {
    let d = Daemon::start();
    for (target, other) in [("up/a/b/f.bin", None), ("up2/a/b/f.bin", Some("up2/a/other.txt"))] {
        // A connection of its own, closed with its runtime: dropping only the call would leave
        // the body's sender waiting on the pending stream, and the upload would go on.
        let mut rpc = Rpc::connect(&d);
        let messages = vec![header(&d.path(target)), part()];
        let body = tokio_stream::iter(messages).chain(tokio_stream::pending());
        let deadline = Instant::now() + Duration::from_secs(10);
        let parent = d.path(target).parent().unwrap().to_path_buf();
        rpc.rt.block_on(async {
            let call = rpc.client.write_bytes(body);
            tokio::pin!(call);
            // The call is under way once its directories exist; then the client gives up.
            loop {
                tokio::select! {
                    done = &mut call => panic!("the upload ended on its own: {done:?}"),
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                if parent.is_dir() {
                    break;
                }
                assert!(Instant::now() < deadline, "the upload never made {}", parent.display());
            }
            if let Some(other) = other {
                std::fs::write(d.path(other), "another writer's\n").unwrap();
            }
        });
        drop(rpc);
        match other {
            None => until_gone(&d.path("up")),
            Some(other) => {
                until_gone(&d.path("up2/a/b"));
                assert_eq!(d.read(other), b"another writer's\n");
            }
        }
    }
}

/// A writeText refused after its walk made directories (a trailing slash on a name that is not
/// a directory) removes them too.
#[test]
fn a_failed_write_text_removes_the_directories_it_made() {
    let d = Daemon::start();
    let mut rpc = Rpc::connect(&d);
    let mut target = p(&d.path("t1/t2/f"));
    target.push('/');
    let request = v1::WriteTextRequest { path: target, content: "x".into(), ..Default::default() };
    let status = rpc.rt.block_on(rpc.client.write_text(request)).unwrap_err();
    assert_eq!(common::rpc::wire(&status).code, fsd_proto::ErrorCode::InvalidPath, "{status:?}");
    until_gone(&d.path("t1"));
    let names: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.is_empty(), "left: {names:?}");
}

/// A failed call removes an empty directory it made just as another call, which found it there,
/// is about to make its file in it: that call walks again (making the directory anew) and
/// succeeds, rather than failing because its parent vanished. The upload into
/// `fsd-fault-pause-git` made the directory; the write of `HEAD` there is held a second after
/// its walk by the test hook, while the upload is aborted and its directory removed.
#[test]
fn a_write_whose_parent_a_failed_call_removed_walks_again() {
    let d = Daemon::start_with(&[], "workers_per_mode = 2\n");
    let dir = d.path("fsd-fault-pause-git");
    let mut upload = Rpc::connect(&d);
    let body = tokio_stream::iter(vec![header(&dir.join("f.bin")), part()]).chain(tokio_stream::pending());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut writer = Some(Rpc::connect(&d));
    let head = dir.join("HEAD");
    let writing = upload.rt.block_on(async {
        let call = upload.client.write_bytes(body);
        tokio::pin!(call);
        let mut writing = None;
        let mut since = None;
        // The upload stays under way until the write has walked into its directory.
        while since.is_none_or(|at: Instant| at.elapsed() < Duration::from_millis(300)) {
            tokio::select! {
                done = &mut call => panic!("the upload ended on its own: {done:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            if let Some(mut writer) = writer.take_if(|_| dir.is_dir()) {
                let head = head.clone();
                writing = Some(std::thread::spawn(move || {
                    writer.write_text(&head, "ref: refs/heads/main\n", None).map(drop)
                }));
                since = Some(Instant::now());
            }
            assert!(Instant::now() < deadline, "the upload never made its directory");
        }
        writing.unwrap()
    });
    drop(upload);
    until_gone(&dir);
    assert!(
        !writing.is_finished(),
        "the write ended before the directory was removed: the race was not set up"
    );
    let written = writing.join().unwrap();
    assert!(written.is_ok(), "the write failed because its parent vanished: {written:?}");
    assert_eq!(d.read("fsd-fault-pause-git/HEAD"), b"ref: refs/heads/main\n");
}
