//! Request plumbing shared by the handlers: bounded body reading (a too-large body is a 400,
//! never a 413), the session cookie and the cookie gate with its Origin check.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;
use crate::accounts::Authenticated;

pub const COOKIE_NAME: &str = "auth.session_token";
/// JSON bodies of the account, stream, key and waitlist routes are small.
pub const JSON_BODY_LIMIT: usize = 64 * 1024;

/// A request body of at most [`JSON_BODY_LIMIT`] bytes, whatever its content type.
pub struct SmallBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for SmallBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, Self::Rejection> {
        match read_body(req.into_body(), JSON_BODY_LIMIT).await {
            Ok(bytes) => Ok(SmallBody(bytes)),
            Err(BodyError::TooLarge) => Err(ApiError::field(
                "body",
                format!("Body must be at most {JSON_BODY_LIMIT} bytes"),
            )),
            Err(BodyError::Unreadable) => Err(ApiError::field("body", MSG_BODY_UNREADABLE)),
        }
    }
}

/// Message for a body that broke off or was malformed on the wire (bad chunked encoding, a
/// connection closed early, or one that stopped sending for 30 s).
pub const MSG_BODY_UNREADABLE: &str = "Request body could not be read";

/// Why a request body could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the route allows.
    TooLarge,
    /// Broken on the wire: not a size problem, and reported as such.
    Unreadable,
}

/// A JSON object body of the stream and key routes, or the contract's 400 keyed `body`.
pub fn object(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    crate::validation::parse_object(body).map_err(|msg| ApiError::field("body", msg))
}

/// Reads at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let cause = e.into_inner();
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(cause.as_ref());
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                return BodyError::TooLarge;
            }
            source = err.source();
        }
        BodyError::Unreadable
    })
}

/// The value of the session cookie, if the request carries exactly one. Two session cookies
/// (one planted for a parent domain or path, say) make the request unauthenticated: which of
/// them a server would pick differs between servers, so neither is trusted.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim_matches('"'));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// A path id that can name a row (ids are cuid-style: ASCII letters, digits, `_`, `-`). Any
/// other segment (bad UTF-8, NUL, spaces, over 64 bytes) cannot be a row id on any engine, so
/// it is the contract's JSON 404 without a lookup.
pub struct RowId(pub String);

/// True when `s` has the shape of a row id.
pub fn is_row_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl<S: Send + Sync> FromRequestParts<S> for RowId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound)?;
        if is_row_id(&id) {
            Ok(RowId(id))
        } else {
            Err(ApiError::NotFound)
        }
    }
}

/// A client-chosen path segment (a telemetry `sessionId`): any text without control or format
/// characters; anything else (bad UTF-8 included) is the JSON 404.
pub struct PathText(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathText {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound)?;
        if text.is_empty() || crate::validation::has_forbidden_chars(&text) {
            return Err(ApiError::NotFound);
        }
        Ok(PathText(text))
    }
}

/// True when an unsafe request names an Origin other than the host it was sent to: its
/// cookie must not be honoured (CSRF).
pub fn foreign_origin(method: &Method, headers: &HeaderMap) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| url::Url::parse(o).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .and_then(|u| {
            let h = u.host_str()?.to_owned();
            Some(match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h,
            })
        });
    match (origin_host, host) {
        (Some(o), Some(h)) => !o.eq_ignore_ascii_case(h),
        _ => true,
    }
}

/// `Set-Cookie` that stores a session cookie value until the session's expiry; `Secure` when
/// the service is reached over https (`STREAMWATCH_PUBLIC_URL`, decisions.md §14).
pub fn set_cookie(value: &str, expires_at_ms: i64, secure: bool) -> HeaderValue {
    // Rounded up: a cookie set a few ms after its session's expiry was computed still says 7 days.
    let max_age = ((expires_at_ms - crate::time::now_ms() + 999) / 1000).max(0);
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Lax{secure}"
    ))
    .unwrap_or_else(|_| clear_cookie(false))
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    if secure {
        HeaderValue::from_static(
            "auth.session_token=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax; Secure",
        )
    } else {
        HeaderValue::from_static("auth.session_token=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax")
    }
}

/// The signed-in user of a cookie-gated request.
#[derive(Clone)]
pub struct SessionUser(pub Arc<Authenticated>);

/// Middleware of the cookie-gated routes: 401 `Unauthorized` unless the cookie names a live
/// session whose password is the user's own (a one-time password from `streamwatch users add`
/// only opens `POST /api/auth/change-password`); re-sends the cookie when the session's
/// expiry slid forward.
pub async fn require_session(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let cookie = if foreign_origin(req.method(), req.headers()) {
        None
    } else {
        session_cookie(req.headers()).map(str::to_owned)
    };
    let Some(cookie) = cookie else {
        return Err(ApiError::Unauthorized);
    };
    let auth = state
        .accounts
        .authenticate(&cookie)
        .await?
        .filter(|auth| !auth.user.must_change_password)
        .ok_or(ApiError::Unauthorized)?;
    let refreshed = auth.refreshed_cookie.clone();
    let expires_at = auth.session.expires_at;
    req.extensions_mut().insert(SessionUser(Arc::new(auth)));
    let mut resp = next.run(req).await.into_response();
    if let Some(value) = refreshed {
        resp.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(&value, expires_at, state.secure_cookies),
        );
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn finds_the_session_cookie_among_others() {
        let h = headers(&[("cookie", "a=1; auth.session_token=tok.sig; b=2")]);
        assert_eq!(session_cookie(&h), Some("tok.sig"));
        assert_eq!(session_cookie(&headers(&[("cookie", "a=1")])), None);
    }

    #[test]
    fn two_session_cookies_are_no_session() {
        let h = headers(&[("cookie", "auth.session_token=a.b; auth.session_token=c.d")]);
        assert_eq!(session_cookie(&h), None);
        let split = headers(&[
            ("cookie", "auth.session_token=a.b"),
            ("cookie", "auth.session_token=c.d"),
        ]);
        assert_eq!(session_cookie(&split), None);
    }

    #[test]
    fn row_ids() {
        assert!(is_row_id("ckv9x2q0a0000abcd1234efgh"));
        for bad in ["", "a b", "a\u{0}", "é", "../x", &"a".repeat(65)] {
            assert!(!is_row_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn origin_check() {
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        let other = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ]);
        let none = headers(&[("host", "127.0.0.1:8080")]);
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(!foreign_origin(&Method::POST, &same));
        assert!(foreign_origin(&Method::POST, &other));
        assert!(foreign_origin(&Method::DELETE, &null));
        assert!(!foreign_origin(&Method::POST, &none));
        assert!(!foreign_origin(&Method::GET, &other));
    }
}
