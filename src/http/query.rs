//! Query strings: the raw `key=value` pairs of a request (repeatable keys kept in order) and
//! zod-style parsers for their values, so every route reports a bad parameter as
//! `{ "errors": { <param>: <message> } }` with the same wording.

use axum::extract::{FromRequestParts, RawQuery};
use axum::http::request::Parts;

use super::error::ApiError;

/// Every distinct `key=value` pair of the query string, percent-decoded, in order of first
/// appearance: a value repeated is kept once (decisions.md §14; at most
/// [`MAX_VALUES`](super::bounds::MAX_VALUES) distinct values of one key reach a handler:
/// [`refuse_query`](super::bounds::refuse_query) answers 400 past that).
#[derive(Debug, Default, Clone)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let RawQuery(raw) = RawQuery::from_request_parts(parts, state)
            .await
            .unwrap_or(RawQuery(None));
        let mut seen = std::collections::HashSet::new();
        let pairs = raw
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .filter(|pair| seen.insert(pair.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(QueryPairs(pairs))
    }
}

impl QueryPairs {
    /// The last value of a single-valued parameter (as `Object.fromEntries` would keep).
    pub fn last(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeatable parameter, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// An integer in `min..=max`, with zod's messages for a coerced number.
pub fn int_in_range(raw: &str, min: i64, max: i64) -> Result<i64, String> {
    let n: f64 = raw
        .trim()
        .parse()
        .map_err(|_| "Expected number, received nan".to_owned())?;
    if !n.is_finite() {
        return Err("Expected number, received nan".to_owned());
    }
    if n.fract() != 0.0 {
        return Err("Expected integer, received float".to_owned());
    }
    if n < min as f64 {
        return Err(format!("Number must be greater than or equal to {min}"));
    }
    if n > max as f64 {
        return Err(format!("Number must be less than or equal to {max}"));
    }
    Ok(n as i64)
}

/// A contract timestamp (ISO 8601, as the telemetry `ts` accepts) in epoch milliseconds.
pub fn timestamp(raw: &str) -> Result<i64, String> {
    ingest::time::parse_iso8601_ms(raw).ok_or_else(|| "Invalid datetime".to_owned())
}

/// zod's message for a value outside an enumeration.
pub fn invalid_enum(options: &[&str], got: &str) -> String {
    let expected = options
        .iter()
        .map(|o| format!("'{o}'"))
        .collect::<Vec<_>>()
        .join(" | ");
    format!("Invalid enum value. Expected {expected}, received '{got}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_with_zod_messages() {
        assert_eq!(int_in_range("25", 1, 500), Ok(25));
        assert_eq!(int_in_range("500", 1, 500), Ok(500));
        assert_eq!(
            int_in_range("0", 1, 500).expect_err("low"),
            "Number must be greater than or equal to 1"
        );
        assert_eq!(
            int_in_range("501", 1, 500).expect_err("high"),
            "Number must be less than or equal to 500"
        );
        assert_eq!(
            int_in_range("2.5", 1, 500).expect_err("float"),
            "Expected integer, received float"
        );
        for nan in ["", "ten", "NaN", "inf", "1e999"] {
            assert_eq!(
                int_in_range(nan, 1, 500).expect_err("nan"),
                "Expected number, received nan",
                "{nan:?}"
            );
        }
    }

    #[test]
    fn enum_message() {
        assert_eq!(
            invalid_enum(&["info", "warn"], "x"),
            "Invalid enum value. Expected 'info' | 'warn', received 'x'"
        );
    }
}
