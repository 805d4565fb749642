//! `/api/v1/alerts/…` (alerts.md §2): channels, rules, incidents and deliveries of the caller.
//! Bodies are parsed here with the contract's (zod) messages, every field at once; the
//! `alerts` domain checks what needs the store (the SSRF guard on targets, streams and
//! channels that must exist and be the caller's).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, InternalError};
use super::extract::{object, RowId, SessionUser, SmallBody};
use super::query::{int_in_range, invalid_enum, timestamp, QueryPairs};
use super::AppState;
use crate::alerts::channels::{ChannelChange, NewChannel, GROUP_WINDOW_MAX_MS, MSG_INVALID_URL};
use crate::alerts::incidents::IncidentFilter;
use crate::alerts::outbox::DeliveryFilter;
use crate::alerts::payload::IncidentBody;
use crate::alerts::rules::{RuleInput, REMIND_MIN_MS, WINDOW_MAX_MS, WINDOW_MIN_MS};
use crate::alerts::{duration, AlertError, Channel, Delivery, Rule};
use crate::states::{
    ChannelType, CompareOp, DeliveryEvent, DeliveryStatus, IncidentState, RuleKind, RuleState,
};
use crate::time::Timestamp;
use crate::validation::{Checker, FieldErrors};

impl From<AlertError> for ApiError {
    fn from(e: AlertError) -> Self {
        match e {
            AlertError::Invalid(f) => ApiError::Validation(f),
            AlertError::NotFound => ApiError::NotFound,
            other => ApiError::internal(other),
        }
    }
}

const NAME_MAX: usize = 120;
const URL_MAX: usize = 2048;
const ROUTING_KEY_MAX: usize = 256;
const LIST_DEFAULT: i64 = 100;
const LIST_MAX: i64 = 500;

// Fields of the response types are in alphabetical order of their wire names, as every other
// body of the API.

/// Channel (alerts.md §1).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelBody {
    pub created_at: Timestamp,
    /// Why the channel was switched off (e.g. a receiver answered 410).
    pub disabled_reason: Option<String>,
    pub enabled: bool,
    /// Notifications within this long go out as one delivery.
    #[schema(example = "30s")]
    pub group_window: String,
    pub id: String,
    pub name: String,
    /// `pagerduty` only: `"…"` and the key's last 4 characters.
    pub routing_key: Option<String>,
    #[serde(rename = "type")]
    pub kind: ChannelType,
    /// The target; a Slack or Discord webhook URL (a secret) is masked:
    /// `https://hooks.slack.com/…/****`.
    pub url: String,
}

impl From<Channel> for ChannelBody {
    fn from(c: Channel) -> Self {
        ChannelBody {
            created_at: Timestamp(c.created_at),
            disabled_reason: c.disabled_reason,
            enabled: c.enabled.0,
            group_window: duration::format(c.group_window_ms),
            id: c.id,
            name: c.name,
            routing_key: c.routing_key_last4.map(|k| format!("…{k}")),
            kind: c.kind,
            url: c.url,
        }
    }
}

/// A channel just created: `secret` (webhook only) appears here and never again.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelCreatedBody {
    pub created_at: Timestamp,
    pub disabled_reason: Option<String>,
    pub enabled: bool,
    pub group_window: String,
    pub id: String,
    pub name: String,
    pub routing_key: Option<String>,
    /// `whsec_…`: the signing secret of a webhook channel, shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(rename = "type")]
    pub kind: ChannelType,
    /// The target as given (shown in full this once).
    pub url: String,
}

/// The caller's channels, newest first.
#[derive(Serialize, ToSchema)]
pub struct ChannelList {
    pub items: Vec<ChannelBody>,
}

/// A rotated secret.
#[derive(Serialize, ToSchema)]
pub struct SecretBody {
    /// The new `whsec_…`; the previous one keeps signing (second signature) for 24 hours.
    pub secret: String,
}

/// Rule (alerts.md §1): the fields of the other kind are null.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleBody {
    pub channel_ids: Vec<String>,
    pub created_at: Timestamp,
    /// Why the service switched the rule off (`stream deleted`: its stream was deleted, by
    /// anyone); null otherwise. `enabled: true` clears it.
    #[schema(example = json!(null))]
    pub disabled_reason: Option<String>,
    pub enabled: bool,
    /// `stream` rules.
    pub fail_after: Option<i64>,
    /// `qoe` rules: `dim:value` / `!dim:value` filters.
    pub filter: Option<Vec<String>>,
    pub id: String,
    pub kind: RuleKind,
    pub measurement: Option<String>,
    pub metric: Option<String>,
    pub min_views: Option<i64>,
    pub name: String,
    #[schema(value_type = Option<String>, example = ">")]
    pub op: Option<CompareOp>,
    pub recover_after: Option<i64>,
    pub remind_every: Option<String>,
    pub state: RuleState,
    /// `stream` rules: the stream, or null for every stream.
    pub stream_id: Option<String>,
    pub threshold: Option<f64>,
    pub window: Option<String>,
}

impl From<Rule> for RuleBody {
    fn from(r: Rule) -> Self {
        let stream = r.kind == RuleKind::Stream;
        let q = r.qoe.as_ref();
        RuleBody {
            channel_ids: r.channel_ids,
            created_at: Timestamp(r.created_at),
            disabled_reason: r.disabled_reason,
            enabled: r.enabled,
            fail_after: stream.then_some(r.fail_after),
            filter: q.map(|q| q.filters.clone()),
            id: r.id,
            kind: r.kind,
            // Only `startupTimeMs` has one (alerts.md §1).
            measurement: q
                .filter(|q| q.metric == analytics::Metric::StartupTimeMs)
                .map(|q| q.measurement.as_str().to_owned()),
            metric: q.map(|q| q.metric.as_str().to_owned()),
            min_views: q.map(|q| q.min_views),
            name: r.name,
            op: q.map(|q| q.op),
            recover_after: stream.then_some(r.recover_after),
            remind_every: r.remind_every_ms.map(duration::format),
            state: r.state,
            stream_id: r.stream_id,
            threshold: q.map(|q| q.threshold),
            window: q.map(|q| duration::format(q.window_ms)),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct RuleList {
    pub items: Vec<RuleBody>,
}

#[derive(Serialize, ToSchema)]
pub struct IncidentList {
    pub items: Vec<IncidentBody>,
}

/// Delivery (alerts.md §1).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryBody {
    pub attempts: i64,
    pub channel_id: String,
    pub created_at: Timestamp,
    pub event: DeliveryEvent,
    pub id: String,
    pub incident_ids: Vec<String>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<i64>,
    pub last_status_code: Option<i64>,
    pub next_attempt_at: Option<Timestamp>,
    pub sent_at: Option<Timestamp>,
    pub status: DeliveryStatus,
    /// `msg_…`: the `webhook-id` of every attempt of this delivery.
    pub webhook_id: String,
}

impl From<Delivery> for DeliveryBody {
    fn from(d: Delivery) -> Self {
        DeliveryBody {
            attempts: d.attempts,
            channel_id: d.channel_id,
            created_at: Timestamp(d.created_at),
            event: d.event,
            id: d.id,
            incident_ids: d.incident_ids,
            last_error: d.last_error,
            last_latency_ms: d.last_latency_ms,
            last_status_code: d.last_status_code,
            next_attempt_at: d.next_attempt_at.map(Timestamp),
            sent_at: d.sent_at.map(Timestamp),
            status: d.status,
            webhook_id: d.webhook_id,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryList {
    pub items: Vec<DeliveryBody>,
}

/// Request bodies, for the OpenAPI document (parsed by hand for zod's messages).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ChannelCreate {
    #[schema(max_length = 120, min_length = 1)]
    name: String,
    #[schema(rename = "type")]
    kind: ChannelType,
    /// http(s); passes the SSRF guard. `pagerduty` defaults to PagerDuty's Events API v2.
    url: Option<String>,
    /// `pagerduty` only, required there.
    routing_key: Option<String>,
    /// `0s` to `10m`, default `30s`.
    group_window: Option<String>,
}

#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ChannelPatch {
    name: Option<String>,
    url: Option<String>,
    routing_key: Option<String>,
    group_window: Option<String>,
    /// `true` clears `disabledReason`.
    enabled: Option<bool>,
}

#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RuleWrite {
    name: Option<String>,
    /// Required at creation; not changeable.
    kind: Option<RuleKind>,
    stream_id: Option<String>,
    #[schema(minimum = 1, maximum = 100)]
    fail_after: Option<i64>,
    #[schema(minimum = 1, maximum = 100)]
    recover_after: Option<i64>,
    metric: Option<String>,
    measurement: Option<String>,
    #[schema(value_type = Option<String>)]
    op: Option<CompareOp>,
    threshold: Option<f64>,
    /// `1m` to `24h`, default `5m`.
    window: Option<String>,
    #[schema(minimum = 1)]
    min_views: Option<i64>,
    filter: Option<Vec<String>>,
    channel_ids: Option<Vec<String>>,
    /// At least `5m`, or null.
    remind_every: Option<String>,
    enabled: Option<bool>,
}

/// A duration field within `min..=max` ms; `Some(None)` for an allowed `null`.
fn duration_field(
    c: &mut Checker<'_>,
    field: &str,
    min: i64,
    max: i64,
    range: &str,
) -> Option<i64> {
    let raw = c.optional_str(field, 0, 16)?;
    match duration::parse(raw) {
        None => {
            c.reject(field, duration::MSG_INVALID);
            None
        }
        Some(ms) if ms < min || ms > max => {
            c.reject(field, format!("Must be {range}"));
            None
        }
        Some(ms) => Some(ms),
    }
}

/// `url`: an absolute URL (`Must be a valid URL`) of http or https (the guard's `Only http(s)
/// URLs are allowed`, as for a stream's `sourceUrl`).
fn url_field(c: &mut Checker<'_>) -> Option<String> {
    let url = c.optional_str("url", 1, URL_MAX)?;
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Some(url.to_owned()),
        Ok(_) => {
            c.reject("url", crate::ssrf::GuardError::BadScheme.to_string());
            None
        }
        Err(_) => {
            c.reject("url", MSG_INVALID_URL);
            None
        }
    }
}

fn channel_types() -> Vec<&'static str> {
    ChannelType::ALL.iter().map(|t| t.as_str()).collect()
}

fn parse_new_channel(body: &[u8]) -> Result<NewChannel, ApiError> {
    let obj = object(body)?;
    let mut c = Checker::new(&obj);
    let name = c.required_str("name", 1, NAME_MAX);
    if !c.has("type") {
        c.reject("type", "Required");
    }
    let kind = c
        .optional_enum("type", &channel_types())
        .and_then(ChannelType::parse);
    let url = url_field(&mut c);
    let routing_key = c.optional_str("routingKey", 1, ROUTING_KEY_MAX);
    let group_window = duration_field(
        &mut c,
        "groupWindow",
        0,
        GROUP_WINDOW_MAX_MS,
        "between 0s and 10m",
    );
    c.into_result().map_err(ApiError::Validation)?;
    Ok(NewChannel {
        name: name.unwrap_or_default().to_owned(),
        kind,
        url,
        routing_key: routing_key.map(str::to_owned),
        group_window_ms: group_window,
    })
}

fn parse_channel_change(body: &[u8]) -> Result<ChannelChange, ApiError> {
    let obj = object(body)?;
    let mut c = Checker::new(&obj);
    let name = c.optional_str("name", 1, NAME_MAX);
    let url = url_field(&mut c);
    let routing_key = c.optional_str("routingKey", 1, ROUTING_KEY_MAX);
    let group_window = duration_field(
        &mut c,
        "groupWindow",
        0,
        GROUP_WINDOW_MAX_MS,
        "between 0s and 10m",
    );
    let enabled = c.optional_bool("enabled");
    if c.has("type") {
        c.reject("type", "The type of a channel cannot change");
    }
    c.into_result().map_err(ApiError::Validation)?;
    Ok(ChannelChange {
        name: name.map(str::to_owned),
        url,
        routing_key: routing_key.map(str::to_owned),
        group_window_ms: group_window,
        enabled,
    })
}

fn parse_rule(body: &[u8]) -> Result<RuleInput, ApiError> {
    let obj = object(body)?;
    let mut c = Checker::new(&obj);
    let name = c.optional_str("name", 1, NAME_MAX);
    let kinds: Vec<&str> = RuleKind::ALL.iter().map(|k| k.as_str()).collect();
    let kind = c.optional_enum("kind", &kinds).and_then(RuleKind::parse);
    let stream_id = if c.is_null("streamId") {
        Some(None)
    } else {
        c.optional_str("streamId", 1, 64)
            .map(|s| Some(s.to_owned()))
    };
    let fail_after = c.optional_int("failAfter", 1, 100);
    let recover_after = c.optional_int("recoverAfter", 1, 100);
    let metrics: Vec<&str> = analytics::Metric::ALL.iter().map(|m| m.as_str()).collect();
    let metric = c
        .optional_enum("metric", &metrics)
        .and_then(analytics::Metric::from_id);
    let measurements: Vec<&str> = analytics::Measurement::ALL
        .iter()
        .map(|m| m.as_str())
        .collect();
    let measurement = c
        .optional_enum("measurement", &measurements)
        .and_then(analytics::Measurement::from_wire);
    let op = c
        .optional_enum("op", &[">", "<"])
        .and_then(CompareOp::parse);
    let threshold = c.optional_number("threshold");
    let window = duration_field(
        &mut c,
        "window",
        WINDOW_MIN_MS,
        WINDOW_MAX_MS,
        "between 1m and 24h",
    );
    let min_views = c.optional_int("minViews", 1, 1_000_000_000);
    let filters = c
        .optional_str_array("filter", 50, 300)
        .map(|v| v.into_iter().map(str::to_owned).collect());
    let channel_ids = c
        .optional_str_array("channelIds", 50, 64)
        .map(|v| v.into_iter().map(str::to_owned).collect());
    let remind_every = if c.is_null("remindEvery") {
        Some(None)
    } else {
        duration_field(
            &mut c,
            "remindEvery",
            REMIND_MIN_MS,
            i64::MAX,
            "at least 5m",
        )
        .map(Some)
    };
    let enabled = c.optional_bool("enabled");
    c.into_result().map_err(ApiError::Validation)?;
    Ok(RuleInput {
        name: name.map(str::to_owned),
        kind,
        stream_id,
        fail_after,
        recover_after,
        metric,
        measurement,
        op,
        threshold,
        window_ms: window,
        min_views,
        filters,
        channel_ids,
        remind_every_ms: remind_every,
        enabled,
    })
}

/// `limit` (1–500, default 100) and `before` of the list routes.
fn paging(q: &QueryPairs, errors: &mut FieldErrors) -> (i64, Option<i64>) {
    let limit = match q.last("limit") {
        None => LIST_DEFAULT,
        Some(raw) => int_in_range(raw, 1, LIST_MAX).unwrap_or_else(|m| {
            errors.insert("limit".into(), m);
            LIST_DEFAULT
        }),
    };
    let before = q.last("before").and_then(|raw| match timestamp(raw) {
        Ok(ms) => Some(ms),
        Err(m) => {
            errors.insert("before".into(), m);
            None
        }
    });
    (limit, before)
}

/// Create a channel.
#[utoipa::path(post, path = "/api/v1/alerts/channels", operation_id = "createAlertChannel", tag = "alerts",
    request_body = ChannelCreate,
    responses(
        (status = 201, description = "The channel; `secret` for a webhook and the `url` in full, this once", body = ChannelCreatedBody),
        (status = 400, description = "Invalid body, a target the SSRF guard refuses, or the caller's 50 channels reached (key `name`: `Channel limit reached (50)`)", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn create_channel(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<ChannelCreatedBody>), ApiError> {
    let new = parse_new_channel(&body)?;
    let created = state.alerts.create_channel(&auth.user.id, &new).await?;
    let c = ChannelBody::from(created.channel);
    Ok((
        StatusCode::CREATED,
        Json(ChannelCreatedBody {
            created_at: c.created_at,
            disabled_reason: c.disabled_reason,
            enabled: c.enabled,
            group_window: c.group_window,
            id: c.id,
            name: c.name,
            routing_key: c.routing_key,
            secret: created.secret,
            kind: c.kind,
            // As given, this once: reads show a Slack or Discord URL masked.
            url: created.url,
        }),
    ))
}

/// The caller's channels, newest first.
#[utoipa::path(get, path = "/api/v1/alerts/channels", operation_id = "listAlertChannels", tag = "alerts",
    responses(
        (status = 200, body = ChannelList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list_channels(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<ChannelList>, ApiError> {
    let items = state.alerts.channels(&auth.user.id).await?;
    Ok(Json(ChannelList {
        items: items.into_iter().map(ChannelBody::from).collect(),
    }))
}

/// Change a channel; `enabled: true` switches a disabled one back on.
#[utoipa::path(patch, path = "/api/v1/alerts/channels/{id}", operation_id = "updateAlertChannel", tag = "alerts",
    params(("id" = String, Path)),
    request_body = ChannelPatch,
    responses(
        (status = 200, body = ChannelBody),
        (status = 400, description = "Invalid body", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's channels", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn update_channel(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
    SmallBody(body): SmallBody,
) -> Result<Json<ChannelBody>, ApiError> {
    let change = parse_channel_change(&body)?;
    let c = state
        .alerts
        .update_channel(&auth.user.id, &id, &change)
        .await?;
    Ok(Json(c.into()))
}

/// Delete a channel; its pending deliveries become `dead`.
#[utoipa::path(delete, path = "/api/v1/alerts/channels/{id}", operation_id = "deleteAlertChannel", tag = "alerts",
    params(("id" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's channels", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn delete_channel(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<StatusCode, ApiError> {
    state.alerts.delete_channel(&auth.user.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Send a test notification to a channel (at most 10 a minute per channel).
#[utoipa::path(post, path = "/api/v1/alerts/channels/{id}/test", operation_id = "testAlertChannel", tag = "alerts",
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "Queued", body = DeliveryBody),
        (status = 400, description = "10 test deliveries to this channel in the last minute (key `channel`: `Too many test deliveries; try again in <n> s`)", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's channels", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn test_channel(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<(StatusCode, Json<DeliveryBody>), ApiError> {
    let d = state.alerts.test_channel(&auth.user.id, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(d.into())))
}

/// A new signing secret for a webhook channel (the old one signs too for 24 hours).
#[utoipa::path(post, path = "/api/v1/alerts/channels/{id}/rotate-secret", operation_id = "rotateAlertChannelSecret", tag = "alerts",
    params(("id" = String, Path)),
    responses(
        (status = 200, body = SecretBody),
        (status = 400, description = "Not a webhook channel (key `type`)", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's channels", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn rotate_secret(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<Json<SecretBody>, ApiError> {
    let secret = state.alerts.rotate_secret(&auth.user.id, &id).await?;
    Ok(Json(SecretBody { secret }))
}

/// Create a rule.
#[utoipa::path(post, path = "/api/v1/alerts/rules", operation_id = "createAlertRule", tag = "alerts",
    request_body = RuleWrite,
    responses(
        (status = 201, body = RuleBody),
        (status = 400, description = "Invalid body, or the caller's 200 rules reached (key `name`: `Rule limit reached (200)`)", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn create_rule(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<RuleBody>), ApiError> {
    let input = parse_rule(&body)?;
    let rule = state.alerts.create_rule(&auth.user.id, &input).await?;
    Ok((StatusCode::CREATED, Json(rule.into())))
}

/// The caller's rules, newest first, with their states.
#[utoipa::path(get, path = "/api/v1/alerts/rules", operation_id = "listAlertRules", tag = "alerts",
    responses(
        (status = 200, body = RuleList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list_rules(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<RuleList>, ApiError> {
    let items = state.alerts.rules(&auth.user.id).await?;
    Ok(Json(RuleList {
        items: items.into_iter().map(RuleBody::from).collect(),
    }))
}

/// Change any writable field of a rule.
#[utoipa::path(patch, path = "/api/v1/alerts/rules/{id}", operation_id = "updateAlertRule", tag = "alerts",
    params(("id" = String, Path)),
    request_body = RuleWrite,
    responses(
        (status = 200, body = RuleBody),
        (status = 400, description = "Invalid body", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's rules", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn update_rule(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
    SmallBody(body): SmallBody,
) -> Result<Json<RuleBody>, ApiError> {
    let input = parse_rule(&body)?;
    let rule = state.alerts.update_rule(&auth.user.id, &id, &input).await?;
    Ok(Json(rule.into()))
}

/// Delete a rule; an open incident of it is resolved and notified.
#[utoipa::path(delete, path = "/api/v1/alerts/rules/{id}", operation_id = "deleteAlertRule", tag = "alerts",
    params(("id" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's rules", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn delete_rule(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<StatusCode, ApiError> {
    state.alerts.delete_rule(&auth.user.id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's incidents, open and past, newest `firedAt` first.
#[utoipa::path(get, path = "/api/v1/alerts/incidents", operation_id = "listAlertIncidents", tag = "alerts",
    params(
        ("state" = Option<IncidentState>, Query),
        ("ruleId" = Option<String>, Query),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Default 100"),
        ("before" = Option<String>, Query, format = DateTime, description = "Only incidents fired before this time (paging)"),
    ),
    responses(
        (status = 200, body = IncidentList),
        (status = 400, description = "A bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list_incidents(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Json<IncidentList>, ApiError> {
    let mut errors = FieldErrors::new();
    let (limit, before) = paging(&q, &mut errors);
    let wanted = q.last("state").and_then(|s| {
        let parsed = IncidentState::parse(s);
        if parsed.is_none() {
            errors.insert("state".into(), invalid_enum(&["firing", "resolved"], s));
        }
        parsed
    });
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let items = state
        .alerts
        .incidents(
            &auth.user.id,
            &IncidentFilter {
                state: wanted,
                rule_id: q.last("ruleId").map(str::to_owned),
                before,
                limit,
            },
        )
        .await?;
    Ok(Json(IncidentList {
        items: items.iter().map(IncidentBody::from).collect(),
    }))
}

/// The caller's deliveries, newest first: status, HTTP code, latency, attempts, next attempt.
#[utoipa::path(get, path = "/api/v1/alerts/deliveries", operation_id = "listAlertDeliveries", tag = "alerts",
    params(
        ("channelId" = Option<String>, Query),
        ("status" = Option<DeliveryStatus>, Query),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Default 100"),
        ("before" = Option<String>, Query, format = DateTime, description = "Only deliveries created before this time (paging)"),
    ),
    responses(
        (status = 200, body = DeliveryList),
        (status = 400, description = "A bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list_deliveries(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Json<DeliveryList>, ApiError> {
    let mut errors = FieldErrors::new();
    let (limit, before) = paging(&q, &mut errors);
    let status = q.last("status").and_then(|s| {
        let parsed = DeliveryStatus::parse(s);
        if parsed.is_none() {
            errors.insert(
                "status".into(),
                invalid_enum(&["pending", "sent", "failed", "dead"], s),
            );
        }
        parsed
    });
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let items = state
        .alerts
        .deliveries(
            &auth.user.id,
            &DeliveryFilter {
                channel_id: q.last("channelId").map(str::to_owned),
                status,
                before,
                limit,
            },
        )
        .await?;
    Ok(Json(DeliveryList {
        items: items.into_iter().map(DeliveryBody::from).collect(),
    }))
}

/// Send a delivery again: a new delivery, same body, new `webhookId`; 10 a minute per channel.
#[utoipa::path(post, path = "/api/v1/alerts/deliveries/{id}/resend", operation_id = "resendAlertDelivery", tag = "alerts",
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "Queued", body = DeliveryBody),
        (status = 400, description = "10 resends to this channel in the last minute (key `delivery`: `Too many resends; try again in <n> s`)", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's deliveries (or its channel is gone)", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn resend(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<(StatusCode, Json<DeliveryBody>), ApiError> {
    let d = state.alerts.resend(&auth.user.id, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(d.into())))
}
