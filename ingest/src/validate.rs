//! Request body → validated [`Batch`]: simd-json parsing and the contract's
//! validation rules, with zod v3 style messages keyed by envelope field.
//!
//! Rules (interface.md "Telemetry ingest", decisions.md §7):
//! - `apiKey`, `sessionId`: strings of at least 1 character;
//! - `events`: 1 to [`MAX_EVENTS`] events, each `{ type, ts, payload }` with `type`
//!   one of the eight event types, `ts` an ISO 8601 timestamp and every payload
//!   field present with its JSON type; unknown fields are ignored;
//! - optional payload fields (analytics.md §1), checked after the required ones:
//!   `playback_start.startupMs`, `quality_change.width` / `height`, numbers ≥ 0;
//! - the optional `context` object (analytics.md §1): `sdk`, `player` (≤ 64
//!   characters), `contentId` (≤ 256), `src` (≤ 2048) strings and `tags`, an object
//!   of at most 20 distinct keys of 1–64 characters to strings of ≤ 256; unknown
//!   fields inside it are ignored;
//! - the body is at most [`MAX_BODY_BYTES`].
//!
//! Only the first issue per envelope field is reported (`apiKey`, `sessionId`,
//! `events`, `context`). Issues inside an event or the context carry their path as
//! a prefix: `events.3.payload.positionMs: Expected number, received string`,
//! `context.tags.plan: Expected string, received number`. An optional field that
//! is `null` is refused like zod's `.optional()` does (`Expected string, received
//! null`): only an absent field is "not given". Lengths count Unicode characters
//! (scalar values), as every other length limit of the server does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};
use std::cell::RefCell;

use simd_json::prelude::*;
use simd_json::tape::{Object, Value};
use simd_json::Buffers;

use crate::time::parse_iso8601_ms;
use crate::wire::{Batch, Context, EndReason, Event, EventType, Payload};

/// Largest accepted request body, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1_048_576;

/// Most events accepted in one batch.
pub const MAX_EVENTS: usize = 1000;

/// Limits of the batch `context` (analytics.md §1), in characters.
const MAX_SDK_CHARS: usize = 64;
const MAX_PLAYER_CHARS: usize = 64;
const MAX_CONTENT_ID_CHARS: usize = 256;
const MAX_SRC_CHARS: usize = 2048;
const MAX_TAGS: usize = 20;
const MAX_TAG_KEY_CHARS: usize = 64;
const MAX_TAG_VALUE_CHARS: usize = 256;

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
    /// `context`, the optional batch context (analytics.md §1).
    Context,
}

impl Field {
    /// The JSON key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Field::ApiKey => "apiKey",
            Field::SessionId => "sessionId",
            Field::Events => "events",
            Field::Context => "context",
        }
    }
}

/// Validation failure: the first message per envelope field. Serializes as the
/// contract's 400 body,
/// `{"errors":{"apiKey":…,"sessionId":…,"events":…,"context":…}}` (only the keys
/// that have an issue, in that order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    api_key: Option<String>,
    session_id: Option<String>,
    events: Option<String>,
    context: Option<String>,
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
            Field::Context => &mut self.context,
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
            Field::Context => self.context.as_deref(),
        }
    }

    /// `(key, message)` pairs in envelope order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            Field::ApiKey,
            Field::SessionId,
            Field::Events,
            Field::Context,
        ]
        .into_iter()
        .filter_map(move |f| self.get(f).map(|m| (f.as_str(), m)))
    }

    /// True when no issue was recorded.
    pub fn is_empty(&self) -> bool {
        self.api_key.is_none()
            && self.session_id.is_none()
            && self.events.is_none()
            && self.context.is_none()
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
    // Absent (every 0.1.0 batch): one scan of the root's few keys, no allocation.
    let context = context(get(&root, "context"))
        .map_err(|m| errors.set(Field::Context, m))
        .ok();

    match (api_key, session_id, events, context) {
        (Some(api_key), Some(session_id), Some(events), Some(context)) if errors.is_empty() => {
            Ok(Batch {
                api_key: api_key.to_owned(),
                session_id: session_id.to_owned(),
                events,
                context,
            })
        }
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

/// An optional `z.number().nonnegative()`: absent is `None`, `null` is refused.
fn optional_non_negative(v: Option<Value<'_, '_>>) -> Result<Option<f64>, String> {
    let Some(v) = v else { return Ok(None) };
    let n = number(Some(v))?;
    // -0 passes, as in zod (`-0 < 0` is false).
    if n < 0.0 {
        return Err("Number must be greater than or equal to 0".to_owned());
    }
    Ok(Some(n))
}

/// True when `s` has at most `max` characters. Checks the byte length first: a
/// string of at most `max` bytes cannot have more characters, so short values
/// (nearly all of them) are never walked.
fn within_chars(s: &str, max: usize) -> bool {
    s.len() <= max || s.chars().count() <= max
}

fn too_long(max: usize) -> String {
    format!("String must contain at most {max} character(s)")
}

/// An optional `z.string().max(max)`: absent is `None`, `null` is refused.
fn optional_string(v: Option<Value<'_, '_>>, max: usize) -> Result<Option<String>, String> {
    let Some(v) = v else { return Ok(None) };
    let s = string(Some(v))?;
    if !within_chars(s, max) {
        return Err(too_long(max));
    }
    Ok(Some(s.to_owned()))
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

/// The optional batch `context`: `Ok(None)` when absent. Fields are checked in
/// the order of analytics.md §1 (`sdk`, `player`, `contentId`, `src`, `tags`) and
/// the first issue is returned with its path; the wrong type of the whole object
/// is reported without a path, like a top-level `events` of the wrong type.
fn context(v: Option<Value<'_, '_>>) -> Result<Option<Context>, String> {
    let Some(v) = v else { return Ok(None) };
    let obj = v.as_object().ok_or_else(|| invalid_type("object", v))?;
    let field = |name: &'static str| move |m: String| format!("context.{name}: {m}");
    Ok(Some(Context {
        sdk: optional_string(get(&obj, "sdk"), MAX_SDK_CHARS).map_err(field("sdk"))?,
        player: optional_string(get(&obj, "player"), MAX_PLAYER_CHARS).map_err(field("player"))?,
        content_id: optional_string(get(&obj, "contentId"), MAX_CONTENT_ID_CHARS)
            .map_err(field("contentId"))?,
        src: optional_string(get(&obj, "src"), MAX_SRC_CHARS).map_err(field("src"))?,
        tags: tags(get(&obj, "tags"))?,
    }))
}

/// `context.tags`, an object of string → string; empty when absent. Messages carry
/// their whole path. Order of checks: the object's type; then the number of
/// distinct keys (a repeated key keeps its last value, as `JSON.parse` does), so an
/// oversized object costs at most 21 entries of work; then each entry in document
/// order: its key's length, its value's type and length. A key problem is reported
/// at `context.tags` (the key itself may be empty or long, so it is no usable path);
/// a value problem at `context.tags.<key>`.
fn tags(v: Option<Value<'_, '_>>) -> Result<BTreeMap<String, String>, String> {
    let Some(v) = v else {
        return Ok(BTreeMap::new());
    };
    let obj = v
        .as_object()
        .ok_or_else(|| format!("context.tags: {}", invalid_type("object", v)))?;
    let mut entries: Vec<(&str, Value<'_, '_>)> = Vec::with_capacity(obj.len().min(MAX_TAGS));
    for (k, v) in obj.iter() {
        if let Some(entry) = entries.iter_mut().find(|(seen, _)| *seen == k) {
            entry.1 = v;
        } else if entries.len() == MAX_TAGS {
            return Err(format!(
                "context.tags: Object must contain at most {MAX_TAGS} entries"
            ));
        } else {
            entries.push((k, v));
        }
    }
    let mut out = BTreeMap::new();
    for (k, v) in entries {
        if k.is_empty() {
            return Err("context.tags: Key must contain at least 1 character(s)".to_owned());
        }
        if !within_chars(k, MAX_TAG_KEY_CHARS) {
            return Err(format!(
                "context.tags: Key must contain at most {MAX_TAG_KEY_CHARS} character(s)"
            ));
        }
        let value = string(Some(v)).map_err(|m| format!("context.tags.{k}: {m}"))?;
        if !within_chars(value, MAX_TAG_VALUE_CHARS) {
            return Err(format!(
                "context.tags.{k}: {}",
                too_long(MAX_TAG_VALUE_CHARS)
            ));
        }
        out.insert(k.to_owned(), value.to_owned());
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
            startup_ms: optional_non_negative(get(&p, "startupMs")).map_err(field("startupMs"))?,
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
            width: optional_non_negative(get(&p, "width")).map_err(field("width"))?,
            height: optional_non_negative(get(&p, "height")).map_err(field("height"))?,
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
                content_id: "movie-1".into(),
                startup_ms: None
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
        e.set(Field::Context, "z".into());
        assert_eq!(
            serde_json::to_string(&e).expect("json"),
            r#"{"errors":{"apiKey":"y","events":"x","context":"z"}}"#
        );
    }

    // ---------- wire extensions (analytics.md §1) ----------

    fn pause() -> J {
        event("playback_pause", json!({"positionMs": 1, "bufferedMs": 2}))
    }

    fn with_context(context: J) -> J {
        json!({"apiKey": "svc_key", "sessionId": "sess-1", "events": [pause()], "context": context})
    }

    fn context_err(msg: &str) -> J {
        json!({"errors": {"context": msg}})
    }

    /// `n` characters, each `c` (multi-byte characters count as one).
    fn chars(c: char, n: usize) -> String {
        std::iter::repeat_n(c, n).collect()
    }

    /// A value of every JSON type but string, and zod's name for it.
    fn non_strings() -> Vec<(J, &'static str)> {
        vec![
            (json!(12), "number"),
            (json!(true), "boolean"),
            (J::Null, "null"),
            (json!(["a"]), "array"),
            (json!({"a": "b"}), "object"),
        ]
    }

    #[test]
    fn a_batch_without_context_has_none() {
        let batch = run(&body_with(json!([pause()]))).expect("valid");
        assert_eq!(batch.context, None);
    }

    #[test]
    fn accepts_a_full_context_and_exposes_it_typed() {
        let body = with_context(json!({
            "sdk": "@service/player-sdk@0.2.0",
            "player": "hls.js 1.7.4",
            "contentId": "movie-42",
            "src": "https://cdn.example.com/movie-42/master.m3u8",
            "tags": {"plan": "pro", "env": "prod", "plan.tier": "é😀"},
            "appVersion": 3,
            "device": {"x": [1]}
        }));
        let batch = run(&body).expect("valid");
        assert_eq!(
            batch.context,
            Some(Context {
                sdk: Some("@service/player-sdk@0.2.0".into()),
                player: Some("hls.js 1.7.4".into()),
                content_id: Some("movie-42".into()),
                src: Some("https://cdn.example.com/movie-42/master.m3u8".into()),
                tags: [("env", "prod"), ("plan", "pro"), ("plan.tier", "é😀")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            })
        );
    }

    #[test]
    fn accepts_an_empty_context_and_empty_strings() {
        let batch = run(&with_context(json!({}))).expect("valid");
        assert_eq!(batch.context, Some(Context::default()));
        let batch = run(&with_context(json!({
            "sdk": "", "player": "", "contentId": "", "src": "", "tags": {"k": ""}
        })))
        .expect("valid");
        let ctx = batch.context.expect("context");
        assert_eq!(ctx.sdk.as_deref(), Some(""));
        assert_eq!(ctx.src.as_deref(), Some(""));
        assert_eq!(ctx.tags.get("k").map(String::as_str), Some(""));
    }

    #[test]
    fn context_strings_are_accepted_at_their_limit_and_refused_one_over() {
        for (field, max) in [
            ("sdk", 64),
            ("player", 64),
            ("contentId", 256),
            ("src", 2048),
        ] {
            // Characters, not bytes: 'é' is 2 bytes, '😀' 4 (and 2 UTF-16 units).
            for c in ['a', 'é', '😀'] {
                let ok = run(&with_context(json!({ field: chars(c, max) })));
                assert!(ok.is_ok(), "{field} of {max} × {c:?}");
                assert_eq!(
                    err(&with_context(json!({ field: chars(c, max + 1) }))),
                    context_err(&format!(
                        "context.{field}: String must contain at most {max} character(s)"
                    )),
                    "{field} of {} × {c:?}",
                    max + 1
                );
            }
        }
    }

    #[test]
    fn rejects_context_strings_of_the_wrong_type_including_null() {
        for field in ["sdk", "player", "contentId", "src"] {
            for (value, received) in non_strings() {
                assert_eq!(
                    err(&with_context(json!({ field: value }))),
                    context_err(&format!(
                        "context.{field}: Expected string, received {received}"
                    )),
                    "{field} = {received}"
                );
            }
        }
    }

    #[test]
    fn rejects_a_context_that_is_not_an_object_without_a_path() {
        for (value, received) in [
            (json!("@service/player-sdk@0.2.0"), "string"),
            (J::Null, "null"),
            (json!([{"sdk": "x"}]), "array"),
            (json!(1), "number"),
            (json!(false), "boolean"),
        ] {
            assert_eq!(
                err(&with_context(value)),
                context_err(&format!("Expected object, received {received}")),
                "{received}"
            );
        }
    }

    #[test]
    fn reports_the_first_context_issue_in_field_order() {
        let body = with_context(json!({
            "tags": {"a": 1}, "src": 5, "contentId": null, "player": [], "sdk": true
        }));
        assert_eq!(
            err(&body),
            context_err("context.sdk: Expected string, received boolean")
        );
        let body = with_context(json!({"tags": {"a": 1}, "src": 5, "contentId": null}));
        assert_eq!(
            err(&body),
            context_err("context.contentId: Expected string, received null")
        );
        let body = with_context(json!({"tags": {"a": 1}, "src": chars('x', 2049)}));
        assert_eq!(
            err(&body),
            context_err("context.src: String must contain at most 2048 character(s)")
        );
    }

    #[test]
    fn reports_context_issues_beside_the_other_envelope_fields() {
        let body = json!({
            "apiKey": "", "sessionId": "s",
            "events": [event("playback_pause", json!({"positionMs": "1", "bufferedMs": 2}))],
            "context": {"sdk": chars('v', 65)}
        });
        let e = run(&body).expect_err("invalid");
        assert_eq!(
            serde_json::to_string(&e).expect("json"),
            r#"{"errors":{"apiKey":"String must contain at least 1 character(s)","events":"events.0.payload.positionMs: Expected number, received string","context":"context.sdk: String must contain at most 64 character(s)"}}"#
        );
        // A bad context refuses the whole batch even when every event is valid.
        assert_eq!(
            err(&with_context(json!({"player": 1}))),
            context_err("context.player: Expected string, received number")
        );
    }

    fn tags_of(n: usize) -> serde_json::Map<String, J> {
        (0..n).map(|i| (format!("k{i:02}"), json!("v"))).collect()
    }

    #[test]
    fn accepts_20_tags_and_refuses_21() {
        let batch = run(&with_context(json!({"tags": tags_of(20)}))).expect("valid");
        assert_eq!(batch.context.expect("context").tags.len(), 20);
        assert_eq!(
            err(&with_context(json!({"tags": tags_of(21)}))),
            context_err("context.tags: Object must contain at most 20 entries")
        );
    }

    #[test]
    fn counts_distinct_tag_keys_and_keeps_the_last_value_of_a_repeated_key() {
        // 21 entries in the document, 20 distinct keys: accepted, as JSON.parse sees it.
        let mut raw = String::from(
            r#"{"apiKey":"k","sessionId":"s","events":[{"type":"playback_pause","ts":"2024-05-01T12:34:56Z","payload":{"positionMs":1,"bufferedMs":2}}],"context":{"tags":{"k00":1"#,
        );
        for i in 1..20 {
            raw.push_str(&format!(r#","k{i:02}":"v""#));
        }
        raw.push_str(r#","k00":"last"}}}"#);
        let ctx = run_raw(&raw).expect("valid").context.expect("context");
        assert_eq!(ctx.tags.len(), 20);
        assert_eq!(ctx.tags["k00"], "last");
    }

    #[test]
    fn tag_keys_are_1_to_64_characters() {
        for key in [chars('k', 1), chars('k', 64), chars('😀', 64)] {
            let ctx = run(&with_context(json!({"tags": {key.clone(): "v"}})))
                .expect("valid")
                .context
                .expect("context");
            assert_eq!(ctx.tags[&key], "v");
        }
        assert_eq!(
            err(&with_context(json!({"tags": {"": "v"}}))),
            context_err("context.tags: Key must contain at least 1 character(s)")
        );
        for key in [chars('k', 65), chars('😀', 65)] {
            assert_eq!(
                err(&with_context(json!({"tags": {key: "v"}}))),
                context_err("context.tags: Key must contain at most 64 character(s)")
            );
        }
    }

    #[test]
    fn tag_values_are_strings_of_at_most_256_characters() {
        for value in [chars('v', 256), chars('é', 256)] {
            assert!(run(&with_context(json!({"tags": {"plan": value}}))).is_ok());
        }
        assert_eq!(
            err(&with_context(json!({"tags": {"plan": chars('é', 257)}}))),
            context_err("context.tags.plan: String must contain at most 256 character(s)")
        );
        for (value, received) in non_strings() {
            assert_eq!(
                err(&with_context(json!({"tags": {"plan": value}}))),
                context_err(&format!(
                    "context.tags.plan: Expected string, received {received}"
                )),
                "{received}"
            );
        }
    }

    #[test]
    fn rejects_tags_that_are_not_an_object() {
        for (value, received) in [
            (json!("plan=pro"), "string"),
            (J::Null, "null"),
            (json!([["plan", "pro"]]), "array"),
            (json!(3), "number"),
        ] {
            assert_eq!(
                err(&with_context(json!({ "tags": value }))),
                context_err(&format!(
                    "context.tags: Expected object, received {received}"
                )),
                "{received}"
            );
        }
    }

    #[test]
    fn checks_the_tag_count_before_the_entries_and_each_key_before_its_value() {
        let mut tags = tags_of(21);
        tags.insert("bad".into(), json!(1));
        assert_eq!(
            err(&with_context(json!({ "tags": tags }))),
            context_err("context.tags: Object must contain at most 20 entries")
        );
        // Entries in document order: the first bad entry is reported.
        let raw = r#"{"apiKey":"k","sessionId":"s","events":[{"type":"playback_pause","ts":"2024-05-01T12:34:56Z","payload":{"positionMs":1,"bufferedMs":2}}],"context":{"tags":{"z":"ok","y":2,"":3}}}"#;
        assert_eq!(
            run_raw(raw).expect_err("invalid").to_json(),
            context_err("context.tags.y: Expected string, received number")
        );
        let raw = r#"{"apiKey":"k","sessionId":"s","events":[{"type":"playback_pause","ts":"2024-05-01T12:34:56Z","payload":{"positionMs":1,"bufferedMs":2}}],"context":{"tags":{"":3,"y":2}}}"#;
        assert_eq!(
            run_raw(raw).expect_err("invalid").to_json(),
            context_err("context.tags: Key must contain at least 1 character(s)")
        );
    }

    #[test]
    fn the_context_is_not_copied_into_event_rows() {
        let plain = run(&body_with(json!([pause()]))).expect("valid");
        let with = run(&with_context(json!({"sdk": "s", "tags": {"a": "b"}}))).expect("valid");
        assert!(with.context.is_some());
        assert_eq!(with.into_rows("u1"), plain.into_rows("u1"));
    }

    fn start(extra: J) -> J {
        let mut p = json!({"positionMs": 0, "durationMs": 8000, "contentId": "c"});
        for (k, v) in extra.as_object().expect("object") {
            p[k] = v.clone();
        }
        event("playback_start", p)
    }

    fn switch(extra: J) -> J {
        let mut p = json!({"from": "360p", "to": "720p", "bitrate": 1500000});
        for (k, v) in extra.as_object().expect("object") {
            p[k] = v.clone();
        }
        event("quality_change", p)
    }

    /// The stored payload JSON of the single event of `body`.
    fn stored(body: &J) -> String {
        run(body).expect("valid").events[0].payload.to_json()
    }

    #[test]
    fn accepts_startup_ms_of_zero_or_more_and_stores_it() {
        assert_eq!(
            stored(&body_with(json!([start(json!({"startupMs": 1234}))]))),
            r#"{"positionMs":0,"durationMs":8000,"contentId":"c","startupMs":1234}"#
        );
        for (n, json) in [(json!(0), "0"), (json!(-0.0), "0"), (json!(0.5), "0.5")] {
            assert_eq!(
                stored(&body_with(json!([start(json!({ "startupMs": n }))]))),
                format!(
                    r#"{{"positionMs":0,"durationMs":8000,"contentId":"c","startupMs":{json}}}"#
                )
            );
        }
        // Absent: the stored JSON is the 0.1.0 one, byte for byte.
        assert_eq!(
            stored(&body_with(json!([start(json!({}))]))),
            r#"{"positionMs":0,"durationMs":8000,"contentId":"c"}"#
        );
    }

    #[test]
    fn rejects_negative_or_mistyped_startup_ms() {
        for n in [json!(-1), json!(-0.001), json!(-1e300)] {
            assert_eq!(
                err(&body_with(json!([start(json!({ "startupMs": n }))]))),
                events_err("events.0.payload.startupMs: Number must be greater than or equal to 0"),
                "{n}"
            );
        }
        for (value, received) in [
            (json!("1200"), "string"),
            (json!(true), "boolean"),
            (J::Null, "null"),
            (json!([1]), "array"),
            (json!({"ms": 1}), "object"),
        ] {
            assert_eq!(
                err(&body_with(json!([start(json!({ "startupMs": value }))]))),
                events_err(&format!(
                    "events.0.payload.startupMs: Expected number, received {received}"
                )),
                "{received}"
            );
        }
    }

    #[test]
    fn accepts_width_and_height_of_zero_or_more_and_stores_them() {
        assert_eq!(
            stored(&body_with(json!([switch(
                json!({"width": 1280, "height": 720})
            )]))),
            r#"{"from":"360p","to":"720p","bitrate":1500000,"width":1280,"height":720}"#
        );
        assert_eq!(
            stored(&body_with(json!([switch(json!({"height": 0}))]))),
            r#"{"from":"360p","to":"720p","bitrate":1500000,"height":0}"#
        );
        assert_eq!(
            stored(&body_with(json!([switch(json!({"width": 0.5}))]))),
            r#"{"from":"360p","to":"720p","bitrate":1500000,"width":0.5}"#
        );
        assert_eq!(
            stored(&body_with(json!([switch(json!({}))]))),
            r#"{"from":"360p","to":"720p","bitrate":1500000}"#
        );
    }

    #[test]
    fn rejects_negative_or_mistyped_width_and_height() {
        for field in ["width", "height"] {
            assert_eq!(
                err(&body_with(json!([switch(json!({ field: -1 }))]))),
                events_err(&format!(
                    "events.0.payload.{field}: Number must be greater than or equal to 0"
                ))
            );
            for (value, received) in [
                (json!("720"), "string"),
                (J::Null, "null"),
                (json!(false), "boolean"),
                (json!([720]), "array"),
            ] {
                assert_eq!(
                    err(&body_with(json!([switch(json!({ field: value }))]))),
                    events_err(&format!(
                        "events.0.payload.{field}: Expected number, received {received}"
                    )),
                    "{field} = {received}"
                );
            }
        }
    }

    #[test]
    fn accepts_an_initial_quality_change_with_empty_from() {
        let body = body_with(json!([event(
            "quality_change",
            json!({"from": "", "to": "720p", "bitrate": 1500000, "width": 1280, "height": 720})
        )]));
        let batch = run(&body).expect("valid");
        assert_eq!(
            batch.events[0].payload,
            Payload::QualityChange {
                from: String::new(),
                to: "720p".into(),
                bitrate: 1_500_000.0,
                width: Some(1280.0),
                height: Some(720.0),
            }
        );
    }

    #[test]
    fn checks_optional_fields_after_the_required_ones_in_contract_order() {
        // A required-field issue wins over an optional-field issue of the same event.
        let body = body_with(json!([event(
            "playback_start",
            json!({"startupMs": -1, "positionMs": 0, "durationMs": 0})
        )]));
        assert_eq!(
            err(&body),
            events_err("events.0.payload.contentId: Required")
        );
        let body = body_with(json!([event(
            "quality_change",
            json!({"height": -1, "width": "x", "from": "", "to": "a", "bitrate": "1"})
        )]));
        assert_eq!(
            err(&body),
            events_err("events.0.payload.bitrate: Expected number, received string")
        );
        let body = body_with(json!([switch(json!({"height": -1, "width": "x"}))]));
        assert_eq!(
            err(&body),
            events_err("events.0.payload.width: Expected number, received string")
        );
        // And the first bad event is still the one reported.
        let body = body_with(json!([
            start(json!({"startupMs": 5})),
            switch(json!({"height": -2})),
            start(json!({"startupMs": -1}))
        ]));
        assert_eq!(
            err(&body),
            events_err("events.1.payload.height: Number must be greater than or equal to 0")
        );
    }

    #[test]
    fn optional_fields_of_other_event_types_are_unknown_fields() {
        // startupMs belongs to playback_start only; elsewhere it is ignored like any unknown field.
        let body = body_with(json!([event(
            "playback_pause",
            json!({"positionMs": 1, "bufferedMs": 2, "startupMs": -1, "width": "x"})
        )]));
        assert_eq!(stored(&body), r#"{"positionMs":1,"bufferedMs":2}"#);
    }
}
