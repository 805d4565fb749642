//! Wire types of the telemetry contract: the batch envelope, the closed set of
//! eight event types and their payloads, and the compact JSON a payload is stored as.

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
        /// Previous rendition label.
        from: String,
        /// New rendition label.
        to: String,
        /// Bitrate of the new rendition.
        bitrate: f64,
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
    /// order; unknown fields the client sent are not kept.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push('{');
        match self {
            Payload::PlaybackStart {
                position_ms,
                duration_ms,
                content_id,
            } => {
                num_field(&mut out, "positionMs", *position_ms, true);
                num_field(&mut out, "durationMs", *duration_ms, false);
                str_field(&mut out, "contentId", content_id, false);
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
            Payload::QualityChange { from, to, bitrate } => {
                str_field(&mut out, "from", from, true);
                str_field(&mut out, "to", to, false);
                num_field(&mut out, "bitrate", *bitrate, false);
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
    fn payload_json_parses_back() {
        let p = Payload::QualityChange {
            from: "a\u{7f}é😀".into(),
            to: "b".into(),
            bitrate: 0.1,
        };
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).expect("valid json");
        assert_eq!(v["from"], "a\u{7f}é😀");
        assert_eq!(v["bitrate"], 0.1);
    }
}
