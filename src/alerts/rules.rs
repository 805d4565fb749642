//! Rules: create, list (with their derived state), change, delete. A rule's channels must be
//! the caller's; a stream rule's stream must exist; a QoE rule's filters parse as the QoE
//! routes parse them.

use std::collections::HashMap;

use super::model::{QoeCondition, Rule, RuleRow, RULE_COLUMNS};
use super::{incidents, AlertError, Alerts};
use crate::states::{CompareOp, RuleKind, RuleState};
use crate::time::{new_id, now_ms};
use crate::validation::FieldErrors;

pub const FAIL_AFTER_DEFAULT: i64 = 3;
pub const RECOVER_AFTER_DEFAULT: i64 = 2;
pub const WINDOW_DEFAULT_MS: i64 = 300_000;
pub const WINDOW_MIN_MS: i64 = 60_000;
pub const WINDOW_MAX_MS: i64 = 86_400_000;
pub const MIN_VIEWS_DEFAULT: i64 = 25;
pub const REMIND_MIN_MS: i64 = 300_000;
/// Rules one user may have (decisions.md §14).
pub const MAX_RULES_PER_USER: i64 = 200;

/// A rule's writable fields as a request gives them (`None` = not given). `stream_id` and
/// `remind_every_ms` distinguish "not given" from "null".
#[derive(Clone, Debug, Default)]
pub struct RuleInput {
    pub name: Option<String>,
    pub kind: Option<RuleKind>,
    pub stream_id: Option<Option<String>>,
    pub fail_after: Option<i64>,
    pub recover_after: Option<i64>,
    pub metric: Option<analytics::Metric>,
    pub measurement: Option<analytics::Measurement>,
    pub op: Option<CompareOp>,
    pub threshold: Option<f64>,
    pub window_ms: Option<i64>,
    pub min_views: Option<i64>,
    pub filters: Option<Vec<String>>,
    pub channel_ids: Option<Vec<String>>,
    pub remind_every_ms: Option<Option<i64>>,
    pub enabled: Option<bool>,
}

/// A rule's complete settings, checked.
struct Settings {
    name: String,
    kind: RuleKind,
    stream_id: Option<String>,
    fail_after: i64,
    recover_after: i64,
    qoe: Option<QoeCondition>,
    channel_ids: Vec<String>,
    remind_every_ms: Option<i64>,
    enabled: bool,
}

impl Alerts {
    /// Merges `input` over `base` (a stored rule, or the defaults of a new one) and checks the
    /// result, every field at once.
    async fn settle(
        &self,
        user_id: &str,
        input: &RuleInput,
        base: Option<&Rule>,
    ) -> Result<Settings, AlertError> {
        let mut errors = FieldErrors::new();
        let kind = match (base, input.kind) {
            (Some(b), Some(k)) if k != b.kind => {
                errors.insert("kind".into(), "The kind of a rule cannot change".into());
                b.kind
            }
            (Some(b), _) => b.kind,
            (None, Some(k)) => k,
            (None, None) => {
                errors.insert("kind".into(), "Required".into());
                RuleKind::Stream
            }
        };
        let name = input
            .name
            .clone()
            .or_else(|| base.map(|b| b.name.clone()))
            .unwrap_or_else(|| {
                errors.insert("name".into(), "Required".into());
                String::new()
            });
        let stream_id = match &input.stream_id {
            Some(id) => id.clone(),
            None => base.and_then(|b| b.stream_id.clone()),
        };
        let only = |field: &str, errors: &mut FieldErrors, given: bool, of: &str| {
            if given {
                errors.insert(field.into(), format!("Only {of} rules have {field}"));
            }
        };
        let base_qoe = base.and_then(|b| b.qoe.clone());
        let qoe = match kind {
            RuleKind::Stream => {
                only("metric", &mut errors, input.metric.is_some(), "qoe");
                only("op", &mut errors, input.op.is_some(), "qoe");
                only("threshold", &mut errors, input.threshold.is_some(), "qoe");
                only("window", &mut errors, input.window_ms.is_some(), "qoe");
                only("minViews", &mut errors, input.min_views.is_some(), "qoe");
                only("filter", &mut errors, input.filters.is_some(), "qoe");
                only(
                    "measurement",
                    &mut errors,
                    input.measurement.is_some(),
                    "qoe",
                );
                // The stream must exist when it is named, and when the rule is on: a rule kept
                // (disabled) after its stream was deleted can be renamed, not switched back on.
                let enabled = input.enabled.or(base.map(|b| b.enabled)).unwrap_or(true);
                let check = input.stream_id.is_some() || base.is_none() || enabled;
                if let (Some(id), true) = (&stream_id, check) {
                    let exists: Option<(i64,)> =
                        sqlx::query_as("SELECT 1 FROM streams WHERE id = $1")
                            .bind(id)
                            .fetch_optional(&self.db.pool)
                            .await?;
                    if exists.is_none() {
                        errors.insert("streamId".into(), "Stream not found".into());
                    }
                }
                None
            }
            RuleKind::Qoe => {
                only("streamId", &mut errors, stream_id.is_some(), "stream");
                only(
                    "failAfter",
                    &mut errors,
                    input.fail_after.is_some(),
                    "stream",
                );
                only(
                    "recoverAfter",
                    &mut errors,
                    input.recover_after.is_some(),
                    "stream",
                );
                let metric = input.metric.or(base_qoe.as_ref().map(|q| q.metric));
                let op = input.op.or(base_qoe.as_ref().map(|q| q.op));
                let threshold = input.threshold.or(base_qoe.as_ref().map(|q| q.threshold));
                for (field, missing) in [
                    ("metric", metric.is_none()),
                    ("op", op.is_none()),
                    ("threshold", threshold.is_none()),
                ] {
                    if missing {
                        errors
                            .entry(field.into())
                            .or_insert_with(|| "Required".into());
                    }
                }
                if input.measurement.is_some()
                    && metric.is_some_and(|m| m != analytics::Metric::StartupTimeMs)
                {
                    errors.insert(
                        "measurement".into(),
                        "Only startupTimeMs has a measurement".into(),
                    );
                }
                if metric == Some(analytics::Metric::Views) {
                    errors.insert(
                        "metric".into(),
                        "views is a count, not a quality metric: choose another".into(),
                    );
                }
                let filters = input
                    .filters
                    .clone()
                    .or_else(|| base_qoe.as_ref().map(|q| q.filters.clone()))
                    .unwrap_or_default();
                if let Err(m) = analytics::Filters::parse(filters.iter().map(String::as_str)) {
                    errors.insert("filter".into(), m);
                }
                match (metric, op, threshold) {
                    (Some(metric), Some(op), Some(threshold)) => Some(QoeCondition {
                        metric,
                        measurement: input
                            .measurement
                            .or(base_qoe.as_ref().map(|q| q.measurement))
                            .unwrap_or_default(),
                        op,
                        threshold,
                        window_ms: input
                            .window_ms
                            .or(base_qoe.as_ref().map(|q| q.window_ms))
                            .unwrap_or(WINDOW_DEFAULT_MS),
                        min_views: input
                            .min_views
                            .or(base_qoe.as_ref().map(|q| q.min_views))
                            .unwrap_or(MIN_VIEWS_DEFAULT),
                        filters,
                    }),
                    _ => None,
                }
            }
        };
        let channel_ids = input
            .channel_ids
            .clone()
            .or_else(|| base.map(|b| b.channel_ids.clone()))
            .unwrap_or_default();
        if channel_ids.is_empty() {
            errors
                .entry("channelIds".into())
                .or_insert_with(|| "Array must contain at least 1 element(s)".into());
        } else {
            let mine: Vec<String> = self
                .channels(user_id)
                .await?
                .into_iter()
                .map(|c| c.id)
                .collect();
            if let Some(unknown) = channel_ids.iter().find(|id| !mine.contains(id)) {
                errors
                    .entry("channelIds".into())
                    .or_insert_with(|| format!("Unknown channel: {unknown}"));
            }
        }
        if !errors.is_empty() {
            return Err(AlertError::Invalid(errors));
        }
        let mut channel_ids = channel_ids;
        channel_ids.sort();
        channel_ids.dedup();
        Ok(Settings {
            name,
            kind,
            stream_id,
            fail_after: input
                .fail_after
                .or(base.map(|b| b.fail_after))
                .unwrap_or(FAIL_AFTER_DEFAULT),
            recover_after: input
                .recover_after
                .or(base.map(|b| b.recover_after))
                .unwrap_or(RECOVER_AFTER_DEFAULT),
            qoe,
            channel_ids,
            remind_every_ms: match input.remind_every_ms {
                Some(v) => v,
                None => base.and_then(|b| b.remind_every_ms),
            },
            enabled: input.enabled.or(base.map(|b| b.enabled)).unwrap_or(true),
        })
    }

    pub async fn create_rule(&self, user_id: &str, input: &RuleInput) -> Result<Rule, AlertError> {
        let s = self.settle(user_id, input, None).await?;
        let id = new_id();
        let mut tx = self.db.pool.begin().await?;
        super::channels::lock_user(&mut tx, self.db.engine, "rules", user_id).await?;
        let q = s.qoe.as_ref();
        let threshold = NullableF64(q.map(|q| q.threshold));
        // Inserted only under the cap (counted in the same statement).
        let done = sqlx::query(&format!(
            "INSERT INTO alert_rules (id, user_id, name, kind, stream_id, fail_after, recover_after, \
                 metric, measurement, op, threshold, window_ms, min_views, filters, remind_every_ms, \
                 enabled, created_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, {}, $12, $13, $14, $15, $16, $17 \
             WHERE (SELECT COUNT(*) FROM alert_rules WHERE user_id = $2) < $19",
            NullableF64::SQL_11_18
        ))
        .bind(&id)
        .bind(user_id)
        .bind(&s.name)
        .bind(s.kind.as_str())
        .bind(s.stream_id.as_deref())
        .bind(s.fail_after)
        .bind(s.recover_after)
        .bind(q.map(|q| q.metric.as_str()))
        .bind(q.map(|q| q.measurement.as_str()))
        .bind(q.map(|q| q.op.as_str()))
        .bind(threshold.value())
        .bind(q.map(|q| q.window_ms))
        .bind(q.map(|q| q.min_views))
        .bind(serde_json::to_string(&q.map(|q| q.filters.clone()).unwrap_or_default()).unwrap_or_else(|_| "[]".into()))
        .bind(s.remind_every_ms)
        .bind(i64::from(s.enabled))
        .bind(now_ms())
        .bind(threshold.present())
        .bind(MAX_RULES_PER_USER)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(super::invalid(
                "name",
                format!("Rule limit reached ({MAX_RULES_PER_USER})"),
            ));
        }
        set_channels(&mut tx, &id, &s.channel_ids).await?;
        tx.commit().await?;
        self.rule(user_id, &id).await
    }

    pub async fn update_rule(
        &self,
        user_id: &str,
        id: &str,
        input: &RuleInput,
    ) -> Result<Rule, AlertError> {
        let current = self.rule(user_id, id).await?;
        let s = self.settle(user_id, input, Some(&current)).await?;
        let now = now_ms();
        let mut tx = self.db.pool.begin().await?;
        // Switched off: nothing would ever resolve its open incidents, so they resolve now.
        if current.enabled && !s.enabled {
            incidents::resolve_all_of_rule(&mut tx, self.db.engine, id, now).await?;
        }
        let q = s.qoe.as_ref();
        let threshold = NullableF64(q.map(|q| q.threshold));
        // Switched on: the reason the service switched it off no longer holds.
        sqlx::query(&format!(
            "UPDATE alert_rules SET name = $1, stream_id = $2, fail_after = $3, recover_after = $4, \
                 metric = $5, measurement = $6, op = $7, threshold = {}, window_ms = $9, \
                 min_views = $10, filters = $11, remind_every_ms = $12, enabled = $13, \
                 disabled_reason = CASE WHEN $13 = 1 THEN NULL ELSE disabled_reason END \
             WHERE id = $14 AND user_id = $15",
            NullableF64::SQL_8_16
        ))
        .bind(&s.name)
        .bind(s.stream_id.as_deref())
        .bind(s.fail_after)
        .bind(s.recover_after)
        .bind(q.map(|q| q.metric.as_str()))
        .bind(q.map(|q| q.measurement.as_str()))
        .bind(q.map(|q| q.op.as_str()))
        .bind(threshold.value())
        .bind(q.map(|q| q.window_ms))
        .bind(q.map(|q| q.min_views))
        .bind(serde_json::to_string(&q.map(|q| q.filters.clone()).unwrap_or_default()).unwrap_or_else(|_| "[]".into()))
        .bind(s.remind_every_ms)
        .bind(i64::from(s.enabled))
        .bind(id)
        .bind(user_id)
        .bind(threshold.present())
        .execute(&mut *tx)
        .await?;
        set_channels(&mut tx, id, &s.channel_ids).await?;
        tx.commit().await?;
        self.wake_sender();
        self.rule(user_id, id).await
    }

    /// Deletes a rule; an open incident of it is resolved and notified first.
    pub async fn delete_rule(&self, user_id: &str, id: &str) -> Result<(), AlertError> {
        self.rule(user_id, id).await?;
        let mut tx = self.db.pool.begin().await?;
        incidents::resolve_all_of_rule(&mut tx, self.db.engine, id, now_ms()).await?;
        sqlx::query("DELETE FROM alert_rules WHERE id = $1 AND user_id = $2")
            .bind(id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.wake_sender();
        Ok(())
    }

    /// The caller's rules, newest first, with their states.
    pub async fn rules(&self, user_id: &str) -> Result<Vec<Rule>, AlertError> {
        let rows: Vec<RuleRow> = sqlx::query_as(&format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE user_id = $1 ORDER BY created_at DESC, seq DESC"
        ))
        .bind(user_id)
        .fetch_all(&self.db.pool)
        .await?;
        self.complete(rows).await
    }

    /// One of the caller's rules.
    pub async fn rule(&self, user_id: &str, id: &str) -> Result<Rule, AlertError> {
        let row: RuleRow = sqlx::query_as(&format!(
            "SELECT {RULE_COLUMNS} FROM alert_rules WHERE id = $1 AND user_id = $2"
        ))
        .bind(id)
        .bind(user_id)
        .fetch_optional(&self.db.pool)
        .await?
        .ok_or(AlertError::NotFound)?;
        self.complete(vec![row])
            .await?
            .pop()
            .ok_or(AlertError::NotFound)
    }

    /// Rules from rows: their channels and their state (firing while an incident of theirs is
    /// open; a stream rule is pending while a stream it watches has unplayable probes in a row).
    async fn complete(&self, rows: Vec<RuleRow>) -> Result<Vec<Rule>, AlertError> {
        let mut channels: HashMap<String, Vec<String>> = HashMap::new();
        let mut firing: HashMap<String, bool> = HashMap::new();
        for r in &rows {
            let ids: Vec<(String,)> = sqlx::query_as(
                "SELECT channel_id FROM alert_rule_channels WHERE rule_id = $1 ORDER BY channel_id",
            )
            .bind(&r.id)
            .fetch_all(&self.db.pool)
            .await?;
            channels.insert(r.id.clone(), ids.into_iter().map(|(c,)| c).collect());
            let open: Option<(i64,)> = sqlx::query_as(
                "SELECT 1 FROM alert_incidents WHERE rule_id = $1 AND state = 'firing' LIMIT 1",
            )
            .bind(&r.id)
            .fetch_optional(&self.db.pool)
            .await?;
            firing.insert(r.id.clone(), open.is_some());
        }
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let state = if firing.get(&r.id).copied().unwrap_or(false) {
                RuleState::Firing
            } else if r.enabled.0
                && r.kind == RuleKind::Stream
                && self.any_down(r.stream_id.as_deref()).await?
            {
                RuleState::Pending
            } else {
                RuleState::Ok
            };
            out.push(Rule {
                qoe: r.qoe(),
                channel_ids: channels.remove(&r.id).unwrap_or_default(),
                id: r.id,
                user_id: r.user_id,
                name: r.name,
                kind: r.kind,
                stream_id: r.stream_id,
                fail_after: r.fail_after,
                recover_after: r.recover_after,
                remind_every_ms: r.remind_every_ms,
                enabled: r.enabled.0,
                disabled_reason: r.disabled_reason,
                created_at: r.created_at,
                state,
            });
        }
        Ok(out)
    }

    /// True when the stream (or any stream) has unplayable probes in a row right now.
    async fn any_down(&self, stream_id: Option<&str>) -> Result<bool, AlertError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM streams WHERE down_streak > 0 AND ($1 IS NULL OR id = $1) LIMIT 1",
        )
        .bind(stream_id)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.is_some())
    }
}

/// A nullable `DOUBLE PRECISION` parameter that binds alike whether or not it is null.
///
/// sqlx 0.8's `Any` driver sends a null `f64` to PostgreSQL typed as `float4` (and a value as
/// `float8`), and PostgreSQL keeps the parameter types a connection first prepared a statement
/// with: after a stream rule (threshold null), every QoE rule insert on that pooled connection
/// failed with "incorrect binary data format". So the value always goes as an `f64` (0 when
/// absent) with a 0/1 flag, and the statement reads `CASE WHEN <flag> = 1 THEN <value> END`.
struct NullableF64(Option<f64>);

impl NullableF64 {
    /// The threshold of the rule insert: value `$11`, flag `$18`.
    const SQL_11_18: &'static str = "CASE WHEN $18 = 1 THEN $11 END";
    /// The threshold of the rule update: value `$8`, flag `$16`.
    const SQL_8_16: &'static str = "CASE WHEN $16 = 1 THEN $8 END";

    fn value(&self) -> f64 {
        self.0.unwrap_or(0.0)
    }

    fn present(&self) -> i64 {
        i64::from(self.0.is_some())
    }
}

async fn set_channels(
    tx: &mut sqlx::AnyConnection,
    rule_id: &str,
    channel_ids: &[String],
) -> Result<(), AlertError> {
    sqlx::query("DELETE FROM alert_rule_channels WHERE rule_id = $1")
        .bind(rule_id)
        .execute(&mut *tx)
        .await?;
    for c in channel_ids {
        sqlx::query("INSERT INTO alert_rule_channels (rule_id, channel_id) VALUES ($1, $2)")
            .bind(rule_id)
            .bind(c)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}
