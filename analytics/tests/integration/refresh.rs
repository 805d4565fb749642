//! The refresher on both engines, each with and without live views: a view touched
//! again later is derived again, a retried batch changes nothing, a restarted refresher
//! (fresh state) picks up where the persisted watermark says, several refreshers agree,
//! and on ClickHouse a record that became visible late (inside the margin) is still
//! derived, and a stale upsert never replaces a newer one. With live views, a view is
//! written from memory only while memory holds it whole: another writer's record, a
//! restarted process, a view memory forgot and a failed write each read it back (on
//! SQLite, any record memory did not take).

use crate::common;

use std::sync::Arc;

use analytics::live::Key;
use analytics::query::{Filters, Format, StreamIds, TimeRange, ViewsQuery};
use analytics::{Event, LiveViews, RefreshConfig, Refresher};
use common::Engine;
use ingest::{BatchRecord, Context, EventRow, EventType, SinkWrite, UaClass};

const OWNER: &str = "u1";
/// 2024-05-01T00:00:00.000Z
const T0: i64 = 1_714_521_600_000;

fn row(session: &str, offset_ms: i64, t: EventType, payload: &str) -> EventRow {
    EventRow {
        owner: OWNER.into(),
        session_id: session.into(),
        ts_ms: T0 + offset_ms,
        event_type: t,
        payload: payload.to_owned(),
        content_id: String::new(),
    }
}

fn start(session: &str, offset_ms: i64) -> EventRow {
    row(
        session,
        offset_ms,
        EventType::PlaybackStart,
        r#"{"positionMs":0,"durationMs":1,"contentId":"c1","startupMs":500}"#,
    )
}

fn end(session: &str, offset_ms: i64) -> EventRow {
    row(
        session,
        offset_ms,
        EventType::SessionEnd,
        r#"{"reason":"ended","durationMs":1}"#,
    )
}

fn record(session: &str, rows: &[EventRow], sdk: &str) -> BatchRecord {
    BatchRecord {
        owner: OWNER.into(),
        session_id: session.into(),
        first_ts_ms: rows.iter().map(|r| r.ts_ms).min().unwrap_or(0),
        context: Arc::new(Context {
            sdk: Some(sdk.into()),
            src: Some("https://cdn.example/a.m3u8".into()),
            ..Context::default()
        }),
        user_agent: UaClass::unknown(),
    }
}

/// Writes through the engine's sink; its live views (ClickHouse as the server runs it)
/// take each record's batch, as the ingest route does once the write is acknowledged.
async fn write(e: &Engine, rows: Vec<EventRow>, records: Vec<BatchRecord>) {
    let taken: Vec<_> = records.iter().map(|r| taken(r, &rows)).collect();
    e.sink
        .write(SinkWrite {
            rows,
            batches: records,
        })
        .await
        .expect("write");
    if let Some(live) = &e.live {
        for (key, events, record) in taken {
            live.take(key, events, &record);
        }
    }
}

/// What the ingest route gives the live views for `record`'s batch: its key, the events
/// of its session among `rows`, the record itself (its dimensions).
fn taken(record: &BatchRecord, rows: &[EventRow]) -> (Key, Vec<Event>, BatchRecord) {
    let key = Key::from(record);
    let events = rows
        .iter()
        .filter(|r| r.session_id == record.session_id)
        .map(|r| Event::parse(r.ts_ms, r.event_type, &r.payload))
        .collect();
    (key, events, record.clone())
}

async fn batch(e: &Engine, session: &str, rows: Vec<EventRow>, sdk: &str) {
    let r = record(session, &rows, sdk);
    write(e, rows, vec![r]).await;
}

/// A batch stored through the sink that the live views never take (the route saw its write
/// fail, or it was written before memory's first batch of the view).
async fn batch_memory_never_took(e: &Engine, session: &str, rows: Vec<EventRow>) {
    let rec = record(session, &rows, "sdk");
    e.sink
        .write(SinkWrite {
            rows,
            batches: vec![rec],
        })
        .await
        .expect("write");
}

fn everything() -> ViewsQuery {
    ViewsQuery {
        range: TimeRange {
            from_ms: T0 - 86_400_000,
            to_ms: T0 + 86_400_000,
        },
        filters: Filters::default(),
        limit: 1_000,
        cursor: None,
        format: Format::Json,
    }
}

/// The item of `session` in a views list body.
fn view_of(views: &serde_json::Value, session: &str) -> serde_json::Value {
    views["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["sessionId"] == session))
        .cloned()
        .unwrap_or_else(|| panic!("no view of {session} in {views}"))
}

async fn views_json(e: &Engine) -> serde_json::Value {
    let body = e
        .store
        .views(OWNER, &everything(), &StreamIds::new())
        .await
        .expect("views");
    serde_json::to_value(&body).expect("json")
}

/// The overview over [`everything`]'s range.
async fn overview(e: &Engine) -> analytics::response::OverviewBody {
    e.store
        .overview(
            OWNER,
            &analytics::OverviewQuery {
                range: everything().range,
                filters: Filters::default(),
            },
            &StreamIds::new(),
        )
        .await
        .expect("overview")
}

async fn for_both<F, Fut>(case: F)
where
    F: Fn(Arc<Engine>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for e in common::both().await {
        let e = Arc::new(e);
        case(e.clone()).await;
        if let Ok(e) = Arc::try_unwrap(e) {
            e.finish().await;
        }
    }
}

#[tokio::test]
async fn a_view_touched_again_later_is_derived_again() {
    for_both(|e| async move {
        let mut r = e.refresher();
        batch(&e, "s1", vec![start("s1", 1_000)], "sdk-a").await;
        let first = r.step().await.expect("step");
        assert_eq!(first.derived, 1, "{}", e.name);
        let v = views_json(&e).await;
        assert_eq!(v["items"][0]["endedAt"], "2024-05-01T00:00:01.000Z");
        assert_eq!(v["items"][0]["watchTimeMs"], 0);
        // Nothing new: nothing derived.
        let idle = r.step().await.expect("step");
        assert_eq!(idle.derived, 0, "{} {idle:?}", e.name);
        // A later batch of the same view: derived again.
        batch(&e, "s1", vec![end("s1", 61_000)], "sdk-a").await;
        let again = r.step().await.expect("step");
        assert_eq!(again.derived, 1, "{}", e.name);
        let v = views_json(&e).await;
        assert_eq!(v["items"].as_array().map(Vec::len), Some(1));
        assert_eq!(v["items"][0]["endedAt"], "2024-05-01T00:01:01.000Z");
        assert_eq!(v["items"][0]["watchTimeMs"], 60_000);
    })
    .await;
}

#[tokio::test]
async fn a_retried_batch_changes_nothing() {
    for_both(|e| async move {
        let mut r = e.refresher();
        let rows = vec![start("s1", 0), end("s1", 10_000)];
        batch(&e, "s1", rows.clone(), "sdk-a").await;
        batch(&e, "s2", vec![start("s2", 5_000)], "sdk-b").await;
        r.step().await.expect("step");
        let before = views_json(&e).await;
        // The same batch again (a client retry after a lost response), twice.
        batch(&e, "s1", rows.clone(), "sdk-a").await;
        batch(&e, "s1", rows, "sdk-a").await;
        r.step().await.expect("step");
        assert_eq!(views_json(&e).await, before, "{}", e.name);
        let ov = overview(&e).await;
        assert_eq!(ov.views, 2, "{}", e.name);
        assert_eq!(ov.metrics.watch_time_ms, 10_000, "{}", e.name);
    })
    .await;
}

#[tokio::test]
async fn a_restarted_refresher_derives_what_was_missed() {
    for_both(|e| async move {
        let mut first = e.refresher();
        batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
        first.step().await.expect("step");
        // Written after the last completed step; the process then "crashes" (the
        // refresher and its in-memory state are gone).
        batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
        batch(&e, "s1", vec![end("s1", 3_000)], "sdk").await;
        drop(first);
        let mut restarted = e.refresher();
        let stats = restarted.step().await.expect("step");
        assert!(stats.derived >= 2, "{} {stats:?}", e.name);
        let v = views_json(&e).await;
        let ids: Vec<&str> = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|i| i["sessionId"].as_str())
            .collect();
        assert_eq!(ids, ["s1", "s2"], "{}", e.name);
        assert_eq!(v["items"][0]["endedAt"], "2024-05-01T00:00:03.000Z");
        // And a second refresher running alongside agrees (idempotent upserts).
        let mut other = Refresher::new(e.store.clone());
        other.step().await.expect("step");
        assert_eq!(views_json(&e).await, v, "{}", e.name);
    })
    .await;
}

#[tokio::test]
async fn the_first_batch_by_event_time_sets_the_dimensions() {
    for_both(|e| async move {
        let mut r = e.refresher();
        // Written first but holding later events.
        batch(&e, "s1", vec![end("s1", 9_000)], "late-sdk").await;
        batch(&e, "s1", vec![start("s1", 1_000)], "early-sdk").await;
        r.step().await.expect("step");
        let v = views_json(&e).await;
        assert_eq!(v["items"][0]["sdk"], "early-sdk", "{}", e.name);
        assert_eq!(v["items"][0]["src"], "https://cdn.example/a.m3u8");
    })
    .await;
}

/// A batch of `session` whose context carries `tags`.
async fn tagged_batch(e: &Engine, session: &str, rows: Vec<EventRow>, tags: &[(&str, &str)]) {
    let mut r = record(session, &rows, "sdk");
    r.context = Arc::new(Context {
        tags: tags
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        ..(*r.context).clone()
    });
    write(e, rows, vec![r]).await;
}

/// Sessions of the views whose tag `name` is `value`, sorted.
async fn tagged(e: &Engine, name: &str, value: &str) -> Vec<String> {
    let mut q = everything();
    q.filters.clauses.insert(
        analytics::query::Dimension::Tag(name.to_owned()),
        analytics::query::Clause {
            include: vec![value.to_owned()],
            exclude: vec![],
        },
    );
    let body = e
        .store
        .views(OWNER, &q, &StreamIds::new())
        .await
        .expect("views");
    let v = serde_json::to_value(&body).expect("json");
    let mut ids: Vec<String> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["sessionId"].as_str().expect("sessionId").to_owned())
        .collect();
    ids.sort();
    ids
}

/// A view written again at each step (on SQLite, updated in place once stored) carries
/// exactly the tags of its batches: a tag first seen in a later batch is added, a later
/// value of a known tag does not replace the first, and a step without new tags leaves them
/// as they were.
#[tokio::test]
async fn a_view_written_again_keeps_exactly_its_tags() {
    for_both(|e| async move {
        let mut r = e.refresher();
        tagged_batch(&e, "s1", vec![start("s1", 1_000)], &[("plan", "free")]).await;
        tagged_batch(&e, "s2", vec![start("s2", 1_000)], &[("plan", "pro")]).await;
        r.step().await.expect("step");
        assert_eq!(tagged(&e, "plan", "free").await, ["s1"], "{}", e.name);
        assert_eq!(tagged(&e, "region", "eu").await, Vec::<String>::new());
        tagged_batch(
            &e,
            "s1",
            vec![row("s1", 5_000, EventType::PlaybackPause, "{}")],
            &[("plan", "pro"), ("region", "eu")],
        )
        .await;
        let stats = r.step().await.expect("step");
        assert_eq!(stats.derived, 1, "{} {stats:?}", e.name);
        assert_eq!(tagged(&e, "plan", "free").await, ["s1"], "{}", e.name);
        assert_eq!(tagged(&e, "plan", "pro").await, ["s2"], "{}", e.name);
        assert_eq!(tagged(&e, "region", "eu").await, ["s1"], "{}", e.name);
        let v = view_of(&views_json(&e).await, "s1");
        assert_eq!(
            v["tags"],
            serde_json::json!({"plan": "free", "region": "eu"})
        );
        assert_eq!(v["endedAt"], "2024-05-01T00:00:05.000Z", "{}", e.name);
        // No tags in the batch: the view changes, its tags do not.
        batch(&e, "s1", vec![end("s1", 9_000)], "sdk").await;
        r.step().await.expect("step");
        let v = view_of(&views_json(&e).await, "s1");
        assert_eq!(
            v["tags"],
            serde_json::json!({"plan": "free", "region": "eu"})
        );
        assert_eq!(v["endedAt"], "2024-05-01T00:00:09.000Z", "{}", e.name);
        assert_eq!(tagged(&e, "region", "eu").await, ["s1"], "{}", e.name);
    })
    .await;
}

/// ClickHouse: `row` stored, then its batch record stamped `secs_ago` seconds in the past,
/// as if its insert had still been in flight when the last step ran.
async fn late_batch(e: &Engine, session: &str, row: EventRow, seq: u64, secs_ago: i64) {
    let first_ts = row.ts_ms;
    write(e, vec![row], vec![]).await;
    e.clickhouse()
        .query(
            "INSERT INTO view_batches (owner, session_id, first_ts, seq, written_at, dims) \
             SELECT ?, ?, ?, ?, toDateTime(toUnixTimestamp(now()) - ?), \
             '{\"tags\":{},\"browser\":\"unknown\",\"os\":\"unknown\",\"deviceType\":\"unknown\"}'",
        )
        .bind(OWNER)
        .bind(session)
        .bind(first_ts)
        .bind(seq)
        .bind(secs_ago)
        .execute()
        .await
        .expect("late record");
}

#[tokio::test]
async fn clickhouse_record_visible_late_inside_the_margin_is_derived() {
    let e = common::clickhouse().await;
    let mut r = e.refresher();
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    r.step().await.expect("step");
    // A record stamped 30 s before the last step's watermark (its insert was still in
    // flight when the step ran): inside the 60 s margin.
    late_batch(&e, "s2", start("s2", 0), 1, 30).await;
    let stats = r.step().await.expect("step");
    assert_eq!(stats.derived, 1, "{stats:?}");
    // Only s2 grew: s1 (inside the margin, unchanged) is skipped without a read, or read
    // and found unchanged when its record shares the previous step's second.
    assert_eq!(stats.candidates - stats.unchanged, 1, "{stats:?}");
    let v = views_json(&e).await;
    assert_eq!(v["items"].as_array().map(Vec::len), Some(2));
    // A late record of a view derived already (s1, its end): derived again, though the
    // record's second is before the watermark and s1 has nothing newer.
    late_batch(&e, "s1", end("s1", 61_000), 2, 20).await;
    let stats = r.step().await.expect("step");
    assert_eq!(stats.derived, 1, "{stats:?}");
    let v = views_json(&e).await;
    let s1 = view_of(&v, "s1");
    assert_eq!(s1["endedAt"], "2024-05-01T00:01:01.000Z");
    // Nothing new since: nothing derived.
    let idle = r.step().await.expect("step");
    assert_eq!(idle.derived, 0, "{idle:?}");
    e.finish().await;
}

/// ClickHouse: batch records pass a Buffer table, which a server crash empties while the
/// records' events stay stored. A step that sees the server started after the start it
/// last recorded derives again every session written to since the last step, found by
/// its events' `ver`; the lost context reads as unknown, the metrics are whole.
#[tokio::test]
async fn clickhouse_after_a_server_restart_views_whose_records_were_lost_are_derived() {
    let e = common::clickhouse().await;
    let mut r = e.refresher();
    batch(&e, "kept", vec![start("kept", 0)], "sdk").await;
    assert_eq!(r.step().await.expect("step").derived, 1);
    // Events stored, their record lost (what a crash leaves of a write in the Buffer).
    write(&e, vec![start("lost", 1_000), end("lost", 9_000)], vec![]).await;
    let stats = r.step().await.expect("step");
    assert_eq!(
        stats.derived, 0,
        "no record and no restart: not seen ({stats:?})"
    );
    as_if_clickhouse_restarted(&e).await;
    let stats = r.step().await.expect("step");
    // Both sessions were written to since the last step's window start (the recovery
    // window is that wide on purpose): both derived again.
    assert_eq!(stats.derived, 2, "{stats:?}");
    let v = views_json(&e).await;
    let kept = view_of(&v, "kept");
    assert_eq!(
        kept["sdk"], "sdk",
        "its own record still decides its context"
    );
    let lost = view_of(&v, "lost");
    assert_eq!(lost["endedAt"], "2024-05-01T00:00:09.000Z");
    assert_eq!(lost["sdk"], serde_json::Value::Null);
    assert_eq!(lost["browser"], "unknown");
    // The restart is recorded: the next step recovers nothing again.
    let idle = r.step().await.expect("step");
    assert_eq!(idle.derived, 0, "{idle:?}");
    e.finish().await;
}

#[tokio::test]
async fn clickhouse_a_stale_upsert_never_replaces_a_newer_view() {
    let e = common::clickhouse().await;
    let mut r = e.refresher();
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    batch(&e, "s1", vec![end("s1", 20_000)], "sdk").await;
    r.step().await.expect("step");
    let good = views_json(&e).await;
    // Another instance that read less data (one record, one event) writes afterwards.
    e.clickhouse()
        .query(
            "INSERT INTO qoe_views (owner, session_id, started_at, ended_at, started, failed, \
             startup_failure, exit_before_start, rebuffer_count, rebuffer_ms, paused_ms, \
             watch_time_ms, bitrate_weighted_sum, bitrate_covered_ms, rendition_switches, \
             upshifts, downshifts, error_count, browser, os, device_type, batch_rows, \
             event_rows, version, derived_at) \
             VALUES (?, 's1', ?, ?, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'x', 'x', 'x', \
             1, 1, 4294967297, 0)",
        )
        .bind(OWNER)
        .bind(T0)
        .bind(T0)
        .execute()
        .await
        .expect("stale row");
    assert_eq!(views_json(&e).await, good);
    e.finish().await;
}

/// Views whose `startedAt` lies in `[from, to)`, through the overview (the count) and
/// the views list (the session ids).
async fn views_in(e: &Engine, from_ms: i64, to_ms: i64) -> (i64, Vec<String>) {
    let range = TimeRange { from_ms, to_ms };
    let overview = e
        .store
        .overview(
            OWNER,
            &analytics::query::OverviewQuery {
                range,
                filters: Filters::default(),
            },
            &StreamIds::new(),
        )
        .await
        .expect("overview");
    let list = e
        .store
        .views(
            OWNER,
            &ViewsQuery {
                range,
                ..everything()
            },
            &StreamIds::new(),
        )
        .await
        .expect("views");
    let v = serde_json::to_value(&list).expect("json");
    let ids = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["sessionId"].as_str().unwrap_or_default().to_owned())
        .collect();
    (overview.views, ids)
}

#[tokio::test]
async fn a_late_batch_moves_a_view_to_an_earlier_day() {
    for_both(|e| async move {
        let mut r = e.refresher();
        let day = 86_400_000;
        // First seen on 2024-05-01 (T0 + 1 h), then a batch from the evening before.
        batch(&e, "s1", vec![start("s1", 3_600_000)], "sdk").await;
        r.step().await.expect("step");
        assert_eq!(
            views_in(&e, T0, T0 + day).await,
            (1, vec!["s1".to_owned()]),
            "{}",
            e.name
        );
        batch(
            &e,
            "s1",
            vec![row("s1", -3_600_000, EventType::PlaybackPause, "{}")],
            "sdk",
        )
        .await;
        r.step().await.expect("step");
        assert_eq!(views_in(&e, T0, T0 + day).await, (0, vec![]), "{}", e.name);
        assert_eq!(
            views_in(&e, T0 - day, T0).await,
            (1, vec!["s1".to_owned()]),
            "{}",
            e.name
        );
        assert_eq!(
            views_in(&e, T0 - day, T0 + day).await,
            (1, vec!["s1".to_owned()]),
            "{}",
            e.name
        );
        // Moving back and forth across many days keeps exactly one view.
        batch(&e, "s1", vec![end("s1", 3 * day)], "sdk").await;
        r.step().await.expect("step");
        batch(
            &e,
            "s1",
            vec![row("s1", -2 * day, EventType::PlaybackPause, "{}")],
            "sdk",
        )
        .await;
        r.step().await.expect("step");
        assert_eq!(
            views_in(&e, T0 - 3 * day, T0 + 4 * day).await,
            (1, vec!["s1".to_owned()]),
            "{}",
            e.name
        );
        assert_eq!(
            views_in(&e, T0 - day, T0 + 4 * day).await,
            (0, vec![]),
            "{}",
            e.name
        );
    })
    .await;
}

/// A view that moves to a day more than a year earlier (a late batch of the same session):
/// its stored row lies beyond the days every upsert tombstones, so the step finds it and
/// tombstones it too, also after the refresher's first step (when it reads no stored view
/// otherwise).
#[tokio::test]
async fn a_view_moved_back_over_a_year_keeps_one_row() {
    for_both(|e| async move {
        let mut r = e.refresher();
        let day = 86_400_000;
        batch(&e, "s1", vec![start("s1", 400 * day)], "sdk").await;
        batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
        r.step().await.expect("step");
        assert_eq!(
            views_in(&e, T0 + 399 * day, T0 + 401 * day).await,
            (1, vec!["s1".to_owned()]),
            "{}",
            e.name
        );
        batch(
            &e,
            "s1",
            vec![row("s1", 0, EventType::PlaybackPause, "{}")],
            "sdk",
        )
        .await;
        let stats = r.step().await.expect("step");
        assert_eq!(stats.derived, 1, "{} {stats:?}", e.name);
        assert_eq!(
            views_in(&e, T0 + 399 * day, T0 + 401 * day).await,
            (0, vec![]),
            "{}",
            e.name
        );
        let (n, mut ids) = views_in(&e, T0 - day, T0 + 401 * day).await;
        ids.sort();
        assert_eq!(
            (n, ids),
            (2, vec!["s1".to_owned(), "s2".to_owned()]),
            "{}",
            e.name
        );
    })
    .await;
}

#[tokio::test]
async fn clickhouse_a_stale_upsert_under_a_later_day_never_shows() {
    let e = common::clickhouse().await;
    let mut r = e.refresher();
    let day = 86_400_000;
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    batch(&e, "s1", vec![end("s1", day + 20_000)], "sdk").await;
    r.step().await.expect("step");
    let good = views_json(&e).await;
    // Another instance that saw only the second batch writes afterwards, under the next
    // day: the newer derivation's tombstone there hides it.
    e.clickhouse()
        .query(
            "INSERT INTO qoe_views (owner, session_id, started_at, ended_at, started, failed, \
             startup_failure, exit_before_start, rebuffer_count, rebuffer_ms, paused_ms, \
             watch_time_ms, bitrate_weighted_sum, bitrate_covered_ms, rendition_switches, \
             upshifts, downshifts, error_count, browser, os, device_type, batch_rows, \
             event_rows, version, derived_at) \
             VALUES (?, 's1', ?, ?, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'x', 'x', 'x', \
             1, 1, 4294967297, 0)",
        )
        .bind(OWNER)
        .bind(T0 + day + 20_000)
        .bind(T0 + day + 20_000)
        .execute()
        .await
        .expect("stale row");
    assert_eq!(views_json(&e).await, good);
    assert_eq!(views_in(&e, T0 + day, T0 + 2 * day).await, (0, vec![]));
    e.finish().await;
}

/// Several records per session, two with the same dims: the refresher reads one row per
/// distinct dims (ClickHouse) and must still resolve every field as analytics.md §2 says
/// and count every record (else the record-count check would re-derive the view forever).
#[tokio::test]
async fn records_with_repeated_dims_resolve_and_count_like_every_record() {
    for_both(|e| async move {
        let tagged = |rows: &[EventRow], tags: &[(&str, &str)]| BatchRecord {
            context: Arc::new(Context {
                tags: tags
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                ..(*record("s1", rows, "sdk").context).clone()
            }),
            ..record("s1", rows, "sdk")
        };
        let mut r = e.refresher();
        for (offset, tags) in [
            (9_000, &[("plan", "free")][..]),
            (1_000, &[("plan", "free")][..]),
            (5_000, &[("plan", "pro"), ("region", "eu")][..]),
        ] {
            let rows = vec![row("s1", offset, EventType::PlaybackPause, "")];
            let rec = tagged(&rows, tags);
            write(&e, rows, vec![rec]).await;
        }
        let first = r.step().await.expect("step");
        assert_eq!(first.derived, 1, "{} {first:?}", e.name);
        let v = views_json(&e).await;
        // `plan` from the earliest record (1 s), `region` from the only one that has it.
        assert_eq!(v["items"][0]["tags"]["plan"], "free", "{}", e.name);
        assert_eq!(v["items"][0]["tags"]["region"], "eu", "{}", e.name);
        // A restarted refresher re-checks the session by its record count: 3 stored.
        let mut restarted = e.refresher();
        let again = restarted.step().await.expect("step");
        assert_eq!(again.derived, 0, "{} {again:?}", e.name);
        assert_eq!(views_json(&e).await, v, "{}", e.name);
    })
    .await;
}

/// A session's repeated context is stored once (`ingest::record_dims`): a record whose dims
/// an earlier stored record of the session already has is stored with `""`, and the view
/// resolves exactly as from every record: a late batch with earlier events and a context
/// change keep their own dims, and a restarted refresher still counts every record.
#[tokio::test]
async fn a_repeated_context_resolves_as_every_record_and_sqlite_stores_it_once() {
    for_both(|e| async move {
        let with = |offset: i64, sdk: &str, tags: &[(&str, &str)]| {
            let rows = vec![row("s1", offset, EventType::PlaybackPause, "")];
            let mut rec = record("s1", &rows, sdk);
            Arc::make_mut(&mut rec.context).tags = tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            (rows, rec)
        };
        let plain = [("plan", "free")];
        let writes = [
            with(2_000, "sdk-a", &plain), // first: its dims
            with(3_000, "sdk-a", &plain), // a repeat: ""
            with(1_000, "sdk-a", &plain), // earlier events: its dims
            with(4_000, "sdk-b", &[("plan", "pro"), ("region", "eu")]), // changed: its dims
            with(5_000, "sdk-a", &plain), // a repeat of the earliest: ""
        ];
        let full: Vec<String> = writes.iter().map(|(_, r)| r.dims_json()).collect();
        for (rows, rec) in writes {
            write(&e, rows, vec![rec]).await;
        }
        // SQLite stores a repeat as ""; ClickHouse stores every record's dims (its records
        // pass a Buffer a crash can empty, ingest::sink::clickhouse says why).
        let expected = if e.name.starts_with("sqlite") {
            vec![
                full[0].clone(),
                String::new(),
                full[2].clone(),
                full[3].clone(),
                String::new(),
            ]
        } else {
            full.clone()
        };
        assert_eq!(e.stored_dims(OWNER, "s1").await, expected, "{}", e.name);
        let mut r = e.refresher();
        assert_eq!(r.step().await.expect("step").derived, 1, "{}", e.name);
        let v = views_json(&e).await;
        // As from every record: sdk and plan of the earliest (1 s), region from the change.
        assert_eq!(v["items"][0]["sdk"], "sdk-a", "{}", e.name);
        assert_eq!(v["items"][0]["tags"]["plan"], "free", "{}", e.name);
        assert_eq!(v["items"][0]["tags"]["region"], "eu", "{}", e.name);
        assert_eq!(v["items"][0]["browser"], "unknown", "{}", e.name);
        let again = e.refresher().step().await.expect("step");
        assert_eq!(again.derived, 0, "{} {again:?}", e.name);
    })
    .await;
}

/// 5,000 sessions with 150-character ids in one step, then a restarted refresher whose
/// first step finds 4,500 of them changed, reading them in chunks of 700: the 500
/// unchanged ones among them are not derived again (each chunk reads a set of its own and
/// then of its changed sessions), and the derived views are written in more than one
/// batch.
#[tokio::test]
async fn a_step_over_thousands_of_long_session_ids() {
    for_both(|e| async move {
        let ids: Vec<String> = (0..5_000).map(|i| format!("{i:0>150}")).collect();
        let write_all = |ids: Vec<&String>, row: fn(&str, i64) -> EventRow, offset: i64| {
            let rows: Vec<EventRow> = ids.iter().map(|s| row(s, offset)).collect();
            let records = ids
                .iter()
                .zip(&rows)
                .map(|(s, row)| record(s, std::slice::from_ref(row), "sdk"))
                .collect();
            write(&e, rows, records)
        };
        write_all(ids.iter().collect(), start, 0).await;
        let stats = e.refresher().step().await.expect("step");
        assert_eq!(stats.derived, 5_000, "{} {stats:?}", e.name);
        assert_eq!(overview(&e).await.views, 5_000, "{}", e.name);

        // Every tenth session unchanged, the others ended 5 s after their start.
        let ended: Vec<&String> = ids.iter().filter(|s| !s.ends_with('0')).collect();
        let n = ended.len();
        write_all(ended, end, 5_000).await;
        let config = RefreshConfig {
            chunk: 700,
            ..RefreshConfig::default()
        };
        let stats = Refresher::with_config(e.store.clone(), config)
            .step()
            .await
            .expect("step");
        assert_eq!(stats.derived, n, "{} {stats:?}", e.name);
        let ov = overview(&e).await;
        assert_eq!(ov.views, 5_000, "{}", e.name);
        assert_eq!(ov.metrics.watch_time_ms, n as i64 * 5_000, "{}", e.name);
    })
    .await;
}

/// Makes the stored state say ClickHouse started long ago (as the refresher finds it after
/// a ClickHouse restart), keeping the watermark. TRUNCATE then insert: the stored start is
/// a `max`.
async fn as_if_clickhouse_restarted(e: &Engine) {
    let ch = e.clickhouse();
    let watermark: i64 = ch
        .query("SELECT toInt64(max(value)) FROM qoe_refresh_state WHERE name = 'views'")
        .fetch_one()
        .await
        .expect("watermark");
    ch.query("TRUNCATE TABLE qoe_refresh_state")
        .execute()
        .await
        .expect("truncate");
    ch.query("INSERT INTO qoe_refresh_state (name, value) VALUES ('views', ?), ('clickhouse_started', 1)")
        .bind(watermark)
        .execute()
        .await
        .expect("state");
}

/// A second writer on `e`'s ClickHouse database: another instance, or this one restarted
/// (a new process is a new writer), with live views of its own.
async fn other_writer(e: &Engine) -> Engine {
    let config = ingest::ClickHouseConfig::new(
        common::clickhouse_url(),
        e.database.clone().expect("ClickHouse"),
    );
    let sink = ingest::ClickHouseSink::connect(&config)
        .await
        .expect("connect");
    Engine {
        name: "another writer",
        sink: Arc::new(sink),
        store: e.store.clone(),
        database: e.database.clone(),
        dir: None,
        live: Some(Arc::new(LiveViews::new(config.writer))),
    }
}

/// Runs `case` on each engine with live views, as the server runs it.
async fn for_live<F, Fut>(case: F)
where
    F: Fn(Arc<Engine>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for e in [common::sqlite_live().await, common::clickhouse_live().await] {
        let e = Arc::new(e);
        case(e.clone()).await;
        if let Ok(e) = Arc::try_unwrap(e) {
            e.finish().await;
        }
    }
}

/// `e` after a restart of its process: the same store, empty live views (on ClickHouse a
/// new writer).
async fn restarted(e: &Engine) -> Engine {
    if e.database.is_some() {
        return other_writer(e).await;
    }
    Engine {
        name: "sqlite live, restarted",
        sink: e.sink.clone(),
        store: e.store.clone(),
        database: None,
        // The first engine keeps the directory.
        dir: None,
        live: Some(Arc::new(LiveViews::new(0))),
    }
}

fn pause(session: &str, offset_ms: i64) -> EventRow {
    row(
        session,
        offset_ms,
        EventType::PlaybackPause,
        r#"{"positionMs":1,"bufferedMs":2}"#,
    )
}

#[tokio::test]
async fn live_views_follow_each_batch_without_reading_it_back() {
    for_live(|e| async move {
        let mut r = e.refresher();
        batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
        let stats = r.step().await.expect("step");
        assert_eq!((stats.derived, stats.live), (1, 1), "{} {stats:?}", e.name);
        batch(&e, "s1", vec![pause("s1", 5_000)], "sdk").await;
        batch(&e, "s1", vec![end("s1", 9_000)], "sdk").await;
        let stats = r.step().await.expect("step");
        assert_eq!(
            (stats.derived, stats.live, stats.events),
            (1, 1, 3),
            "{} {stats:?}",
            e.name
        );
        let s1 = view_of(&views_json(&e).await, "s1");
        assert_eq!(s1["endedAt"], "2024-05-01T00:00:09.000Z", "{}", e.name);
        assert_eq!(s1["watchTimeMs"], 5_000, "{}", e.name);
        assert_eq!(s1["sdk"], "sdk", "{}", e.name);
        // Nothing new: nothing written, from memory or otherwise.
        let idle = r.step().await.expect("step");
        assert_eq!((idle.derived, idle.live), (0, 0), "{} {idle:?}", e.name);
    })
    .await;
}

#[tokio::test]
async fn clickhouse_a_view_another_writer_wrote_to_is_read_back() {
    let e = common::clickhouse_live().await;
    let other = other_writer(&e).await;
    let mut r = e.refresher();
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    assert_eq!(r.step().await.expect("step").live, 1);
    // Another instance took the next batch: this one's memory is not the whole view.
    batch(&other, "s1", vec![pause("s1", 4_000)], "sdk").await;
    // The next step starts in a later second than that record's `written_at`, so the step
    // after it no longer sees the record in its window: memory must have been told already
    // (before, it was only when the view was in the snapshot, and this test passed or failed
    // by which second the steps fell in).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let stats = r.step().await.expect("step");
    assert_eq!((stats.derived, stats.live), (1, 0), "{stats:?}");
    assert_eq!(
        view_of(&views_json(&e).await, "s1")["endedAt"],
        "2024-05-01T00:00:04.000Z"
    );
    // And stays so: its next batch here is read back with the other's.
    batch(&e, "s1", vec![end("s1", 9_000)], "sdk").await;
    let stats = r.step().await.expect("step");
    assert_eq!((stats.derived, stats.live), (1, 0), "{stats:?}");
    let s1 = view_of(&views_json(&e).await, "s1");
    assert_eq!(s1["endedAt"], "2024-05-01T00:00:09.000Z");
    assert_eq!(s1["pausedMs"], 5_000);
    e.finish().await;
}

#[tokio::test]
async fn a_restarted_process_reads_back_the_views_it_saw_only_part_of() {
    for_live(|e| async move {
        batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
        batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
        assert_eq!(
            e.refresher().step().await.expect("step").live,
            2,
            "{}",
            e.name
        );
        // The process restarts: empty live views, a fresh refresher (on ClickHouse, a new
        // writer).
        let restarted = restarted(&e).await;
        let mut r = restarted.refresher();
        batch(&restarted, "s1", vec![end("s1", 9_000)], "sdk").await;
        batch(&restarted, "s3", vec![start("s3", 0)], "sdk").await;
        let stats = r.step().await.expect("step");
        // s1 had a record by the old process: read back whole. s3 is new: from memory.
        // (s2, untouched since, is skipped or derived again unchanged.)
        assert_eq!(stats.live, 1, "{} {stats:?}", e.name);
        let v = views_json(&e).await;
        let s1 = view_of(&v, "s1");
        assert_eq!(s1["startedAt"], "2024-05-01T00:00:00.000Z", "{}", e.name);
        assert_eq!(s1["endedAt"], "2024-05-01T00:00:09.000Z", "{}", e.name);
        assert_eq!(s1["watchTimeMs"], 9_000, "{}", e.name);
        assert_eq!(view_of(&v, "s3")["started"], true, "{}", e.name);
        // And s1 stays read back: memory knows it is not the whole view.
        batch(&restarted, "s1", vec![pause("s1", 10_000)], "sdk").await;
        let stats = r.step().await.expect("step");
        assert_eq!((stats.derived, stats.live), (1, 0), "{} {stats:?}", e.name);
        assert_eq!(
            view_of(&views_json(&e).await, "s1")["endedAt"],
            "2024-05-01T00:00:10.000Z",
            "{}",
            e.name
        );
    })
    .await;
}

/// SQLite: ingest only appends the records; each step copies those above its watermark into
/// `view_batches_by_session`, where the step's reads of a session find them, once each, also
/// when a step copied and failed before moving the watermark (a restart copies them again).
#[tokio::test]
async fn sqlite_each_record_is_copied_by_session_once() {
    let e = common::sqlite().await;
    let db =
        rusqlite::Connection::open(e.dir.as_ref().expect("sqlite").path().join("telemetry.db"))
            .expect("open");
    let copied = |db: &rusqlite::Connection| -> Vec<(String, i64)> {
        db.prepare("SELECT session_id, id FROM view_batches_by_session ORDER BY id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
    // Not copied before a step: ingest writes no page of it.
    assert_eq!(copied(&db), []);
    let mut r = e.refresher();
    r.step().await.expect("step");
    assert_eq!(copied(&db), [("s1".to_owned(), 1), ("s2".to_owned(), 2)]);

    // s1 again: its second record is copied by the next step, and the view is derived from
    // both (read back: this engine has no live views).
    batch(&e, "s1", vec![end("s1", 3_000)], "sdk").await;
    r.step().await.expect("step");
    assert_eq!(copied(&db).len(), 3);
    let records: i64 = db
        .query_row(
            "SELECT batch_rows FROM qoe_views WHERE session_id = 's1'",
            [],
            |r| r.get(0),
        )
        .expect("s1's view");
    assert_eq!(records, 2);
    assert_eq!(
        view_of(&views_json(&e).await, "s1")["endedAt"],
        "2024-05-01T00:00:03.000Z"
    );

    // A step that copied but did not move the watermark: a restart copies again, once.
    db.execute(
        "UPDATE qoe_refresh_state SET value = 0 WHERE name = 'views'",
        [],
    )
    .expect("watermark back to 0");
    let before = views_json(&e).await;
    let mut restarted = e.refresher();
    let stats = restarted.step().await.expect("step");
    assert_eq!(stats.derived, 2, "{stats:?}");
    assert_eq!(copied(&db).len(), 3);
    assert_eq!(views_json(&e).await, before);
    e.finish().await;
}

/// SQLite: a file from before `0003_records_by_session` (its records indexed by session on
/// ingest, none copied) gets every record copied and loses the index when it is opened, and
/// its views derive from all their records.
#[tokio::test]
async fn sqlite_a_file_from_before_records_by_session_is_upgraded() {
    let e = common::sqlite().await;
    let dir = e.dir.as_ref().expect("sqlite").path().to_owned();
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    batch(&e, "s1", vec![end("s1", 3_000)], "sdk").await;
    batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
    // As the file was before the migration (the first sink stays open, idle).
    let db = rusqlite::Connection::open(dir.join("telemetry.db")).expect("open");
    db.execute_batch(
        "DROP TABLE view_batches_by_session; \
         CREATE INDEX view_batches_session ON view_batches (owner, session_id); \
         DELETE FROM telemetry_migrations WHERE version = 3;",
    )
    .expect("as before 0003");
    let sink = ingest::SqliteSink::open_in_dir(&dir)
        .await
        .expect("upgrades");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(count("SELECT COUNT(*) FROM view_batches_by_session"), 3);
    assert_eq!(
        count("SELECT COUNT(*) FROM sqlite_master WHERE name = 'view_batches_session'"),
        0
    );
    let upgraded = common::Engine {
        name: "sqlite, upgraded",
        store: analytics::Store::sqlite(sink.clone()),
        sink: Arc::new(sink),
        database: None,
        dir: None,
        live: None,
    };
    let stats = upgraded.refresh().await;
    assert_eq!(stats.derived, 2, "{stats:?}");
    assert_eq!(
        count("SELECT batch_rows FROM qoe_views WHERE session_id = 's1'"),
        2
    );
    assert_eq!(count("SELECT COUNT(*) FROM view_batches_by_session"), 3);
    e.finish().await;
}

/// SQLite: a record of a view memory holds that memory never took (stored by this process
/// before memory's first batch, or stored while the route was being answered) makes the
/// counts differ: the view is read back, and is exact.
#[tokio::test]
async fn sqlite_a_record_memory_did_not_take_reads_the_view_back() {
    let e = common::sqlite_live().await;
    let mut r = e.refresher();
    // Stored without memory taking it, then a batch memory takes.
    batch_memory_never_took(&e, "s1", vec![start("s1", 0)]).await;
    batch(&e, "s1", vec![pause("s1", 4_000)], "sdk").await;
    batch(&e, "s2", vec![start("s2", 0)], "sdk").await;
    let stats = r.step().await.expect("step");
    assert_eq!((stats.derived, stats.live), (2, 1), "{stats:?}");
    let v = views_json(&e).await;
    let s1 = view_of(&v, "s1");
    assert_eq!(s1["started"], true);
    assert_eq!(s1["startedAt"], "2024-05-01T00:00:00.000Z");
    assert_eq!(s1["endedAt"], "2024-05-01T00:00:04.000Z");
    // Memory holds only s2 whole now.
    let live = e.live.clone().expect("live");
    let key = |s: &str| Key {
        owner: OWNER.into(),
        session: s.into(),
    };
    assert!(!live.holds(&key("s1")));
    assert!(live.holds(&key("s2")));
    e.finish().await;
}

#[tokio::test]
async fn clickhouse_a_view_memory_forgot_is_checked_against_its_older_records() {
    let e = common::clickhouse_live().await;
    let writer = e.live.as_ref().expect("live").writer();
    // A batch this process stored an hour ago and has forgotten since: its record is by
    // this writer, but older than any step's window.
    write(&e, vec![start("s1", 0)], vec![]).await;
    e.clickhouse()
        .query(
            "INSERT INTO view_batches (owner, session_id, first_ts, seq, written_at, dims, writer) \
             SELECT ?, 's1', ?, 1, toDateTime(toUnixTimestamp(now()) - 3600), \
             '{\"tags\":{},\"browser\":\"unknown\",\"os\":\"unknown\",\"deviceType\":\"unknown\"}', ?",
        )
        .bind(OWNER)
        .bind(T0)
        .bind(writer)
        .execute()
        .await
        .expect("old record");
    batch(&e, "s1", vec![end("s1", 9_000)], "sdk").await;
    let stats = e.refresher().step().await.expect("step");
    assert_eq!((stats.derived, stats.live), (1, 0), "{stats:?}");
    let s1 = view_of(&views_json(&e).await, "s1");
    assert_eq!(s1["startedAt"], "2024-05-01T00:00:00.000Z");
    assert_eq!(s1["started"], true);
    e.finish().await;
}

#[tokio::test]
async fn a_view_whose_write_failed_is_read_back() {
    for_live(|e| async move {
        let live = e.live.clone().expect("live");
        let mut r = e.refresher();
        batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
        assert_eq!(r.step().await.expect("step").live, 1, "{}", e.name);
        // Stored, but the route saw it fail (a timeout): memory does not take it.
        batch_memory_never_took(&e, "s1", vec![pause("s1", 3_000), end("s1", 9_000)]).await;
        live.taint(Key {
            owner: OWNER.into(),
            session: "s1".into(),
        });
        let stats = r.step().await.expect("step");
        assert_eq!((stats.derived, stats.live), (1, 0), "{} {stats:?}", e.name);
        let s1 = view_of(&views_json(&e).await, "s1");
        assert_eq!(s1["endedAt"], "2024-05-01T00:00:09.000Z", "{}", e.name);
        assert_eq!(s1["pausedMs"], 6_000, "{}", e.name);
    })
    .await;
}

#[tokio::test]
async fn clickhouse_after_a_server_restart_live_views_are_read_back() {
    let e = common::clickhouse_live().await;
    let mut r = e.refresher();
    batch(&e, "s1", vec![start("s1", 0)], "sdk").await;
    assert_eq!(r.step().await.expect("step").live, 1);
    as_if_clickhouse_restarted(&e).await;
    batch(&e, "s1", vec![end("s1", 9_000)], "sdk").await;
    let stats = r.step().await.expect("step");
    // The Buffer may have lost records memory took: the view is read back.
    assert_eq!(stats.live, 0, "{stats:?}");
    assert_eq!(
        view_of(&views_json(&e).await, "s1")["endedAt"],
        "2024-05-01T00:00:09.000Z"
    );
    e.finish().await;
}

#[tokio::test]
async fn views_past_the_live_cap_are_read_back_and_stay_exact() {
    for e in [
        common::sqlite_live_capped(1).await,
        common::clickhouse_live_capped(1).await,
    ] {
        views_past_the_cap(&e).await;
        e.finish().await;
    }
}

async fn views_past_the_cap(e: &Engine) {
    let live = e.live.clone().expect("live");
    let mut r = e.refresher();
    for s in ["s1", "s2", "s3"] {
        batch(e, s, vec![start(s, 0)], "sdk").await;
    }
    // One view held; the two that found memory full are read back.
    assert_eq!((live.held(), live.over_cap()), (1, 2));
    let stats = r.step().await.expect("step");
    assert_eq!((stats.derived, stats.live), (3, 1), "{} {stats:?}", e.name);
    for s in ["s1", "s2", "s3"] {
        batch(e, s, vec![pause(s, 5_000)], "sdk").await;
        batch(e, s, vec![end(s, 9_000)], "sdk").await;
    }
    let stats = r.step().await.expect("step");
    assert_eq!(
        (stats.derived, stats.live, stats.events),
        (3, 1, 9),
        "{} {stats:?}",
        e.name
    );
    assert_eq!(
        live.over_cap(),
        2,
        "a view turned away is not counted again"
    );
    let v = views_json(e).await;
    for s in ["s1", "s2", "s3"] {
        let view = view_of(&v, s);
        assert_eq!(view["startedAt"], "2024-05-01T00:00:00.000Z", "{s}");
        assert_eq!(view["endedAt"], "2024-05-01T00:00:09.000Z", "{s}");
        assert_eq!(view["watchTimeMs"], 5_000, "{s}");
        assert_eq!(view["pausedMs"], 4_000, "{s}");
        assert_eq!(view["sdk"], "sdk", "{s}");
    }
    let o = overview(e).await;
    assert_eq!(o.views, 3, "{o:?}");
    // Nothing new: nothing written.
    let idle = r.step().await.expect("step");
    assert_eq!((idle.derived, idle.live), (0, 0), "{idle:?}");
}
