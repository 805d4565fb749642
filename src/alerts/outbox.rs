//! The delivery outbox. A transition writes its notifications here in its own transaction;
//! notifications of one channel and one event that arise within the channel's `groupWindow`
//! share one delivery (at most [`GROUP_MAX`] incidents). A worker claims due deliveries with a
//! lease (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so instances claim disjoint sets), freezes the
//! body at the first attempt and records every attempt; a crash mid-attempt leaves the lease to
//! expire and the delivery is sent again, same body, same `webhook-id`.

use std::collections::HashMap;

use sqlx::AnyConnection;

use super::model::{Delivery, Incident, DELIVERY_COLUMNS, INCIDENT_COLUMNS};
use super::{new_webhook_id, AlertError, Alerts};
use crate::db::{Db, DbError, Engine};
use crate::states::{DeliveryEvent, DeliveryStatus};
use crate::time::{new_id, now_ms};

/// Incidents listed in one delivery at most (alerts.md §3).
pub const GROUP_MAX: i64 = 1000;
/// Delays before the retries of a failed attempt (alerts.md §3); after the last, `dead`.
pub const RETRY_SCHEDULE_MS: [i64; 7] = [
    5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 86_400_000,
];

/// Creates a delivery of `event` to a channel, listing `incident_ids`, due after the group
/// window. Returns its id.
pub async fn create(
    tx: &mut AnyConnection,
    user_id: &str,
    channel_id: &str,
    event: DeliveryEvent,
    incident_ids: &[&str],
    now: i64,
    group_window_ms: i64,
) -> Result<String, DbError> {
    let id = new_id();
    let due = now + group_window_ms;
    sqlx::query(
        "INSERT INTO alert_deliveries (id, user_id, channel_id, event, webhook_id, status, attempts, \
             next_attempt_at, group_until, incident_count, created_at) \
         VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $6, $7, $8)",
    )
    .bind(&id)
    .bind(user_id)
    .bind(channel_id)
    .bind(event.as_str())
    .bind(new_webhook_id())
    .bind(due)
    .bind(incident_ids.len() as i64)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    for (i, incident) in incident_ids.iter().enumerate() {
        sqlx::query(
            "INSERT INTO alert_delivery_incidents (delivery_id, incident_id, position) VALUES ($1, $2, $3)",
        )
        .bind(&id)
        .bind(*incident)
        .bind(i as i64)
        .execute(&mut *tx)
        .await?;
    }
    Ok(id)
}

/// Notifies `event` of one incident on every enabled channel of its rule, in the caller's
/// transaction (the transition's): joins an open group of the channel when there is one.
pub async fn notify(
    tx: &mut AnyConnection,
    engine: Engine,
    rule_id: &str,
    incident_id: &str,
    event: DeliveryEvent,
    now: i64,
) -> Result<(), DbError> {
    let channels: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT c.id, c.user_id, c.group_window_ms FROM alert_rule_channels rc \
         JOIN alert_channels c ON c.id = rc.channel_id \
         WHERE rc.rule_id = $1 AND c.enabled = 1 ORDER BY c.id",
    )
    .bind(rule_id)
    .fetch_all(&mut *tx)
    .await?;
    for (channel_id, user_id, window) in channels {
        // On PostgreSQL, transitions notifying one channel take turns (a lock per channel
        // until commit, taken in channel-id order): each sees the group the previous one
        // filled, so concurrent probes fill one group instead of opening several. SQLite
        // already has one writer at a time.
        if engine == Engine::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(&channel_id)
                .execute(&mut *tx)
                .await?;
        }
        // An open group: still gathering (its window not over, body not frozen) and not full.
        // On PostgreSQL the row is locked, so the claim that freezes it waits for this append.
        let lock = if engine == Engine::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let open: Option<(String, i64)> = sqlx::query_as(&format!(
            "SELECT id, incident_count FROM alert_deliveries \
             WHERE channel_id = $1 AND event = $2 AND status = 'pending' AND body IS NULL \
               AND group_until > $3 AND incident_count < $4 \
             ORDER BY created_at LIMIT 1{lock}"
        ))
        .bind(&channel_id)
        .bind(event.as_str())
        .bind(now)
        .bind(GROUP_MAX)
        .fetch_optional(&mut *tx)
        .await?;
        match open {
            Some((delivery_id, position)) => {
                sqlx::query(
                    "INSERT INTO alert_delivery_incidents (delivery_id, incident_id, position) \
                     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                )
                .bind(&delivery_id)
                .bind(incident_id)
                .bind(position)
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE alert_deliveries SET incident_count = incident_count + 1 WHERE id = $1",
                )
                .bind(&delivery_id)
                .execute(&mut *tx)
                .await?;
            }
            None => {
                create(
                    tx,
                    &user_id,
                    &channel_id,
                    event,
                    &[incident_id],
                    now,
                    window,
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// What a delivery to a disabled channel says: it would otherwise wait forever, since only
/// enabled channels' deliveries are claimed.
pub const DISABLED_CHANNEL: &str = "channel disabled: enable it, then resend";

/// A delivery just created for a channel that is disabled is `dead` at once, saying why.
pub async fn bury_if_disabled(
    tx: &mut AnyConnection,
    delivery_id: &str,
    channel_enabled: bool,
) -> Result<(), DbError> {
    if !channel_enabled {
        sqlx::query(
            "UPDATE alert_deliveries SET status = 'dead', next_attempt_at = NULL, last_error = $1 \
             WHERE id = $2",
        )
        .bind(DISABLED_CHANNEL)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Every pending delivery of a channel becomes `dead` (channel disabled or deleted), and its
/// last error says why (not the receiver's answer to an earlier attempt).
pub async fn kill_pending(db: &Db, channel_id: &str, why: &str) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE alert_deliveries SET status = 'dead', next_attempt_at = NULL, last_error = $2 \
         WHERE channel_id = $1 AND status = 'pending'",
    )
    .bind(channel_id)
    .bind(why)
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// A delivery claimed for one attempt: what the sender needs.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Claimed {
    pub id: String,
    pub channel_id: String,
    pub webhook_id: String,
    pub attempts: i64,
    pub body: Option<String>,
}

/// How many deliveries may be in flight at once (decisions.md §14): one channel's slow or
/// silent receiver holds at most `per_channel` of them, one user at most `per_user` across
/// their channels, so it never delays another channel's deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub per_channel: usize,
    pub per_user: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            per_channel: 4,
            per_user: 16,
        }
    }
}

/// Serialises claims across instances on PostgreSQL, so the caps hold for all of them.
const CLAIM_LOCK_KEY: i64 = 0x5357_414c_4552_5453; // "SWALERTS"

/// Leases up to `free` due deliveries of enabled channels until `lease_until`, oldest due
/// first, within the [`Caps`]: deliveries in flight are the leased ones (on any instance), so
/// a channel with `per_channel` leased gets none more until one finishes. A delivery waits
/// while an older delivery to the same channel about one of its incidents is still pending,
/// so a receiver never sees an incident resolve before it fired (PagerDuty would keep the
/// incident open); unrelated incidents are not held up. The caller freezes a body that is
/// still `None` ([`freeze`]).
pub async fn claim(
    db: &Db,
    now: i64,
    lease_until: i64,
    caps: Caps,
    free: usize,
) -> Result<Vec<Claimed>, DbError> {
    if free == 0 {
        return Ok(Vec::new());
    }
    // PostgreSQL: one claim at a time across instances (the lock ends with the transaction).
    // SQLite has one writer and one process: no transaction (a read that turns into a write
    // would fail with SQLITE_BUSY when another writer went first).
    if db.engine == Engine::Postgres {
        let mut tx = db.pool.begin().await?;
        let claimed = claim_on(&mut tx, true, now, lease_until, caps, free).await?;
        tx.commit().await?;
        Ok(claimed)
    } else {
        let mut conn = db.pool.acquire().await?;
        claim_on(&mut conn, false, now, lease_until, caps, free).await
    }
}

async fn claim_on(
    conn: &mut AnyConnection,
    postgres: bool,
    now: i64,
    lease_until: i64,
    caps: Caps,
    free: usize,
) -> Result<Vec<Claimed>, DbError> {
    if postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(CLAIM_LOCK_KEY)
            .execute(&mut *conn)
            .await?;
    }
    // In flight now, per channel and per user.
    let busy: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT channel_id, user_id, CAST(COUNT(*) AS BIGINT) FROM alert_deliveries \
         WHERE status = 'pending' AND lease_until > $1 GROUP BY channel_id, user_id",
    )
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    let mut per_channel: HashMap<String, usize> = HashMap::new();
    let mut per_user: HashMap<String, usize> = HashMap::new();
    for (channel, user, n) in busy {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        *per_channel.entry(channel).or_default() += n;
        *per_user.entry(user).or_default() += n;
    }
    // The due candidates, at most `per_channel` of each channel and `per_user` of each user
    // (ranked oldest first), so one tenant's backlog cannot crowd the others out of the list.
    let per_channel_cap = i64::try_from(caps.per_channel).unwrap_or(i64::MAX);
    let per_user_cap = i64::try_from(caps.per_user).unwrap_or(i64::MAX);
    let candidates: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT id, channel_id, user_id FROM ( \
             SELECT id, channel_id, user_id, next_attempt_at, seq, ROW_NUMBER() OVER ( \
                 PARTITION BY user_id ORDER BY next_attempt_at, seq) AS nth_of_user \
             FROM ( \
                 SELECT d.id, d.channel_id, d.user_id, d.next_attempt_at, d.seq, \
                     ROW_NUMBER() OVER ( \
                         PARTITION BY d.channel_id ORDER BY d.next_attempt_at, d.seq) AS nth_of_channel \
                 FROM alert_deliveries d JOIN alert_channels c ON c.id = d.channel_id \
                 WHERE d.status = 'pending' AND d.next_attempt_at <= $1 AND d.lease_until <= $1 \
                   AND c.enabled = 1 \
                   AND NOT EXISTS ( \
                     SELECT 1 FROM alert_delivery_incidents di \
                     JOIN alert_delivery_incidents oi ON oi.incident_id = di.incident_id \
                     JOIN alert_deliveries o ON o.id = oi.delivery_id \
                     WHERE di.delivery_id = d.id AND o.channel_id = d.channel_id \
                       AND o.status = 'pending' AND o.seq < d.seq) \
             ) by_channel WHERE nth_of_channel <= $2 \
         ) by_user WHERE nth_of_user <= $3 \
         ORDER BY next_attempt_at, seq LIMIT $4",
    )
    .bind(now)
    .bind(per_channel_cap)
    .bind(per_user_cap)
    .bind(i64::try_from(free.saturating_mul(4).max(64)).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await?;
    let mut picked = Vec::new();
    for (id, channel, user) in candidates {
        if picked.len() >= free {
            break;
        }
        let c = per_channel.entry(channel).or_default();
        let u = per_user.entry(user).or_default();
        if *c >= caps.per_channel || *u >= caps.per_user {
            continue;
        }
        *c += 1;
        *u += 1;
        picked.push(id);
    }
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    // Leased only while still due and free (an instance that raced here got none of them).
    let list = (0..picked.len())
        .map(|i| format!("${}", i + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "UPDATE alert_deliveries SET lease_until = $2 \
         WHERE id IN ({list}) AND status = 'pending' AND lease_until <= $1 \
         RETURNING id, channel_id, webhook_id, attempts, body"
    );
    let mut q = sqlx::query_as::<_, Claimed>(&sql)
        .bind(now)
        .bind(lease_until);
    for id in &picked {
        q = q.bind(id);
    }
    Ok(q.fetch_all(&mut *conn).await?)
}

/// The body every attempt of a delivery sends: the stored one, or, at its first attempt,
/// `build(event, incidents)` stored now. One transaction closes the group first (its first
/// statement takes the row's lock on PostgreSQL, the write lock on SQLite), so an incident
/// that would join meanwhile waits, then finds the group closed and opens another: every
/// incident recorded in a delivery is in the body it sends.
pub async fn freeze<F>(db: &Db, delivery_id: &str, build: F) -> Result<String, DbError>
where
    F: FnOnce(DeliveryEvent, &[Incident]) -> String,
{
    let mut tx = db.pool.begin().await?;
    sqlx::query("UPDATE alert_deliveries SET group_until = 0 WHERE id = $1 AND body IS NULL")
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
    let (body, event): (Option<String>, String) =
        sqlx::query_as("SELECT body, event FROM alert_deliveries WHERE id = $1")
            .bind(delivery_id)
            .fetch_one(&mut *tx)
            .await?;
    if let Some(body) = body {
        tx.commit().await?;
        return Ok(body);
    }
    let event = DeliveryEvent::parse(&event).ok_or_else(|| {
        DbError(sqlx::Error::Decode(
            format!("unknown delivery event {event}").into(),
        ))
    })?;
    let ids = incident_ids(&mut tx, delivery_id).await?;
    let incidents = incidents_by_id(&mut tx, &ids).await?;
    let body = build(event, &incidents);
    sqlx::query("UPDATE alert_deliveries SET body = $1 WHERE id = $2")
        .bind(&body)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(body)
}

/// Incidents by id, in the order of `ids` (any owner: the sender's view of a delivery).
async fn incidents_by_id(
    conn: &mut AnyConnection,
    ids: &[String],
) -> Result<Vec<Incident>, DbError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(200) {
        let list = (1..=chunk.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("SELECT {INCIDENT_COLUMNS} FROM alert_incidents WHERE id IN ({list})");
        let mut q = sqlx::query_as::<_, Incident>(&sql);
        for id in chunk {
            q = q.bind(id);
        }
        out.extend(q.fetch_all(&mut *conn).await?);
    }
    out.sort_by_key(|i| ids.iter().position(|x| *x == i.id));
    Ok(out)
}

/// One delivery of a user, on `conn` (a transaction's, to read what it wrote).
pub async fn read(
    conn: &mut AnyConnection,
    user_id: &str,
    id: &str,
) -> Result<Delivery, AlertError> {
    let mut d: Delivery = sqlx::query_as(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE id = $1 AND user_id = $2"
    ))
    .bind(id)
    .bind(user_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(AlertError::NotFound)?;
    d.incident_ids = incident_ids(&mut *conn, &d.id).await?;
    Ok(d)
}

/// The incidents of a delivery, in the order they joined it.
pub async fn incident_ids(
    conn: &mut AnyConnection,
    delivery_id: &str,
) -> Result<Vec<String>, DbError> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT incident_id FROM alert_delivery_incidents WHERE delivery_id = $1 ORDER BY position, incident_id",
    )
    .bind(delivery_id)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The outcome of one attempt, as the sender saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// 2xx.
    Sent { status: u16 },
    /// 410: the channel is disabled.
    Gone,
    /// 429, 5xx or a network error: retried; `retry_after_ms` from the answer's header.
    Retry {
        status: Option<u16>,
        error: Option<String>,
        retry_after_ms: Option<i64>,
    },
    /// Any other 4xx, or a target the guard refuses: not retried.
    Failed { status: Option<u16>, error: String },
}

/// The delay before the retry that follows attempt number `attempts` (1-based), with ±10 %
/// jitter (`jitter` in [-1, 1]); a longer `Retry-After` replaces it, unjittered. `None` once
/// the schedule is spent.
pub fn retry_delay(attempts: i64, jitter: f64, retry_after_ms: Option<i64>) -> Option<i64> {
    let base = *RETRY_SCHEDULE_MS.get(usize::try_from(attempts - 1).ok()?)?;
    let jittered = (base as f64 * (1.0 + 0.1 * jitter.clamp(-1.0, 1.0))).round() as i64;
    Some(match retry_after_ms {
        Some(floor) if floor > jittered => floor,
        _ => jittered,
    })
}

/// Records an attempt and moves the delivery on: sent, failed, dead, or pending again with
/// its next attempt (the status it gets is returned). A 410 also disables the channel and
/// kills its pending deliveries.
pub async fn record(
    db: &Db,
    claimed: &Claimed,
    outcome: &Outcome,
    latency_ms: i64,
    now: i64,
    jitter: f64,
) -> Result<DeliveryStatus, DbError> {
    let attempt = claimed.attempts + 1;
    let (status, code, error, next): (DeliveryStatus, Option<u16>, Option<String>, Option<i64>) =
        match outcome {
            Outcome::Sent { status } => (DeliveryStatus::Sent, Some(*status), None, None),
            Outcome::Gone => (
                DeliveryStatus::Dead,
                Some(410),
                Some("receiver answered 410 Gone".into()),
                None,
            ),
            Outcome::Failed { status, error } => {
                (DeliveryStatus::Failed, *status, Some(error.clone()), None)
            }
            Outcome::Retry {
                status,
                error,
                retry_after_ms,
            } => match retry_delay(attempt, jitter, *retry_after_ms) {
                Some(delay) => (
                    DeliveryStatus::Pending,
                    *status,
                    error.clone(),
                    Some(now + delay),
                ),
                None => (DeliveryStatus::Dead, *status, error.clone(), None),
            },
        };
    let mut tx = db.pool.begin().await?;
    sqlx::query(
        "INSERT INTO alert_attempts (delivery_id, attempt, at, status_code, latency_ms, error) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&claimed.id)
    .bind(attempt)
    .bind(now)
    .bind(code.map(i64::from))
    .bind(latency_ms)
    .bind(error.as_deref())
    .execute(&mut *tx)
    .await?;
    // Only while this worker still holds the delivery as it claimed it (a channel deleted or
    // disabled meanwhile has made it dead: that stays).
    sqlx::query(
        "UPDATE alert_deliveries SET status = $1, attempts = $2, last_status_code = $3, \
             last_latency_ms = $4, last_error = $5, next_attempt_at = $6, lease_until = 0, \
             sent_at = CASE WHEN $1 = 'sent' THEN $7 ELSE sent_at END \
         WHERE id = $8 AND status = 'pending' AND attempts = $9",
    )
    .bind(status.as_str())
    .bind(attempt)
    .bind(code.map(i64::from))
    .bind(latency_ms)
    .bind(error.as_deref())
    .bind(next)
    .bind(now)
    .bind(&claimed.id)
    .bind(claimed.attempts)
    .execute(&mut *tx)
    .await?;
    if *outcome == Outcome::Gone {
        sqlx::query(
            "UPDATE alert_channels SET enabled = 0, disabled_reason = 'receiver answered 410 Gone' \
             WHERE id = $1",
        )
        .bind(&claimed.channel_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE alert_deliveries SET status = 'dead', next_attempt_at = NULL, \
                 last_error = 'channel disabled: receiver answered 410 Gone' \
             WHERE channel_id = $1 AND status = 'pending'",
        )
        .bind(&claimed.channel_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(status)
}

/// Holds a claimed delivery until `until` while its attempt goes on (a group of many
/// PagerDuty events outlasts one lease).
pub async fn renew_lease(db: &Db, claimed: &Claimed, until: i64) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE alert_deliveries SET lease_until = $1 \
         WHERE id = $2 AND status = 'pending' AND attempts = $3",
    )
    .bind(until)
    .bind(&claimed.id)
    .bind(claimed.attempts)
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// Gives a claimed delivery back without an attempt: it keeps its attempts and schedule, is
/// not claimed again before `until`, and its log shows `why`.
pub async fn postpone(db: &Db, claimed: &Claimed, until: i64, why: &str) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE alert_deliveries SET lease_until = $1, last_error = $2 \
         WHERE id = $3 AND status = 'pending' AND attempts = $4",
    )
    .bind(until)
    .bind(why)
    .bind(&claimed.id)
    .bind(claimed.attempts)
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// Test deliveries, and resends, one channel takes a minute (decisions.md §14).
pub const ON_DEMAND_PER_MINUTE: usize = 10;
const MINUTE_MS: i64 = 60_000;

/// The deliveries a user asks for (as opposed to those transitions make), each kind limited
/// per channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDemand {
    Test,
    Resend,
}

/// On PostgreSQL, on-demand sends to one channel take turns (a lock until commit), so that
/// two at once cannot both find the last slot free. SQLite has one writer at a time.
pub async fn lock_on_demand(
    tx: &mut AnyConnection,
    engine: Engine,
    channel_id: &str,
) -> Result<(), DbError> {
    if engine == Engine::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 1))")
            .bind(channel_id)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Counted in the transaction that just created one more `kind` for the channel: `None`
/// while the last minute holds at most [`ON_DEMAND_PER_MINUTE`] of them, else the seconds
/// until the oldest leaves the minute (the caller rolls back).
pub async fn over_limit(
    tx: &mut AnyConnection,
    channel_id: &str,
    kind: OnDemand,
    now: i64,
) -> Result<Option<i64>, DbError> {
    let which = match kind {
        OnDemand::Test => "event = 'test' AND resent_from IS NULL",
        OnDemand::Resend => "resent_from IS NOT NULL",
    };
    let times: Vec<(i64,)> = sqlx::query_as(&format!(
        "SELECT created_at FROM alert_deliveries \
         WHERE channel_id = $1 AND created_at > $2 AND {which} ORDER BY created_at LIMIT $3"
    ))
    .bind(channel_id)
    .bind(now - MINUTE_MS)
    .bind(ON_DEMAND_PER_MINUTE as i64 + 1)
    .fetch_all(&mut *tx)
    .await?;
    if times.len() <= ON_DEMAND_PER_MINUTE {
        return Ok(None);
    }
    // The new one fits once the oldest of the minute has left it.
    let frees_at = times[0].0 + MINUTE_MS;
    Ok(Some(((frees_at - now + 999) / 1000).max(1)))
}

/// Deliveries (with their attempts and incident lists) older than this are deleted.
pub const RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

/// Deletes deliveries created before `now - RETENTION_MS`, their attempts and incident lists
/// with them, a few hundred per transaction (the outbox's writers are never held long).
/// Returns how many deliveries went.
pub async fn purge(db: &Db, now: i64) -> Result<u64, DbError> {
    const CHUNK: i64 = 500;
    let mut total = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM alert_deliveries WHERE id IN ( \
                 SELECT id FROM alert_deliveries WHERE created_at < $1 LIMIT $2)",
        )
        .bind(now - RETENTION_MS)
        .bind(CHUNK)
        .execute(&db.pool)
        .await?;
        total += done.rows_affected();
        if done.rows_affected() < CHUNK as u64 {
            return Ok(total);
        }
    }
}

/// A filter of the delivery log.
#[derive(Clone, Debug, Default)]
pub struct DeliveryFilter {
    pub channel_id: Option<String>,
    pub status: Option<DeliveryStatus>,
    pub before: Option<i64>,
    pub limit: i64,
}

/// One attempt of a delivery, for the log.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Attempt {
    pub attempt: i64,
    pub at: i64,
    pub status_code: Option<i64>,
    pub latency_ms: i64,
    pub error: Option<String>,
}

impl Alerts {
    /// The caller's deliveries, newest first.
    pub async fn deliveries(
        &self,
        user_id: &str,
        f: &DeliveryFilter,
    ) -> Result<Vec<Delivery>, AlertError> {
        let mut rows: Vec<Delivery> = sqlx::query_as(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE user_id = $1 \
               AND ($2 IS NULL OR channel_id = $2) AND ($3 IS NULL OR status = $3) \
               AND ($4 IS NULL OR created_at < $4) \
             ORDER BY created_at DESC, seq DESC LIMIT $5"
        ))
        .bind(user_id)
        .bind(f.channel_id.as_deref())
        .bind(f.status.map(|s| s.as_str()))
        .bind(f.before)
        .bind(f.limit)
        .fetch_all(&self.db.pool)
        .await?;
        let mut conn = self.db.pool.acquire().await?;
        for d in &mut rows {
            d.incident_ids = incident_ids(&mut conn, &d.id).await?;
        }
        Ok(rows)
    }

    /// One of the caller's deliveries.
    pub async fn delivery(&self, user_id: &str, id: &str) -> Result<Delivery, AlertError> {
        read(&mut *self.db.pool.acquire().await?, user_id, id).await
    }

    /// A delivery's attempts, oldest first.
    pub async fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, AlertError> {
        Ok(sqlx::query_as(
            "SELECT attempt, at, status_code, latency_ms, error FROM alert_attempts \
             WHERE delivery_id = $1 ORDER BY attempt",
        )
        .bind(delivery_id)
        .fetch_all(&self.db.pool)
        .await?)
    }

    /// Sends a delivery again: a new delivery with the same body (frozen now if the original
    /// never got one) and a new `webhook-id`, due at once; at most [`ON_DEMAND_PER_MINUTE`]
    /// resends to one channel a minute.
    pub async fn resend(&self, user_id: &str, id: &str) -> Result<Delivery, AlertError> {
        let original = self.delivery(user_id, id).await?;
        // The channel must still exist (and be the caller's).
        let channel = self.channel(user_id, &original.channel_id).await?;
        let (body,): (Option<String>,) =
            sqlx::query_as("SELECT body FROM alert_deliveries WHERE id = $1")
                .bind(id)
                .fetch_one(&self.db.pool)
                .await?;
        let now = now_ms();
        let mut tx = self.db.pool.begin().await?;
        lock_on_demand(&mut tx, self.db.engine, &original.channel_id).await?;
        let ids: Vec<&str> = original.incident_ids.iter().map(String::as_str).collect();
        let new_id = create(
            &mut tx,
            user_id,
            &original.channel_id,
            original.event,
            &ids,
            now,
            0,
        )
        .await?;
        sqlx::query("UPDATE alert_deliveries SET body = $1, resent_from = $2 WHERE id = $3")
            .bind(body)
            .bind(id)
            .bind(&new_id)
            .execute(&mut *tx)
            .await?;
        if let Some(wait) = over_limit(&mut tx, &original.channel_id, OnDemand::Resend, now).await?
        {
            tx.rollback().await?;
            return Err(super::invalid(
                "delivery",
                format!("Too many resends; try again in {wait} s"),
            ));
        }
        bury_if_disabled(&mut tx, &new_id, channel.enabled.0).await?;
        // The answer is the delivery as queued, read before the sender can see it (see
        // `test_channel`).
        let queued = read(&mut tx, user_id, &new_id).await?;
        tx.commit().await?;
        self.wake_sender();
        Ok(queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_schedule_with_jitter_and_retry_after() {
        assert_eq!(retry_delay(1, 0.0, None), Some(5_000));
        assert_eq!(retry_delay(1, 1.0, None), Some(5_500));
        assert_eq!(retry_delay(1, -1.0, None), Some(4_500));
        assert_eq!(retry_delay(2, 0.0, None), Some(300_000));
        assert_eq!(retry_delay(7, 0.0, None), Some(86_400_000));
        assert_eq!(
            retry_delay(8, 0.0, None),
            None,
            "the eighth failure is the last"
        );
        // Retry-After is a floor, not jittered; a shorter one changes nothing.
        assert_eq!(retry_delay(1, 0.5, Some(60_000)), Some(60_000));
        assert_eq!(retry_delay(2, 0.0, Some(60_000)), Some(300_000));
    }
}
