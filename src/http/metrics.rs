//! The metrics listener's `GET /metrics` (the Prometheus scrape page of the recorder
//! `crate::metrics` installs) and the count and timing of every request of the
//! API by route template.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::response::Response;
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

/// One count and one latency observation per request, by route template
/// (`/api/v1/streams/{id}`, never the id), method and status class: taken when the request
/// arrives ([`Tracked::start`]), recorded with its response ([`Tracked::done`]).
pub struct Tracked {
    route: String,
    method: &'static str,
    started: Instant,
}

impl Tracked {
    /// The request's labels and its start.
    pub fn start(req: &Request) -> Self {
        Tracked {
            // The router's own template: bounded by the routes the service has.
            route: req
                .extensions()
                .get::<MatchedPath>()
                .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned()),
            method: method_label(req.method()),
            started: Instant::now(),
        }
    }

    /// Counts the request with `resp`'s status class and records its latency.
    pub fn done(self, resp: &Response) {
        let status = match resp.status().as_u16() {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let Tracked {
            route,
            method,
            started,
        } = self;
        counter!("streamwatch_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
            .increment(1);
        histogram!("streamwatch_http_request_duration_seconds", "route" => route, "method" => method)
            .record(started.elapsed().as_secs_f64());
    }
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
