//! Wire types of the telemetry contract: the batch envelope and its optional
//! `context`, the closed set of eight event types and their payloads, and the
//! compact JSON a payload is stored as.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// The closed set of telemetry event types (interface.md, "Events").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// Playback started.
    PlaybackStart,
    /// User paused.
    PlaybackPause,
    /// User resumed after a pause.
    PlaybackResume,
    /// Stall: the buffer drained below the underrun threshold.
    RebufferStart,
    /// Playback resumed after a stall.
    RebufferEnd,
    /// Adaptive bitrate switched rendition.
    QualityChange,
    /// Media error (decode, network or src).
    Error,
    /// Session closed.
    SessionEnd,
}

impl EventType {
    /// Every event type, in contract order.
    pub const ALL: [EventType; 8] = [
        EventType::PlaybackStart,
        EventType::PlaybackPause,
        EventType::PlaybackResume,
        EventType::RebufferStart,
        EventType::RebufferEnd,
        EventType::QualityChange,
        EventType::Error,
        EventType::SessionEnd,
    ];

    /// The wire name, e.g. `playback_start`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::PlaybackStart => "playback_start",
            EventType::PlaybackPause => "playback_pause",
            EventType::PlaybackResume => "playback_resume",
            EventType::RebufferStart => "rebuffer_start",
            EventType::RebufferEnd => "rebuffer_end",
            EventType::QualityChange => "quality_change",
            EventType::Error => "error",
            EventType::SessionEnd => "session_end",
        }
    }

    /// Looks up a wire name; `None` for anything outside the closed set.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.as_str() == s)
    }

    /// Position of this type in [`EventType::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session ended (`session_end.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Playback reached the end.
    Ended,
    /// The page was unloaded.
    Unloaded,
    /// A fatal error ended the session.
    Error,
}

impl EndReason {
    /// Every reason, in contract order.
    pub const ALL: [EndReason; 3] = [EndReason::Ended, EndReason::Unloaded, EndReason::Error];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EndReason::Ended => "ended",
            EndReason::Unloaded => "unloaded",
            EndReason::Error => "error",
        }
    }

    /// Looks up a wire name.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.as_str() == s)
    }
}

/// A validated event payload; one variant per [`EventType`]. Numbers are JSON
/// numbers (JavaScript doubles on the SDK side), so they are kept as `f64`.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// `playback_start`
    PlaybackStart {
        /// Playhead position in ms.
        position_ms: f64,
        /// Media duration in ms.
        duration_ms: f64,
        /// Content identifier.
        content_id: String,
        /// Optional (analytics.md §1): ms from the play intent to the first frame, ≥ 0.
        startup_ms: Option<f64>,
    },
    /// `playback_pause`
    PlaybackPause {
        /// Playhead position in ms.
        position_ms: f64,
        /// Buffer ahead of the playhead in ms.
        buffered_ms: f64,
    },
    /// `playback_resume`
    PlaybackResume {
        /// Playhead position in ms.
        position_ms: f64,
        /// Buffer ahead of the playhead in ms.
        buffered_ms: f64,
    },
    /// `rebuffer_start`
    RebufferStart {
        /// Playhead position in ms.
        position_ms: f64,
        /// Buffer ahead of the playhead in ms.
        buffered_ms: f64,
    },
    /// `rebuffer_end`
    RebufferEnd {
        /// Playhead position in ms.
        position_ms: f64,
        /// Buffer ahead of the playhead in ms.
        buffered_ms: f64,
    },
    /// `quality_change`
    QualityChange {
        /// Previous rendition label; `""` marks the initial rendition (not a switch).
        from: String,
        /// New rendition label.
        to: String,
        /// Bitrate of the new rendition.
        bitrate: f64,
        /// Optional (analytics.md §1): the new rendition's width in pixels, ≥ 0.
        width: Option<f64>,
        /// Optional (analytics.md §1): the new rendition's height in pixels, ≥ 0.
        height: Option<f64>,
    },
    /// `error`
    Error {
        /// Error code.
        code: String,
        /// Human message.
        message: String,
        /// Whether playback could not continue.
        fatal: bool,
    },
    /// `session_end`
    SessionEnd {
        /// Why the session ended.
        reason: EndReason,
        /// Session duration in ms.
        duration_ms: f64,
    },
}

impl Payload {
    /// The event type this payload belongs to.
    pub fn event_type(&self) -> EventType {
        match self {
            Payload::PlaybackStart { .. } => EventType::PlaybackStart,
            Payload::PlaybackPause { .. } => EventType::PlaybackPause,
            Payload::PlaybackResume { .. } => EventType::PlaybackResume,
            Payload::RebufferStart { .. } => EventType::RebufferStart,
            Payload::RebufferEnd { .. } => EventType::RebufferEnd,
            Payload::QualityChange { .. } => EventType::QualityChange,
            Payload::Error { .. } => EventType::Error,
            Payload::SessionEnd { .. } => EventType::SessionEnd,
        }
    }

    /// `contentId` of a `playback_start` payload.
    pub fn content_id(&self) -> Option<&str> {
        match self {
            Payload::PlaybackStart { content_id, .. } => Some(content_id),
            _ => None,
        }
    }

    /// The payload as compact JSON with the contract's field names in contract
    /// order, then the optional fields that are present (`startupMs`; `width`,
    /// `height`); unknown fields the client sent are not kept. Without optional
    /// fields the JSON is exactly what SDK 0.1.0 batches were stored as.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push('{');
        match self {
            Payload::PlaybackStart {
                position_ms,
                duration_ms,
                content_id,
                startup_ms,
            } => {
                num_field(&mut out, "positionMs", *position_ms, true);
                num_field(&mut out, "durationMs", *duration_ms, false);
                str_field(&mut out, "contentId", content_id, false);
                opt_num_field(&mut out, "startupMs", *startup_ms);
            }
            Payload::PlaybackPause {
                position_ms,
                buffered_ms,
            }
            | Payload::PlaybackResume {
                position_ms,
                buffered_ms,
            }
            | Payload::RebufferStart {
                position_ms,
                buffered_ms,
            }
            | Payload::RebufferEnd {
                position_ms,
                buffered_ms,
            } => {
                num_field(&mut out, "positionMs", *position_ms, true);
                num_field(&mut out, "bufferedMs", *buffered_ms, false);
            }
            Payload::QualityChange {
                from,
                to,
                bitrate,
                width,
                height,
            } => {
                str_field(&mut out, "from", from, true);
                str_field(&mut out, "to", to, false);
                num_field(&mut out, "bitrate", *bitrate, false);
                opt_num_field(&mut out, "width", *width);
                opt_num_field(&mut out, "height", *height);
            }
            Payload::Error {
                code,
                message,
                fatal,
            } => {
                str_field(&mut out, "code", code, true);
                str_field(&mut out, "message", message, false);
                out.push_str(",\"fatal\":");
                out.push_str(if *fatal { "true" } else { "false" });
            }
            Payload::SessionEnd {
                reason,
                duration_ms,
            } => {
                str_field(&mut out, "reason", reason.as_str(), true);
                num_field(&mut out, "durationMs", *duration_ms, false);
            }
        }
        out.push('}');
        out
    }
}

/// One validated event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event time, milliseconds since the Unix epoch (UTC), truncated to ms.
    pub ts_ms: i64,
    /// Typed payload (which also fixes the event type).
    pub payload: Payload,
}

impl Event {
    /// The event's type.
    pub fn event_type(&self) -> EventType {
        self.payload.event_type()
    }
}

/// A validated request body of `POST /api/v1/telemetry`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `apiKey` from the body (must equal the bearer value; the server checks).
    pub api_key: String,
    /// `sessionId` (at least 1 character).
    pub session_id: String,
    /// 1 to [`crate::MAX_EVENTS`] events.
    pub events: Vec<Event>,
    /// The optional batch `context` (analytics.md §1); `None` when the body has
    /// none (SDK 0.1.0). Describes the view, so it is not copied into event rows.
    pub context: Option<Context>,
}

/// The batch `context` (analytics.md §1): what sent the batch and what it plays.
/// Every field is optional on the wire; validation guarantees the limits below
/// (lengths in Unicode characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// `sdk`: SDK name and version, e.g. `@service/player-sdk@0.2.0` (≤ 64).
    pub sdk: Option<String>,
    /// `player`: playback engine, e.g. `hls.js 1.6.2`, `native` (≤ 64).
    pub player: Option<String>,
    /// `contentId`: the session's content (≤ 256).
    pub content_id: Option<String>,
    /// `src`: the manifest URL the player loads (≤ 2048).
    pub src: Option<String>,
    /// `tags`: the SDK config's `session.tags`; at most 20, keys 1–64 and values
    /// ≤ 256 characters. Empty when absent. A key sent twice keeps its last value.
    pub tags: BTreeMap<String, String>,
}

fn key(out: &mut String, name: &str, first: bool) {
    if !first {
        out.push(',');
    }
    out.push('"');
    out.push_str(name);
    out.push_str("\":");
}

fn str_field(out: &mut String, name: &str, value: &str, first: bool) {
    key(out, name, first);
    push_json_string(out, value);
}

fn num_field(out: &mut String, name: &str, value: f64, first: bool) {
    key(out, name, first);
    push_json_number(out, value);
}

/// An optional number after the required fields: written only when present, so
/// payloads without it keep their 0.1.0 bytes.
fn opt_num_field(out: &mut String, name: &str, value: Option<f64>) {
    if let Some(v) = value {
        num_field(out, name, v, false);
    }
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a number the way JavaScript's `JSON.stringify` would for common values:
/// integral values without a fraction (`1200`, not `1200.0`).
pub(crate) fn push_json_number(out: &mut String, v: f64) {
    if !v.is_finite() {
        // Cannot come from JSON input; keep the output valid JSON anyway.
        out.push_str("null");
    } else if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        // Exactly representable integer (|v| < 2^53).
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_names_round_trip() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_wire(t.as_str()), Some(t));
            assert_eq!(EventType::ALL[t.index()], t);
        }
        assert_eq!(EventType::from_wire("Playback_start"), None);
    }

    #[test]
    fn payload_json_is_compact_and_ordered() {
        let p = Payload::PlaybackStart {
            position_ms: 0.0,
            duration_ms: 3_600_000.0,
            content_id: "movie-\"1\"\n".into(),
            startup_ms: None,
        };
        assert_eq!(
            p.to_json(),
            r#"{"positionMs":0,"durationMs":3600000,"contentId":"movie-\"1\"\n"}"#
        );
        let p = Payload::Error {
            code: "E1".into(),
            message: "bad\u{1}".into(),
            fatal: true,
        };
        assert_eq!(
            p.to_json(),
            r#"{"code":"E1","message":"bad\u0001","fatal":true}"#
        );
        let p = Payload::SessionEnd {
            reason: EndReason::Unloaded,
            duration_ms: 12.5,
        };
        assert_eq!(p.to_json(), r#"{"reason":"unloaded","durationMs":12.5}"#);
        let p = Payload::QualityChange {
            from: "720p".into(),
            to: "1080p".into(),
            bitrate: -1.0,
            width: None,
            height: None,
        };
        assert_eq!(p.to_json(), r#"{"from":"720p","to":"1080p","bitrate":-1}"#);
        for (i, p) in [
            Payload::PlaybackPause {
                position_ms: 1.0,
                buffered_ms: 2.0,
            },
            Payload::PlaybackResume {
                position_ms: 1.0,
                buffered_ms: 2.0,
            },
            Payload::RebufferStart {
                position_ms: 1.0,
                buffered_ms: 2.0,
            },
            Payload::RebufferEnd {
                position_ms: 1.0,
                buffered_ms: 2.0,
            },
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(p.to_json(), r#"{"positionMs":1,"bufferedMs":2}"#);
            assert_eq!(p.event_type(), EventType::ALL[i + 1]);
        }
    }

    #[test]
    fn payload_json_appends_present_optional_fields_after_the_contract_fields() {
        let p = Payload::PlaybackStart {
            position_ms: 0.0,
            duration_ms: 0.0,
            content_id: "c".into(),
            startup_ms: Some(1234.5),
        };
        assert_eq!(
            p.to_json(),
            r#"{"positionMs":0,"durationMs":0,"contentId":"c","startupMs":1234.5}"#
        );
        let p = Payload::QualityChange {
            from: String::new(),
            to: "720p".into(),
            bitrate: 1_500_000.0,
            width: Some(1280.0),
            height: Some(720.0),
        };
        assert_eq!(
            p.to_json(),
            r#"{"from":"","to":"720p","bitrate":1500000,"width":1280,"height":720}"#
        );
        // Each optional field on its own, in contract order.
        let only_height = Payload::QualityChange {
            from: "a".into(),
            to: "b".into(),
            bitrate: 1.0,
            width: None,
            height: Some(0.0),
        };
        assert_eq!(
            only_height.to_json(),
            r#"{"from":"a","to":"b","bitrate":1,"height":0}"#
        );
    }

    #[test]
    fn payload_json_parses_back() {
        let p = Payload::QualityChange {
            from: "a\u{7f}é😀".into(),
            to: "b".into(),
            bitrate: 0.1,
            width: None,
            height: None,
        };
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).expect("valid json");
        assert_eq!(v["from"], "a\u{7f}é😀");
        assert_eq!(v["bitrate"], 0.1);
    }
}
