//! Accounts: users with argon2id password hashes, and sessions carried by a signed cookie
//! (decisions.md §4). Sessions last 7 days and slide: a session used more than a day after
//! its last refresh gets a new 7-day expiry.

pub mod password;
pub mod token;

use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::{Db, DbError};
use crate::time::{new_id, now_ms};
use token::{sha256_hex, CookieSigner};

/// Session lifetime.
pub const SESSION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
/// A session older than this since its last refresh is extended when used.
pub const SESSION_REFRESH_MS: i64 = 24 * 3600 * 1000;

/// The public face of a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: String,
}

/// A live session row (the token itself is never stored).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub user_id: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: i64,
}

/// A session just issued or refreshed: the cookie value to set.
#[derive(Clone, Debug)]
pub struct Issued {
    pub token: String,
    pub cookie_value: String,
    pub user: User,
    pub session: Session,
}

/// What an authenticated request learns from its cookie.
#[derive(Clone, Debug)]
pub struct Authenticated {
    pub user: User,
    pub session: Session,
    /// Set when the session's expiry was extended: the cookie should be re-sent.
    pub refreshed_cookie: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("user already exists")]
    EmailTaken,
    #[error("invalid email or password")]
    InvalidCredentials,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("password hashing failed")]
    Hashing,
}

impl From<sqlx::Error> for AccountError {
    fn from(e: sqlx::Error) -> Self {
        AccountError::Db(DbError(e))
    }
}

/// Account operations over the relational store.
#[derive(Clone)]
pub struct Accounts {
    db: Db,
    signer: CookieSigner,
    /// Verified against when the e-mail is unknown, so both failures cost the same time.
    dummy_hash: Arc<str>,
}

impl Accounts {
    pub fn new(db: Db, secret: &[u8]) -> Result<Self, AccountError> {
        let dummy_hash =
            password::hash("streamwatch-timing-equaliser").map_err(|_| AccountError::Hashing)?;
        Ok(Self {
            db,
            signer: CookieSigner::new(secret),
            dummy_hash: dummy_hash.into(),
        })
    }

    /// Creates the user and its first session. `email` must already be normalised.
    pub async fn sign_up(
        &self,
        name: &str,
        email: &str,
        password: &str,
    ) -> Result<Issued, AccountError> {
        if self.find_user_by_email(email).await?.is_some() {
            return Err(AccountError::EmailTaken);
        }
        let pw = password.to_owned();
        let phc = tokio::task::spawn_blocking(move || password::hash(&pw))
            .await
            .map_err(|_| AccountError::Hashing)?
            .map_err(|_| AccountError::Hashing)?;
        let user = User {
            id: new_id(),
            email: email.to_owned(),
            name: name.to_owned(),
        };
        let inserted = sqlx::query(
            "INSERT INTO users (id, email, name, password_hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&user.id)
        .bind(&user.email)
        .bind(&user.name)
        .bind(&phc)
        .bind(now_ms())
        .execute(&self.db.pool)
        .await
        .map_err(DbError);
        match inserted {
            Ok(_) => {}
            // Two sign-ups racing for one e-mail: the loser gets the same answer as if it came second.
            Err(e) if e.is_unique_violation() => return Err(AccountError::EmailTaken),
            Err(e) => return Err(e.into()),
        }
        self.issue(user).await
    }

    /// Checks the password and issues a fresh session (a new token at every sign-in).
    pub async fn sign_in(&self, email: &str, password: &str) -> Result<Issued, AccountError> {
        let found =
            sqlx::query("SELECT id, email, name, password_hash FROM users WHERE email = $1")
                .bind(email)
                .fetch_optional(&self.db.pool)
                .await?;
        let (user, phc) = match found {
            Some(r) => (user_from_row(&r), r.get::<String, _>("password_hash")),
            None => (None, self.dummy_hash.to_string()),
        };
        let pw = password.to_owned();
        let ok = tokio::task::spawn_blocking(move || password::verify(&pw, &phc))
            .await
            .map_err(|_| AccountError::Hashing)?;
        match user {
            Some(user) if ok => self.issue(user).await,
            _ => Err(AccountError::InvalidCredentials),
        }
    }

    async fn issue(&self, user: User) -> Result<Issued, AccountError> {
        let token = token::new_token();
        let now = now_ms();
        let session = Session {
            id: new_id(),
            user_id: user.id.clone(),
            created_at: now,
            updated_at: now,
            expires_at: now + SESSION_TTL_MS,
        };
        sqlx::query(
            "INSERT INTO sessions (id, token_hash, user_id, created_at, updated_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&session.id)
        .bind(sha256_hex(&token))
        .bind(&session.user_id)
        .bind(session.created_at)
        .bind(session.updated_at)
        .bind(session.expires_at)
        .execute(&self.db.pool)
        .await?;
        let cookie_value = self.signer.sign(&token);
        Ok(Issued {
            token,
            cookie_value,
            user,
            session,
        })
    }

    /// The user behind a cookie value, if its signature, row and expiry all hold.
    pub async fn authenticate(
        &self,
        cookie_value: &str,
    ) -> Result<Option<Authenticated>, AccountError> {
        let Some(token) = self.signer.verify(cookie_value) else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT s.id AS sid, s.user_id, s.created_at, s.updated_at, s.expires_at, \
                    u.id, u.email, u.name \
             FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = $1",
        )
        .bind(sha256_hex(token))
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let now = now_ms();
        let mut session = Session {
            id: row.get("sid"),
            user_id: row.get("user_id"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
            expires_at: row.get("expires_at"),
        };
        if session.expires_at <= now {
            sqlx::query("DELETE FROM sessions WHERE id = $1")
                .bind(&session.id)
                .execute(&self.db.pool)
                .await?;
            return Ok(None);
        }
        let user = user_from_row(&row).ok_or(AccountError::InvalidCredentials)?;
        let mut refreshed_cookie = None;
        if now - session.updated_at >= SESSION_REFRESH_MS {
            session.updated_at = now;
            session.expires_at = now + SESSION_TTL_MS;
            sqlx::query("UPDATE sessions SET updated_at = $1, expires_at = $2 WHERE id = $3")
                .bind(session.updated_at)
                .bind(session.expires_at)
                .bind(&session.id)
                .execute(&self.db.pool)
                .await?;
            refreshed_cookie = Some(cookie_value.to_owned());
        }
        Ok(Some(Authenticated {
            user,
            session,
            refreshed_cookie,
        }))
    }

    /// Ends the session behind a cookie value; unknown or invalid values are a no-op.
    pub async fn sign_out(&self, cookie_value: &str) -> Result<(), AccountError> {
        if let Some(token) = self.signer.verify(cookie_value) {
            sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
                .bind(sha256_hex(token))
                .execute(&self.db.pool)
                .await?;
        }
        Ok(())
    }

    async fn find_user_by_email(&self, email: &str) -> Result<Option<User>, AccountError> {
        let row = sqlx::query("SELECT id, email, name FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(row.as_ref().and_then(user_from_row))
    }

    /// Test and maintenance hook: moves a session's clock back by `ms` (expiry and refresh).
    #[doc(hidden)]
    pub async fn age_session(&self, session_id: &str, ms: i64) -> Result<(), AccountError> {
        sqlx::query(
            "UPDATE sessions SET updated_at = updated_at - $1, expires_at = expires_at - $1, \
             created_at = created_at - $1 WHERE id = $2",
        )
        .bind(ms)
        .bind(session_id)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }
}

fn user_from_row(r: &AnyRow) -> Option<User> {
    Some(User {
        id: r.try_get("id").ok()?,
        email: r.try_get("email").ok()?,
        name: r.try_get("name").ok()?,
    })
}

/// Lower-cased, trimmed e-mail if it is plausibly deliverable: one `@`, a non-empty local
/// part, a dotted domain, no whitespace or control characters, at most 254 bytes.
pub fn normalize_email(raw: &str) -> Option<String> {
    let e = raw.trim();
    if e.is_empty() || e.len() > 254 || e.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (local, domain) = e.split_once('@')?;
    if local.is_empty() || local.len() > 64 || domain.contains('@') {
        return None;
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2
        || labels.iter().any(|l| {
            l.is_empty()
                || l.starts_with('-')
                || l.ends_with('-')
                || !l.chars().all(|c| c.is_alphanumeric() || c == '-')
        })
    {
        return None;
    }
    Some(e.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::normalize_email;

    #[test]
    fn email_rules() {
        assert_eq!(
            normalize_email(" Ada@Example.COM ").as_deref(),
            Some("ada@example.com")
        );
        assert!(normalize_email("a.b+tag@sub.example.io").is_some());
        for bad in [
            "",
            "plain",
            "@x.io",
            "a@",
            "a@b",
            "a@@b.io",
            "a b@c.io",
            "a@b..io",
            "a@-b.io",
            "a@b.io\u{7}",
            "a\u{0}@b.io",
        ] {
            assert!(normalize_email(bad).is_none(), "{bad:?}");
        }
    }
}
