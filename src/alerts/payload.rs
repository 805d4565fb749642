//! What receivers get (alerts.md §3): the body of each channel type, and the Standard Webhooks
//! signature of a webhook attempt.
//!
//! Chat messages carry text, never markup from users (decisions.md §14): a rule over every
//! stream reports streams other users registered and named, so stream names, URLs and details
//! are escaped per Slack's rules (`&` `<` `>`) and per Discord's Markdown, Discord messages
//! allow no mentions, and PagerDuty summaries are plain text of at most 1,024 characters. The
//! only links are the service's own (a stream's page under `STREAMWATCH_PUBLIC_URL`).
//!
//! A PagerDuty routing key is never part of a stored body: bodies are stored with an empty
//! `routing_key`, which [`with_routing_key`] fills in at send time.

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
/// PagerDuty's limit of `payload.summary`.
const PAGERDUTY_SUMMARY_MAX_CHARS: usize = 1_024;
/// The detail of an incident resolved because its stream was deleted.
pub const STREAM_DELETED: &str = "stream deleted";

/// Where messages link to: the service's public address, when configured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Links<'a> {
    pub public_url: Option<&'a str>,
}

impl Links<'_> {
    /// The page of what an incident is about: its stream's page, or the QoE page.
    fn of(&self, i: &Incident) -> Option<String> {
        let base = self.public_url?;
        Some(match &i.stream_id {
            Some(id) => format!("{base}/app/streams/{id}"),
            None => format!("{base}/app/qoe"),
        })
    }
}

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
/// one event per incident (with an empty `routing_key`: see [`with_routing_key`]).
pub fn bodies(
    kind: ChannelType,
    event: DeliveryEvent,
    incidents: &[Incident],
    links: Links<'_>,
    now: i64,
) -> Vec<Value> {
    match kind {
        ChannelType::Webhook => vec![json!({
            "type": webhook_type(event),
            "timestamp": Timestamp(now),
            "data": { "incidents": incidents.iter().map(|i| as_notified(i, event)).collect::<Vec<_>>() },
        })],
        ChannelType::Slack => {
            vec![json!({ "text": chat_text(Chat::Slack, event, incidents, links) })]
        }
        ChannelType::Discord => {
            // No mention in the text pings anyone (`@everyone`, `<@id>`, roles).
            vec![json!({
                "content": chat_text(Chat::Discord, event, incidents, links),
                "allowed_mentions": { "parse": [] },
            })]
        }
        ChannelType::Pagerduty => {
            if event == DeliveryEvent::Test {
                // A test opens and at once resolves a throwaway alert, so nobody stays paged.
                let dedup = format!("streamwatch-test-{now}");
                let trigger = pagerduty_event(
                    "trigger",
                    &dedup,
                    "streamwatch test notification",
                    None,
                    now,
                    json!({}),
                );
                let resolve = pagerduty_event(
                    "resolve",
                    &dedup,
                    "streamwatch test notification",
                    None,
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
                        action,
                        &format!("streamwatch-{}", i.id),
                        &shorten(&summary(i, event), PAGERDUTY_SUMMARY_MAX_CHARS),
                        links.of(i),
                        now,
                        serde_json::to_value(as_notified(i, event)).unwrap_or(Value::Null),
                    )
                })
                .collect()
        }
    }
}

fn pagerduty_event(
    action: &str,
    dedup_key: &str,
    summary: &str,
    link: Option<String>,
    now: i64,
    details: Value,
) -> Value {
    let mut event = json!({
        "routing_key": "",
        "event_action": action,
        "dedup_key": dedup_key,
        "payload": {
            "summary": summary,
            "source": "streamwatch",
            "severity": "critical",
            "timestamp": Timestamp(now),
            "custom_details": details,
        },
    });
    if let Some(href) = link {
        event["links"] = json!([{ "href": href, "text": "Open in streamwatch" }]);
    }
    event
}

/// The request bodies of a PagerDuty delivery with the (opened) routing key, set at send time
/// so that the key is never stored with the body.
pub fn with_routing_key(mut bodies: Vec<Value>, routing_key: &str) -> Vec<Value> {
    for b in &mut bodies {
        if let Some(obj) = b.as_object_mut() {
            obj.insert("routing_key".into(), Value::String(routing_key.to_owned()));
        }
    }
    bodies
}

/// The chat services, each with its own escaping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chat {
    Slack,
    Discord,
}

impl Chat {
    fn max_chars(self) -> usize {
        match self {
            Chat::Slack => SLACK_MAX_CHARS,
            Chat::Discord => DISCORD_MAX_CHARS,
        }
    }

    /// Text from users as this service shows it: literally, never as markup.
    pub fn escape(self, s: &str) -> String {
        match self {
            Chat::Slack => slack_escape(s),
            Chat::Discord => discord_escape(s),
        }
    }

    /// A link of the service's own, after a line.
    fn link(self, href: &str) -> String {
        match self {
            Chat::Slack => format!(" <{}|open>", slack_escape(href)),
            // Angle brackets: a plain link, without an embed.
            Chat::Discord => format!(" <{href}>"),
        }
    }
}

/// Slack's escaping of message text: with `&`, `<` and `>` escaped no `<!channel>`,
/// `<@U…>` or `<url|label>` can be formed.
pub fn slack_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// Discord's Markdown escaped: every character that starts formatting, a link or a quote
/// (`\`, `*`, `_`, `~`, `` ` ``, `|`, `>`, `[`, `]`, `(`, `)`, `#`), and `-` at a line's start
/// (a list), gets a backslash.
pub fn discord_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut line_start = true;
    for c in s.chars() {
        match c {
            '\\' | '*' | '_' | '~' | '`' | '|' | '>' | '[' | ']' | '(' | ')' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '-' if line_start => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
        line_start = c == '\n';
    }
    out
}

/// Text on one line: line breaks and other control characters become spaces (a stream's
/// name cannot hold them, but an answer's detail might).
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// One line about an incident: the rule, what it watches, what happened (for a resolve,
/// that it recovered from it: the detail is still the fault's; or that its stream is gone).
/// As pieces, each marked `true` when it is text from users (names, URLs, details), so a chat
/// line escapes those and keeps its own punctuation as it is.
fn summary_pieces(i: &Incident, event: DeliveryEvent) -> Vec<(String, bool)> {
    let ours = |s: &str| (s.to_owned(), false);
    let theirs = |s: &str| (one_line(s), true);
    let mut pieces = vec![theirs(&i.rule_name), ours(": ")];
    if let Some(stream) = &i.stream_name {
        pieces.extend([theirs(stream), ours(": ")]);
    }
    if event == DeliveryEvent::Resolved && i.detail == STREAM_DELETED {
        pieces.push(ours(&format!("resolved: {STREAM_DELETED}")));
    } else if event == DeliveryEvent::Resolved {
        pieces.extend([ours("recovered (was: "), theirs(&i.detail), ours(")")]);
    } else {
        pieces.push(theirs(&i.detail));
    }
    pieces
}

/// The line of [`summary_pieces`] as plain text.
fn summary(i: &Incident, event: DeliveryEvent) -> String {
    summary_pieces(i, event)
        .into_iter()
        .map(|(text, _)| text)
        .collect()
}

/// The line of [`summary_pieces`] cut to `max` characters of text (ending in "…" when cut),
/// then with the users' pieces escaped for `chat`.
fn chat_line(chat: Chat, i: &Incident, event: DeliveryEvent, max: usize) -> String {
    let pieces = summary_pieces(i, event);
    let total: usize = pieces.iter().map(|(t, _)| t.chars().count()).sum();
    let mut budget = if total > max { max - 1 } else { max };
    let mut out = String::new();
    for (text, from_users) in pieces {
        if budget == 0 {
            break;
        }
        let kept: String = text.chars().take(budget).collect();
        budget -= kept.chars().count();
        if from_users {
            out.push_str(&chat.escape(&kept));
        } else {
            out.push_str(&kept);
        }
    }
    if total > max {
        out.push('…');
    }
    out
}

/// A chat message: the count and event, then each incident (at most [`CHAT_LISTED`], each
/// line's text at most [`LINE_MAX_CHARS`] before escaping, with a link to its page when the
/// public address is known), then "and N more"; fewer are listed when the message would
/// exceed the service's limit.
pub fn chat_text(
    chat: Chat,
    event: DeliveryEvent,
    incidents: &[Incident],
    links: Links<'_>,
) -> String {
    let max_chars = chat.max_chars();
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
        .map(|i| {
            let text = chat_line(chat, i, event, LINE_MAX_CHARS - 2);
            let link = links.of(i).map(|href| chat.link(&href)).unwrap_or_default();
            format!("• {text}{link}")
        })
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
            Links::default(),
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
            Links::default(),
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
        let text = chat_text(
            Chat::Discord,
            DeliveryEvent::Firing,
            &incs,
            Links::default(),
        );
        assert!(text.starts_with("streamwatch: 13 incidents firing\n"));
        assert_eq!(text.lines().filter(|l| l.starts_with("• ")).count(), 10);
        assert!(text.ends_with("and 3 more"));
        let slack = &bodies(
            ChannelType::Slack,
            DeliveryEvent::Firing,
            &incs[..1],
            Links::default(),
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
            Links::default(),
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
        let body = &bodies(
            ChannelType::Discord,
            DeliveryEvent::Firing,
            &incs,
            Links::default(),
            0,
        )[0];
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
        let stored = bodies(
            ChannelType::Pagerduty,
            DeliveryEvent::Firing,
            &incs,
            Links::default(),
            0,
        );
        assert!(
            stored.iter().all(|b| b["routing_key"] == ""),
            "the key is never part of a stored body"
        );
        let fire = with_routing_key(stored, "R123");
        let resolve = with_routing_key(
            bodies(
                ChannelType::Pagerduty,
                DeliveryEvent::Resolved,
                &incs,
                Links::default(),
                0,
            ),
            "R123",
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

    /// Finding 4 of the hardening round: a stream named by another user must not ping a
    /// channel or disguise a link.
    fn hostile(n: usize) -> Incident {
        Incident {
            stream_name: Some(
                "<!channel> @everyone <https://evil.example/login|Sign in again> [Sign in](https://evil.example) *now* - # x".into(),
            ),
            source_url: Some("https://evil.example/a_b.m3u8?x=1&y=<2>".into()),
            detail: "HTTP 500\n- injected line".into(),
            ..incident(n, true)
        }
    }

    #[test]
    fn slack_text_escapes_every_angle_bracket_and_ampersand() {
        let b = &bodies(
            ChannelType::Slack,
            DeliveryEvent::Firing,
            &[hostile(1)],
            Links::default(),
            0,
        )[0];
        let text = b["text"].as_str().unwrap_or_default();
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert!(text.contains("&lt;!channel&gt;"), "{text}");
        assert!(text.contains("&lt;https://evil.example/login|Sign in again&gt;"));
        assert_eq!(text.lines().count(), 2, "one line per incident: {text}");
        assert_eq!(slack_escape("a & b <c>"), "a &amp; b &lt;c&gt;");
    }

    #[test]
    fn discord_content_escapes_markdown_and_allows_no_mentions() {
        let b = &bodies(
            ChannelType::Discord,
            DeliveryEvent::Firing,
            &[hostile(1)],
            Links::default(),
            0,
        )[0];
        assert_eq!(b["allowed_mentions"], json!({ "parse": [] }));
        let content = b["content"].as_str().unwrap_or_default();
        assert!(
            content.contains(r"\[Sign in\]\(https://evil.example\)"),
            "no masked link: {content}"
        );
        assert!(content.contains(r"\*now\*"), "{content}");
        assert_eq!(content.lines().count(), 2, "{content}");
        assert_eq!(
            discord_escape("- a_b\n# c|d `e` ~f~ >g \\ - h"),
            r"\- a\_b
\# c\|d \`e\` \~f\~ \>g \\ - h"
        );
    }

    #[test]
    fn pagerduty_summaries_are_one_plain_line_of_at_most_1024_characters() {
        let long = Incident {
            rule_name: "r".repeat(120),
            detail: "d\n".repeat(2000),
            ..hostile(1)
        };
        let b = &bodies(
            ChannelType::Pagerduty,
            DeliveryEvent::Firing,
            &[long],
            Links::default(),
            0,
        )[0];
        let summary = b["payload"]["summary"].as_str().unwrap_or_default();
        assert_eq!(summary.chars().count(), 1024);
        assert!(!summary.contains('\n'));
    }

    #[test]
    fn messages_link_to_the_streams_page_under_the_public_address() {
        let links = Links {
            public_url: Some("https://watch.example.com"),
        };
        let i = incident(1, true);
        let slack = &bodies(
            ChannelType::Slack,
            DeliveryEvent::Firing,
            std::slice::from_ref(&i),
            links,
            0,
        )[0];
        assert!(slack["text"]
            .as_str()
            .unwrap_or_default()
            .ends_with(" <https://watch.example.com/app/streams/s1|open>"));
        let discord = &bodies(
            ChannelType::Discord,
            DeliveryEvent::Firing,
            std::slice::from_ref(&i),
            links,
            0,
        )[0];
        assert!(discord["content"]
            .as_str()
            .unwrap_or_default()
            .ends_with(" <https://watch.example.com/app/streams/s1>"));
        let pd = &bodies(
            ChannelType::Pagerduty,
            DeliveryEvent::Firing,
            &[i],
            links,
            0,
        )[0];
        assert_eq!(
            pd["links"][0]["href"],
            "https://watch.example.com/app/streams/s1"
        );
        // Without a public address, no link.
        let plain = &bodies(
            ChannelType::Slack,
            DeliveryEvent::Firing,
            &[incident(1, true)],
            Links::default(),
            0,
        )[0];
        assert!(!plain["text"].as_str().unwrap_or_default().contains("http"));
    }

    #[test]
    fn a_resolve_of_a_deleted_stream_says_so() {
        let i = Incident {
            detail: STREAM_DELETED.into(),
            ..incident(1, true)
        };
        let text = chat_text(Chat::Slack, DeliveryEvent::Resolved, &[i], Links::default());
        assert!(
            text.ends_with("Origin down: Channel 1: resolved: stream deleted"),
            "{text}"
        );
    }
}
