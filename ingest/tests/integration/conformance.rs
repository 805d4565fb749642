//! One conformance suite for every telemetry sink: each case runs against the
//! embedded SQLite sink and against ClickHouse (fresh database per test at
//! `CLICKHOUSE_URL`, default http://127.0.0.1:8123).

use crate::common;

use analytics::StoredEvent;
use common::{row, session_rows, T0};
use ingest::EventType;
use serde_json::json;

type Sink = common::Handle;

/// (ts offset, type) pairs of stored events, for compact assertions.
fn keys(events: &[StoredEvent]) -> Vec<(i64, EventType)> {
    events
        .iter()
        .map(|e| (e.ts_ms - T0, e.event_type))
        .collect()
}

async fn stores_and_reads_back_events_in_ts_order(sink: Sink) {
    let mut rows = session_rows("u1", "s1", 0, 16);
    rows.reverse();
    sink.write(rows.clone()).await.expect("write");
    let events = sink.session_events("u1", "s1").await.expect("read");
    assert_eq!(events.len(), 16);
    assert!(events.windows(2).all(|w| w[0].ts_ms < w[1].ts_ms));
    assert_eq!(events[0].event_type, EventType::PlaybackStart);
    assert_eq!(
        events[0].payload,
        r#"{"positionMs":0,"durationMs":3600000,"contentId":"content-0"}"#
    );
    assert_eq!(
        serde_json::to_value(&events[1]).expect("json"),
        json!({"type": "playback_pause", "ts": "2024-05-01T12:00:01.000Z",
               "payload": {"positionMs": 1, "bufferedMs": 1}})
    );
}

async fn repeated_batch_is_stored_once(sink: Sink) {
    let rows = session_rows("u1", "s1", 0, 50);
    sink.write(rows.clone()).await.expect("first");
    sink.write(rows.clone()).await.expect("second");
    sink.write(rows.clone()).await.expect("third");
    assert_eq!(
        sink.session_events("u1", "s1").await.expect("read").len(),
        50
    );
    let sessions = sink.sessions("u1", 10).await.expect("sessions");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].event_count, 50);
    assert_eq!(sessions[0].counts.total(), 50);
}

async fn overlapping_batches_store_each_key_once(sink: Sink) {
    let all = session_rows("u1", "s1", 0, 30);
    sink.write(all[0..20].to_vec()).await.expect("a");
    sink.write(all[10..30].to_vec()).await.expect("b");
    let events = sink.session_events("u1", "s1").await.expect("read");
    assert_eq!(events.len(), 30);
    assert_eq!(keys(&events), keys(&sink_rows_as_events(&all)));
}

fn sink_rows_as_events(rows: &[ingest::EventRow]) -> Vec<StoredEvent> {
    rows.iter()
        .map(|r| StoredEvent {
            event_type: r.event_type,
            ts_ms: r.ts_ms,
            payload: r.payload.clone(),
        })
        .collect()
}

async fn first_stored_row_of_a_key_wins(sink: Sink) {
    let first = row("u1", "s1", 0, EventType::PlaybackPause, 1.0);
    let second = row("u1", "s1", 0, EventType::PlaybackPause, 2.0);
    sink.write(vec![first.clone()]).await.expect("first");
    sink.write(vec![second.clone()]).await.expect("second");
    let events = sink.session_events("u1", "s1").await.expect("read");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, first.payload);
}

async fn duplicates_within_one_write_keep_the_first(sink: Sink) {
    let rows = vec![
        row("u1", "s1", 0, EventType::RebufferStart, 1.0),
        row("u1", "s1", 0, EventType::RebufferStart, 2.0),
        row("u1", "s1", 0, EventType::RebufferEnd, 3.0),
        row("u1", "s1", 0, EventType::RebufferStart, 4.0),
    ];
    sink.write(rows.clone()).await.expect("write");
    let events = sink.session_events("u1", "s1").await.expect("read");
    assert_eq!(
        keys(&events),
        vec![(0, EventType::RebufferEnd), (0, EventType::RebufferStart)],
        "same ts: ordered by type name"
    );
    assert_eq!(events[1].payload, rows[0].payload);
    let sessions = sink.sessions("u1", 10).await.expect("sessions");
    assert_eq!(sessions[0].event_count, 2);
}

async fn same_key_differing_only_in_type_is_kept(sink: Sink) {
    let rows: Vec<_> = EventType::ALL
        .iter()
        .map(|t| row("u1", "s1", 0, *t, 0.0))
        .collect();
    sink.write(rows.clone()).await.expect("write");
    let events = sink.session_events("u1", "s1").await.expect("read");
    let mut names: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        events
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
        names
    );
}

async fn owners_never_see_each_others_rows(sink: Sink) {
    sink.write(session_rows("alice", "shared", 0, 10))
        .await
        .expect("alice");
    sink.write(session_rows("bob", "shared", 0, 4))
        .await
        .expect("bob");
    sink.write(session_rows("bob", "bob-only", 0, 3))
        .await
        .expect("bob 2");
    assert_eq!(
        sink.session_events("alice", "shared")
            .await
            .expect("a")
            .len(),
        10
    );
    assert_eq!(
        sink.session_events("bob", "shared").await.expect("b").len(),
        4
    );
    assert!(sink
        .session_events("alice", "bob-only")
        .await
        .expect("x")
        .is_empty());
    assert!(sink
        .session_events("carol", "shared")
        .await
        .expect("c")
        .is_empty());
    let alice = sink.sessions("alice", 10).await.expect("alice sessions");
    assert_eq!(alice.len(), 1);
    assert_eq!(alice[0].event_count, 10);
    assert!(sink.sessions("carol", 10).await.expect("carol").is_empty());
}

async fn summarises_sessions_newest_first(sink: Sink) {
    // s-old: 8 events from t=0 s; s-new: 20 events from t=100 s; s-mid: no playback_start.
    sink.write(session_rows("u1", "s-old", 0, 8))
        .await
        .expect("old");
    sink.write(session_rows("u1", "s-new", 100, 20))
        .await
        .expect("new");
    let mid = vec![
        row("u1", "s-mid", 50_000, EventType::PlaybackPause, 1.0),
        row("u1", "s-mid", 51_000, EventType::Error, 2.0),
    ];
    sink.write(mid.clone()).await.expect("mid");
    // A later playback_start must not replace the earliest one's contentId.
    sink.write(vec![row(
        "u1",
        "s-new",
        500_000,
        EventType::PlaybackStart,
        99.0,
    )])
    .await
    .expect("late");

    let sessions = sink.sessions("u1", 10).await.expect("sessions");
    let ids: Vec<&str> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["s-new", "s-mid", "s-old"]);

    let new = &sessions[0];
    assert_eq!(new.content_id.as_deref(), Some("content-0"));
    assert_eq!(new.first_event_at, T0 + 100_000);
    assert_eq!(new.last_event_at, T0 + 500_000);
    assert_eq!(new.event_count, 21);
    assert_eq!(new.counts.get(EventType::PlaybackStart), 4);
    assert_eq!(new.counts.get(EventType::SessionEnd), 2);
    assert_eq!(
        serde_json::to_value(new).expect("json"),
        json!({
            "sessionId": "s-new",
            "contentId": "content-0",
            "firstEventAt": "2024-05-01T12:01:40.000Z",
            "lastEventAt": "2024-05-01T12:08:20.000Z",
            "eventCount": 21,
            "counts": {
                "playback_start": 4, "playback_pause": 3, "playback_resume": 3,
                "rebuffer_start": 3, "rebuffer_end": 2, "quality_change": 2,
                "error": 2, "session_end": 2
            }
        })
    );
    assert_eq!(sessions[1].content_id, None);
    assert_eq!(sessions[1].counts.get(EventType::Error), 1);
    assert_eq!(sessions[2].event_count, 8);

    let limited = sink.sessions("u1", 2).await.expect("limited");
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[1].session_id, "s-mid");
}

async fn sessions_with_equal_last_event_order_by_id(sink: Sink) {
    for s in ["b", "a", "c"] {
        sink.write(vec![row("u1", s, 0, EventType::PlaybackStart, 0.0)])
            .await
            .expect("w");
    }
    let ids: Vec<String> = sink
        .sessions("u1", 10)
        .await
        .expect("s")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

async fn round_trips_unicode_and_escapes(sink: Sink) {
    let mut r = row("u1", "sess-é😀", 0, EventType::Error, 0.0);
    r.payload = ingest::Payload::Error {
        code: "E\"1\\".into(),
        message: "línea\nzwei\t😀 \u{1}".into(),
        fatal: true,
    }
    .to_json();
    sink.write(vec![r.clone()]).await.expect("write");
    let events = sink.session_events("u1", "sess-é😀").await.expect("read");
    assert_eq!(events[0].payload, r.payload);
    let v = serde_json::to_value(&events[0]).expect("json");
    assert_eq!(v["payload"]["message"], "línea\nzwei\t😀 \u{1}");
}

async fn keeps_negative_and_far_timestamps(sink: Sink) {
    let mut early = row("u1", "s1", 0, EventType::PlaybackPause, 0.0);
    early.ts_ms = -62_167_219_200_000; // 0000-01-01
    let mut late = row("u1", "s1", 0, EventType::PlaybackResume, 0.0);
    late.ts_ms = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    sink.write(vec![late.clone(), early.clone()])
        .await
        .expect("write");
    let events = sink.session_events("u1", "s1").await.expect("read");
    assert_eq!(
        events.iter().map(|e| e.ts_ms).collect::<Vec<_>>(),
        [early.ts_ms, late.ts_ms]
    );
}

async fn writes_large_batches(sink: Sink) {
    let mut rows = Vec::with_capacity(25_000);
    for s in 0..500 {
        rows.extend(session_rows("u1", &format!("s{s:04}"), s, 50));
    }
    sink.write(rows.clone()).await.expect("write");
    let sessions = sink.sessions("u1", 1000).await.expect("sessions");
    assert_eq!(sessions.len(), 500);
    assert!(sessions.iter().all(|s| s.event_count == 50));
    assert_eq!(
        sink.session_events("u1", "s0123")
            .await
            .expect("read")
            .len(),
        50
    );
}

async fn empty_write_is_ok(sink: Sink) {
    sink.write(vec![]).await.expect("empty write");
    assert!(sink.sessions("u1", 10).await.expect("sessions").is_empty());
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    let t = crate::common::sqlite().await;
                    super::$case(t.handle()).await;
                    t.finish().await;
                }
            )*
        }
        mod clickhouse {
            $(
                #[tokio::test]
                async fn $case() {
                    let t = crate::common::clickhouse().await;
                    super::$case(t.handle()).await;
                    t.finish().await;
                }
            )*
        }
    };
}

conformance!(
    stores_and_reads_back_events_in_ts_order,
    repeated_batch_is_stored_once,
    overlapping_batches_store_each_key_once,
    first_stored_row_of_a_key_wins,
    duplicates_within_one_write_keep_the_first,
    same_key_differing_only_in_type_is_kept,
    owners_never_see_each_others_rows,
    summarises_sessions_newest_first,
    sessions_with_equal_last_event_order_by_id,
    round_trips_unicode_and_escapes,
    keeps_negative_and_far_timestamps,
    writes_large_batches,
    empty_write_is_ok,
);
