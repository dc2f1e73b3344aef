//! The I/O floor: each file operation the tools do, done directly in this process with std, on
//! the same filesystem, without RPC, confinement or resolution.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::Res;
use crate::stats::Samples;

/// A directory of files for the local operations.
#[derive(Debug)]
pub struct Local {
    dir: PathBuf,
    file: PathBuf,
    counter: u64,
}

impl Local {
    /// `dir` must exist; the file `local-4k.txt` in it is (re)created with `content`.
    pub fn new(dir: &Path, content: &str) -> Res<Local> {
        let file = dir.join("local-4k.txt");
        std::fs::write(&file, content)?;
        Ok(Local { dir: dir.to_owned(), file, counter: 0 })
    }

    /// statx of the file (std's metadata).
    pub fn stat(&self) -> Res<()> {
        std::fs::metadata(&self.file)?;
        Ok(())
    }

    /// open, fstat, read to the end, close.
    pub fn read(&self) -> Res<String> {
        let mut file = File::open(&self.file)?;
        let size = file.metadata()?.len();
        let mut text = String::with_capacity(size as usize);
        file.read_to_string(&mut text)?;
        Ok(text)
    }

    /// Atomic replace, durable: a temporary file beside the target, written and fsynced,
    /// renamed over the target, then the directory fsynced. What fsd's writeText does on disk.
    pub fn replace(&mut self, content: &[u8]) -> Res<()> {
        self.counter += 1;
        let tmp = self.dir.join(format!(".local-tmp-{}", self.counter));
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &self.file)?;
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// What edit does on disk: read, replace the text, durable atomic replace.
    pub fn edit(&mut self, from: &str, to: &str) -> Res<()> {
        let text = self.read()?;
        let new = text.replacen(from, to, 1);
        self.replace(new.as_bytes())
    }

    /// What apply_patch does on disk for one file: stat, read, durable atomic replace.
    pub fn patch(&mut self, from: &str, to: &str) -> Res<()> {
        self.stat()?;
        self.edit(from, to)
    }

    /// Times `n` calls of `op` (after `n / 10` unmeasured ones).
    pub fn time(&mut self, n: usize, mut op: impl FnMut(&mut Local, usize) -> Res<()>) -> Res<Samples> {
        for i in 0..n / 10 {
            op(self, i)?;
        }
        let mut samples = Samples::with_capacity(n);
        for i in 0..n {
            let started = Instant::now();
            op(self, i)?;
            samples.push(started.elapsed());
        }
        Ok(samples)
    }
}
