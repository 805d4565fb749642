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
        latency_ms = latency_ms(latency),
        "request"
    );
}

/// Milliseconds to the microsecond (`0.549`, not `0.5486329999999999`): f64 prints its
/// shortest round-trip form, which for a whole number of microseconds has at most 3 decimals.
fn latency_ms(latency: Duration) -> f64 {
    // u64 microseconds cover 584,000 years; f64 holds them exactly below 2^53.
    let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    micros as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_has_at_most_three_decimals() {
        for (nanos, shown) in [
            (548_633, "0.548"),
            (2_000_000, "2"),
            (1_234_567_890, "1234.567"),
            (0, "0"),
            (999, "0"),
            (1_000, "0.001"),
        ] {
            assert_eq!(
                latency_ms(Duration::from_nanos(nanos)).to_string(),
                shown,
                "{nanos} ns"
            );
        }
    }
}
