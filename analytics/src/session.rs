//! The read models of the session read-back (`GET /api/v1/telemetry/sessions` and a
//! session's events): [`SessionSummary`] with its [`TypeCounts`], and [`StoredEvent`], one
//! deduplicated event as stored (also the stored form the fleet generator and the
//! derivation tests build views from). Read by [`crate::Store`].

use ingest::time::serialize_ms;
use ingest::EventType;
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// Per-type event counts of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeCounts(pub [u64; 8]);

impl TypeCounts {
    /// Count for one type.
    pub fn get(&self, t: EventType) -> u64 {
        self.0[t.index()]
    }

    /// Sum over all types.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl Serialize for TypeCounts {
    /// `{"playback_start": n, …}` with all eight types, zeros included.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("TypeCounts", 8)?;
        for t in EventType::ALL {
            st.serialize_field(t.as_str(), &self.get(t))?;
        }
        st.end()
    }
}

/// Summary of one session, as listed by `GET /api/v1/telemetry/sessions`.
///
/// Serializes with the contract's camelCase names and ISO 8601 timestamps.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// `sessionId`.
    pub session_id: String,
    /// `contentId` of the session's earliest `playback_start`, if any.
    pub content_id: Option<String>,
    /// Earliest event time (epoch ms).
    #[serde(serialize_with = "serialize_ms")]
    pub first_event_at: i64,
    /// Latest event time (epoch ms).
    #[serde(serialize_with = "serialize_ms")]
    pub last_event_at: i64,
    /// Number of distinct (deduplicated) events.
    pub event_count: u64,
    /// Deduplicated event counts per type.
    pub counts: TypeCounts,
}

/// One stored event as read back: serializes as `{"type", "ts", "payload"}` with
/// the payload as its JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// Event type.
    pub event_type: EventType,
    /// Event time (epoch ms).
    pub ts_ms: i64,
    /// Payload as compact JSON text.
    pub payload: String,
}

impl Serialize for StoredEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw = serde_json::value::RawValue::from_string(self.payload.clone())
            .map_err(serde::ser::Error::custom)?;
        let mut st = s.serialize_struct("StoredEvent", 3)?;
        st.serialize_field("type", self.event_type.as_str())?;
        st.serialize_field("ts", &ingest::time::format_ms(self.ts_ms))?;
        st.serialize_field("payload", &raw)?;
        st.end()
    }
}
