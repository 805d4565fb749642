//! The spool's thread: owns the SQLite connection and turns the queue of requests
//! into group commits. Every append and removal that arrived while the previous
//! commit's fsync ran goes into the next transaction, and each is answered once
//! that transaction is durable.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crc::Digest;
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::lock::DirLock;
use super::recovery;
use super::store::{is_damage, record_cost, unix_ms, Store, Totals, CRC32C};
use super::tail::Tail;
use super::{RecordId, Removed, SpoolError, SpoolStats, SpooledRecord};

/// Appends and removals taken into one transaction at most (the memory budget
/// bounds its bytes; this bounds the time one commit keeps the next waiting).
pub(super) const MAX_GROUP: usize = 4096;

/// A request to the spool's thread.
pub(super) enum Job {
    Append(AppendJob),
    Remove {
        through: RecordId,
        reply: oneshot::Sender<Result<Removed, SpoolError>>,
    },
    Peek {
        after: i64,
        max_records: usize,
        max_bytes: usize,
        reply: oneshot::Sender<Result<Vec<SpooledRecord>, SpoolError>>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
    /// Tests: holds the thread until the sender is used or dropped, so that the
    /// requests sent meanwhile are all queued when it goes on.
    #[cfg(test)]
    Gate(std::sync::mpsc::Receiver<()>),
}

pub(super) struct AppendJob {
    pub events: u32,
    pub payload: Vec<u8>,
    /// CRC-32C of the payload, computed by the appending task (off this thread).
    pub digest: Option<Digest<'static, u32>>,
    pub cost: u64,
    /// Its share of the memory budget, given back when the job is done.
    pub _permit: OwnedSemaphorePermit,
    pub reply: oneshot::Sender<Result<RecordId, SpoolError>>,
}

/// State shared by the handles and the thread.
#[derive(Debug)]
pub(super) struct Shared {
    pub max_bytes: u64,
    space: Mutex<Space>,
    counters: Mutex<Counters>,
    /// The records committed last, for a drainer that keeps up.
    tail: Mutex<Tail>,
    /// Woken after each commit that added records (the drainer waits on it).
    pub appended: tokio::sync::Notify,
}

/// Bytes against `max_bytes`: held on disk, and queued for a commit. One lock, so
/// that concurrent appends cannot together pass the limit.
#[derive(Debug, Default)]
struct Space {
    held: u64,
    queued: u64,
    queued_records: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    records: u64,
    oldest_ms: Option<i64>,
    appended: u64,
    commits: u64,
    drained_records: u64,
    drained_events: u64,
    quarantined: u64,
    rebuilds: u64,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is plain counters: a panic elsewhere leaves them usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// `tail_bytes`: most payload bytes the tail keeps in memory.
    pub(super) fn new(max_bytes: u64, tail_bytes: usize) -> Self {
        Self {
            max_bytes,
            space: Mutex::default(),
            counters: Mutex::default(),
            tail: Mutex::new(Tail::new(i64::MAX, tail_bytes)),
            appended: tokio::sync::Notify::new(),
        }
    }

    /// Sets the counters from what the database holds (at open, after a rebuild).
    pub(super) fn load(&self, totals: &Totals) {
        locked(&self.space).held = totals.bytes;
        // What the database holds is read from it; the tail takes what comes next.
        locked(&self.tail).reset(totals.highest_id);
        let mut c = locked(&self.counters);
        c.records = totals.records;
        c.oldest_ms = totals.oldest_ms;
        c.quarantined = totals.quarantined;
    }

    /// Counts `cost` bytes as queued, or [`SpoolError::Full`] if that would pass
    /// `max_bytes`.
    pub(super) fn reserve(&self, cost: u64) -> Result<(), SpoolError> {
        let mut space = locked(&self.space);
        if space.held + space.queued + cost > self.max_bytes {
            return Err(SpoolError::Full {
                held: space.held + space.queued,
                max: self.max_bytes,
            });
        }
        space.queued += cost;
        Ok(())
    }

    /// Gives back a reservation whose record was never queued.
    pub(super) fn unreserve(&self, cost: u64) {
        let mut space = locked(&self.space);
        space.queued = space.queued.saturating_sub(cost);
    }

    /// Counts a record handed to the thread (just before it is sent, so that the
    /// thread never takes one off the count before it is on it).
    pub(super) fn enqueued(&self) {
        locked(&self.space).queued_records += 1;
    }

    /// Takes back [`Shared::enqueued`] when the send failed.
    pub(super) fn not_enqueued(&self) {
        let mut space = locked(&self.space);
        space.queued_records = space.queued_records.saturating_sub(1);
    }

    /// The thread stops: peeks go to it no more (and fail as closed).
    fn closing(&self) {
        locked(&self.tail).reset(i64::MAX);
    }

    /// [`Tail::take_after`]: the next records from memory, when the tail has them all.
    pub(super) fn take_tail(
        &self,
        after: i64,
        max_records: usize,
        max_bytes: usize,
    ) -> Option<Vec<SpooledRecord>> {
        locked(&self.tail).take_after(after, max_records, max_bytes)
    }

    pub(super) fn stats(&self) -> SpoolStats {
        let (held, queued, queued_records) = {
            let s = locked(&self.space);
            (s.held, s.queued, s.queued_records)
        };
        let c = *locked(&self.counters);
        SpoolStats {
            bytes: held,
            records: c.records,
            oldest_spooled_at_ms: c.oldest_ms,
            queued_bytes: queued,
            queued_records,
            max_bytes: self.max_bytes,
            appended: c.appended,
            commits: c.commits,
            drained_records: c.drained_records,
            drained_events: c.drained_events,
            quarantined: c.quarantined,
            rebuilds: c.rebuilds,
        }
    }
}

/// The thread's loop; returns when the spool is closed or every handle dropped.
pub(super) fn run(
    mut store: Store,
    dir: PathBuf,
    rx: Receiver<Job>,
    shared: Arc<Shared>,
    lock: DirLock,
) {
    // A request that ended the previous group (a peek, a close) waits here.
    let mut carry: Option<Job> = None;
    let mut vacuum = Vacuum::default();
    loop {
        let job = match carry.take() {
            Some(job) => Some(job),
            // While free pages are being handed back, an idle moment is a step's turn.
            None if vacuum.running => match rx.try_recv() {
                Ok(job) => Some(job),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            },
        };
        let damage = match job {
            None => vacuum.step(&mut store),
            Some(Job::Peek {
                after,
                max_records,
                max_bytes,
                reply,
            }) => peek(&mut store, &shared, after, max_records, max_bytes, reply),
            Some(Job::Close { reply }) => {
                shared.closing();
                close(store);
                drop(lock);
                let _ = reply.send(());
                return;
            }
            #[cfg(test)]
            Some(Job::Gate(gate)) => {
                let _ = gate.recv();
                None
            }
            Some(write @ (Job::Append(_) | Job::Remove { .. })) => {
                let mut group = vec![write];
                while group.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(job @ (Job::Append(_) | Job::Remove { .. })) => group.push(job),
                        Ok(other) => {
                            carry = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                // Under a steady load the thread is seldom idle: a step after each group
                // too, so that the file shrinks while ingest goes on (each step is small).
                match commit_group(&mut store, &shared, &mut vacuum, group) {
                    None if vacuum.running => vacuum.step(&mut store),
                    damage => damage,
                }
            }
        };
        if let Some(cause) = damage {
            // The connection goes first: the rebuild moves its files aside.
            drop(store);
            match recovery::rebuild(&dir, cause).and_then(|(s, _)| {
                let totals = s.totals()?;
                Ok((s, totals))
            }) {
                Ok((rebuilt, totals)) => {
                    store = rebuilt;
                    vacuum = Vacuum::default();
                    shared.load(&totals);
                    locked(&shared.counters).rebuilds += 1;
                }
                Err(e) => {
                    tracing::error!(error = %e, "spool: cannot rebuild the damaged database; the spool is closed");
                    shared.closing();
                    return;
                }
            }
        }
    }
    shared.closing();
    close(store);
    drop(lock);
}

/// What one job of a group did, to be answered once the group is committed.
enum Done {
    Appended(RecordId),
    Removed(Removed),
}

/// Writes a group in one transaction and answers each job. Returns the cause
/// when the database turned out damaged.
fn commit_group(
    store: &mut Store,
    shared: &Shared,
    vacuum: &mut Vacuum,
    mut group: Vec<Job>,
) -> Option<String> {
    let now = unix_ms();
    let result = store.write_group(|g| {
        let mut done = Vec::with_capacity(group.len());
        for job in &mut group {
            done.push(match job {
                Job::Append(a) => {
                    let digest = a.digest.take().unwrap_or_else(|| {
                        let mut d = CRC32C.digest();
                        d.update(&a.payload);
                        d
                    });
                    Done::Appended(g.append(now, a.events, digest, &a.payload)?)
                }
                Job::Remove { through, .. } => Done::Removed(g.remove_through(*through)?),
                _ => continue,
            });
        }
        Ok(done)
    });
    let (appended_bytes, appended) = group.iter().fold((0, 0), |(b, n), job| match job {
        Job::Append(a) => (b + a.cost, n + 1),
        _ => (b, n),
    });
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            {
                let mut space = locked(&shared.space);
                space.queued = space.queued.saturating_sub(appended_bytes);
                space.queued_records = space.queued_records.saturating_sub(appended);
            }
            let damage = is_damage(&e).then(|| e.to_string());
            let err = SpoolError::from(e);
            tracing::warn!(error = %err, jobs = group.len(), "spool: group commit failed");
            for job in group {
                match job {
                    Job::Append(a) => drop(a.reply.send(Err(err.clone()))),
                    Job::Remove { reply, .. } => drop(reply.send(Err(err.clone()))),
                    _ => {}
                }
            }
            return damage;
        }
    };
    let removed = done.iter().fold(Removed::default(), |acc, d| match d {
        Done::Removed(r) => Removed {
            records: acc.records + r.records,
            events: acc.events + r.events,
            bytes: acc.bytes + r.bytes,
        },
        Done::Appended(_) => acc,
    });
    let had_removals = group.iter().any(|j| matches!(j, Job::Remove { .. }));
    let held = {
        let mut space = locked(&shared.space);
        space.held = (space.held + appended_bytes).saturating_sub(removed.bytes);
        space.queued = space.queued.saturating_sub(appended_bytes);
        space.queued_records = space.queued_records.saturating_sub(appended);
        space.held
    };
    let oldest_known = locked(&shared.counters).oldest_ms.is_some();
    // After removals the oldest record is a new one; an empty spool's first record
    // is the group's.
    let oldest = if had_removals || !oldest_known {
        store.oldest().ok().flatten()
    } else {
        None
    };
    {
        let mut c = locked(&shared.counters);
        c.commits += 1;
        c.appended += appended;
        c.records = (c.records + appended).saturating_sub(removed.records);
        c.drained_records += removed.records;
        c.drained_events += removed.events;
        if had_removals || !oldest_known {
            c.oldest_ms = oldest;
        }
    }
    for (job, done) in group.into_iter().zip(done) {
        match (job, done) {
            (Job::Append(a), Done::Appended(id)) => {
                // Durable now: into the tail before anyone hears of it (an acknowledged
                // record is in the tail or below its floor, never neither).
                locked(&shared.tail).push(SpooledRecord {
                    id,
                    spooled_at_ms: now,
                    events: a.events,
                    payload: a.payload,
                });
                drop(a.reply.send(Ok(id)));
            }
            (Job::Remove { through, reply }, Done::Removed(r)) => {
                locked(&shared.tail).removed_through(through.0);
                drop(reply.send(Ok(r)));
            }
            _ => {}
        }
    }
    if appended > 0 {
        shared.appended.notify_waiters();
    }
    if had_removals && !vacuum.running {
        match store.vacuum_due(held) {
            Ok(due) => vacuum.running = due,
            Err(e) if is_damage(&e) => return Some(e.to_string()),
            Err(e) => tracing::warn!(error = %e, "spool: could not count free pages"),
        }
    }
    None
}

/// Handing an outage's free pages back, in steps between the requests.
#[derive(Default)]
struct Vacuum {
    running: bool,
    released: u64,
}

impl Vacuum {
    /// One step; the cause when the database turned out damaged.
    fn step(&mut self, store: &mut Store) -> Option<String> {
        match store.vacuum_step() {
            Ok((bytes, more)) => {
                self.released += bytes;
                if !more {
                    tracing::info!(
                        bytes = self.released,
                        "spool: free pages handed back to the filesystem"
                    );
                    *self = Vacuum::default();
                }
                None
            }
            Err(e) => {
                *self = Vacuum::default();
                if is_damage(&e) {
                    return Some(e.to_string());
                }
                tracing::warn!(error = %e, "spool: could not hand free pages back");
                None
            }
        }
    }
}

fn peek(
    store: &mut Store,
    shared: &Shared,
    after: i64,
    max_records: usize,
    max_bytes: usize,
    reply: oneshot::Sender<Result<Vec<SpooledRecord>, SpoolError>>,
) -> Option<String> {
    match store.peek(after, max_records, max_bytes) {
        Ok(peeked) => {
            if !peeked.quarantined.is_empty() {
                let bytes: u64 = peeked.quarantined.iter().map(|&(_, cost)| cost).sum();
                let n = peeked.quarantined.len() as u64;
                {
                    let mut space = locked(&shared.space);
                    space.held = space.held.saturating_sub(bytes);
                }
                let oldest = store.oldest().ok().flatten();
                let mut c = locked(&shared.counters);
                c.quarantined += n;
                c.records = c.records.saturating_sub(n);
                c.oldest_ms = oldest;
            }
            let _ = reply.send(Ok(peeked.records));
            None
        }
        Err(e) => {
            let damage = is_damage(&e).then(|| e.to_string());
            let _ = reply.send(Err(e.into()));
            damage
        }
    }
}

/// A clean shutdown leaves the whole spool in `spool.db`, the WAL truncated.
fn close(store: Store) {
    if let Err(e) = store.checkpoint() {
        tracing::warn!(error = %e, "spool: checkpoint at close failed (the WAL is replayed at the next open)");
    }
}

/// The cost of an append, as [`Shared::reserve`] counts it.
pub(super) fn append_cost(payload: &[u8]) -> u64 {
    record_cost(payload.len())
}
