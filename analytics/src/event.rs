//! The compact event that view derivation reads: time, type and the few payload fields
//! analytics.md §2 needs, parsed tolerantly from a stored payload's JSON text.

use ingest::{EndReason, EventType, Payload};

use crate::session::StoredEvent;
use serde::Deserialize;
use serde_json::value::RawValue;

/// One telemetry event as view derivation sees it.
///
/// Only the fields a rule of analytics.md §2 reads are kept; each is `None` (or
/// `false`) when the event's type does not carry it or the stored payload lacks it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event time, epoch milliseconds (UTC).
    pub ts_ms: i64,
    /// Event type.
    pub event_type: EventType,
    /// `playback_start.startupMs`.
    pub startup_ms: Option<f64>,
    /// `playback_start.contentId`.
    pub content_id: Option<String>,
    /// `quality_change`: true when `from` is a non-empty string, i.e. a rendition switch
    /// (`from: ""` marks the initial rendition; a missing `from` is treated alike).
    pub switch: bool,
    /// `quality_change.bitrate`.
    pub bitrate: Option<f64>,
    /// `error.fatal` (`false` when absent).
    pub fatal: bool,
    /// `error.code`.
    pub code: Option<String>,
    /// `session_end.reason`.
    pub reason: Option<EndReason>,
}

impl Event {
    /// An event of `event_type` at `ts_ms` with no payload fields.
    pub fn new(ts_ms: i64, event_type: EventType) -> Self {
        Event {
            ts_ms,
            event_type,
            startup_ms: None,
            content_id: None,
            switch: false,
            bitrate: None,
            fatal: false,
            code: None,
            reason: None,
        }
    }

    /// A `playback_start` with an optional `startupMs`.
    pub fn playback_start(ts_ms: i64, startup_ms: Option<f64>) -> Self {
        Event {
            startup_ms,
            ..Event::new(ts_ms, EventType::PlaybackStart)
        }
    }

    /// A `quality_change`; `from_empty` marks the initial rendition (`from: ""`).
    pub fn quality_change(ts_ms: i64, bitrate: f64, from_empty: bool) -> Self {
        Event {
            switch: !from_empty,
            bitrate: Some(bitrate),
            ..Event::new(ts_ms, EventType::QualityChange)
        }
    }

    /// An `error` with its code and `fatal` flag.
    pub fn error(ts_ms: i64, code: &str, fatal: bool) -> Self {
        Event {
            fatal,
            code: Some(code.to_owned()),
            ..Event::new(ts_ms, EventType::Error)
        }
    }

    /// A `session_end` with its reason.
    pub fn session_end(ts_ms: i64, reason: EndReason) -> Self {
        Event {
            reason: Some(reason),
            ..Event::new(ts_ms, EventType::SessionEnd)
        }
    }

    /// Parses a stored payload (compact JSON text) of an event of `event_type`.
    ///
    /// Tolerant: the payload was validated at ingest, so anything unexpected here
    /// (malformed JSON, a field of the wrong JSON type, a non-finite number) leaves the
    /// field unset instead of failing the whole view.
    pub fn parse(ts_ms: i64, event_type: EventType, payload: &str) -> Self {
        let mut ev = Event::new(ts_ms, event_type);
        if !needs_payload(event_type) {
            // No rule reads these types' payloads: skip the JSON parse.
            return ev;
        }
        // Only the fields a rule reads, each kept as its raw JSON text and read on its own:
        // the refresher parses every such payload of a step, and a whole `Value` tree
        // (a map of owned keys per payload) was most of that cost.
        let Ok(f) = serde_json::from_str::<PayloadFields<'_>>(payload) else {
            return ev;
        };
        fn read<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
            raw.and_then(|r| serde_json::from_str(r.get()).ok())
        }
        let num = |raw| read::<f64>(raw).filter(|v| v.is_finite());
        let text = |raw| read::<String>(raw);
        match event_type {
            EventType::PlaybackStart => {
                ev.startup_ms = num(f.startup_ms);
                ev.content_id = text(f.content_id);
            }
            EventType::QualityChange => {
                ev.switch = text(f.from).is_some_and(|from| !from.is_empty());
                ev.bitrate = num(f.bitrate);
            }
            EventType::Error => {
                ev.fatal = read::<bool>(f.fatal).unwrap_or(false);
                ev.code = text(f.code);
            }
            EventType::SessionEnd => {
                ev.reason = text(f.reason).and_then(|r| EndReason::from_wire(&r));
            }
            EventType::PlaybackPause
            | EventType::PlaybackResume
            | EventType::RebufferStart
            | EventType::RebufferEnd => {}
        }
        ev
    }

    /// The event of a validated ingest event, as [`Event::parse`] would read it back
    /// from its stored payload (without the JSON: live views take each batch this way).
    pub fn from_wire(e: &ingest::Event) -> Self {
        let mut ev = Event::new(e.ts_ms, e.event_type());
        match &e.payload {
            Payload::PlaybackStart {
                content_id,
                startup_ms,
                ..
            } => {
                ev.startup_ms = startup_ms.filter(|v| v.is_finite());
                ev.content_id = Some(content_id.clone());
            }
            Payload::QualityChange { from, bitrate, .. } => {
                ev.switch = !from.is_empty();
                ev.bitrate = Some(*bitrate).filter(|v| v.is_finite());
            }
            Payload::Error { code, fatal, .. } => {
                ev.fatal = *fatal;
                ev.code = Some(code.clone());
            }
            Payload::SessionEnd { reason, .. } => ev.reason = Some(*reason),
            Payload::PlaybackPause { .. }
            | Payload::PlaybackResume { .. }
            | Payload::RebufferStart { .. }
            | Payload::RebufferEnd { .. } => {}
        }
        ev
    }

    /// Parses an event as read back from a sink.
    pub fn from_stored(stored: &StoredEvent) -> Self {
        Event::parse(stored.ts_ms, stored.event_type, &stored.payload)
    }

    /// The ordering key of analytics.md §2: `ts`, then the contract order of types.
    pub fn order_key(&self) -> (i64, usize) {
        (self.ts_ms, self.event_type.index())
    }
}

/// The payload fields some rule of analytics.md §2 reads, unparsed; every other field is
/// skipped. A payload that is not a JSON object fails as a whole (no field set).
#[derive(Deserialize)]
struct PayloadFields<'a> {
    #[serde(rename = "startupMs", borrow, default)]
    startup_ms: Option<&'a RawValue>,
    #[serde(rename = "contentId", borrow, default)]
    content_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    from: Option<&'a RawValue>,
    #[serde(borrow, default)]
    bitrate: Option<&'a RawValue>,
    #[serde(borrow, default)]
    fatal: Option<&'a RawValue>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(borrow, default)]
    reason: Option<&'a RawValue>,
}

/// True for the event types whose payload a rule of analytics.md §2 reads
/// (`playback_start`, `quality_change`, `error`, `session_end`); the others are known
/// by their time and type alone, so stores need not even send their payloads.
pub const fn needs_payload(event_type: EventType) -> bool {
    matches!(
        event_type,
        EventType::PlaybackStart
            | EventType::QualityChange
            | EventType::Error
            | EventType::SessionEnd
    )
}

/// Keeps the first event of each `(ts, type)` of one view, in the order given.
///
/// `events` must be in write order (duplicates included), which is what storage
/// does: the first stored row of a key wins, so a retried batch changes nothing.
pub fn dedup(events: impl IntoIterator<Item = Event>) -> Vec<Event> {
    let mut seen = std::collections::HashSet::new();
    events
        .into_iter()
        .filter(|e| seen.insert(e.order_key()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_playback_start_with_and_without_startup_ms() {
        let e = Event::parse(
            5,
            EventType::PlaybackStart,
            r#"{"positionMs":0,"durationMs":1,"contentId":"c1","startupMs":812.5}"#,
        );
        assert_eq!(e.ts_ms, 5);
        assert_eq!(e.startup_ms, Some(812.5));
        assert_eq!(e.content_id.as_deref(), Some("c1"));
        let old = Event::parse(
            5,
            EventType::PlaybackStart,
            r#"{"positionMs":0,"durationMs":1,"contentId":"c1"}"#,
        );
        assert_eq!(old.startup_ms, None);
    }

    #[test]
    fn parses_quality_change_initial_and_switch() {
        let initial = Event::parse(
            1,
            EventType::QualityChange,
            r#"{"from":"","to":"720p","bitrate":2500000,"width":1280,"height":720}"#,
        );
        assert!(!initial.switch);
        assert_eq!(initial.bitrate, Some(2_500_000.0));
        let switch = Event::parse(
            1,
            EventType::QualityChange,
            r#"{"from":"720p","to":"1080p","bitrate":5e6}"#,
        );
        assert!(switch.switch);
        assert_eq!(switch.bitrate, Some(5_000_000.0));
        let missing = Event::parse(1, EventType::QualityChange, r#"{"to":"1080p"}"#);
        assert!(!missing.switch);
        assert_eq!(missing.bitrate, None);
    }

    #[test]
    fn parses_error_and_session_end() {
        let e = Event::parse(
            1,
            EventType::Error,
            r#"{"code":"MEDIA_ERR_DECODE","message":"m","fatal":true}"#,
        );
        assert!(e.fatal);
        assert_eq!(e.code.as_deref(), Some("MEDIA_ERR_DECODE"));
        let nf = Event::parse(1, EventType::Error, r#"{"code":"x","message":"m"}"#);
        assert!(!nf.fatal);
        let end = Event::parse(
            1,
            EventType::SessionEnd,
            r#"{"reason":"error","durationMs":3}"#,
        );
        assert_eq!(end.reason, Some(EndReason::Error));
        let odd = Event::parse(1, EventType::SessionEnd, r#"{"reason":"crashed"}"#);
        assert_eq!(odd.reason, None);
    }

    #[test]
    fn tolerates_malformed_and_mistyped_payloads() {
        for payload in ["", "not json", "[]", "null", r#"{"startupMs":"12"}"#] {
            let e = Event::parse(7, EventType::PlaybackStart, payload);
            assert_eq!(e, Event::new(7, EventType::PlaybackStart), "{payload:?}");
        }
        let e = Event::parse(7, EventType::Error, r#"{"fatal":"true","code":5}"#);
        assert!(!e.fatal);
        assert_eq!(e.code, None);
        // null, nested values among the skipped fields, escapes in a kept string.
        let e = Event::parse(
            7,
            EventType::Error,
            r#"{"detail":{"a":[1,{"b":null}]},"fatal":null,"code":"E\"1\u00e9"}"#,
        );
        assert!(!e.fatal);
        assert_eq!(e.code.as_deref(), Some("E\"1é"));
        let e = Event::parse(
            7,
            EventType::QualityChange,
            r#"{"from":null,"bitrate":null}"#,
        );
        assert_eq!(e, Event::new(7, EventType::QualityChange));
    }

    #[test]
    fn fields_of_other_types_are_ignored() {
        let e = Event::parse(
            1,
            EventType::RebufferStart,
            r#"{"positionMs":1,"bufferedMs":2,"bitrate":5,"fatal":true}"#,
        );
        assert_eq!(e, Event::new(1, EventType::RebufferStart));
    }

    #[test]
    fn from_stored_reads_type_ts_and_payload() {
        let stored = StoredEvent {
            event_type: EventType::Error,
            ts_ms: 42,
            payload: r#"{"code":"E","message":"m","fatal":true}"#.into(),
        };
        assert_eq!(Event::from_stored(&stored), Event::error(42, "E", true));
    }

    #[test]
    fn dedup_keeps_first_of_each_ts_and_type() {
        let events = vec![
            Event::error(10, "first", true),
            Event::new(10, EventType::RebufferStart),
            Event::error(10, "second", false),
            Event::error(11, "third", false),
            Event::new(10, EventType::RebufferStart),
        ];
        let kept = dedup(events);
        assert_eq!(
            kept,
            vec![
                Event::error(10, "first", true),
                Event::new(10, EventType::RebufferStart),
                Event::error(11, "third", false),
            ]
        );
    }
    #[test]
    fn a_wire_event_reads_as_its_stored_payload_parses() {
        // Every golden valid batch and a realistic and an adversarial fleet, through the
        // route's validation: the event taken from the typed payload equals the one parsed
        // back from what the sink stores.
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../ingest/fixtures/valid");
        for entry in std::fs::read_dir(fixtures).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                bodies.push(std::fs::read(&path).expect("read"));
            }
        }
        assert!(!bodies.is_empty());
        for cfg in [
            crate::fleet::FleetConfig::realistic(3, 200),
            crate::fleet::FleetConfig::adversarial(3, 200),
        ] {
            for b in crate::fleet::Fleet::generate(&cfg).batches {
                bodies.push(b.wire_json("k").into_bytes());
            }
        }
        let mut checked = 0;
        for mut body in bodies {
            let Ok(batch) = ingest::parse_batch(&mut body) else {
                continue;
            };
            for e in &batch.events {
                let stored = Event::parse(e.ts_ms, e.event_type(), &e.payload.to_json());
                assert_eq!(Event::from_wire(e), stored, "{e:?}");
                checked += 1;
            }
        }
        assert!(checked > 1_000, "{checked}");
    }
}
