//! Accounts: users with argon2id password hashes, and sessions carried by a signed cookie
//! (decisions.md §4). Sessions last 7 days and slide: a session used more than a day after
//! its last refresh gets a new 7-day expiry, but never past 30 days after sign-in
//! (decisions.md §14), however active it is. The instance's first account is its owner, who
//! invites the others (decisions.md §15, [`invitations`]).

pub mod invitations;
pub mod password;
pub mod token;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::db::{Db, DbError};
use crate::time::{new_id, now_ms};
use token::{sha256_hex, CookieSigner};

/// Session lifetime.
pub const SESSION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
/// A session older than this since its last refresh is extended when used.
pub const SESSION_REFRESH_MS: i64 = 24 * 3600 * 1000;
/// A session ends this long after sign-in, however active (decisions.md §14).
pub const SESSION_MAX_LIFETIME_MS: i64 = 30 * 24 * 3600 * 1000;

/// The expiry a session used at `now` slides to: 7 days on, at most 30 days after sign-in.
fn slid_expiry(created_at: i64, now: i64) -> i64 {
    (now + SESSION_TTL_MS).min(created_at + SESSION_MAX_LIFETIME_MS)
}

/// Longest sign-up `name`, in characters (decisions.md §10).
pub const NAME_MAX: usize = 120;

/// Why a user `name` is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameProblem {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most 120 characters")]
    TooLong,
    #[error("must not contain control or invisible formatting characters")]
    ForbiddenChars,
}

/// Checks a user `name`: 1–[`NAME_MAX`] characters, no control or format characters.
pub fn check_name(name: &str) -> Result<(), NameProblem> {
    let n = name.chars().count();
    if crate::validation::has_forbidden_chars(name) {
        Err(NameProblem::ForbiddenChars)
    } else if n == 0 {
        Err(NameProblem::Empty)
    } else if n > NAME_MAX {
        Err(NameProblem::TooLong)
    } else {
        Ok(())
    }
}

/// Password length bounds, in characters (decisions.md §4).
pub const PASSWORD_MIN: usize = 8;
pub const PASSWORD_MAX: usize = 128;

/// A user's place on the instance: the owner (the first account) invites the members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Owner,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
        }
    }

    /// The stored value; anything but `owner` is a member (never more rights than written).
    fn from_db(s: &str) -> Self {
        if s == "owner" {
            Role::Owner
        } else {
            Role::Member
        }
    }
}

/// The public face of a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub email: String,
    pub name: String,
    pub role: Role,
    /// Signed in with a one-time password (`streamwatch users add`) not yet replaced: the
    /// dashboard asks for a new one and the JSON API refuses the session until then.
    pub must_change_password: bool,
}

/// A member of the team as the owner's team page lists it.
#[derive(Clone, Debug)]
pub struct Member {
    pub user: User,
    pub created_at: i64,
}

/// Who may create an account (`STREAMWATCH_SIGNUP`, decisions.md §15).
#[derive(Clone, Copy, Debug)]
pub enum Admission<'a> {
    /// Anyone (`open`).
    Open,
    /// The first account, then only holders of an invitation token (`invite`).
    Invitation(Option<&'a str>),
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
    /// Sign-up past the first account without a live invitation (missing, unknown, used,
    /// revoked or expired: one answer for all, so a token's state leaks to nobody).
    #[error("sign-up needs an invitation")]
    InvitationRequired,
    /// Password change: the current password is wrong.
    #[error("invalid password")]
    InvalidPassword,
    /// Password change: the new password is the current one.
    #[error("the new password is the current one")]
    PasswordUnchanged,
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
    /// One permit per core: argon2 takes 19 MiB and a core for tens of milliseconds, so a
    /// burst of sign-ins queues here instead of filling memory (decisions.md §10).
    hashing: Arc<Semaphore>,
}

impl Accounts {
    pub fn new(db: Db, secret: &[u8]) -> Result<Self, AccountError> {
        let dummy_hash =
            password::hash("streamwatch-timing-equaliser").map_err(|_| AccountError::Hashing)?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Self {
            db,
            signer: CookieSigner::new(secret),
            dummy_hash: dummy_hash.into(),
            hashing: Arc::new(Semaphore::new(cores)),
        })
    }

    /// Runs one password hash or verification on the blocking pool, at most one per core.
    async fn hashing<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, AccountError> {
        let _permit = self
            .hashing
            .acquire()
            .await
            .map_err(|_| AccountError::Hashing)?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|_| AccountError::Hashing)
    }

    /// Creates the user and its first session. `email` must already be normalised. The first
    /// account of the instance becomes its owner; with [`Admission::Invitation`], later ones
    /// need a live invitation, spent in the same transaction that creates the account.
    pub async fn sign_up(
        &self,
        name: &str,
        email: &str,
        password: &str,
        admission: Admission<'_>,
    ) -> Result<Issued, AccountError> {
        // Cheap refusals first: the argon2 hash is the expensive part.
        let invitation = match admission {
            Admission::Open => None,
            Admission::Invitation(None) => {
                if self.has_users().await? {
                    return Err(AccountError::InvitationRequired);
                }
                None
            }
            Admission::Invitation(Some(token)) => Some(
                invitations::live_id(&self.db, token)
                    .await?
                    .ok_or(AccountError::InvitationRequired)?,
            ),
        };
        if self.find_user_by_email(email).await?.is_some() {
            return Err(AccountError::EmailTaken);
        }
        let pw = password.to_owned();
        let phc = self
            .hashing(move || password::hash(&pw))
            .await?
            .map_err(|_| AccountError::Hashing)?;
        let first_only = matches!(admission, Admission::Invitation(None));
        let user = self
            .create_user(name, email, &phc, first_only, invitation.as_deref(), false)
            .await?;
        self.issue(user).await
    }

    /// Creates a user with a generated password, for operators (`streamwatch users add`).
    /// Returns the user and the password, shown once: it must be changed at the first sign-in.
    pub async fn add_user(&self, name: &str, email: &str) -> Result<(User, String), AccountError> {
        if self.find_user_by_email(email).await?.is_some() {
            return Err(AccountError::EmailTaken);
        }
        // The first 32 characters of a 256-bit URL-safe token: 192 bits, within the 8–128 rule.
        let password = token::new_token().chars().take(32).collect::<String>();
        let pw = password.clone();
        let phc = self
            .hashing(move || password::hash(&pw))
            .await?
            .map_err(|_| AccountError::Hashing)?;
        let user = self
            .create_user(name, email, &phc, false, None, true)
            .await?;
        Ok((user, password))
    }

    /// Inserts a user: the owner when no account exists yet, else a member. `first_only`
    /// refuses it ([`AccountError::InvitationRequired`]) unless it is the first account;
    /// `invitation` is spent in the same transaction (two sign-ups with one token: one wins).
    async fn create_user(
        &self,
        name: &str,
        email: &str,
        phc: &str,
        first_only: bool,
        invitation: Option<&str>,
        must_change_password: bool,
    ) -> Result<User, AccountError> {
        // Two attempts: a sign-up that lost the race to be the owner (the unique index on the
        // owner role refused it) is a member the second time.
        for attempt in 0..2 {
            let id = new_id();
            match self
                .insert_user(
                    &id,
                    name,
                    email,
                    phc,
                    first_only,
                    invitation,
                    must_change_password,
                )
                .await
            {
                Ok(role) => {
                    return Ok(User {
                        id,
                        email: email.to_owned(),
                        name: name.to_owned(),
                        role,
                        must_change_password,
                    })
                }
                Err(InsertError::Db(e)) if e.is_unique_violation() => {
                    if self.find_user_by_email(email).await?.is_some() {
                        // Two sign-ups racing for one e-mail: the loser gets the same answer
                        // as if it came second.
                        return Err(AccountError::EmailTaken);
                    }
                    if first_only || attempt == 1 {
                        // Another sign-up became the first account meanwhile.
                        return Err(AccountError::InvitationRequired);
                    }
                }
                Err(InsertError::Db(e)) => return Err(e.into()),
                Err(InsertError::Refused) => return Err(AccountError::InvitationRequired),
            }
        }
        Err(AccountError::InvitationRequired)
    }

    #[allow(clippy::too_many_arguments)]
    async fn insert_user(
        &self,
        id: &str,
        name: &str,
        email: &str,
        phc: &str,
        first_only: bool,
        invitation: Option<&str>,
        must_change_password: bool,
    ) -> Result<Role, InsertError> {
        let now = now_ms();
        let mut tx = self.db.pool.begin().await.map_err(db_err)?;
        // The role is decided by the same statement that inserts: no window in which two
        // sign-ups both see an empty instance and both stay owners (the unique index on the
        // owner role refuses the second).
        let only_first = if first_only {
            " WHERE NOT EXISTS (SELECT 1 FROM users)"
        } else {
            ""
        };
        let inserted = sqlx::query(&format!(
            "INSERT INTO users (id, email, name, password_hash, created_at, role, must_change_password)              SELECT $1, $2, $3, $4, $5,                     CASE WHEN EXISTS (SELECT 1 FROM users) THEN 'member' ELSE 'owner' END, $6{only_first}"
        ))
        .bind(id)
        .bind(email)
        .bind(name)
        .bind(phc)
        .bind(now)
        .bind(i64::from(must_change_password))
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        if inserted.rows_affected() == 0 {
            return Err(InsertError::Refused);
        }
        if let Some(invitation) = invitation {
            // Spent only if still live; a concurrent sign-up with the same token waits on the
            // row and then finds it used.
            if !invitations::spend(&mut tx, invitation, id, now)
                .await
                .map_err(db_err)?
            {
                return Err(InsertError::Refused);
            }
        }
        let (role,): (String,) = sqlx::query_as("SELECT role FROM users WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(Role::from_db(&role))
    }

    /// True once any account exists.
    pub async fn has_users(&self) -> Result<bool, AccountError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM users LIMIT 1")
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Every account, oldest first (the owner's team page), at most [`TEAM_LIST_MAX`].
    pub async fn members(&self) -> Result<Vec<Member>, AccountError> {
        let rows: Vec<MemberRow> = sqlx::query_as(
            "SELECT id, email, name, role, must_change_password, created_at FROM users \
             ORDER BY created_at, id LIMIT $1",
        )
        .bind(TEAM_LIST_MAX)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Member {
                user: User {
                    id: r.id,
                    email: r.email,
                    name: r.name,
                    role: Role::from_db(&r.role),
                    must_change_password: r.must_change_password != 0,
                },
                created_at: r.created_at,
            })
            .collect())
    }

    /// Replaces the signed-in user's password after checking the current one, ends every
    /// session of the user (other devices included) and issues a fresh one for this device.
    pub async fn change_password(
        &self,
        user: &User,
        current: &str,
        new: &str,
    ) -> Result<Issued, AccountError> {
        let (phc,): (String,) = sqlx::query_as("SELECT password_hash FROM users WHERE id = $1")
            .bind(&user.id)
            .fetch_one(&self.db.pool)
            .await?;
        let pw = current.to_owned();
        if !self.hashing(move || password::verify(&pw, &phc)).await? {
            return Err(AccountError::InvalidPassword);
        }
        if current == new {
            return Err(AccountError::PasswordUnchanged);
        }
        let pw = new.to_owned();
        let phc = self
            .hashing(move || password::hash(&pw))
            .await?
            .map_err(|_| AccountError::Hashing)?;
        let mut tx = self.db.pool.begin().await?;
        sqlx::query("UPDATE users SET password_hash = $1, must_change_password = 0 WHERE id = $2")
            .bind(&phc)
            .bind(&user.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sessions WHERE user_id = $1")
            .bind(&user.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let user = User {
            must_change_password: false,
            ..user.clone()
        };
        self.issue(user).await
    }

    /// Checks the password and issues a fresh session (a new token at every sign-in).
    pub async fn sign_in(&self, email: &str, password: &str) -> Result<Issued, AccountError> {
        let found: Option<UserRow> = sqlx::query_as(
            "SELECT id, email, name, role, must_change_password, password_hash FROM users WHERE email = $1",
        )
                .bind(email)
                .fetch_optional(&self.db.pool)
                .await?;
        let (user, phc) = match found {
            Some(r) => (
                Some(User {
                    id: r.id,
                    email: r.email,
                    name: r.name,
                    role: Role::from_db(&r.role),
                    must_change_password: r.must_change_password != 0,
                }),
                r.password_hash,
            ),
            None => (None, self.dummy_hash.to_string()),
        };
        let pw = password.to_owned();
        let ok = self.hashing(move || password::verify(&pw, &phc)).await?;
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
        metrics::counter!("streamwatch_auth_sessions_created_total").increment(1);
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
        let row: Option<SessionUserRow> = sqlx::query_as(
            "SELECT s.id AS sid, s.user_id, s.created_at, s.updated_at, s.expires_at, \
                    u.email, u.name, u.role, u.must_change_password \
             FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = $1",
        )
        .bind(sha256_hex(token))
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let now = now_ms();
        let user = User {
            id: row.user_id.clone(),
            email: row.email,
            name: row.name,
            role: Role::from_db(&row.role),
            must_change_password: row.must_change_password != 0,
        };
        let mut session = Session {
            id: row.sid,
            user_id: row.user_id,
            created_at: row.created_at,
            updated_at: row.updated_at,
            expires_at: row.expires_at,
        };
        if session.expires_at <= now || now - session.created_at >= SESSION_MAX_LIFETIME_MS {
            sqlx::query("DELETE FROM sessions WHERE id = $1")
                .bind(&session.id)
                .execute(&self.db.pool)
                .await?;
            return Ok(None);
        }
        let mut refreshed_cookie = None;
        let slid = slid_expiry(session.created_at, now);
        if now - session.updated_at >= SESSION_REFRESH_MS && slid > session.expires_at {
            session.updated_at = now;
            session.expires_at = slid;
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

    async fn find_user_by_email(&self, email: &str) -> Result<Option<String>, AccountError> {
        let row: Option<(String,)> = sqlx::query_as("SELECT id FROM users WHERE email = $1")
            .bind(email)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(row.map(|(id,)| id))
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

/// Most accounts the team page lists.
pub const TEAM_LIST_MAX: i64 = 500;

/// Why inserting a user did not happen.
enum InsertError {
    /// Not the first account (`first_only`), or the invitation was no longer live.
    Refused,
    Db(DbError),
}

fn db_err(e: sqlx::Error) -> InsertError {
    InsertError::Db(DbError(e))
}

/// A user row with its password hash (sign-in).
#[derive(sqlx::FromRow)]
struct UserRow {
    id: String,
    email: String,
    name: String,
    role: String,
    must_change_password: i64,
    password_hash: String,
}

/// A user as the team page lists it.
#[derive(sqlx::FromRow)]
struct MemberRow {
    id: String,
    email: String,
    name: String,
    role: String,
    must_change_password: i64,
    created_at: i64,
}

/// A session joined with its user (cookie authentication).
#[derive(sqlx::FromRow)]
struct SessionUserRow {
    sid: String,
    user_id: String,
    created_at: i64,
    updated_at: i64,
    expires_at: i64,
    email: String,
    name: String,
    role: String,
    must_change_password: i64,
}

/// Lower-cased, trimmed e-mail if it is plausibly deliverable: one `@`, a non-empty local
/// part, a dotted domain, no whitespace or control characters, at most 254 bytes.
pub fn normalize_email(raw: &str) -> Option<String> {
    let e = raw.trim();
    if e.is_empty()
        || e.len() > 254
        || e.chars()
            .any(|c| c.is_whitespace() || crate::validation::is_forbidden_char(c))
    {
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
    fn a_session_slides_by_seven_days_up_to_thirty_days_after_sign_in() {
        use super::{slid_expiry, SESSION_MAX_LIFETIME_MS, SESSION_TTL_MS};
        let day = 24 * 3600 * 1000;
        assert_eq!(slid_expiry(0, 2 * day), 2 * day + SESSION_TTL_MS);
        assert_eq!(slid_expiry(0, 25 * day), SESSION_MAX_LIFETIME_MS);
        assert_eq!(slid_expiry(0, 29 * day), SESSION_MAX_LIFETIME_MS);
    }

    /// At most one password hash per core runs at once; the rest wait (400 concurrent sign-ins
    /// once took 1 GiB of argon2 memory).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn password_hashing_is_bounded_by_the_cores() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().expect("dir");
        let db = crate::db::Db::connect(None, dir.path()).await.expect("db");
        let accounts = super::Accounts::new(db, &[7u8; 32]).expect("accounts");
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..24)
            .map(|_| {
                let (a, running, most) = (accounts.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    a.hashing(move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                })
            })
            .collect();
        for j in jobs {
            j.await.expect("join").expect("hashed");
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let most = most.load(Ordering::SeqCst);
        assert!(
            (1..=cores).contains(&most),
            "{most} hashes at once on {cores} cores"
        );
    }

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
            // Zero-width and BOM characters would make a second account that looks identical.
            "ada\u{200b}@example.com",
            "\u{feff}ada@example.com",
            "ada@exa\u{200d}mple.com",
        ] {
            assert!(normalize_email(bad).is_none(), "{bad:?}");
        }
    }
}
