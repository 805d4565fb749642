//! Incidents: opening and resolving them, each transition with its notifications in the
//! caller's transaction, and listing them. Both the stream rules (a probe, a stream deleted)
//! and the rules' own changes (deleted, disabled) move incidents through here; the outbox
//! below only queues what a transition notifies.
//!
//! Each transition is one conditional write (open: an insert the unique index of open
//! incidents admits once; resolve: an update of a row still firing), so with several
//! instances each is recorded, and its outbox rows written, exactly once.

use sqlx::AnyConnection;

use super::model::{Incident, INCIDENT_COLUMNS};
use super::{outbox, payload, Alerts};
use crate::db::{DbError, Engine};
use crate::states::{DeliveryEvent, IncidentState};
use crate::time::new_id;

/// `disabledReason` of a rule whose stream was deleted.
pub const RULE_STREAM_DELETED: &str = "stream deleted";

/// An incident to open.
pub(super) struct Opening<'a> {
    pub(super) user_id: &'a str,
    pub(super) rule_id: &'a str,
    pub(super) rule_name: &'a str,
    pub(super) kind: &'a str,
    /// The stream id, or `""` for a QoE rule: one open incident per rule and target.
    pub(super) target: &'a str,
    /// `(id, sourceUrl, name)` of the stream.
    pub(super) stream: Option<(&'a str, &'a str, &'a str)>,
    pub(super) detail: &'a str,
    pub(super) at: i64,
}

/// Opens an incident unless one of this rule and target is open; its id when this call did.
pub(super) async fn open(
    tx: &mut AnyConnection,
    o: &Opening<'_>,
) -> Result<Option<String>, DbError> {
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
pub(super) async fn resolve(
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
    .bind(payload::STREAM_DELETED)
    .fetch_all(&mut *tx)
    .await?;
    for (id, rule_id) in open {
        outbox::notify(tx, engine, &rule_id, &id, DeliveryEvent::Resolved, at).await?;
    }
    sqlx::query("UPDATE alert_rules SET enabled = 0, disabled_reason = $1 WHERE stream_id = $2")
        .bind(RULE_STREAM_DELETED)
        .bind(stream_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// A filter of the incident list.
#[derive(Clone, Debug, Default)]
pub struct IncidentFilter {
    pub state: Option<IncidentState>,
    pub rule_id: Option<String>,
    pub before: Option<i64>,
    pub limit: i64,
}

impl Alerts {
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
