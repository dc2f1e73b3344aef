//! The syscall layer: every filesystem syscall fsd makes goes through a function here, and all of
//! fsd's `unsafe` lives here. Everything is descriptor-relative: no function takes a path string
//! that the kernel would resolve across more than one component.
#![allow(unsafe_code)]

pub mod call;
pub mod confine;
pub mod ipc;
pub mod socket;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, StatxFlags};
pub use rustix::io::Errno;

/// What kind of object a name refers to, without following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Other,
}

/// The metadata fsd uses: identity, type, size, times, owner and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub btime: (i64, u32),
    /// The mount the object is on (`STATX_MNT_ID`): the walk refuses to cross into another.
    pub mount: u64,
    /// Hard links: a file with more than one is reachable by other names too.
    pub nlink: u64,
}

impl Meta {
    /// Whether a file read since `at_open` still holds what was read: same size and mtime.
    /// Not ctime: an atomic replace renames the old inode away (and removes it), which changes
    /// its ctime while a reader of the old content reads exactly what it opened.
    pub fn read_unchanged(&self, at_open: &Meta) -> bool {
        self.size == at_open.size && self.mtime == at_open.mtime
    }

    /// Same inode and same content-relevant metadata (ctime aside, which a rename changes).
    pub fn same_content(&self, other: &Meta) -> bool {
        self.dev == other.dev && self.ino == other.ino && self.size == other.size && self.mtime == other.mtime
    }
}

fn kind_of(mode: u32) -> Kind {
    match mode & 0o170000 {
        0o100000 => Kind::File,
        0o040000 => Kind::Directory,
        0o120000 => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// statx on a descriptor (AT_EMPTY_PATH), including birth time where the filesystem has it.
/// The network process's seccomp allowlist has no statx (it could name any path: seccomp
/// cannot see the string), so there it is fstat, without birth time and mount id: enough for
/// the stream pump, which compares the file with itself.
pub fn meta(fd: BorrowedFd<'_>) -> Result<Meta, Errno> {
    match rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
    ) {
        Ok(st) => Ok(from_statx(&st)),
        // rustix reports a filtered statx as ENOSYS.
        Err(Errno::NOSYS | Errno::PERM) => rustix::fs::fstat(fd).map(|st| from_stat(&st)),
        Err(errno) => Err(errno),
    }
}

fn from_stat(st: &rustix::fs::Stat) -> Meta {
    let mode = st.st_mode;
    let dev = st.st_dev;
    // `nlink_t` is 64 bits here, 32 on other targets.
    #[allow(clippy::useless_conversion)]
    let nlink = u64::from(st.st_nlink);
    Meta {
        kind: kind_of(mode),
        dev: (u64::from(rustix::fs::major(dev)) << 32) | u64::from(rustix::fs::minor(dev)),
        ino: st.st_ino,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime: (st.st_mtime, u32::try_from(st.st_mtime_nsec).unwrap_or(0)),
        ctime: (st.st_ctime, u32::try_from(st.st_ctime_nsec).unwrap_or(0)),
        btime: (0, 0),
        mount: 0,
        nlink,
    }
}

/// The filesystem type (`statfs`'s `f_type`, a magic number) of whatever `path` names.
pub fn filesystem_type(path: &Path) -> Result<i64, Errno> {
    // `f_type` is signed on some targets, unsigned on others.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    rustix::fs::statfs(path).map(|st| st.f_type as i64)
}

/// statx of one name in a directory, without following a final symlink.
pub fn meta_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Meta, Errno> {
    let st = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID,
    )?;
    Ok(from_statx(&st))
}

fn from_statx(st: &rustix::fs::Statx) -> Meta {
    let mode = u32::from(st.stx_mode);
    let btime = if st.stx_mask & StatxFlags::BTIME.bits() != 0 {
        (st.stx_btime.tv_sec, st.stx_btime.tv_nsec)
    } else {
        (0, 0)
    };
    Meta {
        kind: kind_of(mode),
        dev: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
        ino: st.stx_ino,
        size: st.stx_size,
        mode,
        uid: st.stx_uid,
        gid: st.stx_gid,
        mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        btime,
        mount: st.stx_mnt_id,
        nlink: u64::from(st.stx_nlink),
    }
}

/// The inode generation (FS_IOC_GETVERSION) where the filesystem keeps one; 0 elsewhere.
/// It tells a reused inode number apart from the file that had it before.
pub fn generation(file: &File) -> u64 {
    use std::os::fd::AsRawFd;
    // The request number encodes a `long`, but filesystems keep a 32-bit generation and write
    // only an `int` (ext4: `put_user(i_generation, (int __user *)arg)`). A zeroed `long` is big
    // enough either way, and its low 32 bits are the generation.
    const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
    let mut value: libc::c_long = 0;
    // SAFETY: the kernel writes at most `sizeof(long)` bytes through the pointer, which points
    // at a live, initialised `c_long`; `file` stays open for the whole call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_GETVERSION, &mut value) };
    if rc == 0 { u64::from(value as u32) } else { 0 }
}

/// Opens a directory by absolute path at startup (roots only) as an `O_PATH` descriptor.
pub fn open_root(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
}

/// Opens one component beneath `dir` as an `O_PATH` handle without following it.
pub fn open_component(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    debug_assert!(!name.as_bytes().contains(&b'/'));
    rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// The target of a symlink held as an `O_PATH` handle.
pub fn read_link(link: BorrowedFd<'_>) -> Result<OsString, Errno> {
    let target = rustix::fs::readlinkat(link, "", Vec::new())?;
    Ok(OsString::from_vec(target.into_bytes()))
}

/// Creates one directory beneath `dir`.
pub fn make_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
}

/// Opens a name for reading without blocking (FIFOs, devices) and without following a link.
pub fn open_read(dir: BorrowedFd<'_>, name: &OsStr) -> Result<File, Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

/// Opens a directory beneath `dir` for listing (`name` empty: `dir` itself).
pub fn open_dir_for_listing(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    let name: &OsStr = if name.is_empty() { OsStr::new(".") } else { name };
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The names in a directory, without `.` and `..`.
pub fn list_names(dir: OwnedFd, limit: usize) -> Result<Vec<OsString>, Errno> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() >= limit {
            return Err(Errno::NOSPC);
        }
        names.push(OsString::from_vec(name.to_vec()));
    }
    Ok(names)
}

/// Creates a new file that must not exist, never through a link.
pub fn create_exclusive(dir: BorrowedFd<'_>, name: &OsStr) -> Result<File, Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

/// Sets owner and group on an open file (keeps the replaced file's owner).
pub fn set_owner(file: &File, uid: u32, gid: u32) -> Result<(), Errno> {
    let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
    rustix::fs::fchown(file, Some(uid), Some(gid))
}

/// Sets permission bits on an open file.
pub fn set_mode(file: &File, mode: u32) -> Result<(), Errno> {
    rustix::fs::fchmod(file, Mode::from_raw_mode(mode))
}

/// Empties an open file and takes every permission bit away, through its descriptor alone: for
/// a temporary file whose name cannot be removed (its directory left the fence, where Landlock
/// refuses the unlink), so what stays behind holds none of the caller's bytes. ftruncate's
/// Landlock right was checked when the file was created, inside the fence.
pub fn empty_file(file: &File) -> Result<(), Errno> {
    rustix::fs::ftruncate(file, 0)?;
    rustix::fs::fchmod(file, Mode::empty())
}

/// fsync on a descriptor.
pub fn sync(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::fsync(fd)
}

/// fsync of a directory held as an `O_PATH` handle (fsync needs a real open).
pub fn sync_dir(dir: BorrowedFd<'_>) -> Result<(), Errno> {
    let fd =
        rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::fsync(&fd)
}

/// How a rename treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameHow {
    Replace,
    NoReplace,
    Exchange,
}

/// renameat2 between two directory handles.
pub fn rename(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
    how: RenameHow,
) -> Result<(), Errno> {
    let flags = match how {
        RenameHow::Replace => RenameFlags::empty(),
        RenameHow::NoReplace => RenameFlags::NOREPLACE,
        RenameHow::Exchange => RenameFlags::EXCHANGE,
    };
    rustix::fs::renameat_with(from_dir, from, to_dir, to, flags)
}

/// Removes a non-directory name.
pub fn remove(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::empty())
}

/// Opens a directory by absolute path for its extended attributes and `flock` (the roots, for
/// the temporary-file journal; at startup only).
pub fn open_dir(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
}

/// Opens a directory by absolute path, refusing a symbolic link as its last component (the
/// temporary-file journal's base, in a directory others may write).
pub fn open_dir_no_follow(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Creates one directory beneath `dir` with exactly `mode` (the umask aside).
pub fn make_dir_with_mode(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Result<(), Errno> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))
}

/// Gives an open directory its owner and mode (a journal directory, to the workers' identity).
pub fn set_dir_owner_and_mode(dir: BorrowedFd<'_>, uid: u32, gid: u32, mode: u32) -> Result<(), Errno> {
    let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
    rustix::fs::fchown(dir, Some(uid), Some(gid))?;
    rustix::fs::fchmod(dir, Mode::from_raw_mode(mode))
}

/// Sets an extended attribute on an open descriptor (fsetxattr).
pub fn set_xattr(fd: BorrowedFd<'_>, name: &OsStr, value: &[u8]) -> Result<(), Errno> {
    rustix::fs::fsetxattr(fd, name, value, rustix::fs::XattrFlags::empty())
}

/// Reads an extended attribute of an open descriptor (at most 64 KiB, the kernel's limit).
pub fn get_xattr(fd: BorrowedFd<'_>, name: &OsStr) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 64 << 10];
    let n = rustix::fs::fgetxattr(fd, name, &mut buf[..])?;
    buf.truncate(n);
    Ok(buf)
}

/// The extended attribute names of an open descriptor.
pub fn list_xattrs(fd: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let mut buf = vec![0u8; 64 << 10];
    let n = rustix::fs::flistxattr(fd, &mut buf[..])?;
    Ok(buf[..n]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| OsString::from_vec(n.to_vec()))
        .collect())
}

/// Removes an extended attribute of an open descriptor (fremovexattr).
pub fn remove_xattr(fd: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    rustix::fs::fremovexattr(fd, name)
}

/// Opens (creating, 0600) a file of the change record for appending, never through a link.
pub fn open_append(dir: BorrowedFd<'_>, name: &OsStr) -> Result<File, Errno> {
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?))
}

/// Opens (creating, 0600) a file of the change record to read and rewrite in place.
pub fn open_update(dir: BorrowedFd<'_>, name: &OsStr) -> Result<File, Errno> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?))
}

/// Writes `bytes` at `offset` of an open file (all of them).
pub fn write_all_at(file: &File, offset: u64, bytes: &[u8]) -> Result<(), std::io::Error> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Takes an exclusive open-file-description lock on the whole file, waiting for its holder:
/// `fcntl(F_OFD_SETLKW)`, which the workers' filter allows (`flock` it does not). Released when
/// the descriptor closes, a process killed included.
pub fn lock_wait(file: &File) -> Result<(), Errno> {
    // Not `rustix::fs::fcntl_lock`: it takes a process-owned lock (`F_SETLKW`), which two
    // threads of one process both get, and which any close of the file in the process drops.
    use std::os::fd::AsRawFd;
    // The whole file (l_len 0); l_pid must be 0 for an open-file-description lock.
    let lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    loop {
        // SAFETY: `file` is an open descriptor for the call's duration and `lock` a valid,
        // fully initialized `struct flock` that F_OFD_SETLKW only reads.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &lock) };
        if rc == 0 {
            return Ok(());
        }
        let errno =
            Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        if errno != Errno::INTR {
            return Err(errno);
        }
    }
}

/// Takes an exclusive `flock` without waiting: `WOULDBLOCK` while anyone else holds one.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
}

/// Takes (or turns an exclusive lock into) a shared `flock`, waiting for an exclusive holder.
pub fn lock_shared(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::flock(fd, rustix::fs::FlockOperation::LockShared)
}

/// Makes a write past `RLIMIT_FSIZE` fail with EFBIG instead of killing the process with
/// SIGXFSZ, so the call gets an answer and the temporary file is removed.
pub fn ignore_file_size_signal() -> Result<(), Errno> {
    // SAFETY: SIG_IGN is a valid disposition for SIGXFSZ and installs no handler code; the
    // call changes only this process's signal disposition.
    let previous = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if previous == libc::SIG_ERR { Err(Errno::INVAL) } else { Ok(()) }
}

/// This process's `RLIMIT_FSIZE` soft limit in bytes (`None`: unlimited), read once: a
/// confined worker may not ask the kernel again.
pub fn file_size_limit() -> Option<u64> {
    static LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| rustix::process::getrlimit(rustix::process::Resource::Fsize).current)
}

/// The effective uid and gid of this process.
pub fn effective_ids() -> (u32, u32) {
    (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw())
}

/// A random name for a temporary file: 128 bits, so it cannot be predicted or pre-planted.
pub fn temp_name() -> Result<OsString, Errno> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| Errno::IO)?;
    let mut name = String::from(crate::op::TEMP_PREFIX);
    for b in bytes {
        name.push_str(&format!("{b:02x}"));
    }
    Ok(OsString::from(name))
}

/// Borrows any descriptor-like value.
pub fn borrow<F: AsFd>(fd: &F) -> BorrowedFd<'_> {
    fd.as_fd()
}

/// The Landlock ABI version the running kernel offers; 0 when it has none.
/// Asked once and remembered: the network process answers hello under a seccomp allowlist that
/// has no Landlock calls, so it asks before loading it (`crate::role_confinement::network`).
pub fn landlock_abi() -> u32 {
    static ABI: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ABI.get_or_init(ask_landlock_abi)
}

fn ask_landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the syscall only
    // returns the ABI number (or an error); it reads and writes no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}

/// Removes an empty directory beneath `dir` (never follows a link: `unlinkat` does not).
pub fn remove_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// Whether an open directory is the root of a mount (`STATX_ATTR_MOUNT_ROOT`); `None` when the
/// kernel does not report the attribute.
pub fn is_mount_root(fd: BorrowedFd<'_>) -> Result<Option<bool>, Errno> {
    use rustix::fs::StatxAttributes;
    let st = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        StatxFlags::empty(),
    )?;
    let known = st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    Ok(known.then(|| st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)))
}

/// A pipe (both ends close-on-exec): the read end carries an upload's bytes to a worker.
pub fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
}

/// Reads up to `len` bytes of `file` at `offset` (fewer only at its end) into a buffer that is
/// never zeroed first: the kernel writes every byte the buffer ends up holding. A streamed read
/// fills 256 KiB this way per chunk, where zeroing it first cost more than hashing it.
pub fn read_at_most(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => break,
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}
