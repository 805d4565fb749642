//! `/app/agents`: the agent feed with severity and stream filters, a page at a time
//! (`before` = the oldest item shown), parsed exactly as `GET /api/v1/agents` parses them.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::{fmt, render, Choice, FeedRow, Frame, PageError, Section};
use crate::http::agents::feed_query;
use crate::http::error::ApiError;
use crate::http::extract::SessionUser;
use crate::http::query::QueryPairs;
use crate::http::AppState;
use crate::probes::agent::{self, FeedError};
use crate::states::Severity;

/// Items per page.
const PAGE_SIZE: i64 = 50;

#[derive(Template)]
#[template(path = "agents.html")]
struct AgentsPage {
    frame: Frame,
    severities: Vec<Choice>,
    streams: Vec<Choice>,
    rows: Vec<FeedRow>,
    errors: Vec<String>,
    filtered: bool,
    newer: Option<String>,
    older: Option<String>,
}

/// `GET /app/agents?severity=…&streamId=…&before=…`.
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let mut errors = Vec::new();
    let mut query = match feed_query(&q) {
        Ok(query) => query,
        Err(ApiError::Validation(e)) => {
            errors.extend(e.into_iter().map(|(k, m)| format!("{k}: {m}")));
            Default::default()
        }
        Err(e) => return Err(PageError::internal(format!("{e:?}"))),
    };
    query.limit = PAGE_SIZE;
    let rows: Vec<FeedRow> = match agent::feed(&state.db, state.slow_ms, &query).await {
        Ok(items) => items.into_iter().map(FeedRow::from).collect(),
        Err(FeedError::UnknownStream) => {
            errors.push("streamId: Stream not found".to_owned());
            Vec::new()
        }
        Err(FeedError::Db(e)) => return Err(e.into()),
    };
    let names = state.streams.names().await?;

    // Links keep the filters and move `before`.
    let mut base = String::from("/app/agents?");
    for s in &query.severities {
        base.push_str(&format!("severity={}&", s.as_str()));
    }
    if let Some(id) = &query.stream_id {
        base.push_str(&format!("streamId={}&", fmt::q(id)));
    }
    let older = (rows.len() as i64 == PAGE_SIZE)
        .then(|| rows.last())
        .flatten()
        .map(|last| format!("{base}before={}", fmt::q(&last.at.iso)));
    let newer = query
        .before
        .is_some()
        .then(|| base.trim_end_matches(['&', '?']).to_owned());
    Ok(render(&AgentsPage {
        frame: Frame::new(&user, Section::Agents),
        severities: Severity::ALL
            .iter()
            .map(|s| Choice {
                value: s.as_str().to_owned(),
                label: s.as_str().to_owned(),
                selected: query.severities.contains(s),
            })
            .collect(),
        streams: names
            .into_iter()
            .map(|(id, name)| Choice {
                selected: query.stream_id.as_deref() == Some(id.as_str()),
                value: id,
                label: name,
            })
            .collect(),
        filtered: query.stream_id.is_some() || !query.severities.is_empty(),
        rows,
        errors,
        newer,
        older,
    }))
}
