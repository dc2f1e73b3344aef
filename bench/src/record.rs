//! The change record's cost (docs/rewind.md): the write tool's p50 replacing a 4 KiB file with
//! the record on against off, two daemons started side by side on one root in the same run and
//! measured in turn (the order rotating from run to run), and the record's bytes per change.
//! Every write's content differs, so every change keeps a before-image of its own (no digest is
//! shared): the worst case of the store's cost.

use std::path::Path;
use std::time::Instant;

use fsd_tool_client::connect;
use fsd_tool_client::{ClientConfig, Session, Tools};
use serde_json::json;

use crate::fixtures;
use crate::procs::{Server, Transport};
use crate::report::Section;
use crate::stats::{PerRun, Samples};
use crate::{Common, Res};

/// The write tool's p50 (µs) over `n` replaces of `path` on `server`; `counter` makes each
/// content unique across both daemons.
fn measure(server: &Server, root: &Path, path: &str, n: usize, warm: usize, counter: &mut u64) -> Res<f64> {
    let rt = crate::client_runtime()?;
    rt.block_on(async {
        let (client, hello) = connect::connect(&server.endpoint(Transport::Unix)).await?;
        // Writes only: no read between them (the observation policy off, as `call` runs).
        let config = ClientConfig { observation_policy: false, ..ClientConfig::default() };
        let mut session = Session::new(Tools::new(config), client, hello, root.to_owned());
        let mut samples = Samples::with_capacity(n);
        for i in 0..warm + n {
            *counter += 1;
            let content = format!("{counter:016}\n{}", &fixtures::four_k()[17..]);
            let args = json!({ "file_path": path, "content": content });
            let started = Instant::now();
            let result = session.call("write", args).await;
            if i >= warm {
                samples.push(started.elapsed());
            }
            if result.is_error {
                return Err::<_, crate::Error>(result.text().into());
            }
        }
        Ok(samples.p50())
    })
}

/// Bytes beneath `dir`, and how many changes its log holds.
fn store_size(dir: &Path) -> Res<(u64, u64)> {
    let mut bytes = 0;
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                bytes += meta.len();
            }
        }
    }
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let changes = log.lines().filter(|l| l.starts_with("{\"change\"")).count() as u64;
    Ok((bytes, changes))
}

/// A thread writing 1 GiB buffered, never synced, over and over into `path` until dropped: the
/// disk in steady writeback, as under a build or a checkout beside the agent.
struct Writeback {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writeback {
    fn start(path: std::path::PathBuf) -> Writeback {
        use std::io::Write;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let chunk = vec![0u8; 1 << 20];
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut file) = std::fs::File::create(&path) else { return };
                for _ in 0..1024 {
                    if stopping.load(std::sync::atomic::Ordering::Relaxed) || file.write_all(&chunk).is_err()
                    {
                        break;
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        });
        Writeback { stop, thread: Some(thread) }
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn run(common: &Common, writeback: bool) -> Res<Section> {
    let dir = tempfile::Builder::new().prefix("fsd-bench-record-").tempdir_in("/tmp")?;
    let root = dir.path().join("ws");
    std::fs::create_dir(&root)?;
    let root = std::fs::canonicalize(&root)?;
    let (on_state, off_state) = (dir.path().join("state-on"), dir.path().join("state-off"));
    let bins = common.bin_dir()?;
    let on = Server::fsd_unmetered_with(&bins, &root, &format!("state_dir = \"{}\"", on_state.display()))?;
    let off = Server::fsd_unmetered_with(
        &bins,
        &root,
        &format!("state_dir = \"{}\"\nchange_record = false", off_state.display()),
    )?;
    let paths = [root.join("on.txt"), root.join("off.txt")];
    for path in &paths {
        std::fs::write(path, fixtures::four_k())?;
    }
    let paths: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let daemons = [&on, &off];
    let mut p50 = [PerRun::default(), PerRun::default()];
    let mut counter = 0u64;
    let (n, warm) = (common.n(1000), common.n(100));
    let pressure = writeback.then(|| Writeback::start(dir.path().join("writeback")));
    for run in 0..common.runs {
        note!("  change record: run {}/{} ({})", run + 1, common.runs, crate::report::loadavg());
        for k in 0..2 {
            let i = (run + k) % 2;
            p50[i].push(measure(daemons[i], &root, &paths[i], n, warm, &mut counter)?);
        }
    }
    drop(pressure);
    let (bytes, changes) = store_size(&on_state.join("changes"))?;
    drop(on);
    drop(off);

    let ratio = p50[0].ratio(&p50[1]);
    let per_change = bytes.checked_div(changes).unwrap_or(0);
    let mut md = String::from("### The change record\n\n");
    md.push_str(
        "The write tool replacing a 4 KiB file (Unix socket, a new content every call, so every change \
         keeps a before-image of its own) against two daemons side by side on one root, measured in turn \
         in each run: the change record on (`state_dir`, defaults) and off (`change_record = false`).",
    );
    md.push_str(if writeback {
        " Measured with the disk in steady writeback (`--writeback`: 1 GiB written buffered, never synced, \
         over and over beside the root).\n\n"
    } else {
        "\n\n"
    });
    md.push_str("| record | write tool p50 | ÷ off |\n|---|---|---|\n");
    md.push_str(&format!("| on | {} | {} |\n", p50[0].micros(), ratio.times()));
    md.push_str(&format!("| off | {} | 1.00× |\n", p50[1].micros()));
    md.push_str(&format!(
        "\nThe record holds {changes} changes in {bytes} bytes: {per_change} bytes per change (the 4 KiB \
         before-image and its line of the log); `change_record_max_bytes` (default 256 MiB) and \
         `change_record_max_age_secs` bound it.\n"
    ));
    let mut section = Section::default();
    section.verdict("record on: write tool p50 ≤ 1.25× off (4 KiB)", ratio.times(), ratio.median() <= 1.25);
    section.markdown = md;
    Ok(section)
}
