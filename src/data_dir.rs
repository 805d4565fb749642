//! The data dir: its lock and its permissions.
//!
//! The lock (decisions.md §15): one `streamwatch serve` per `STREAMWATCH_DATA_DIR`.
//! Two processes on one dir would run two probers and two alert senders over the same stores;
//! the second one refuses to start instead. The lock is the OS's advisory lock on
//! `<data-dir>/streamwatch.lock` (flock on Unix), released by the kernel however the holder
//! ends, a SIGKILL included, so a stale file never blocks a restart.
//!
//! The permissions (decisions.md §14): the directory is 0700 and every file the
//! service creates in it (the embedded databases with their WAL and shared-memory files, the
//! generated secret) is 0600, so another local user can read neither the sessions, the sealed
//! secrets' ciphertext nor the key that opens them.
//!
//! SQLite creates a database's `-wal` and `-shm` files with the database file's own mode, so
//! the databases are created 0600 before SQLite opens them; files left 0644 by an older
//! version are tightened at start-up.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use fs4::FileExt;

pub use self::permissions::{create, create_databases, tighten, RELATIONAL_DB, TELEMETRY_DB};

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

/// The data dir's permissions (decisions.md §14).
mod permissions {
    use std::io;
    use std::path::Path;

    /// The embedded relational database's file.
    pub const RELATIONAL_DB: &str = "streamwatch.db";
    /// The embedded telemetry database's file.
    pub const TELEMETRY_DB: &str = "telemetry.db";

    /// Files of the data dir the service owns (a name, or a database's name as prefix of its
    /// `-wal`, `-shm` and `-journal` files).
    const OWNED: [&str; 4] = [RELATIONAL_DB, TELEMETRY_DB, "secret", super::LOCK_FILE];

    /// Creates the data dir (0700) if needed, and tightens an existing one.
    pub fn create(dir: &Path) -> io::Result<()> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
        set_mode(dir, 0o700)
    }

    /// Creates the embedded database files of `databases` (0600) that do not exist yet, and
    /// tightens the service's files already there.
    pub fn create_databases(dir: &Path, databases: &[&str]) -> io::Result<()> {
        for name in databases {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            match opts.open(dir.join(name)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        tighten(dir)
    }

    /// Sets every file of the data dir the service owns to 0600 (a no-op for those already so).
    pub fn tighten(dir: &Path) -> io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.file_type()?.is_file() && OWNED.iter().any(|o| name.starts_with(o)) {
                set_mode(&entry.path(), 0o600)?;
            }
        }
        Ok(())
    }

    #[cfg(unix)]
    fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
        if current != mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }

    #[cfg(not(unix))]
    fn set_mode(_: &Path, _: u32) -> io::Result<()> {
        Ok(())
    }

    #[cfg(all(test, unix))]
    mod tests {
        use std::os::unix::fs::PermissionsExt;

        fn mode(p: &std::path::Path) -> u32 {
            std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
        }

        #[test]
        fn creates_private_files_and_tightens_old_ones() {
            let root = tempfile::tempdir().expect("dir");
            let dir = root.path().join("data");
            std::fs::create_dir(&dir).expect("mkdir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let old_wal = dir.join("streamwatch.db-wal");
            std::fs::write(&old_wal, b"").expect("write");
            std::fs::set_permissions(&old_wal, std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
            let other = dir.join("notes.txt");
            std::fs::write(&other, b"").expect("write");
            std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
            super::create(&dir).expect("create");
            super::create_databases(&dir, &[super::RELATIONAL_DB]).expect("databases");
            assert_eq!(mode(&dir), 0o700);
            assert_eq!(mode(&dir.join("streamwatch.db")), 0o600);
            assert_eq!(mode(&old_wal), 0o600);
            assert_eq!(mode(&other), 0o644, "not the service's file");
            assert!(
                !dir.join("telemetry.db").exists(),
                "only the databases asked for"
            );
        }
    }
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
