//! `/login` and `/signup`: forms the dashboard module sends to the account routes
//! (`/api/auth/sign-in/email`, `/api/auth/sign-up/email`); on success the browser goes to
//! `next` when it is a path of this site, else to `/app`.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::{fmt, redirect, render};
use crate::config::Signup;
use crate::http::extract::session_cookie;
use crate::http::query::QueryPairs;
use crate::http::AppState;

/// Where a sign-in lands without a usable `next`.
const HOME: &str = "/app";

/// `next` when it is a path on this site, else [`HOME`]. Only `/x…` paths pass: not
/// `//host` or `/\host` (other hosts to a browser), not a scheme, not control characters.
/// `{` and `}` are escaped so the module never fills them from the sign-in response.
pub fn safe_next(next: Option<&str>) -> String {
    let Some(next) = next else {
        return HOME.to_owned();
    };
    let path_like = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(|c| c.is_control() || c == '\\');
    // The URL a browser would resolve it to must stay on this origin.
    let same_origin = url::Url::parse("http://streamwatch.invalid")
        .and_then(|base| base.join(next))
        .is_ok_and(|u| u.host_str() == Some("streamwatch.invalid"));
    if path_like && same_origin {
        next.replace('{', "%7B").replace('}', "%7D")
    } else {
        HOME.to_owned()
    }
}

/// `/login?next=<path>` (`/login` when the path is the default landing).
pub fn login_href(next: Option<&str>) -> String {
    with_next("/login", next)
}

fn with_next(page: &str, next: Option<&str>) -> String {
    let next = safe_next(next);
    if next == HOME {
        page.to_owned()
    } else {
        format!("{page}?next={}", fmt::q(&next))
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    signup_open: bool,
    signup_href: String,
}

#[derive(Template)]
#[template(path = "signup.html")]
struct SignupPage {
    next: String,
    signup_open: bool,
    login_href: String,
}

/// Someone already signed in goes straight on.
async fn signed_in(state: &AppState, headers: &HeaderMap) -> bool {
    match session_cookie(headers) {
        Some(c) => matches!(state.accounts.authenticate(c).await, Ok(Some(_))),
        None => false,
    }
}

/// `GET /login`.
pub async fn login(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    q: QueryPairs,
) -> Response {
    let next = q.last("next");
    if signed_in(&state, &headers).await {
        return redirect(&safe_next(next));
    }
    render(&LoginPage {
        next: safe_next(next),
        signup_open: state.signup == Signup::Open,
        signup_href: with_next("/signup", next),
    })
}

/// `GET /signup`.
pub async fn signup(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    q: QueryPairs,
) -> Response {
    let next = q.last("next");
    if signed_in(&state, &headers).await {
        return redirect(&safe_next(next));
    }
    render(&SignupPage {
        next: safe_next(next),
        signup_open: state.signup == Signup::Open,
        login_href: login_href(next),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(None), "/app");
        assert_eq!(safe_next(Some("/app/streams?q=a")), "/app/streams?q=a");
        assert_eq!(
            safe_next(Some("/app/views/{token}")),
            "/app/views/%7Btoken%7D"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example/x",
            "/\\evil.example",
            "\\\\evil.example",
            "javascript:alert(1)",
            "app",
            "",
            "/\t/evil.example",
            "/app\n",
        ] {
            assert_eq!(safe_next(Some(bad)), "/app", "{bad:?}");
        }
    }

    #[test]
    fn login_links_carry_next() {
        assert_eq!(login_href(Some("/app")), "/login");
        assert_eq!(
            login_href(Some("/app/streams?q=a b")),
            "/login?next=%2Fapp%2Fstreams%3Fq%3Da+b"
        );
    }
}
