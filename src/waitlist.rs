//! The landing-page waitlist (decisions.md §9): an e-mail address, stored once.

use crate::db::{Db, DbError};
use crate::time::now_ms;

/// Adds a normalised e-mail (see [`crate::accounts::normalize_email`]) to the waitlist; the
/// same address twice is a no-op.
pub async fn join(db: &Db, email: &str) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO waitlist (email, created_at) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING",
    )
    .bind(email)
    .bind(now_ms())
    .execute(&db.pool)
    .await?;
    Ok(())
}
