//! `/app/team` (the owner's; a 404 page for anyone else): the instance's accounts, and the
//! one-time sign-up links the owner mints and revokes (decisions.md §15).

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::fmt::When;
use super::{render, Frame, PageError, Section};
use crate::accounts::invitations::{InvitationError, InvitationState};
use crate::accounts::Role;
use crate::config::Signup;
use crate::http::extract::SessionUser;
use crate::http::AppState;

pub struct MemberRow {
    pub name: String,
    pub email: String,
    pub owner: bool,
    pub joined: When,
}

pub struct InvitationRow {
    pub id: String,
    /// `pending`, `used`, `revoked` or `expired`.
    pub state: &'static str,
    /// The badge class of the state.
    pub badge: &'static str,
    pub pending: bool,
    pub created: When,
    pub expires: When,
    /// E-mail of the account made with it.
    pub used_by: Option<String>,
}

#[derive(Template)]
#[template(path = "team.html")]
struct TeamPage {
    frame: Frame,
    members: Vec<MemberRow>,
    invitations: Vec<InvitationRow>,
    /// What `STREAMWATCH_SIGNUP` means for invitations here.
    signup: &'static str,
}

/// `GET /app/team`.
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
) -> Result<Response, PageError> {
    let invitations = match state.invitations.list(&user.0.user).await {
        Ok(list) => list,
        Err(InvitationError::NotFound) => return Err(PageError::NotFound),
        Err(e) => return Err(PageError::internal(e)),
    };
    let members = state
        .accounts
        .members()
        .await
        .map_err(PageError::internal)?;
    Ok(render(&TeamPage {
        frame: Frame::new(&user, Section::Team),
        members: members
            .into_iter()
            .map(|m| MemberRow {
                name: m.user.name,
                email: m.user.email,
                owner: m.user.role == Role::Owner,
                joined: When::at(m.created_at),
            })
            .collect(),
        invitations: invitations
            .into_iter()
            .map(|i| InvitationRow {
                state: i.state.as_str(),
                badge: match i.state {
                    InvitationState::Pending => "badge-degraded",
                    InvitationState::Used => "badge-healthy",
                    InvitationState::Revoked | InvitationState::Expired => "badge-neutral",
                },
                pending: i.state == InvitationState::Pending,
                created: When::at(i.created_at),
                expires: When::at(i.expires_at),
                used_by: i.used_by.map(|(_, email, _)| email),
                id: i.id,
            })
            .collect(),
        signup: match state.signup {
            Signup::Invite => "invite",
            Signup::Open => "open",
            Signup::Closed => "closed",
        },
    }))
}
