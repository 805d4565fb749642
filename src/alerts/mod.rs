//! Alerts (decisions.md §12, alerts.md): rules that watch streams and QoE metrics, incidents
//! they open and resolve, channels that notify people, and a durable outbox that delivers every
//! notification exactly once per channel (receivers dedup by `webhook-id`), even across crashes.
//!
//! Module map:
//! - [`model`]: the rows (channel, rule, incident, delivery) and their decoding;
//! - [`channels`], [`rules`]: create, read, change, delete (each user's own);
//! - [`evaluate`]: stream rules after each probe, QoE rules and reminders on a schedule;
//! - [`incidents`]: opening and resolving incidents (each transition writes its outbox rows
//!   in its own transaction), on a probe, a rule switched off or deleted, a stream deleted;
//!   listing them;
//! - [`outbox`]: grouping notifications per channel into deliveries, claiming due ones,
//!   recording each attempt;
//! - [`payload`]: what each channel type receives, Standard Webhooks signatures;
//! - [`sender`]: the worker that sends through the SSRF-guarded client;
//! - [`duration`], [`seal`]: the contract's durations; secrets sealed at rest;
//! - [`retention`]: deliveries older than 30 days are deleted.

pub mod channels;
pub mod duration;
pub mod evaluate;
pub mod incidents;
pub mod model;
pub mod outbox;
pub mod payload;
pub mod retention;
pub mod rules;
pub mod seal;
pub mod sender;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::db::{Db, DbError};
use crate::ssrf::Guard;
use crate::validation::FieldErrors;
pub use model::{Channel, Delivery, Incident, Rule};
pub use seal::Sealer;

/// Why an alerts request was refused.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("invalid body")]
    Invalid(FieldErrors),
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Seal(#[from] seal::SealError),
}

impl From<sqlx::Error> for AlertError {
    fn from(e: sqlx::Error) -> Self {
        AlertError::Db(DbError(e))
    }
}

pub(crate) fn invalid(field: &str, msg: impl Into<String>) -> AlertError {
    AlertError::Invalid(FieldErrors::from([(field.to_owned(), msg.into())]))
}

/// The alerts service: storage, the guard every target passes, and the sender's wake-up.
#[derive(Clone)]
pub struct Alerts {
    pub(crate) db: Db,
    pub(crate) sealer: Sealer,
    pub(crate) guard: Arc<Guard>,
    /// Rung when a delivery may have become due (a test, a resend, a transition).
    pub(crate) wake: Arc<Notify>,
    /// `STREAMWATCH_PUBLIC_URL`, which messages link under.
    pub(crate) public_url: Option<String>,
}

impl Alerts {
    /// `guard` is the alert targets' own (`STREAMWATCH_ALERTS_ALLOW_PRIVATE`), not the
    /// prober's; `public_url` the address messages link under.
    pub fn new(
        db: Db,
        server_secret: &[u8],
        guard: Arc<Guard>,
        public_url: Option<String>,
    ) -> Self {
        Alerts {
            db,
            sealer: Sealer::new(server_secret),
            guard,
            wake: Arc::new(Notify::new()),
            public_url,
        }
    }

    /// Tells the local sender to look for due deliveries now.
    pub fn wake_sender(&self) {
        self.wake.notify_one();
    }
}

/// `whsec_` + base64 of 32 random bytes: a Standard Webhooks signing secret.
pub fn new_webhook_secret() -> String {
    use base64::Engine as _;
    use rand::RngCore;
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

/// `msg_` + a fresh id: the `webhook-id` of a delivery, the same on every attempt.
pub fn new_webhook_id() -> String {
    format!("msg_{}", crate::time::new_id())
}
