//! Request body → validated [`Batch`]: simd-json parsing and the contract's
//! validation rules, with zod v3 style messages keyed by envelope field.
//!
//! Rules (interface.md "Telemetry ingest", decisions.md §7):
//! - `apiKey`, `sessionId`: strings of at least 1 character;
//! - `events`: 1 to [`MAX_EVENTS`] events, each `{ type, ts, payload }` with `type`
//!   one of the eight event types, `ts` an ISO 8601 timestamp and every payload
//!   field present with its JSON type; unknown fields are ignored;
//! - the body is at most [`MAX_BODY_BYTES`].
//!
//! Only the first issue per envelope field is reported (`apiKey`, `sessionId`,
//! `events`). Issues inside an event carry their path as a prefix:
//! `events.3.payload.positionMs: Expected number, received string`.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};
use std::cell::RefCell;

use simd_json::prelude::*;
use simd_json::tape::{Object, Value};
use simd_json::Buffers;

use crate::time::parse_iso8601_ms;
use crate::wire::{Batch, EndReason, Event, EventType, Payload};

/// Largest accepted request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1_048_576;

/// Most events accepted in one batch.
pub const MAX_EVENTS: usize = 1000;

/// Message for a body that is not parseable JSON.
pub const MSG_INVALID_JSON: &str = "Invalid JSON";

/// Message for a body over [`MAX_BODY_BYTES`].
pub const MSG_BODY_TOO_LARGE: &str = "Request body must be at most 1048576 byte(s)";

/// An envelope field of the batch; the keys of a 400 `errors` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `apiKey`
    ApiKey,
    /// `sessionId`
    SessionId,
    /// `events` (also used for body-level problems: malformed JSON, size).
    Events,
}

impl Field {
    /// The JSON key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Field::ApiKey => "apiKey",
            Field::SessionId => "sessionId",
            Field::Events => "events",
        }
    }
}

/// Validation failure: the first message per envelope field. Serializes as the
/// contract's 400 body, `{"errors":{"apiKey":…,"sessionId":…,"events":…}}`
/// (only the keys that have an issue, in that order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    api_key: Option<String>,
    session_id: Option<String>,
    events: Option<String>,
}

impl ValidationErrors {
    /// An error with a single field.
    pub fn single(field: Field, message: impl Into<String>) -> Self {
        let mut e = Self::default();
        e.set(field, message.into());
        e
    }

    /// Records `message` for `field` unless the field already has one.
    fn set(&mut self, field: Field, message: String) {
        let slot = match field {
            Field::ApiKey => &mut self.api_key,
            Field::SessionId => &mut self.session_id,
            Field::Events => &mut self.events,
        };
        if slot.is_none() {
            *slot = Some(message);
        }
    }

    /// The message recorded for `field`.
    pub fn get(&self, field: Field) -> Option<&str> {
        match field {
            Field::ApiKey => self.api_key.as_deref(),
            Field::SessionId => self.session_id.as_deref(),
            Field::Events => self.events.as_deref(),
        }
    }

    /// `(key, message)` pairs in envelope order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [Field::ApiKey, Field::SessionId, Field::Events]
            .into_iter()
            .filter_map(move |f| self.get(f).map(|m| (f.as_str(), m)))
    }

    /// True when no issue was recorded.
    pub fn is_empty(&self) -> bool {
        self.api_key.is_none() && self.session_id.is_none() && self.events.is_none()
    }

    /// The 400 body as a JSON value.
    pub fn to_json(&self) -> serde_json::Value {
        let errors: serde_json::Map<String, serde_json::Value> = self
            .iter()
            .map(|(k, m)| (k.to_owned(), serde_json::Value::String(m.to_owned())))
            .collect();
        serde_json::json!({ "errors": errors })
    }
}

impl std::fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (k, m) in self.iter() {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{k}: {m}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

impl Serialize for ValidationErrors {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Inner<'a>(&'a ValidationErrors);
        impl Serialize for Inner<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                for (k, v) in self.0.iter() {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("errors", &Inner(self))?;
        m.end()
    }
}

/// The 400 error for a body larger than [`MAX_BODY_BYTES`] (keyed `events`; the
/// contract has no 413).
pub fn body_too_large() -> ValidationErrors {
    ValidationErrors::single(Field::Events, MSG_BODY_TOO_LARGE)
}

/// Parses and validates a request body. The buffer is used as simd-json's scratch
/// space and is left modified.
///
/// Bodies over [`MAX_BODY_BYTES`] are refused with [`body_too_large`] without
/// being parsed.
pub fn parse_batch(body: &mut [u8]) -> Result<Batch, ValidationErrors> {
    if body.len() > MAX_BODY_BYTES {
        return Err(body_too_large());
    }
    // simd-json's scratch buffers are reused per thread: parsing then allocates
    // little beyond the tape, and the tape (not a DOM of hash maps) is walked.
    thread_local! {
        static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::new(64 * 1024));
    }
    BUFFERS.with(|buffers| {
        let mut buffers = buffers.borrow_mut();
        let tape = match simd_json::to_tape_with_buffers(body, &mut buffers) {
            Ok(t) => t,
            Err(_) => return Err(ValidationErrors::single(Field::Events, MSG_INVALID_JSON)),
        };
        validate_value(tape.as_value())
    })
}

/// Validates a parsed JSON document.
fn validate_value(value: Value<'_, '_>) -> Result<Batch, ValidationErrors> {
    let Some(root) = value.as_object() else {
        return Err(ValidationErrors::single(
            Field::Events,
            invalid_type("object", value),
        ));
    };
    let mut errors = ValidationErrors::default();

    let api_key = non_empty_string(get(&root, "apiKey"))
        .map_err(|m| errors.set(Field::ApiKey, m))
        .ok();
    let session_id = non_empty_string(get(&root, "sessionId"))
        .map_err(|m| errors.set(Field::SessionId, m))
        .ok();
    let events = events(get(&root, "events"))
        .map_err(|m| errors.set(Field::Events, m))
        .ok();

    match (api_key, session_id, events) {
        (Some(api_key), Some(session_id), Some(events)) if errors.is_empty() => Ok(Batch {
            api_key: api_key.to_owned(),
            session_id: session_id.to_owned(),
            events,
        }),
        _ => Err(errors),
    }
}

/// The value of `key`; the last one when a key repeats, as `JSON.parse` does.
fn get<'t, 'i>(obj: &Object<'t, 'i>, key: &str) -> Option<Value<'t, 'i>> {
    let mut found = None;
    for (k, v) in obj.iter() {
        if k == key {
            found = Some(v);
        }
    }
    found
}

/// zod's name for a JSON value's type.
fn type_name(v: Value<'_, '_>) -> &'static str {
    if v.is_null() {
        "null"
    } else if v.is_bool() {
        "boolean"
    } else if v.is_number() {
        "number"
    } else if v.is_str() {
        "string"
    } else if v.is_array() {
        "array"
    } else {
        "object"
    }
}

/// zod's `invalid_type` message.
fn invalid_type(expected: &str, got: Value<'_, '_>) -> String {
    format!("Expected {expected}, received {}", type_name(got))
}

const REQUIRED: &str = "Required";

fn string<'i>(v: Option<Value<'_, 'i>>) -> Result<&'i str, String> {
    let v = v.ok_or_else(|| REQUIRED.to_owned())?;
    simd_json::prelude::ValueIntoString::into_string(v).ok_or_else(|| invalid_type("string", v))
}

fn non_empty_string<'i>(v: Option<Value<'_, 'i>>) -> Result<&'i str, String> {
    let s = string(v)?;
    if s.is_empty() {
        return Err("String must contain at least 1 character(s)".to_owned());
    }
    Ok(s)
}

fn number(v: Option<Value<'_, '_>>) -> Result<f64, String> {
    let v = v.ok_or_else(|| REQUIRED.to_owned())?;
    if !v.is_number() {
        return Err(invalid_type("number", v));
    }
    v.cast_f64().ok_or_else(|| invalid_type("number", v))
}

fn boolean(v: Option<Value<'_, '_>>) -> Result<bool, String> {
    let v = v.ok_or_else(|| REQUIRED.to_owned())?;
    v.as_bool().ok_or_else(|| invalid_type("boolean", v))
}

/// `'a' | 'b' | 'c'`, as zod joins enum values.
fn join_options<'a>(options: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, o) in options.enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        let _ = write!(out, "'{o}'");
    }
    out
}

/// A `z.enum([...])` check.
fn enumeration<'a, T: Copy>(
    v: Option<Value<'_, '_>>,
    options: &'a [T],
    name: impl Fn(T) -> &'a str,
) -> Result<T, String> {
    let v = v.ok_or_else(|| REQUIRED.to_owned())?;
    let joined = || join_options(options.iter().map(|o| name(*o)));
    let Some(s) = v.as_str() else {
        return Err(format!("Expected {}, received {}", joined(), type_name(v)));
    };
    options
        .iter()
        .copied()
        .find(|o| name(*o) == s)
        .ok_or_else(|| format!("Invalid enum value. Expected {}, received '{s}'", joined()))
}

fn events(v: Option<Value<'_, '_>>) -> Result<Vec<Event>, String> {
    let v = v.ok_or_else(|| REQUIRED.to_owned())?;
    let items = v.as_array().ok_or_else(|| invalid_type("array", v))?;
    if items.is_empty() {
        return Err("Array must contain at least 1 element(s)".to_owned());
    }
    if items.len() > MAX_EVENTS {
        return Err(format!(
            "Array must contain at most {MAX_EVENTS} element(s)"
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match event(item) {
            Ok(e) => out.push(e),
            Err((path, msg)) => {
                return Err(if path.is_empty() {
                    format!("events.{i}: {msg}")
                } else {
                    format!("events.{i}.{path}: {msg}")
                })
            }
        }
    }
    Ok(out)
}

/// An issue inside one event: (path relative to the event, message).
type EventIssue = (String, String);

fn at(path: &str) -> impl Fn(String) -> EventIssue + '_ {
    move |m| (path.to_owned(), m)
}

fn event(v: Value<'_, '_>) -> Result<Event, EventIssue> {
    let obj = v
        .as_object()
        .ok_or_else(|| (String::new(), invalid_type("object", v)))?;
    let event_type =
        enumeration(get(&obj, "type"), &EventType::ALL, EventType::as_str).map_err(at("type"))?;
    let ts = string(get(&obj, "ts")).map_err(at("ts"))?;
    let ts_ms =
        parse_iso8601_ms(ts).ok_or_else(|| ("ts".to_owned(), "Invalid datetime".to_owned()))?;
    let payload =
        get(&obj, "payload").ok_or_else(|| ("payload".to_owned(), REQUIRED.to_owned()))?;
    let p = payload
        .as_object()
        .ok_or_else(|| ("payload".to_owned(), invalid_type("object", payload)))?;

    let field = |name: &'static str| move |m: String| (format!("payload.{name}"), m);
    let payload = match event_type {
        EventType::PlaybackStart => Payload::PlaybackStart {
            position_ms: number(get(&p, "positionMs")).map_err(field("positionMs"))?,
            duration_ms: number(get(&p, "durationMs")).map_err(field("durationMs"))?,
            content_id: string(get(&p, "contentId"))
                .map_err(field("contentId"))?
                .to_owned(),
        },
        EventType::PlaybackPause
        | EventType::PlaybackResume
        | EventType::RebufferStart
        | EventType::RebufferEnd => {
            let position_ms = number(get(&p, "positionMs")).map_err(field("positionMs"))?;
            let buffered_ms = number(get(&p, "bufferedMs")).map_err(field("bufferedMs"))?;
            match event_type {
                EventType::PlaybackPause => Payload::PlaybackPause {
                    position_ms,
                    buffered_ms,
                },
                EventType::PlaybackResume => Payload::PlaybackResume {
                    position_ms,
                    buffered_ms,
                },
                EventType::RebufferStart => Payload::RebufferStart {
                    position_ms,
                    buffered_ms,
                },
                _ => Payload::RebufferEnd {
                    position_ms,
                    buffered_ms,
                },
            }
        }
        EventType::QualityChange => Payload::QualityChange {
            from: string(get(&p, "from")).map_err(field("from"))?.to_owned(),
            to: string(get(&p, "to")).map_err(field("to"))?.to_owned(),
            bitrate: number(get(&p, "bitrate")).map_err(field("bitrate"))?,
        },
        EventType::Error => Payload::Error {
            code: string(get(&p, "code")).map_err(field("code"))?.to_owned(),
            message: string(get(&p, "message"))
                .map_err(field("message"))?
                .to_owned(),
            fatal: boolean(get(&p, "fatal")).map_err(field("fatal"))?,
        },
        EventType::SessionEnd => Payload::SessionEnd {
            reason: enumeration(get(&p, "reason"), &EndReason::ALL, EndReason::as_str)
                .map_err(field("reason"))?,
            duration_ms: number(get(&p, "durationMs")).map_err(field("durationMs"))?,
        },
    };
    Ok(Event { ts_ms, payload })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value as J};

    const TS: &str = "2024-05-01T12:34:56.789Z";

    /// (type, complete payload, [(field, JSON type)]).
    type Case = (&'static str, J, Vec<(&'static str, &'static str)>);

    /// Every event type with a complete payload, and the JSON type of each field.
    fn complete() -> Vec<Case> {
        vec![
            (
                "playback_start",
                json!({"positionMs": 0, "durationMs": 3600000, "contentId": "movie-1"}),
                vec![
                    ("positionMs", "number"),
                    ("durationMs", "number"),
                    ("contentId", "string"),
                ],
            ),
            (
                "playback_pause",
                json!({"positionMs": 1000, "bufferedMs": 5000}),
                vec![("positionMs", "number"), ("bufferedMs", "number")],
            ),
            (
                "playback_resume",
                json!({"positionMs": 1000, "bufferedMs": 5000}),
                vec![("positionMs", "number"), ("bufferedMs", "number")],
            ),
            (
                "rebuffer_start",
                json!({"positionMs": 1000, "bufferedMs": 0}),
                vec![("positionMs", "number"), ("bufferedMs", "number")],
            ),
            (
                "rebuffer_end",
                json!({"positionMs": 1000, "bufferedMs": 2000}),
                vec![("positionMs", "number"), ("bufferedMs", "number")],
            ),
            (
                "quality_change",
                json!({"from": "720p", "to": "1080p", "bitrate": 6000000}),
                vec![("from", "string"), ("to", "string"), ("bitrate", "number")],
            ),
            (
                "error",
                json!({"code": "MEDIA_ERR_DECODE", "message": "decode failed", "fatal": false}),
                vec![
                    ("code", "string"),
                    ("message", "string"),
                    ("fatal", "boolean"),
                ],
            ),
            (
                "session_end",
                json!({"reason": "ended", "durationMs": 3600000}),
                vec![("reason", "enum"), ("durationMs", "number")],
            ),
        ]
    }

    fn body_with(events: J) -> J {
        json!({"apiKey": "svc_key", "sessionId": "sess-1", "events": events})
    }

    fn event(t: &str, payload: J) -> J {
        json!({"type": t, "ts": TS, "payload": payload})
    }

    fn run(body: &J) -> Result<Batch, ValidationErrors> {
        let mut bytes = serde_json::to_vec(body).expect("serialize");
        parse_batch(&mut bytes)
    }

    fn run_raw(body: &str) -> Result<Batch, ValidationErrors> {
        let mut bytes = body.as_bytes().to_vec();
        parse_batch(&mut bytes)
    }

    /// The whole 400 body for `body`.
    fn err(body: &J) -> J {
        run(body).expect_err("must be rejected").to_json()
    }

    fn events_err(msg: &str) -> J {
        json!({"errors": {"events": msg}})
    }

    const ENUM_TYPES: &str = "'playback_start' | 'playback_pause' | 'playback_resume' | \
        'rebuffer_start' | 'rebuffer_end' | 'quality_change' | 'error' | 'session_end'";

    #[test]
    fn accepts_every_event_type_with_all_fields() {
        let events: Vec<J> = complete()
            .into_iter()
            .map(|(t, p, _)| event(t, p))
            .collect();
        let batch = run(&body_with(J::Array(events))).expect("valid");
        assert_eq!(batch.api_key, "svc_key");
        assert_eq!(batch.session_id, "sess-1");
        assert_eq!(batch.events.len(), 8);
        for (e, t) in batch.events.iter().zip(EventType::ALL) {
            assert_eq!(e.event_type(), t);
            assert_eq!(e.ts_ms, 1_714_566_896_789);
        }
        assert_eq!(
            batch.events[0].payload,
            Payload::PlaybackStart {
                position_ms: 0.0,
                duration_ms: 3_600_000.0,
                content_id: "movie-1".into()
            }
        );
        assert_eq!(
            batch.events[6].payload,
            Payload::Error {
                code: "MEDIA_ERR_DECODE".into(),
                message: "decode failed".into(),
                fatal: false
            }
        );
        assert_eq!(
            batch.events[7].payload,
            Payload::SessionEnd {
                reason: EndReason::Ended,
                duration_ms: 3_600_000.0
            }
        );
    }

    #[test]
    fn stored_payload_round_trips_the_known_fields() {
        for (t, p, _) in complete() {
            let batch = run(&body_with(json!([event(t, p.clone())]))).expect("valid");
            let stored: J = serde_json::from_str(&batch.events[0].payload.to_json()).expect("json");
            assert_eq!(stored, p, "{t}");
        }
    }

    #[test]
    fn rejects_each_missing_payload_field() {
        for (t, p, fields) in complete() {
            for (name, _) in &fields {
                let mut p = p.clone();
                p.as_object_mut().expect("object").remove(*name);
                let body = body_with(json!([event(t, p)]));
                assert_eq!(
                    err(&body),
                    events_err(&format!("events.0.payload.{name}: Required")),
                    "{t}.{name}"
                );
            }
        }
    }

    #[test]
    fn rejects_each_payload_field_of_the_wrong_json_type() {
        for (t, p, fields) in complete() {
            for (name, kind) in &fields {
                // A value of every other JSON type.
                let wrong: Vec<(J, &str)> = vec![
                    (json!("12"), "string"),
                    (json!(12), "number"),
                    (json!(true), "boolean"),
                    (J::Null, "null"),
                    (json!([1]), "array"),
                    (json!({"a": 1}), "object"),
                ];
                for (value, received) in wrong {
                    if *kind == received || (*kind == "enum" && received == "string") {
                        continue;
                    }
                    let mut p = p.clone();
                    p[*name] = value;
                    let body = body_with(json!([event(t, p)]));
                    let expected = if *kind == "enum" {
                        format!(
                            "events.0.payload.{name}: Expected 'ended' | 'unloaded' | 'error', \
                             received {received}"
                        )
                    } else {
                        format!("events.0.payload.{name}: Expected {kind}, received {received}")
                    };
                    assert_eq!(err(&body), events_err(&expected), "{t}.{name} = {received}");
                }
            }
        }
    }

    #[test]
    fn rejects_unknown_session_end_reason() {
        let body = body_with(json!([event(
            "session_end",
            json!({"reason": "crashed", "durationMs": 1})
        )]));
        assert_eq!(
            err(&body),
            events_err(
                "events.0.payload.reason: Invalid enum value. Expected 'ended' | 'unloaded' | \
                 'error', received 'crashed'"
            )
        );
    }

    #[test]
    fn accepts_every_session_end_reason() {
        for r in ["ended", "unloaded", "error"] {
            let body = body_with(json!([event(
                "session_end",
                json!({"reason": r, "durationMs": 1})
            )]));
            assert!(run(&body).is_ok(), "{r}");
        }
    }

    #[test]
    fn ignores_unknown_fields_everywhere() {
        let body = json!({
            "apiKey": "k", "sessionId": "s", "extra": {"x": [1, 2]},
            "events": [{
                "type": "playback_pause", "ts": TS, "seq": 9,
                "payload": {"positionMs": 1.5, "bufferedMs": 2, "note": "x"}
            }]
        });
        let batch = run(&body).expect("valid");
        assert_eq!(
            batch.events[0].payload.to_json(),
            r#"{"positionMs":1.5,"bufferedMs":2}"#
        );
    }

    #[test]
    fn accepts_numbers_of_every_json_form() {
        for n in [
            json!(0),
            json!(-5),
            json!(1.25),
            json!(1e3),
            json!(18446744073709551615u64),
        ] {
            let body = body_with(json!([event(
                "playback_pause",
                json!({"positionMs": n, "bufferedMs": 0})
            )]));
            assert!(run(&body).is_ok(), "{n}");
        }
        let batch = run_raw(
            r#"{"apiKey":"k","sessionId":"s","events":[{"type":"rebuffer_end","ts":"2024-05-01T12:34:56Z","payload":{"positionMs":1E2,"bufferedMs":-0.5}}]}"#,
        )
        .expect("valid");
        assert_eq!(
            batch.events[0].payload.to_json(),
            r#"{"positionMs":100,"bufferedMs":-0.5}"#
        );
    }

    #[test]
    fn rejects_unknown_event_type() {
        let body = body_with(json!([event("playback_stop", json!({}))]));
        assert_eq!(
            err(&body),
            events_err(&format!(
                "events.0.type: Invalid enum value. Expected {ENUM_TYPES}, received 'playback_stop'"
            ))
        );
    }

    #[test]
    fn rejects_missing_or_non_string_type() {
        let body = body_with(json!([{"ts": TS, "payload": {}}]));
        assert_eq!(err(&body), events_err("events.0.type: Required"));
        let body = body_with(json!([{"type": 3, "ts": TS, "payload": {}}]));
        assert_eq!(
            err(&body),
            events_err(&format!(
                "events.0.type: Expected {ENUM_TYPES}, received number"
            ))
        );
    }

    #[test]
    fn rejects_bad_ts() {
        let p = json!({"positionMs": 1, "bufferedMs": 2});
        let cases: Vec<(J, &str)> = vec![
            (J::Null, "events.0.ts: Expected string, received null"),
            (
                json!(1714566896789u64),
                "events.0.ts: Expected string, received number",
            ),
            (json!("2024-05-01"), "events.0.ts: Invalid datetime"),
            (json!("yesterday"), "events.0.ts: Invalid datetime"),
            (
                json!("2024-02-30T00:00:00Z"),
                "events.0.ts: Invalid datetime",
            ),
            (json!(""), "events.0.ts: Invalid datetime"),
        ];
        for (ts, msg) in cases {
            let body = body_with(json!([{"type": "playback_pause", "ts": ts, "payload": p}]));
            assert_eq!(err(&body), events_err(msg));
        }
        let body = body_with(json!([{"type": "playback_pause", "payload": p}]));
        assert_eq!(err(&body), events_err("events.0.ts: Required"));
    }

    #[test]
    fn accepts_ts_with_offset_and_stores_utc_ms() {
        let body = body_with(json!([{
            "type": "playback_pause", "ts": "2024-05-01T14:34:56.789+02:00",
            "payload": {"positionMs": 1, "bufferedMs": 2}
        }]));
        let batch = run(&body).expect("valid");
        assert_eq!(crate::time::format_ms(batch.events[0].ts_ms), TS);
    }

    #[test]
    fn rejects_missing_or_non_object_payload_and_event() {
        let body = body_with(json!([{"type": "playback_pause", "ts": TS}]));
        assert_eq!(err(&body), events_err("events.0.payload: Required"));
        let body = body_with(json!([{"type": "playback_pause", "ts": TS, "payload": [1]}]));
        assert_eq!(
            err(&body),
            events_err("events.0.payload: Expected object, received array")
        );
        let body = body_with(json!([{"type": "playback_pause", "ts": TS, "payload": null}]));
        assert_eq!(
            err(&body),
            events_err("events.0.payload: Expected object, received null")
        );
        let body = body_with(json!(["playback_pause"]));
        assert_eq!(
            err(&body),
            events_err("events.0: Expected object, received string")
        );
    }

    #[test]
    fn reports_first_bad_event_with_its_index() {
        let good = event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}));
        let bad1 = event(
            "playback_pause",
            json!({"positionMs": "1", "bufferedMs": 2}),
        );
        let bad2 = event("playback_pause", json!({"positionMs": 1}));
        let body = body_with(json!([good.clone(), good.clone(), good, bad1, bad2]));
        assert_eq!(
            err(&body),
            events_err("events.3.payload.positionMs: Expected number, received string")
        );
    }

    #[test]
    fn reports_first_issue_within_an_event_in_field_order() {
        // type is checked before ts, ts before payload, payload fields in contract order.
        let body = body_with(json!([{"type": "nope", "ts": "bad"}]));
        assert!(err(&body)["errors"]["events"]
            .as_str()
            .is_some_and(|m| m.starts_with("events.0.type: Invalid enum value.")));
        let body = body_with(json!([{"type": "error", "ts": "bad"}]));
        assert_eq!(err(&body), events_err("events.0.ts: Invalid datetime"));
        let body = body_with(json!([event("error", json!({"fatal": "no"}))]));
        assert_eq!(err(&body), events_err("events.0.payload.code: Required"));
    }

    #[test]
    fn rejects_empty_envelope_strings() {
        let body = json!({"apiKey": "", "sessionId": "", "events": [event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}))]});
        assert_eq!(
            err(&body),
            json!({"errors": {
                "apiKey": "String must contain at least 1 character(s)",
                "sessionId": "String must contain at least 1 character(s)"
            }})
        );
    }

    #[test]
    fn repeated_keys_take_the_last_value_like_json_parse() {
        let raw = r#"{"apiKey":"k","apiKey":"","sessionId":"s","events":[{"type":"error","ts":"2024-05-01T12:34:56Z","payload":{"code":1,"code":"c","message":"m","fatal":true}}]}"#;
        assert_eq!(
            run_raw(raw).expect_err("empty apiKey wins").to_json(),
            json!({"errors": {"apiKey": "String must contain at least 1 character(s)"}})
        );
        let raw = r#"{"apiKey":"","apiKey":"k","sessionId":"s","events":[{"type":"error","ts":"2024-05-01T12:34:56Z","payload":{"code":1,"code":"c","message":"m","fatal":true}}]}"#;
        let batch = run_raw(raw).expect("last values are valid");
        assert_eq!(batch.api_key, "k");
    }

    #[test]
    fn parses_escaped_strings() {
        let raw = r#"{"apiKey":"k\u0041","sessionId":"s\"1\\","events":[{"type":"error","ts":"2024-05-01T12:34:56Z","payload":{"code":"\u00e9\ud83d\ude00","message":"a\nb","fatal":false}}]}"#;
        let batch = run_raw(raw).expect("valid");
        assert_eq!(batch.api_key, "kA");
        assert_eq!(batch.session_id, "s\"1\\");
        assert_eq!(
            batch.events[0].payload,
            Payload::Error {
                code: "é😀".into(),
                message: "a\nb".into(),
                fatal: false
            }
        );
    }

    #[test]
    fn parses_many_bodies_on_one_thread() {
        // The per-thread simd-json buffers are reused across calls of any size.
        for n in [1usize, 1000, 3, 500, 1] {
            let e = event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}));
            assert_eq!(
                run(&body_with(J::Array(vec![e; n])))
                    .expect("valid")
                    .events
                    .len(),
                n
            );
            assert!(run_raw("{").is_err());
        }
    }

    #[test]
    fn rejects_missing_envelope_fields() {
        assert_eq!(
            err(&json!({})),
            json!({"errors": {"apiKey": "Required", "sessionId": "Required", "events": "Required"}})
        );
    }

    #[test]
    fn rejects_envelope_fields_of_wrong_type() {
        let body = json!({"apiKey": 1, "sessionId": ["s"], "events": {"0": {}}});
        assert_eq!(
            err(&body),
            json!({"errors": {
                "apiKey": "Expected string, received number",
                "sessionId": "Expected string, received array",
                "events": "Expected array, received object"
            }})
        );
        let body = json!({"apiKey": null, "sessionId": true, "events": "[]"});
        assert_eq!(
            err(&body),
            json!({"errors": {
                "apiKey": "Expected string, received null",
                "sessionId": "Expected string, received boolean",
                "events": "Expected array, received string"
            }})
        );
    }

    #[test]
    fn reports_envelope_and_event_issues_together() {
        let body = json!({"apiKey": "", "sessionId": "s", "events": [{"type": "error"}]});
        assert_eq!(
            err(&body),
            json!({"errors": {
                "apiKey": "String must contain at least 1 character(s)",
                "events": "events.0.ts: Required"
            }})
        );
    }

    #[test]
    fn rejects_empty_events() {
        assert_eq!(
            err(&body_with(json!([]))),
            events_err("Array must contain at least 1 element(s)")
        );
    }

    #[test]
    fn accepts_exactly_1000_events_and_rejects_1001() {
        let e = event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}));
        let ok = body_with(J::Array(vec![e.clone(); MAX_EVENTS]));
        assert_eq!(run(&ok).expect("valid").events.len(), 1000);
        let too_many = body_with(J::Array(vec![e; MAX_EVENTS + 1]));
        assert_eq!(
            err(&too_many),
            events_err("Array must contain at most 1000 element(s)")
        );
    }

    #[test]
    fn rejects_malformed_json() {
        for raw in [
            "",
            "{",
            "{\"apiKey\":",
            "not json",
            "{\"a\":1,}",
            "\u{feff}{}",
        ] {
            assert_eq!(
                run_raw(raw).expect_err(raw).to_json(),
                events_err("Invalid JSON"),
                "{raw:?}"
            );
        }
        let mut invalid_utf8 = b"{\"apiKey\":\"\xff\"}".to_vec();
        assert_eq!(
            parse_batch(&mut invalid_utf8).expect_err("utf8").to_json(),
            events_err("Invalid JSON")
        );
    }

    #[test]
    fn rejects_non_object_body() {
        for (raw, got) in [
            ("[]", "array"),
            ("null", "null"),
            ("1", "number"),
            ("\"x\"", "string"),
            ("true", "boolean"),
        ] {
            assert_eq!(
                run_raw(raw).expect_err(raw).to_json(),
                events_err(&format!("Expected object, received {got}"))
            );
        }
    }

    #[test]
    fn rejects_oversized_body_before_parsing() {
        let mut big = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(
            parse_batch(&mut big).expect_err("too big").to_json(),
            events_err(MSG_BODY_TOO_LARGE)
        );
        assert_eq!(body_too_large().to_json(), events_err(MSG_BODY_TOO_LARGE));
    }

    #[test]
    fn accepts_body_of_exactly_max_bytes() {
        let e = event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}));
        let mut bytes = serde_json::to_vec(&body_with(json!([e]))).expect("json");
        bytes.resize(MAX_BODY_BYTES, b' ');
        assert!(parse_batch(&mut bytes).is_ok());
    }

    #[test]
    fn serializes_errors_in_envelope_order() {
        let mut e = ValidationErrors::default();
        e.set(Field::Events, "x".into());
        e.set(Field::ApiKey, "y".into());
        e.set(Field::ApiKey, "ignored, not first".into());
        assert_eq!(
            serde_json::to_string(&e).expect("json"),
            r#"{"errors":{"apiKey":"y","events":"x"}}"#
        );
        assert_eq!(e.to_string(), "apiKey: y; events: x");
    }
}
