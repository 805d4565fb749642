//! `POST /api/waitlist`: no auth, no cookie; 204 whether the address is new or not.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use utoipa::ToSchema;

use super::error::{ApiError, FieldErrorsBody, InternalError};
use super::extract::SmallBody;
use super::AppState;
use crate::accounts::normalize_email;
use crate::validation::parse_object;

/// The body of `POST /api/waitlist`.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the body; parsed in `join`
pub struct WaitlistBody {
    #[schema(format = Email, example = "ada@example.com")]
    email: String,
}

/// Join the waitlist (the landing page's form). The same address twice is a no-op.
#[utoipa::path(post, path = "/api/waitlist", operation_id = "joinWaitlist", tag = "waitlist",
    request_body = WaitlistBody,
    responses(
        (status = 204, description = "On the list"),
        (status = 400, description = "Not an e-mail address", body = FieldErrorsBody),
        (status = 500, response = InternalError),
    ))]
pub async fn join(
    State(state): State<Arc<AppState>>,
    SmallBody(body): SmallBody,
) -> Result<StatusCode, ApiError> {
    // Whatever is wrong with the body, the one field to fix is the e-mail.
    let email = parse_object(&body)
        .ok()
        .and_then(|b| {
            b.get("email")
                .and_then(Value::as_str)
                .and_then(normalize_email)
        })
        .ok_or_else(|| ApiError::field("email", "Invalid email"))?;
    crate::waitlist::join(&state.db, &email).await?;
    Ok(StatusCode::NO_CONTENT)
}
