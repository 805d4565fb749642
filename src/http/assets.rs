//! Static assets built into the binary: the landing page, the demo player page and the
//! player SDK bundle at its CDN path (`/sdk/@service/player-sdk@<version>/dist/index.js`).
//! Embedding keeps `streamwatch serve` a single self-contained binary.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const LANDING: &str = include_str!("../../web/index.html");
const DEMO_PLAYER: &str = include_str!("../../web/demo/player.html");
/// Built by `npm run build` in `sdk/` and committed; `sdk`'s tests fail when it is stale.
const SDK_BUNDLE: &str = include_str!("../../sdk/dist/index.js");
/// The SDK version the bundle is (sdk/package.json); the pinned CDN path carries it.
pub const SDK_VERSION: &str = "0.1.0";

/// The CDN path of the SDK bundle for a version or tag.
pub fn sdk_path(version: &str) -> String {
    format!("/sdk/@service/player-sdk@{version}/dist/index.js")
}

fn asset(body: &'static str, content_type: &'static str, cache: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("strict-origin-when-cross-origin"),
    );
    r
}

pub async fn landing() -> Response {
    asset(LANDING, "text/html; charset=utf-8", "public, max-age=300")
}

pub async fn demo_player() -> Response {
    asset(
        DEMO_PLAYER,
        "text/html; charset=utf-8",
        "public, max-age=300",
    )
}

fn sdk(cache: &'static str) -> Response {
    let mut r = asset(SDK_BUNDLE, "text/javascript; charset=utf-8", cache);
    // Module scripts loaded from a player's own origin need CORS.
    r.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    r
}

/// The pinned version never changes: cache it for a year.
pub async fn sdk_pinned() -> Response {
    sdk("public, max-age=31536000, immutable")
}

/// `@latest` moves with releases: cache it briefly.
pub async fn sdk_latest() -> Response {
    sdk("public, max-age=300")
}
