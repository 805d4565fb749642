//! The metrics listener's `GET /metrics` (the Prometheus scrape page of the recorder
//! `crate::metrics` installs) and the middleware that counts and times every request of the
//! API by route template.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::{counter, histogram};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `GET /metrics` on `listener` until `stop` turns true, with the API's header, idle
/// and write `limits` and the metrics listener's small connection cap.
pub async fn serve(
    listener: TcpListener,
    handle: PrometheusHandle,
    limits: crate::config::HttpLimits,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    super::serve::serve_metrics(listener, router(handle), limits, async move {
        let _ = stop.wait_for(|v| *v).await;
    })
    .await
    .map_err(|e| format!("metrics listener failed: {e}"))
}

/// `GET /metrics` on the metrics listener.
pub fn router(handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    handle.render(),
                )
            }
        }),
    )
}

/// HTTP middleware: one count and one latency observation per request, by route template
/// (`/api/v1/streams/{id}`, never the id), method and status class.
pub async fn track_requests(req: Request, next: Next) -> Response {
    // The router's own template: bounded by the routes the service has.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(req.method());
    let started = Instant::now();
    let resp = next.run(req).await.into_response();
    let status = match resp.status().as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    counter!("streamwatch_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    histogram!("streamwatch_http_request_duration_seconds", "route" => route, "method" => method)
        .record(started.elapsed().as_secs_f64());
    resp
}

fn method_label(m: &axum::http::Method) -> &'static str {
    match m.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PATCH" => "PATCH",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}
