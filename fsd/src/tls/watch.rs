//! The supervisor's watch on the TLS files: every few seconds it compares each file's metadata
//! and resolved path with what it saw last, and on a change reads and checks the files and hands
//! good ones to the network process, which may not open them. A poll, not inotify: an inotify
//! watch on a Kubernetes secret must follow the `..data` symlink swap (watch the directory,
//! re-arm on every swap, miss nothing between), while a stat of each path (following symlinks)
//! and its resolved target sees every kind of replacement alike for a few syscalls a poll.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{CertInfo, TlsConfig, TlsError, TlsFiles, build};

/// How often the files are looked at. Certificates rotate in hours to months and a kubelet
/// updates a mounted secret within a minute or so of its change; two seconds adds little to
/// either and costs three `stat`s and `realpath`s.
pub const POLL: Duration = Duration::from_secs(2);

/// What identifies one state of a file: where its path leads, and that file's identity, size
/// and times. A write in place changes the times; a rename or a symlink swap the inode or target.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    target: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// `None` while the path leads nowhere (mid-swap, or removed): a later state is compared.
    fn of(path: &Path) -> Option<Stamp> {
        let target = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&target).ok()?;
        Some(Stamp {
            target,
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// What a poll found.
#[derive(Debug)]
pub enum Change {
    /// New files that make a good configuration: for the network process.
    Loaded(TlsFiles, CertInfo),
    /// The files changed into something that does not load: the certificate in use stays.
    Refused { error: TlsError, serving: Option<CertInfo> },
}

#[derive(Debug)]
pub struct Watch {
    tls: TlsConfig,
    seen: Vec<Option<Stamp>>,
    /// The digest of the contents last loaded (at start, or handed over since; not the
    /// contents: the supervisor keeps no copy of the key), and their certificate.
    loaded: Option<([u8; 32], CertInfo)>,
}

impl Watch {
    /// Looks at the files now, before the network process reads them: a change from here on is
    /// seen by a poll (at worst one that hands over what the network process read already).
    pub fn new(tls: TlsConfig) -> Watch {
        let seen = Watch::stamps(&tls);
        let loaded = TlsFiles::read(&tls)
            .ok()
            .and_then(|files| build(&tls, &files).ok().map(|served| (digest(&files), served.certificate)));
        Watch { tls, seen, loaded }
    }

    fn stamps(tls: &TlsConfig) -> Vec<Option<Stamp>> {
        let mut paths = vec![tls.cert.as_path(), tls.key.as_path()];
        paths.extend(tls.client_ca.as_deref());
        paths.into_iter().map(Stamp::of).collect()
    }

    /// `None` when nothing changed (or changed back to what is loaded). A refusal is reported
    /// once per state of the files: the next report needs another change.
    pub fn poll(&mut self) -> Option<Change> {
        let now = Watch::stamps(&self.tls);
        if now == self.seen {
            return None;
        }
        self.seen = now;
        let loaded = TlsFiles::read(&self.tls).and_then(|files| {
            let served = build(&self.tls, &files)?;
            Ok((files, served.certificate))
        });
        match loaded {
            Ok((files, _)) if self.loaded.as_ref().is_some_and(|(old, _)| *old == digest(&files)) => None,
            Ok((files, info)) => {
                self.loaded = Some((digest(&files), info.clone()));
                Some(Change::Loaded(files, info))
            }
            Err(error) => {
                Some(Change::Refused { error, serving: self.loaded.as_ref().map(|(_, info)| info.clone()) })
            }
        }
    }
}

/// SHA-256 over the three contents, each behind its length (no two sets of files share one).
fn digest(files: &TlsFiles) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let none: &[u8] = &[];
    for part in [&files.cert[..], &files.key[..], files.client_ca.as_deref().unwrap_or(none)] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ClientCerts;

    /// A path that leads nowhere, then a file written in place, then a symlink swapped to
    /// another directory (Kubernetes' `..data`): each is a change, and the same state twice is not.
    #[test]
    fn stamps_change_with_content_inode_and_symlink_target() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tls = TlsConfig {
            cert: d.join("tls.crt"),
            key: d.join("tls.key"),
            client_ca: None,
            client_certs: ClientCerts::None,
        };
        let first = Watch::stamps(&tls);
        assert_eq!(first, vec![None, None]);
        for v in ["a", "b"] {
            std::fs::create_dir(d.join(v)).unwrap();
            std::fs::write(d.join(v).join("tls.crt"), v).unwrap();
            std::fs::write(d.join(v).join("tls.key"), v).unwrap();
        }
        std::os::unix::fs::symlink("a", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/tls.crt", d.join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", d.join("tls.key")).unwrap();
        let linked = Watch::stamps(&tls);
        assert!(linked.iter().all(Option::is_some));
        assert_eq!(Watch::stamps(&tls), linked, "nothing changed");
        std::os::unix::fs::symlink("b", d.join("..data.tmp")).unwrap();
        std::fs::rename(d.join("..data.tmp"), d.join("..data")).unwrap();
        let swapped = Watch::stamps(&tls);
        assert_ne!(swapped, linked);
        assert_eq!(
            swapped[0].as_ref().map(|s| s.target.clone()),
            Some(d.canonicalize().unwrap().join("b/tls.crt"))
        );
        std::fs::write(d.join("b/tls.key"), "longer").unwrap();
        assert_ne!(Watch::stamps(&tls), swapped, "a write in place");
    }
}
