//! The provider (fsd.v1 over gRPC, no tools in between): listDir order and metadata, stat of
//! absent targets, readText's cap, and the guards of writeText and editText, with errors read
//! from the `google.rpc.ErrorInfo` detail through `WireError::from_status`.

use crate::common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use common::rpc::{Rpc, p, wire};
use common::*;
use fsd_proto::ErrorCode;
use fsd_proto::v1::{self, FileType};

/// What one listed entry must say: name, raw name, type, size; `version` says whether one is
/// present and `target` the display path it resolves to (None: not checked).
struct Entry<'a> {
    name: &'a str,
    raw: &'a [u8],
    kind: FileType,
    size: Option<u64>,
    version: Option<bool>,
    target: Option<std::path::PathBuf>,
}

#[test]
fn list_dir_is_in_byte_order_with_metadata_only() {
    let d = Daemon::start();
    let outside = d.root.parent().unwrap().join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    for (name, body) in [
        ("b.txt", "bbb"),
        ("B.txt", "B"),
        ("a.txt", "aaa"),
        ("_x", ""),
        ("Z", "zz"),
        ("é.txt", "e"),
        ("10", "ten"),
        ("9", "nine"),
        (".hidden", "h"),
    ] {
        d.write(name, body);
    }
    // Not text: listed as a file all the same, because contents are never read.
    d.write("bin", b"\0\xff\xfe");
    std::fs::write(d.root.join(OsStr::from_bytes(b"\xffz")), "raw").unwrap();
    d.write("sub/inner.txt", "inner");
    mkfifo(&d.path("fifo"));
    symlink("nowhere", &d.path("broken"));
    symlink("a.txt", &d.path("link"));
    symlink(&outside, &d.path("out"));

    let mut rpc = Rpc::connect(&d);
    let listing = rpc.list_dir(&d.root).expect("listDir");
    assert_eq!(listing.target.as_ref().unwrap().display_path, p(&d.root));
    let file = |name: &'static str, size: u64| Entry {
        name,
        raw: name.as_bytes(),
        kind: FileType::File,
        size: Some(size),
        version: Some(true),
        target: Some(d.path(name)),
    };
    let other = |name: &'static str| Entry {
        name,
        raw: name.as_bytes(),
        kind: FileType::Other,
        size: None,
        version: Some(false),
        target: None,
    };
    let expected = vec![
        file(".hidden", 1),
        file("10", 3),
        file("9", 4),
        file("B.txt", 1),
        file("Z", 2),
        file("_x", 0),
        file("a.txt", 3),
        file("b.txt", 3),
        file("bin", 3),
        // A broken link: other, without metadata.
        other("broken"),
        // A FIFO is other; it is never opened.
        Entry { version: None, ..other("fifo") },
        // A link is described by what it leads to.
        Entry { target: Some(d.path("a.txt")), ..file("link", 3) },
        // A link leading out of every root says nothing about its target.
        other("out"),
        Entry { kind: FileType::Directory, size: None, ..file("sub", 0) },
        file("é.txt", 1),
        Entry {
            name: "\\xffz",
            raw: b"\xffz",
            target: Some(d.root.join(OsStr::from_bytes(b"\xffz"))),
            ..file("xffz", 3)
        },
    ];
    let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    let want_names: Vec<&str> = expected.iter().map(|e| e.name).collect();
    assert_eq!(names, want_names, "children in byte order of their names");
    for (got, want) in listing.entries.iter().zip(&expected) {
        let name = want.name;
        assert_eq!(got.raw_name.as_ref(), want.raw, "{name}: raw name");
        assert_eq!(got.r#type(), want.kind, "{name}: type");
        assert_eq!(got.size, want.size, "{name}: size");
        if let Some(version) = want.version {
            assert_eq!(got.version.is_some(), version, "{name}: version {:?}", got.version);
        }
        if let Some(want_target) = &want.target {
            let want_target = want_target.to_string_lossy().replace('\u{fffd}', "\\xff");
            assert_eq!(got.target.as_ref().unwrap().display_path, want_target, "{name}: target");
        }
    }
    // A listed file's version is the one stat reports.
    let a = listing.entries.iter().find(|e| e.name == "a.txt").unwrap();
    assert_eq!(a.version.as_deref(), Some(rpc.version(&d.path("a.txt")).as_str()));
    let link = listing.entries.iter().find(|e| e.name == "link").unwrap();
    assert_eq!(link.version, a.version, "a link lists its target's version");
    // Stable: the same listing twice.
    assert_eq!(rpc.list_dir(&d.root).expect("listDir"), listing);

    // A file is not a directory; a missing directory is not found.
    let e = rpc.list_dir(&d.path("a.txt")).expect_err("listDir of a file");
    assert_eq!(wire(&e).code, ErrorCode::NotDirectory);
    let e = rpc.list_dir(&d.path("missing")).expect_err("listDir of nothing");
    assert_eq!(wire(&e).code, ErrorCode::NotFound);
}

#[test]
fn temporary_files_are_never_listed() {
    let d = Daemon::start();
    d.write("a.txt", "start\n");
    let rpc = Rpc::connect(&d);
    let path = p(&d.path("a.txt"));
    let root = p(&d.root);
    let mut writer = rpc.client.clone();
    let mut lister = rpc.client.clone();
    let big = "x".repeat(1 << 20);
    let listings = rpc.rt.block_on(async move {
        let writes = async {
            for i in 0..40 {
                let request = v1::WriteTextRequest {
                    path: path.clone(),
                    content: format!("{i}\n{big}"),
                    ..Default::default()
                };
                writer.write_text(request).await.expect("writeText");
            }
        };
        let lists = async {
            let mut seen = Vec::new();
            for _ in 0..200 {
                let request = v1::ListDirRequest { path: root.clone(), ..Default::default() };
                let reply = lister.list_dir(request).await.expect("listDir").into_inner();
                seen.push(reply.entries.into_iter().map(|e| e.name).collect::<Vec<_>>());
            }
            seen
        };
        let ((), seen) = tokio::join!(writes, lists);
        seen
    });
    for names in listings {
        assert_eq!(names, ["a.txt"], "only the file itself, never a temporary");
    }
    // No temporary is left behind either.
    let on_disk: Vec<_> = std::fs::read_dir(&d.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(on_disk, [OsStr::new("a.txt")]);
}

/// A stat's expected type and size, or None for an absent target.
type StatWant = Option<(FileType, Option<u64>)>;

#[test]
fn stat_reports_metadata_or_an_absent_target() {
    let d = Daemon::start();
    d.write("a.txt", "12345");
    d.write("dir/x", "");
    let mut rpc = Rpc::connect(&d);
    // (path, Some((type, size)) or None when absent)
    let cases: Vec<(std::path::PathBuf, StatWant)> = vec![
        (d.path("a.txt"), Some((FileType::File, Some(5)))),
        (d.path("dir"), Some((FileType::Directory, None))),
        (d.path("missing.txt"), None),
        (d.path("dir/missing.txt"), None),
        // A missing parent is still an absent target, not an error.
        (d.path("no/such/file.txt"), None),
    ];
    for (path, want) in cases {
        let reply = rpc.stat(&path).unwrap_or_else(|s| panic!("stat {}: {s:?}", path.display()));
        assert_eq!(
            reply.target.as_ref().map(|t| t.display_path.as_str()),
            Some(p(&path).as_str()),
            "{}",
            path.display()
        );
        match (reply.info, want) {
            (None, None) => {}
            (Some(info), Some((kind, size))) => {
                assert_eq!((info.r#type(), info.size), (kind, size), "{}", path.display());
                assert!(!info.version.is_empty(), "{}", path.display());
            }
            (got, want) => panic!("stat {}: got {got:?}, want {want:?}", path.display()),
        }
    }
}

#[test]
fn read_text_over_the_cap_is_too_large_with_the_size() {
    let d = Daemon::start();
    d.write("a.txt", "x".repeat(100));
    let mut rpc = Rpc::connect(&d);
    let status = rpc.read_text(&d.path("a.txt"), 10).expect_err("over the cap");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    let e = wire(&status);
    assert_eq!(e.code, ErrorCode::TooLarge);
    assert_eq!(e.path, p(&d.path("a.txt")));
    assert_eq!(e.get("size"), Some("100"));
    assert_eq!(e.get("limit"), Some("10"));
    // At the cap it is one read with the version of that same handle.
    let reply = rpc.read_text(&d.path("a.txt"), 100).expect("at the cap");
    assert_eq!(reply.text, "x".repeat(100));
    assert_eq!(fsd_proto::version::split(&reply.version).0, rpc.version(&d.path("a.txt")));
}

#[test]
fn write_text_guards() {
    let d = Daemon::start();
    d.write("a.txt", "original\n");
    let mut rpc = Rpc::connect(&d);
    let create = || Some(v1::write_guard::Kind::CreateIfAbsent(v1::CreateIfAbsent {}));
    let replace = |version: &str| {
        Some(v1::write_guard::Kind::ReplaceIfVersion(v1::ReplaceIfVersion {
            version: version.to_owned(),
            ..Default::default()
        }))
    };
    // createIfAbsent on an existing file: FS_NOT_OBSERVED, file untouched.
    let e = rpc.write_text(&d.path("a.txt"), "clobbered\n", create()).expect_err("exists");
    assert_eq!(wire(&e).code, ErrorCode::NotObserved);
    assert_eq!(d.read("a.txt"), b"original\n");
    // createIfAbsent on an absent file creates it.
    let reply = rpc.write_text(&d.path("new.txt"), "new\n", create()).expect("create");
    assert_eq!(reply.operation(), v1::WriteOperation::Create);
    assert_eq!(d.read("new.txt"), b"new\n");
    // replaceIfVersion: the wrong version is stale; the right one replaces.
    let e = rpc.write_text(&d.path("a.txt"), "x\n", replace("v1.bogus")).expect_err("stale");
    assert_eq!(wire(&e).code, ErrorCode::StaleVersion);
    assert_eq!(d.read("a.txt"), b"original\n");
    let version = rpc.version(&d.path("a.txt"));
    let reply = rpc.write_text(&d.path("a.txt"), "replaced\n", replace(&version)).expect("replace");
    assert_eq!(reply.operation(), v1::WriteOperation::Update);
    assert_ne!(reply.version, version);
    assert_eq!(d.read("a.txt"), b"replaced\n");
    // replaceIfVersion on a missing target is stale, and creates nothing.
    let e = rpc.write_text(&d.path("gone.txt"), "x\n", replace(&version)).expect_err("missing");
    assert_eq!(wire(&e).code, ErrorCode::StaleVersion);
    assert!(!d.path("gone.txt").exists());
}

#[test]
fn edit_text_on_a_missing_target_is_stale() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let mut rpc = Rpc::connect(&d);
    let version = rpc.version(&d.path("a.txt"));
    let guard = || Some(v1::EditGuard { version: version.clone(), ..Default::default() });
    let cases: Vec<(&str, Option<v1::EditGuard>)> = vec![
        ("missing.txt", None),
        ("missing.txt", guard()),
        ("no/such/dir.txt", None),
        ("no/such/dir.txt", guard()),
    ];
    for (rel, g) in cases {
        let guarded = g.is_some();
        let e = rpc.edit_text(&d.path(rel), "alpha", "beta", g).expect_err("missing target");
        let e = wire(&e);
        assert_eq!(e.code, ErrorCode::StaleVersion, "{rel} guarded={guarded}: {e}");
        assert_eq!(e.get("reason"), Some("gone"), "{rel} guarded={guarded}");
        assert!(!d.path(rel).exists());
    }
    // A stale guard is checked before matching.
    d.write("a.txt", "gamma delta\n");
    let e = rpc.edit_text(&d.path("a.txt"), "alpha", "beta", guard()).expect_err("stale");
    assert_eq!(wire(&e).code, ErrorCode::StaleVersion);
    // Unguarded, the current content is edited.
    let reply = rpc.edit_text(&d.path("a.txt"), "gamma", "beta", None).expect("unguarded edit");
    assert_eq!(reply.replacements, 1);
    assert_eq!(d.read("a.txt"), b"beta delta\n");
}

#[test]
fn an_unchanged_files_version_is_the_same_from_every_call() {
    let d = Daemon::start();
    d.write("a.txt", "alpha\n");
    let path = d.path("a.txt");
    let mut rpc = Rpc::connect(&d);
    let mut versions = std::collections::BTreeSet::new();
    // Many calls, so that every worker serving them answers at least once.
    for _ in 0..20 {
        versions.insert(rpc.version(&path));
        // A whole read adds the digest of the bytes to the same metadata part.
        let read = rpc.read_text(&path, 0).expect("readText").version;
        assert!(fsd_proto::version::split(&read).1.is_some(), "{read}");
        versions.insert(fsd_proto::version::split(&read).0.to_owned());
        let listing = rpc.list_dir(&d.root).expect("listDir");
        versions.insert(listing.entries[0].version.clone().expect("listed version"));
    }
    assert_eq!(versions.len(), 1, "one unchanged file, several versions: {versions:#?}");
    // And a guarded edit at that version succeeds, whichever worker checks it.
    let version = versions.into_iter().next().unwrap();
    let guard = Some(v1::EditGuard { version, ..Default::default() });
    rpc.edit_text(&path, "alpha", "beta", guard).expect("guarded edit at the current version");
    assert_eq!(d.read("a.txt"), b"beta\n");
}
