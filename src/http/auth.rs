//! `/api/auth/*`: sign-up, sign-in, sign-out, get-session and change-password, with
//! better-auth's routes, cookie and failure bodies (decisions.md §4, §15).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::{ApiError, AuthErrorBody, ErrorBody, InternalError};
use super::extract::{clear_cookie, foreign_origin, session_cookie, set_cookie, SmallBody};
use super::AppState;
use crate::accounts::{
    check_name, normalize_email, Admission, Issued, NameProblem, Session, User, NAME_MAX,
    PASSWORD_MAX, PASSWORD_MIN,
};
use crate::config::Signup;
use crate::time::Timestamp;
use crate::validation::type_name;

/// `POST /api/auth/sign-up/email`.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the body; parsed with better-auth's messages
pub struct SignUpBody {
    /// 1–120 characters.
    #[schema(min_length = 1, max_length = 120, example = "Ada")]
    name: String,
    #[schema(format = Email, example = "ada@example.com")]
    email: String,
    /// 8–128 characters.
    #[schema(min_length = 8, max_length = 128, example = "correct-horse-battery")]
    password: String,
    /// The token of an invitation link (`/signup?invite=<token>`): needed once the instance
    /// has an account, when `STREAMWATCH_SIGNUP=invite` (the default); spent by the sign-up.
    #[schema(rename = "inviteToken", example = "clx2p8a0b0000abcd1234efgh.Zm9vYmFy")]
    invite_token: Option<String>,
}

/// `POST /api/auth/change-password`.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; parsed with better-auth's messages
pub struct ChangePasswordBody {
    #[schema(example = "the-current-password")]
    current_password: String,
    /// 8–128 characters, not the current password.
    #[schema(min_length = 8, max_length = 128, example = "staple-battery-horse")]
    new_password: String,
}

/// `POST /api/auth/sign-in/email`.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the body; parsed with better-auth's messages
pub struct SignInBody {
    #[schema(format = Email, example = "ada@example.com")]
    email: String,
    #[schema(example = "correct-horse-battery")]
    password: String,
}

/// The user record (`id`, `email`, `name`).
#[derive(Serialize, ToSchema)]
pub struct UserBody {
    pub email: String,
    pub id: String,
    pub name: String,
}

impl From<&User> for UserBody {
    fn from(u: &User) -> Self {
        Self {
            email: u.email.clone(),
            id: u.id.clone(),
            name: u.name.clone(),
        }
    }
}

/// A session (the token itself is only in the cookie).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBody {
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub id: String,
    pub updated_at: Timestamp,
    pub user_id: String,
}

impl From<&Session> for SessionBody {
    fn from(s: &Session) -> Self {
        Self {
            created_at: Timestamp(s.created_at),
            expires_at: Timestamp(s.expires_at),
            id: s.id.clone(),
            updated_at: Timestamp(s.updated_at),
            user_id: s.user_id.clone(),
        }
    }
}

/// The answer of sign-up: the session token (also set as the cookie) and the user.
#[derive(Serialize, ToSchema)]
pub struct SignUpAnswer {
    pub token: String,
    pub user: UserBody,
}

/// The answer of sign-in (better-auth's shape).
#[derive(Serialize, ToSchema)]
pub struct SignInAnswer {
    /// Always `false`.
    pub redirect: bool,
    pub token: String,
    /// Always `null`.
    #[schema(value_type = Option<String>)]
    pub url: Option<String>,
    pub user: UserBody,
}

/// The answer of sign-out.
#[derive(Serialize, ToSchema)]
pub struct SignOutAnswer {
    /// Always `true`.
    pub success: bool,
}

/// The signed-in user as get-session shows it: the user record and its place on the instance.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUserBody {
    pub email: String,
    pub id: String,
    /// True after a sign-in with a one-time password (`streamwatch users add`): the other
    /// cookie routes answer 401 until `POST /api/auth/change-password` replaced it.
    pub must_change_password: bool,
    pub name: String,
    /// `owner` (the instance's first account: mints invitations) or `member`.
    #[schema(example = "owner")]
    pub role: RoleName,
}

/// A user's role.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Owner,
    Member,
}

impl From<&User> for SessionUserBody {
    fn from(u: &User) -> Self {
        Self {
            email: u.email.clone(),
            id: u.id.clone(),
            must_change_password: u.must_change_password,
            name: u.name.clone(),
            role: match u.role {
                crate::accounts::Role::Owner => RoleName::Owner,
                crate::accounts::Role::Member => RoleName::Member,
            },
        }
    }
}

/// The answer of get-session when signed in (else `null`).
#[derive(Serialize, ToSchema)]
pub struct SessionAnswer {
    pub session: SessionBody,
    pub user: SessionUserBody,
}

/// The answer of change-password: the new session's token (also set as the cookie; every
/// other session of the user ended) and the user.
#[derive(Serialize, ToSchema)]
pub struct ChangePasswordAnswer {
    pub token: String,
    pub user: UserBody,
}

fn validation(message: String) -> ApiError {
    ApiError::auth(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", message)
}

fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(ApiError::auth(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "Invalid JSON in request body",
        )),
    }
}

/// A required string field, with better-auth's message when it is absent or not a string.
fn string_field<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, ApiError> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s),
        other => Err(validation(format!(
            "[body.{field}] Invalid input: expected string, received {}",
            other.map_or("undefined", type_name)
        ))),
    }
}

/// An optional string field: absent or `null` is `None`, any other non-string is refused.
fn optional_string_field<'a>(
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(validation(format!(
            "[body.{field}] Invalid input: expected string, received {}",
            type_name(other)
        ))),
    }
}

/// A new password of 8–128 characters, with better-auth's codes.
fn new_password_field<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, ApiError> {
    let password = string_field(body, field)?;
    let len = password.chars().count();
    if len < PASSWORD_MIN {
        return Err(ApiError::auth(
            StatusCode::BAD_REQUEST,
            "PASSWORD_TOO_SHORT",
            "Password too short",
        ));
    }
    if len > PASSWORD_MAX {
        return Err(ApiError::auth(
            StatusCode::BAD_REQUEST,
            "PASSWORD_TOO_LONG",
            "Password too long",
        ));
    }
    Ok(password)
}

fn email_field(body: &Map<String, Value>) -> Result<String, ApiError> {
    normalize_email(string_field(body, "email")?)
        .ok_or_else(|| validation("[body.email] Invalid email address".into()))
}

/// better-auth's wording (zod v4) for a refused `name`.
fn name_field(body: &Map<String, Value>) -> Result<&str, ApiError> {
    let name = string_field(body, "name")?;
    check_name(name).map_err(|problem| {
        validation(match problem {
            NameProblem::Empty => {
                "[body.name] String must contain at least 1 character(s)".to_owned()
            }
            NameProblem::TooLong => {
                format!("[body.name] Too big: expected string to have <={NAME_MAX} characters")
            }
            NameProblem::ForbiddenChars => {
                "[body.name] Invalid input: must not contain control or invisible formatting characters"
                    .to_owned()
            }
        })
    })?;
    Ok(name)
}

/// Sign-in and sign-up from another site's page are refused outright: a forged sign-in would
/// put the victim's browser into the attacker's account (login CSRF).
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if foreign_origin(&axum::http::Method::POST, headers) {
        return Err(ApiError::auth(
            StatusCode::BAD_REQUEST,
            "INVALID_ORIGIN",
            "Invalid origin",
        ));
    }
    Ok(())
}

/// The metric label of a sign-in or sign-up's outcome (a small fixed set).
fn outcome(r: &Result<Response, ApiError>) -> &'static str {
    match r {
        Ok(_) => "success",
        Err(ApiError::TooManyRequests(_)) => "rate_limited",
        Err(ApiError::Auth { code, .. }) => match *code {
            "INVALID_EMAIL_OR_PASSWORD" => "invalid_credentials",
            "USER_ALREADY_EXISTS_USE_ANOTHER_EMAIL" => "email_taken",
            "INVALID_ORIGIN" => "invalid_origin",
            "INVALID_PASSWORD" => "invalid_credentials",
            "SIGNUP_DISABLED" => "disabled",
            _ => "invalid_input",
        },
        Err(_) => "error",
    }
}

fn rate_limit(state: &AppState, peer: SocketAddr) -> Result<(), ApiError> {
    state
        .rate
        .check(peer.ip())
        .map_err(ApiError::TooManyRequests)
}

fn issued_response(state: &AppState, issued: Issued, body: impl Serialize) -> Response {
    let mut r = Json(body).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        set_cookie(
            &issued.cookie_value,
            issued.session.expires_at,
            state.secure_cookies,
        ),
    );
    r
}

/// Create an account and sign in (better-auth's route).
#[utoipa::path(post, path = "/api/auth/sign-up/email", operation_id = "signUp", tag = "accounts",
    request_body = SignUpBody,
    responses(
        (status = 200, description = "Signed up; `Set-Cookie: auth.session_token=…`", body = SignUpAnswer),
        (status = 400, description = "Invalid body, foreign Origin, sign-up disabled (`closed`), or no live invitation (`invite`, once an account exists: `SIGNUP_DISABLED`, \"Sign-up needs an invitation\")", body = AuthErrorBody),
        (status = 422, description = "The e-mail is taken", body = AuthErrorBody),
        (status = 429, description = "Too many attempts from this client", body = AuthErrorBody),
        (status = 500, response = InternalError),
    ))]
pub async fn sign_up(
    state: State<Arc<AppState>>,
    peer: ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: SmallBody,
) -> Result<Response, ApiError> {
    let r = try_sign_up(state, peer, headers, body).await;
    metrics::counter!("streamwatch_auth_sign_ups_total", "outcome" => outcome(&r)).increment(1);
    r
}

async fn try_sign_up(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    if state.signup == Signup::Closed {
        return Err(ApiError::auth(
            StatusCode::BAD_REQUEST,
            "SIGNUP_DISABLED",
            "Sign-up is disabled",
        ));
    }
    rate_limit(&state, peer)?;
    let body = parse_body(&body)?;
    let admission = match state.signup {
        // `open` is the contract's behaviour: an extra field is ignored, as before.
        Signup::Open | Signup::Closed => Admission::Open,
        Signup::Invite => {
            let token = optional_string_field(&body, "inviteToken")?;
            // Without a token past the first account, say so before judging the rest.
            if token.is_none() && state.accounts.has_users().await? {
                return Err(crate::accounts::AccountError::InvitationRequired.into());
            }
            Admission::Invitation(token)
        }
    };
    let name = name_field(&body)?;
    let email = email_field(&body)?;
    let password = new_password_field(&body, "password")?;
    let issued = state
        .accounts
        .sign_up(name, &email, password, admission)
        .await?;
    let body = SignUpAnswer {
        token: issued.token.clone(),
        user: UserBody::from(&issued.user),
    };
    Ok(issued_response(&state, issued, body))
}

/// Sign in with e-mail and password: a fresh session each time.
#[utoipa::path(post, path = "/api/auth/sign-in/email", operation_id = "signIn", tag = "accounts",
    request_body = SignInBody,
    responses(
        (status = 200, description = "Signed in; `Set-Cookie: auth.session_token=…`", body = SignInAnswer),
        (status = 400, description = "Invalid body or foreign Origin", body = AuthErrorBody),
        (status = 401, description = "Wrong password or unknown e-mail", body = AuthErrorBody),
        (status = 429, description = "Too many attempts from this client", body = AuthErrorBody),
        (status = 500, response = InternalError),
    ))]
pub async fn sign_in(
    state: State<Arc<AppState>>,
    peer: ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: SmallBody,
) -> Result<Response, ApiError> {
    let r = try_sign_in(state, peer, headers, body).await;
    metrics::counter!("streamwatch_auth_sign_ins_total", "outcome" => outcome(&r)).increment(1);
    r
}

async fn try_sign_in(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    rate_limit(&state, peer)?;
    let body = parse_body(&body)?;
    let email = email_field(&body)?;
    let password = string_field(&body, "password")?;
    let issued = state.accounts.sign_in(&email, password).await?;
    let body = SignInAnswer {
        redirect: false,
        token: issued.token.clone(),
        url: None,
        user: UserBody::from(&issued.user),
    };
    Ok(issued_response(&state, issued, body))
}

/// Sign out: ends the session and expires the cookie.
#[utoipa::path(post, path = "/api/auth/sign-out", operation_id = "signOut", tag = "accounts",
    responses(
        (status = 200, body = SignOutAnswer),
        (status = 500, response = InternalError),
    ))]
pub async fn sign_out(
    State(state): State<Arc<AppState>>,
    method: axum::http::Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A cross-site form must not be able to end someone's session.
    if !foreign_origin(&method, &headers) {
        if let Some(cookie) = session_cookie(&headers) {
            state.accounts.sign_out(cookie).await?;
        }
    }
    let mut r = Json(SignOutAnswer { success: true }).into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, clear_cookie(state.secure_cookies));
    Ok(r)
}

/// The current session and user, or `null` without a valid session.
#[utoipa::path(get, path = "/api/auth/get-session", operation_id = "getSession", tag = "accounts",
    responses(
        (status = 200, description = "The session, or `null`", body = Option<SessionAnswer>),
        (status = 500, response = InternalError),
    ))]
pub async fn get_session(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(cookie) = session_cookie(&headers) else {
        return Ok(Json(None::<SessionAnswer>).into_response());
    };
    let Some(auth) = state.accounts.authenticate(cookie).await? else {
        return Ok(Json(None::<SessionAnswer>).into_response());
    };
    let mut r = Json(Some(SessionAnswer {
        session: SessionBody::from(&auth.session),
        user: SessionUserBody::from(&auth.user),
    }))
    .into_response();
    if let Some(value) = &auth.refreshed_cookie {
        r.headers_mut().insert(
            header::SET_COOKIE,
            set_cookie(value, auth.session.expires_at, state.secure_cookies),
        );
    }
    Ok(r)
}

/// Change the signed-in user's password (better-auth's route, with other sessions always
/// revoked): every session of the user ends and this device gets a fresh one.
#[utoipa::path(post, path = "/api/auth/change-password", operation_id = "changePassword", tag = "accounts",
    request_body = ChangePasswordBody,
    responses(
        (status = 200, description = "Changed; `Set-Cookie: auth.session_token=…` (a new session; all others ended)", body = ChangePasswordAnswer),
        (status = 400, description = "Invalid body, wrong current password (`INVALID_PASSWORD`), or the new password is the current one (`PASSWORD_UNCHANGED`)", body = AuthErrorBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 429, description = "Too many attempts from this client", body = AuthErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn change_password(
    state: State<Arc<AppState>>,
    peer: ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: SmallBody,
) -> Result<Response, ApiError> {
    let r = try_change_password(state, peer, headers, body).await;
    metrics::counter!("streamwatch_auth_password_changes_total", "outcome" => outcome(&r))
        .increment(1);
    r
}

async fn try_change_password(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    // The session gate of the other cookie routes, which this route sits outside of (they
    // refuse a session whose one-time password is not replaced yet; this one must not).
    if foreign_origin(&axum::http::Method::POST, &headers) {
        return Err(ApiError::Unauthorized);
    }
    let cookie = session_cookie(&headers).ok_or(ApiError::Unauthorized)?;
    let auth = state
        .accounts
        .authenticate(cookie)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    // Guessing the current password from a stolen session is as limited as sign-in.
    rate_limit(&state, peer)?;
    let body = parse_body(&body)?;
    let current = string_field(&body, "currentPassword")?;
    let new = new_password_field(&body, "newPassword")?;
    let issued = state
        .accounts
        .change_password(&auth.user, current, new)
        .await?;
    let body = ChangePasswordAnswer {
        token: issued.token.clone(),
        user: UserBody::from(&issued.user),
    };
    Ok(issued_response(&state, issued, body))
}
