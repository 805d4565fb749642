//! The spool's errors. Each kind a caller must act on differently is its own
//! variant; errors are `Clone` because one failed group commit answers every
//! append that was in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What can go wrong with a [`Spool`](super::Spool) operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpoolError {
    /// Another open spool (another process, or this one) holds the directory's
    /// lock. The server turns this into one start-up line naming
    /// `STREAMWATCH_SPOOL_DIR`.
    #[error("spool directory {} is in use by another process{}", dir.display(), holder.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked {
        /// The spool directory.
        dir: PathBuf,
        /// The pid the holder wrote into the lock file, when readable.
        holder: Option<u32>,
    },
    /// Accepting the record would take the spool past its `max_bytes`: refused at
    /// once, nothing written. Room comes back as records are removed.
    #[error("spool is full ({held} of {max} bytes held or queued)")]
    Full {
        /// Bytes held on disk plus bytes queued for the next commit.
        held: u64,
        /// The spool's `max_bytes`.
        max: u64,
    },
    /// The record alone is larger than the spool's in-memory budget
    /// ([`SpoolOptions::memory_bytes`](super::SpoolOptions::memory_bytes)); it could
    /// never be queued.
    #[error("record of {bytes} bytes is larger than the spool's memory budget of {max} bytes")]
    TooLarge {
        /// The record's size as the spool counts it.
        bytes: u64,
        /// The memory budget.
        max: u64,
    },
    /// A file of the spool directory could not be created, read or written.
    #[error("spool file {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// SQLite refused the operation (disk full, I/O error, ...). The operation had
    /// no effect: an append that fails this way was not acknowledged.
    #[error("spool store: {0}")]
    Store(#[source] Arc<rusqlite::Error>),
    /// The spool was closed, or its thread stopped after an error it could not
    /// recover from (logged).
    #[error("spool is closed")]
    Closed,
}

impl SpoolError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source: Arc::new(source),
        }
    }
}

impl From<rusqlite::Error> for SpoolError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Store(Arc::new(e))
    }
}
