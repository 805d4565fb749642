//! The stored form of one telemetry event, shared by every sink.

use std::sync::Arc;

use crate::wire::{Batch, EventType};

/// One event as stored. The dedup key is `(owner, session_id, ts_ms, event_type)`
/// (decisions.md §2): within one account that is the contract's
/// `(sessionId, ts, type)`, and no account can shadow another's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Id of the user who owns the API key the batch was posted with.
    pub owner: Arc<str>,
    /// `sessionId` of the batch.
    pub session_id: Arc<str>,
    /// Event time in epoch milliseconds.
    pub ts_ms: i64,
    /// Event type.
    pub event_type: EventType,
    /// The payload as compact JSON (see [`crate::Payload::to_json`]).
    pub payload: String,
    /// `contentId` for `playback_start`, empty otherwise.
    pub content_id: String,
}

impl Batch {
    /// Converts a validated batch into rows owned by `owner`.
    pub fn into_rows(self, owner: &str) -> Vec<EventRow> {
        let owner: Arc<str> = Arc::from(owner);
        let session_id: Arc<str> = Arc::from(self.session_id);
        self.events
            .into_iter()
            .map(|e| EventRow {
                owner: owner.clone(),
                session_id: session_id.clone(),
                ts_ms: e.ts_ms,
                event_type: e.event_type(),
                payload: e.payload.to_json(),
                content_id: e.payload.content_id().unwrap_or_default().to_owned(),
            })
            .collect()
    }
}
