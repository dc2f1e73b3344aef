//! Version tokens: opaque, derived from metadata taken on an open handle. Device, inode, inode
//! generation, birth time, size and nanosecond mtime and ctime: a replace makes a new inode and a
//! rename changes ctime, so two successive writes never share a version, and `touch -d` (which
//! cannot set ctime) cannot forge one.

use std::fs::File;

use crate::sys::{self, Meta};

/// The version of an open regular file.
pub fn of_file(file: &File, meta: &Meta) -> String {
    token(meta, sys::generation(file))
}

/// The version of an object that is not opened for I/O (directories, special files).
pub fn of_meta(meta: &Meta) -> String {
    token(meta, 0)
}

fn token(m: &Meta, generation: u64) -> String {
    format!(
        "v1.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}.{:x}",
        m.dev, m.ino, generation, m.btime.0, m.btime.1, m.size, m.mtime.0, m.mtime.1, m.ctime.0, m.ctime.1
    )
}
