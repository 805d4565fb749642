//! What receivers get (alerts.md §3): the body of each channel type, and the Standard Webhooks
//! signature of a webhook attempt.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Sha256;

use super::model::Incident;
use crate::states::{ChannelType, DeliveryEvent, IncidentState, RuleKind};
use crate::time::Timestamp;

/// Streams or metrics named in a chat message at most; the rest are counted.
const CHAT_LISTED: usize = 10;
/// Discord refuses a `content` over 2,000 characters (400, which is not retried).
const DISCORD_MAX_CHARS: usize = 2_000;
/// Slack cuts messages over 40,000 characters; far below that a message stops being read.
const SLACK_MAX_CHARS: usize = 4_000;
/// One incident's line at most (rule and stream names are up to 120 characters each).
const LINE_MAX_CHARS: usize = 300;

/// An incident as receivers (and the API) see it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentBody {
    pub id: String,
    pub rule_id: String,
    pub rule_name: String,
    pub kind: RuleKind,
    pub state: IncidentState,
    pub stream_id: Option<String>,
    pub source_url: Option<String>,
    pub stream_name: Option<String>,
    pub fired_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    pub detail: String,
}

impl From<&Incident> for IncidentBody {
    fn from(i: &Incident) -> Self {
        IncidentBody {
            id: i.id.clone(),
            rule_id: i.rule_id.clone(),
            rule_name: i.rule_name.clone(),
            kind: i.kind,
            state: i.state,
            stream_id: i.stream_id.clone(),
            source_url: i.source_url.clone(),
            stream_name: i.stream_name.clone(),
            fired_at: Timestamp(i.fired_at),
            resolved_at: i.resolved_at.map(Timestamp),
            detail: i.detail.clone(),
        }
    }
}

/// The incident as a notification of `event` shows it: a firing notice says firing (and no
/// resolve time) even when the incident resolved before it went out.
fn as_notified(i: &Incident, event: DeliveryEvent) -> IncidentBody {
    let mut b = IncidentBody::from(i);
    if event == DeliveryEvent::Firing {
        b.state = IncidentState::Firing;
        b.resolved_at = None;
    }
    b
}

/// The webhook `type` of an event.
pub fn webhook_type(event: DeliveryEvent) -> &'static str {
    match event {
        DeliveryEvent::Firing => "incident.firing",
        DeliveryEvent::Resolved => "incident.resolved",
        DeliveryEvent::Reminder => "incident.reminder",
        DeliveryEvent::Test => "test",
    }
}

/// The bodies of one delivery: one request for every channel type but PagerDuty, which gets
/// one event per incident. `routing_key` is the opened PagerDuty key.
pub fn bodies(
    kind: ChannelType,
    event: DeliveryEvent,
    incidents: &[Incident],
    routing_key: Option<&str>,
    now: i64,
) -> Vec<Value> {
    match kind {
        ChannelType::Webhook => vec![json!({
            "type": webhook_type(event),
            "timestamp": Timestamp(now),
            "data": { "incidents": incidents.iter().map(|i| as_notified(i, event)).collect::<Vec<_>>() },
        })],
        ChannelType::Slack => {
            vec![json!({ "text": chat_text(event, incidents, SLACK_MAX_CHARS) })]
        }
        ChannelType::Discord => {
            vec![json!({ "content": chat_text(event, incidents, DISCORD_MAX_CHARS) })]
        }
        ChannelType::Pagerduty => {
            if event == DeliveryEvent::Test {
                // A test opens and at once resolves a throwaway alert, so nobody stays paged.
                let dedup = format!("streamwatch-test-{now}");
                let trigger = pagerduty_event(
                    routing_key,
                    "trigger",
                    &dedup,
                    "streamwatch test notification",
                    now,
                    json!({}),
                );
                let resolve = pagerduty_event(
                    routing_key,
                    "resolve",
                    &dedup,
                    "streamwatch test notification",
                    now,
                    json!({}),
                );
                return vec![trigger, resolve];
            }
            let action = if event == DeliveryEvent::Resolved {
                "resolve"
            } else {
                "trigger"
            };
            incidents
                .iter()
                .map(|i| {
                    pagerduty_event(
                        routing_key,
                        action,
                        &format!("streamwatch-{}", i.id),
                        &summary(i, event),
                        now,
                        serde_json::to_value(as_notified(i, event)).unwrap_or(Value::Null),
                    )
                })
                .collect()
        }
    }
}

fn pagerduty_event(
    routing_key: Option<&str>,
    action: &str,
    dedup_key: &str,
    summary: &str,
    now: i64,
    details: Value,
) -> Value {
    json!({
        "routing_key": routing_key.unwrap_or_default(),
        "event_action": action,
        "dedup_key": dedup_key,
        "payload": {
            "summary": summary,
            "source": "streamwatch",
            "severity": "critical",
            "timestamp": Timestamp(now),
            "custom_details": details,
        },
    })
}

/// One line about an incident: the rule, what it watches, what happened (for a resolve,
/// that it recovered from it: the detail is still the fault's).
fn summary(i: &Incident, event: DeliveryEvent) -> String {
    let what = if event == DeliveryEvent::Resolved {
        format!("recovered (was: {})", i.detail)
    } else {
        i.detail.clone()
    };
    match &i.stream_name {
        Some(stream) => format!("{}: {stream}: {what}", i.rule_name),
        None => format!("{}: {what}", i.rule_name),
    }
}

/// A chat message: the count and event, then each incident (at most [`CHAT_LISTED`], each
/// line at most [`LINE_MAX_CHARS`]), then "and N more"; fewer are listed when the message
/// would exceed `max_chars`.
pub fn chat_text(event: DeliveryEvent, incidents: &[Incident], max_chars: usize) -> String {
    let n = incidents.len();
    let noun = if n == 1 { "incident" } else { "incidents" };
    let head = match event {
        DeliveryEvent::Firing => format!("streamwatch: {n} {noun} firing"),
        DeliveryEvent::Resolved => format!("streamwatch: {n} {noun} resolved"),
        DeliveryEvent::Reminder => format!("streamwatch: reminder, {n} {noun} still firing"),
        DeliveryEvent::Test => "streamwatch: test notification — this channel works".to_owned(),
    };
    let lines: Vec<String> = incidents
        .iter()
        .take(CHAT_LISTED)
        .map(|i| shorten(&format!("• {}", summary(i, event)), LINE_MAX_CHARS))
        .collect();
    let text = |listed: usize| {
        let mut out = vec![head.clone()];
        out.extend(lines[..listed].iter().cloned());
        if n > listed {
            out.push(format!("and {} more", n - listed));
        }
        out.join("\n")
    };
    let mut listed = lines.len();
    while listed > 0 && text(listed).chars().count() > max_chars {
        listed -= 1;
    }
    text(listed)
}

/// `s` cut to `max` characters, ending in "…" when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// `v1,<base64 HMAC-SHA256>` of `<id>.<timestamp>.<body>` under a `whsec_` secret; `None` for
/// a secret that is not one.
pub fn signature(secret: &str, webhook_id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix("whsec_")?).ok()?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).ok()?;
    mac.update(format!("{webhook_id}.{timestamp}.{body}").as_bytes());
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(n: usize, stream: bool) -> Incident {
        Incident {
            id: format!("inc{n}"),
            user_id: "u".into(),
            rule_id: "r".into(),
            rule_name: "Origin down".into(),
            kind: if stream {
                RuleKind::Stream
            } else {
                RuleKind::Qoe
            },
            stream_id: stream.then(|| format!("s{n}")),
            source_url: stream.then(|| format!("https://cdn.example.com/{n}.m3u8")),
            stream_name: stream.then(|| format!("Channel {n}")),
            state: IncidentState::Resolved,
            fired_at: 1_767_261_600_000,
            resolved_at: Some(1_767_261_660_000),
            detail: "3 probes not playable: HTTP 404".into(),
        }
    }

    #[test]
    fn signature_matches_the_standard_webhooks_example() {
        // The Standard Webhooks specification's own test vector.
        let sig = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
        assert_eq!(signature("nope", "m", 1, "b"), None);
    }

    #[test]
    fn webhook_bodies_list_every_incident_with_the_event_state() {
        let incs = vec![incident(1, true), incident(2, false)];
        let b = &bodies(
            ChannelType::Webhook,
            DeliveryEvent::Firing,
            &incs,
            None,
            1_767_261_700_000,
        )[0];
        assert_eq!(b["type"], "incident.firing");
        assert_eq!(b["timestamp"], "2026-01-01T10:01:40.000Z");
        assert_eq!(b["data"]["incidents"][0]["state"], "firing");
        assert_eq!(b["data"]["incidents"][0]["resolvedAt"], Value::Null);
        assert_eq!(b["data"]["incidents"][0]["streamName"], "Channel 1");
        assert_eq!(b["data"]["incidents"][1]["streamId"], Value::Null);
        let r = &bodies(
            ChannelType::Webhook,
            DeliveryEvent::Resolved,
            &incs,
            None,
            0,
        )[0];
        assert_eq!(r["type"], "incident.resolved");
        assert_eq!(
            r["data"]["incidents"][0]["resolvedAt"],
            "2026-01-01T10:01:00.000Z"
        );
    }

    #[test]
    fn chat_names_at_most_ten_then_counts() {
        let incs: Vec<Incident> = (0..13).map(|n| incident(n, true)).collect();
        let text = chat_text(DeliveryEvent::Firing, &incs, DISCORD_MAX_CHARS);
        assert!(text.starts_with("streamwatch: 13 incidents firing\n"));
        assert_eq!(text.lines().filter(|l| l.starts_with("• ")).count(), 10);
        assert!(text.ends_with("and 3 more"));
        let slack = &bodies(
            ChannelType::Slack,
            DeliveryEvent::Firing,
            &incs[..1],
            None,
            0,
        )[0];
        assert_eq!(
            slack["text"],
            "streamwatch: 1 incident firing\n• Origin down: Channel 0: 3 probes not playable: HTTP 404"
        );
        let discord = &bodies(
            ChannelType::Discord,
            DeliveryEvent::Resolved,
            &incs[..1],
            None,
            0,
        )[0];
        assert_eq!(
            discord["content"],
            "streamwatch: 1 incident resolved\n• Origin down: Channel 0: recovered (was: 3 probes not playable: HTTP 404)"
        );
    }

    #[test]
    fn a_discord_message_stays_under_its_2000_characters() {
        let incs: Vec<Incident> = (0..50)
            .map(|n| Incident {
                rule_name: "r".repeat(120),
                stream_name: Some("s".repeat(120)),
                detail: "d".repeat(500),
                ..incident(n, true)
            })
            .collect();
        let body = &bodies(ChannelType::Discord, DeliveryEvent::Firing, &incs, None, 0)[0];
        let content = body["content"].as_str().unwrap_or_default();
        assert!(
            content.chars().count() <= DISCORD_MAX_CHARS,
            "{}",
            content.len()
        );
        let listed = content.lines().filter(|l| l.starts_with("• ")).count();
        assert!(listed >= 5, "as many as fit: {listed}");
        assert!(content.lines().all(|l| l.chars().count() <= LINE_MAX_CHARS));
        assert!(content.ends_with(&format!("and {} more", 50 - listed)));
    }

    #[test]
    fn pagerduty_is_one_event_per_incident_with_a_stable_dedup_key() {
        let incs = vec![incident(1, true), incident(2, true)];
        let fire = bodies(
            ChannelType::Pagerduty,
            DeliveryEvent::Firing,
            &incs,
            Some("R123"),
            0,
        );
        let resolve = bodies(
            ChannelType::Pagerduty,
            DeliveryEvent::Resolved,
            &incs,
            Some("R123"),
            0,
        );
        assert_eq!(fire.len(), 2);
        assert_eq!(fire[0]["event_action"], "trigger");
        assert_eq!(resolve[0]["event_action"], "resolve");
        assert_eq!(fire[0]["dedup_key"], "streamwatch-inc1");
        assert_eq!(fire[0]["dedup_key"], resolve[0]["dedup_key"]);
        assert_eq!(fire[0]["routing_key"], "R123");
        assert_eq!(fire[0]["payload"]["severity"], "critical");
        assert_eq!(fire[0]["payload"]["source"], "streamwatch");
    }
}
