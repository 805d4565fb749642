//! Bounded requests and responses (decisions.md §14): a query string keeps at most
//! [`MAX_VALUES`] distinct values of one parameter (duplicates are dropped by
//! [`QueryPairs`](super::query::QueryPairs)), past that the route answers 400 before any
//! handler runs; and no response body is larger than [`MAX_RESPONSE_BYTES`].
//!
//! A page that repeats its query in links (each active filter's "remove" link repeats the
//! others) grows with the square of its parameters; bounding the parameters bounds the page,
//! whatever the handler does with them.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::error::ApiError;
use super::pages::PageError;

/// Distinct values of one query parameter a route accepts.
pub const MAX_VALUES: usize = 20;
/// The largest response body the service sends.
pub const MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// zod's message for an array over its maximum, as the telemetry route words it.
pub fn too_many_values_message() -> String {
    format!("Array must contain at most {MAX_VALUES} element(s)")
}

/// The first parameter of `query` with more than [`MAX_VALUES`] distinct values.
pub fn over_limit(query: &str) -> Option<String> {
    let mut seen: HashMap<std::borrow::Cow<'_, str>, HashSet<std::borrow::Cow<'_, str>>> =
        HashMap::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let values = seen.entry(k.clone()).or_default();
        values.insert(v);
        if values.len() > MAX_VALUES {
            return Some(k.into_owned());
        }
    }
    None
}

/// True for the dashboard's HTML routes, which answer a 400 page instead of JSON.
fn is_page(path: &str) -> bool {
    path == "/app" || path.starts_with("/app/") || path == "/login" || path == "/signup"
}

/// A query with too many values of one parameter: its 400 (an HTML page on the dashboard's
/// routes, the contract's `{ errors: { <param>: … } }` elsewhere), answered before any
/// handler runs ([`super::layers::around`]).
pub fn refuse_query(req: &Request) -> Option<Response> {
    let param = req.uri().query().and_then(over_limit)?;
    Some(if is_page(req.uri().path()) {
        PageError::BadRequest(format!(
            "The address gives “{}” more than {MAX_VALUES} different values: remove some and try again.",
            shorten(&param, 64)
        ))
        .into_response()
    } else {
        ApiError::field(&param, too_many_values_message()).into_response()
    })
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        s.chars().take(max).chain(std::iter::once('…')).collect()
    }
}

/// A response whose body is known to be too large becomes a 500 (logged); one that grows
/// past the limit while streaming is cut off (the connection ends mid-body, which no client
/// mistakes for a complete answer).
pub fn cap(resp: Response) -> Response {
    if resp.body().size_hint().lower() > MAX_RESPONSE_BYTES {
        return ApiError::internal(format!(
            "a response of {} bytes is over the {MAX_RESPONSE_BYTES}-byte limit",
            resp.body().size_hint().lower()
        ))
        .into_response();
    }
    resp.map(|body| {
        Body::new(Capped {
            inner: body,
            left: MAX_RESPONSE_BYTES,
        })
    })
}

/// A body that fails once it has sent more than its allowance.
struct Capped {
    inner: Body,
    left: u64,
}

impl HttpBody for Capped {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let n = data.len() as u64;
                if n > self.left {
                    tracing::error!(
                        limit = MAX_RESPONSE_BYTES,
                        "response body over the limit: connection cut"
                    );
                    return Poll::Ready(Some(Err(axum::Error::new(
                        "response body over the limit",
                    ))));
                }
                self.left -= n;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_distinct_values_per_parameter() {
        let q = |n: usize, key: &str| {
            (0..n)
                .map(|i| format!("{key}=v{i}"))
                .collect::<Vec<_>>()
                .join("&")
        };
        assert_eq!(over_limit(&q(20, "filter")), None);
        assert_eq!(over_limit(&q(21, "filter")).as_deref(), Some("filter"));
        // Repeats of one value are one value.
        assert_eq!(over_limit(&"filter=a&".repeat(7000)), None);
        // Twenty of each of many parameters is fine.
        assert_eq!(over_limit(&format!("{}&{}", q(20, "a"), q(20, "b"))), None);
        // Percent-encoded names are the decoded parameter.
        assert_eq!(
            over_limit(
                &(0..21)
                    .map(|i| format!("fil%74er=x{i}"))
                    .collect::<Vec<_>>()
                    .join("&")
            )
            .as_deref(),
            Some("filter")
        );
    }

    #[test]
    fn pages_and_routes() {
        assert!(is_page("/app"));
        assert!(is_page("/app/qoe"));
        assert!(is_page("/login"));
        assert!(!is_page("/api/v1/qoe/overview"));
        assert!(!is_page("/apple"));
    }
}
