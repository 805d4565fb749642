//! `/app/keys`: mint a key (the raw key shown once, with a ready SDK snippet for this
//! server), list the caller's keys, revoke one.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Extension;

use super::fmt::When;
use super::{render, Frame, PageError, Section};
use crate::http::assets::{sdk_path, SDK_VERSION};
use crate::http::extract::SessionUser;
use crate::http::AppState;

pub struct KeyRow {
    pub id: String,
    pub label: String,
    pub created: When,
    pub last_used: Option<When>,
    pub revoked: Option<When>,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    frame: Frame,
    keys: Vec<KeyRow>,
    sdk_url: String,
    ingest_url: String,
}

/// This server's origin as the browser reached it: the `Host` header, with the scheme a
/// TLS-terminating proxy names in `X-Forwarded-Proto` (http otherwise). Only printed into
/// the snippet the user copies; never used to fetch anything.
pub fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// `GET /app/keys`.
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let keys = state
        .keys
        .list(&user.0.user.id)
        .await
        .map_err(PageError::internal)?;
    let origin = origin(&headers);
    Ok(render(&KeysPage {
        frame: Frame::new(&user, Section::Keys),
        keys: keys
            .into_iter()
            .map(|k| KeyRow {
                id: k.id,
                label: k.label,
                created: When::at(k.created_at),
                last_used: k.last_used_at.map(When::at),
                revoked: k.revoked_at.map(When::at),
            })
            .collect(),
        sdk_url: format!("{origin}{}", sdk_path(SDK_VERSION)),
        ingest_url: format!("{origin}/api/v1/telemetry"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn origin_from_host_and_proto() {
        let mut h = HeaderMap::new();
        assert_eq!(origin(&h), "http://localhost");
        h.insert(
            header::HOST,
            HeaderValue::from_static("sw.example.com:8443"),
        );
        assert_eq!(origin(&h), "http://sw.example.com:8443");
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(origin(&h), "https://sw.example.com:8443");
        h.insert(header::HOST, HeaderValue::from_static("evil\"><script>"));
        assert_eq!(origin(&h), "https://localhost");
    }
}
