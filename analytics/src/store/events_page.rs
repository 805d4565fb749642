//! One session's events a page at a time (decisions.md §14): at most `limit` events and
//! about `payload_bytes` of payload per page, in `(ts, type)` order, read as a stream that
//! stops as soon as the page is full. A session planted with millions of events (anyone
//! holding a public ingest key can) is then never loaded whole: not by the read-back route,
//! not by the view's page.
//!
//! `(ts, type)` is unique within one owner's session (the dedup key), so the last event of a
//! page is an exact cursor for the next.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use clickhouse::Row;
use futures_util::TryStreamExt;
use ingest::EventType;
use serde::Deserialize;
use sqlx::Row as _;

use super::clickhouse::ChStore;
use super::sqlite::SqliteStore;
use super::{AnalyticsError, Engine, Store};
use crate::session::StoredEvent;

/// A `ts` below every stored one (telemetry `ts` lies in years 0000–9999), for a first page.
const BEFORE_ANY_TS: i64 = i64::MIN / 2;

/// Where the next page starts: after the event at `(ts_ms, event_type)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventCursor {
    pub ts_ms: i64,
    pub event_type: EventType,
}

impl EventCursor {
    fn of(e: &StoredEvent) -> Self {
        EventCursor {
            ts_ms: e.ts_ms,
            event_type: e.event_type,
        }
    }

    /// The opaque wire form: unpadded base64url of `<ts>:<type>`.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.ts_ms, self.event_type.as_str()))
    }

    /// Reads the wire form; `None` for anything [`EventCursor::encode`] cannot produce.
    pub fn decode(s: &str) -> Option<Self> {
        let text = String::from_utf8(URL_SAFE_NO_PAD.decode(s).ok()?).ok()?;
        let (ts, t) = text.split_once(':')?;
        let cursor = EventCursor {
            ts_ms: ts.parse().ok()?,
            event_type: EventType::from_wire(t)?,
        };
        (cursor.encode() == s).then_some(cursor)
    }
}

/// How much one page holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Events.
    pub events: usize,
    /// Payload bytes: the page ends after the event that reaches this (so one event larger
    /// than the budget is still a page of its own).
    pub payload_bytes: usize,
}

/// A page of a session's events and the cursor of the next (`None` on the last page).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventsPage {
    pub events: Vec<StoredEvent>,
    pub next: Option<EventCursor>,
}

/// Fills a page from rows in order; tells the reader when to stop.
struct PageFill {
    limits: PageLimits,
    bytes: usize,
    page: EventsPage,
}

impl PageFill {
    fn new(limits: PageLimits) -> Self {
        PageFill {
            limits: PageLimits {
                events: limits.events.max(1),
                payload_bytes: limits.payload_bytes,
            },
            bytes: 0,
            page: EventsPage::default(),
        }
    }

    /// Takes one more event; `false` once the page is full (that event belongs to the next
    /// page, whose cursor is now set).
    fn push(&mut self, e: StoredEvent) -> bool {
        if self.page.events.len() >= self.limits.events || self.bytes >= self.limits.payload_bytes {
            self.page.next = self.page.events.last().map(EventCursor::of);
            return false;
        }
        self.bytes += e.payload.len();
        self.page.events.push(e);
        true
    }
}

fn event_type(t: &str) -> Result<EventType, AnalyticsError> {
    EventType::from_wire(t)
        .ok_or_else(|| AnalyticsError::Permanent(format!("unknown stored event type {t:?}")))
}

#[derive(Row, Deserialize)]
struct PageRow {
    ts: i64,
    event_type: String,
    payload: String,
}

impl ChStore {
    pub(crate) async fn session_events_page(
        &self,
        owner: &str,
        session_id: &str,
        after: Option<EventCursor>,
        limits: PageLimits,
    ) -> Result<EventsPage, AnalyticsError> {
        let (ts, t) = after.map_or((BEFORE_ANY_TS, ""), |c| (c.ts_ms, c.event_type.as_str()));
        // One row more than a page: whether a next page exists.
        let rows = self
            .client
            .query(
                "SELECT ts, type, payload FROM telemetry_events FINAL \
                 WHERE owner = ? AND session_id = ? AND (ts > ? OR (ts = ? AND type > ?)) \
                 ORDER BY ts ASC, type ASC LIMIT ?",
            )
            .bind(owner)
            .bind(session_id)
            .bind(ts)
            .bind(ts)
            .bind(t)
            .bind(limits.events.max(1) as u64 + 1)
            .fetch_all::<PageRow>()
            .await
            .map_err(super::clickhouse::map_err)?;
        let mut fill = PageFill::new(limits);
        for r in rows {
            let e = StoredEvent {
                event_type: event_type(&r.event_type)?,
                ts_ms: r.ts,
                payload: r.payload,
            };
            if !fill.push(e) {
                break;
            }
        }
        Ok(fill.page)
    }
}

impl SqliteStore {
    pub(crate) async fn session_events_page(
        &self,
        owner: &str,
        session_id: &str,
        after: Option<EventCursor>,
        limits: PageLimits,
    ) -> Result<EventsPage, AnalyticsError> {
        let (ts, t) = after.map_or((BEFORE_ANY_TS, ""), |c| (c.ts_ms, c.event_type.as_str()));
        let limit = i64::try_from(limits.events.max(1)).unwrap_or(i64::MAX - 1) + 1;
        let mut rows = sqlx::query(
            "SELECT ts, type, payload FROM telemetry_events \
             WHERE owner = ? AND session_id = ? AND (ts > ? OR (ts = ? AND type > ?)) \
             ORDER BY ts ASC, type ASC LIMIT ?",
        )
        .bind(owner)
        .bind(session_id)
        .bind(ts)
        .bind(ts)
        .bind(t)
        .bind(limit)
        .fetch(self.sink.pool());
        let mut fill = PageFill::new(limits);
        while let Some(r) = rows.try_next().await.map_err(super::sqlite::map_err)? {
            let t: String = r.try_get(1).map_err(super::sqlite::map_err)?;
            let e = StoredEvent {
                event_type: event_type(&t)?,
                ts_ms: r.try_get(0).map_err(super::sqlite::map_err)?,
                payload: r.try_get(2).map_err(super::sqlite::map_err)?,
            };
            if !fill.push(e) {
                break;
            }
        }
        Ok(fill.page)
    }
}

impl Store {
    /// A page of the deduplicated events of one of the owner's sessions, `ts` ascending (ties
    /// by type name), starting after `after`; an empty first page when the session does not
    /// exist for this owner.
    pub async fn session_events_page(
        &self,
        owner: &str,
        session_id: &str,
        after: Option<EventCursor>,
        limits: PageLimits,
    ) -> Result<EventsPage, AnalyticsError> {
        self.guarded(async {
            match &self.engine {
                Engine::ClickHouse(ch) => {
                    ch.session_events_page(owner, session_id, after, limits)
                        .await
                }
                Engine::Sqlite(sq) => {
                    sq.session_events_page(owner, session_id, after, limits)
                        .await
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: i64, payload: &str) -> StoredEvent {
        StoredEvent {
            event_type: EventType::PlaybackPause,
            ts_ms: ts,
            payload: payload.to_owned(),
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let c = EventCursor {
            ts_ms: 1_767_261_600_123,
            event_type: EventType::RebufferStart,
        };
        assert_eq!(EventCursor::decode(&c.encode()), Some(c));
        for bad in [
            "",
            "x",
            "MTIz",
            &URL_SAFE_NO_PAD.encode("12:nope"),
            &URL_SAFE_NO_PAD.encode("+12:error"),
        ] {
            assert_eq!(EventCursor::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_page_ends_at_its_count_or_once_its_bytes_are_reached() {
        let mut f = PageFill::new(PageLimits {
            events: 2,
            payload_bytes: 1000,
        });
        assert!(f.push(ev(1, "{}")));
        assert!(f.push(ev(2, "{}")));
        assert!(!f.push(ev(3, "{}")));
        assert_eq!(f.page.events.len(), 2);
        assert_eq!(f.page.next.map(|c| c.ts_ms), Some(2));

        let big = "x".repeat(600);
        let mut f = PageFill::new(PageLimits {
            events: 100,
            payload_bytes: 1000,
        });
        assert!(f.push(ev(1, &big)));
        assert!(f.push(ev(2, &big)), "under the budget before it");
        assert!(!f.push(ev(3, "{}")));
        assert_eq!(f.page.events.len(), 2);

        // The last rows of a session: no next page.
        let mut f = PageFill::new(PageLimits {
            events: 5,
            payload_bytes: 1000,
        });
        assert!(f.push(ev(1, "{}")));
        assert_eq!(f.page.next, None);
    }
}
