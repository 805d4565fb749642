//! API keys (decisions.md §8): minted as `svc_` + 43 base62 characters (256 bits), stored
//! only as SHA-256, listed per user, soft-revoked. Telemetry authentication resolves keys by
//! hash through [`cache::KeyCache`].

pub mod cache;

use rand::Rng;

use crate::accounts::token::sha256_hex;
use crate::db::{Db, DbError};
use crate::time::{new_id, now_ms};

pub const KEY_PREFIX: &str = "svc_";
pub const LABEL_MAX: usize = 120;
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// 43 base62 characters carry 256.03 bits.
const KEY_CHARS: usize = 43;

/// Key metadata as listed (never the raw key).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ApiKey {
    pub id: String,
    pub label: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A key just minted: the only moment the raw key exists outside the client.
#[derive(Clone, Debug)]
pub struct Minted {
    pub key: ApiKey,
    pub raw_key: String,
}

/// An active key resolved from its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyOwner {
    pub key_id: String,
    pub user_id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("key not found")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for KeyError {
    fn from(e: sqlx::Error) -> Self {
        KeyError::Db(DbError(e))
    }
}

/// A fresh raw key from the OS generator.
pub fn generate_raw_key() -> String {
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..KEY_CHARS)
        .map(|_| BASE62[rng.gen_range(0..BASE62.len())] as char)
        .collect();
    format!("{KEY_PREFIX}{body}")
}

/// Key operations over the relational store.
#[derive(Clone)]
pub struct Keys {
    db: Db,
}

impl Keys {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Mints a key labelled `label` for `user_id`.
    pub async fn mint(&self, user_id: &str, label: &str) -> Result<Minted, KeyError> {
        let label = label.to_owned();
        let raw_key = generate_raw_key();
        let key = ApiKey {
            id: new_id(),
            label,
            created_at: now_ms(),
            last_used_at: None,
            revoked_at: None,
        };
        sqlx::query(
            "INSERT INTO api_keys (id, user_id, label, key_hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&key.id)
        .bind(user_id)
        .bind(&key.label)
        .bind(sha256_hex(&raw_key))
        .bind(key.created_at)
        .execute(&self.db.pool)
        .await?;
        Ok(Minted { key, raw_key })
    }

    /// Every key of `user_id`, newest first, revoked ones included.
    pub async fn list(&self, user_id: &str) -> Result<Vec<ApiKey>, KeyError> {
        let keys = sqlx::query_as(
            "SELECT id, label, created_at, last_used_at, revoked_at FROM api_keys \
             WHERE user_id = $1 ORDER BY created_at DESC, seq DESC",
        )
        .bind(user_id)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(keys)
    }

    /// Soft-revokes one of `user_id`'s keys; a second revoke keeps the first `revokedAt`.
    /// Returns the key hash so caches can drop it.
    pub async fn revoke(&self, user_id: &str, key_id: &str) -> Result<String, KeyError> {
        let (key_hash,): (String,) =
            sqlx::query_as("SELECT key_hash FROM api_keys WHERE id = $1 AND user_id = $2")
                .bind(key_id)
                .bind(user_id)
                .fetch_optional(&self.db.pool)
                .await?
                .ok_or(KeyError::NotFound)?;
        sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now_ms())
            .bind(key_id)
            .execute(&self.db.pool)
            .await?;
        Ok(key_hash)
    }

    /// The owner of the active key with this hash.
    pub async fn resolve_hash(&self, key_hash: &str) -> Result<Option<KeyOwner>, DbError> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT id, user_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
        )
        .bind(key_hash)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.map(|(key_id, user_id)| KeyOwner { key_id, user_id }))
    }

    /// Records that these keys were used at `at` (batched, off the request path).
    pub async fn touch(&self, key_ids: &[String], at: i64) -> Result<(), DbError> {
        for id in key_ids {
            sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                .bind(at)
                .bind(id)
                .execute(&self.db.pool)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_keys_have_prefix_and_256_bits() {
        let k = generate_raw_key();
        assert!(k.starts_with("svc_"));
        assert_eq!(k.len(), 4 + 43);
        assert!(k[4..].bytes().all(|b| BASE62.contains(&b)));
        assert_ne!(k, generate_raw_key());
    }
}
