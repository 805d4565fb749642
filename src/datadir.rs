//! The data dir's permissions (decisions.md §14): the directory is 0700 and every file the
//! service creates in it (the embedded databases with their WAL and shared-memory files, the
//! generated secret) is 0600, so another local user can read neither the sessions, the sealed
//! secrets' ciphertext nor the key that opens them.
//!
//! SQLite creates a database's `-wal` and `-shm` files with the database file's own mode, so
//! the databases are created 0600 before SQLite opens them; files left 0644 by an older
//! version are tightened at start-up.

use std::io;
use std::path::Path;

/// Files of the data dir the service owns (a name, or a database's name as prefix of its
/// `-wal`, `-shm` and `-journal` files).
const OWNED: [&str; 3] = ["streamwatch.db", "telemetry.db", "secret"];

/// Creates the data dir (0700) if needed, tightens an existing one, and creates the embedded
/// database files of `databases` (0600) that do not exist yet.
pub fn prepare(dir: &Path, databases: &[&str]) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    set_mode(dir, 0o700)?;
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
        std::fs::set_permissions(&old_wal, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let other = dir.join("notes.txt");
        std::fs::write(&other, b"").expect("write");
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        super::prepare(&dir, &["streamwatch.db"]).expect("prepare");
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
