//! `/api/auth/*`: sign-up, sign-in, sign-out and get-session, with better-auth's routes,
//! cookie and failure bodies (decisions.md §4).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::extract::{clear_cookie, foreign_origin, session_cookie, set_cookie, SmallBody};
use super::AppState;
use crate::accounts::{normalize_email, Issued, Session, User};
use crate::time::iso_ms;
use crate::validation::type_name;

const PASSWORD_MIN: usize = 8;
const PASSWORD_MAX: usize = 128;

fn user_json(u: &User) -> Value {
    json!({ "id": u.id, "email": u.email, "name": u.name })
}

fn session_json(s: &Session) -> Value {
    json!({
        "id": s.id,
        "userId": s.user_id,
        "createdAt": iso_ms(s.created_at),
        "updatedAt": iso_ms(s.updated_at),
        "expiresAt": iso_ms(s.expires_at),
    })
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

fn email_field(body: &Map<String, Value>) -> Result<String, ApiError> {
    normalize_email(string_field(body, "email")?)
        .ok_or_else(|| validation("[body.email] Invalid email address".into()))
}

fn rate_limit(state: &AppState, peer: SocketAddr) -> Result<(), ApiError> {
    state
        .rate
        .check(peer.ip())
        .map_err(ApiError::TooManyRequests)
}

fn issued_response(issued: Issued, body: Value) -> Response {
    let mut r = Json(body).into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, set_cookie(&issued.cookie_value));
    r
}

pub async fn sign_up(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    rate_limit(&state, peer)?;
    let body = parse_body(&body)?;
    let name = string_field(&body, "name")?;
    let email = email_field(&body)?;
    let password = string_field(&body, "password")?;
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
    let issued = state.accounts.sign_up(name, &email, password).await?;
    let body = json!({ "token": issued.token, "user": user_json(&issued.user) });
    Ok(issued_response(issued, body))
}

pub async fn sign_in(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    SmallBody(body): SmallBody,
) -> Result<Response, ApiError> {
    rate_limit(&state, peer)?;
    let body = parse_body(&body)?;
    let email = email_field(&body)?;
    let password = string_field(&body, "password")?;
    let issued = state.accounts.sign_in(&email, password).await?;
    let body = json!({
        "redirect": false,
        "token": issued.token,
        "url": null,
        "user": user_json(&issued.user),
    });
    Ok(issued_response(issued, body))
}

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
    let mut r = Json(json!({ "success": true })).into_response();
    r.headers_mut().insert(header::SET_COOKIE, clear_cookie());
    Ok(r)
}

pub async fn get_session(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(cookie) = session_cookie(&headers) else {
        return Ok(Json(Value::Null).into_response());
    };
    let Some(auth) = state.accounts.authenticate(cookie).await? else {
        return Ok(Json(Value::Null).into_response());
    };
    let mut r =
        Json(json!({ "session": session_json(&auth.session), "user": user_json(&auth.user) }))
            .into_response();
    if let Some(value) = &auth.refreshed_cookie {
        r.headers_mut()
            .insert(header::SET_COOKIE, set_cookie(value));
    }
    Ok(r)
}
