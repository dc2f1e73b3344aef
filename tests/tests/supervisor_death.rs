//! A supervisor killed alone (SIGKILL, the OOM killer) takes its network process with it: the
//! kernel kills it (PDEATHSIG, `fsd::sys::ipc::die_with_parent`) rather than letting it drain its
//! connections and hold the socket while a successor starts. The control channel's EOF reaches
//! the network process a moment before the signal (a dying process closes its descriptors before
//! it notifies its children), so its "supervisor gone" log line says nothing about how it ended;
//! this test looks at how it ended.

use crate::common;

use common::*;

#[test]
fn a_supervisor_killed_alone_takes_the_network_process_with_it() {
    // This process adopts the daemon's orphans, so it can wait for them and see how they ended.
    // Its own test binary: no other test's orphans come here.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).unwrap();
    let mut d = Daemon::start();
    d.write("a.txt", "a\n");
    // A client connection stays open: a draining network process would wait for it.
    let mut s = d.session();
    assert!(!s.read("a.txt").is_error());
    let supervisor = d.pid();
    let children: Vec<u32> = d.pids().into_iter().filter(|&p| p != supervisor).collect();
    let network: Vec<u32> = children
        .iter()
        .copied()
        .filter(|&p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            cmdline.split(|&b| b == 0).any(|arg| arg == b"network")
        })
        .collect();
    assert_eq!(network.len(), 1, "one network process among {children:?}");

    // The supervisor alone, on purpose: the kit's kill_tree would take the others too.
    d.process.child_mut().kill().unwrap();
    d.process.child_mut().wait().unwrap();
    let pid = rustix::process::Pid::from_raw(network[0] as i32).unwrap();
    let (_, status) = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
        .unwrap()
        .expect("the network process's status");
    assert_eq!(
        status.terminating_signal(),
        Some(9),
        "the network process outlived its supervisor and ended on its own ({status:?})"
    );
    // Nothing listens any more: the socket file is left (nobody removed it), stale.
    let refused = std::os::unix::net::UnixStream::connect(&d.socket).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused, "{refused}");
    drop(s);
}
