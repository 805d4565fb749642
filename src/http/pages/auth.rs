//! `/login` and `/signup`: forms the dashboard module sends to the account routes
//! (`/api/auth/sign-in/email`, `/api/auth/sign-up/email`); on success the browser goes to
//! `next` when it is a path of this site, else to `/app`. `/signup?invite=<token>` carries an
//! invitation's token into the sign-up (decisions.md §15) and says when the link is spent.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::{fmt, redirect, render};
use crate::accounts::invitations::InvitationState;
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
    /// The form is shown (else `refusal` says why not).
    form: bool,
    /// The invitation's token, sent with the form.
    invite_token: Option<String>,
    /// No account exists yet: this one will own the instance.
    first_account: bool,
    /// Why there is no form: sign-up closed, by invitation only, or a spent link.
    refusal: &'static str,
    login_href: String,
}

/// Whether the sign-up page may offer a link to itself: anyone may sign up, or nobody has yet.
async fn signup_offered(state: &AppState) -> bool {
    match state.signup {
        Signup::Open => true,
        Signup::Closed => false,
        Signup::Invite => !state.accounts.has_users().await.unwrap_or(true),
    }
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
        signup_open: signup_offered(&state).await,
        signup_href: with_next("/signup", next),
    })
}

/// `GET /signup` and `GET /signup?invite=<token>`.
pub async fn signup(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    q: QueryPairs,
) -> Response {
    let next = q.last("next");
    if signed_in(&state, &headers).await {
        return redirect(&safe_next(next));
    }
    let invite = q.last("invite").filter(|t| !t.is_empty());
    let mut page = SignupPage {
        next: safe_next(next),
        form: false,
        invite_token: None,
        first_account: false,
        refusal: "",
        login_href: login_href(next),
    };
    match state.signup {
        Signup::Open => page.form = true,
        Signup::Closed => {
            page.refusal = "Sign-up is closed on this server: ask its operator for an account.";
        }
        Signup::Invite => match state.accounts.has_users().await {
            Err(e) => return super::PageError::internal(e).into_response(),
            Ok(false) => {
                page.form = true;
                page.first_account = true;
            }
            Ok(true) => match invite {
                None => {
                    page.refusal =
                        "Sign-up on this server is by invitation: ask its owner for a link.";
                }
                Some(token) => match state.invitations.state_of(token).await {
                    Err(e) => return super::PageError::internal(e).into_response(),
                    Ok(Some(InvitationState::Pending)) => {
                        page.form = true;
                        page.invite_token = Some(token.to_owned());
                    }
                    Ok(Some(InvitationState::Used)) => {
                        page.refusal = "This invitation link was used already: each link creates one account. Ask the owner of this server for a new one, or sign in.";
                    }
                    Ok(Some(InvitationState::Expired)) => {
                        page.refusal = "This invitation link has expired (links work for 7 days). Ask the owner of this server for a new one.";
                    }
                    Ok(Some(InvitationState::Revoked)) => {
                        page.refusal = "This invitation link was revoked. Ask the owner of this server for a new one.";
                    }
                    Ok(None) => {
                        page.refusal = "This invitation link is not valid: check that it was copied whole, or ask the owner of this server for a new one.";
                    }
                },
            },
        },
    }
    let mut r = render(&page);
    if invite.is_some() {
        // The token is in this page's URL: no Referer carries it anywhere.
        r.headers_mut().insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    r
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
