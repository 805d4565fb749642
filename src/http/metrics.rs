//! The metrics listener's `GET /metrics` (the Prometheus scrape page of the recorder
//! `crate::metrics` installs) and the count and timing of every request of the
//! API by route template.

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use metrics::{counter, histogram, Counter, Histogram};
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
    /// The router's own template (`None`: unmatched), bounded by the routes the service has.
    route: Option<MatchedPath>,
    method: &'static str,
    started: Instant,
}

impl Tracked {
    /// The request's labels and its start.
    pub fn start(req: &Request) -> Self {
        Tracked {
            route: req.extensions().get::<MatchedPath>().cloned(),
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
        let route = self.route.as_ref().map_or("unmatched", MatchedPath::as_str);
        let (requests, latency) = handles(route, self.method, status);
        requests.increment(1);
        latency.record(self.started.elapsed().as_secs_f64());
    }
}

/// The recorder's handles of one route: the request counter by method and status class, the
/// latency histogram by method.
#[derive(Default)]
struct RouteHandles {
    requests: Vec<(&'static str, &'static str, Counter)>,
    latency: Vec<(&'static str, Histogram)>,
}

impl RouteHandles {
    fn requests(&self, method: &str, status: &str) -> Option<&Counter> {
        let found = self
            .requests
            .iter()
            .find(|(m, s, _)| *m == method && *s == status);
        found.map(|(_, _, c)| c)
    }

    fn latency(&self, method: &str) -> Option<&Histogram> {
        self.latency
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, l)| l)
    }

    fn find(&self, method: &str, status: &str) -> Option<(Counter, Histogram)> {
        Some((
            self.requests(method, status)?.clone(),
            self.latency(method)?.clone(),
        ))
    }
}

/// Handles by route, made once per label set: building them per request (the labels'
/// strings, the recorder's key and lookup) cost about ten allocations a request
/// (docs/benchmarks.md, "Issue 32"). The recorder is the process's global one, so a handle
/// stays valid for good; the routes are the router's templates, a bounded set.
static HANDLES: LazyLock<RwLock<HashMap<Box<str>, RouteHandles>>> = LazyLock::new(Default::default);

fn handles(route: &str, method: &'static str, status: &'static str) -> (Counter, Histogram) {
    let known = HANDLES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(route)
        .and_then(|h| h.find(method, status));
    if let Some(found) = known {
        return found;
    }
    // First time for this label set (or a race with another request making it).
    let mut all = HANDLES.write().unwrap_or_else(PoisonError::into_inner);
    let h = all.entry(route.into()).or_default();
    let requests = match h.requests(method, status) {
        Some(c) => c.clone(),
        None => {
            let c = counter!("streamwatch_http_requests_total", "route" => route.to_owned(), "method" => method, "status" => status);
            h.requests.push((method, status, c.clone()));
            c
        }
    };
    let latency = match h.latency(method) {
        Some(l) => l.clone(),
        None => {
            let l = histogram!("streamwatch_http_request_duration_seconds", "route" => route.to_owned(), "method" => method);
            h.latency.push((method, l.clone()));
            l
        }
    };
    (requests, latency)
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
