//! Transitions. A stream rule is evaluated in the transaction that records a probe, from the
//! stream's consecutive not-playable / playable counts (decisions.md v1.1 §6); QoE rules and
//! reminders on a schedule. Each transition is one conditional write (open: an insert the
//! unique index of open incidents admits once; resolve: an update of a row still firing), so
//! with several instances each is recorded, and its outbox rows written, exactly once.
//! Evaluation works from state, not from the probe that crossed the line: a transition missed
//! (a crash, a rule created while a stream was already down) happens at the next evaluation.

use std::sync::Arc;
use std::time::Duration;

use analytics::{Filters, TimeRange};
use sqlx::AnyConnection;
use tokio::sync::watch;

use super::model::{Incident, QoeCondition, RuleRow, INCIDENT_COLUMNS, RULE_COLUMNS};
use super::{duration, outbox, Alerts};
use crate::db::{Db, DbError, Engine};
use crate::states::{CompareOp, DeliveryEvent};
use crate::time::{new_id, now_ms};

/// A probe just recorded, as the stream rules see it.
pub struct ProbeFacts<'a> {
    pub stream_id: &'a str,
    pub playable: bool,
    /// What the probe found (`HTTP 404`, `timeout after 10 s`).
    pub detail: &'a str,
    pub at: i64,
}

/// The stream as the probe left it: read in the probe's transaction, after its streaks moved.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StreamFacts {
    name: String,
    source_url: String,
    down_streak: i64,
    up_streak: i64,
}

/// The stream's facts as of the probe being recorded in `tx`.
pub async fn stream_facts(tx: &mut AnyConnection, stream_id: &str) -> Result<StreamFacts, DbError> {
    Ok(
        sqlx::query_as(
            "SELECT name, source_url, down_streak, up_streak FROM streams WHERE id = $1",
        )
        .bind(stream_id)
        .fetch_one(&mut *tx)
        .await?,
    )
}

/// Evaluates the stream rules that watch this probe's stream, once the probe has committed:
/// each rule's transition and its notifications in a transaction of their own, so the probe's
/// write transaction never holds more than its own work, and no transaction more than one
/// rule's (decisions.md §14). Every transition is idempotent (one open incident per rule and
/// stream): a crash between the probe and its rules only delays a transition to the next probe.
pub async fn on_probe(db: &Db, p: &ProbeFacts<'_>, s: &StreamFacts) -> Result<(), DbError> {
    let rules: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
        "SELECT id, user_id, name, fail_after, recover_after FROM alert_rules \
         WHERE kind = 'stream' AND enabled = 1 AND (stream_id = $1 OR stream_id IS NULL) \
         ORDER BY seq",
    )
    .bind(p.stream_id)
    .fetch_all(&db.pool)
    .await?;
    for (rule_id, user_id, rule_name, fail_after, recover_after) in rules {
        if !p.playable && s.down_streak >= fail_after {
            let detail = format!(
                "{} probe{} not playable: {}",
                s.down_streak,
                if s.down_streak == 1 { "" } else { "s" },
                p.detail
            );
            let mut tx = db.pool.begin().await?;
            let opened = open(
                &mut tx,
                &Opening {
                    user_id: &user_id,
                    rule_id: &rule_id,
                    rule_name: &rule_name,
                    kind: "stream",
                    target: p.stream_id,
                    stream: Some((p.stream_id, &s.source_url, &s.name)),
                    detail: &detail,
                    at: p.at,
                },
            )
            .await?;
            if let Some(incident_id) = opened {
                outbox::notify(
                    &mut tx,
                    db.engine,
                    &rule_id,
                    &incident_id,
                    DeliveryEvent::Firing,
                    p.at,
                )
                .await?;
            }
            tx.commit().await?;
        } else if p.playable && s.up_streak >= recover_after {
            let mut tx = db.pool.begin().await?;
            if let Some(incident_id) = resolve(&mut tx, &rule_id, p.stream_id, p.at).await? {
                outbox::notify(
                    &mut tx,
                    db.engine,
                    &rule_id,
                    &incident_id,
                    DeliveryEvent::Resolved,
                    p.at,
                )
                .await?;
            }
            tx.commit().await?;
        }
    }
    Ok(())
}

struct Opening<'a> {
    user_id: &'a str,
    rule_id: &'a str,
    rule_name: &'a str,
    kind: &'a str,
    /// The stream id, or `""` for a QoE rule: one open incident per rule and target.
    target: &'a str,
    /// `(id, sourceUrl, name)` of the stream.
    stream: Option<(&'a str, &'a str, &'a str)>,
    detail: &'a str,
    at: i64,
}

/// Opens an incident unless one of this rule and target is open; its id when this call did.
async fn open(tx: &mut AnyConnection, o: &Opening<'_>) -> Result<Option<String>, DbError> {
    let id = new_id();
    let done = sqlx::query(
        "INSERT INTO alert_incidents (id, user_id, rule_id, rule_name, kind, target, stream_id, \
             source_url, stream_name, state, fired_at, detail, reminded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'firing', $10, $11, $10) \
         ON CONFLICT (rule_id, target) WHERE state = 'firing' DO NOTHING",
    )
    .bind(&id)
    .bind(o.user_id)
    .bind(o.rule_id)
    .bind(o.rule_name)
    .bind(o.kind)
    .bind(o.target)
    .bind(o.stream.map(|s| s.0))
    .bind(o.stream.map(|s| s.1))
    .bind(o.stream.map(|s| s.2))
    .bind(o.at)
    .bind(o.detail)
    .execute(&mut *tx)
    .await?;
    Ok((done.rows_affected() == 1).then_some(id))
}

/// Resolves the open incident of this rule and target, if any; its id when this call did.
async fn resolve(
    tx: &mut AnyConnection,
    rule_id: &str,
    target: &str,
    at: i64,
) -> Result<Option<String>, DbError> {
    let row: Option<(String,)> = sqlx::query_as(
        "UPDATE alert_incidents SET state = 'resolved', resolved_at = $1 \
         WHERE rule_id = $2 AND target = $3 AND state = 'firing' RETURNING id",
    )
    .bind(at)
    .bind(rule_id)
    .bind(target)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|(id,)| id))
}

/// Resolves (and notifies) every open incident of a rule: the rule is being deleted or
/// disabled, so nothing would ever resolve them.
pub async fn resolve_all_of_rule(
    tx: &mut AnyConnection,
    engine: Engine,
    rule_id: &str,
    at: i64,
) -> Result<(), DbError> {
    let open: Vec<(String,)> = sqlx::query_as(
        "UPDATE alert_incidents SET state = 'resolved', resolved_at = $1 \
         WHERE rule_id = $2 AND state = 'firing' RETURNING id",
    )
    .bind(at)
    .bind(rule_id)
    .fetch_all(&mut *tx)
    .await?;
    for (id,) in open {
        outbox::notify(tx, engine, rule_id, &id, DeliveryEvent::Resolved, at).await?;
    }
    Ok(())
}

/// A stream is being deleted (by anyone: streams are shared): its open incidents resolve
/// (notified as `incident.resolved` with the detail `stream deleted`), and every rule bound to
/// it, any user's, stays listed but disabled with `disabledReason: "stream deleted"`
/// (decisions.md §14), in the deletion's transaction.
pub async fn on_stream_deleted(
    tx: &mut AnyConnection,
    engine: Engine,
    stream_id: &str,
    at: i64,
) -> Result<(), DbError> {
    let open: Vec<(String, String)> = sqlx::query_as(
        "UPDATE alert_incidents SET state = 'resolved', resolved_at = $1, detail = $3 \
         WHERE stream_id = $2 AND state = 'firing' RETURNING id, rule_id",
    )
    .bind(at)
    .bind(stream_id)
    .bind(super::payload::STREAM_DELETED)
    .fetch_all(&mut *tx)
    .await?;
    for (id, rule_id) in open {
        outbox::notify(tx, engine, &rule_id, &id, DeliveryEvent::Resolved, at).await?;
    }
    sqlx::query("UPDATE alert_rules SET enabled = 0, disabled_reason = $1 WHERE stream_id = $2")
        .bind(super::rules::STREAM_DELETED)
        .bind(stream_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The text of a QoE incident: `playbackFailurePct 7.5 > 5 over 5m (40 views)`.
pub fn qoe_detail(c: &QoeCondition, value: f64, views: i64) -> String {
    let metric = match (c.metric, c.measurement) {
        (analytics::Metric::StartupTimeMs, m) if m != analytics::Measurement::default() => {
            format!("startupTimeMs {}", m.as_str())
        }
        (metric, _) => metric.as_str().to_owned(),
    };
    format!(
        "{metric} {} {} {} over {} ({views} views)",
        short(value),
        c.op.as_str(),
        short(c.threshold),
        duration::format(c.window_ms)
    )
}

/// A number with at most two decimals and no trailing zeros: `7.5`, `5`, `0.33`.
fn short(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// True when `value` crosses the rule's threshold with enough views.
pub fn crosses(c: &QoeCondition, value: Option<f64>, views: i64) -> bool {
    views >= c.min_views
        && value.is_some_and(|v| match c.op {
            CompareOp::Above => v > c.threshold,
            CompareOp::Below => v < c.threshold,
        })
}

impl Alerts {
    /// Evaluates every enabled QoE rule over its window ending `now`, and sends the reminders
    /// that are due. A rule whose telemetry cannot be read is skipped this round.
    pub async fn evaluate_scheduled(
        &self,
        store: &analytics::Store,
        streams: &crate::streams::Streams,
        now: i64,
    ) -> Result<(), DbError> {
        let rules: Vec<RuleRow> = sqlx::query_as(&format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE kind = 'qoe' AND enabled = 1"
        ))
        .fetch_all(&self.db.pool)
        .await?;
        for rule in rules {
            let Some(c) = rule.qoe() else { continue };
            let Ok(filters) = Filters::parse(c.filters.iter().map(String::as_str)) else {
                continue;
            };
            let range = TimeRange {
                from_ms: now - c.window_ms,
                to_ms: now,
            };
            let (views, value) = match store
                .metric(
                    &rule.user_id,
                    range,
                    &filters,
                    c.metric,
                    c.measurement,
                    streams,
                )
                .await
            {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(rule = %rule.id, error = %e, "qoe rule not evaluated: telemetry unavailable");
                    continue;
                }
            };
            let mut tx = self.db.pool.begin().await?;
            if crosses(&c, value, views) {
                let detail = qoe_detail(&c, value.unwrap_or_default(), views);
                let opened = open(
                    &mut tx,
                    &Opening {
                        user_id: &rule.user_id,
                        rule_id: &rule.id,
                        rule_name: &rule.name,
                        kind: "qoe",
                        target: "",
                        stream: None,
                        detail: &detail,
                        at: now,
                    },
                )
                .await?;
                if let Some(id) = opened {
                    outbox::notify(
                        &mut tx,
                        self.db.engine,
                        &rule.id,
                        &id,
                        DeliveryEvent::Firing,
                        now,
                    )
                    .await?;
                }
            } else if let Some(id) = resolve(&mut tx, &rule.id, "", now).await? {
                outbox::notify(
                    &mut tx,
                    self.db.engine,
                    &rule.id,
                    &id,
                    DeliveryEvent::Resolved,
                    now,
                )
                .await?;
            }
            tx.commit().await?;
        }
        self.remind(now).await?;
        self.wake_sender();
        Ok(())
    }

    /// Reminders: an incident still firing `remindEvery` after its last notice gets another,
    /// claimed by a conditional update so only one instance sends it.
    async fn remind(&self, now: i64) -> Result<(), DbError> {
        let due: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT i.id, i.rule_id, i.reminded_at FROM alert_incidents i \
             JOIN alert_rules r ON r.id = i.rule_id \
             WHERE i.state = 'firing' AND r.enabled = 1 AND r.remind_every_ms IS NOT NULL \
               AND i.reminded_at + r.remind_every_ms <= $1",
        )
        .bind(now)
        .fetch_all(&self.db.pool)
        .await?;
        for (id, rule_id, reminded_at) in due {
            let mut tx = self.db.pool.begin().await?;
            let claimed = sqlx::query(
                "UPDATE alert_incidents SET reminded_at = $1 \
                 WHERE id = $2 AND reminded_at = $3 AND state = 'firing'",
            )
            .bind(now)
            .bind(&id)
            .bind(reminded_at)
            .execute(&mut *tx)
            .await?;
            if claimed.rows_affected() == 1 {
                outbox::notify(
                    &mut tx,
                    self.db.engine,
                    &rule_id,
                    &id,
                    DeliveryEvent::Reminder,
                    now,
                )
                .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// The caller's incidents, newest `firedAt` first.
    pub async fn incidents(
        &self,
        user_id: &str,
        f: &IncidentFilter,
    ) -> Result<Vec<Incident>, DbError> {
        Ok(sqlx::query_as(&format!(
            "SELECT {INCIDENT_COLUMNS} FROM alert_incidents WHERE user_id = $1 \
               AND ($2 IS NULL OR state = $2) AND ($3 IS NULL OR rule_id = $3) \
               AND ($4 IS NULL OR fired_at < $4) \
             ORDER BY fired_at DESC, seq DESC LIMIT $5"
        ))
        .bind(user_id)
        .bind(f.state.map(|s| s.as_str()))
        .bind(f.rule_id.as_deref())
        .bind(f.before)
        .bind(f.limit)
        .fetch_all(&self.db.pool)
        .await?)
    }
}

/// Incidents by id, in the order of `ids` (any owner: the sender's view of a delivery).
pub(crate) async fn incidents_by_id(
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

/// A filter of the incident list.
#[derive(Clone, Debug, Default)]
pub struct IncidentFilter {
    pub state: Option<crate::states::IncidentState>,
    pub rule_id: Option<String>,
    pub before: Option<i64>,
    pub limit: i64,
}

/// Runs the scheduled evaluation every `every` until `stop`.
pub async fn run(
    alerts: Alerts,
    store: analytics::Store,
    streams: crate::streams::Streams,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let alerts = Arc::new(alerts);
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = alerts.evaluate_scheduled(&store, &streams, now_ms()).await {
            tracing::warn!(error = %e, "alert evaluation failed; retrying");
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}
