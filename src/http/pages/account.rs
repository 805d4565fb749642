//! `/app/account`: who is signed in, and a password change (current + new; the user's other
//! sessions end). After a sign-in with a one-time password (`streamwatch users add`) every
//! `/app` page leads here until the password is replaced (decisions.md §15).

use askama::Template;
use axum::response::Response;
use axum::Extension;

use super::{render, Frame, Section};
use crate::accounts::Role;
use crate::http::extract::SessionUser;

/// The page's path, where the page gate sends a user who must change their password.
pub const PATH: &str = "/app/account";

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    frame: Frame,
    name: String,
    email: String,
    role: &'static str,
    must_change_password: bool,
}

/// `GET /app/account`.
pub async fn page(Extension(user): Extension<SessionUser>) -> Response {
    let u = &user.0.user;
    render(&AccountPage {
        name: u.name.clone(),
        email: u.email.clone(),
        role: match u.role {
            Role::Owner => "owner: you invite the others",
            Role::Member => "member",
        },
        must_change_password: u.must_change_password,
        frame: Frame::new(&user, Section::Account),
    })
}
