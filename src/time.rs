//! Wall-clock time as the service stores it (epoch milliseconds) and renders it
//! (`YYYY-MM-DDTHH:MM:SS.sssZ`, exactly millisecond precision), plus row identifiers.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Renders epoch milliseconds as the contract's timestamp string — the one formatter the
/// telemetry read-back uses too.
pub fn iso_ms(ms: i64) -> String {
    ingest::time::format_ms(ms)
}

/// An instant on the wire: epoch milliseconds inside, `YYYY-MM-DDTHH:MM:SS.sssZ` outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&iso_ms(self.0))
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::schema::SchemaFormat::KnownFormat(
                utoipa::openapi::schema::KnownFormat::DateTime,
            )))
            .examples([serde_json::json!("2026-11-24T10:00:00.000Z")])
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

/// A new opaque row identifier (cuid2: collision-resistant, not guessable, URL-safe).
pub fn new_id() -> String {
    cuid2::create_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_exact_milliseconds() {
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn ids_are_distinct_cuids() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert!(a.len() >= 20 && a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
