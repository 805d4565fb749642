//! `ApiError`: every failure a handler can answer with, mapped to the contract's exact bodies.
//! 5xx causes are logged here and never returned.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::accounts::invitations::InvitationError;
use crate::accounts::AccountError;
use crate::db::DbError;
use crate::keys::KeyError;
use crate::streams::StreamError;
use crate::validation::FieldErrors;

#[derive(Debug)]
pub enum ApiError {
    /// 400 `{ errors: { field: message } }`.
    Validation(FieldErrors),
    /// 401 `{ error: "Unauthorized" }` (cookie routes).
    Unauthorized,
    /// 401 `{ error: "Invalid API key" }` (telemetry).
    InvalidApiKey,
    /// 404 `{ error: "Not Found" }`.
    NotFound,
    /// better-auth style `{ code, message }` failures of the account routes.
    Auth {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
    /// 429 of the account routes, with the seconds to wait.
    TooManyRequests(u64),
    /// 500 `{ error: "Internal Server Error" }`; the cause is only logged.
    Internal(String),
}

impl ApiError {
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        ApiError::Validation(FieldErrors::from([(field.to_owned(), message.into())]))
    }

    pub fn auth(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Auth {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        ApiError::Internal(cause.to_string())
    }
}

/// `{ "error": … }`: 401, 404 and 500 bodies.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    /// `Unauthorized`, `Invalid API key`, `Not Found` or `Internal Server Error`.
    #[schema(example = "Not Found")]
    pub error: &'static str,
}

/// The shared `500` of the OpenAPI document (`#/components/responses/InternalError`): an
/// unexpected failure, its cause logged and never returned.
pub struct InternalError;

impl<'r> utoipa::ToResponse<'r> for InternalError {
    fn response() -> (&'r str, utoipa::openapi::RefOr<utoipa::openapi::Response>) {
        ("InternalError", error_response("Unexpected failure"))
    }
}

/// The shared `500` of the routes that read the telemetry store
/// (`#/components/responses/StoreUnavailable`): also answered while the store is down.
pub struct StoreUnavailable;

impl<'r> utoipa::ToResponse<'r> for StoreUnavailable {
    fn response() -> (&'r str, utoipa::openapi::RefOr<utoipa::openapi::Response>) {
        (
            "StoreUnavailable",
            error_response("Unexpected failure or store down"),
        )
    }
}

/// A response with an [`ErrorBody`] and `description`.
fn error_response(description: &str) -> utoipa::openapi::RefOr<utoipa::openapi::Response> {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
        .into()
}

/// `{ "errors": { <field>: <message> } }`: the 400 of a body or query that failed validation.
#[derive(Serialize, ToSchema)]
pub struct FieldErrorsBody {
    /// One message per failing field (or query parameter).
    #[schema(example = json!({ "sourceUrl": "Must be a valid URL" }))]
    pub errors: FieldErrors,
}

/// `{ "code", "message" }`: the failures of the account routes (better-auth's bodies).
#[derive(Serialize, ToSchema)]
pub struct AuthErrorBody {
    #[schema(example = "INVALID_EMAIL_OR_PASSWORD")]
    pub code: &'static str,
    #[schema(example = "Invalid email or password")]
    pub message: String,
}

fn error(status: StatusCode, error: &'static str) -> Response {
    (status, Json(ErrorBody { error })).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Validation(errors) => {
                (StatusCode::BAD_REQUEST, Json(FieldErrorsBody { errors })).into_response()
            }
            ApiError::Unauthorized => error(StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::InvalidApiKey => error(StatusCode::UNAUTHORIZED, "Invalid API key"),
            ApiError::NotFound => error(StatusCode::NOT_FOUND, "Not Found"),
            ApiError::Auth {
                status,
                code,
                message,
            } => (status, Json(AuthErrorBody { code, message })).into_response(),
            ApiError::TooManyRequests(secs) => {
                let mut r = (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(AuthErrorBody {
                        code: "TOO_MANY_REQUESTS",
                        message: "Too many requests. Please try again later.".to_owned(),
                    }),
                )
                    .into_response();
                // better-auth's header, and the standard one (RFC 9110 §10.2.3) that clients
                // and proxies know.
                r.headers_mut()
                    .insert("x-retry-after", HeaderValue::from(secs));
                r.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
                r
            }
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
            }
        }
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        ApiError::internal(e)
    }
}

impl From<StreamError> for ApiError {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Invalid(f) => ApiError::Validation(f),
            StreamError::NotFound => ApiError::NotFound,
            StreamError::Db(e) => e.into(),
        }
    }
}

impl From<KeyError> for ApiError {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::NotFound => ApiError::NotFound,
            KeyError::Db(e) => e.into(),
        }
    }
}

impl From<AccountError> for ApiError {
    fn from(e: AccountError) -> Self {
        match e {
            AccountError::EmailTaken => ApiError::auth(
                StatusCode::UNPROCESSABLE_ENTITY,
                "USER_ALREADY_EXISTS_USE_ANOTHER_EMAIL",
                "User already exists. Use another email.",
            ),
            AccountError::InvalidCredentials => ApiError::auth(
                StatusCode::UNAUTHORIZED,
                "INVALID_EMAIL_OR_PASSWORD",
                "Invalid email or password",
            ),
            AccountError::InvitationRequired => ApiError::auth(
                StatusCode::BAD_REQUEST,
                "SIGNUP_DISABLED",
                "Sign-up needs an invitation",
            ),
            AccountError::InvalidPassword => ApiError::auth(
                StatusCode::BAD_REQUEST,
                "INVALID_PASSWORD",
                "Invalid password",
            ),
            AccountError::PasswordUnchanged => ApiError::auth(
                StatusCode::BAD_REQUEST,
                "PASSWORD_UNCHANGED",
                "The new password must differ from the current one",
            ),
            other => ApiError::internal(other),
        }
    }
}

impl From<InvitationError> for ApiError {
    fn from(e: InvitationError) -> Self {
        match e {
            InvitationError::NotFound => ApiError::NotFound,
            InvitationError::LimitReached => ApiError::field(
                "invitation",
                format!(
                    "Pending invitation limit reached ({}); revoke one first",
                    crate::accounts::invitations::PENDING_MAX
                ),
            ),
            InvitationError::Db(e) => e.into(),
        }
    }
}
