//! The metrics of analytics.md §3: an [`Aggregate`] of a group of views, and the one
//! finalisation path from an aggregate to each metric's reported value. The reference
//! implementation fills aggregates from views in Rust; the engines fill them in SQL
//! from their `views` tables; both finish here, so rounding and nulls cannot drift.
//!
//! Exact definitions (f64 arithmetic, one rounding at the end):
//! - `playbackFailurePct` = `(100·failed) / views`, likewise `startupFailurePct`,
//!   `exitBeforeStartPct`;
//! - `rebufferPct` = `(100·Σ rebufferMs) / Σ watchTimeMs`;
//! - `rebufferFrequency` = `(60000·Σ rebufferCount) / Σ watchTimeMs`;
//! - `avgBitrateKbps` = `Σ(bitrate·covered ms) / (1000·Σ covered ms)`;
//! - `startupTimeMs` = the exact percentile element, or `Σ startupMs / n` for `avg`;
//! - `views`, `watchTimeMs` = the count and the sum (never null, 0 for no views);
//! - a metric whose denominator is 0 is `None` (null);
//! - values are rounded with [`round_dp`] to 2 decimals, `negativeImpact` to 4.

use crate::query::{Better, Measurement, Metric};
use crate::view::View;

/// Everything the metrics of one group of views (a whole range, a bucket, a breakdown
/// key) are computed from.
///
/// Each field is one SQL aggregate over the group's rows of the `views` table:
/// counts and integer sums are `i64` (`count()`, `countIf(..)`, `sum(..)`), the bitrate
/// and startup sums `f64`, and each startup percentile is the exact element
/// `v[min(n−1, floor(p·n))]` of the sorted non-null `startupMs` values (ClickHouse
/// `quantileExact(p)`; in SQLite the row at that offset of an ordered subquery), null
/// when the group has none.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Aggregate {
    /// Number of views.
    pub views: i64,
    /// Views with `failed`.
    pub failed: i64,
    /// Views with `startupFailure`.
    pub startup_failures: i64,
    /// Views with `exitBeforeStart`.
    pub exits_before_start: i64,
    /// Σ `rebufferMs`.
    pub rebuffer_ms: i64,
    /// Σ `rebufferCount`.
    pub rebuffer_count: i64,
    /// Σ `watchTimeMs`.
    pub watch_time_ms: i64,
    /// Σ bitrate × covered ms (the views' `bitrate_weighted_sum`).
    pub bitrate_weighted_sum: f64,
    /// Σ covered ms (the views' `bitrate_covered_ms`).
    pub bitrate_covered_ms: i64,
    /// Number of views with a `startupMs`.
    pub startup_count: i64,
    /// Σ `startupMs` over those views.
    pub startup_sum_ms: f64,
    /// Exact p50 of `startupMs`.
    pub startup_p50_ms: Option<f64>,
    /// Exact p75 of `startupMs`.
    pub startup_p75_ms: Option<f64>,
    /// Exact p95 of `startupMs`.
    pub startup_p95_ms: Option<f64>,
    /// Exact p99 of `startupMs`.
    pub startup_p99_ms: Option<f64>,
}

impl Aggregate {
    /// The aggregate of a group of views, computed in Rust (the reference).
    pub fn of<'a>(views: impl IntoIterator<Item = &'a View>) -> Aggregate {
        let mut a = Aggregate::default();
        let mut startup: Vec<f64> = Vec::new();
        for v in views {
            a.views += 1;
            a.failed += i64::from(v.failed);
            a.startup_failures += i64::from(v.startup_failure);
            a.exits_before_start += i64::from(v.exit_before_start);
            a.rebuffer_ms += v.rebuffer_ms;
            a.rebuffer_count += v.rebuffer_count;
            a.watch_time_ms += v.watch_time_ms;
            a.bitrate_weighted_sum += v.bitrate_weighted_sum;
            a.bitrate_covered_ms += v.bitrate_covered_ms;
            if let Some(s) = v.startup_ms {
                startup.push(s);
            }
        }
        startup.sort_by(f64::total_cmp);
        a.startup_count = startup.len() as i64;
        a.startup_sum_ms = startup.iter().sum();
        a.startup_p50_ms = percentile(&startup, 50);
        a.startup_p75_ms = percentile(&startup, 75);
        a.startup_p95_ms = percentile(&startup, 95);
        a.startup_p99_ms = percentile(&startup, 99);
        a
    }

    /// Adds `o`'s counts and sums to these (the aggregate of two disjoint groups);
    /// percentiles do not add and become `None`.
    pub(crate) fn add(&mut self, o: &Aggregate) {
        self.views += o.views;
        self.failed += o.failed;
        self.startup_failures += o.startup_failures;
        self.exits_before_start += o.exits_before_start;
        self.rebuffer_ms += o.rebuffer_ms;
        self.rebuffer_count += o.rebuffer_count;
        self.watch_time_ms += o.watch_time_ms;
        self.bitrate_weighted_sum += o.bitrate_weighted_sum;
        self.bitrate_covered_ms += o.bitrate_covered_ms;
        self.startup_count += o.startup_count;
        self.startup_sum_ms += o.startup_sum_ms;
        self.startup_p50_ms = None;
        self.startup_p75_ms = None;
        self.startup_p95_ms = None;
        self.startup_p99_ms = None;
    }

    /// The reported value of `metric` (rounded to 2 decimals); `measurement` applies to
    /// `startupTimeMs` only. `None` is null (an empty denominator).
    pub fn value(&self, metric: Metric, measurement: Measurement) -> Option<f64> {
        let pct = |n: i64| ratio(100.0 * n as f64, self.views);
        let raw = match metric {
            Metric::Views => Some(self.views as f64),
            Metric::PlaybackFailurePct => pct(self.failed),
            Metric::StartupFailurePct => pct(self.startup_failures),
            Metric::ExitBeforeStartPct => pct(self.exits_before_start),
            Metric::StartupTimeMs => self.startup_raw(measurement),
            Metric::RebufferPct => ratio(100.0 * self.rebuffer_ms as f64, self.watch_time_ms),
            Metric::RebufferFrequency => {
                ratio(60_000.0 * self.rebuffer_count as f64, self.watch_time_ms)
            }
            Metric::WatchTimeMs => Some(self.watch_time_ms as f64),
            Metric::AvgBitrateKbps => (self.bitrate_covered_ms != 0)
                .then(|| self.bitrate_weighted_sum / (1000.0 * self.bitrate_covered_ms as f64)),
        };
        raw.map(|x| round_dp(x, 2))
    }

    /// The unrounded startup statistic.
    fn startup_raw(&self, m: Measurement) -> Option<f64> {
        match m {
            Measurement::P50 => self.startup_p50_ms,
            Measurement::P75 => self.startup_p75_ms,
            Measurement::P95 => self.startup_p95_ms,
            Measurement::P99 => self.startup_p99_ms,
            Measurement::Avg => ratio(self.startup_sum_ms, self.startup_count),
        }
    }
}

/// `num / den`, `None` when `den` is 0.
fn ratio(num: f64, den: i64) -> Option<f64> {
    (den != 0).then(|| num / den as f64)
}

/// Percentile `pct` (whole percent, < 100) of ascending `sorted` values:
/// `v[min(n−1, floor(pct·n/100))]`, computed in integers so it is exact at any n.
/// `None` for no values.
pub fn percentile(sorted: &[f64], pct: u32) -> Option<f64> {
    let n = sorted.len();
    let idx = (n.checked_mul(pct as usize)? / 100).min(n.checked_sub(1)?);
    sorted.get(idx).copied()
}

/// Rounds to `decimals` places, half away from zero, as `round(x·10^d) / 10^d` in f64
/// (so 1.005, stored as 1.00499…, gives 1.0; 0.125 gives 0.13). `-0` becomes `0`.
pub fn round_dp(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let r = (x * scale).round() / scale;
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// `negativeImpact` of a breakdown group (analytics.md §4), from the reported (rounded)
/// `value` of the group and `overall` of all selected views, so a client can recompute it
/// from the response: `(value − overall)·views / allViews` for lower-is-better metrics,
/// `(overall − value)·views / allViews` for higher-is-better ones, 0 for the others and
/// when either value is null or there are no views; rounded to 4 decimals.
pub fn negative_impact(
    metric: Metric,
    value: Option<f64>,
    overall: Option<f64>,
    views: i64,
    all_views: i64,
) -> f64 {
    let (Some(value), Some(overall)) = (value, overall) else {
        return 0.0;
    };
    if all_views == 0 {
        return 0.0;
    }
    let diff = match metric.better() {
        Better::Lower => value - overall,
        Better::Higher => overall - value,
        Better::Neither => return 0.0,
    };
    round_dp(diff * views as f64 / all_views as f64, 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use ingest::{EndReason, EventType};

    /// A started view with the given fields set directly (the derivation is tested in
    /// view.rs; here the inputs are the metric's operands).
    fn view() -> View {
        View::derive("s", &[Event::playback_start(0, None)], &[]).expect("view")
    }

    fn all(m: Metric, views: &[View]) -> Option<f64> {
        Aggregate::of(views).value(m, Measurement::P50)
    }

    #[test]
    fn empty_fleet_gives_nulls_and_zero_counts() {
        let a = Aggregate::of(&[]);
        for m in Metric::ALL {
            let want = match m {
                Metric::Views | Metric::WatchTimeMs => Some(0.0),
                _ => None,
            };
            for meas in Measurement::ALL {
                assert_eq!(a.value(m, meas), want, "{m} {meas:?}");
            }
        }
    }

    #[test]
    fn views_counts_every_view() {
        assert_eq!(all(Metric::Views, &[view(), view(), view()]), Some(3.0));
    }

    #[test]
    fn failure_percentages() {
        let failed_late = View {
            failed: true,
            ..view()
        };
        let failed_startup = View {
            failed: true,
            startup_failure: true,
            ..view()
        };
        let exit = View {
            exit_before_start: true,
            ..view()
        };
        let views = [failed_late, failed_startup, exit, view(), view(), view()];
        // 2 of 6 failed: 33.333… → 33.33; 1 of 6: 16.666… → 16.67.
        assert_eq!(all(Metric::PlaybackFailurePct, &views), Some(33.33));
        assert_eq!(all(Metric::StartupFailurePct, &views), Some(16.67));
        assert_eq!(all(Metric::ExitBeforeStartPct, &views), Some(16.67));
        // 1 of 3 → 33.33, 2 of 3 → 66.67.
        assert_eq!(all(Metric::PlaybackFailurePct, &views[..3]), Some(66.67));
    }

    #[test]
    fn startup_time_percentiles_and_avg_over_views_that_have_it() {
        let with = |ms: f64| View {
            startup_ms: Some(ms),
            ..view()
        };
        // Sorted: 100, 200, 300, 400 and one view without startupMs (not counted).
        let views = [with(400.0), view(), with(100.0), with(300.0), with(200.0)];
        let a = Aggregate::of(&views);
        assert_eq!(a.startup_count, 4);
        // n = 4: p50 → v[2] = 300; p75 → v[3] = 400; p95 → v[min(3, 3)] = 400.
        assert_eq!(
            a.value(Metric::StartupTimeMs, Measurement::P50),
            Some(300.0)
        );
        assert_eq!(
            a.value(Metric::StartupTimeMs, Measurement::P75),
            Some(400.0)
        );
        assert_eq!(
            a.value(Metric::StartupTimeMs, Measurement::P95),
            Some(400.0)
        );
        assert_eq!(
            a.value(Metric::StartupTimeMs, Measurement::P99),
            Some(400.0)
        );
        // avg = 1000 / 4 = 250.
        assert_eq!(
            a.value(Metric::StartupTimeMs, Measurement::Avg),
            Some(250.0)
        );
        // avg rounded: (1 + 2 + 2) / 3 = 1.666… → 1.67.
        let a = Aggregate::of(&[with(1.0), with(2.0), with(2.0)]);
        assert_eq!(a.value(Metric::StartupTimeMs, Measurement::Avg), Some(1.67));
        // No view has it: null for every measurement.
        let a = Aggregate::of(&[view(), view()]);
        for m in Measurement::ALL {
            assert_eq!(a.value(Metric::StartupTimeMs, m), None);
        }
    }

    #[test]
    fn percentile_at_small_and_large_n() {
        // v = [1, 2, …, n]; index min(n−1, floor(p·n/100)); the value is index + 1.
        let idx = |n: usize, p: u32| {
            let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            percentile(&v, p).expect("non-empty") as usize - 1
        };
        // n = 1: every p → v[0].
        for p in [50, 75, 95, 99] {
            assert_eq!(idx(1, p), 0);
        }
        // n = 2: p50 → floor(1.0) = 1; p75 → floor(1.5) = 1; p95 → 1; p99 → 1.
        assert_eq!(
            [idx(2, 50), idx(2, 75), idx(2, 95), idx(2, 99)],
            [1, 1, 1, 1]
        );
        // n = 3: p50 → floor(1.5) = 1; p75 → floor(2.25) = 2; p95 → floor(2.85) = 2; p99 → 2.
        assert_eq!(
            [idx(3, 50), idx(3, 75), idx(3, 95), idx(3, 99)],
            [1, 2, 2, 2]
        );
        // n = 4: p50 → 2; p75 → 3; p95 → floor(3.8) = 3; p99 → floor(3.96) = 3.
        assert_eq!(
            [idx(4, 50), idx(4, 75), idx(4, 95), idx(4, 99)],
            [2, 3, 3, 3]
        );
        // n = 100: p50 → 50; p75 → 75; p95 → 95; p99 → 99 (the maximum).
        assert_eq!(
            [idx(100, 50), idx(100, 75), idx(100, 95), idx(100, 99)],
            [50, 75, 95, 99]
        );
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn percentile_index_matches_float_quantile_exact_for_our_levels() {
        // ClickHouse computes floor(level·n) in f64; for 0.5, 0.75, 0.95, 0.99 that equals the
        // integer form at every n (checked well past any realistic group size).
        for n in 1..=200_000usize {
            for (p, level) in [(50u32, 0.5f64), (75, 0.75), (95, 0.95), (99, 0.99)] {
                let float_idx = ((level * n as f64) as usize).min(n - 1);
                let int_idx = (n * p as usize / 100).min(n - 1);
                assert_eq!(float_idx, int_idx, "n={n} p={p}");
            }
        }
    }

    #[test]
    fn rebuffer_pct_and_frequency() {
        let a = View {
            rebuffer_ms: 3_000,
            rebuffer_count: 2,
            watch_time_ms: 60_000,
            ..view()
        };
        let b = View {
            rebuffer_ms: 0,
            rebuffer_count: 1,
            watch_time_ms: 120_000,
            ..view()
        };
        let views = [a, b];
        // 100 × 3000 / 180000 = 1.666… → 1.67.
        assert_eq!(all(Metric::RebufferPct, &views), Some(1.67));
        // 3 stalls over 3 minutes = 1 per minute.
        assert_eq!(all(Metric::RebufferFrequency, &views), Some(1.0));
        // 3 stalls over 7 minutes: 0.428… → 0.43.
        let c = View {
            rebuffer_count: 3,
            watch_time_ms: 420_000,
            ..view()
        };
        assert_eq!(all(Metric::RebufferFrequency, &[c]), Some(0.43));
        // No watch time: null even with stall time.
        let d = View {
            rebuffer_ms: 10,
            rebuffer_count: 1,
            watch_time_ms: 0,
            ..view()
        };
        assert_eq!(all(Metric::RebufferPct, std::slice::from_ref(&d)), None);
        assert_eq!(all(Metric::RebufferFrequency, &[d]), None);
    }

    #[test]
    fn watch_time_is_the_sum() {
        let a = View {
            watch_time_ms: 1_234,
            ..view()
        };
        let b = View {
            watch_time_ms: 766,
            ..view()
        };
        assert_eq!(all(Metric::WatchTimeMs, &[a, b]), Some(2_000.0));
        assert_eq!(all(Metric::WatchTimeMs, &[view()]), Some(0.0));
    }

    #[test]
    fn avg_bitrate_is_weighted_by_covered_time_over_all_views() {
        // View a: 1 Mbps for 3000 ms; view b: 4 Mbps for 1000 ms; view c: nothing covered.
        // Σ = 3e9 + 4e9 = 7e9 over 4000 ms = 1.75e6 bps = 1750 kbps (not the mean of the
        // views' means, 2500).
        let a = View {
            bitrate_weighted_sum: 3e9,
            bitrate_covered_ms: 3_000,
            ..view()
        };
        let b = View {
            bitrate_weighted_sum: 4e9,
            bitrate_covered_ms: 1_000,
            ..view()
        };
        assert_eq!(
            all(Metric::AvgBitrateKbps, &[a.clone(), b, view()]),
            Some(1_750.0)
        );
        // 1 Mbps 1000 ms + 2 Mbps 2000 ms = 5e9 / 3000 = 1666.666… kbps → 1666.67.
        let c = View {
            bitrate_weighted_sum: 4e9,
            bitrate_covered_ms: 2_000,
            ..view()
        };
        let a1 = View {
            bitrate_weighted_sum: 1e9,
            bitrate_covered_ms: 1_000,
            ..view()
        };
        assert_eq!(all(Metric::AvgBitrateKbps, &[a1, c]), Some(1_666.67));
        // No quality_change anywhere: null.
        assert_eq!(all(Metric::AvgBitrateKbps, &[view(), view()]), None);
    }

    #[test]
    fn metrics_of_derived_views_end_to_end() {
        use EventType::*;
        let ev = Event::new;
        // View 1: started at 0 after 500 ms, stall 1000–2000, ends at 10000 → watch 10000,
        // rebuffer 1000; bitrate 2 Mbps from 0: Σ 2e10 over 10000 ms.
        let v1 = View::derive(
            "a",
            &[
                Event::playback_start(0, Some(500.0)),
                Event::quality_change(0, 2e6, true),
                ev(1_000, RebufferStart),
                ev(2_000, RebufferEnd),
                Event::session_end(10_000, EndReason::Ended),
            ],
            &[],
        )
        .expect("view");
        // View 2: fatal error before any frame.
        let v2 = View::derive("b", &[Event::error(5, "E", true)], &[]).expect("view");
        // View 3: started after 1500 ms, 1 Mbps, ends at 5000 → watch 5000, no stall.
        let v3 = View::derive(
            "c",
            &[
                Event::playback_start(0, Some(1_500.0)),
                Event::quality_change(0, 1e6, true),
                Event::session_end(5_000, EndReason::Ended),
            ],
            &[],
        )
        .expect("view");
        let a = Aggregate::of(&[v1, v2, v3]);
        let m = |metric| a.value(metric, Measurement::P50);
        assert_eq!(m(Metric::Views), Some(3.0));
        assert_eq!(m(Metric::PlaybackFailurePct), Some(33.33));
        assert_eq!(m(Metric::StartupFailurePct), Some(33.33));
        assert_eq!(m(Metric::ExitBeforeStartPct), Some(0.0));
        // [500, 1500], n = 2: p50 → v[1] = 1500.
        assert_eq!(m(Metric::StartupTimeMs), Some(1_500.0));
        // 100 × 1000 / 15000 = 6.666… → 6.67.
        assert_eq!(m(Metric::RebufferPct), Some(6.67));
        // 1 stall / (15000 / 60000) = 4 per minute.
        assert_eq!(m(Metric::RebufferFrequency), Some(4.0));
        assert_eq!(m(Metric::WatchTimeMs), Some(15_000.0));
        // (2e10 + 5e9) / 15000 ms = 1.666…e6 bps → 1666.67 kbps.
        assert_eq!(m(Metric::AvgBitrateKbps), Some(1_666.67));
    }

    #[test]
    fn rounding_is_half_away_from_zero_on_x_times_100() {
        assert_eq!(round_dp(0.125, 2), 0.13);
        assert_eq!(round_dp(-0.125, 2), -0.13);
        // 2.675 is stored as 2.67499…, but 2.675·100 rounds to exactly 267.5 in f64 → 2.68;
        // an engine's own round(x, 2) may say 2.67, which is why SQL does not round.
        assert_eq!(round_dp(2.675, 2), 2.68);
        assert_eq!(round_dp(1.005, 2), 1.0); // 1.005·100 = 100.49999999999999 in f64
        assert_eq!(round_dp(33.333_333, 2), 33.33);
        assert_eq!(round_dp(-0.001, 2), 0.0);
        assert!(round_dp(-0.001, 2).is_sign_positive());
        assert_eq!(round_dp(0.123_45, 4), 0.1235);
        assert_eq!(round_dp(12.0, 2), 12.0);
    }

    #[test]
    fn negative_impact_by_direction() {
        // Lower is better: group value 10 vs overall 4, 30 of 100 views: (10−4)·30/100 = 1.8.
        assert_eq!(
            negative_impact(Metric::RebufferPct, Some(10.0), Some(4.0), 30, 100),
            1.8
        );
        // A better-than-overall group has a negative impact.
        assert_eq!(
            negative_impact(Metric::PlaybackFailurePct, Some(1.0), Some(4.0), 50, 100),
            -1.5
        );
        // Higher is better: (overall − value): (2000 − 1500)·10/40 = 125.
        assert_eq!(
            negative_impact(Metric::AvgBitrateKbps, Some(1_500.0), Some(2_000.0), 10, 40),
            125.0
        );
        // Four decimals: (1 − 0)·1/3 = 0.3333….
        assert_eq!(
            negative_impact(Metric::StartupTimeMs, Some(1.0), Some(0.0), 1, 3),
            0.3333
        );
        // No direction, or a null on either side: 0.
        assert_eq!(
            negative_impact(Metric::Views, Some(5.0), Some(1.0), 5, 10),
            0.0
        );
        assert_eq!(
            negative_impact(Metric::WatchTimeMs, Some(5.0), Some(1.0), 5, 10),
            0.0
        );
        assert_eq!(
            negative_impact(Metric::RebufferPct, None, Some(1.0), 5, 10),
            0.0
        );
        assert_eq!(
            negative_impact(Metric::RebufferPct, Some(1.0), None, 5, 10),
            0.0
        );
        assert_eq!(
            negative_impact(Metric::RebufferPct, Some(1.0), Some(1.0), 5, 10),
            0.0
        );
    }
}
