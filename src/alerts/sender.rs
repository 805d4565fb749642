//! The delivery worker: claims due deliveries, sends each through the SSRF-guarded client (a
//! 10 s timeout per request), and records the outcome of every attempt (alerts.md §3).
//!
//! Fair delivery (decisions.md §14): each channel is its own queue with at most 4 deliveries
//! in flight, each user at most 16 across their channels ([`outbox::Caps`]); a delivery sends
//! its requests one after the other, so a channel never has more than 4 requests in flight,
//! and a receiver that never answers holds its own channel's slots, never another's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::outbox::{self, Claimed, Outcome};
use super::payload::{self, signature};
use super::Alerts;
use crate::db::{DbError, Engine};
use crate::ssrf::{guard_refusal, GuardError};
use crate::states::{ChannelType, DeliveryStatus};
use crate::time::now_ms;

/// `User-Agent` of every notification.
pub const USER_AGENT: &str = concat!("streamwatch/", env!("CARGO_PKG_VERSION"));

/// Tuning of the worker.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Timeout of one request.
    pub timeout: Duration,
    /// How often the outbox is polled for deliveries another instance queued or whose retry
    /// came due (local transitions wake the worker at once).
    pub poll: Duration,
    /// Deliveries this instance sends at once at most (a bound on its sockets and memory,
    /// far above what fairness lets one user hold).
    pub batch: usize,
    /// Deliveries in flight per channel and per user.
    pub caps: outbox::Caps,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            timeout: Duration::from_secs(10),
            poll: Duration::from_secs(1),
            batch: 512,
            caps: outbox::Caps::default(),
        }
    }
}

/// What the sender reads of a channel: the target and the opened secrets.
#[derive(sqlx::FromRow)]
struct Target {
    #[sqlx(rename = "type", try_from = "String")]
    kind: ChannelType,
    url: String,
    /// Slack and Discord: the real URL (`url` is its masked form).
    url_sealed: Option<String>,
    routing_key_sealed: Option<String>,
    secret_sealed: Option<String>,
    previous_secret_sealed: Option<String>,
    previous_secret_until: Option<i64>,
}

/// Runs the worker until `stop`.
pub async fn run(alerts: Alerts, cfg: SenderConfig, mut stop: watch::Receiver<bool>) {
    let client = match crate::ssrf::guarded_client(Arc::clone(&alerts.guard))
        .user_agent(USER_AGENT)
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "alert sender: cannot build its HTTP client");
            return;
        }
    };
    // The embedded store has one process: leases of a previous one (killed mid-attempt) can
    // be taken back now instead of when they expire.
    if alerts.engine() == Engine::Sqlite {
        let _ = sqlx::query("UPDATE alert_deliveries SET lease_until = 0 WHERE status = 'pending'")
            .execute(&alerts.db.pool)
            .await;
    }
    check_sealing_key(&alerts).await;
    if let Err(e) = alerts.seal_at_rest().await {
        tracing::warn!(error = %e, "alert sender: stored channel secrets not sealed yet; retried at the next start");
    }
    // Each delivery is its own task, up to `batch` at once: a slow receiver (a PagerDuty group
    // is one request per incident) holds one slot, never the others. A freed slot is filled at
    // once; otherwise the outbox is polled, or a local transition wakes the worker.
    let lease_ms = 3 * cfg.timeout.as_millis() as i64;
    let mut in_flight = JoinSet::new();
    loop {
        if *stop.borrow() {
            break;
        }
        let free = cfg.batch.saturating_sub(in_flight.len());
        if free > 0 {
            let now = now_ms();
            match outbox::claim(&alerts.db, now, now + lease_ms, cfg.caps, free).await {
                Ok(claimed) => {
                    for c in claimed {
                        let (alerts, client, stop) = (alerts.clone(), client.clone(), stop.clone());
                        in_flight.spawn(async move {
                            if let Err(e) = attempt(&alerts, &client, &c, lease_ms, &stop).await {
                                tracing::warn!(delivery = %c.id, error = %e, "alert delivery attempt not recorded");
                            }
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "alert sender: outbox unavailable; retrying"),
            }
        }
        tokio::select! {
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            () = tokio::time::sleep(cfg.poll) => {}
            () = alerts.wake.notified() => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    // Attempts under way finish and are recorded (a long group stops between requests).
    while in_flight.join_next().await.is_some() {}
}

/// Instances sharing a PostgreSQL must share `STREAMWATCH_SECRET` (it seals channel secrets):
/// one that cannot open a stored secret says so at start, not only in each failed delivery.
async fn check_sealing_key(alerts: &Alerts) {
    let sample: Result<Option<(String,)>, _> = sqlx::query_as(
        "SELECT COALESCE(secret_sealed, routing_key_sealed, url_sealed) FROM alert_channels \
         WHERE secret_sealed IS NOT NULL OR routing_key_sealed IS NOT NULL \
            OR url_sealed IS NOT NULL LIMIT 1",
    )
    .fetch_optional(&alerts.db.pool)
    .await;
    if let Ok(Some((sealed,))) = sample {
        if alerts.sealer.open(&sealed).is_err() {
            tracing::error!(
                "alert channel secrets were sealed with another STREAMWATCH_SECRET: set the same \
                 value on every instance, or webhook and PagerDuty deliveries fail"
            );
        }
    }
}

/// How long a delivery whose channel secrets this instance cannot open is left for another
/// instance (or for this one, once `STREAMWATCH_SECRET` is fixed and it restarts).
const UNSEALABLE_RETRY_MS: i64 = 60_000;

/// One attempt of one delivery.
async fn attempt(
    alerts: &Alerts,
    client: &reqwest::Client,
    c: &Claimed,
    lease_ms: i64,
    stop: &watch::Receiver<bool>,
) -> Result<(), DbError> {
    let target: Option<Target> = sqlx::query_as(
        "SELECT type, url, url_sealed, routing_key_sealed, secret_sealed, previous_secret_sealed, \
             previous_secret_until FROM alert_channels WHERE id = $1",
    )
    .bind(&c.channel_id)
    .fetch_optional(&alerts.db.pool)
    .await?;
    let started = Instant::now();
    let now = now_ms();
    let outcome = match target {
        None => Outcome::Failed {
            status: None,
            error: "channel deleted".into(),
        },
        // A wrong STREAMWATCH_SECRET is this instance's fault, not the delivery's: no attempt
        // is spent, the delivery waits (another instance with the right secret may take it).
        Some(t) if !secrets_open(alerts, &t) => {
            tracing::error!(
                delivery = %c.id,
                "alert channel secret does not open: is STREAMWATCH_SECRET the same on every instance?"
            );
            return outbox::postpone(
                &alerts.db,
                c,
                now + UNSEALABLE_RETRY_MS,
                "channel secret does not open on this instance (STREAMWATCH_SECRET differs); not attempted",
            )
            .await;
        }
        Some(t) => match body_of(alerts, c, &t, now).await? {
            Err(e) => Outcome::Failed {
                status: None,
                error: e,
            },
            Ok(bodies) => send(alerts, client, c, &t, &bodies, now, lease_ms, stop).await,
        },
    };
    let latency = started.elapsed();
    let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
    let status = outbox::record(
        &alerts.db,
        c,
        &outcome,
        latency.as_millis() as i64,
        now_ms(),
        jitter,
    )
    .await?;
    let label = match (&outcome, status) {
        (_, DeliveryStatus::Sent) => "sent",
        (_, DeliveryStatus::Pending) => "retry",
        (_, DeliveryStatus::Failed) => "failed",
        (_, DeliveryStatus::Dead) => "dead",
    };
    metrics::counter!("streamwatch_alert_deliveries_total", "outcome" => label).increment(1);
    metrics::histogram!("streamwatch_alert_delivery_duration_seconds")
        .record(latency.as_secs_f64());
    Ok(())
}

/// Whether every sealed secret of the channel opens with this instance's key.
fn secrets_open(alerts: &Alerts, t: &Target) -> bool {
    [
        &t.url_sealed,
        &t.routing_key_sealed,
        &t.secret_sealed,
        &t.previous_secret_sealed,
    ]
    .into_iter()
    .flatten()
    .all(|sealed| alerts.sealer.open(sealed).is_ok())
}

/// The request bodies of a delivery: frozen at its first attempt (so every retry sends the
/// same bytes), built from its incidents then; a PagerDuty routing key is added now, never
/// stored with them.
async fn body_of(
    alerts: &Alerts,
    c: &Claimed,
    t: &Target,
    now: i64,
) -> Result<Result<Vec<Value>, String>, DbError> {
    let frozen = match &c.body {
        Some(b) => b.clone(),
        None => {
            let links = payload::Links {
                public_url: alerts.public_url.as_deref(),
            };
            outbox::freeze(&alerts.db, &c.id, |event, incidents| {
                let bodies = payload::bodies(t.kind, event, incidents, links, now);
                serde_json::to_string(&bodies).unwrap_or_else(|_| "[]".into())
            })
            .await?
        }
    };
    let bodies: Vec<Value> = match serde_json::from_str(&frozen) {
        Ok(b) => b,
        Err(e) => return Ok(Err(format!("stored body unreadable: {e}"))),
    };
    Ok(match (&t.routing_key_sealed, t.kind) {
        (Some(sealed), ChannelType::Pagerduty) => alerts
            .sealer
            .open(sealed)
            .map(|key| payload::with_routing_key(bodies, &key))
            .map_err(|e| e.to_string()),
        _ => Ok(bodies),
    })
}

/// Sends every request of one attempt; the first that does not succeed decides the outcome.
/// The lease is renewed while the requests go on, so a long group is never claimed twice,
/// and a shutdown stops it between requests (retried later; PagerDuty collapses the repeats).
#[allow(clippy::too_many_arguments)]
async fn send(
    alerts: &Alerts,
    client: &reqwest::Client,
    c: &Claimed,
    t: &Target,
    bodies: &[Value],
    now: i64,
    lease_ms: i64,
    stop: &watch::Receiver<bool>,
) -> Outcome {
    let url = match &t.url_sealed {
        Some(sealed) => match alerts.sealer.open(sealed) {
            Ok(u) => u,
            Err(e) => {
                return Outcome::Failed {
                    status: None,
                    error: e.to_string(),
                }
            }
        },
        None => t.url.clone(),
    };
    // Checked before any connection: the guard resolves the name and refuses any answer
    // outside the allowed addresses (the resolver checks again at connect time).
    if let Err(e) = alerts.guard.check_url(&url).await {
        return guard_outcome(&e);
    }
    let secrets = match signing_secrets(alerts, t, now) {
        Ok(s) => s,
        Err(e) => {
            return Outcome::Failed {
                status: None,
                error: e,
            }
        }
    };
    let request = |body: &Value| {
        let text = body.to_string();
        let mut req = client
            .post(&url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if t.kind == ChannelType::Webhook {
            let ts = now.div_euclid(1000);
            let sigs: Vec<String> = secrets
                .iter()
                .filter_map(|s| signature(s, &c.webhook_id, ts, &text))
                .collect();
            req = req
                .header("webhook-id", &c.webhook_id)
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", sigs.join(" "));
        }
        let req = req.body(text);
        async move {
            match req.send().await {
                Ok(resp) => classify(
                    resp.status().as_u16(),
                    resp.headers().get(RETRY_AFTER),
                    now_ms(),
                ),
                Err(e) => network_outcome(&e),
            }
        }
    };
    // A PagerDuty group is one event per incident, sent one after the other: a channel's
    // requests in flight are its deliveries in flight (at most 4), and PagerDuty takes events
    // of one routing key at its own pace anyway.
    let mut last = None;
    // The claim leased it for `lease_ms` from about `now`; renewed once half of that is gone.
    let mut leased_until = now + lease_ms;
    for body in bodies {
        let outcome = request(body).await;
        if !matches!(outcome, Outcome::Sent { .. }) {
            return outcome;
        }
        last = Some(outcome);
        if *stop.borrow() {
            return Outcome::Retry {
                status: None,
                error: Some("interrupted by shutdown".into()),
                retry_after_ms: None,
            };
        }
        let at = now_ms();
        if leased_until - at < lease_ms / 2 {
            match outbox::renew_lease(&alerts.db, c, at + lease_ms).await {
                Ok(()) => leased_until = at + lease_ms,
                Err(e) => {
                    tracing::warn!(delivery = %c.id, error = %e, "alert delivery lease not renewed")
                }
            }
        }
    }
    last.unwrap_or(Outcome::Sent { status: 200 })
}

/// The secrets that sign a webhook attempt: the current one, and during a rotation the
/// previous one (second signature).
fn signing_secrets(alerts: &Alerts, t: &Target, now: i64) -> Result<Vec<String>, String> {
    if t.kind != ChannelType::Webhook {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    if let Some(s) = &t.secret_sealed {
        out.push(alerts.sealer.open(s).map_err(|e| e.to_string())?);
    }
    if let (Some(s), Some(until)) = (&t.previous_secret_sealed, t.previous_secret_until) {
        if until > now {
            out.push(alerts.sealer.open(s).map_err(|e| e.to_string())?);
        }
    }
    Ok(out)
}

/// A `Retry-After` is honoured up to the schedule's longest step: a receiver cannot park a
/// delivery (and the resolve queued behind it) for longer than a day.
const RETRY_AFTER_MAX_MS: i64 = 86_400_000;

/// The outcome of an HTTP answer; `now` dates a `Retry-After` given as an HTTP date.
pub fn classify(status: u16, retry_after: Option<&HeaderValue>, now: i64) -> Outcome {
    match status {
        200..=299 => Outcome::Sent { status },
        410 => Outcome::Gone,
        429 | 500..=599 => Outcome::Retry {
            status: Some(status),
            error: Some(format!("receiver answered {status}")),
            retry_after_ms: retry_after
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_after_ms(v, now)),
        },
        _ => Outcome::Failed {
            status: Some(status),
            error: format!("receiver answered {status}"),
        },
    }
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3), capped at a day; a
/// date in the past is no floor.
fn retry_after_ms(value: &str, now: i64) -> Option<i64> {
    let value = value.trim();
    let ms = match value.parse::<u64>() {
        Ok(secs) => i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            let at_ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64;
            at_ms - now
        }
    };
    (ms > 0).then_some(ms.min(RETRY_AFTER_MAX_MS))
}

/// A target the guard will not let through: refused for good, except a name that did not
/// resolve, which may be a passing resolver failure (retried, like any network error).
fn guard_outcome(e: &GuardError) -> Outcome {
    if matches!(e, GuardError::DidNotResolve) {
        return Outcome::Retry {
            status: None,
            error: Some(e.to_string()),
            retry_after_ms: None,
        };
    }
    Outcome::Failed {
        status: None,
        error: format!("refused by the SSRF guard: {e}"),
    }
}

/// A request that got no answer: refused by the guard (see [`guard_outcome`]), or a network
/// failure (retried).
fn network_outcome(e: &reqwest::Error) -> Outcome {
    if let Some(g) = guard_refusal(e) {
        return guard_outcome(g);
    }
    let error = if e.is_timeout() {
        "no answer in time".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        e.to_string()
    };
    Outcome::Retry {
        status: None,
        error: Some(error),
        retry_after_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_outcomes() {
        assert_eq!(classify(204, None, 0), Outcome::Sent { status: 204 });
        assert_eq!(classify(410, None, 0), Outcome::Gone);
        assert_eq!(
            classify(503, Some(&HeaderValue::from_static("120")), 0),
            Outcome::Retry {
                status: Some(503),
                error: Some("receiver answered 503".into()),
                retry_after_ms: Some(120_000)
            }
        );
        assert!(matches!(
            classify(429, None, 0),
            Outcome::Retry {
                retry_after_ms: None,
                ..
            }
        ));
        assert!(matches!(
            classify(404, None, 0),
            Outcome::Failed {
                status: Some(404),
                ..
            }
        ));
        assert!(matches!(
            classify(302, None, 0),
            Outcome::Failed {
                status: Some(302),
                ..
            }
        ));
    }

    #[test]
    fn retry_after_is_seconds_or_a_date_capped_at_a_day() {
        // 2015-10-21T07:28:00Z
        let now = 1_445_412_480_000;
        assert_eq!(retry_after_ms("120", now), Some(120_000));
        assert_eq!(retry_after_ms(" 0 ", now), None);
        assert_eq!(
            retry_after_ms("Wed, 21 Oct 2015 07:30:00 GMT", now),
            Some(120_000)
        );
        assert_eq!(
            retry_after_ms("Wed, 21 Oct 2015 07:00:00 GMT", now),
            None,
            "past"
        );
        assert_eq!(retry_after_ms("4294967295", now), Some(RETRY_AFTER_MAX_MS));
        assert_eq!(
            retry_after_ms("99999999999999999999", now),
            None,
            "not a number or a date"
        );
        assert_eq!(retry_after_ms("soon", now), None);
    }

    #[test]
    fn a_name_that_did_not_resolve_is_retried_a_refused_address_is_not() {
        assert!(matches!(
            guard_outcome(&GuardError::DidNotResolve),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            guard_outcome(&GuardError::PrivateAddress("10.0.0.1".parse().unwrap())),
            Outcome::Failed { .. }
        ));
    }
}
