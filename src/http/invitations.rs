//! `/api/v1/invitations`: the owner mints, lists and revokes one-time sign-up links
//! (decisions.md §15). Anyone else gets the 404 of a resource that is not theirs.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::UserBody;
use super::error::{ApiError, ErrorBody, FieldErrorsBody, InternalError};
use super::extract::{RowId, SessionUser};
use super::AppState;
use crate::accounts::invitations::{Invitation, InvitationState};
use crate::time::Timestamp;

/// A link just minted: `url` holds the one-time token, shown in this answer only.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MintedInvitation {
    pub expires_at: Timestamp,
    pub id: String,
    /// `<origin>/signup?invite=<token>`: give it to one person.
    #[schema(example = "http://127.0.0.1:8080/signup?invite=clx2p8a0b0000abcd1234efgh.Zm9vYmFy")]
    pub url: String,
}

/// Where an invitation stands.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InvitationStateName {
    Pending,
    Used,
    Revoked,
    Expired,
}

impl From<InvitationState> for InvitationStateName {
    fn from(s: InvitationState) -> Self {
        match s {
            InvitationState::Pending => Self::Pending,
            InvitationState::Used => Self::Used,
            InvitationState::Revoked => Self::Revoked,
            InvitationState::Expired => Self::Expired,
        }
    }
}

/// An invitation as listed (never its token).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvitationItem {
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub id: String,
    pub revoked_at: Option<Timestamp>,
    pub state: InvitationStateName,
    pub used_at: Option<Timestamp>,
    /// The account created with it.
    pub used_by: Option<UserBody>,
}

impl From<Invitation> for InvitationItem {
    fn from(i: Invitation) -> Self {
        Self {
            created_at: Timestamp(i.created_at),
            expires_at: Timestamp(i.expires_at),
            id: i.id,
            revoked_at: i.revoked_at.map(Timestamp),
            state: i.state.into(),
            used_at: i.used_at.map(Timestamp),
            used_by: i
                .used_by
                .map(|(id, email, name)| UserBody { email, id, name }),
        }
    }
}

/// The instance's invitations, newest first (at most 200).
#[derive(Serialize, ToSchema)]
pub struct InvitationList {
    pub items: Vec<InvitationItem>,
}

/// The sign-up link of a token, on the origin the owner reached the service at.
pub fn signup_url(headers: &HeaderMap, token: &str) -> String {
    format!(
        "{}/signup?invite={token}",
        super::pages::keys::origin(headers)
    )
}

/// Mint a one-time sign-up link, valid 7 days (owner only).
#[utoipa::path(post, path = "/api/v1/invitations", operation_id = "createInvitation", tag = "accounts",
    responses(
        (status = 201, body = MintedInvitation),
        (status = 400, description = "100 invitations are pending already", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "The caller is not the instance's owner", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<MintedInvitation>), ApiError> {
    let minted = state.invitations.mint(&auth.user).await?;
    Ok((
        StatusCode::CREATED,
        Json(MintedInvitation {
            expires_at: Timestamp(minted.expires_at),
            id: minted.id,
            url: signup_url(&headers, &minted.token),
        }),
    ))
}

/// The instance's invitations (owner only).
#[utoipa::path(get, path = "/api/v1/invitations", operation_id = "listInvitations", tag = "accounts",
    responses(
        (status = 200, body = InvitationList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "The caller is not the instance's owner", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<InvitationList>, ApiError> {
    let items = state.invitations.list(&auth.user).await?;
    Ok(Json(InvitationList {
        items: items.into_iter().map(InvitationItem::from).collect(),
    }))
}

/// Revoke an invitation (owner only; idempotent, and a used one stays used).
#[utoipa::path(delete, path = "/api/v1/invitations/{id}", operation_id = "revokeInvitation", tag = "accounts",
    params(("id" = String, Path, description = "Invitation id")),
    responses(
        (status = 204, description = "Revoked (or already revoked or used)"),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Unknown id, or the caller is not the instance's owner", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<StatusCode, ApiError> {
    state.invitations.revoke(&auth.user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
