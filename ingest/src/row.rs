//! The stored forms shared by every sink: [`EventRow`], one telemetry event, and
//! [`BatchRecord`], the view dimensions one ingest batch carried (stored once per batch,
//! never per event), with [`SinkWrite`], what one sink write stores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::ua::UaClass;
use crate::wire::{push_json_string, Batch, Context, EventType};

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

/// What one ingest batch says about its view (analytics.md §1): the batch `context`
/// and the browser, OS and device type of the request's `User-Agent`. Stored once per
/// batch in the `view_batches` table, in the same durable write as the batch's events.
/// A retried batch stores another record with the same content, which changes nothing
/// (analytics' dimension rule is order-independent for identical records).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    /// Owner of the API key (as [`EventRow::owner`]).
    pub owner: Arc<str>,
    /// `sessionId`.
    pub session_id: Arc<str>,
    /// Earliest event `ts` of the batch (epoch ms).
    pub first_ts_ms: i64,
    /// The batch `context`; all fields absent when the batch had none (SDK 0.1.0).
    /// Shared: the live views read it after the write without copying its strings.
    pub context: Arc<Context>,
    /// Classification of the request's `User-Agent` (`unknown` when absent).
    pub user_agent: UaClass,
}

impl BatchRecord {
    /// A record without context and with an unknown user agent: what a batch written
    /// through the row-only paths ([`crate::WriterHandle::submit`], [`SinkWrite::from_rows`])
    /// says about its view.
    pub fn bare(owner: Arc<str>, session_id: Arc<str>, first_ts_ms: i64) -> Self {
        BatchRecord {
            owner,
            session_id,
            first_ts_ms,
            context: Arc::default(),
            user_agent: UaClass::unknown(),
        }
    }

    /// The `dims` column: compact JSON with the context fields the batch carried (an
    /// absent field is left out, an empty one kept as `""`), `tags` (an object, `{}` when
    /// none) and `browser`, `os`, `deviceType`. Key order is fixed, so equal records
    /// give equal text:
    /// `{"sdk":…,"player":…,"contentId":…,"src":…,"tags":{…},"browser":…,"os":…,"deviceType":…}`.
    pub fn dims_json(&self) -> String {
        let mut out = String::with_capacity(160);
        out.push('{');
        let c = &self.context;
        for (key, value) in [
            ("sdk", &c.sdk),
            ("player", &c.player),
            ("contentId", &c.content_id),
            ("src", &c.src),
        ] {
            if let Some(v) = value {
                push_json_string(&mut out, key);
                out.push(':');
                push_json_string(&mut out, v);
                out.push(',');
            }
        }
        out.push_str("\"tags\":{");
        for (i, (k, v)) in c.tags.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_string(&mut out, k);
            out.push(':');
            push_json_string(&mut out, v);
        }
        out.push_str("},\"browser\":");
        push_json_string(&mut out, &self.user_agent.browser);
        out.push_str(",\"os\":");
        push_json_string(&mut out, &self.user_agent.os);
        out.push_str(",\"deviceType\":");
        push_json_string(&mut out, self.user_agent.device_type);
        out.push('}');
        out
    }
}

/// One durable write of a sink: event rows and the records of the batches that
/// carried them. Both are stored before the write is acknowledged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkWrite {
    /// Event rows (any order; duplicates allowed, the first stored of a key wins).
    pub rows: Vec<EventRow>,
    /// One record per ingest batch in the write, in submission order.
    pub batches: Vec<BatchRecord>,
}

impl SinkWrite {
    /// A write of `rows` with one [`BatchRecord::bare`] per `(owner, session)` in them,
    /// so analytics still derives their views (with unknown dimensions).
    pub fn from_rows(rows: Vec<EventRow>) -> Self {
        let batches = bare_records(&rows);
        SinkWrite { rows, batches }
    }

    /// True when there is nothing to store.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.batches.is_empty()
    }
}

impl From<Vec<EventRow>> for SinkWrite {
    fn from(rows: Vec<EventRow>) -> Self {
        SinkWrite::from_rows(rows)
    }
}

/// One bare record per `(owner, session)` of `rows` (first seen order), with the
/// earliest `ts` of its rows.
pub(crate) fn bare_records(rows: &[EventRow]) -> Vec<BatchRecord> {
    let mut first: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    let mut order: Vec<(Arc<str>, Arc<str>)> = Vec::new();
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    for r in rows {
        let key = (&*r.owner, &*r.session_id);
        let ts = first.entry(key).or_insert(r.ts_ms);
        *ts = (*ts).min(r.ts_ms);
        if seen.insert(key) {
            order.push((r.owner.clone(), r.session_id.clone()));
        }
    }
    order
        .into_iter()
        .map(|(owner, session)| {
            let ts = first[&(&*owner, &*session)];
            BatchRecord::bare(owner, session, ts)
        })
        .collect()
}

impl Batch {
    /// Converts a validated batch into rows owned by `owner`.
    pub fn into_rows(self, owner: &str) -> Vec<EventRow> {
        self.into_write(owner, UaClass::unknown()).0
    }

    /// Converts a validated batch into its rows and its [`BatchRecord`], given the
    /// classification of the request's `User-Agent` (see [`crate::UaCache`]); the form
    /// [`crate::WriterHandle::submit_batch`] takes.
    pub fn into_write(self, owner: &str, user_agent: UaClass) -> (Vec<EventRow>, BatchRecord) {
        let owner: Arc<str> = Arc::from(owner);
        let session_id: Arc<str> = Arc::from(self.session_id);
        let first_ts_ms = self.events.iter().map(|e| e.ts_ms).min().unwrap_or(0);
        let rows = self
            .events
            .into_iter()
            .map(|e| EventRow {
                owner: owner.clone(),
                session_id: session_id.clone(),
                ts_ms: e.ts_ms,
                event_type: e.event_type(),
                payload: e.payload.to_json(),
                content_id: e.payload.content_id().unwrap_or_default().to_owned(),
            })
            .collect();
        let record = BatchRecord {
            owner,
            session_id,
            first_ts_ms,
            context: Arc::new(self.context.unwrap_or_default()),
            user_agent,
        };
        (rows, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ua() -> UaClass {
        UaClass {
            browser: Arc::from("Chrome"),
            os: Arc::from("Windows"),
            device_type: "desktop",
        }
    }

    #[test]
    fn dims_json_has_fixed_order_and_keeps_empty_but_drops_absent_fields() {
        let mut tags = BTreeMap::new();
        tags.insert("plan".to_owned(), "pre\"mium".to_owned());
        tags.insert("ab".to_owned(), String::new());
        let r = BatchRecord {
            owner: Arc::from("o"),
            session_id: Arc::from("s"),
            first_ts_ms: 1,
            context: Arc::new(Context {
                sdk: Some("sdk@0.2.0".into()),
                player: None,
                content_id: Some(String::new()),
                src: Some("https://x/y.m3u8".into()),
                tags,
            }),
            user_agent: ua(),
        };
        assert_eq!(
            r.dims_json(),
            r#"{"sdk":"sdk@0.2.0","contentId":"","src":"https://x/y.m3u8","tags":{"ab":"","plan":"pre\"mium"},"browser":"Chrome","os":"Windows","deviceType":"desktop"}"#
        );
        let bare = BatchRecord::bare(Arc::from("o"), Arc::from("s"), 5);
        assert_eq!(
            bare.dims_json(),
            r#"{"tags":{},"browser":"unknown","os":"unknown","deviceType":"unknown"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&r.dims_json()).expect("valid json");
        assert_eq!(v["tags"]["plan"], "pre\"mium");
    }

    #[test]
    fn bare_records_one_per_session_with_earliest_ts() {
        let row = |s: &str, ts: i64| EventRow {
            owner: Arc::from("o"),
            session_id: Arc::from(s),
            ts_ms: ts,
            event_type: EventType::PlaybackPause,
            payload: "{}".into(),
            content_id: String::new(),
        };
        let w = SinkWrite::from_rows(vec![row("b", 9), row("a", 5), row("b", 3), row("a", 7)]);
        let got: Vec<(&str, i64)> = w
            .batches
            .iter()
            .map(|b| (&*b.session_id, b.first_ts_ms))
            .collect();
        assert_eq!(got, vec![("b", 3), ("a", 5)]);
        assert!(w.batches.iter().all(|b| *b.context == Context::default()));
    }
}
