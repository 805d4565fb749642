//! Transitions. A stream rule is evaluated after each probe (in transactions of its own), from the
//! stream's consecutive not-playable / playable counts (decisions.md v1.1 §6); QoE rules and
//! reminders on a schedule. Opening and resolving an incident is [`super::incidents`]'s: one
//! conditional write each, so with several instances each transition is recorded, and its
//! outbox rows written, exactly once.
//! Evaluation works from state, not from the probe that crossed the line: a transition missed
//! (a crash, a rule created while a stream was already down) happens at the next evaluation.

use std::sync::Arc;
use std::time::Duration;

use analytics::{Filters, TimeRange};
use sqlx::AnyConnection;
use tokio::sync::watch;

use super::incidents::{open, resolve, Opening};
use super::model::{QoeCondition, RuleRow, RULE_COLUMNS};
use super::{duration, outbox, Alerts};
use crate::db::{Db, DbError};
use crate::states::{CompareOp, DeliveryEvent};
use crate::time::now_ms;

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
