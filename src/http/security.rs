//! Response headers that hold on every route: `nosniff` and a referrer policy everywhere, and a
//! Content-Security-Policy on every HTML page (decisions.md §10). The policies allow scripts
//! and styles from this origin only — no inline script, no `unsafe-inline`, no `eval` — so a
//! query parameter or a stored value can never become script on the service's origin.

use axum::http::{header, HeaderValue};
use axum::response::Response;

/// The policy of every HTML page that does not set its own.
pub const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The demo player's policy: the page policy, plus fetching and playing media from the
/// stream's origin (any http(s) origin: the stream URL is the user's), and hls.js's worker,
/// which it starts from a blob.
pub const DEMO_PLAYER_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self' http: https:; media-src 'self' blob: http: https:; \
    worker-src 'self' blob:; font-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// Adds the security headers a handler did not set itself ([`super::layers::around`]).
pub fn add_headers(resp: &mut Response) {
    let h = resp.headers_mut();
    h.entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    h.entry(header::REFERRER_POLICY)
        .or_insert(HeaderValue::from_static("strict-origin-when-cross-origin"));
    let html = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html {
        h.entry(header::CONTENT_SECURITY_POLICY)
            .or_insert(HeaderValue::from_static(PAGE_CSP));
        h.entry(header::X_FRAME_OPTIONS)
            .or_insert(HeaderValue::from_static("DENY"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_never_allow_inline_or_eval() {
        for csp in [PAGE_CSP, DEMO_PLAYER_CSP] {
            assert!(!csp.contains("unsafe-inline"), "{csp}");
            assert!(!csp.contains("unsafe-eval"), "{csp}");
            assert!(csp.contains("script-src 'self';"), "{csp}");
            assert!(csp.contains("object-src 'none'"), "{csp}");
            assert!(HeaderValue::from_str(csp).is_ok());
        }
    }
}
