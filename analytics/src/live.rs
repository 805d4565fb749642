//! Live views: the derivation ([`Fold`], [`DimsFold`]) of every view this server process
//! is ingesting, advanced by each batch as its write is acknowledged, so the refresher (on
//! either engine) writes a playing view from memory instead of reading all of its events
//! and records back at every step. (With players sending a batch every 10 s or so for
//! minutes, that read covered nearly every playing view's whole history every step:
//! docs/benchmarks.md, "sessions in real time".)
//!
//! Memory is used for a view only while it provably holds the whole view; otherwise the
//! refresher reads the view back from the store, as it does for every view it has no
//! memory of:
//! - a view's batches must come in order: every event of a batch after the last event
//!   taken, and its earliest event after the previous batch's. An out-of-order,
//!   overlapping or retried batch, and a batch whose write failed or timed out (its rows
//!   may be stored all the same), make the view *broken* for as long as it is remembered;
//! - no other writer stored a record of the view, and none is older than memory's first
//!   batch: on ClickHouse the refresher checks the writer of the records of its window
//!   (`view_batches.writer`, [`LiveViews::writer`]) and, the first time it writes a view
//!   from memory, that the view had no record by anyone else, nor one of this process's
//!   from before memory took its first batch; on SQLite (one writer, this process) that
//!   first time, that the store holds exactly as many records of the view as memory took;
//! - a view is forgotten after [`IDLE`] without a batch, longer than the refresher's
//!   window, so a view that comes back later is checked as a new one;
//! - memory holds at most [`MAX_VIEWS`] views whole (the cap): a view new to memory while
//!   it holds that many is remembered as broken from its first batch, and read back. A
//!   broken view keeps no fold, only its key and bookkeeping (about 100 bytes), so the
//!   refresher still finds it: its records are left out of the window's reads
//!   (`refresh/clickhouse`), and the snapshot's read-back list is what brings it back.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::dims::{DimsFold, DimsOf};
use crate::event::Event;
use crate::view::{Fold, View};

/// How long a view is remembered without a batch. Longer than the refresher's window
/// (its margin of 60 s plus a step or two), so the records of a forgotten view are older
/// than any window that could see it come back: its new-view check finds them.
pub const IDLE: Duration = Duration::from_secs(180);

/// Shards of the map: batches of different views rarely wait for each other's lock.
const SHARDS: usize = 64;

/// Views memory holds whole at most (the cap); past it a new view is read back
/// (`streamwatch_qoe_live_views_over_cap_total`). A view held costs about 0.5–1 KiB (its
/// fold, dimensions, key and map slot; docs/benchmarks.md), so the cap bounds the live
/// state to 32–64 MiB: what a 160 MiB process leaves once the rest of it (about 95 MiB at
/// full ingest on ClickHouse before the live views) is counted.
pub const MAX_VIEWS: usize = 65_536;

/// A view: its owner and session id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Owner (user id of the API key).
    pub owner: Arc<str>,
    /// `sessionId`.
    pub session: Arc<str>,
}

impl From<&ingest::BatchRecord> for Key {
    /// The view a stored batch belongs to (its parts shared, not copied).
    fn from(record: &ingest::BatchRecord) -> Self {
        Key {
            owner: record.owner.clone(),
            session: record.session_id.clone(),
        }
    }
}

/// What memory holds of a view it holds whole.
#[derive(Debug, Default)]
struct Whole {
    fold: Fold,
    dims: DimsFold,
    /// Batches taken.
    records: u64,
    /// Earliest event of the last batch taken.
    last_first_ts: Option<i64>,
}

/// What memory remembers of one view.
#[derive(Debug)]
struct Entry {
    /// `None`: memory is not the whole view (broken, or past the cap): read it back. Boxed,
    /// so a broken view costs only the rest of the entry.
    whole: Option<Box<Whole>>,
    /// The refresher found no record of it before memory's first.
    checked: bool,
    /// Changes (batches taken, a break) since the entry was made, and how many of them a
    /// completed refresher step wrote.
    changes: u64,
    written: u64,
    touched: Instant,
    /// When memory took the view's first batch.
    created: Instant,
}

impl Entry {
    fn new(now: Instant, whole: bool) -> Self {
        Entry {
            whole: whole.then(Box::default),
            checked: false,
            changes: 0,
            written: 0,
            touched: now,
            created: now,
        }
    }
}

/// A view that changed since the last completed refresher step, as of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    /// Which view.
    pub key: Key,
    /// The refresher already found no record of it before memory's first.
    pub checked: bool,
    /// How long before the snapshot memory took the view's first batch.
    pub age: Duration,
}

/// A view as memory holds it now.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveView {
    /// Derived from every batch taken.
    pub view: View,
    /// Batches taken (the view's record count, when memory is the whole view).
    pub records: u64,
    /// Distinct events taken.
    pub events: u64,
}

/// The views that changed since the last completed refresher step: cheap to take (no view
/// is derived here; [`LiveViews::view`] derives each as it is written).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Views memory holds whole (as far as memory knows).
    pub views: Vec<Changed>,
    /// Views memory knows to be incomplete, which changed: to read back.
    pub broken: Vec<Key>,
    /// Each view's change count at the snapshot, for [`LiveViews::commit`].
    changes: Vec<(Key, u64)>,
}

/// A batch whose write has not answered yet ([`LiveViews::pending`]).
pub struct Pending<'a> {
    live: &'a LiveViews,
    key: Option<Key>,
}

impl Pending<'_> {
    /// The write was acknowledged: memory takes the batch ([`LiveViews::take`]).
    pub fn stored<'d>(mut self, events: Vec<Event>, dims: impl Into<DimsOf<'d>>) {
        if let Some(key) = self.key.take() {
            self.live.take(key, events, dims);
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.live.taint(key);
        }
    }
}

/// One shard of the map. An entry is small (its fold is boxed): the table moves little
/// when it rehashes (views come and go all the time).
type Shard = Mutex<HashMap<Key, Entry, Hasher>>;

/// The map's hasher: seeded per process, and a fraction of SipHash's cost on the two short
/// ids of a key (it runs twice per batch, for the shard and in it).
type Hasher = foldhash::fast::RandomState;

/// The live views of one server process (see the module doc). Shared by the ingest route,
/// which feeds it, and the refresher, which reads it.
pub struct LiveViews {
    writer: u64,
    hasher: Hasher,
    shards: Box<[Shard]>,
    /// Views held whole at most, and held whole now (entries with a fold).
    cap: usize,
    held: AtomicUsize,
    /// Views new to memory that found it full, since the process started.
    over_cap: AtomicU64,
}

impl std::fmt::Debug for LiveViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveViews")
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

impl LiveViews {
    /// Live views of the process that stores its batch records as `writer`
    /// (`ingest::ClickHouseConfig::writer`; on SQLite, whose one writer is the process,
    /// any value: the refresher does not read it).
    pub fn new(writer: u64) -> Self {
        LiveViews::with_cap(writer, MAX_VIEWS)
    }

    /// Live views that hold at most `cap` views whole (tests; the server uses
    /// [`MAX_VIEWS`]).
    pub fn with_cap(writer: u64, cap: usize) -> Self {
        LiveViews {
            writer,
            hasher: Hasher::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            cap,
            held: AtomicUsize::new(0),
            over_cap: AtomicU64::new(0),
        }
    }

    /// A new entry, whole if the cap leaves room for it (`whole` false: known broken).
    fn new_entry(&self, now: Instant, whole: bool) -> Entry {
        let room = whole
            && self
                .held
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < self.cap).then_some(n + 1)
                })
                .is_ok();
        if whole && !room {
            self.over_cap.fetch_add(1, Ordering::Relaxed);
        }
        Entry::new(now, room)
    }

    /// Memory stops holding `entry` whole: its fold is dropped, its place under the cap
    /// freed.
    fn break_entry(&self, entry: &mut Entry) {
        if entry.whole.take().is_some() {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The writer id of this process's batch records.
    pub fn writer(&self) -> u64 {
        self.writer
    }

    fn shard(&self, key: &Key) -> std::sync::MutexGuard<'_, HashMap<Key, Entry, Hasher>> {
        let i = self.hasher.hash_one(key) as usize % self.shards.len();
        // A panic while holding a shard leaves a map of whole entries: go on with it.
        self.shards[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a batch whose write was acknowledged: its events (any order; the first of
    /// each `(ts, type)` kept) and its record's dimensions.
    pub fn take<'d>(&self, key: Key, mut events: Vec<Event>, dims: impl Into<DimsOf<'d>>) {
        let dims = dims.into();
        // Stable: among equal keys the first written stays first, and is the one kept.
        events.sort_by_key(Event::order_key);
        events.dedup_by_key(|e| e.order_key());
        let now = Instant::now();
        let mut shard = self.shard(&key);
        let entry = shard
            .entry(key)
            .or_insert_with(|| self.new_entry(now, true));
        entry.touched = now;
        entry.changes += 1;
        let Some(whole) = entry.whole.as_mut() else {
            return;
        };
        let in_order = whole.last_first_ts.is_none_or(|t| dims.first_ts_ms > t)
            && events.first().is_some_and(|first| whole.fold.push(first));
        if !in_order {
            self.break_entry(entry);
            return;
        }
        for e in &events[1..] {
            whole.fold.push(e);
        }
        whole.dims.push(dims);
        whole.records += 1;
        whole.last_first_ts = Some(dims.first_ts_ms);
    }

    /// A batch of `key` whose write failed or timed out: some of it may be stored, so
    /// memory may not be the whole view any more.
    pub fn taint(&self, key: Key) {
        let now = Instant::now();
        let mut shard = self.shard(&key);
        let entry = shard
            .entry(key)
            .or_insert_with(|| self.new_entry(now, false));
        entry.touched = now;
        entry.changes += 1;
        self.break_entry(entry);
    }

    /// A batch of `key` on its way to the store: [`Pending::stored`] gives it to memory
    /// once its write is acknowledged; dropped otherwise (the write failed or timed out, or
    /// the request was cancelled while the write was in flight), it breaks the view, since
    /// any of its rows may be stored all the same.
    pub fn pending(&self, key: Key) -> Pending<'_> {
        Pending {
            live: self,
            key: Some(key),
        }
    }

    /// Marks views broken (the refresher found records memory does not hold).
    pub fn break_views<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) {
        for key in keys {
            if let Some(entry) = self.shard(key).get_mut(key) {
                self.break_entry(entry);
            }
        }
    }

    /// Marks views checked (the refresher found no record of them before memory's first).
    pub fn check_views<'a>(&self, keys: impl IntoIterator<Item = &'a Key>) {
        for key in keys {
            if let Some(entry) = self.shard(key).get_mut(key) {
                entry.checked = true;
            }
        }
    }

    /// Whether memory holds `key` and does not know it to be incomplete (a change the
    /// next snapshot may carry).
    pub fn holds(&self, key: &Key) -> bool {
        self.shard(key).get(key).is_some_and(|e| e.whole.is_some())
    }

    /// The views changed since the last [`LiveViews::commit`]ted snapshot, and forgets
    /// those idle for longer than `idle`. Nothing is marked written: a failed step leaves
    /// them for the next snapshot.
    pub fn snapshot(&self, idle: Duration) -> Snapshot {
        let now = Instant::now();
        let mut out = Snapshot::default();
        for shard in self.shards.iter() {
            let mut shard = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            shard.retain(|_, e| {
                let keep = now.duration_since(e.touched) <= idle;
                if !keep {
                    self.break_entry(e);
                }
                keep
            });
            for (key, e) in shard.iter().filter(|(_, e)| e.changes > e.written) {
                out.changes.push((key.clone(), e.changes));
                if e.whole.is_none() {
                    out.broken.push(key.clone());
                } else {
                    out.views.push(Changed {
                        key: key.clone(),
                        checked: e.checked,
                        age: now.duration_since(e.created),
                    });
                }
            }
        }
        out
    }

    /// The view of `key` as memory holds it now (batches taken since the snapshot
    /// included: a later state of the same view, which the next step writes again);
    /// `None` when memory no longer holds it whole, or has forgotten it.
    pub fn view(&self, key: &Key) -> Option<LiveView> {
        let shard = self.shard(key);
        let e = shard.get(key)?.whole.as_deref()?;
        let dims = e.dims.dims(e.fold.playback_content_id());
        Some(LiveView {
            view: e.fold.view(&key.session, dims)?,
            records: e.records,
            events: e.fold.events(),
        })
    }

    /// The refresher wrote `snapshot`: its views need no writing until they change again.
    pub fn commit(&self, snapshot: &Snapshot) {
        for (key, change) in &snapshot.changes {
            if let Some(entry) = self.shard(key).get_mut(key) {
                entry.written = entry.written.max(*change);
            }
        }
    }

    /// Views remembered.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }

    /// Views held whole (at most the cap; `streamwatch_qoe_live_views`).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Views new to memory that found it holding the cap, and were read back instead,
    /// since the process started (`streamwatch_qoe_live_views_over_cap_total`).
    pub fn over_cap(&self) -> u64 {
        self.over_cap.load(Ordering::Relaxed)
    }

    /// True when no view is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BatchDims;
    use ingest::{EndReason, EventType};

    fn key(session: &str) -> Key {
        Key {
            owner: "o".into(),
            session: session.into(),
        }
    }

    fn dims(first_ts_ms: i64) -> BatchDims {
        BatchDims {
            first_ts_ms,
            sdk: Some("sdk".into()),
            ..BatchDims::default()
        }
    }

    fn batch(evs: &[Event]) -> (Vec<Event>, BatchDims) {
        let first = evs.iter().map(|e| e.ts_ms).min().unwrap_or(0);
        (evs.to_vec(), dims(first))
    }

    const LONG: Duration = Duration::from_secs(3_600);

    #[test]
    fn batches_in_order_give_the_view_derived_from_all_their_events() {
        let live = LiveViews::new(7);
        let b1 = [
            Event::playback_start(1_000, Some(400.0)),
            Event::quality_change(1_000, 2e6, true),
        ];
        // Unsorted within a batch, with a duplicate: the first of each (ts, type) is kept.
        let b2 = [
            Event::new(5_000, EventType::RebufferEnd),
            Event::new(3_000, EventType::RebufferStart),
            Event::new(3_000, EventType::RebufferStart),
        ];
        let b3 = [Event::session_end(9_000, EndReason::Ended)];
        for b in [&b1[..], &b2, &b3] {
            let (evs, d) = batch(b);
            live.take(key("s"), evs, &d);
        }
        let snap = live.snapshot(LONG);
        assert!(snap.broken.is_empty());
        assert_eq!(snap.views.len(), 1);
        assert!(!snap.views[0].checked);
        let all: Vec<Event> = [&b1[..], &b2, &b3].concat();
        let ds = [dims(1_000), dims(3_000), dims(9_000)];
        let expected = View::derive("s", &all, &ds).expect("view");
        let v = live.view(&key("s")).expect("held");
        assert_eq!(v.view, expected);
        assert_eq!((v.records, v.events), (3, 5));
        assert_eq!(v.view.rebuffer_count, 1);
        assert_eq!(v.view.dims.sdk.as_deref(), Some("sdk"));
    }

    #[test]
    fn an_out_of_order_overlapping_or_retried_batch_breaks_the_view() {
        let live = LiveViews::new(7);
        let first = [Event::playback_start(1_000, None)];
        let second = [Event::new(2_000, EventType::PlaybackPause)];
        for (name, late) in [
            (
                "earlier events",
                vec![Event::new(500, EventType::RebufferStart)],
            ),
            ("the same batch again", second.to_vec()),
            (
                "overlapping",
                vec![
                    Event::new(2_000, EventType::PlaybackPause),
                    Event::new(3_000, EventType::PlaybackResume),
                ],
            ),
        ] {
            let k = key(name);
            for b in [&first[..], &second] {
                let (evs, d) = batch(b);
                live.take(k.clone(), evs, &d);
            }
            assert!(live.holds(&k), "{name}");
            let (evs, d) = batch(&late);
            live.take(k.clone(), evs, &d);
            assert!(!live.holds(&k), "{name}");
        }
        let snap = live.snapshot(LONG);
        assert!(snap.views.is_empty());
        assert_eq!(snap.broken.len(), 3);
        // Broken stays broken, even for a batch in order.
        let k = key("earlier events");
        let (evs, d) = batch(&[Event::new(60_000, EventType::PlaybackResume)]);
        live.take(k.clone(), evs, &d);
        assert!(!live.holds(&k));
    }

    #[test]
    fn a_batch_starting_where_the_last_one_started_breaks_the_view() {
        // Its events may all come after the last one taken and still tie on the earliest
        // ts with the previous batch, whose order the store breaks by write sequence.
        let live = LiveViews::new(7);
        let k = key("s");
        live.take(
            k.clone(),
            vec![Event::playback_start(1_000, None)],
            &dims(1_000),
        );
        live.take(
            k.clone(),
            vec![Event::new(1_000, EventType::PlaybackPause)],
            &dims(1_000),
        );
        assert!(!live.holds(&k));
    }

    #[test]
    fn a_failed_write_breaks_the_view_even_one_memory_never_saw() {
        let live = LiveViews::new(7);
        live.take(key("a"), vec![Event::playback_start(1, None)], &dims(1));
        live.taint(key("a"));
        live.taint(key("b"));
        assert!(!live.holds(&key("a")));
        assert!(!live.holds(&key("b")));
        assert_eq!(live.view(&key("a")), None);
        let mut broken = live.snapshot(LONG).broken;
        broken.sort();
        assert_eq!(broken, vec![key("a"), key("b")]);
    }

    #[test]
    fn a_committed_snapshot_leaves_only_what_changed_since() {
        let live = LiveViews::new(7);
        live.take(key("a"), vec![Event::playback_start(1, None)], &dims(1));
        live.take(key("b"), vec![Event::playback_start(1, None)], &dims(1));
        let first = live.snapshot(LONG);
        assert_eq!(first.views.len(), 2);
        // A batch after the snapshot was taken: still to write after the commit.
        live.take(
            key("a"),
            vec![Event::new(5, EventType::PlaybackPause)],
            &dims(5),
        );
        live.commit(&first);
        let second = live.snapshot(LONG);
        assert_eq!(second.views.len(), 1);
        assert_eq!(second.views[0].key, key("a"));
        assert_eq!(live.view(&key("a")).expect("held").records, 2);
        // A snapshot not committed (a failed step) is taken again.
        let third = live.snapshot(LONG);
        let keys = |s: &Snapshot| -> Vec<Key> { s.views.iter().map(|v| v.key.clone()).collect() };
        assert_eq!(keys(&third), keys(&second));
        live.commit(&third);
        assert!(live.snapshot(LONG).views.is_empty());
    }

    #[test]
    fn a_pending_batch_not_stored_breaks_the_view() {
        let live = LiveViews::new(7);
        live.take(key("a"), vec![Event::playback_start(1, None)], &dims(1));
        live.take(key("b"), vec![Event::playback_start(1, None)], &dims(1));
        // Acknowledged: taken.
        live.pending(key("a"))
            .stored(vec![Event::new(5, EventType::PlaybackPause)], &dims(5));
        assert_eq!(live.view(&key("a")).expect("held").records, 2);
        // Dropped before its write answered (failed, timed out or cancelled): broken.
        drop(live.pending(key("b")));
        assert!(!live.holds(&key("b")));
        assert_eq!(live.snapshot(LONG).broken, vec![key("b")]);
    }

    #[test]
    fn checks_and_breaks_from_the_refresher_stick() {
        let live = LiveViews::new(7);
        live.take(key("a"), vec![Event::playback_start(1, None)], &dims(1));
        live.take(key("b"), vec![Event::playback_start(1, None)], &dims(1));
        live.check_views([&key("a")]);
        live.break_views([&key("b")]);
        let snap = live.snapshot(LONG);
        assert_eq!(snap.views.len(), 1);
        assert!(snap.views[0].checked);
        assert_eq!(snap.broken, vec![key("b")]);
    }

    #[test]
    fn views_past_the_cap_are_remembered_broken_and_a_freed_place_is_taken_again() {
        let live = LiveViews::with_cap(7, 2);
        for s in ["a", "b", "c", "d"] {
            live.take(key(s), vec![Event::playback_start(1, None)], &dims(1));
        }
        // a and b are held; c and d came to a full memory: read back, counted.
        assert_eq!((live.held(), live.len(), live.over_cap()), (2, 4, 2));
        assert!(live.holds(&key("a")) && live.holds(&key("b")));
        assert!(!live.holds(&key("c")) && !live.holds(&key("d")));
        assert_eq!(live.view(&key("c")), None);
        let mut snap = live.snapshot(LONG);
        snap.broken.sort();
        assert_eq!(snap.broken, vec![key("c"), key("d")]);
        assert_eq!(snap.views.len(), 2);
        // A later batch of c, in order, leaves it broken: memory never saw its start.
        live.take(
            key("c"),
            vec![Event::new(5, EventType::PlaybackPause)],
            &dims(5),
        );
        assert!(!live.holds(&key("c")));
        assert_eq!(live.over_cap(), 2);
        // Breaking a held view frees its place (a failed write, the refresher's finding);
        // a taint never takes one.
        live.taint(key("a"));
        live.taint(key("e"));
        assert_eq!(live.held(), 1);
        live.take(key("f"), vec![Event::playback_start(1, None)], &dims(1));
        assert!(live.holds(&key("f")));
        assert_eq!((live.held(), live.over_cap()), (2, 2));
        // Forgetting frees places too.
        live.snapshot(Duration::ZERO);
        assert_eq!((live.held(), live.len()), (0, 0));
        live.take(key("c"), vec![Event::playback_start(1, None)], &dims(1));
        assert!(live.holds(&key("c")));
    }

    #[test]
    fn a_broken_view_costs_a_small_entry() {
        // What the cap leaves unbounded (views past it, broken views) is this much each,
        // plus its key and map slot.
        assert!(
            std::mem::size_of::<Entry>() <= 64,
            "{}",
            std::mem::size_of::<Entry>()
        );
        // What a held view costs besides (docs/benchmarks.md: 0.5–1 KiB with its heap).
        assert!(std::mem::size_of::<Whole>() >= 256);
    }

    #[test]
    fn idle_views_are_forgotten() {
        let live = LiveViews::new(7);
        live.take(key("a"), vec![Event::playback_start(1, None)], &dims(1));
        live.break_views([&key("a")]);
        assert_eq!(live.len(), 1);
        assert!(live.snapshot(Duration::ZERO).views.is_empty());
        assert!(live.is_empty());
        // Back after being forgotten: a new view, unchecked, not broken.
        live.take(
            key("a"),
            vec![Event::new(9, EventType::PlaybackPause)],
            &dims(9),
        );
        let snap = live.snapshot(LONG);
        assert_eq!(snap.views.len(), 1);
        assert!(!snap.views[0].checked);
        assert_eq!(live.view(&key("a")).expect("held").records, 1);
    }
}
