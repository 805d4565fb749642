//! Channels: create (the webhook secret shown once), list, change, delete, rotate the secret,
//! send a test. Every target URL passes the SSRF guard here and again at every send.

use super::model::{Channel, CHANNEL_COLUMNS};
use super::outbox::OnDemand;
use super::{invalid, new_webhook_secret, outbox, AlertError, Alerts};
use crate::db::Engine;
use crate::ssrf::GuardError;
use crate::states::{ChannelType, DeliveryEvent};
use crate::time::{new_id, now_ms};

/// PagerDuty's Events API v2 endpoint: the default `url` of a `pagerduty` channel.
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";
/// Default and bounds of `groupWindow`.
pub const GROUP_WINDOW_DEFAULT_MS: i64 = 30_000;
pub const GROUP_WINDOW_MAX_MS: i64 = 600_000;
/// How long a rotated-out webhook secret keeps signing.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 3600 * 1000;
/// Message of a `url` that is not an absolute URL.
pub const MSG_INVALID_URL: &str = "Must be a valid URL";
/// Channels one user may have (decisions.md §14).
pub const MAX_CHANNELS_PER_USER: i64 = 50;

/// A channel to create (body already parsed).
#[derive(Clone, Debug, Default)]
pub struct NewChannel {
    pub name: String,
    pub kind: Option<ChannelType>,
    pub url: Option<String>,
    pub routing_key: Option<String>,
    pub group_window_ms: Option<i64>,
}

/// A PATCH of a channel: the fields to change.
#[derive(Clone, Debug, Default)]
pub struct ChannelChange {
    pub name: Option<String>,
    pub url: Option<String>,
    pub routing_key: Option<String>,
    pub group_window_ms: Option<i64>,
    pub enabled: Option<bool>,
}

/// A channel just created, with its secret (webhook only) and its URL in the clear this once.
pub struct Created {
    pub channel: Channel,
    pub secret: Option<String>,
    /// The target as given (reads show a Slack or Discord URL masked).
    pub url: String,
}

/// Slack and Discord webhook URLs are credentials (anyone holding one posts to the channel):
/// sealed at rest and shown masked.
fn url_is_secret(kind: ChannelType) -> bool {
    matches!(kind, ChannelType::Slack | ChannelType::Discord)
}

/// A secret URL as reads show it: its origin and `/…/****`
/// (`https://hooks.slack.com/…/****`).
pub fn mask_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!("{}/…/****", u.origin().ascii_serialization()),
        Err(_) => "****".to_owned(),
    }
}

/// The last four characters of a routing key, as reads show it.
fn last4(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    chars[chars.len().saturating_sub(4)..].iter().collect()
}

impl Alerts {
    /// The guard's verdict on a target, as the field message of `url`.
    async fn check_target(&self, url: &str) -> Result<(), AlertError> {
        match self.guard.check_url(url).await {
            Ok(_) => Ok(()),
            Err(GuardError::InvalidUrl) => Err(invalid("url", MSG_INVALID_URL)),
            Err(e) => Err(invalid("url", e.to_string())),
        }
    }

    pub async fn create_channel(
        &self,
        user_id: &str,
        new: &NewChannel,
    ) -> Result<Created, AlertError> {
        let kind = new.kind.ok_or_else(|| invalid("type", "Required"))?;
        let url = match (kind, new.url.as_deref()) {
            (_, Some(u)) => u.to_owned(),
            (ChannelType::Pagerduty, None) => PAGERDUTY_URL.to_owned(),
            (_, None) => return Err(invalid("url", "Required")),
        };
        let routing_key = match (kind, new.routing_key.as_deref()) {
            (ChannelType::Pagerduty, Some(k)) => Some(k),
            (ChannelType::Pagerduty, None) => return Err(invalid("routingKey", "Required")),
            (_, Some(_)) => {
                return Err(invalid(
                    "routingKey",
                    "Only pagerduty channels have a routing key",
                ))
            }
            (_, None) => None,
        };
        self.check_target(&url).await?;
        let secret = (kind == ChannelType::Webhook).then(new_webhook_secret);
        let (shown, sealed) = self.stored_url(kind, &url);
        let id = new_id();
        let mut tx = self.db.pool.begin().await?;
        lock_user(&mut tx, self.db.engine, "channels", user_id).await?;
        // Inserted only under the cap (counted in the same statement).
        let done = sqlx::query(
            "INSERT INTO alert_channels (id, user_id, name, type, url, url_sealed, \
                 routing_key_sealed, routing_key_last4, secret_sealed, group_window_ms, enabled, \
                 created_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11 \
             WHERE (SELECT COUNT(*) FROM alert_channels WHERE user_id = $2) < $12",
        )
        .bind(&id)
        .bind(user_id)
        .bind(&new.name)
        .bind(kind.as_str())
        .bind(&shown)
        .bind(sealed)
        .bind(routing_key.map(|k| self.sealer.seal(k)))
        .bind(routing_key.map(last4))
        .bind(secret.as_deref().map(|s| self.sealer.seal(s)))
        .bind(new.group_window_ms.unwrap_or(GROUP_WINDOW_DEFAULT_MS))
        .bind(now_ms())
        .bind(MAX_CHANNELS_PER_USER)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(invalid(
                "name",
                format!("Channel limit reached ({MAX_CHANNELS_PER_USER})"),
            ));
        }
        tx.commit().await?;
        Ok(Created {
            channel: self.channel(user_id, &id).await?,
            secret,
            url,
        })
    }

    /// What a channel row stores of its target: the URL reads show (masked when it is a
    /// secret) and the sealed URL the sender opens (Slack and Discord only).
    fn stored_url(&self, kind: ChannelType, url: &str) -> (String, Option<String>) {
        if url_is_secret(kind) {
            (mask_url(url), Some(self.sealer.seal(url)))
        } else {
            (url.to_owned(), None)
        }
    }

    /// Seals what older versions stored in the clear: Slack and Discord URLs, and PagerDuty
    /// routing keys inside frozen delivery bodies (the key is added at send time now). Run at
    /// start-up; idempotent. When it changed anything, the old row versions are wiped from the
    /// files too (SQLite: `VACUUM` and a truncating WAL checkpoint; PostgreSQL: `VACUUM FULL`
    /// of the tables): a copy of the files then holds no secret in the clear.
    pub async fn seal_at_rest(&self) -> Result<(), AlertError> {
        let (channels, deliveries) = self.seal_rows().await?;
        if channels + deliveries == 0 {
            return Ok(());
        }
        tracing::info!(
            channels,
            deliveries,
            "sealed channel secrets an older version stored in the clear"
        );
        let wipe: &[&str] = match self.db.engine {
            Engine::Sqlite => &["VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"],
            Engine::Postgres => &["VACUUM (FULL) alert_channels, alert_deliveries"],
        };
        for statement in wipe {
            sqlx::query(statement).execute(&self.db.pool).await?;
        }
        Ok(())
    }

    /// The rows [`Alerts::seal_at_rest`] changes: `(channels, deliveries)`.
    async fn seal_rows(&self) -> Result<(u64, u64), AlertError> {
        let mut changed = (0, 0);
        let clear: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT id, type, url FROM alert_channels \
             WHERE type IN ('slack', 'discord') AND url_sealed IS NULL",
        )
        .fetch_all(&self.db.pool)
        .await?;
        for (id, kind, url) in clear {
            let Some(kind) = ChannelType::parse(&kind) else {
                continue;
            };
            let (shown, sealed) = self.stored_url(kind, &url);
            sqlx::query(
                "UPDATE alert_channels SET url = $1, url_sealed = $2 \
                 WHERE id = $3 AND url_sealed IS NULL",
            )
            .bind(shown)
            .bind(sealed)
            .bind(&id)
            .execute(&self.db.pool)
            .await?;
            changed.0 += 1;
        }
        let bodies: Vec<(String, String)> = sqlx::query_as(
            "SELECT d.id, d.body FROM alert_deliveries d \
             JOIN alert_channels c ON c.id = d.channel_id \
             WHERE c.type = 'pagerduty' AND d.body LIKE '%\"routing_key\":\"_%'",
        )
        .fetch_all(&self.db.pool)
        .await?;
        for (id, body) in bodies {
            let Ok(parsed) = serde_json::from_str::<Vec<serde_json::Value>>(&body) else {
                continue;
            };
            let scrubbed = super::payload::with_routing_key(parsed, "");
            sqlx::query("UPDATE alert_deliveries SET body = $1 WHERE id = $2")
                .bind(serde_json::to_string(&scrubbed).unwrap_or_else(|_| "[]".into()))
                .bind(&id)
                .execute(&self.db.pool)
                .await?;
            changed.1 += 1;
        }
        Ok(changed)
    }

    /// The caller's channels, newest first.
    pub async fn channels(&self, user_id: &str) -> Result<Vec<Channel>, AlertError> {
        Ok(sqlx::query_as(&format!(
            "SELECT {CHANNEL_COLUMNS} FROM alert_channels WHERE user_id = $1 \
             ORDER BY created_at DESC, seq DESC"
        ))
        .bind(user_id)
        .fetch_all(&self.db.pool)
        .await?)
    }

    /// One of the caller's channels.
    pub async fn channel(&self, user_id: &str, id: &str) -> Result<Channel, AlertError> {
        sqlx::query_as(&format!(
            "SELECT {CHANNEL_COLUMNS} FROM alert_channels WHERE id = $1 AND user_id = $2"
        ))
        .bind(id)
        .bind(user_id)
        .fetch_optional(&self.db.pool)
        .await?
        .ok_or(AlertError::NotFound)
    }

    pub async fn update_channel(
        &self,
        user_id: &str,
        id: &str,
        change: &ChannelChange,
    ) -> Result<Channel, AlertError> {
        let current = self.channel(user_id, id).await?;
        if let Some(url) = &change.url {
            self.check_target(url).await?;
        }
        if change.routing_key.is_some() && current.kind != ChannelType::Pagerduty {
            return Err(invalid(
                "routingKey",
                "Only pagerduty channels have a routing key",
            ));
        }
        let routing_key = change.routing_key.as_deref();
        let (url, url_sealed) = match change.url.as_deref() {
            Some(u) => {
                let (shown, sealed) = self.stored_url(current.kind, u);
                (Some(shown), sealed)
            }
            None => (None, None),
        };
        // `enabled: true` clears the reason it was disabled.
        sqlx::query(
            "UPDATE alert_channels SET name = COALESCE($1, name), url = COALESCE($2, url), \
                 url_sealed = COALESCE($9, url_sealed), \
                 routing_key_sealed = COALESCE($3, routing_key_sealed), \
                 routing_key_last4 = COALESCE($4, routing_key_last4), \
                 group_window_ms = COALESCE($5, group_window_ms), \
                 enabled = COALESCE($6, enabled), \
                 disabled_reason = CASE WHEN $6 = 1 THEN NULL ELSE disabled_reason END \
             WHERE id = $7 AND user_id = $8",
        )
        .bind(change.name.as_deref())
        .bind(url)
        .bind(routing_key.map(|k| self.sealer.seal(k)))
        .bind(routing_key.map(last4))
        .bind(change.group_window_ms)
        .bind(change.enabled.map(i64::from))
        .bind(id)
        .bind(user_id)
        .bind(url_sealed)
        .execute(&self.db.pool)
        .await?;
        if change.enabled == Some(false) {
            outbox::kill_pending(&self.db, id, "channel disabled").await?;
        }
        self.channel(user_id, id).await
    }

    /// Deletes a channel; its pending deliveries become `dead` (the log keeps them).
    pub async fn delete_channel(&self, user_id: &str, id: &str) -> Result<(), AlertError> {
        let done = sqlx::query("DELETE FROM alert_channels WHERE id = $1 AND user_id = $2")
            .bind(id)
            .bind(user_id)
            .execute(&self.db.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(AlertError::NotFound);
        }
        outbox::kill_pending(&self.db, id, "channel deleted").await?;
        Ok(())
    }

    /// A new signing secret for a webhook channel; the old one keeps signing (second
    /// signature) for 24 hours, so receivers can switch without losing a message.
    pub async fn rotate_secret(&self, user_id: &str, id: &str) -> Result<String, AlertError> {
        let current = self.channel(user_id, id).await?;
        if current.kind != ChannelType::Webhook {
            return Err(invalid(
                "type",
                "Only webhook channels have a signing secret",
            ));
        }
        let secret = new_webhook_secret();
        let now = now_ms();
        sqlx::query(
            "UPDATE alert_channels SET previous_secret_sealed = secret_sealed, \
                 previous_secret_until = $1, secret_sealed = $2 WHERE id = $3 AND user_id = $4",
        )
        .bind(now + ROTATION_OVERLAP_MS)
        .bind(self.sealer.seal(&secret))
        .bind(id)
        .bind(user_id)
        .execute(&self.db.pool)
        .await?;
        Ok(secret)
    }

    /// Queues a `test` delivery to the channel, due at once (`dead` at once, saying why, when
    /// the channel is disabled), and answers it as queued; at most
    /// [`outbox::ON_DEMAND_PER_MINUTE`] a minute per channel.
    pub async fn test_channel(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<super::Delivery, AlertError> {
        let channel = self.channel(user_id, id).await?;
        let now = now_ms();
        let mut tx = self.db.pool.begin().await?;
        outbox::lock_on_demand(&mut tx, self.db.engine, &channel.id).await?;
        let delivery_id = outbox::create(
            &mut tx,
            user_id,
            &channel.id,
            DeliveryEvent::Test,
            &[],
            now,
            0,
        )
        .await?;
        if let Some(wait) = outbox::over_limit(&mut tx, &channel.id, OnDemand::Test, now).await? {
            tx.rollback().await?;
            return Err(invalid(
                "channel",
                format!("Too many test deliveries; try again in {wait} s"),
            ));
        }
        outbox::bury_if_disabled(&mut tx, &delivery_id, channel.enabled.0).await?;
        // The 202 answer is the delivery as queued (`pending`, or `dead` for a disabled
        // channel), read in the transaction that wrote it: read after the commit, it would race
        // the sender (this instance's, woken below, or another's polling) and say `pending`,
        // `sent` or `failed` by timing. Its fate is read with GET …/deliveries/{id}.
        let queued = outbox::read(&mut tx, user_id, &delivery_id).await?;
        tx.commit().await?;
        self.wake_sender();
        Ok(queued)
    }

    /// The engine of the store (SQLite serialises writers; PostgreSQL needs row locks).
    pub(crate) fn engine(&self) -> Engine {
        self.db.engine
    }
}

/// On PostgreSQL, creations of one user's `what` take turns (a lock until commit), so two at
/// once cannot both pass a cap. SQLite has one writer at a time.
pub(crate) async fn lock_user(
    tx: &mut sqlx::AnyConnection,
    engine: Engine,
    what: &str,
    user_id: &str,
) -> Result<(), AlertError> {
    if engine == Engine::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 2))")
            .bind(format!("{what}:{user_id}"))
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn last4_of_short_and_long_keys() {
        assert_eq!(super::last4("R0123456789abcdef"), "cdef");
        assert_eq!(super::last4("ab"), "ab");
    }

    #[test]
    fn secret_urls_are_masked_to_their_origin() {
        assert_eq!(
            super::mask_url("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX"),
            "https://hooks.slack.com/…/****"
        );
        assert_eq!(
            super::mask_url("https://discord.com:8443/api/webhooks/1/abc"),
            "https://discord.com:8443/…/****"
        );
        assert_eq!(super::mask_url("not a url"), "****");
    }
}
