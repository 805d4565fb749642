//! `/app/views` (the caller's views, newest first, filtered like the QoE page, a page at a
//! time) and `/app/views/{sessionId}` (one view's metrics and its events on a timeline).

use std::sync::Arc;

use analytics::query::{messages, Cursor};
use analytics::response::ViewItem;
use analytics::{Event, View, ViewsQuery};
use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use ingest::EventType;

use super::fmt::{self, When};
use super::qoe::{ActiveFilter, Selection};
use super::{render, Choice, Frame, PageError, Section};
use crate::http::extract::SessionUser;
use crate::http::query::QueryPairs;
use crate::http::AppState;
use crate::time::now_ms;
use crate::validation::has_forbidden_chars;

/// Views per page.
const PAGE_SIZE: usize = 50;

/// A view as a row of the list.
pub struct ViewRow {
    pub href: String,
    pub session_id: String,
    pub started: When,
    pub content: String,
    pub stream: Option<(String, String)>,
    pub client: String,
    pub outcome: &'static str,
    pub badge: &'static str,
    pub startup: String,
    pub stalls: String,
    pub watch: String,
}

fn outcome(v: &ViewItem) -> (&'static str, &'static str) {
    if v.failed {
        ("failed", "badge-failing")
    } else if v.exit_before_start {
        ("exited before start", "badge-degraded")
    } else if v.rebuffer_count > 0 {
        ("stalled", "badge-degraded")
    } else if v.started {
        ("played", "badge-healthy")
    } else {
        ("not started", "badge-neutral")
    }
}

#[derive(Template)]
#[template(path = "views.html")]
struct ViewsPage {
    frame: Frame,
    ranges: Vec<Choice>,
    filters: Vec<ActiveFilter>,
    filter_inputs: Vec<(String, String)>,
    errors: Vec<String>,
    rows: Vec<ViewRow>,
    next: Option<String>,
    first_page: Option<String>,
    csv: String,
}

/// `GET /app/views?range=…&filter=…&cursor=…`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let sel = Selection::from_query(&q, now_ms());
    let raw_cursor = q.last("cursor").unwrap_or_default();
    let cursor = match raw_cursor {
        "" => Ok(None),
        raw => Cursor::decode(raw)
            .map(Some)
            .ok_or_else(|| format!("cursor: {}", messages::INVALID_CURSOR)),
    };
    let mut errors = Vec::new();
    let mut rows = Vec::new();
    let mut next = None;
    let parsed = match (cursor, sel.filters()) {
        (Ok(cursor), Ok(filters)) => Ok(ViewsQuery {
            limit: PAGE_SIZE,
            cursor,
            ..ViewsQuery::new(sel.range, filters)
        }),
        // Listed as the route would key them: `cursor` before `filter`.
        (cursor, filters) => Err(cursor.err().into_iter().chain(filters.err())),
    };
    match parsed {
        Err(e) => errors.extend(e),
        Ok(vq) => {
            let names: std::collections::HashMap<String, String> =
                state.streams.names().await?.into_iter().collect();
            match state
                .analytics
                .views(&user.0.user.id, &vq, &state.streams)
                .await
            {
                Err(e) => {
                    tracing::warn!(error = %e, "views page: store unavailable");
                    errors.push("The telemetry store did not answer; try again shortly.".into());
                }
                Ok(body) => {
                    next = body.next_cursor.map(|c| {
                        format!(
                            "/app/views?range={}{}&cursor={}",
                            sel.range_param,
                            sel.filter_query,
                            fmt::q(&c)
                        )
                    });
                    rows = body
                        .items
                        .iter()
                        .map(|v| {
                            let (word, badge) = outcome(v);
                            ViewRow {
                                href: format!("/app/views/{}", fmt::q(&v.session_id)),
                                session_id: v.session_id.clone(),
                                started: When::at(v.started_at),
                                content: v.content_id.clone().unwrap_or_else(|| "—".into()),
                                stream: v.stream_id.as_ref().map(|id| {
                                    (
                                        id.clone(),
                                        names.get(id).cloned().unwrap_or_else(|| id.clone()),
                                    )
                                }),
                                client: format!("{} · {} · {}", v.browser, v.os, v.device_type),
                                outcome: word,
                                badge,
                                startup: fmt::ms(v.startup_ms),
                                stalls: if v.rebuffer_count == 0 {
                                    "0".into()
                                } else {
                                    format!(
                                        "{} ({})",
                                        fmt::int(v.rebuffer_count),
                                        fmt::duration(v.rebuffer_ms)
                                    )
                                },
                                watch: fmt::duration(v.watch_time_ms),
                            }
                        })
                        .collect();
                }
            }
        }
    }
    Ok(render(&ViewsPage {
        frame: Frame::new(&user, Section::Views),
        ranges: sel.range_choices(),
        filters: sel.active_filters("/app/views"),
        filter_inputs: sel.filter_pairs.clone(),
        errors,
        rows,
        next,
        first_page: (!raw_cursor.is_empty())
            .then(|| format!("/app/views?range={}{}", sel.range_param, sel.filter_query)),
        csv: format!(
            "/api/v1/qoe/views?{}{}&limit=1000&format=csv",
            sel.range_query(),
            sel.filter_query
        ),
    }))
}

/// One labelled value of a view.
pub struct Fact {
    pub label: &'static str,
    pub value: String,
}

/// One event of a view, with its offset from the view's start.
pub struct EventRow {
    pub at: When,
    pub offset: String,
    pub kind: &'static str,
    pub payload: String,
}

/// A span of the view's timeline drawing, in per-mille of the view's length.
pub struct Span {
    pub class: &'static str,
    pub x: String,
    pub width: String,
    pub label: String,
}

#[derive(Template)]
#[template(path = "view.html")]
struct ViewPage {
    frame: Frame,
    session_id: String,
    facts: Vec<Fact>,
    spans: Vec<Span>,
    marks: Vec<Span>,
    events: Vec<EventRow>,
    length: String,
    /// Set when the metrics come from the first [`DERIVE_EVENTS`] events only.
    partial: Option<String>,
    /// The next page of events, and the first (when this is not it).
    next_events: Option<String>,
    first_events: Option<String>,
}

/// Events listed per page of a view (decisions.md §14), and their payload bytes at most
/// (escaped into HTML, a page stays a few MiB whatever the payloads hold).
const EVENTS_PER_PAGE: usize = 1000;
const EVENTS_PAGE_BYTES: usize = 1024 * 1024;
/// Events the metrics and the drawing are derived from at most: every event of any real
/// playback; a session planted with more is shown from its first ones, and says so.
const DERIVE_EVENTS: usize = 10_000;
const DERIVE_BYTES: usize = 4 * 1024 * 1024;

/// The state a view is in between two events, for the drawing.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Starting,
    Playing,
    Stalled,
    Paused,
}

/// The drawing of a view: what it was doing from its first to its last event (starting,
/// playing, stalled, paused) and where its rendition switches and errors happened.
fn drawing(events: &[Event], start: i64, end: i64) -> (Vec<Span>, Vec<Span>) {
    let len = (end - start).max(1) as f64;
    let at = |ts: i64| format!("{:.1}", (ts - start) as f64 * 1000.0 / len);
    let mut spans = Vec::new();
    let mut marks = Vec::new();
    let mut phase = Phase::Starting;
    let mut since = start;
    let close = |spans: &mut Vec<Span>, phase: Phase, from: i64, to: i64| {
        if to <= from {
            return;
        }
        let (class, word) = match phase {
            Phase::Starting => ("seg-starting", "starting"),
            Phase::Playing => ("seg-playing", "playing"),
            Phase::Stalled => ("seg-stalled", "stalled"),
            Phase::Paused => ("seg-paused", "paused"),
        };
        spans.push(Span {
            class,
            x: at(from),
            width: format!("{:.1}", (to - from) as f64 * 1000.0 / len),
            label: format!("{word} {}", fmt::duration(to - from)),
        });
    };
    for e in events {
        let next = match (e.event_type, phase) {
            (EventType::PlaybackStart, Phase::Starting) => Phase::Playing,
            (EventType::RebufferStart, Phase::Playing) => Phase::Stalled,
            (EventType::RebufferEnd, Phase::Stalled) => Phase::Playing,
            (EventType::PlaybackPause, Phase::Playing) => Phase::Paused,
            (EventType::PlaybackResume, Phase::Paused) => Phase::Playing,
            _ => phase,
        };
        if next != phase {
            close(&mut spans, phase, since, e.ts_ms);
            phase = next;
            since = e.ts_ms;
        }
        match e.event_type {
            EventType::QualityChange => marks.push(Span {
                class: "mark-quality",
                x: at(e.ts_ms),
                width: String::new(),
                label: "rendition".into(),
            }),
            EventType::Error => marks.push(Span {
                class: "mark-error",
                x: at(e.ts_ms),
                width: String::new(),
                label: "error".into(),
            }),
            _ => {}
        }
    }
    close(&mut spans, phase, since, end);
    (spans, marks)
}

/// `GET /app/views/{sessionId}?cursor=…`: the view's metrics and drawing, and its events a
/// thousand at a time.
pub async fn detail(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let Ok(Path(session_id)) = id else {
        return Err(PageError::NotFound);
    };
    if session_id.is_empty() || has_forbidden_chars(&session_id) {
        return Err(PageError::NotFound);
    }
    let cursor = match q.last("cursor").filter(|c| !c.is_empty()) {
        None => None,
        Some(raw) => Some(analytics::EventCursor::decode(raw).ok_or_else(|| {
            PageError::BadRequest("This link to more events is not valid.".into())
        })?),
    };
    let owner = &user.0.user.id;
    let mut partial = None;
    let page = state
        .analytics
        .session_events_page(
            owner,
            &session_id,
            cursor,
            analytics::PageLimits {
                events: EVENTS_PER_PAGE,
                payload_bytes: EVENTS_PAGE_BYTES,
            },
        )
        .await
        .map_err(PageError::internal)?;
    // The metrics are derived here by the same code the refresher runs (analytics.md §2),
    // so the page is exact even before the next refresh: from this page when it is the whole
    // session, else from the session's first events (a bounded read).
    let whole = cursor.is_none() && page.next.is_none();
    let derive_from = if whole {
        page.events.clone()
    } else {
        let first = state
            .analytics
            .session_events_page(
                owner,
                &session_id,
                None,
                analytics::PageLimits {
                    events: DERIVE_EVENTS,
                    payload_bytes: DERIVE_BYTES,
                },
            )
            .await
            .map_err(PageError::internal)?;
        if first.next.is_some() {
            partial = Some(format!(
                "This view has more events than its page can weigh: its metrics and timeline \
                 are those of its first {} events.",
                fmt::int(first.events.len() as i64)
            ));
        }
        first.events
    };
    let events: Vec<Event> = derive_from.iter().map(Event::from_stored).collect();
    let Some(view) = View::derive(&session_id, &events, &[]) else {
        return Err(PageError::NotFound);
    };
    let mut sorted = events;
    sorted.sort_by_key(Event::order_key);
    let (spans, marks) = drawing(&sorted, view.started_at, view.ended_at);
    let facts = facts(&view);
    let href = format!("/app/views/{}", fmt::q(&session_id));
    let next_events = page
        .next
        .map(|c| format!("{href}?cursor={}", fmt::q(&c.encode())));
    let first_events = cursor.is_some().then(|| href.clone());
    let events = page
        .events
        .into_iter()
        .map(|e| EventRow {
            at: When::at(e.ts_ms),
            offset: format!("+{}", fmt::duration(e.ts_ms - view.started_at)),
            kind: e.event_type.as_str(),
            payload: e.payload,
        })
        .collect();
    Ok(render(&ViewPage {
        frame: Frame::new(&user, Section::Views),
        length: fmt::duration(view.ended_at - view.started_at),
        session_id,
        facts,
        spans,
        marks,
        events,
        partial,
        next_events,
        first_events,
    }))
}

fn facts(v: &View) -> Vec<Fact> {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let bitrate = (v.bitrate_covered_ms > 0)
        .then(|| v.bitrate_weighted_sum / v.bitrate_covered_ms as f64 / 1000.0);
    vec![
        Fact {
            label: "Started",
            value: When::at(v.started_at).utc,
        },
        Fact {
            label: "Startup time",
            value: fmt::ms(v.startup_ms),
        },
        Fact {
            label: "Watch time",
            value: fmt::duration(v.watch_time_ms),
        },
        Fact {
            label: "Stalls",
            value: format!(
                "{} ({})",
                fmt::int(v.rebuffer_count),
                fmt::duration(v.rebuffer_ms)
            ),
        },
        Fact {
            label: "Paused",
            value: fmt::duration(v.paused_ms),
        },
        Fact {
            label: "Average bitrate",
            value: bitrate.map_or_else(|| "—".into(), |b| format!("{} kb/s", fmt::num(b, 0))),
        },
        Fact {
            label: "Rendition switches",
            value: format!(
                "{} ({} up, {} down)",
                fmt::int(v.rendition_switches),
                fmt::int(v.upshifts),
                fmt::int(v.downshifts)
            ),
        },
        Fact {
            label: "Failed",
            value: yes_no(v.failed),
        },
        Fact {
            label: "Startup failure",
            value: yes_no(v.startup_failure),
        },
        Fact {
            label: "Exited before start",
            value: yes_no(v.exit_before_start),
        },
        Fact {
            label: "Errors",
            value: match &v.fatal_error_code {
                Some(code) => format!("{} (fatal: {code})", fmt::int(v.error_count)),
                None => fmt::int(v.error_count),
            },
        },
    ]
}
