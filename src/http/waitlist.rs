//! `POST /api/waitlist`: no auth, no cookie; 204 whether the address is new or not.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::error::ApiError;
use super::extract::SmallBody;
use super::AppState;
use crate::validation::parse_object;

pub async fn join(
    State(state): State<Arc<AppState>>,
    SmallBody(body): SmallBody,
) -> Result<StatusCode, ApiError> {
    // Whatever is wrong with the body, the one field to fix is the e-mail.
    let body = parse_object(&body).map_err(|_| ApiError::field("email", "Invalid email"))?;
    crate::waitlist::join(&state.db, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}
