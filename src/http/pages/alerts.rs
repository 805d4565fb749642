//! `/app/alerts`: open and past incidents, the rules (add, enable, disable, delete), the
//! channels (add, send a test, rotate a webhook's secret, enable, disable, delete) and the
//! delivery log with resend. Every action goes to the same `/api/v1/alerts/…` routes a
//! script would call; the page only lists what the domain answers.

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::fmt::{self, When};
use super::{render, Choice, Frame, PageError, Section};
use crate::alerts::incidents::IncidentFilter;
use crate::alerts::outbox::DeliveryFilter;
use crate::alerts::{duration, AlertError, Channel, Rule};
use crate::http::extract::SessionUser;
use crate::http::query::{timestamp, QueryPairs};
use crate::http::AppState;
use crate::states::{ChannelType, DeliveryStatus, IncidentState, RuleKind, RuleState};
use crate::time::iso_ms;

/// Incidents listed (firing ones first, then the latest resolved).
const INCIDENTS: i64 = 100;
const PAST_SHOWN: usize = 20;
/// Deliveries per page of the log.
const LOG_PAGE: i64 = 50;

/// The metrics a QoE rule can watch (`views` is a count, not a quality), with labels.
const METRICS: [(analytics::Metric, &str); 8] = [
    (
        analytics::Metric::PlaybackFailurePct,
        "Playback failures (%)",
    ),
    (analytics::Metric::StartupFailurePct, "Startup failures (%)"),
    (
        analytics::Metric::ExitBeforeStartPct,
        "Exits before start (%)",
    ),
    (analytics::Metric::StartupTimeMs, "Startup time (ms)"),
    (analytics::Metric::RebufferPct, "Rebuffering (%)"),
    (analytics::Metric::RebufferFrequency, "Stalls per minute"),
    (analytics::Metric::WatchTimeMs, "Watch time (ms)"),
    (analytics::Metric::AvgBitrateKbps, "Average bitrate (kb/s)"),
];

pub struct IncidentRow {
    pub rule: String,
    pub stream: Option<(String, String)>,
    pub detail: String,
    pub fired: When,
    pub resolved: Option<When>,
}

pub struct RuleRow {
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    pub condition: String,
    pub channels: String,
    pub state: &'static str,
    pub badge: &'static str,
    pub enabled: bool,
    /// Why the service switched it off (its stream was deleted).
    pub disabled_reason: Option<String>,
}

pub struct ChannelRow {
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    pub target: String,
    pub group_window: String,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub signed: bool,
}

pub struct DeliveryRow {
    pub id: String,
    pub created: When,
    pub channel: String,
    pub event: &'static str,
    pub incidents: usize,
    pub status: &'static str,
    pub badge: &'static str,
    pub attempts: i64,
    pub code: String,
    pub latency: String,
    pub next: Option<When>,
    pub error: Option<String>,
}

#[derive(Template)]
#[template(path = "alerts.html")]
struct AlertsPage {
    frame: Frame,
    firing: Vec<IncidentRow>,
    past: Vec<IncidentRow>,
    rules: Vec<RuleRow>,
    channels: Vec<ChannelRow>,
    deliveries: Vec<DeliveryRow>,
    older: Option<String>,
    newer: Option<String>,
    streams: Vec<Choice>,
    metrics: Vec<Choice>,
    channel_choices: Vec<Choice>,
}

impl From<AlertError> for PageError {
    fn from(e: AlertError) -> Self {
        match e {
            AlertError::NotFound => PageError::NotFound,
            other => PageError::internal(other),
        }
    }
}

/// `GET /app/alerts[?before=<ISO>]` (`before` pages the delivery log).
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let user_id = &user.0.user.id;
    let before = q.last("before").and_then(|b| timestamp(b).ok());
    let alerts = &state.alerts;
    let channels = alerts.channels(user_id).await?;
    let rules = alerts.rules(user_id).await?;
    let incidents = alerts
        .incidents(
            user_id,
            &IncidentFilter {
                limit: INCIDENTS,
                ..IncidentFilter::default()
            },
        )
        .await?;
    let deliveries = alerts
        .deliveries(
            user_id,
            &DeliveryFilter {
                before,
                limit: LOG_PAGE + 1,
                ..DeliveryFilter::default()
            },
        )
        .await?;
    let names = state.streams.names().await?;
    let stream_names: HashMap<String, String> = names.iter().cloned().collect();
    let channel_names: HashMap<&str, &str> = channels
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();

    let (firing, past): (Vec<_>, Vec<_>) = incidents
        .into_iter()
        .partition(|i| i.state == IncidentState::Firing);
    let incident_row = |i: crate::alerts::Incident| IncidentRow {
        rule: i.rule_name,
        stream: i.stream_id.map(|id| {
            let name = i
                .stream_name
                .filter(|n| !n.is_empty())
                .or_else(|| stream_names.get(&id).cloned())
                .unwrap_or_else(|| id.clone());
            (id, name)
        }),
        detail: i.detail,
        fired: When::at(i.fired_at),
        resolved: i.resolved_at.map(When::at),
    };

    let more = deliveries.len() as i64 > LOG_PAGE;
    let shown: Vec<_> = deliveries.into_iter().take(LOG_PAGE as usize).collect();
    let older = more
        .then(|| {
            shown
                .last()
                .map(|d| format!("/app/alerts?before={}#log-h", iso_ms(d.created_at)))
        })
        .flatten();

    Ok(render(&AlertsPage {
        frame: Frame::new(&user, Section::Alerts),
        firing: firing.into_iter().map(&incident_row).collect(),
        past: past
            .into_iter()
            .take(PAST_SHOWN)
            .map(&incident_row)
            .collect(),
        rules: rules
            .iter()
            .map(|r| rule_row(r, &stream_names, &channel_names))
            .collect(),
        channels: channels.iter().map(channel_row).collect(),
        deliveries: shown
            .into_iter()
            .map(|d| {
                let (status, badge) = delivery_status(d.status);
                DeliveryRow {
                    channel: channel_names
                        .get(d.channel_id.as_str())
                        .map_or_else(|| "(deleted channel)".to_owned(), |n| (*n).to_owned()),
                    id: d.id,
                    created: When::at(d.created_at),
                    event: d.event.as_str(),
                    incidents: d.incident_ids.len(),
                    status,
                    badge,
                    attempts: d.attempts,
                    code: d
                        .last_status_code
                        .map_or_else(String::new, |c| c.to_string()),
                    latency: d
                        .last_latency_ms
                        .map_or_else(String::new, |ms| format!("{} ms", fmt::int(ms))),
                    next: d
                        .next_attempt_at
                        .filter(|_| d.status == DeliveryStatus::Pending)
                        .map(When::at),
                    error: d.last_error,
                }
            })
            .collect(),
        older,
        newer: before.map(|_| "/app/alerts#log-h".to_owned()),
        streams: names
            .into_iter()
            .map(|(value, label)| Choice {
                value,
                label,
                selected: false,
            })
            .collect(),
        metrics: METRICS
            .iter()
            .map(|(m, label)| Choice {
                value: m.as_str().to_owned(),
                label: (*label).to_owned(),
                selected: *m == analytics::Metric::PlaybackFailurePct,
            })
            .collect(),
        channel_choices: {
            // The rule forms start with the channel just added (`?channel=`, where the
            // webhook's "Done" leads), or with the only one there is.
            let enabled: Vec<_> = channels.iter().filter(|c| c.enabled.0).collect();
            let only = enabled.len() == 1;
            enabled
                .into_iter()
                .map(|c| Choice {
                    value: c.id.clone(),
                    label: format!("{} ({})", c.name, c.kind.as_str()),
                    selected: only || q.last("channel") == Some(c.id.as_str()),
                })
                .collect()
        },
    }))
}

/// A rule's condition as one sentence.
fn condition(r: &Rule, streams: &HashMap<String, String>) -> String {
    match (&r.qoe, r.kind) {
        (Some(c), RuleKind::Qoe) => {
            let measurement = if c.measurement == analytics::Measurement::default() {
                String::new()
            } else {
                format!(" ({})", c.measurement.as_str())
            };
            let filters = if c.filters.is_empty() {
                String::new()
            } else {
                format!(", where {}", c.filters.join(" and "))
            };
            format!(
                "{}{measurement} {} {} over {}, at least {} views{filters}",
                c.metric.as_str(),
                c.op.as_str(),
                fmt::num(c.threshold, 3),
                duration::format(c.window_ms),
                fmt::int(c.min_views),
            )
        }
        _ => {
            let target = match &r.stream_id {
                None => "Any stream".to_owned(),
                Some(id) => streams
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| format!("a deleted stream ({id})")),
            };
            format!(
                "{target}: fires after {} unplayable probe{} in a row, resolves after {} playable",
                r.fail_after,
                if r.fail_after == 1 { "" } else { "s" },
                r.recover_after,
            )
        }
    }
}

fn rule_row(
    r: &Rule,
    streams: &HashMap<String, String>,
    channels: &HashMap<&str, &str>,
) -> RuleRow {
    let (state, badge) = match r.state {
        RuleState::Ok => ("ok", "badge-healthy"),
        RuleState::Pending => ("pending", "badge-degraded"),
        RuleState::Firing => ("firing", "badge-failing"),
    };
    let mut condition = condition(r, streams);
    if let Some(every) = r.remind_every_ms {
        condition.push_str(&format!("; reminds every {}", duration::format(every)));
    }
    RuleRow {
        id: r.id.clone(),
        name: r.name.clone(),
        kind: r.kind.as_str(),
        condition,
        channels: r
            .channel_ids
            .iter()
            .filter_map(|id| channels.get(id.as_str()).copied())
            .collect::<Vec<_>>()
            .join(", "),
        state,
        badge,
        enabled: r.enabled,
        disabled_reason: r.disabled_reason.clone(),
    }
}

fn channel_row(c: &Channel) -> ChannelRow {
    // Chat webhook URLs carry their token in the path: show where, never the whole URL.
    let host = url::Url::parse(&c.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let target = match (c.kind, &c.routing_key_last4) {
        (ChannelType::Pagerduty, Some(last4)) => format!("{host}, routing key …{last4}"),
        _ => host,
    };
    ChannelRow {
        id: c.id.clone(),
        name: c.name.clone(),
        kind: c.kind.as_str(),
        target,
        group_window: duration::format(c.group_window_ms),
        enabled: c.enabled.0,
        disabled_reason: c.disabled_reason.clone(),
        signed: c.kind == ChannelType::Webhook,
    }
}

fn delivery_status(s: DeliveryStatus) -> (&'static str, &'static str) {
    match s {
        DeliveryStatus::Sent => ("sent", "badge-healthy"),
        DeliveryStatus::Pending => ("pending", "badge-degraded"),
        DeliveryStatus::Failed => ("failed", "badge-failing"),
        DeliveryStatus::Dead => ("dead", "badge-neutral"),
    }
}
