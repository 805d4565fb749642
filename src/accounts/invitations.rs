//! Invitations (decisions.md §15): one-time sign-up links the instance's owner mints, valid
//! for 7 days and revocable. The link's token is `<id>.<secret>`: the id finds the row, and
//! only a SHA-256 of the secret is stored, compared in constant time. Spending happens in the
//! sign-up's transaction ([`spend`]), so a token creates at most one account.

use subtle::ConstantTimeEq;

use super::token::{new_token, sha256_hex};
use super::{Role, User};
use crate::db::{Db, DbError};
use crate::time::{new_id, now_ms};

/// How long a link stays valid.
pub const INVITATION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
/// Live (unused, unrevoked, unexpired) invitations at once: a cap, so a stolen owner session
/// cannot fill the table.
pub const PENDING_MAX: i64 = 100;
/// Most invitations a list shows (newest first).
pub const LIST_MAX: i64 = 200;

/// Where an invitation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvitationState {
    Pending,
    Used,
    Revoked,
    Expired,
}

impl InvitationState {
    pub fn as_str(self) -> &'static str {
        match self {
            InvitationState::Pending => "pending",
            InvitationState::Used => "used",
            InvitationState::Revoked => "revoked",
            InvitationState::Expired => "expired",
        }
    }

    fn of(expires_at: i64, revoked_at: Option<i64>, used_at: Option<i64>, now: i64) -> Self {
        if used_at.is_some() {
            InvitationState::Used
        } else if revoked_at.is_some() {
            InvitationState::Revoked
        } else if expires_at <= now {
            InvitationState::Expired
        } else {
            InvitationState::Pending
        }
    }
}

/// An invitation as the owner sees it (never its token).
#[derive(Clone, Debug)]
pub struct Invitation {
    pub id: String,
    pub state: InvitationState,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub used_at: Option<i64>,
    /// The account made with it: `(id, email, name)`.
    pub used_by: Option<(String, String, String)>,
}

/// A link just minted: the only moment its token exists outside the invitee's hands.
#[derive(Clone, Debug)]
pub struct Minted {
    pub id: String,
    pub token: String,
    pub expires_at: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum InvitationError {
    /// Unknown id, or the caller is not the owner (the same 404 for both).
    #[error("invitation not found")]
    NotFound,
    #[error("too many pending invitations")]
    LimitReached,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for InvitationError {
    fn from(e: sqlx::Error) -> Self {
        InvitationError::Db(DbError(e))
    }
}

/// Invitation operations; every one is the owner's alone.
#[derive(Clone)]
pub struct Invitations {
    db: Db,
}

impl Invitations {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Mints a link for `owner`.
    pub async fn mint(&self, owner: &User) -> Result<Minted, InvitationError> {
        only_owner(owner)?;
        let now = now_ms();
        let (pending,): (i64,) = sqlx::query_as(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM invitations \
             WHERE used_at IS NULL AND revoked_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .fetch_one(&self.db.pool)
        .await?;
        if pending >= PENDING_MAX {
            return Err(InvitationError::LimitReached);
        }
        let id = new_id();
        let secret = new_token();
        let expires_at = now + INVITATION_TTL_MS;
        sqlx::query(
            "INSERT INTO invitations (id, secret_hash, created_by, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&id)
        .bind(sha256_hex(&secret))
        .bind(&owner.id)
        .bind(now)
        .bind(expires_at)
        .execute(&self.db.pool)
        .await?;
        metrics::counter!("streamwatch_auth_invitations_created_total").increment(1);
        Ok(Minted {
            token: format!("{id}.{secret}"),
            id,
            expires_at,
        })
    }

    /// The instance's invitations, newest first (at most [`LIST_MAX`]).
    pub async fn list(&self, owner: &User) -> Result<Vec<Invitation>, InvitationError> {
        only_owner(owner)?;
        let rows: Vec<InvitationRow> = sqlx::query_as(
            "SELECT i.id, i.created_at, i.expires_at, i.revoked_at, i.used_at, \
                    u.id AS user_id, u.email, u.name \
             FROM invitations i LEFT JOIN users u ON u.id = i.used_by \
             ORDER BY i.created_at DESC, i.seq DESC LIMIT $1",
        )
        .bind(LIST_MAX)
        .fetch_all(&self.db.pool)
        .await?;
        let now = now_ms();
        Ok(rows
            .into_iter()
            .map(|r| Invitation {
                state: InvitationState::of(r.expires_at, r.revoked_at, r.used_at, now),
                used_by: match (r.user_id, r.email, r.name) {
                    (Some(id), Some(email), Some(name)) => Some((id, email, name)),
                    _ => None,
                },
                id: r.id,
                created_at: r.created_at,
                expires_at: r.expires_at,
                revoked_at: r.revoked_at,
                used_at: r.used_at,
            })
            .collect())
    }

    /// Revokes an invitation; revoking again, or revoking a used one, changes nothing.
    pub async fn revoke(&self, owner: &User, id: &str) -> Result<(), InvitationError> {
        only_owner(owner)?;
        let found: Option<(String,)> = sqlx::query_as("SELECT id FROM invitations WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.db.pool)
            .await?;
        if found.is_none() {
            return Err(InvitationError::NotFound);
        }
        sqlx::query(
            "UPDATE invitations SET revoked_at = $1 \
             WHERE id = $2 AND revoked_at IS NULL AND used_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Where the invitation behind a link's token stands, for the sign-up page; `None` when
    /// the token names no invitation (or its secret is wrong).
    pub async fn state_of(&self, token: &str) -> Result<Option<InvitationState>, DbError> {
        Ok(find(&self.db, token).await?.map(|r| r.state(now_ms())))
    }
}

fn only_owner(user: &User) -> Result<(), InvitationError> {
    // Members are told nothing exists here, as for anything that is not theirs.
    if user.role == Role::Owner {
        Ok(())
    } else {
        Err(InvitationError::NotFound)
    }
}

/// The id of the live invitation behind `token`, if any (checked again when spent).
pub(super) async fn live_id(db: &Db, token: &str) -> Result<Option<String>, DbError> {
    let now = now_ms();
    Ok(find(db, token)
        .await?
        .filter(|r| r.state(now) == InvitationState::Pending)
        .map(|r| r.id))
}

/// Marks the invitation used by `user_id` if it is still live; false when it is not (used
/// meanwhile, revoked or expired). Runs inside the sign-up's transaction: on PostgreSQL a
/// second transaction spending the same row waits for the first and then matches nothing; on
/// SQLite writers are serialised.
pub(super) async fn spend(
    tx: &mut sqlx::AnyConnection,
    id: &str,
    user_id: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let spent = sqlx::query(
        "UPDATE invitations SET used_at = $1, used_by = $2 \
         WHERE id = $3 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1",
    )
    .bind(now)
    .bind(user_id)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    Ok(spent.rows_affected() == 1)
}

/// The row a token names, when its secret matches.
async fn find(db: &Db, token: &str) -> Result<Option<TokenRow>, DbError> {
    let Some((id, secret)) = token.split_once('.') else {
        return Ok(None);
    };
    // Ids are cuid-style and secrets base64url: anything else names no row.
    let id_like = (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric());
    if !id_like || secret.is_empty() || secret.len() > 64 {
        return Ok(None);
    }
    let row: Option<TokenRow> = sqlx::query_as(
        "SELECT id, secret_hash, expires_at, revoked_at, used_at FROM invitations WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&db.pool)
    .await
    .map_err(DbError)?;
    Ok(row.filter(|r| {
        bool::from(
            sha256_hex(secret)
                .as_bytes()
                .ct_eq(r.secret_hash.as_bytes()),
        )
    }))
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    secret_hash: String,
    expires_at: i64,
    revoked_at: Option<i64>,
    used_at: Option<i64>,
}

impl TokenRow {
    fn state(&self, now: i64) -> InvitationState {
        InvitationState::of(self.expires_at, self.revoked_at, self.used_at, now)
    }
}

#[derive(sqlx::FromRow)]
struct InvitationRow {
    id: String,
    created_at: i64,
    expires_at: i64,
    revoked_at: Option<i64>,
    used_at: Option<i64>,
    user_id: Option<String>,
    email: Option<String>,
    name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::InvitationState;

    #[test]
    fn state_follows_use_then_revocation_then_expiry() {
        let of = InvitationState::of;
        assert_eq!(of(100, None, None, 50), InvitationState::Pending);
        assert_eq!(of(100, None, None, 100), InvitationState::Expired);
        assert_eq!(of(100, Some(60), None, 50), InvitationState::Revoked);
        assert_eq!(of(100, Some(60), Some(40), 500), InvitationState::Used);
    }
}
