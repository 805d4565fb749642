//! The alerts rows as the domain sees them, decoded with `FromRow` (a stored value outside its
//! closed set is a decode error, never a panic).

use crate::states::{
    ChannelType, CompareOp, DeliveryEvent, DeliveryStatus, IncidentState, RuleKind, RuleState,
};

/// A channel (its secrets stay sealed in the store; `routing_key_last4` is what reads show).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Channel {
    pub id: String,
    pub user_id: String,
    pub name: String,
    #[sqlx(rename = "type", try_from = "String")]
    pub kind: ChannelType,
    pub url: String,
    pub routing_key_last4: Option<String>,
    pub group_window_ms: i64,
    #[sqlx(try_from = "i64")]
    pub enabled: Flag,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
}

pub const CHANNEL_COLUMNS: &str =
    "id, user_id, name, type, url, routing_key_last4, group_window_ms, \
                                   enabled, disabled_reason, created_at";

/// A stored 0/1 flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag(pub bool);

impl From<i64> for Flag {
    fn from(v: i64) -> Self {
        Flag(v != 0)
    }
}

/// A rule with its channels and its derived state.
#[derive(Clone, Debug)]
pub struct Rule {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub kind: RuleKind,
    pub stream_id: Option<String>,
    pub fail_after: i64,
    pub recover_after: i64,
    pub qoe: Option<QoeCondition>,
    pub channel_ids: Vec<String>,
    pub remind_every_ms: Option<i64>,
    pub enabled: bool,
    /// Why the service switched the rule off (`stream deleted`); `None` otherwise.
    pub disabled_reason: Option<String>,
    pub created_at: i64,
    pub state: RuleState,
}

/// What a `qoe` rule compares.
#[derive(Clone, Debug, PartialEq)]
pub struct QoeCondition {
    pub metric: analytics::Metric,
    pub measurement: analytics::Measurement,
    pub op: CompareOp,
    pub threshold: f64,
    pub window_ms: i64,
    pub min_views: i64,
    pub filters: Vec<String>,
}

/// A `alert_rules` row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct RuleRow {
    pub id: String,
    pub user_id: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub kind: RuleKind,
    pub stream_id: Option<String>,
    pub fail_after: i64,
    pub recover_after: i64,
    pub metric: Option<String>,
    pub measurement: Option<String>,
    pub op: Option<String>,
    pub threshold: Option<f64>,
    pub window_ms: Option<i64>,
    pub min_views: Option<i64>,
    pub filters: String,
    pub remind_every_ms: Option<i64>,
    #[sqlx(try_from = "i64")]
    pub enabled: Flag,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
}

pub const RULE_COLUMNS: &str =
    "id, user_id, name, kind, stream_id, fail_after, recover_after, metric, \
                                measurement, op, threshold, window_ms, min_views, filters, \
                                remind_every_ms, enabled, disabled_reason, created_at";

impl RuleRow {
    /// The QoE condition of a `qoe` row; `None` for stream rules (or a row that lost a field).
    pub fn qoe(&self) -> Option<QoeCondition> {
        if self.kind != RuleKind::Qoe {
            return None;
        }
        Some(QoeCondition {
            metric: analytics::Metric::from_id(self.metric.as_deref()?)?,
            measurement: self
                .measurement
                .as_deref()
                .and_then(analytics::Measurement::from_wire)
                .unwrap_or_default(),
            op: CompareOp::parse(self.op.as_deref()?)?,
            threshold: self.threshold?,
            window_ms: self.window_ms?,
            min_views: self.min_views?,
            filters: serde_json::from_str(&self.filters).unwrap_or_default(),
        })
    }
}

/// An incident.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Incident {
    pub id: String,
    pub user_id: String,
    pub rule_id: String,
    pub rule_name: String,
    #[sqlx(try_from = "String")]
    pub kind: RuleKind,
    pub stream_id: Option<String>,
    pub source_url: Option<String>,
    pub stream_name: Option<String>,
    #[sqlx(try_from = "String")]
    pub state: IncidentState,
    pub fired_at: i64,
    pub resolved_at: Option<i64>,
    pub detail: String,
}

pub const INCIDENT_COLUMNS: &str = "id, user_id, rule_id, rule_name, kind, stream_id, source_url, \
                                    stream_name, state, fired_at, resolved_at, detail";

/// A delivery (one notification to one channel, over all its attempts).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Delivery {
    pub id: String,
    pub user_id: String,
    pub channel_id: String,
    #[sqlx(try_from = "String")]
    pub event: DeliveryEvent,
    pub webhook_id: String,
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub last_status_code: Option<i64>,
    pub last_latency_ms: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    #[sqlx(skip)]
    pub incident_ids: Vec<String>,
}

pub const DELIVERY_COLUMNS: &str = "id, user_id, channel_id, event, webhook_id, status, attempts, \
                                    last_status_code, last_latency_ms, last_error, next_attempt_at, \
                                    created_at, sent_at";
