//! The rows of `qoe_views` ([`ViewRow`]: one per view, or a tombstone) and of the reads'
//! answers (aggregates per group, page keys, sessions, events), in the column order of
//! their queries.

use clickhouse::Row;
use serde::{Deserialize, Serialize};

use crate::dims::{Dims, UserAgent};
use crate::metrics::Aggregate;
use crate::store::view_version;
use crate::view::View;

/// Every column of `qoe_views`, in [`ViewRow`] order.
pub(crate) const VIEW_COLUMNS: &str =
    "owner, session_id, started_at, ended_at, started, first_frame_at, \
    startup_ms, failed, failed_at, startup_failure, exit_before_start, rebuffer_count, \
    rebuffer_ms, paused_ms, watch_time_ms, bitrate_weighted_sum, bitrate_covered_ms, \
    rendition_switches, upshifts, downshifts, error_count, fatal_error_code, content_id, src, \
    sdk, player, browser, os, device_type, tag_keys, tag_values, batch_rows, event_rows, \
    version, derived_at, deleted";

/// One row of `qoe_views`.
#[derive(Debug, Clone, Row, Serialize, Deserialize)]
pub(crate) struct ViewRow {
    pub(crate) owner: String,
    pub(crate) session_id: String,
    pub(crate) started_at: i64,
    pub(crate) ended_at: i64,
    pub(crate) started: u8,
    pub(crate) first_frame_at: Option<i64>,
    pub(crate) startup_ms: Option<f64>,
    pub(crate) failed: u8,
    pub(crate) failed_at: Option<i64>,
    pub(crate) startup_failure: u8,
    pub(crate) exit_before_start: u8,
    pub(crate) rebuffer_count: i64,
    pub(crate) rebuffer_ms: i64,
    pub(crate) paused_ms: i64,
    pub(crate) watch_time_ms: i64,
    pub(crate) bitrate_weighted_sum: f64,
    pub(crate) bitrate_covered_ms: i64,
    pub(crate) rendition_switches: i64,
    pub(crate) upshifts: i64,
    pub(crate) downshifts: i64,
    pub(crate) error_count: i64,
    pub(crate) fatal_error_code: Option<String>,
    pub(crate) content_id: Option<String>,
    pub(crate) src: Option<String>,
    pub(crate) sdk: Option<String>,
    pub(crate) player: Option<String>,
    pub(crate) browser: String,
    pub(crate) os: String,
    pub(crate) device_type: String,
    pub(crate) tag_keys: Vec<String>,
    pub(crate) tag_values: Vec<String>,
    pub(crate) batch_rows: u64,
    pub(crate) event_rows: u64,
    pub(crate) version: u64,
    pub(crate) derived_at: i64,
    /// 1 for a tombstone: the view is no longer under this row's `started_day`.
    pub(crate) deleted: u8,
}

impl ViewRow {
    /// The row of `v` (moved: a step builds one per derived view).
    pub(crate) fn new(owner: &str, v: View, batch_rows: u64, event_rows: u64, now_ms: i64) -> Self {
        let d = v.dims;
        let (tag_keys, tag_values) = d.tags.into_iter().unzip();
        ViewRow {
            owner: owner.to_owned(),
            session_id: v.session_id,
            started_at: v.started_at,
            ended_at: v.ended_at,
            started: u8::from(v.started),
            first_frame_at: v.first_frame_at,
            startup_ms: v.startup_ms,
            failed: u8::from(v.failed),
            failed_at: v.failed_at,
            startup_failure: u8::from(v.startup_failure),
            exit_before_start: u8::from(v.exit_before_start),
            rebuffer_count: v.rebuffer_count,
            rebuffer_ms: v.rebuffer_ms,
            paused_ms: v.paused_ms,
            watch_time_ms: v.watch_time_ms,
            bitrate_weighted_sum: v.bitrate_weighted_sum,
            bitrate_covered_ms: v.bitrate_covered_ms,
            rendition_switches: v.rendition_switches,
            upshifts: v.upshifts,
            downshifts: v.downshifts,
            error_count: v.error_count,
            fatal_error_code: v.fatal_error_code,
            content_id: d.content_id,
            src: d.src,
            sdk: d.sdk,
            player: d.player,
            browser: d.user_agent.browser,
            os: d.user_agent.os,
            device_type: d.user_agent.device_type,
            tag_keys,
            tag_values,
            batch_rows,
            event_rows,
            version: view_version(batch_rows, event_rows),
            derived_at: now_ms,
            deleted: 0,
        }
    }

    /// A tombstone of this view under `day` (another day than its start's): same owner,
    /// session and version, `deleted` = 1, every value empty.
    pub(crate) fn tombstone(&self, day: i64) -> Self {
        ViewRow {
            owner: self.owner.clone(),
            session_id: self.session_id.clone(),
            started_at: day * crate::query::DAY_MS,
            ended_at: day * crate::query::DAY_MS,
            started: 0,
            first_frame_at: None,
            startup_ms: None,
            failed: 0,
            failed_at: None,
            startup_failure: 0,
            exit_before_start: 0,
            rebuffer_count: 0,
            rebuffer_ms: 0,
            paused_ms: 0,
            watch_time_ms: 0,
            bitrate_weighted_sum: 0.0,
            bitrate_covered_ms: 0,
            rendition_switches: 0,
            upshifts: 0,
            downshifts: 0,
            error_count: 0,
            fatal_error_code: None,
            content_id: None,
            src: None,
            sdk: None,
            player: None,
            browser: String::new(),
            os: String::new(),
            device_type: String::new(),
            tag_keys: Vec::new(),
            tag_values: Vec::new(),
            batch_rows: 0,
            event_rows: 0,
            version: self.version,
            derived_at: self.derived_at,
            deleted: 1,
        }
    }

    pub(crate) fn into_view(self) -> View {
        View {
            session_id: self.session_id,
            started_at: self.started_at,
            ended_at: self.ended_at,
            started: self.started != 0,
            first_frame_at: self.first_frame_at,
            startup_ms: self.startup_ms,
            failed: self.failed != 0,
            failed_at: self.failed_at,
            startup_failure: self.startup_failure != 0,
            exit_before_start: self.exit_before_start != 0,
            rebuffer_count: self.rebuffer_count,
            rebuffer_ms: self.rebuffer_ms,
            paused_ms: self.paused_ms,
            watch_time_ms: self.watch_time_ms,
            bitrate_weighted_sum: self.bitrate_weighted_sum,
            bitrate_covered_ms: self.bitrate_covered_ms,
            rendition_switches: self.rendition_switches,
            upshifts: self.upshifts,
            downshifts: self.downshifts,
            error_count: self.error_count,
            fatal_error_code: self.fatal_error_code,
            dims: Dims {
                content_id: self.content_id,
                src: self.src,
                sdk: self.sdk,
                player: self.player,
                tags: self.tag_keys.into_iter().zip(self.tag_values).collect(),
                user_agent: UserAgent {
                    browser: self.browser,
                    os: self.os,
                    device_type: self.device_type,
                },
            },
        }
    }
}

macro_rules! agg_row {
    ($name:ident $(, $key:ident : $kty:ty)?) => {
        #[derive(Debug, Row, Deserialize)]
        pub(crate) struct $name {
            $(pub(crate) $key: $kty,)?
            views: i64,
            failed: i64,
            startup_failures: i64,
            exits_before_start: i64,
            rebuffer_ms: i64,
            rebuffer_count: i64,
            watch_time_ms: i64,
            bitrate_weighted_sum: f64,
            bitrate_covered_ms: i64,
            startup_count: i64,
            startup_sum_ms: f64,
            startup_quantiles: Vec<f64>,
        }

        impl $name {
            pub(crate) fn aggregate(&self) -> Aggregate {
                let q = |i: usize| {
                    (self.startup_count > 0)
                        .then(|| self.startup_quantiles.get(i).copied())
                        .flatten()
                };
                Aggregate {
                    views: self.views,
                    failed: self.failed,
                    startup_failures: self.startup_failures,
                    exits_before_start: self.exits_before_start,
                    rebuffer_ms: self.rebuffer_ms,
                    rebuffer_count: self.rebuffer_count,
                    watch_time_ms: self.watch_time_ms,
                    bitrate_weighted_sum: self.bitrate_weighted_sum,
                    bitrate_covered_ms: self.bitrate_covered_ms,
                    startup_count: self.startup_count,
                    startup_sum_ms: self.startup_sum_ms,
                    startup_p50_ms: q(0),
                    startup_p75_ms: q(1),
                    startup_p95_ms: q(2),
                    startup_p99_ms: q(3),
                }
            }
        }
    };
}

agg_row!(AggAll);
agg_row!(AggBucket, k: i64);
agg_row!(AggValue, k: Option<String>);

#[derive(Row, Deserialize)]
pub(crate) struct PageKey {
    pub(crate) session_id: String,
    pub(crate) started_at: i64,
}

#[derive(Row, Deserialize)]
pub(crate) struct SessionRow {
    pub(crate) session_id: String,
    pub(crate) first_ts: i64,
    pub(crate) last_ts: i64,
    pub(crate) event_count: u64,
    pub(crate) c_playback_start: u64,
    pub(crate) c_playback_pause: u64,
    pub(crate) c_playback_resume: u64,
    pub(crate) c_rebuffer_start: u64,
    pub(crate) c_rebuffer_end: u64,
    pub(crate) c_quality_change: u64,
    pub(crate) c_error: u64,
    pub(crate) c_session_end: u64,
    pub(crate) content_id: String,
}

#[derive(Row, Deserialize)]
pub(crate) struct EventReadRow {
    pub(crate) ts: i64,
    pub(crate) event_type: String,
    pub(crate) payload: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_columns_match_the_row() {
        let names: Vec<&str> = VIEW_COLUMNS.split(',').map(str::trim).collect();
        assert_eq!(names, <ViewRow as Row>::COLUMN_NAMES);
    }
}
