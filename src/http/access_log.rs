//! The access log: one line per request (decisions.md §11) — method, route template, status,
//! latency and request id — from tower-http's trace layer. Every log line written while the
//! request runs carries the same `request_id` (it is a field of the request's span).
//!
//! The lines are `info` events of the target `streamwatch::http::access_log`, so an operator can
//! quiet them alone: `RUST_LOG=info,streamwatch::http::access_log=warn`.

use std::time::Duration;

use axum::body::Body;
use axum::extract::MatchedPath;
use axum::http::{Request, Response};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tracing::Span;

type MakeSpan = fn(&Request<Body>) -> Span;
type OnResponse = fn(&Response<Body>, Duration, &Span);

/// The trace layer with the service's span and access line.
pub fn layer(
) -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, MakeSpan, (), OnResponse, (), (), ()> {
    TraceLayer::new_for_http()
        .make_span_with(span as MakeSpan)
        .on_request(())
        .on_response(line as OnResponse)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

fn span(req: &Request<Body>) -> Span {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str());
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!("request", method = %req.method(), route, request_id)
}

fn line(resp: &Response<Body>, latency: Duration, _span: &Span) {
    tracing::info!(
        status = resp.status().as_u16(),
        latency_ms = latency.as_secs_f64() * 1000.0,
        "request"
    );
}
