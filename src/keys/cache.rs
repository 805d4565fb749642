//! Telemetry key authentication through a moka cache of SHA-256 hashes, with positive and
//! negative entries, and the invalidation that makes a revoke take effect on the very next
//! request on every instance.
//!
//! * Same instance: revoke bumps an epoch and drops the entry under one lock; a fill that
//!   started before the revoke sees the epoch moved and does not store what it read, so a
//!   racing fill can never resurrect a revoked key.
//! * Other instances (PostgreSQL): the revoke sends `NOTIFY streamwatch_keys, '<hash>'` in
//!   its transaction; every instance LISTENs and drops the hash. The revoking request waits
//!   until its own listener has seen the notification, which PostgreSQL delivers to every
//!   listener at the same commit. After a lost listener connection the whole cache is dropped.
//! * `lastUsedAt` is written at most once a minute per key by a background task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::{mpsc, watch};

use super::{KeyOwner, Keys};
use crate::accounts::token::sha256_hex;
use crate::db::{DbError, Engine};

pub const NOTIFY_CHANNEL: &str = "streamwatch_keys";
/// Safety net: even without notifications an entry lives at most this long.
const POSITIVE_TTL: Duration = Duration::from_secs(300);
/// Unknown keys are remembered briefly so a flood of bad keys does not reach the database.
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
const CAPACITY: u64 = 100_000;
/// `lastUsedAt` granularity per key.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// Resolves bearer keys to their owners.
#[derive(Clone)]
pub struct KeyCache {
    keys: Keys,
    positive: Cache<String, KeyOwner>,
    negative: Cache<String, ()>,
    /// Bumped by every invalidation; fills compare it under the same lock.
    epoch: Arc<Mutex<u64>>,
    touched: Cache<String, ()>,
    touch_tx: mpsc::Sender<String>,
    /// Hashes seen by this instance's NOTIFY listener (PostgreSQL only).
    seen_tx: Arc<watch::Sender<Option<String>>>,
    engine: Engine,
}

impl KeyCache {
    /// The cache and the receiving end of `lastUsedAt` updates for [`run_touch_writer`].
    pub fn new(keys: Keys, engine: Engine) -> (Self, mpsc::Receiver<String>) {
        let (touch_tx, touch_rx) = mpsc::channel(10_000);
        let (seen_tx, _) = watch::channel(None);
        let cache = Self {
            keys,
            positive: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(POSITIVE_TTL)
                .build(),
            negative: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(NEGATIVE_TTL)
                .build(),
            epoch: Arc::new(Mutex::new(0)),
            touched: Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(TOUCH_EVERY)
                .build(),
            touch_tx,
            seen_tx: Arc::new(seen_tx),
            engine,
        };
        (cache, touch_rx)
    }

    /// The owner of an active raw key, or `None`.
    pub async fn authenticate(&self, raw_key: &str) -> Result<Option<KeyOwner>, DbError> {
        let hash = sha256_hex(raw_key);
        let owner = match self.lookup(&hash) {
            Some(found) => found,
            None => self.fill(hash).await?,
        };
        if let Some(o) = &owner {
            self.note_use(&o.key_id);
        }
        Ok(owner)
    }

    fn lookup(&self, hash: &str) -> Option<Option<KeyOwner>> {
        if let Some(o) = self.positive.get(hash) {
            return Some(Some(o));
        }
        self.negative.get(hash).map(|()| None)
    }

    async fn fill(&self, hash: String) -> Result<Option<KeyOwner>, DbError> {
        let before = *self.epoch.lock().unwrap_or_else(|p| p.into_inner());
        let owner = self.keys.resolve_hash(&hash).await?;
        let epoch = self.epoch.lock().unwrap_or_else(|p| p.into_inner());
        if *epoch == before {
            match &owner {
                Some(o) => self.positive.insert(hash, o.clone()),
                None => self.negative.insert(hash, ()),
            }
        }
        Ok(owner)
    }

    /// Drops one hash (or everything) from this instance's cache.
    pub fn invalidate(&self, hash: Option<&str>) {
        let mut epoch = self.epoch.lock().unwrap_or_else(|p| p.into_inner());
        *epoch += 1;
        match hash {
            Some(h) => {
                self.positive.invalidate(h);
                self.negative.invalidate(h);
            }
            None => {
                self.positive.invalidate_all();
                self.negative.invalidate_all();
            }
        }
    }

    /// Makes a mint or revoke of `hash` visible everywhere before the caller answers.
    pub async fn publish_change(&self, hash: &str) -> Result<(), DbError> {
        self.invalidate(Some(hash));
        if self.engine != Engine::Postgres {
            return Ok(());
        }
        let mut seen = self.seen_tx.subscribe();
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(hash)
            .execute(&self.keys.db.pool)
            .await?;
        // Our own listener hears the notification at the same commit as every other instance.
        let wait = seen.wait_for(|h| h.as_deref() == Some(hash));
        if tokio::time::timeout(Duration::from_secs(2), wait)
            .await
            .is_err()
        {
            tracing::warn!("key change notification not seen within 2 s");
        }
        Ok(())
    }

    fn note_use(&self, key_id: &str) {
        if self.touched.contains_key(key_id) {
            return;
        }
        self.touched.insert(key_id.to_owned(), ());
        // A full queue only delays lastUsedAt; never block a request for it.
        let _ = self.touch_tx.try_send(key_id.to_owned());
    }

    /// Runs the PostgreSQL LISTEN loop until shutdown (no-op for SQLite).
    pub async fn run_listener(self, database_url: String, mut shutdown: watch::Receiver<bool>) {
        if self.engine != Engine::Postgres {
            return;
        }
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect(&database_url).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "key listener cannot connect; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.changed() => return,
                    }
                }
            };
            if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
                tracing::warn!(error = %e, "key listener cannot LISTEN; retrying");
                continue;
            }
            // Anything revoked while we were not listening must be forgotten.
            self.invalidate(None);
            loop {
                tokio::select! {
                    msg = listener.try_recv() => match msg {
                        Ok(Some(n)) => {
                            self.invalidate(Some(n.payload()));
                            self.seen_tx.send_replace(Some(n.payload().to_owned()));
                        }
                        // Connection lost and re-established: notifications may be missing.
                        Ok(None) => self.invalidate(None),
                        Err(e) => {
                            tracing::warn!(error = %e, "key listener failed; reconnecting");
                            break;
                        }
                    },
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

/// Writes `lastUsedAt` for keys used recently, in small batches, until the channel closes.
pub async fn run_touch_writer(keys: Keys, mut rx: mpsc::Receiver<String>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 256).await > 0 {
        if let Err(e) = keys.touch(&batch, crate::time::now_ms()).await {
            tracing::warn!(error = %e, "could not record key use");
        }
        batch.clear();
    }
}
