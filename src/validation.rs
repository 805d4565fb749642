//! Body validation with the contract's messages (zod v3 wording): a JSON object is checked
//! field by field and every failing field gets one message, so a client sees all its mistakes
//! at once as `{ "errors": { field: message } }`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Field name → message, in the order of the contract's 400 body.
pub type FieldErrors = BTreeMap<String, String>;

/// The JSON type name zod prints in `Expected …, received …`.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses a request body that must be a JSON object. The error is the single message to
/// report for the whole body (malformed JSON, or JSON that is not an object).
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("Expected object, received {}", type_name(&other))),
        Err(_) if body.iter().all(u8::is_ascii_whitespace) => Err("Required".to_owned()),
        Err(_) => Err("Invalid JSON".to_owned()),
    }
}

/// Collects field checks over one JSON object.
pub struct Checker<'a> {
    obj: &'a Map<String, Value>,
    pub errors: FieldErrors,
}

impl<'a> Checker<'a> {
    pub fn new(obj: &'a Map<String, Value>) -> Self {
        Self {
            obj,
            errors: FieldErrors::new(),
        }
    }

    fn fail(&mut self, field: &str, msg: String) {
        self.errors.entry(field.to_owned()).or_insert(msg);
    }

    /// A required string of `min..=max` characters.
    pub fn required_str(&mut self, field: &str, min: usize, max: usize) -> Option<&'a str> {
        match self.obj.get(field) {
            None => {
                self.fail(field, "Required".into());
                None
            }
            Some(_) => self.optional_str(field, min, max),
        }
    }

    /// An optional string of `min..=max` characters; absent is fine, `null` is not.
    pub fn optional_str(&mut self, field: &str, min: usize, max: usize) -> Option<&'a str> {
        match self.obj.get(field)? {
            Value::String(s) => {
                let n = s.chars().count();
                if n < min {
                    self.fail(
                        field,
                        format!("String must contain at least {min} character(s)"),
                    );
                    None
                } else if n > max {
                    self.fail(
                        field,
                        format!("String must contain at most {max} character(s)"),
                    );
                    None
                } else {
                    Some(s.as_str())
                }
            }
            other => {
                self.fail(
                    field,
                    format!("Expected string, received {}", type_name(other)),
                );
                None
            }
        }
    }

    /// Records a rule failure found by the caller.
    pub fn reject(&mut self, field: &str, msg: impl Into<String>) {
        self.fail(field, msg.into());
    }

    pub fn into_result(self) -> Result<(), FieldErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn messages_match_zod() {
        let o = obj(json!({ "a": 5, "b": "x".repeat(121), "c": "", "d": null }));
        let mut c = Checker::new(&o);
        assert_eq!(c.required_str("a", 0, 10), None);
        assert_eq!(c.optional_str("b", 0, 120), None);
        assert_eq!(c.required_str("c", 1, 10), None);
        assert_eq!(c.optional_str("d", 0, 10), None);
        assert_eq!(c.required_str("missing", 0, 10), None);
        assert_eq!(c.optional_str("absent", 0, 10), None);
        let e = c.into_result().expect_err("errors");
        assert_eq!(e["a"], "Expected string, received number");
        assert_eq!(e["b"], "String must contain at most 120 character(s)");
        assert_eq!(e["c"], "String must contain at least 1 character(s)");
        assert_eq!(e["d"], "Expected string, received null");
        assert_eq!(e["missing"], "Required");
        assert!(!e.contains_key("absent"));
    }

    #[test]
    fn body_must_be_an_object() {
        assert_eq!(parse_object(b"{nope").expect_err("refused"), "Invalid JSON");
        assert_eq!(
            parse_object(b"[1]").expect_err("refused"),
            "Expected object, received array"
        );
        assert_eq!(parse_object(b"  ").expect_err("refused"), "Required");
        assert!(parse_object(br#"{"a":1}"#).is_ok());
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        let o = obj(json!({ "n": "é".repeat(120) }));
        let mut c = Checker::new(&o);
        assert!(c.optional_str("n", 0, 120).is_some());
    }
}
