//! Static files built into the binary: the landing page, the demo player page, their script
//! and stylesheet, the dashboard's module and stylesheet, the pinned hls.js build the demo plays with, and the player SDK bundles at
//! their CDN paths (`/sdk/@service/player-sdk@<version>/dist/index.js`). Embedding keeps
//! `streamwatch serve` a single self-contained binary that loads no script from elsewhere.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::security::DEMO_PLAYER_CSP;

/// The SDK version `dist/` holds (sdk/package.json); `@latest` serves it too.
pub const SDK_VERSION: &str = "0.2.0";
/// Built by `npm run build` in `sdk/` and committed; `sdk`'s tests fail when it is stale.
const SDK_BUNDLE: &str = include_str!("../../sdk/dist/index.js");
/// SDK 0.1.0 exactly as released: pinned integrations must never change under their users
/// (`sdk/test/releases.test.ts` checks its hash).
const SDK_BUNDLE_0_1_0: &str = include_str!("../../sdk/releases/0.1.0/index.js");

/// The hls.js build the demo player imports (web/dist, built from the pinned npm package).
pub const HLS_JS_PATH: &str = "/assets/vendor/hls.js@1.7.4/hls.light.min.mjs";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const SHORT: &str = "public, max-age=300";
const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The CDN path of the SDK bundle for a version or tag.
pub fn sdk_path(version: &str) -> String {
    format!("/sdk/@service/player-sdk@{version}/dist/index.js")
}

fn asset(body: &'static [u8], content_type: &'static str, cache: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    r
}

/// An SDK bundle: module scripts loaded from a player's own origin need CORS.
fn sdk(body: &'static str, cache: &'static str) -> Response {
    let mut r = asset(body.as_bytes(), JS, cache);
    r.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    r
}

/// The routes of every embedded file.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset(include_bytes!("../../web/index.html"), HTML, SHORT) }),
        )
        .route(
            "/demo/player.html",
            get(|| async {
                let mut r = asset(include_bytes!("../../web/demo/player.html"), HTML, SHORT);
                // The player fetches manifests and segments from the stream's own origin.
                r.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(DEMO_PLAYER_CSP),
                );
                r
            }),
        )
        .route(
            "/assets/favicon.svg",
            get(|| async {
                asset(
                    include_bytes!("../../web/src/favicon.svg"),
                    "image/svg+xml",
                    SHORT,
                )
            }),
        )
        .route(
            "/assets/site.css",
            get(|| async { asset(include_bytes!("../../web/src/site.css"), CSS, SHORT) }),
        )
        // The dashboard module (web/src/app, built into web/dist and committed).
        .route(
            "/assets/app.js",
            get(|| async { asset(include_bytes!("../../web/dist/app.js"), JS, SHORT) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset(include_bytes!("../../web/dist/app.css"), CSS, SHORT) }),
        )
        .route(
            "/assets/landing.js",
            get(|| async { asset(include_bytes!("../../web/src/landing.js"), JS, SHORT) }),
        )
        .route(
            "/assets/demo-player.js",
            get(|| async { asset(include_bytes!("../../web/src/demo-player.js"), JS, SHORT) }),
        )
        .route(
            HLS_JS_PATH,
            get(|| async {
                asset(
                    include_bytes!("../../web/dist/vendor/hls.js@1.7.4/hls.light.min.mjs"),
                    JS,
                    IMMUTABLE,
                )
            }),
        )
        .route(
            &sdk_path("0.1.0"),
            get(|| async { sdk(SDK_BUNDLE_0_1_0, IMMUTABLE) }),
        )
        .route(
            &sdk_path(SDK_VERSION),
            get(|| async { sdk(SDK_BUNDLE, IMMUTABLE) }),
        )
        // `@latest` moves with releases: cached briefly.
        .route(
            &sdk_path("latest"),
            get(|| async { sdk(SDK_BUNDLE, SHORT) }),
        )
}
