//! What every request of the API listener goes through around its route, as one layer:
//! its count and latency ([`super::metrics::Tracked`]), the security headers
//! ([`super::security::add_headers`]), the response size cap ([`super::bounds::cap`]) and
//! the query's value limit ([`super::bounds::refuse_query`]), in that order from the
//! outside in.
//!
//! One layer rather than four: axum's `middleware::from_fn` clones the boxed service below
//! it for every request, so four of them cloned and dropped the rest of the stack four
//! times per request, about 8 % of the server's CPU on the fleet's small telemetry batches
//! (docs/benchmarks.md, "Where the fleet's time and memory go").

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use super::{bounds, metrics, security};

/// The layer (`middleware::from_fn(layers::around)`).
pub async fn around(req: Request, next: Next) -> Response {
    let tracked = metrics::Tracked::start(&req);
    let resp = match bounds::refuse_query(&req) {
        Some(refused) => refused,
        None => next.run(req).await,
    };
    let mut resp = bounds::cap(resp);
    security::add_headers(&mut resp);
    tracked.done(&resp);
    resp
}
