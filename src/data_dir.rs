//! The data dir's lock (decisions.md §15): one `streamwatch serve` per `STREAMWATCH_DATA_DIR`.
//! Two processes on one dir would run two probers and two alert senders over the same stores;
//! the second one refuses to start instead. The lock is the OS's advisory lock on
//! `<data-dir>/streamwatch.lock` (flock on Unix), released by the kernel however the holder
//! ends, a SIGKILL included, so a stale file never blocks a restart.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use fs4::FileExt;

/// The lock file's name inside the data dir.
pub const LOCK_FILE: &str = "streamwatch.lock";

/// Held for the life of the server; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another streamwatch process is using STREAMWATCH_DATA_DIR {dir} ({file} is locked{pid}): \
         stop it first, or give this one its own STREAMWATCH_DATA_DIR"
    )]
    Held {
        dir: String,
        file: String,
        /// ", by pid N" when the holder wrote its pid.
        pid: String,
    },
    #[error("cannot lock STREAMWATCH_DATA_DIR {dir}: {source}")]
    Io {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

impl DataDirLock {
    /// Takes the lock of `dir` (which must exist) without waiting, and writes this process's
    /// pid into the file for whoever finds it held.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            dir: dir.display().to_string(),
            source,
        };
        let mut opts = std::fs::OpenOptions::new();
        // Not truncated before the lock is ours: the holder's pid stays readable.
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts.open(&path).map_err(io)?;
        match FileExt::try_lock(&file) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                return Err(LockError::Held {
                    dir: dir.display().to_string(),
                    file: path.display().to_string(),
                    pid: holder_pid(&path)
                        .map(|p| format!(", by pid {p}"))
                        .unwrap_or_default(),
                })
            }
            Err(fs4::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}

fn holder_pid(path: &PathBuf) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("dir");
        let first = DataDirLock::acquire(dir.path()).expect("first");
        let err = DataDirLock::acquire(dir.path()).expect_err("held");
        let line = err.to_string();
        assert!(
            line.starts_with("another streamwatch process is using STREAMWATCH_DATA_DIR ")
                && line.contains(&format!(", by pid {}", std::process::id())),
            "{line}"
        );
        drop(first);
        DataDirLock::acquire(dir.path()).expect("free again");
    }
}
