//! One process per spool directory: the OS's advisory lock (`flock` on Unix) on
//! `spool.lock`, held for as long as the spool's thread runs (taken as the
//! server's data-dir lock is).
//!
//! `flock` belongs to the open file description, so a second open in the same
//! process is refused as well, and the kernel releases it when the process dies
//! (SIGKILL included): a stale lock file never blocks a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use fs4::FileExt;

use super::SpoolError;

/// File name of the lock inside the spool directory.
pub const LOCK_FILE: &str = "spool.lock";

/// The held lock; dropping it (closing the file) releases it.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir` without waiting. [`SpoolError::Locked`] when another
    /// open spool (in this process or another) holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<Self, SpoolError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| SpoolError::io(&path, source);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match FileExt::try_lock(&file) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                // The holder wrote its pid: worth naming in the one line an operator reads.
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(SpoolError::Locked {
                    dir: dir.to_owned(),
                    holder: pid.trim().parse().ok(),
                });
            }
            Err(fs4::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Informational only: the lock is the flock, not this content.
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}
