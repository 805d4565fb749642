//! The landing-page waitlist (decisions.md §9): an e-mail address, stored once.

use serde_json::{Map, Value};

use crate::accounts::normalize_email;
use crate::db::{Db, DbError};
use crate::time::now_ms;
use crate::validation::FieldErrors;

#[derive(Debug, thiserror::Error)]
pub enum WaitlistError {
    #[error("invalid body")]
    Invalid(FieldErrors),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Adds `{ email }` to the waitlist; the same address twice is a no-op.
pub async fn join(db: &Db, body: &Map<String, Value>) -> Result<(), WaitlistError> {
    let email = body
        .get("email")
        .and_then(Value::as_str)
        .and_then(normalize_email)
        .ok_or_else(|| {
            WaitlistError::Invalid(FieldErrors::from([(
                "email".to_owned(),
                "Invalid email".to_owned(),
            )]))
        })?;
    sqlx::query(
        "INSERT INTO waitlist (email, created_at) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING",
    )
    .bind(email)
    .bind(now_ms())
    .execute(&db.pool)
    .await
    .map_err(DbError)?;
    Ok(())
}
