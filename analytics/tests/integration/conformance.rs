//! The conformance suite of the QoE store: the same fleets (realistic and adversarial,
//! written through the real sinks, batches re-sent and reordered) through both engines
//! give identical answers for every route and every parameter family, equal to the
//! in-Rust reference implementation of analytics.md §2–§4. The queries are drawn at
//! random from a seeded generator (a property test over random fleets and queries).

use crate::common;

use analytics::fleet::{Fleet, FleetConfig};
use analytics::query::{
    BreakdownQuery, Cursor, Dimension, Filters, Format, Granularity, Measurement, Metric, OrderBy,
    OverviewQuery, StreamIds, TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery, HOUR_MS,
    MINUTE_MS,
};
use analytics::{reference, View};
use common::Engine;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;

const OWNER: &str = "owner-a";
const OTHER: &str = "owner-b";

fn json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serializes")
}

/// The first difference between two JSON values, with its path (assertion messages of
/// whole bodies are unreadable).
fn first_diff(got: &Value, want: &Value, path: &str) -> Option<String> {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, w) in b {
                let g = a.get(k).unwrap_or(&Value::Null);
                if let Some(d) = first_diff(g, w, &format!("{path}.{k}")) {
                    return Some(d);
                }
            }
            (a.len() != b.len()).then(|| format!("{path}: keys {:?} vs {:?}", a.keys(), b.keys()))
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (g, w)) in a.iter().zip(b).enumerate() {
                if let Some(d) = first_diff(g, w, &format!("{path}[{i}]")) {
                    return Some(d);
                }
            }
            (a.len() != b.len()).then(|| format!("{path}: {} items vs {}", a.len(), b.len()))
        }
        _ => (got != want).then(|| format!("{path}: got {got} want {want}")),
    }
}

macro_rules! same {
    ($got:expr, $want:expr, $($ctx:tt)+) => {{
        let (got, want) = (&$got, &$want);
        if let Some(d) = first_diff(got, want, "") {
            panic!("{d}\n  in {}", format!($($ctx)+));
        }
    }};
}

/// Every other source of the fleet is a registered stream.
fn stream_map(fleet: &Fleet) -> StreamIds {
    fleet
        .sources()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(i, src)| (src, format!("st_{i}")))
        .collect()
}

fn filters(raw: &[String]) -> Filters {
    let pairs: Vec<(String, String)> = raw
        .iter()
        .map(|f| ("filter".to_owned(), f.clone()))
        .collect();
    OverviewQuery::parse(&pairs, 0)
        .expect("valid filters")
        .filters
}

/// Values seen in the fleet per dimension, to draw filters from (plus one unknown).
fn values(views: &[View], streams: &StreamIds, dim: &Dimension) -> Vec<String> {
    let mut v: Vec<String> = views
        .iter()
        .filter_map(|x| dim.value_of(x, streams).map(str::to_owned))
        .collect();
    v.sort();
    v.dedup();
    v.push("no-such-value".into());
    v
}

/// A random filter set: 0–3 clauses over every dimension family, `!dim` included.
fn random_filters(rng: &mut StdRng, views: &[View], streams: &StreamIds) -> Filters {
    let dims = [
        Dimension::ContentId,
        Dimension::Browser,
        Dimension::Os,
        Dimension::DeviceType,
        Dimension::Sdk,
        Dimension::Player,
        Dimension::StreamId,
        Dimension::Tag("plan".into()),
        Dimension::Tag("region".into()),
        Dimension::Tag("experiment".into()),
    ];
    let mut raw = Vec::new();
    for _ in 0..rng.gen_range(0..=3) {
        let dim = dims.choose(rng).expect("dims").clone();
        let vals = values(views, streams, &dim);
        let v = vals.choose(rng).expect("values");
        let neg = if rng.gen_bool(0.3) { "!" } else { "" };
        raw.push(format!("{neg}{}:{v}", dim.name()));
    }
    filters(&raw)
}

fn random_range(rng: &mut StdRng, cfg: &FleetConfig) -> TimeRange {
    if rng.gen_bool(0.3) {
        // Everything, with slack on both sides.
        return TimeRange {
            from_ms: cfg.start_ms - HOUR_MS,
            to_ms: cfg.start_ms + cfg.span_ms + 2 * HOUR_MS,
        };
    }
    let a = cfg.start_ms + rng.gen_range(0..cfg.span_ms);
    let len = rng.gen_range(1..cfg.span_ms.max(2));
    TimeRange {
        from_ms: a,
        to_ms: a + len,
    }
}

fn granularity_for(rng: &mut StdRng, range: TimeRange) -> Granularity {
    let fits: Vec<Granularity> = Granularity::ALL
        .into_iter()
        .filter(|g| range.bucket_count(*g) <= 1_500)
        .collect();
    *fits.choose(rng).expect("day always fits")
}

struct Case<'a> {
    fleet_views: &'a [View],
    streams: &'a StreamIds,
    cfg: &'a FleetConfig,
}

/// Runs `queries` random queries of every route on every engine and compares each
/// answer with the reference's.
async fn compare(engines: &[Engine], case: &Case<'_>, seed: u64, queries: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let views = case.fleet_views;
    let streams = case.streams;
    for n in 0..queries {
        let range = random_range(&mut rng, case.cfg);
        let f = random_filters(&mut rng, views, streams);
        let metric = *Metric::ALL.choose(&mut rng).expect("metric");
        let measurement = *Measurement::ALL.choose(&mut rng).expect("measurement");
        match n % 5 {
            0 => {
                let q = OverviewQuery { range, filters: f };
                let want = json(&reference::overview(views, streams, &q));
                for e in engines {
                    let got = json(
                        &e.store
                            .overview(OWNER, &q, streams)
                            .await
                            .expect("overview"),
                    );
                    same!(got, want, "{} overview {q:?}", e.name);
                }
            }
            1 => {
                let q = TimeseriesQuery {
                    range,
                    filters: f,
                    metric,
                    measurement,
                    granularity: granularity_for(&mut rng, range),
                    format: Format::Json,
                };
                let want = json(&reference::timeseries(views, streams, &q));
                for e in engines {
                    let got = json(
                        &e.store
                            .timeseries(OWNER, &q, streams)
                            .await
                            .expect("timeseries"),
                    );
                    same!(got, want, "{} timeseries {q:?}", e.name);
                }
            }
            2 => {
                let by = [
                    Dimension::ContentId,
                    Dimension::Browser,
                    Dimension::Os,
                    Dimension::DeviceType,
                    Dimension::Sdk,
                    Dimension::Player,
                    Dimension::StreamId,
                    Dimension::Tag("plan".into()),
                    Dimension::Tag("experiment".into()),
                ]
                .choose(&mut rng)
                .expect("by")
                .clone();
                let q = BreakdownQuery {
                    range,
                    filters: f,
                    metric,
                    measurement,
                    by,
                    order_by: *OrderBy::ALL.choose(&mut rng).expect("order"),
                    // Large enough that ties at the cut (left open by the contract) are rare;
                    // the builder orders ties by key, so they are deterministic anyway.
                    limit: *[1, 3, 25, 1_000].choose(&mut rng).expect("limit"),
                    format: Format::Json,
                };
                let want = json(&reference::breakdown(views, streams, &q));
                for e in engines {
                    let got = json(
                        &e.store
                            .breakdown(OWNER, &q, streams)
                            .await
                            .expect("breakdown"),
                    );
                    same!(got, want, "{} breakdown {q:?}", e.name);
                }
            }
            3 => {
                // Walk every page with a random page size.
                let limit = *[1, 7, 50, 1_000].choose(&mut rng).expect("limit");
                let mut cursor: Option<Cursor> = None;
                for page in 0..10_000 {
                    let q = ViewsQuery {
                        range,
                        filters: f.clone(),
                        limit,
                        cursor: cursor.clone(),
                        format: Format::Json,
                    };
                    let want = reference::views_list(views, streams, &q);
                    for e in engines {
                        let got = e.store.views(OWNER, &q, streams).await.expect("views");
                        same!(
                            json(&got),
                            json(&want),
                            "{} views page {page} {q:?}",
                            e.name
                        );
                    }
                    match want.next_cursor {
                        Some(c) if limit < 50 || page < 3 => cursor = Cursor::decode(&c),
                        _ => break,
                    }
                }
            }
            _ => {
                let Some((src, id)) = streams.iter().next() else {
                    continue;
                };
                let q = TimelineQuery {
                    range,
                    filters: f,
                    granularity: granularity_for(&mut rng, range),
                };
                let want = json(&reference::timeline(views, streams, id, &q));
                for e in engines {
                    let got = json(
                        &e.store
                            .timeline_viewers(OWNER, src, &q, streams)
                            .await
                            .expect("timeline"),
                    );
                    same!(got, want, "{} timeline {q:?}", e.name);
                }
            }
        }
    }
}

/// The cap of the capped live views under test: below any fleet's view count.
const CAPPED: usize = 16;

/// Writes `fleet` (and another owner's fleet, which must never show) through both
/// engines' sinks, refreshes, and compares `queries` random queries.
async fn run_fleet(cfg: FleetConfig, reshuffle: Option<u64>, per_write: usize, queries: usize) {
    let fleet = Fleet::generate(&cfg);
    let written = match reshuffle {
        Some(seed) => fleet.reshuffled(seed),
        None => fleet.clone(),
    };
    // The reference derives from what was written, in write order.
    let views = written.views();
    assert_eq!(
        views,
        fleet.views(),
        "write order and retries change nothing"
    );
    let other = Fleet::generate(&FleetConfig {
        seed: cfg.seed + 10_000,
        ..cfg.clone()
    });
    let streams = stream_map(&fleet);
    let mut engines = common::both().await;
    // Live views holding fewer views than the fleet has: those past the cap are read back.
    engines.push(common::sqlite_live_capped(CAPPED).await);
    engines.push(common::clickhouse_live_capped(CAPPED).await);
    // In two halves with a refresh step between: views the live views wrote after the
    // first half get the rest of their batches from memory (or are read back).
    let half = written.batches.len() / 2;
    let (first, second) = written.batches.split_at(half);
    for e in &engines {
        let mut from_memory = 0;
        for part in [first, second] {
            let part = Fleet {
                batches: part.to_vec(),
            };
            common::write_fleet(e, OWNER, &part, per_write).await;
            from_memory += e.refresh().await.live;
        }
        common::write_fleet(e, OTHER, &other, per_write).await;
        from_memory += e.refresh().await.live;
        eprintln!("{}: {from_memory} views written from memory", e.name);
        if let Some(live) = &e.live {
            assert!(from_memory > 0, "the live path was taken");
            if e.name.ends_with("capped") {
                assert!(live.over_cap() > 0, "the cap turned views away");
                assert!(live.held() <= CAPPED);
            }
        }
    }
    let case = Case {
        fleet_views: &views,
        streams: &streams,
        cfg: &cfg,
    };
    compare(&engines, &case, cfg.seed, queries).await;
    for e in engines {
        e.finish().await;
    }
}

#[tokio::test]
async fn adversarial_fleets_agree_with_the_reference_on_both_engines() {
    for seed in [1, 2, 3] {
        run_fleet(FleetConfig::adversarial(seed, 250), Some(seed + 77), 13, 60).await;
    }
}

#[tokio::test]
async fn realistic_fleet_agrees_with_the_reference_on_both_engines() {
    let cfg = FleetConfig {
        contents: 40,
        ..FleetConfig::realistic(11, 400)
    };
    run_fleet(cfg, None, 64, 80).await;
}

#[tokio::test]
async fn every_route_and_parameter_family_on_a_fixed_grid() {
    // Deterministic coverage on top of the random draws: every metric × measurement on
    // the overview range, every granularity, every breakdown dimension × order.
    let cfg = FleetConfig::adversarial(21, 300);
    let fleet = Fleet::generate(&cfg);
    let views = fleet.views();
    let streams = stream_map(&fleet);
    let engines = common::both().await;
    for e in &engines {
        common::write_fleet(e, OWNER, &fleet.reshuffled(5), 7).await;
        e.refresh().await;
    }
    let views_after = fleet.reshuffled(5).views();
    assert_eq!(views, views_after);
    let range = TimeRange {
        from_ms: cfg.start_ms + 10 * MINUTE_MS,
        to_ms: cfg.start_ms + cfg.span_ms - 10 * MINUTE_MS,
    };
    let tag_filters = filters(&[
        "!tag.plan:free".into(),
        "tag.region:eu".into(),
        "tag.region:us".into(),
    ]);
    for metric in Metric::ALL {
        for measurement in Measurement::ALL {
            for g in Granularity::ALL {
                let q = TimeseriesQuery {
                    range,
                    filters: tag_filters.clone(),
                    metric,
                    measurement,
                    granularity: g,
                    format: Format::Json,
                };
                let want = json(&reference::timeseries(&views, &streams, &q));
                for e in &engines {
                    let got = json(&e.store.timeseries(OWNER, &q, &streams).await.expect("ts"));
                    same!(got, want, "{} {metric} {measurement:?} {g:?}", e.name);
                }
            }
        }
        for by in [
            Dimension::ContentId,
            Dimension::Browser,
            Dimension::Os,
            Dimension::DeviceType,
            Dimension::Sdk,
            Dimension::Player,
            Dimension::StreamId,
            Dimension::Tag("region".into()),
        ] {
            for order_by in OrderBy::ALL {
                let q = BreakdownQuery {
                    range,
                    filters: Filters::default(),
                    metric,
                    measurement: Measurement::P95,
                    by: by.clone(),
                    order_by,
                    limit: 1_000,
                    format: Format::Json,
                };
                let want = json(&reference::breakdown(&views, &streams, &q));
                for e in &engines {
                    let got = json(&e.store.breakdown(OWNER, &q, &streams).await.expect("bd"));
                    same!(got, want, "{} {metric} by {by} {order_by:?}", e.name);
                }
            }
        }
    }
    // Filters on a streamId, its negation, and a stream nobody registered.
    for raw in [
        vec!["streamId:st_0".to_owned()],
        vec!["!streamId:st_0".to_owned(), "!streamId:st_2".to_owned()],
        vec!["streamId:st_unknown".to_owned()],
    ] {
        let q = OverviewQuery {
            range,
            filters: filters(&raw),
        };
        let want = json(&reference::overview(&views, &streams, &q));
        for e in &engines {
            let got = json(&e.store.overview(OWNER, &q, &streams).await.expect("ov"));
            same!(got, want, "{} {raw:?}", e.name);
        }
    }
    // CSV bodies come from the same values.
    let q = ViewsQuery {
        range,
        filters: Filters::default(),
        limit: 1_000,
        cursor: None,
        format: Format::Csv,
    };
    let want = reference::views_list(&views, &streams, &q).to_csv();
    for e in &engines {
        let got = e
            .store
            .views(OWNER, &q, &streams)
            .await
            .expect("views")
            .to_csv();
        assert_eq!(got, want, "{} csv", e.name);
    }
    for e in engines {
        e.finish().await;
    }
}

#[tokio::test]
async fn an_owner_never_sees_another_owners_views() {
    let cfg = FleetConfig::adversarial(9, 60);
    let fleet = Fleet::generate(&cfg);
    let streams = stream_map(&fleet);
    let everything = OverviewQuery {
        range: TimeRange {
            from_ms: 0,
            to_ms: cfg.start_ms + 100 * HOUR_MS,
        },
        filters: Filters::default(),
    };
    for e in common::both().await {
        common::write_fleet(&e, OTHER, &fleet, 20).await;
        e.refresh().await;
        let ov = e
            .store
            .overview(OWNER, &everything, &streams)
            .await
            .expect("overview");
        assert_eq!(ov.views, 0, "{}", e.name);
        let other = e
            .store
            .overview(OTHER, &everything, &streams)
            .await
            .expect("overview");
        assert_eq!(other.views, 60, "{}", e.name);
        e.finish().await;
    }
}
