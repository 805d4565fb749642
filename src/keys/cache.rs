//! Telemetry key authentication through a moka cache of SHA-256 hashes, with positive and
//! negative entries, and the invalidation that makes a revoke take effect on the very next
//! request on every instance.
//!
//! * Same instance: revoke bumps an epoch and drops the entry under one lock; a fill that
//!   started before the revoke sees the epoch moved and does not store what it read, so a
//!   racing fill can never resurrect a revoked key.
//! * Other instances (PostgreSQL): every instance LISTENs on `streamwatch_keys` with a
//!   connection named `streamwatch-keys-<instance id>`. A mint or revoke counts those live
//!   listeners in `pg_stat_activity`, sends `NOTIFY streamwatch_keys '<change id>:<hash>'`, and
//!   waits until each listener has dropped the hash and answered on `streamwatch_keys_ack`
//!   (bounded by [`ACK_TIMEOUT`], so a wedged instance cannot block revokes forever). Only then
//!   does the revoking request answer, so the next request to any instance sees the revoke.
//!   After a lost listener connection that instance drops its whole cache.
//! * `lastUsedAt` is written at most once a minute per key by a background task.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::{mpsc, watch, Notify};

use super::{KeyOwner, Keys};
use crate::accounts::token::sha256_hex;
use crate::db::{DbError, Engine};

pub const NOTIFY_CHANNEL: &str = "streamwatch_keys";
pub const ACK_CHANNEL: &str = "streamwatch_keys_ack";
/// `application_name` prefix of the listener connections, counted to know who must ack.
const LISTENER_APP: &str = "streamwatch-keys-";
/// Longest a mint or revoke waits for every instance to drop the key.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Safety net: even without notifications an entry lives at most this long.
const POSITIVE_TTL: Duration = Duration::from_secs(300);
/// Unknown keys are remembered briefly so a flood of bad keys does not reach the database.
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
const CAPACITY: u64 = 100_000;
/// `lastUsedAt` granularity per key.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// `streamwatch_keycache_lookups_total` of hits and of misses, made once (a lookup is one
/// per ingest request; see `telemetry::count`).
static LOOKUPS: LazyLock<(metrics::Counter, metrics::Counter)> = LazyLock::new(|| {
    (
        metrics::counter!("streamwatch_keycache_lookups_total", "result" => "hit"),
        metrics::counter!("streamwatch_keycache_lookups_total", "result" => "miss"),
    )
});

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
    /// Names this instance's listener connection.
    instance_id: Arc<str>,
    /// Acknowledging instances per pending change id (PostgreSQL only).
    acks: Arc<Mutex<HashMap<String, HashSet<String>>>>,
    ack_arrived: Arc<Notify>,
    engine: Engine,
}

impl KeyCache {
    /// The cache and the receiving end of `lastUsedAt` updates for [`run_touch_writer`].
    pub fn new(keys: Keys, engine: Engine) -> (Self, mpsc::Receiver<String>) {
        let (touch_tx, touch_rx) = mpsc::channel(10_000);
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
            instance_id: crate::time::new_id().into(),
            acks: Arc::default(),
            ack_arrived: Arc::default(),
            engine,
        };
        (cache, touch_rx)
    }

    /// The owner of an active raw key, or `None`.
    pub async fn authenticate(&self, raw_key: &str) -> Result<Option<KeyOwner>, DbError> {
        let hash = sha256_hex(raw_key);
        let owner = match self.lookup(&hash) {
            Some(found) => {
                LOOKUPS.0.increment(1);
                found
            }
            None => {
                LOOKUPS.1.increment(1);
                self.fill(hash).await?
            }
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
        metrics::counter!("streamwatch_keycache_invalidations_total").increment(1);
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
        let pool = &self.keys.db.pool;
        let listeners = self.live_listeners().await?;
        let change = crate::time::new_id();
        self.acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(change.clone(), HashSet::new());
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(format!("{change}:{hash}"))
            .execute(pool)
            .await;
        let waited = async {
            loop {
                let arrived = self.ack_arrived.notified();
                let acked = self
                    .acks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&change)
                    .map_or(0, HashSet::len);
                if acked as i64 >= listeners {
                    return;
                }
                arrived.await;
            }
        };
        let on_time = sent.is_ok() && tokio::time::timeout(ACK_TIMEOUT, waited).await.is_ok();
        self.acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&change);
        sent?;
        if !on_time {
            tracing::warn!(
                listeners,
                "not every instance acknowledged a key change in time"
            );
        }
        Ok(())
    }

    /// Live key-cache listeners of this deployment: the instances that must acknowledge a
    /// change. Only this database's: NOTIFY does not cross databases, so another deployment on
    /// the same PostgreSQL cluster would never answer (and made every change wait
    /// [`ACK_TIMEOUT`]).
    pub async fn live_listeners(&self) -> Result<i64, DbError> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity \
             WHERE application_name LIKE $1 AND datname = current_database()",
        )
        .bind(format!("{LISTENER_APP}%"))
        .fetch_one(&self.keys.db.pool)
        .await?;
        Ok(n)
    }

    /// Handles one notification on either channel.
    async fn on_notification(
        &self,
        listener: &mut sqlx::postgres::PgListener,
        n: &sqlx::postgres::PgNotification,
    ) {
        let Some((id, rest)) = n.payload().split_once(':') else {
            return;
        };
        if n.channel() == NOTIFY_CHANNEL {
            self.invalidate(Some(rest));
            let ack = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(ACK_CHANNEL)
                .bind(format!("{id}:{}", self.instance_id))
                .execute(&mut *listener)
                .await;
            if let Err(e) = ack {
                tracing::warn!(error = %e, "could not acknowledge a key change");
            }
        } else if let Some(set) = self
            .acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(id)
        {
            set.insert(rest.to_owned());
            self.ack_arrived.notify_waiters();
        }
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
        let url = listener_url(&database_url, &self.instance_id);
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect(&url).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "key listener cannot connect; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.changed() => return,
                    }
                }
            };
            if let Err(e) = listener.listen_all([NOTIFY_CHANNEL, ACK_CHANNEL]).await {
                tracing::warn!(error = %e, "key listener cannot LISTEN; retrying");
                continue;
            }
            // Anything revoked while we were not listening must be forgotten.
            self.invalidate(None);
            loop {
                tokio::select! {
                    msg = listener.try_recv() => match msg {
                        Ok(Some(n)) => self.on_notification(&mut listener, &n).await,
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

/// The database URL with this instance's listener `application_name`.
fn listener_url(database_url: &str, instance_id: &str) -> String {
    match url::Url::parse(database_url) {
        Ok(mut u) => {
            let kept: Vec<(String, String)> = u
                .query_pairs()
                .filter(|(k, _)| k != "application_name")
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            u.query_pairs_mut()
                .clear()
                .extend_pairs(kept)
                .append_pair("application_name", &format!("{LISTENER_APP}{instance_id}"));
            u.to_string()
        }
        Err(_) => database_url.to_owned(),
    }
}

/// Writes `lastUsedAt` for keys used recently, in small batches, until shutdown; what is
/// queued at shutdown is still written.
pub async fn run_touch_writer(
    keys: Keys,
    mut rx: mpsc::Receiver<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut batch = Vec::new();
    loop {
        let open = tokio::select! {
            n = rx.recv_many(&mut batch, 256) => n > 0,
            _ = shutdown.changed() => {
                while let Ok(id) = rx.try_recv() {
                    batch.push(id);
                }
                false
            }
        };
        if !batch.is_empty() {
            if let Err(e) = keys.touch(&batch, crate::time::now_ms()).await {
                tracing::warn!(error = %e, "could not record key use");
            }
            batch.clear();
        }
        if !open {
            return;
        }
    }
}
