//! The reference implementation of every QoE route of analytics.md §4 over a slice of one
//! owner's views: the answers engine SQL is checked against. Selection (range and
//! filters) and grouping happen here in Rust; aggregation goes through [`Aggregate`] and
//! the bodies through the shared builders of [`crate::response`], exactly as the engines'.

use std::collections::{BTreeMap, HashMap};

use crate::metrics::Aggregate;
use crate::query::{
    bucket_start, stream_id, BreakdownQuery, Filters, Granularity, OverviewQuery, StreamIds,
    TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery,
};
use crate::response::{
    timeline_viewers, BreakdownBody, OverviewBody, TimelineViewers, TimeseriesBody, ViewsBody,
};
use crate::view::View;

/// The views a route reads: `startedAt` in `[from, to)` and passing every filter.
pub fn select<'a>(
    views: &'a [View],
    streams: &StreamIds,
    range: TimeRange,
    filters: &Filters,
) -> Vec<&'a View> {
    views
        .iter()
        .filter(|v| range.contains(v.started_at) && filters.matches(v, streams))
        .collect()
}

/// Aggregates per UTC bucket start.
fn per_bucket(views: &[&View], g: Granularity) -> BTreeMap<i64, Aggregate> {
    let mut groups: BTreeMap<i64, Vec<&View>> = BTreeMap::new();
    for v in views {
        groups
            .entry(bucket_start(v.started_at, g))
            .or_default()
            .push(v);
    }
    groups
        .into_iter()
        .map(|(t, vs)| (t, Aggregate::of(vs)))
        .collect()
}

/// `GET /api/v1/qoe/overview`.
pub fn overview(views: &[View], streams: &StreamIds, q: &OverviewQuery) -> OverviewBody {
    let selected = select(views, streams, q.range, &q.filters);
    OverviewBody::build(q.range, &Aggregate::of(selected))
}

/// `GET /api/v1/qoe/timeseries`: every bucket overlapping `[from, to)`; a partial bucket
/// counts only the views that started inside the range.
pub fn timeseries(views: &[View], streams: &StreamIds, q: &TimeseriesQuery) -> TimeseriesBody {
    let selected = select(views, streams, q.range, &q.filters);
    TimeseriesBody::build(q, &per_bucket(&selected, q.granularity))
}

/// `GET /api/v1/qoe/breakdown`: groups by `by` (views without a value under `null`).
pub fn breakdown(views: &[View], streams: &StreamIds, q: &BreakdownQuery) -> BreakdownBody {
    let selected = select(views, streams, q.range, &q.filters);
    let mut groups: HashMap<Option<&str>, Vec<&View>> = HashMap::new();
    for v in &selected {
        groups.entry(q.by.value_of(v, streams)).or_default().push(v);
    }
    let overall = Aggregate::of(selected.iter().copied());
    BreakdownBody::build(
        q,
        &overall,
        groups
            .into_iter()
            .map(|(k, vs)| (k.map(str::to_owned), Aggregate::of(vs))),
    )
}

/// `GET /api/v1/qoe/views`: newest `startedAt` first, ties by `sessionId` ascending,
/// continuing after the cursor.
pub fn views_list(views: &[View], streams: &StreamIds, q: &ViewsQuery) -> ViewsBody {
    let mut selected = select(views, streams, q.range, &q.filters);
    selected.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
    let after = selected.into_iter().filter(|v| {
        q.cursor
            .as_ref()
            .is_none_or(|c| c.is_before(v.started_at, &v.session_id))
    });
    ViewsBody::build(after, q.limit, streams)
}

/// The viewers half of `GET /api/v1/streams/{id}/timeline`: the views whose `streamId` is
/// `stream`, per bucket, every bucket of the range.
pub fn timeline(
    views: &[View],
    streams: &StreamIds,
    stream: &str,
    q: &TimelineQuery,
) -> Vec<TimelineViewers> {
    let selected: Vec<&View> = select(views, streams, q.range, &q.filters)
        .into_iter()
        .filter(|v| stream_id(v, streams) == Some(stream))
        .collect();
    timeline_viewers(
        q.range,
        q.granularity,
        &per_bucket(&selected, q.granularity),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dims::{Dims, UserAgent};
    use crate::event::Event;
    use crate::query::{
        Cursor, Dimension, Format, Measurement, Metric, OrderBy, HOUR_MS, MINUTE_MS,
    };
    use serde_json::json;

    /// 2024-05-01T00:00:00.000Z
    const T0: i64 = 1_714_521_600_000;
    const S1: &str = "https://cdn.example/s1.m3u8";
    const S2: &str = "https://cdn.example/s2.m3u8";

    fn mk(session: &str, started_at: i64, os: &str) -> View {
        let mut v = View::derive(
            session,
            &[Event::new(started_at, ingest::EventType::SessionEnd)],
            &[],
        )
        .expect("view");
        v.exit_before_start = false;
        v.dims = Dims {
            user_agent: UserAgent {
                browser: "Safari".into(),
                os: os.into(),
                device_type: "mobile".into(),
            },
            ..Dims::default()
        };
        v
    }

    /// The hand-built fleet of these tests (values chosen, not derived):
    /// - a: T0+10m, iOS, c1, S1, plan=premium; watch 60 s, 2 stalls 6 s, startup 400,
    ///   2 Mbps over 60 s;
    /// - b: T0+20m, iOS, c2, S1, plan=free; failed before start;
    /// - c: T0+70m, Android, no content, S2; watch 120 s, startup 1000, 1 Mbps over 120 s;
    /// - d: T0+70m, Android, c1, no src; exit before start;
    /// - e: T0−1ms and f: T0+3h, outside [T0, T0+3h).
    fn fleet() -> Vec<View> {
        let mut a = mk("a", T0 + 10 * MINUTE_MS, "iOS");
        a.started = true;
        a.first_frame_at = Some(a.started_at);
        a.startup_ms = Some(400.0);
        a.watch_time_ms = 60_000;
        a.rebuffer_ms = 6_000;
        a.rebuffer_count = 2;
        a.bitrate_weighted_sum = 2e6 * 60_000.0;
        a.bitrate_covered_ms = 60_000;
        a.dims.content_id = Some("c1".into());
        a.dims.src = Some(S1.into());
        a.dims.tags.insert("plan".into(), "premium".into());

        let mut b = mk("b", T0 + 20 * MINUTE_MS, "iOS");
        b.failed = true;
        b.failed_at = Some(b.started_at);
        b.startup_failure = true;
        b.error_count = 1;
        b.fatal_error_code = Some("MEDIA_ERR_SRC".into());
        b.dims.content_id = Some("c2".into());
        b.dims.src = Some(S1.into());
        b.dims.tags.insert("plan".into(), "free".into());

        let mut c = mk("c", T0 + 70 * MINUTE_MS, "Android");
        c.started = true;
        c.first_frame_at = Some(c.started_at);
        c.startup_ms = Some(1_000.0);
        c.watch_time_ms = 120_000;
        c.bitrate_weighted_sum = 1e6 * 120_000.0;
        c.bitrate_covered_ms = 120_000;
        c.dims.src = Some(S2.into());

        let mut d = mk("d", T0 + 70 * MINUTE_MS, "Android");
        d.exit_before_start = true;
        d.dims.content_id = Some("c1".into());

        let e = mk("e", T0 - 1, "iOS");
        let f = mk("f", T0 + 3 * HOUR_MS, "iOS");
        vec![f, d, a, e, c, b]
    }

    fn streams() -> StreamIds {
        let mut s = StreamIds::new();
        s.insert(S1.into(), "st_1".into());
        s
    }

    fn range() -> TimeRange {
        TimeRange {
            from_ms: T0,
            to_ms: T0 + 3 * HOUR_MS,
        }
    }

    fn filters(raw: &[&str]) -> Filters {
        let pairs: Vec<(String, String)> = raw
            .iter()
            .map(|f| ("filter".to_owned(), (*f).to_owned()))
            .collect();
        OverviewQuery::parse(&pairs, 0)
            .expect("valid filters")
            .filters
    }

    fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
        serde_json::to_value(v).expect("serializes")
    }

    #[test]
    fn overview_of_the_hand_fleet() {
        let q = OverviewQuery {
            range: range(),
            filters: Filters::default(),
        };
        let body = overview(&fleet(), &streams(), &q);
        // 4 views (a, b, c, d). failed 1/4, startupFailure 1/4, exit 1/4 → 25.
        // startupMs [400, 1000], n = 2: p50 = p95 = v[1] = 1000.
        // rebufferPct 100·6000/180000 = 3.333… → 3.33; frequency 60000·2/180000 = 0.666… → 0.67.
        // bitrate (1.2e11 + 1.2e11) / (1000·180000) = 1333.333… → 1333.33.
        assert_eq!(
            to_json(&body),
            json!({
                "from": "2024-05-01T00:00:00.000Z",
                "to": "2024-05-01T03:00:00.000Z",
                "views": 4,
                "metrics": {
                    "playbackFailurePct": 25,
                    "startupFailurePct": 25,
                    "exitBeforeStartPct": 25,
                    "startupTimeMs": { "p50": 1000, "p95": 1000 },
                    "rebufferPct": 3.33,
                    "rebufferFrequency": 0.67,
                    "watchTimeMs": 180000,
                    "avgBitrateKbps": 1333.33
                }
            })
        );
    }

    #[test]
    fn overview_with_no_views_is_nulls() {
        let q = OverviewQuery {
            range: TimeRange {
                from_ms: 0,
                to_ms: 1,
            },
            filters: Filters::default(),
        };
        assert_eq!(
            to_json(&overview(&fleet(), &streams(), &q)),
            json!({
                "from": "1970-01-01T00:00:00.000Z",
                "to": "1970-01-01T00:00:00.001Z",
                "views": 0,
                "metrics": {
                    "playbackFailurePct": null,
                    "startupFailurePct": null,
                    "exitBeforeStartPct": null,
                    "startupTimeMs": { "p50": null, "p95": null },
                    "rebufferPct": null,
                    "rebufferFrequency": null,
                    "watchTimeMs": 0,
                    "avgBitrateKbps": null
                }
            })
        );
    }

    #[test]
    fn filters_apply_to_the_overview() {
        let q = OverviewQuery {
            range: range(),
            filters: filters(&["os:iOS", "!contentId:c2"]),
        };
        // Only a.
        let body = overview(&fleet(), &streams(), &q);
        assert_eq!(body.views, 1);
        assert_eq!(body.metrics.rebuffer_pct, Some(10.0));
        let q = OverviewQuery {
            range: range(),
            filters: filters(&["streamId:st_1"]),
        };
        // a and b.
        assert_eq!(overview(&fleet(), &streams(), &q).views, 2);
    }

    #[test]
    fn timeseries_has_every_bucket_and_partial_buckets_count_only_views_in_range() {
        let q = TimeseriesQuery {
            range: TimeRange {
                from_ms: T0 + 15 * MINUTE_MS,
                to_ms: T0 + 2 * HOUR_MS + 30 * MINUTE_MS,
            },
            filters: Filters::default(),
            metric: Metric::RebufferPct,
            measurement: Measurement::P50,
            granularity: crate::query::Granularity::Hour,
            format: Format::Json,
        };
        let body = timeseries(&fleet(), &streams(), &q);
        // Bucket 00:00 holds a (10m, before from: not counted) and b (watch 0 → null).
        // Bucket 01:00: c and d → 100·0/120000 = 0. Bucket 02:00: empty.
        assert_eq!(
            to_json(&body),
            json!({
                "metric": "rebufferPct",
                "granularity": "hour",
                "items": [
                    { "t": "2024-05-01T00:00:00.000Z", "value": null, "views": 1 },
                    { "t": "2024-05-01T01:00:00.000Z", "value": 0, "views": 2 },
                    { "t": "2024-05-01T02:00:00.000Z", "value": null, "views": 0 }
                ]
            })
        );
        // The views metric counts: its empty bucket is 0, not null (analytics.md v1.2). Other
        // count-like metrics (watch time) stay null there.
        let views = TimeseriesQuery {
            metric: Metric::Views,
            ..q.clone()
        };
        let body = timeseries(&fleet(), &streams(), &views);
        let values: Vec<Option<f64>> = body.items.iter().map(|i| i.value).collect();
        assert_eq!(values, [Some(1.0), Some(2.0), Some(0.0)]);
        assert_eq!(
            body.to_csv(),
            "t,value,views\n\
             2024-05-01T00:00:00.000Z,1,1\n\
             2024-05-01T01:00:00.000Z,2,2\n\
             2024-05-01T02:00:00.000Z,0,0\n"
        );
        let watch = TimeseriesQuery {
            metric: Metric::WatchTimeMs,
            ..q.clone()
        };
        let body = timeseries(&fleet(), &streams(), &watch);
        assert_eq!(body.items[2].value, None);
    }

    #[test]
    fn timeseries_startup_uses_the_measurement() {
        let q = TimeseriesQuery {
            range: range(),
            filters: Filters::default(),
            metric: Metric::StartupTimeMs,
            measurement: Measurement::Avg,
            granularity: crate::query::Granularity::Day,
            format: Format::Json,
        };
        let body = timeseries(&fleet(), &streams(), &q);
        // One day bucket: avg of [400, 1000] = 700.
        assert_eq!(body.items.len(), 1);
        assert_eq!(body.items[0].value, Some(700.0));
        assert_eq!(body.items[0].views, 4);
    }

    fn breakdown_q(metric: Metric, by: Dimension, order_by: OrderBy) -> BreakdownQuery {
        BreakdownQuery {
            range: range(),
            filters: Filters::default(),
            metric,
            measurement: Measurement::P50,
            by,
            order_by,
            limit: 25,
            format: Format::Json,
        }
    }

    #[test]
    fn breakdown_by_os_with_negative_impact() {
        let q = breakdown_q(
            Metric::PlaybackFailurePct,
            Dimension::Os,
            OrderBy::NegativeImpact,
        );
        // Overall 25. iOS: a, b → 50, (50−25)·2/4 = 12.5. Android: c, d → 0, (0−25)·2/4 = −12.5.
        assert_eq!(
            to_json(&breakdown(&fleet(), &streams(), &q)),
            json!({
                "metric": "playbackFailurePct",
                "by": "os",
                "items": [
                    { "key": "iOS", "value": 50, "views": 2, "negativeImpact": 12.5 },
                    { "key": "Android", "value": 0, "views": 2, "negativeImpact": -12.5 }
                ]
            })
        );
    }

    #[test]
    fn breakdown_groups_missing_values_under_null_and_orders_ties_by_key() {
        let keys = |order_by| {
            let q = breakdown_q(Metric::Views, Dimension::ContentId, order_by);
            breakdown(&fleet(), &streams(), &q)
                .items
                .into_iter()
                .map(|i| (i.key, i.value, i.negative_impact))
                .collect::<Vec<_>>()
        };
        // c1: a, d; c2: b; null: c. `views` has no direction: impact 0 everywhere.
        let c1 = (Some("c1".to_owned()), Some(2.0), 0.0);
        let c2 = (Some("c2".to_owned()), Some(1.0), 0.0);
        let none = (None, Some(1.0), 0.0);
        assert_eq!(
            keys(OrderBy::NegativeImpact),
            [c1.clone(), c2.clone(), none.clone()]
        );
        assert_eq!(keys(OrderBy::Views), [c1.clone(), c2.clone(), none.clone()]);
        assert_eq!(keys(OrderBy::Value), [c1, c2, none]);
    }

    #[test]
    fn breakdown_by_tag_orders_value_worst_first_with_nulls_last() {
        let q = breakdown_q(
            Metric::StartupTimeMs,
            Dimension::Tag("plan".into()),
            OrderBy::Value,
        );
        // Overall p50 of [400, 1000] = 1000. premium: a → 400, (400−1000)·1/4 = −150.
        // free: b → null, impact 0. null key: c, d → [1000] → 1000, impact 0.
        let body = breakdown(&fleet(), &streams(), &q);
        assert_eq!(
            to_json(&body),
            json!({
                "metric": "startupTimeMs",
                "by": "tag.plan",
                "items": [
                    { "key": null, "value": 1000, "views": 2, "negativeImpact": 0 },
                    { "key": "premium", "value": 400, "views": 1, "negativeImpact": -150 },
                    { "key": "free", "value": null, "views": 1, "negativeImpact": 0 }
                ]
            })
        );
        assert_eq!(
            body.to_csv(),
            "key,value,views,negativeImpact\n,1000,2,0\npremium,400,1,-150\nfree,,1,0\n"
        );
        let by_impact = BreakdownQuery {
            order_by: OrderBy::NegativeImpact,
            ..q
        };
        let keys: Vec<Option<String>> = breakdown(&fleet(), &streams(), &by_impact)
            .items
            .into_iter()
            .map(|i| i.key)
            .collect();
        // 0 (free), 0 (null, after keys), −150.
        assert_eq!(keys, [Some("free".into()), None, Some("premium".into())]);
    }

    #[test]
    fn breakdown_by_stream_id_for_a_higher_is_better_metric() {
        let q = breakdown_q(Metric::AvgBitrateKbps, Dimension::StreamId, OrderBy::Value);
        let body = breakdown(&fleet(), &streams(), &q);
        // Overall 1333.33. st_1: a, b → 1.2e11/(1000·60000) = 2000,
        // (1333.33 − 2000)·2/4 = −333.335. null (c: S2 unregistered, d: no src) → 1000,
        // (1333.33 − 1000)·2/4 = 166.665. By value, worst (lowest) first.
        assert_eq!(
            to_json(&body),
            json!({
                "metric": "avgBitrateKbps",
                "by": "streamId",
                "items": [
                    { "key": null, "value": 1000, "views": 2, "negativeImpact": 166.665 },
                    { "key": "st_1", "value": 2000, "views": 2, "negativeImpact": -333.335 }
                ]
            })
        );
        let limited = BreakdownQuery {
            limit: 1,
            order_by: OrderBy::NegativeImpact,
            ..q
        };
        let body = breakdown(&fleet(), &streams(), &limited);
        assert_eq!(body.items.len(), 1);
        assert_eq!(body.items[0].key, None);
    }

    #[test]
    fn views_list_pages_newest_first_with_a_stable_cursor() {
        let q = ViewsQuery {
            range: range(),
            filters: Filters::default(),
            limit: 3,
            cursor: None,
            format: Format::Json,
        };
        let first = views_list(&fleet(), &streams(), &q);
        let ids: Vec<&str> = first.items.iter().map(|i| i.session_id.as_str()).collect();
        // c and d tie at T0+70m: sessionId ascending.
        assert_eq!(ids, ["c", "d", "b"]);
        let next = first.next_cursor.clone().expect("more");
        assert_eq!(
            Cursor::decode(&next),
            Some(Cursor {
                started_at: T0 + 20 * MINUTE_MS,
                session_id: "b".into()
            })
        );
        let second = views_list(
            &fleet(),
            &streams(),
            &ViewsQuery {
                cursor: Cursor::decode(&next),
                ..q.clone()
            },
        );
        let ids: Vec<&str> = second.items.iter().map(|i| i.session_id.as_str()).collect();
        assert_eq!(ids, ["a"]);
        assert_eq!(second.next_cursor, None);
        // A page boundary inside a tie: after c comes d.
        let one = ViewsQuery {
            limit: 1,
            cursor: Some(Cursor {
                started_at: T0 + 70 * MINUTE_MS,
                session_id: "c".into(),
            }),
            ..q.clone()
        };
        let page = views_list(&fleet(), &streams(), &one);
        assert_eq!(page.items[0].session_id, "d");
        // Exactly `limit` left: no next cursor.
        let exact = ViewsQuery { limit: 4, ..q };
        assert_eq!(views_list(&fleet(), &streams(), &exact).next_cursor, None);
    }

    #[test]
    fn view_json_has_every_field_and_the_resolved_stream() {
        let q = ViewsQuery {
            range: range(),
            filters: filters(&["tag.plan:premium"]),
            limit: 50,
            cursor: None,
            format: Format::Json,
        };
        let body = views_list(&fleet(), &streams(), &q);
        assert_eq!(
            to_json(&body),
            json!({
                "items": [{
                    "sessionId": "a",
                    "startedAt": "2024-05-01T00:10:00.000Z",
                    "endedAt": "2024-05-01T00:10:00.000Z",
                    "started": true,
                    "firstFrameAt": "2024-05-01T00:10:00.000Z",
                    "startupMs": 400,
                    "failed": false,
                    "failedAt": null,
                    "startupFailure": false,
                    "exitBeforeStart": false,
                    "rebufferCount": 2,
                    "rebufferMs": 6000,
                    "pausedMs": 0,
                    "watchTimeMs": 60000,
                    "avgBitrateKbps": 2000,
                    "renditionSwitches": 0,
                    "upshifts": 0,
                    "downshifts": 0,
                    "errorCount": 0,
                    "fatalErrorCode": null,
                    "contentId": "c1",
                    "src": S1,
                    "streamId": "st_1",
                    "browser": "Safari",
                    "os": "iOS",
                    "deviceType": "mobile",
                    "sdk": null,
                    "player": null,
                    "tags": { "plan": "premium" }
                }],
                "nextCursor": null
            })
        );
    }

    #[test]
    fn views_csv_flattens_tags_into_sorted_columns() {
        let mut views = fleet();
        for v in &mut views {
            if v.session_id == "c" {
                v.dims.tags.insert("ab".into(), "B, \"quoted\"".into());
            }
        }
        let q = ViewsQuery {
            range: range(),
            filters: filters(&["os:Android", "os:iOS"]),
            limit: 2,
            cursor: None,
            format: Format::Csv,
        };
        let csv = views_list(&views, &streams(), &q).to_csv();
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "sessionId,startedAt,endedAt,started,firstFrameAt,startupMs,failed,failedAt,\
                 startupFailure,exitBeforeStart,rebufferCount,rebufferMs,pausedMs,watchTimeMs,\
                 avgBitrateKbps,renditionSwitches,upshifts,downshifts,errorCount,fatalErrorCode,\
                 contentId,src,streamId,browser,os,deviceType,sdk,player,tags.ab"
            )
        );
        // Only the page's rows decide the tag columns (plan is on a and b, not on c, d).
        assert_eq!(
            lines.next(),
            Some(
                "c,2024-05-01T01:10:00.000Z,2024-05-01T01:10:00.000Z,true,2024-05-01T01:10:00.000Z,\
                 1000,false,,false,false,0,0,0,120000,1000,0,0,0,0,,,https://cdn.example/s2.m3u8,,\
                 Safari,Android,mobile,,,\"B, \"\"quoted\"\"\""
            )
        );
        assert_eq!(
            lines.next(),
            Some(
                "d,2024-05-01T01:10:00.000Z,2024-05-01T01:10:00.000Z,false,,,false,,false,true,\
                 0,0,0,0,,0,0,0,0,,c1,,,Safari,Android,mobile,,,"
            )
        );
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn timeline_has_the_streams_viewers_on_every_bucket() {
        let q = TimelineQuery {
            range: range(),
            filters: Filters::default(),
            granularity: crate::query::Granularity::Hour,
        };
        let items = timeline(&fleet(), &streams(), "st_1", &q);
        // st_1: a, b in 00:00 → failure 50, rebuffer 100·6000/60000 = 10, startup p50 of
        // [400] = 400. 01:00 and 02:00 empty.
        assert_eq!(
            to_json(&items),
            json!([
                { "t": "2024-05-01T00:00:00.000Z", "viewers": {
                    "views": 2, "playbackFailurePct": 50, "rebufferPct": 10, "startupTimeMs": 400 } },
                { "t": "2024-05-01T01:00:00.000Z", "viewers": {
                    "views": 0, "playbackFailurePct": null, "rebufferPct": null, "startupTimeMs": null } },
                { "t": "2024-05-01T02:00:00.000Z", "viewers": {
                    "views": 0, "playbackFailurePct": null, "rebufferPct": null, "startupTimeMs": null } }
            ])
        );
        // An unregistered stream id has no viewers (the route answers 404 for it before this).
        let none = timeline(&fleet(), &streams(), "st_404", &q);
        assert!(none.iter().all(|i| i.viewers.views == 0));
        // Filters apply on top.
        let filtered = TimelineQuery {
            filters: filters(&["contentId:c2"]),
            ..q
        };
        let items = timeline(&fleet(), &streams(), "st_1", &filtered);
        assert_eq!(items[0].viewers.views, 1);
        assert_eq!(items[0].viewers.startup_time_ms, None);
    }
}
