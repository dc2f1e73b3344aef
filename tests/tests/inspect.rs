//! `fsd.v1` Inspect against the real daemon: for every kind of target a patch can name (a file,
//! a link followed or not, a directory, a FIFO, nothing, a protected name, a path outside the
//! roots, a file too large to read, one the workers may not open), each answer is exactly what
//! the single call (Stat with check_write, Stat with no_follow, ReadText) answers, its error's
//! status, code, reason and metadata included; and a read-only client's write checks are
//! refused as its single calls are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Daemon;
use common::rpc::{Rpc, p};
use fsd_proto::v1;

/// A single call's answer as Inspect carries it.
fn as_answer(status: &tonic::Status) -> v1::CallError {
    v1::CallError {
        status: status.code() as i32,
        message: status.message().to_owned(),
        details: status.details().to_vec().into(),
    }
}

fn stat_answer(result: Result<tonic::Response<v1::StatReply>, tonic::Status>) -> v1::InspectStat {
    let answer = match result {
        Ok(reply) => v1::inspect_stat::Answer::Reply(reply.into_inner()),
        Err(status) => v1::inspect_stat::Answer::Error(as_answer(&status)),
    };
    v1::InspectStat { answer: Some(answer) }
}

/// What the single calls answer for `target`, asked one by one, in Inspect's shape.
fn single_calls(
    rpc: &mut Rpc,
    context: &Option<v1::CallContext>,
    target: &v1::InspectTarget,
) -> v1::InspectReply {
    let stat = |path: &str, no_follow, check_write| v1::StatRequest {
        context: context.clone(),
        path: path.to_owned(),
        no_follow,
        check_write,
    };
    let write_check =
        stat_answer(rpc.rt.block_on(rpc.client.stat(stat(&target.path, target.no_follow, true))));
    if matches!(write_check.answer, Some(v1::inspect_stat::Answer::Error(_))) {
        return v1::InspectReply { write_check: Some(write_check), ..Default::default() };
    }
    let stat = stat_answer(rpc.rt.block_on(rpc.client.stat(stat(&target.path, true, false))));
    let readable = matches!(
        &stat.answer,
        Some(v1::inspect_stat::Answer::Reply(v1::StatReply { info: Some(info), .. }))
            if matches!(info.r#type(), v1::FileType::File | v1::FileType::Symlink)
    );
    let text = (target.read && readable).then(|| {
        let request =
            v1::ReadTextRequest { context: context.clone(), path: target.path.clone(), max_bytes: 0 };
        let answer = match rpc.rt.block_on(rpc.client.read_text(request)) {
            Ok(reply) => v1::inspect_read::Answer::Reply(reply.into_inner()),
            Err(status) => v1::inspect_read::Answer::Error(as_answer(&status)),
        };
        v1::InspectRead { answer: Some(answer) }
    });
    v1::InspectReply { write_check: Some(write_check), stat: Some(stat), text }
}

/// An error's details decoded (its metadata is a map, encoded in no set order) and cleared, so
/// two answers compare by what they say.
fn decoded(error: &mut v1::CallError) -> fsd_proto::WireError {
    let details = std::mem::take(&mut error.details);
    let status =
        tonic::Status::with_details(tonic::Code::from_i32(error.status), error.message.clone(), details);
    fsd_proto::WireError::from_status(&status).unwrap_or_else(|| panic!("no ErrorInfo in {error:?}"))
}

/// A reply whose errors are decoded, for comparing.
fn normal(mut reply: v1::InspectReply) -> (v1::InspectReply, Vec<fsd_proto::WireError>) {
    let mut errors = Vec::new();
    for answer in [reply.write_check.as_mut(), reply.stat.as_mut()].into_iter().flatten() {
        if let Some(v1::inspect_stat::Answer::Error(e)) = answer.answer.as_mut() {
            errors.push(decoded(e));
        }
    }
    if let Some(v1::inspect_read::Answer::Error(e)) = reply.text.as_mut().and_then(|t| t.answer.as_mut()) {
        errors.push(decoded(e));
    }
    (reply, errors)
}

fn inspect(
    rpc: &mut Rpc,
    context: &Option<v1::CallContext>,
    targets: &[v1::InspectTarget],
) -> Vec<v1::InspectReply> {
    let request = v1::InspectRequest { context: context.clone(), targets: targets.to_vec() };
    rpc.rt.block_on(async {
        let mut stream = rpc.client.inspect(request).await.expect("inspect").into_inner();
        let mut replies = Vec::new();
        while let Some(reply) = stream.message().await.expect("an answer") {
            replies.push(reply);
        }
        replies
    })
}

/// The `ErrorInfo` code of an answer's error, or "ok".
fn code(answer: Option<&v1::inspect_stat::Answer>) -> String {
    match answer {
        Some(v1::inspect_stat::Answer::Error(e)) => {
            let status = tonic::Status::with_details(
                tonic::Code::from_i32(e.status),
                e.message.clone(),
                e.details.clone(),
            );
            fsd_proto::WireError::from_status(&status)
                .map_or_else(|| format!("{:?}", status.code()), |w| w.code.as_str().to_owned())
        }
        _ => "ok".to_owned(),
    }
}

/// Each case: (name, path, no_follow, the write check's code). Every case is asked with and
/// without its read, and compared answer for answer with the single calls.
fn check(d: &Daemon, mode: Option<v1::Mode>, cases: &[(&str, &Path, bool, &str)]) {
    let mut rpc = Rpc::connect(d);
    let context = mode.map(|m| v1::CallContext { mode: m as i32, ..Default::default() });
    let targets: Vec<v1::InspectTarget> = cases
        .iter()
        .flat_map(|(_, path, no_follow, _)| {
            [true, false].map(|read| v1::InspectTarget { path: p(path), no_follow: *no_follow, read })
        })
        .collect();
    let replies = inspect(&mut rpc, &context, &targets);
    assert_eq!(replies.len(), targets.len(), "one answer per target");
    for (i, (target, reply)) in targets.iter().zip(&replies).enumerate() {
        let (name, _, _, expected) = cases[i / 2];
        let single = single_calls(&mut rpc, &context, target);
        assert_eq!(
            normal(reply.clone()),
            normal(single),
            "{name} (read: {}): Inspect answered otherwise than the single calls",
            target.read
        );
        let got = code(reply.write_check.as_ref().and_then(|a| a.answer.as_ref()));
        assert_eq!(got, expected, "{name}: the write check");
    }
}

#[test]
fn each_answer_is_the_single_calls_answer() {
    let d = Daemon::start_with(&[], "max_read_bytes = 64\n");
    d.write("a.txt", "alpha\n");
    d.write("big.txt", "x".repeat(100));
    d.write("sub/b.txt", "beta\n");
    d.write("locked.txt", "secret\n");
    std::fs::set_permissions(d.path("locked.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::os::unix::fs::symlink("a.txt", d.path("link.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", d.path("out.txt")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        d.path("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    std::fs::create_dir_all(d.path(".git")).unwrap();
    d.write(".git/config", "[core]\n");
    let outside = Path::new("/etc/hostname");
    check(
        &d,
        None,
        &[
            ("a file", &d.path("a.txt"), false, "ok"),
            ("a file, its link not followed", &d.path("a.txt"), true, "ok"),
            ("a file deeper down", &d.path("sub/b.txt"), false, "ok"),
            ("a link, followed", &d.path("link.txt"), false, "ok"),
            ("a link, not followed", &d.path("link.txt"), true, "ok"),
            ("a link out of the roots, followed", &d.path("out.txt"), false, "FS_SANDBOX_DENIED"),
            ("a link out of the roots, not followed", &d.path("out.txt"), true, "ok"),
            ("a directory", &d.path("sub"), false, "ok"),
            ("a FIFO", &d.path("fifo"), false, "ok"),
            ("nothing", &d.path("none.txt"), false, "ok"),
            ("nothing, under a missing directory", &d.path("new/dir/c.txt"), false, "ok"),
            ("too large to read", &d.path("big.txt"), false, "ok"),
            ("unreadable", &d.path("locked.txt"), false, "ok"),
            ("a git directory", &d.path(".git/config"), false, "FS_SANDBOX_DENIED"),
            ("outside the roots", outside, false, "FS_SANDBOX_DENIED"),
            ("not absolute", Path::new("a.txt"), false, "FS_INVALID_PATH"),
        ],
    );
    // A read-only call: every write check refused as its single call is, nothing else asked.
    check(
        &d,
        Some(v1::Mode::ReadOnly),
        &[
            ("a file, read-only", &d.path("a.txt"), false, "FS_SANDBOX_DENIED"),
            ("nothing, read-only", &d.path("none.txt"), false, "FS_SANDBOX_DENIED"),
        ],
    );
    // Nothing was made or changed by any of it.
    assert_eq!(d.read("a.txt"), b"alpha\n");
    assert!(!d.path("none.txt").exists() && !d.path("new").exists());
}
