//! The operator dashboard (decisions.md §13): server-rendered pages under `/app/…` and the
//! `/login` and `/signup` pages. Templates (askama, compile-checked) live in `templates/`;
//! the only script a page loads is the dashboard module (`/assets/app.js`, `web/src/app/`),
//! which draws the charts from the same JSON API analysts use and sends the forms to it.
//!
//! Handlers stay thin: they call the domain functions the JSON routes call and turn the
//! answers into view models of ready-to-print strings ([`fmt`]), so templates hold no logic
//! beyond loops and conditions.
//!
//! The frame, the error page and the view models several pages show (a filter menu's
//! [`Choice`], an agent feed's [`FeedRow`]) live here, below every page.

pub mod account;
pub mod agents;
pub mod alerts;
pub mod auth;
pub mod fmt;
pub mod keys;
pub mod overview;
pub mod qoe;
pub mod streams;
pub mod team;
pub mod views;

use std::sync::Arc;

use askama::Template;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use self::fmt::When;
use super::extract::{foreign_origin, session_cookie, set_cookie, SessionUser};
use super::AppState;
use crate::probes::agent::AgentItem;
use crate::states::Severity;

/// The dashboard's routes: the gated `/app/…` pages and the open account pages.
pub fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    let gated = Router::new()
        .route("/app", get(overview::page))
        .route("/app/streams", get(streams::list))
        .route("/app/streams/{id}", get(streams::detail))
        .route("/app/agents", get(agents::page))
        .route("/app/qoe", get(qoe::page))
        .route("/app/views", get(views::list))
        .route("/app/views/{id}", get(views::detail))
        .route("/app/keys", get(keys::page))
        .route("/app/alerts", get(alerts::page))
        .route("/app/team", get(team::page))
        .route("/app/account", get(account::page))
        .route("/app/{*rest}", get(not_found))
        .route_layer(middleware::from_fn_with_state(state, require_page_session));
    Router::new()
        .merge(gated)
        .route("/login", get(auth::login))
        .route("/signup", get(auth::signup))
}

/// A link of the main navigation.
pub struct NavLink {
    pub href: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// The main navigation's sections.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Streams,
    Agents,
    Qoe,
    Views,
    Keys,
    Alerts,
    /// The owner's: members and invitations (not in a member's navigation).
    Team,
    /// Reached from the signed-in e-mail in the header.
    Account,
}

const NAV: [(Section, &str, &str); 8] = [
    (Section::Overview, "/app", "Overview"),
    (Section::Streams, "/app/streams", "Streams"),
    (Section::Agents, "/app/agents", "Agent feed"),
    (Section::Qoe, "/app/qoe", "QoE"),
    (Section::Views, "/app/views", "Views"),
    (Section::Keys, "/app/keys", "API keys"),
    (Section::Alerts, "/app/alerts", "Alerts"),
    (Section::Team, "/app/team", "Team"),
];

/// What every `/app` page's frame shows: who is signed in and where they are.
pub struct Frame {
    pub email: String,
    pub section: Section,
    /// The instance's owner sees the Team section.
    pub owner: bool,
}

impl Frame {
    pub fn new(user: &SessionUser, section: Section) -> Self {
        Frame {
            email: user.0.user.email.clone(),
            section,
            owner: user.0.user.role == crate::accounts::Role::Owner,
        }
    }

    /// True on the account page (its link in the header is then the current page).
    pub fn on_account(&self) -> bool {
        self.section == Section::Account
    }

    pub fn links(&self) -> Vec<NavLink> {
        NAV.iter()
            .filter(|&&(s, _, _)| s != Section::Team || self.owner)
            .map(|&(s, href, label)| NavLink {
                href,
                label,
                current: s == self.section,
            })
            .collect()
    }
}

/// An option of a filter menu.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// One feed item as a table row.
pub struct FeedRow {
    pub at: When,
    pub stream_id: String,
    pub stream_name: String,
    pub severity: &'static str,
    pub badge: &'static str,
    pub anomaly: &'static str,
    pub latency: String,
    /// What this probe found: its own `detail` and latency (decisions.md §15), never the
    /// stream's current `lastAction`, which the JSON feed's `fix` repeats on every item.
    pub found: String,
    pub action: &'static str,
}

impl From<AgentItem> for FeedRow {
    fn from(a: AgentItem) -> Self {
        FeedRow {
            at: When::at(a.created_at),
            severity: a.severity.as_str(),
            badge: match a.severity {
                Severity::Info => "badge-healthy",
                Severity::Warn => "badge-degraded",
                Severity::Critical => "badge-failing",
            },
            anomaly: a.anomaly_class.as_str(),
            latency: fmt::ms(Some(a.latency_ms as f64)),
            found: format!("{} ({})", a.detail, fmt::ms(Some(a.latency_ms as f64))),
            action: a.action,
            stream_id: a.stream_id,
            stream_name: a.stream_name,
        }
    }
}

/// A rendered page, `text/html`, never cached (it shows the caller's data).
pub fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => {
            let mut r = Html(html).into_response();
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => PageError::Internal(format!("template: {e}")).into_response(),
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: &'a str,
}

/// Failures of a page: an HTML answer, never JSON; a 500's cause is logged, never shown.
#[derive(Debug)]
pub enum PageError {
    NotFound,
    /// 400 with a message the page shows (a request the page will not answer as asked).
    BadRequest(String),
    Internal(String),
}

impl PageError {
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        PageError::Internal(cause.to_string())
    }
}

impl From<crate::streams::StreamError> for PageError {
    fn from(e: crate::streams::StreamError) -> Self {
        match e {
            crate::streams::StreamError::NotFound => PageError::NotFound,
            other => PageError::internal(other),
        }
    }
}

impl From<crate::db::DbError> for PageError {
    fn from(e: crate::db::DbError) -> Self {
        PageError::internal(e)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let bad_request;
        let (status, title, message) = match self {
            PageError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is nothing at this address: the link may be old, or what it named was deleted.",
            ),
            PageError::BadRequest(why) => {
                bad_request = why;
                (StatusCode::BAD_REQUEST, "Bad request", bad_request.as_str())
            }
            PageError::Internal(cause) => {
                tracing::error!(%cause, "page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The page could not be shown. Try again in a moment; if it keeps failing, the server log says why.",
                )
            }
        };
        let html = ErrorPage { title, message }
            .render()
            .unwrap_or_else(|_| title.to_owned());
        (status, Html(html)).into_response()
    }
}

/// Any other `/app/…` path: the 404 page.
async fn not_found() -> PageError {
    PageError::NotFound
}

/// The page gate: without a live session, `302` to `/login?next=<this path>`; with one, the
/// page runs with the [`SessionUser`] (and the cookie is re-sent when its expiry slid).
pub async fn require_page_session(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let cookie = if foreign_origin(req.method(), req.headers()) {
        None
    } else {
        session_cookie(req.headers()).map(str::to_owned)
    };
    let auth = match cookie {
        None => None,
        Some(c) => match state.accounts.authenticate(&c).await {
            Ok(auth) => auth,
            Err(e) => return PageError::internal(e).into_response(),
        },
    };
    let Some(auth) = auth else {
        let here = req
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/app");
        return redirect(&auth::login_href(Some(here)));
    };
    // A one-time password (`streamwatch users add`) is replaced before anything else.
    if auth.user.must_change_password && req.uri().path() != account::PATH {
        return redirect(account::PATH);
    }
    let refreshed = auth.refreshed_cookie.clone();
    let expires_at = auth.session.expires_at;
    req.extensions_mut().insert(SessionUser(Arc::new(auth)));
    let mut resp = next.run(req).await;
    if let Some(value) = refreshed {
        resp.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(&value, expires_at, state.secure_cookies),
        );
    }
    resp
}

/// `302 Found` to a same-origin path.
pub fn redirect(to: &str) -> Response {
    let mut r = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}
