//! The `dims` the SQLite sink stores with each batch record: the record's own dimensions,
//! or `""` where an earlier stored record of the same view already says the same. (The
//! ClickHouse sink stores every record's own: `sink::clickhouse` says why.)
//!
//! Why: realistic SDK batches hold one or two events, so a fleet writes nearly as many
//! records as events, and a session's records nearly always repeat one context and one
//! `User-Agent`. Their `dims` text (~150 bytes) is most of what a record costs to insert,
//! merge and read back (on ClickHouse the records table cost as much merge time as the
//! events table, docs/benchmarks.md).
//!
//! Why `""` changes no view: a view's dimensions are resolved over its records ordered by
//! `(first_ts, seq)` (analytics.md §2, `analytics::dims`): each context field and tag from
//! the first record with a non-empty value, the user-agent triple from the first record.
//! A record R gets `""` only when this process already stored a record A of the same
//! session with byte-identical `dims`, `A.first_ts ≤ R.first_ts`, and A's write returned
//! before R's started (so A's write sequence is the smaller). A then precedes R in that
//! order and holds every value R holds, so R can never be the first to give a value, and
//! R is never the first record. The cache only remembers records whose write succeeded;
//! a restart, an eviction or another instance only means a record carries its `dims` again.

use std::sync::{Arc, Mutex};

use crate::generations::Generations;
use crate::row::BatchRecord;
use crate::ua::UaClass;
use crate::wire::Context;

/// Sessions remembered per sink, per generation (two are kept): a fleet's active sessions
/// at once, roughly. An entry holds its record's context and two shared keys: a few tens
/// of MiB at most.
const SESSIONS: usize = 100_000;

type Key = (Arc<str>, Arc<str>);

/// A stored record this process wrote: its earliest event `ts` and what its `dims` text
/// was made of. Equal parts give equal text ([`BatchRecord::dims_json`] is a function of
/// them, and tells an absent field from an empty one), so a repeat is known without
/// building its text.
struct Stored {
    first_ts_ms: i64,
    context: Arc<Context>,
    user_agent: UaClass,
}

impl Stored {
    fn says_the_same_as(&self, b: &BatchRecord) -> bool {
        self.context == b.context && self.user_agent == b.user_agent
    }
}

/// One record's `dims`, as computed for a write.
#[derive(Debug)]
pub struct RecordDims {
    /// The record's own `dims` JSON ([`BatchRecord::dims_json`]); empty when elided.
    json: String,
    /// Whether the stored text is `""` (an earlier stored record says the same).
    pub elided: bool,
}

impl RecordDims {
    /// The text to store in the `dims` column.
    pub fn stored(&self) -> &str {
        &self.json
    }
}

/// Per-sink memory of the records it stored (see the module documentation), bounded by
/// [`Generations`]: a session active within the last generation is remembered, for one
/// lock and one or two hash lookups per record.
pub struct DimsMemory {
    generations: Mutex<Generations<Key, Stored>>,
}

impl std::fmt::Debug for DimsMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DimsMemory").finish_non_exhaustive()
    }
}

impl Default for DimsMemory {
    fn default() -> Self {
        Self::new(SESSIONS)
    }
}

impl DimsMemory {
    /// Up to `sessions` sessions per generation (two generations are kept).
    pub fn new(sessions: usize) -> Self {
        DimsMemory {
            generations: Mutex::new(Generations::new(sessions)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations<Key, Stored>> {
        // The maps are consistent after any panic (no multi-step update): keep using them.
        self.generations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The `dims` of each record of a write about to start. The text of a record that is
    /// elided is never built.
    pub fn for_write(&self, batches: &[BatchRecord]) -> Vec<RecordDims> {
        let elided: Vec<bool> = {
            let mut g = self.lock();
            batches
                .iter()
                .map(|b| {
                    g.get(&(b.owner.clone(), b.session_id.clone()))
                        .is_some_and(|s| s.first_ts_ms <= b.first_ts_ms && s.says_the_same_as(b))
                })
                .collect()
        };
        batches
            .iter()
            .zip(elided)
            .map(|(b, elided)| RecordDims {
                json: if elided { String::new() } else { b.dims_json() },
                elided,
            })
            .collect()
    }

    /// Remembers the records of a write that returned `Ok` (durable). A session keeps
    /// the record with the earliest `first_ts` among those with the same `dims`; a record
    /// with other `dims` (a context change) replaces it only when it is earlier.
    pub fn stored(&self, batches: &[BatchRecord], dims: &[RecordDims]) {
        let mut g = self.lock();
        for (b, d) in batches.iter().zip(dims) {
            if d.elided {
                continue;
            }
            let key = (b.owner.clone(), b.session_id.clone());
            if g.get(&key).is_some_and(|s| s.first_ts_ms <= b.first_ts_ms) {
                continue;
            }
            g.insert(
                key,
                Stored {
                    first_ts_ms: b.first_ts_ms,
                    context: b.context.clone(),
                    user_agent: b.user_agent.clone(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(session: &str, first_ts_ms: i64, player: Option<&str>) -> BatchRecord {
        let mut r = BatchRecord::bare("owner".into(), session.into(), first_ts_ms);
        r.context = Arc::new(Context {
            player: player.map(str::to_owned),
            ..Context::default()
        });
        r
    }

    fn stored_texts(memory: &DimsMemory, batches: &[BatchRecord]) -> Vec<String> {
        let dims = memory.for_write(batches);
        memory.stored(batches, &dims);
        dims.iter().map(|d| d.stored().to_owned()).collect()
    }

    #[test]
    fn a_repeat_of_a_stored_record_is_elided() {
        let m = DimsMemory::default();
        let first = [record("s", 100, Some("p"))];
        assert_eq!(stored_texts(&m, &first), vec![first[0].dims_json()]);
        // Same dims, later first_ts: elided; the same at an equal first_ts (written later).
        assert_eq!(stored_texts(&m, &[record("s", 200, Some("p"))]), vec![""]);
        assert_eq!(stored_texts(&m, &[record("s", 100, Some("p"))]), vec![""]);
    }

    #[test]
    fn an_earlier_other_or_unseen_record_keeps_its_dims() {
        let m = DimsMemory::default();
        stored_texts(&m, &[record("s", 100, Some("p"))]);
        // Earlier than the stored record: it may come first in the view's order.
        let early = record("s", 50, Some("p"));
        assert_eq!(
            stored_texts(&m, std::slice::from_ref(&early)),
            vec![early.dims_json()]
        );
        // A context change, another session, another owner: their own dims.
        let changed = record("s", 300, Some("q"));
        assert_eq!(
            stored_texts(&m, std::slice::from_ref(&changed)),
            vec![changed.dims_json()]
        );
        let other = record("t", 300, Some("p"));
        assert_eq!(
            stored_texts(&m, std::slice::from_ref(&other)),
            vec![other.dims_json()]
        );
        let mut owner = record("s", 300, Some("p"));
        owner.owner = "other-owner".into();
        assert_eq!(
            stored_texts(&m, std::slice::from_ref(&owner)),
            vec![owner.dims_json()]
        );
        // The session now remembers its earliest record (ts 50): ts 60 with those dims is elided.
        assert_eq!(stored_texts(&m, &[record("s", 60, Some("p"))]), vec![""]);
    }

    #[test]
    fn sessions_of_the_last_two_generations_are_remembered() {
        let m = DimsMemory::new(2);
        for s in ["a", "b", "c"] {
            stored_texts(&m, &[record(s, 1, None)]);
        }
        // "c" started a generation: "a" and "b" are in the previous one, still known.
        assert_eq!(stored_texts(&m, &[record("a", 2, None)]), vec![""]);
        // "a" moved back into the current generation; two more sessions push "b" out.
        for s in ["d", "e"] {
            stored_texts(&m, &[record(s, 1, None)]);
        }
        let b = record("b", 2, None);
        assert_eq!(
            stored_texts(&m, std::slice::from_ref(&b)),
            vec![b.dims_json()]
        );
    }

    #[test]
    fn only_records_of_a_successful_write_are_remembered() {
        let m = DimsMemory::default();
        let a = [record("s", 100, Some("p"))];
        // The write failed: `stored` is never called, so a retry carries its dims again.
        let dims = m.for_write(&a);
        assert!(!dims[0].elided);
        assert!(!m.for_write(&a)[0].elided);
        // Two records of one session in one write are both stored with their dims.
        let both = [record("s", 100, Some("p")), record("s", 200, Some("p"))];
        assert!(m.for_write(&both).iter().all(|d| !d.elided));
    }
}
