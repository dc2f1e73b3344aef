//! The fence as a property, against the real daemon: random trees in the root with symlinks
//! (inside, outside, absolute, relative, dangling, magic), a bind mount of an outside directory
//! below the root, and a concurrent mutator that renames entries and swaps directories for links
//! to the outside while calls (read, list, stat, write, edit, move, delete, recursive remove) go
//! through every path the tree offers. After every case: the canary tree outside the root is
//! byte-for-byte what it was, nothing appeared beside the root, no daemon process died or was
//! replaced, the log has no panic, and every error was an fsd error with a contract code.
//!
//! Deterministic: case `n` uses seed `n` (FSD_FENCE_CASES overrides the count); bounded: about
//! 20 s in a debug build. Bind mounts need root; without it the test fails and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_proto::{ErrorCode, WireError};
use fsd_soak::daemon::{self, Bins, Daemon};
use fsd_soak::tree;
use fsd_tool_client::connect::{self, Endpoint};

/// A small deterministic generator (xorshift64*): the cases reproduce from their seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Unmounts the bind mount however the test ends.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fields drop in order: the mount goes first, then the daemon, then the directories.
struct World {
    _mount: Mount,
    daemon: Daemon,
    root: PathBuf,
    outside: PathBuf,
    log: PathBuf,
    pids: Vec<u32>,
    tmp: tempfile::TempDir,
}

const NAMES: &[&str] = &["a.txt", "b.txt", "d", "e", "link", "up", "new.txt", ".git", "x"];

impl World {
    fn start() -> World {
        assert!(
            rustix::process::geteuid().is_root(),
            "the fence property test bind-mounts a directory below the root: run it as root"
        );
        let tmp = tempfile::Builder::new().prefix("fsd-fence-").tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (root, outside, run) = (base.join("ws"), base.join("outside"), base.join("run"));
        for d in [&root, &outside, &run, &outside.join("sub/deep"), &outside.join("mounted/inner")] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (name, text) in [
            ("secret.txt", "outside\n"),
            ("sub/b.txt", "b outside\n"),
            ("sub/deep/c.txt", "c outside\n"),
            ("mounted/m.txt", "mounted\n"),
            ("mounted/inner/n.txt", "mounted inner\n"),
        ] {
            std::fs::write(outside.join(name), text).unwrap();
        }
        let mount_point = root.join("mnt");
        std::fs::create_dir(&mount_point).unwrap();
        let status =
            Command::new("mount").arg("--bind").arg(outside.join("mounted")).arg(&mount_point).status();
        assert!(status.is_ok_and(|s| s.success()), "mount --bind failed: this test needs root and mount(8)");
        let mount = Mount(mount_point);
        let log = run.join("fsd.log");
        let options = daemon::Options {
            root: root.clone(),
            socket: run.join("fsd.sock"),
            config: String::new(),
            log: Some(log.clone()),
        };
        let daemon = Daemon::start(&Bins::locate().unwrap(), &options).unwrap();
        let world = World { _mount: mount, daemon, root, outside, log, pids: Vec::new(), tmp };
        let mut client = Client::connect(&world.daemon.socket);
        client.hello();
        let mut pids = world.daemon.pids();
        pids.sort();
        World { pids, ..world }
    }

    /// A fresh random tree in the root (the mount point stays).
    fn plant(&self, rng: &mut Rng) {
        for entry in std::fs::read_dir(&self.root).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n == "mnt") {
                continue;
            }
            // remove_dir_all does not follow links: the outside is never touched here.
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
        let outside = self.outside.to_str().unwrap().to_owned();
        let targets = [
            format!("{outside}/secret.txt"),
            format!("{outside}/sub"),
            "../outside/sub/b.txt".to_owned(),
            "../../outside".to_owned(),
            "../../../outside/sub/deep".to_owned(),
            "/".to_owned(),
            "/proc/self/root".to_owned(),
            "a.txt".to_owned(),
            "d".to_owned(),
            "mnt/m.txt".to_owned(),
            "../mnt/inner".to_owned(),
            "missing/nowhere".to_owned(),
            ".".to_owned(),
            "..".to_owned(),
        ];
        let mut dirs = vec![self.root.clone()];
        for _ in 0..(6 + rng.below(10)) {
            let parent = rng.pick(&dirs).clone();
            let path = parent.join(rng.pick(NAMES));
            if std::fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            match rng.below(10) {
                0..=3 => std::fs::write(&path, format!("a\nseed {}\n", rng.next() % 1000)).unwrap(),
                4..=6 => {
                    std::fs::create_dir(&path).unwrap();
                    dirs.push(path);
                }
                _ => std::os::unix::fs::symlink(rng.pick(&targets), &path).unwrap(),
            }
        }
    }

    /// Paths a call may name: every entry of the tree (through its links and the mount), a new
    /// name in each directory, escapes and absolute paths outside.
    fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut pending = vec![self.root.clone()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) && path.starts_with(&self.root) {
                    pending.push(path.clone());
                }
                out.push(path.to_str().unwrap().to_owned());
                for tail in ["new.txt", "a.txt", "inner/n.txt", "../secret.txt", "deep/c.txt"] {
                    out.push(format!("{}/{tail}", path.display()));
                }
            }
            out.push(format!("{}/new.txt", dir.display()));
        }
        let outside = self.outside.display();
        for extra in [
            format!("{}/../outside/secret.txt", self.root.display()),
            format!("{}/mnt/m.txt", self.root.display()),
            format!("{}/mnt/inner", self.root.display()),
            format!("{}/mnt", self.root.display()),
            format!("{outside}/secret.txt"),
            format!("{outside}/sub/new.txt"),
            format!("{}", self.root.display()),
        ] {
            out.push(extra);
        }
        out
    }

    /// Nothing outside changed, nothing new beside the root, no process replaced, no panic.
    fn check(&self, before: &BTreeMap<PathBuf, tree::Node>, seed: u64) {
        let changes = tree::diff(before, &tree::snapshot(&self.outside, None));
        assert!(changes.is_empty(), "seed {seed}: changed outside the root: {changes:?}");
        let mut names: Vec<_> =
            std::fs::read_dir(self.tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["outside", "run", "ws"], "seed {seed}: new names beside the root");
        let mut pids = self.daemon.pids();
        pids.sort();
        assert_eq!(pids, self.pids, "seed {seed}: a daemon process died or was replaced");
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(!log.contains("panicked"), "seed {seed}: the daemon panicked:\n{log}");
    }
}

/// Renames entries, swaps directories for links to the outside and back, until told to stop.
/// Never touches the mount point or anything below it (that is the outside).
fn mutate(root: PathBuf, outside: PathBuf, seed: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut rng = Rng::new(seed ^ 0xdead_beef);
    let mut steps = 0;
    let below_root = |rng: &mut Rng| -> Option<PathBuf> {
        let mut path = root.clone();
        for _ in 0..=rng.below(3) {
            let entries: Vec<_> = std::fs::read_dir(&path).ok()?.flatten().map(|e| e.path()).collect();
            let entries: Vec<_> = entries.into_iter().filter(|p| !p.ends_with("mnt")).collect();
            if entries.is_empty() {
                break;
            }
            let next = rng.pick(&entries).clone();
            let is_dir = std::fs::symlink_metadata(&next).is_ok_and(|m| m.is_dir());
            path = next;
            if !is_dir {
                break;
            }
        }
        (path != root).then_some(path)
    };
    while !stop.load(Ordering::Relaxed) {
        steps += 1;
        let Some(path) = below_root(&mut rng) else {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        };
        let parent = path.parent().unwrap().to_path_buf();
        match rng.below(4) {
            // A rename within the root, possibly over another entry.
            0 | 1 => {
                let _ = std::fs::rename(&path, parent.join(rng.pick(NAMES)));
            }
            // The directory becomes a link to the outside (a classic swap race), and back.
            2 => {
                let aside = parent.join(format!(".aside-{}", rng.next() % 1000));
                if std::fs::rename(&path, &aside).is_ok() {
                    let target = if rng.chance(50) { outside.join("sub") } else { outside.clone() };
                    let _ = std::os::unix::fs::symlink(&target, &path);
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    let _ = std::fs::remove_file(&path);
                    let _ = std::fs::rename(&aside, &path);
                }
            }
            // A link's target flips.
            _ => {
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                    let _ = std::fs::remove_file(&path);
                    let target =
                        if rng.chance(50) { outside.join("secret.txt") } else { PathBuf::from("a.txt") };
                    let _ = std::os::unix::fs::symlink(target, &path);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    steps
}

/// The generated gRPC client on its own runtime.
struct Client {
    rt: tokio::runtime::Runtime,
    client: FsdClient<tonic::transport::Channel>,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (client, _) = rt.block_on(connect::connect(&Endpoint::Unix(socket.to_path_buf()))).unwrap();
        Client { rt, client }
    }

    fn hello(&mut self) {
        self.rt.block_on(self.client.hello(v1::HelloRequest { context: None })).unwrap();
    }

    /// One random call; `Err` carries the status of a refusal.
    fn call(&mut self, rng: &mut Rng, paths: &[String]) -> (&'static str, Result<(), tonic::Status>) {
        let path = rng.pick(paths).clone();
        let other = rng.pick(paths).clone();
        let c = &mut self.client;
        let (name, result) = self.rt.block_on(async {
            match rng.below(9) {
                0 => {
                    ("read", c.read_text(v1::ReadTextRequest { path, ..Default::default() }).await.map(drop))
                }
                1 => ("list", c.list_dir(v1::ListDirRequest { path, ..Default::default() }).await.map(drop)),
                2 => ("stat", c.stat(v1::StatRequest { path, ..Default::default() }).await.map(drop)),
                3 | 4 => {
                    let content = format!("written {}\n", rng.next() % 1000);
                    (
                        "write",
                        c.write_text(v1::WriteTextRequest { path, content, ..Default::default() })
                            .await
                            .map(drop),
                    )
                }
                5 => {
                    let request = v1::EditTextRequest {
                        path,
                        old_string: "a".into(),
                        new_string: "edited".into(),
                        ..Default::default()
                    };
                    ("edit", c.edit_text(request).await.map(drop))
                }
                6 => {
                    let request =
                        v1::MoveFileRequest { source: path, destination: other, ..Default::default() };
                    ("move", c.move_file(request).await.map(drop))
                }
                7 => (
                    "delete",
                    c.delete_file(v1::DeleteFileRequest { path, ..Default::default() }).await.map(drop),
                ),
                _ => {
                    let request = v1::RemoveRequest { path, recursive: true, ..Default::default() };
                    ("remove", c.remove(request).await.map(drop))
                }
            }
        });
        (name, result)
    }
}

#[test]
fn random_trees_links_mounts_and_mutators_never_reach_outside_the_root() {
    let world = World::start();
    let before = tree::snapshot(&world.outside, None);
    let cases: u64 = std::env::var("FSD_FENCE_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24);
    let mut client = Client::connect(&world.daemon.socket);
    let mut outcomes = BTreeMap::<String, u64>::new();
    let started = std::time::Instant::now();
    for seed in 0..cases {
        let mut rng = Rng::new(seed);
        world.plant(&mut rng);
        let paths = world.paths();
        let stop = Arc::new(AtomicBool::new(false));
        let mutator = {
            let (root, outside, stop) = (world.root.clone(), world.outside.clone(), stop.clone());
            std::thread::spawn(move || mutate(root, outside, seed, stop))
        };
        for _ in 0..60 {
            let (op, result) = client.call(&mut rng, &paths);
            let key = match result {
                Ok(()) => format!("{op} ok"),
                Err(status) => {
                    let wire = WireError::from_status(&status).unwrap_or_else(|| {
                        panic!("seed {seed}: {op} answered a status without an fsd code: {status:?}")
                    });
                    assert_ne!(wire.code, ErrorCode::Aborted, "seed {seed}: {op}: a worker died: {wire:?}");
                    format!("{op} {}", wire.code)
                }
            };
            *outcomes.entry(key).or_default() += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let steps = mutator.join().unwrap();
        assert!(steps > 0, "seed {seed}: the mutator never ran");
        world.check(&before, seed);
    }
    println!("{cases} cases in {:?}; calls by outcome: {outcomes:?}", started.elapsed());
    // The cases exercised both sides of the fence.
    assert!(outcomes.keys().any(|k| k.ends_with("FS_SANDBOX_DENIED")), "{outcomes:?}");
    assert!(outcomes.keys().any(|k| k == "write ok"), "{outcomes:?}");
}
