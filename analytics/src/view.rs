//! A view (all deduplicated events of one session) and its derivation by the rules of
//! analytics.md §2 and §5: the one place those rules live, for every engine.

use ingest::{EndReason, EventType};

use crate::session::StoredEvent;

use crate::dims::{BatchDims, Dims};
use crate::event::Event;

/// One view's row: every field of analytics.md §2 plus the raw bitrate sums that let
/// aggregation stay exact. Counts and durations are `i64` so they map 1:1 onto SQL
/// integer columns.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// `sessionId`.
    pub session_id: String,
    /// `ts` of the earliest event (epoch ms).
    pub started_at: i64,
    /// `ts` of the latest event (epoch ms).
    pub ended_at: i64,
    /// It has a `playback_start`.
    pub started: bool,
    /// `ts` of the first `playback_start`.
    pub first_frame_at: Option<i64>,
    /// `startupMs` of the first `playback_start`.
    pub startup_ms: Option<f64>,
    /// A fatal `error` or a `session_end` with reason `error`.
    pub failed: bool,
    /// `ts` of the first event that made it `failed`.
    pub failed_at: Option<i64>,
    /// `failed` and (not `started`, or `failedAt < firstFrameAt`).
    pub startup_failure: bool,
    /// Not `started`, not `failed`, and it has a `session_end`.
    pub exit_before_start: bool,
    /// Stalls opened at or after `firstFrameAt`.
    pub rebuffer_count: i64,
    /// Summed length of those stalls (ms); an open stall closes at `endedAt`.
    pub rebuffer_ms: i64,
    /// Summed length of pauses at or after `firstFrameAt` (ms), same walk as stalls.
    pub paused_ms: i64,
    /// `max(0, endedAt − firstFrameAt − pausedMs)` when started, else 0.
    pub watch_time_ms: i64,
    /// Σ bitrate × covered ms over `[firstFrameAt, endedAt)`.
    pub bitrate_weighted_sum: f64,
    /// Covered ms over `[firstFrameAt, endedAt)`: time with a known bitrate.
    pub bitrate_covered_ms: i64,
    /// `quality_change` events with a non-empty `from`.
    pub rendition_switches: i64,
    /// Switches to a higher bitrate than the previous `quality_change`'s.
    pub upshifts: i64,
    /// Switches to a lower bitrate than the previous `quality_change`'s.
    pub downshifts: i64,
    /// Number of `error` events.
    pub error_count: i64,
    /// `code` of the first fatal `error`.
    pub fatal_error_code: Option<String>,
    /// The view's dimensions (`streamId` is resolved at query time from `src`).
    pub dims: Dims,
}

impl View {
    /// Derives a view from its events (any order; duplicates of a `(ts, type)` after the
    /// first are dropped, so pass them in write order) and the dimensions of the
    /// batches that carried them. `None` when there are no events.
    pub fn derive(session_id: &str, events: &[Event], batches: &[BatchDims]) -> Option<View> {
        let mut evs: Vec<&Event> = events.iter().collect();
        // Stable: among equal keys the first written stays first, and is the one kept.
        evs.sort_by_key(|e| e.order_key());
        evs.dedup_by_key(|e| e.order_key());
        let mut fold = Fold::default();
        for e in evs {
            fold.push(e);
        }
        fold.view(
            session_id,
            Dims::resolve(batches, fold.playback_content_id()),
        )
    }

    /// [`View::derive`] from events as a sink returns them.
    pub fn from_stored(
        session_id: &str,
        events: &[StoredEvent],
        batches: &[BatchDims],
    ) -> Option<View> {
        let events: Vec<Event> = events.iter().map(Event::from_stored).collect();
        View::derive(session_id, &events, batches)
    }

    /// The view's time-weighted mean bitrate in kbps, unrounded; `None` when no time of
    /// `[firstFrameAt, endedAt)` has a known bitrate.
    pub fn avg_bitrate_kbps(&self) -> Option<f64> {
        (self.bitrate_covered_ms > 0)
            .then(|| self.bitrate_weighted_sum / (self.bitrate_covered_ms as f64 * 1000.0))
    }
}

/// A view's derivation as a fold over its events in order (ts, then the contract order of
/// types; no two with the same key): the one implementation of the rules of analytics.md
/// §2 and §5. [`View::derive`] folds a view's whole event list; live views
/// (`crate::live`) keep a playing session's fold and push each new batch into it, so a
/// refresh does not read the view's earlier events again. Either way the same events give
/// the same [`View`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fold {
    /// Order key of the last event taken: the next must come after it.
    last: Option<(i64, usize)>,
    /// Events taken.
    events: u64,
    started_at: i64,
    first_frame_at: Option<i64>,
    startup_ms: Option<f64>,
    failed_at: Option<i64>,
    has_end: bool,
    /// Stalls and pauses after the first frame.
    stalls: Intervals,
    pauses: Intervals,
    /// The bitrate in force (since when, and the value; `None`: unknown), and what the
    /// closed spans after the first frame added up to.
    bitrate: Option<(i64, Option<f64>)>,
    bitrate_weighted_sum: f64,
    bitrate_covered_ms: i64,
    /// `None`: no earlier quality_change; `Some(b)`: the previous one's bitrate.
    previous_quality: Option<Option<f64>>,
    rendition_switches: i64,
    upshifts: i64,
    downshifts: i64,
    error_count: i64,
    /// A fatal error was seen; its code (the first fatal error's) is below.
    fatal_seen: bool,
    fatal_error_code: Option<String>,
    /// `contentId` of the first `playback_start` with a non-empty one.
    playback_content_id: Option<String>,
}

/// Intervals opened by one event type and closed by another (stalls, pauses).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Intervals {
    /// Start of the open interval.
    open: Option<i64>,
    opened: i64,
    /// Summed length of the closed ones.
    closed_ms: i64,
}

impl Intervals {
    fn open_at(&mut self, ts: i64) {
        if self.open.is_none() {
            self.open = Some(ts);
            self.opened += 1;
        }
    }

    fn close_at(&mut self, ts: i64) {
        if let Some(since) = self.open.take() {
            self.closed_ms += ts - since;
        }
    }

    /// (opened, summed ms) with the open one closed at `end`.
    fn total(&self, end: i64) -> (i64, i64) {
        let open = self.open.map_or(0, |since| end - since);
        (self.opened, self.closed_ms + open)
    }
}

impl Fold {
    /// Takes the next event. Returns `false`, and takes nothing, when `e` does not come
    /// after the last event taken (an earlier or equal key: out of order or a duplicate).
    pub fn push(&mut self, e: &Event) -> bool {
        let key = e.order_key();
        if self.last.is_some_and(|last| key <= last) {
            return false;
        }
        if self.last.is_none() {
            self.started_at = e.ts_ms;
        }
        self.last = Some(key);
        self.events += 1;
        let ts = e.ts_ms;
        match e.event_type {
            EventType::PlaybackStart => {
                if self.first_frame_at.is_none() {
                    self.first_frame_at = Some(ts);
                    self.startup_ms = e.startup_ms;
                }
                if self.playback_content_id.is_none() {
                    self.playback_content_id = e.content_id.clone().filter(|c| !c.is_empty());
                }
            }
            EventType::QualityChange => {
                // The span of the previous bitrate closes here; before the first frame
                // (unknown yet: it comes later in order) nothing is covered.
                if let (Some((since, Some(b))), Some(ff)) = (self.bitrate, self.first_frame_at) {
                    let lo = since.max(ff);
                    if ts > lo {
                        self.bitrate_weighted_sum += b * (ts - lo) as f64;
                        self.bitrate_covered_ms += ts - lo;
                    }
                }
                self.bitrate = Some((ts, e.bitrate));
                if e.switch {
                    self.rendition_switches += 1;
                    // §5: a switch with no earlier quality_change is neither up nor down.
                    if let (Some(Some(prev)), Some(now)) = (self.previous_quality, e.bitrate) {
                        if now > prev {
                            self.upshifts += 1;
                        } else if now < prev {
                            self.downshifts += 1;
                        }
                    }
                }
                self.previous_quality = Some(e.bitrate);
            }
            EventType::Error => {
                self.error_count += 1;
                if e.fatal && !self.fatal_seen {
                    self.fatal_seen = true;
                    self.fatal_error_code = e.code.clone();
                }
            }
            EventType::SessionEnd => self.has_end = true,
            // Stalls and pauses count from the first frame on: `playback_start` is first
            // in the contract order, so every later event is at or after it.
            EventType::RebufferStart if self.first_frame_at.is_some() => self.stalls.open_at(ts),
            EventType::RebufferEnd if self.first_frame_at.is_some() => self.stalls.close_at(ts),
            EventType::PlaybackPause if self.first_frame_at.is_some() => self.pauses.open_at(ts),
            EventType::PlaybackResume if self.first_frame_at.is_some() => self.pauses.close_at(ts),
            EventType::RebufferStart
            | EventType::RebufferEnd
            | EventType::PlaybackPause
            | EventType::PlaybackResume => {}
        }
        if self.failed_at.is_none() && is_failure(e) {
            self.failed_at = Some(ts);
        }
        true
    }

    /// Events taken so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// `contentId` of the first `playback_start` with a non-empty one so far (the fallback
    /// of [`Dims::resolve`]).
    pub fn playback_content_id(&self) -> Option<&str> {
        self.playback_content_id.as_deref()
    }

    /// The view of the events taken so far with dimensions `dims`; `None` before the first.
    pub fn view(&self, session_id: &str, dims: Dims) -> Option<View> {
        let (ended_at, _) = self.last?;
        let started = self.first_frame_at.is_some();
        let failed = self.failed_at.is_some();
        let startup_failure = match (self.failed_at, self.first_frame_at) {
            (Some(_), None) => true,
            (Some(f), Some(ff)) => f < ff,
            (None, _) => false,
        };
        let (mut rebuffer_count, mut rebuffer_ms, mut paused_ms, mut watch_time_ms) = (0, 0, 0, 0);
        let (mut bitrate_weighted_sum, mut bitrate_covered_ms) = (0.0, 0);
        if let Some(ff) = self.first_frame_at {
            (rebuffer_count, rebuffer_ms) = self.stalls.total(ended_at);
            paused_ms = self.pauses.total(ended_at).1;
            watch_time_ms = (ended_at - ff - paused_ms).max(0);
            (bitrate_weighted_sum, bitrate_covered_ms) =
                (self.bitrate_weighted_sum, self.bitrate_covered_ms);
            // The bitrate in force runs to the view's end.
            if let Some((since, Some(b))) = self.bitrate {
                let lo = since.max(ff);
                if ended_at > lo {
                    bitrate_weighted_sum += b * (ended_at - lo) as f64;
                    bitrate_covered_ms += ended_at - lo;
                }
            }
        }
        Some(View {
            session_id: session_id.to_owned(),
            started_at: self.started_at,
            ended_at,
            started,
            first_frame_at: self.first_frame_at,
            startup_ms: self.startup_ms,
            failed,
            failed_at: self.failed_at,
            startup_failure,
            exit_before_start: !started && !failed && self.has_end,
            rebuffer_count,
            rebuffer_ms,
            paused_ms,
            watch_time_ms,
            bitrate_weighted_sum,
            bitrate_covered_ms,
            rendition_switches: self.rendition_switches,
            upshifts: self.upshifts,
            downshifts: self.downshifts,
            error_count: self.error_count,
            fatal_error_code: self.fatal_error_code.clone(),
            dims,
        })
    }
}

/// An event that makes a view `failed`.
fn is_failure(e: &Event) -> bool {
    match e.event_type {
        EventType::Error => e.fatal,
        EventType::SessionEnd => e.reason == Some(EndReason::Error),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dims::UserAgent;
    use EventType::*;

    fn ev(ts: i64, t: EventType) -> Event {
        Event::new(ts, t)
    }

    fn start(ts: i64) -> Event {
        Event::playback_start(ts, None)
    }

    fn qc(ts: i64, bitrate: f64) -> Event {
        Event::quality_change(ts, bitrate, false)
    }

    fn initial(ts: i64, bitrate: f64) -> Event {
        Event::quality_change(ts, bitrate, true)
    }

    fn derive(events: &[Event]) -> View {
        View::derive("s1", events, &[]).expect("has events")
    }

    #[test]
    fn derives_from_stored_events() {
        let stored = [
            StoredEvent {
                event_type: PlaybackStart,
                ts_ms: 1_000,
                payload: r#"{"positionMs":0,"durationMs":1,"contentId":"c","startupMs":640}"#
                    .into(),
            },
            StoredEvent {
                event_type: SessionEnd,
                ts_ms: 4_000,
                payload: r#"{"reason":"ended","durationMs":3000}"#.into(),
            },
        ];
        let v = View::from_stored("s", &stored, &[]).expect("view");
        assert_eq!(v.startup_ms, Some(640.0));
        assert_eq!(v.watch_time_ms, 3_000);
        assert_eq!(v.dims.content_id.as_deref(), Some("c"));
    }

    #[test]
    fn no_events_no_view() {
        assert_eq!(View::derive("s", &[], &[]), None);
    }

    #[test]
    fn started_and_ended_at_are_min_and_max_ts_in_any_input_order() {
        let v = derive(&[
            ev(300, PlaybackPause),
            ev(100, RebufferStart),
            ev(200, PlaybackResume),
        ]);
        assert_eq!((v.started_at, v.ended_at), (100, 300));
        assert_eq!(v.session_id, "s1");
    }

    #[test]
    fn started_first_frame_and_startup_ms_come_from_the_first_playback_start() {
        let v = derive(&[
            Event::playback_start(2_000, Some(900.0)),
            Event::playback_start(1_000, Some(450.0)),
            ev(500, QualityChange),
        ]);
        assert!(v.started);
        assert_eq!(v.first_frame_at, Some(1_000));
        assert_eq!(v.startup_ms, Some(450.0));
        // The first playback_start without startupMs gives null, even if a later one has it.
        let v = derive(&[start(1_000), Event::playback_start(2_000, Some(900.0))]);
        assert_eq!(v.startup_ms, None);
        let v = derive(&[ev(1, SessionEnd)]);
        assert!(!v.started);
        assert_eq!(v.first_frame_at, None);
        assert_eq!(v.startup_ms, None);
    }

    #[test]
    fn equal_ts_are_ordered_by_contract_type_order() {
        // All at ts 1000, given in reverse contract order. In contract order the walk is:
        // playback_start (firstFrameAt 1000), rebuffer_start (opens), rebuffer_end (closes,
        // 0 ms), quality_change; so one stall of 0 ms, not an open stall.
        let v = derive(&[
            ev(2_000, PlaybackPause),
            Event::session_end(1_000, EndReason::Ended),
            qc(1_000, 1e6),
            ev(1_000, RebufferEnd),
            ev(1_000, RebufferStart),
            start(1_000),
        ]);
        assert_eq!(v.first_frame_at, Some(1_000));
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (1, 0));
        // The pause at 2000 is still open at endedAt 2000: 0 ms.
        assert_eq!(v.paused_ms, 0);
        assert_eq!(v.watch_time_ms, 1_000);
    }

    #[test]
    fn same_ts_and_type_keeps_the_first_written() {
        let v = derive(&[
            start(0),
            Event::error(10, "first", true),
            Event::error(10, "second", false),
        ]);
        assert_eq!(v.error_count, 1);
        assert_eq!(v.fatal_error_code.as_deref(), Some("first"));
        assert!(v.failed);
    }

    #[test]
    fn failed_by_fatal_error_or_session_end_error() {
        let v = derive(&[start(0), Event::error(10, "E_NONFATAL", false)]);
        assert!(!v.failed);
        assert_eq!(v.failed_at, None);
        let v = derive(&[
            start(0),
            Event::error(10, "E", false),
            Event::error(20, "F", true),
        ]);
        assert!(v.failed);
        assert_eq!(v.failed_at, Some(20));
        let v = derive(&[start(0), Event::session_end(30, EndReason::Error)]);
        assert!(v.failed);
        assert_eq!(v.failed_at, Some(30));
        assert_eq!(v.fatal_error_code, None);
        let v = derive(&[start(0), Event::session_end(30, EndReason::Unloaded)]);
        assert!(!v.failed);
        // The first of either kind sets failedAt.
        let v = derive(&[
            Event::session_end(40, EndReason::Error),
            Event::error(35, "F", true),
            start(0),
        ]);
        assert_eq!(v.failed_at, Some(35));
    }

    #[test]
    fn startup_failure_before_first_frame_or_never_started() {
        // Failed, never started.
        let v = derive(&[Event::error(10, "F", true)]);
        assert!(v.failed && v.startup_failure && !v.exit_before_start);
        // Failed before the first frame.
        let v = derive(&[Event::error(10, "F", true), start(20)]);
        assert!(v.failed && v.startup_failure);
        // Failed after the first frame: a playback failure, not a startup failure.
        let v = derive(&[start(10), Event::error(20, "F", true)]);
        assert!(v.failed && !v.startup_failure);
        // Failed at the first frame's ts: error sorts after playback_start, failedAt is not
        // < firstFrameAt, so not a startup failure.
        let v = derive(&[Event::error(10, "F", true), start(10)]);
        assert_eq!((v.failed_at, v.first_frame_at), (Some(10), Some(10)));
        assert!(!v.startup_failure);
    }

    #[test]
    fn exit_before_start_needs_session_end_no_start_and_no_failure() {
        let v = derive(&[
            ev(0, QualityChange),
            Event::session_end(50, EndReason::Unloaded),
        ]);
        assert!(v.exit_before_start && !v.failed && !v.startup_failure);
        // Exit by error is a failure, not an exit before start.
        let v = derive(&[Event::session_end(50, EndReason::Error)]);
        assert!(!v.exit_before_start && v.failed && v.startup_failure);
        // A non-fatal error and an ordinary end: still an exit before start.
        let v = derive(&[
            Event::error(1, "E", false),
            Event::session_end(2, EndReason::Ended),
        ]);
        assert!(v.exit_before_start);
        // No session_end: neither (the view may still be going on).
        let v = derive(&[ev(0, RebufferStart)]);
        assert!(!v.exit_before_start);
        // Started: never an exit before start.
        let v = derive(&[start(0), Event::session_end(5, EndReason::Ended)]);
        assert!(!v.exit_before_start);
    }

    #[test]
    fn stalls_open_close_and_ignore_before_first_frame() {
        let v = derive(&[
            ev(0, RebufferStart), // before firstFrameAt: ignored
            ev(50, RebufferEnd),  // before firstFrameAt: ignored
            start(100),
            ev(200, RebufferStart), // opens
            ev(250, RebufferStart), // already open: ignored
            ev(300, RebufferEnd),   // closes: 100 ms
            ev(350, RebufferEnd),   // nothing open: ignored
            ev(400, RebufferStart), // opens
            ev(450, RebufferEnd),   // closes: 50 ms
            ev(1_000, SessionEnd),
        ]);
        assert_eq!(v.rebuffer_count, 2);
        assert_eq!(v.rebuffer_ms, 150);
    }

    #[test]
    fn stall_started_before_first_frame_and_ended_after_is_ignored() {
        // The rebuffer_start at 50 is not walked; its rebuffer_end at 150 closes nothing.
        let v = derive(&[
            ev(50, RebufferStart),
            start(100),
            ev(150, RebufferEnd),
            ev(500, SessionEnd),
        ]);
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (0, 0));
    }

    #[test]
    fn stall_open_at_the_end_closes_at_ended_at() {
        // Opens at 600, endedAt 1000: 400 ms.
        let v = derive(&[start(100), ev(600, RebufferStart), ev(1_000, PlaybackPause)]);
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (1, 400));
        // The stall start is the last event: counted, 0 ms.
        let v = derive(&[start(100), ev(600, RebufferStart)]);
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (1, 0));
    }

    #[test]
    fn rebuffer_end_without_start_counts_nothing() {
        let v = derive(&[start(0), ev(100, RebufferEnd), ev(200, RebufferEnd)]);
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (0, 0));
    }

    #[test]
    fn not_started_has_no_stalls_pauses_or_watch_time() {
        let v = derive(&[
            ev(0, RebufferStart),
            ev(10, PlaybackPause),
            ev(100, SessionEnd),
        ]);
        assert_eq!(
            (
                v.rebuffer_count,
                v.rebuffer_ms,
                v.paused_ms,
                v.watch_time_ms
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn pauses_walk_like_stalls_and_reduce_watch_time() {
        let v = derive(&[
            ev(0, PlaybackPause), // before firstFrameAt: ignored
            start(1_000),
            ev(2_000, PlaybackPause),  // opens
            ev(2_500, PlaybackPause),  // already open
            ev(3_000, PlaybackResume), // 1000 ms
            ev(3_100, PlaybackResume), // nothing open
            ev(9_000, PlaybackPause),  // open at the end: 1000 ms
            ev(10_000, SessionEnd),
        ]);
        assert_eq!(v.paused_ms, 2_000);
        // 10000 − 1000 − 2000
        assert_eq!(v.watch_time_ms, 7_000);
    }

    #[test]
    fn pause_during_a_stall_counts_in_both() {
        // Stall [1000, 3000), pause [1500, 2000): rebufferMs 2000, pausedMs 500,
        // watch = 5000 − 0 − 500 = 4500 (stall time is watch time, pause time is not).
        let v = derive(&[
            start(0),
            ev(1_000, RebufferStart),
            ev(1_500, PlaybackPause),
            ev(2_000, PlaybackResume),
            ev(3_000, RebufferEnd),
            ev(5_000, SessionEnd),
        ]);
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (1, 2_000));
        assert_eq!(v.paused_ms, 500);
        assert_eq!(v.watch_time_ms, 4_500);
    }

    #[test]
    fn watch_time_is_never_negative() {
        // Pauses lie within [firstFrameAt, endedAt], so the max(0, …) is a guard: a pause
        // open from firstFrameAt to endedAt leaves exactly 0.
        let v = derive(&[start(0), ev(0, PlaybackPause), ev(700, SessionEnd)]);
        assert_eq!(v.paused_ms, 700);
        assert_eq!(v.watch_time_ms, 0);
        // Started at the last event.
        let v = derive(&[ev(0, QualityChange), start(50)]);
        assert_eq!(v.watch_time_ms, 0);
    }

    #[test]
    fn bitrate_is_time_weighted_over_covered_time_from_first_frame() {
        // firstFrameAt 1000, endedAt 5000. Bitrate 1e6 set at 0 (before first frame) holds
        // over [1000, 2000): 1000 ms; 3e6 over [2000, 5000): 3000 ms.
        // Σ = 1e6·1000 + 3e6·3000 = 1e9 + 9e9 = 1e10; covered 4000; mean 2.5e6 bps = 2500 kbps.
        let v = derive(&[
            initial(0, 1e6),
            start(1_000),
            qc(2_000, 3e6),
            ev(5_000, SessionEnd),
        ]);
        assert_eq!(v.bitrate_weighted_sum, 1e10);
        assert_eq!(v.bitrate_covered_ms, 4_000);
        assert_eq!(v.avg_bitrate_kbps(), Some(2_500.0));
    }

    #[test]
    fn time_before_the_first_known_bitrate_is_not_covered() {
        // firstFrameAt 0, first bitrate at 3000 (2e6) until endedAt 4000: covered 1000 ms,
        // mean 2e6 bps = 2000 kbps (the 3000 ms without a bitrate do not dilute it).
        let v = derive(&[start(0), qc(3_000, 2e6), ev(4_000, SessionEnd)]);
        assert_eq!(v.bitrate_covered_ms, 1_000);
        assert_eq!(v.avg_bitrate_kbps(), Some(2_000.0));
    }

    #[test]
    fn bitrate_changes_before_first_frame_only_set_the_starting_value() {
        // 5e6 at 0, 1e6 at 500, first frame at 1000, end 2000: only 1e6 over 1000 ms.
        let v = derive(&[
            initial(0, 5e6),
            qc(500, 1e6),
            start(1_000),
            ev(2_000, SessionEnd),
        ]);
        assert_eq!(v.bitrate_covered_ms, 1_000);
        assert_eq!(v.avg_bitrate_kbps(), Some(1_000.0));
    }

    #[test]
    fn no_quality_change_or_nothing_covered_gives_null_bitrate() {
        let v = derive(&[start(0), ev(1_000, SessionEnd)]);
        assert_eq!(v.bitrate_covered_ms, 0);
        assert_eq!(v.avg_bitrate_kbps(), None);
        // A quality_change at endedAt covers [endedAt, endedAt): nothing.
        let v = derive(&[start(0), qc(1_000, 1e6)]);
        assert_eq!(v.avg_bitrate_kbps(), None);
        // Not started: nothing covered whatever the quality changes.
        let v = derive(&[initial(0, 1e6), ev(1_000, SessionEnd)]);
        assert_eq!(v.avg_bitrate_kbps(), None);
    }

    #[test]
    fn quality_change_without_bitrate_leaves_its_time_uncovered() {
        // 1e6 over [0, 1000); unknown over [1000, 2000); 3e6 over [2000, 3000).
        // Σ = 1e9 + 3e9 = 4e9 over 2000 ms → 2e6 bps.
        let mut unknown = ev(1_000, QualityChange);
        unknown.switch = true;
        let v = derive(&[
            start(0),
            initial(0, 1e6),
            unknown,
            qc(2_000, 3e6),
            ev(3_000, SessionEnd),
        ]);
        assert_eq!(v.bitrate_covered_ms, 2_000);
        assert_eq!(v.avg_bitrate_kbps(), Some(2_000.0));
        // A switch without a bitrate is a switch but neither up nor down; the next one
        // compares against "unknown": neither either.
        assert_eq!((v.rendition_switches, v.upshifts, v.downshifts), (2, 0, 0));
    }

    #[test]
    fn switches_up_and_down_against_the_previous_quality_change() {
        let v = derive(&[
            initial(0, 2e6), // initial: not a switch, sets previous
            start(0),
            qc(10, 4e6), // up
            qc(20, 1e6), // down
            qc(30, 1e6), // switch at the same bitrate: neither
            qc(40, 3e6), // up
            ev(50, SessionEnd),
        ]);
        assert_eq!((v.rendition_switches, v.upshifts, v.downshifts), (4, 2, 1));
    }

    #[test]
    fn first_switch_without_earlier_quality_change_is_neither_up_nor_down() {
        let v = derive(&[start(0), qc(10, 4e6), qc(20, 1e6), ev(30, SessionEnd)]);
        // qc@10: switch, no previous → neither; qc@20: down.
        assert_eq!((v.rendition_switches, v.upshifts, v.downshifts), (2, 0, 1));
        // An initial quality_change after a switch still sets the reference but is no switch.
        let v = derive(&[qc(10, 4e6), initial(20, 1e6), qc(30, 2e6)]);
        assert_eq!((v.rendition_switches, v.upshifts, v.downshifts), (2, 1, 0));
    }

    #[test]
    fn switches_before_first_frame_count() {
        let v = derive(&[initial(0, 1e6), qc(5, 2e6), start(10), ev(20, SessionEnd)]);
        assert_eq!((v.rendition_switches, v.upshifts), (1, 1));
    }

    #[test]
    fn error_count_and_first_fatal_code() {
        let v = derive(&[
            Event::error(5, "A", false),
            start(0),
            Event::error(10, "B", true),
            Event::error(20, "C", true),
            Event::error(30, "D", false),
        ]);
        assert_eq!(v.error_count, 4);
        assert_eq!(v.fatal_error_code.as_deref(), Some("B"));
        let v = derive(&[Event::error(5, "A", false)]);
        assert_eq!(v.error_count, 1);
        assert_eq!(v.fatal_error_code, None);
    }

    #[test]
    fn dims_fall_back_to_the_first_playback_start_content_id() {
        let mut a = start(10);
        a.content_id = Some(String::new());
        let mut b = start(20);
        b.content_id = Some("movie".into());
        let mut c = start(5);
        c.content_id = None;
        let v = View::derive("s", &[b, a, c], &[]).expect("view");
        assert_eq!(v.dims.content_id.as_deref(), Some("movie"));
        assert_eq!(v.dims.user_agent, UserAgent::unknown());
        let batch = BatchDims {
            content_id: Some("ctx".into()),
            ..BatchDims::default()
        };
        let v = View::derive("s", &[start(1)], &[batch]).expect("view");
        assert_eq!(v.dims.content_id.as_deref(), Some("ctx"));
    }

    #[test]
    fn a_full_view_by_hand() {
        // A plausible session: intent at −, first frame at 1000 after 800 ms, initial
        // 2 Mbps, stall 3000–3500, up to 4 Mbps at 4000, pause 6000–7000, end at 10000.
        let v = derive(&[
            initial(900, 2e6),
            Event::playback_start(1_000, Some(800.0)),
            ev(3_000, RebufferStart),
            ev(3_500, RebufferEnd),
            qc(4_000, 4e6),
            ev(6_000, PlaybackPause),
            ev(7_000, PlaybackResume),
            Event::session_end(10_000, EndReason::Ended),
        ]);
        assert_eq!(v.started_at, 900);
        assert_eq!(v.ended_at, 10_000);
        assert_eq!(v.startup_ms, Some(800.0));
        assert_eq!((v.rebuffer_count, v.rebuffer_ms), (1, 500));
        assert_eq!(v.paused_ms, 1_000);
        // 10000 − 1000 − 1000
        assert_eq!(v.watch_time_ms, 8_000);
        // 2e6 over [1000,4000) = 6e9, 4e6 over [4000,10000) = 2.4e10; Σ 3e10 / 9000 ms
        // = 3.333…e6 bps → 3333.33… kbps.
        assert_eq!(v.bitrate_weighted_sum, 3e10);
        assert_eq!(v.bitrate_covered_ms, 9_000);
        assert_eq!((v.rendition_switches, v.upshifts, v.downshifts), (1, 1, 0));
        assert!(!v.failed && !v.startup_failure && !v.exit_before_start);
    }
    #[test]
    fn a_fold_pushed_piece_by_piece_gives_what_deriving_each_prefix_gives() {
        use rand::{Rng, SeedableRng};
        // Adversarial and realistic sessions, their events in order, cut at random points:
        // after each piece the fold's view is the view derived from that prefix.
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let fleets = [
            crate::fleet::FleetConfig::adversarial(23, 400),
            crate::fleet::FleetConfig::realistic(23, 400),
        ];
        let mut checked = 0;
        for cfg in fleets {
            let mut sessions: std::collections::BTreeMap<String, Vec<Event>> = Default::default();
            for b in crate::fleet::Fleet::generate(&cfg).batches {
                let evs = sessions.entry(b.session_id.clone()).or_default();
                evs.extend(b.events.iter().map(Event::from_stored));
            }
            for (session, mut events) in sessions {
                events.sort_by_key(Event::order_key);
                events.dedup_by_key(|e| e.order_key());
                let mut fold = Fold::default();
                let mut taken = 0;
                while taken < events.len() {
                    let n = rng.gen_range(1..=events.len() - taken);
                    for e in &events[taken..taken + n] {
                        assert!(fold.push(e));
                    }
                    taken += n;
                    let prefix = &events[..taken];
                    let dims = Dims::resolve(&[], fold.playback_content_id());
                    assert_eq!(
                        fold.view(&session, dims),
                        View::derive(&session, prefix, &[]),
                        "{session} after {taken} events"
                    );
                    checked += 1;
                }
                // Nothing at or before the last key is taken again.
                if let Some(last) = events.last() {
                    let before = fold.clone();
                    assert!(!fold.push(last));
                    assert!(!fold.push(&events[0]));
                    assert_eq!(fold, before);
                }
            }
        }
        assert!(checked > 1_000, "{checked}");
    }
}
