//! A process tree as /proc shows it: its members, their roles, their memory and descriptors, and
//! whether they are gone.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// `root` and all its descendants, as they are now (children of every thread, not only the main
/// one: the supervisor forks from several).
pub fn tree(root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        out.push(pid);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pending.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    out
}

/// A daemon process's role from its command line: a worker's mode (`--worker-mode MODE`),
/// `network` for the network process, `None` for the supervisor or a process that is gone.
pub fn role(pid: u32) -> Option<String> {
    role_of(&std::fs::read(format!("/proc/{pid}/cmdline")).ok()?)
}

/// [`role`] of a NUL-separated command line.
pub fn role_of(cmdline: &[u8]) -> Option<String> {
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let after = |flag: &[u8]| {
        args.windows(2).find(|w| w[0] == flag).map(|w| String::from_utf8_lossy(w[1]).into_owned())
    };
    match after(b"--role").as_deref() {
        Some("worker") => after(b"--worker-mode"),
        Some(other) => Some(other.to_owned()),
        None => None,
    }
}

/// Sends `signal` to `pid`, ignoring a process that is already gone.
pub fn kill(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Whether a process is gone: none of its threads is still running (a zombie nobody reaped yet
/// counts as gone). Its main thread alone says too little: a killed multi-threaded process (the
/// network process) shows a zombie main thread while its other threads are still exiting, and
/// those still hold its descriptors, its listening socket among them.
pub fn gone(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.flatten().all(|task| match std::fs::read_to_string(task.path().join("stat")) {
        Err(_) => true,
        Ok(stat) => exited_stat(&stat),
    })
}

/// Whether a /proc/PID/task/TID/stat line is of a zombie or dead thread. The state follows the
/// command name's closing parenthesis, and the name itself may hold parentheses and spaces.
pub fn exited_stat(stat: &str) -> bool {
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
}

/// Waits until every process of `pids` is gone; `what` names them in the error.
pub fn wait_gone(pids: &[u32], timeout: Duration, what: &str) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Lingering { what: what.to_owned(), pids: left, timeout });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A `kB` field (`VmHWM:`, `VmRSS:`) of a /proc/PID/status text.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A `kB` field of one process's status; `None` when the process is gone (or has no memory).
pub fn pid_status_kib(pid: u32, field: &str) -> Option<u64> {
    status_kib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?, field)
}

/// Peak resident memory in KiB, VmHWM summed over `pids`: an upper bound of the whole tree's
/// peak (the processes need not peak at the same moment). A process gone counts for nothing.
pub fn peak_rss_kib(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|&pid| pid_status_kib(pid, "VmHWM:")).sum()
}

/// CPU time (user and system, every thread's, the exited ones' too) summed over `pids`, in
/// seconds, at the 10 ms resolution of /proc (USER_HZ is 100 in Linux's ABI). A process gone
/// counts for nothing.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The name may hold spaces and parentheses: the fields start after the last `)`.
            let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
            // Fields 14 and 15 of proc(5), utime and stime, are the 12th and 13th after the name.
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    ticks as f64 / 100.0
}

/// Memory and descriptors of a tree at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// VmRSS summed over the tree, in KiB.
    pub rss_kib: u64,
    /// Entries of /proc/<pid>/fd summed over the tree.
    pub fds: u64,
    pub processes: u64,
}

/// Samples `pids`. A process that exits between the listing and the read counts for nothing.
pub fn sample(pids: &[u32]) -> Sample {
    let mut sample = Sample::default();
    for pid in pids {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        sample.processes += 1;
        sample.rss_kib += status_kib(&status, "VmRSS:").unwrap_or(0);
        sample.fds += std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let status = "Name:\tfsd\nVmPeak:\t  20000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t 4096 kB\nThreads:\t3\n";
        let check =
            |field: &str, expected: Option<u64>| assert_eq!(status_kib(status, field), expected, "{field}");
        check("VmHWM:", Some(5120));
        check("VmRSS:", Some(4096));
        check("VmPeak:", Some(20000));
        check("VmSwap:", None);
        check("Threads:", Some(3));
        check("Name:", None);
        // A kernel thread's status has no memory lines at all.
        assert_eq!(status_kib("Name:\tkthreadd\nState:\tS (sleeping)\n", "VmHWM:"), None);
    }

    #[test]
    fn roles_from_command_lines() {
        let check = |cmdline: &[u8], expected: Option<&str>| {
            assert_eq!(role_of(cmdline).as_deref(), expected, "{}", String::from_utf8_lossy(cmdline));
        };
        check(b"/t/fsd\0--listen\0unix:/s\0", None);
        check(b"/t/fsd\0--role\0network\0--ipc-fd\x003\0", Some("network"));
        check(b"/t/fsd\0--role\0worker\0--worker-mode\0read-only\0", Some("read-only"));
        check(b"/t/fsd\0--worker-mode\0workspace-write\0--role\0worker\0", Some("workspace-write"));
        check(b"/t/fsd\0--role\0worker\0", None);
        check(b"", None);
    }

    #[test]
    fn exited_threads() {
        let check = |stat: &str, expected: bool| assert_eq!(exited_stat(stat), expected, "{stat}");
        check("42 (fsd) S 1 42 42 0", false);
        check("42 (fsd) Z 1 42 42 0", true);
        check("42 (fsd) X 1 42 42 0", true);
        check("42 (a) b) R 1", false);
        check("42 (a) Z) Z 1", true);
        check("garbage", false);
    }
}
