//! The spool's tail: the records committed last, kept in memory (bounded) so that a
//! drainer that keeps up takes them from here. Such a peek costs no SQLite read, no
//! checksum pass and no turn on the spool's thread, which stays free for the group
//! commits the acknowledgements wait on. A drainer that fell behind (an outage, a
//! restart, a failed insert it sends again) reads the older records from the database,
//! as before; both ways return the same records in the same order.
//!
//! The tail is a cache of what is durable, never a substitute: a record enters it only
//! after its commit was fsync'd, and a peek served from it leaves the record in the
//! database until [`super::Spool::remove_through`].

use std::collections::VecDeque;

use super::SpooledRecord;

/// Committed records newer than `floor`, in id order.
#[derive(Debug)]
pub(super) struct Tail {
    /// Every record the spool holds with an id above `floor` is in `records`; those at or
    /// below it are only in the database.
    floor: i64,
    records: VecDeque<SpooledRecord>,
    bytes: usize,
    /// Most payload bytes kept; the oldest records leave the tail past it.
    cap: usize,
}

impl Tail {
    /// An empty tail over a database whose highest id is `floor`.
    pub(super) fn new(floor: i64, cap: usize) -> Self {
        Self {
            floor,
            records: VecDeque::new(),
            bytes: 0,
            cap,
        }
    }

    /// Forgets every record: the database (highest id `floor`) is the only copy again,
    /// e.g. after it was rebuilt.
    pub(super) fn reset(&mut self, floor: i64) {
        self.records.clear();
        self.bytes = 0;
        self.floor = floor;
    }

    /// A record just committed (ids ascending across calls). The oldest records leave
    /// the tail while it holds more than its cap.
    pub(super) fn push(&mut self, record: SpooledRecord) {
        self.bytes += record.payload.len();
        self.records.push_back(record);
        while self.bytes > self.cap {
            let Some(old) = self.records.pop_front() else {
                break;
            };
            self.bytes -= old.payload.len();
            self.floor = old.id.0;
        }
    }

    /// Records through `id` were removed from the spool.
    pub(super) fn removed_through(&mut self, id: i64) {
        self.drop_through(id);
        self.floor = self.floor.max(id);
    }

    /// The peek of [`super::Spool::peek_after`] (same limits), when the tail holds every
    /// record after `after`; `None` when some are only in the database. The records
    /// returned leave the tail (a drainer reads each once; should it need them again,
    /// it peeks from an older id and the database answers).
    pub(super) fn take_after(
        &mut self,
        after: i64,
        max_records: usize,
        max_bytes: usize,
    ) -> Option<Vec<SpooledRecord>> {
        if after < self.floor {
            return None;
        }
        self.drop_through(after);
        let mut taken = Vec::new();
        let mut bytes = 0usize;
        while taken.len() < max_records.max(1) {
            let Some(next) = self.records.front() else {
                break;
            };
            if !taken.is_empty() && bytes + next.payload.len() > max_bytes {
                break;
            }
            bytes += next.payload.len();
            let record = self.records.pop_front().expect("front exists");
            self.bytes -= record.payload.len();
            taken.push(record);
        }
        self.floor = taken.last().map_or(after, |r| r.id.0);
        Some(taken)
    }

    fn drop_through(&mut self, id: i64) {
        while self.records.front().is_some_and(|r| r.id.0 <= id) {
            let old = self.records.pop_front().expect("front exists");
            self.bytes -= old.payload.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::RecordId;

    fn rec(id: i64, len: usize) -> SpooledRecord {
        SpooledRecord {
            id: RecordId(id),
            spooled_at_ms: 0,
            events: 1,
            payload: vec![b'x'; len],
        }
    }

    fn ids(records: &[SpooledRecord]) -> Vec<i64> {
        records.iter().map(|r| r.id.0).collect()
    }

    #[test]
    fn answers_only_for_records_it_holds_all_of() {
        // Records 1..=3 were there at open: only the database has them.
        let mut tail = Tail::new(3, 1000);
        for id in 4..=6 {
            tail.push(rec(id, 10));
        }
        assert_eq!(tail.take_after(0, 100, 1000), None);
        assert_eq!(tail.take_after(2, 100, 1000), None);
        assert_eq!(ids(&tail.take_after(3, 2, 1000).unwrap()), [4, 5]);
        // Taken records are gone from the tail: an older peek goes to the database.
        assert_eq!(tail.take_after(3, 100, 1000), None);
        assert_eq!(ids(&tail.take_after(5, 100, 1000).unwrap()), [6]);
        assert_eq!(ids(&tail.take_after(6, 100, 1000).unwrap()), [] as [i64; 0]);
    }

    #[test]
    fn the_oldest_records_leave_past_the_cap() {
        let mut tail = Tail::new(0, 25);
        for id in 1..=4 {
            tail.push(rec(id, 10));
        }
        // 40 bytes pushed, 25 kept: records 1 and 2 are only in the database now.
        assert_eq!(tail.take_after(1, 100, 1000), None);
        assert_eq!(ids(&tail.take_after(2, 100, 1000).unwrap()), [3, 4]);
    }

    #[test]
    fn a_peek_from_the_database_then_goes_on_from_the_tail() {
        let mut tail = Tail::new(0, 1000);
        for id in 1..=5 {
            tail.push(rec(id, 10));
        }
        // The drainer read 1..=3 from the database (after a failed insert, say): the
        // tail gives what follows, never those again.
        assert_eq!(ids(&tail.take_after(3, 100, 1000).unwrap()), [4, 5]);
    }

    #[test]
    fn limits_as_the_database_peek_and_removals() {
        let mut tail = Tail::new(0, 1000);
        for id in 1..=5 {
            tail.push(rec(id, 10));
        }
        // The first record always, then within max_bytes.
        assert_eq!(ids(&tail.take_after(0, 100, 5).unwrap()), [1]);
        assert_eq!(ids(&tail.take_after(1, 100, 25).unwrap()), [2, 3]);
        tail.removed_through(4);
        assert_eq!(tail.take_after(3, 100, 1000), None);
        assert_eq!(ids(&tail.take_after(4, 100, 1000).unwrap()), [5]);
        tail.reset(9);
        assert_eq!(tail.take_after(5, 100, 1000), None);
        tail.push(rec(10, 10));
        assert_eq!(ids(&tail.take_after(9, 100, 1000).unwrap()), [10]);
    }
}
