//! Body validation with the contract's messages (zod v3 wording): a JSON object is checked
//! field by field and every failing field gets one message, so a client sees all its mistakes
//! at once as `{ "errors": { field: message } }`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Field name → message, in the order of the contract's 400 body.
pub type FieldErrors = BTreeMap<String, String>;

/// Message for a text field holding a character no name, label, e-mail, region or URL may hold.
pub const MSG_FORBIDDEN_CHARS: &str =
    "String must not contain control or invisible formatting characters";

/// True for characters no text field accepts (decisions.md §10): control characters (U+0000–
/// U+001F, U+007F–U+009F; PostgreSQL cannot even store U+0000) and Unicode format characters
/// (zero-width spaces and joiners, bidi overrides, the BOM…), which make two different strings
/// look the same.
pub fn is_forbidden_char(c: char) -> bool {
    c.is_control() || c.general_category() == GeneralCategory::Format
}

/// True when `s` holds a character of [`is_forbidden_char`].
pub fn has_forbidden_chars(s: &str) -> bool {
    s.chars().any(is_forbidden_char)
}

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
                if has_forbidden_chars(s) {
                    self.fail(field, MSG_FORBIDDEN_CHARS.to_owned());
                    None
                } else if n < min {
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

    /// True when the body names `field` (with any value, `null` included).
    pub fn has(&self, field: &str) -> bool {
        self.obj.contains_key(field)
    }

    /// True when the body sets `field` to `null`.
    pub fn is_null(&self, field: &str) -> bool {
        matches!(self.obj.get(field), Some(Value::Null))
    }

    /// An optional boolean.
    pub fn optional_bool(&mut self, field: &str) -> Option<bool> {
        match self.obj.get(field)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.fail(
                    field,
                    format!("Expected boolean, received {}", type_name(other)),
                );
                None
            }
        }
    }

    /// An optional finite number.
    pub fn optional_number(&mut self, field: &str) -> Option<f64> {
        match self.obj.get(field)? {
            Value::Number(n) => match n.as_f64().filter(|x| x.is_finite()) {
                Some(x) => Some(x),
                None => {
                    self.fail(field, "Expected number, received nan".into());
                    None
                }
            },
            other => {
                self.fail(
                    field,
                    format!("Expected number, received {}", type_name(other)),
                );
                None
            }
        }
    }

    /// An optional integer in `min..=max`.
    pub fn optional_int(&mut self, field: &str, min: i64, max: i64) -> Option<i64> {
        let x = self.optional_number(field)?;
        if x.fract() != 0.0 {
            self.fail(field, "Expected integer, received float".into());
            None
        } else if x < min as f64 {
            self.fail(
                field,
                format!("Number must be greater than or equal to {min}"),
            );
            None
        } else if x > max as f64 {
            self.fail(field, format!("Number must be less than or equal to {max}"));
            None
        } else {
            Some(x as i64)
        }
    }

    /// An optional string that must be one of `options`.
    pub fn optional_enum(&mut self, field: &str, options: &[&str]) -> Option<&'a str> {
        let s = self.optional_str(field, 0, usize::MAX)?;
        if options.contains(&s) {
            Some(s)
        } else {
            let expected = options
                .iter()
                .map(|o| format!("'{o}'"))
                .collect::<Vec<_>>()
                .join(" | ");
            self.fail(
                field,
                format!("Invalid enum value. Expected {expected}, received '{s}'"),
            );
            None
        }
    }

    /// An optional array of strings, each `1..=max_len` characters, at most `max_items`.
    pub fn optional_str_array(
        &mut self,
        field: &str,
        max_items: usize,
        max_len: usize,
    ) -> Option<Vec<&'a str>> {
        match self.obj.get(field)? {
            Value::Array(items) => {
                if items.len() > max_items {
                    self.fail(
                        field,
                        format!("Array must contain at most {max_items} element(s)"),
                    );
                    return None;
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) if s.is_empty() || s.chars().count() > max_len => {
                            self.fail(
                                field,
                                format!("{field}.{i}: String must contain between 1 and {max_len} character(s)"),
                            );
                            return None;
                        }
                        Value::String(s) if has_forbidden_chars(s) => {
                            self.fail(field, format!("{field}.{i}: {MSG_FORBIDDEN_CHARS}"));
                            return None;
                        }
                        Value::String(s) => out.push(s.as_str()),
                        other => {
                            self.fail(
                                field,
                                format!(
                                    "{field}.{i}: Expected string, received {}",
                                    type_name(other)
                                ),
                            );
                            return None;
                        }
                    }
                }
                Some(out)
            }
            other => {
                self.fail(
                    field,
                    format!("Expected array, received {}", type_name(other)),
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
    fn refuses_control_and_format_characters() {
        for bad in [
            "a\u{0}b",
            "tab\there",
            "line\n",
            "\u{7f}",
            "\u{85}",
            "zero\u{200b}width",
            "\u{feff}bom",
            "rtl\u{202e}override",
            "soft\u{ad}hyphen",
            "\u{2060}joiner",
            "tag\u{e0041}",
        ] {
            let o = obj(json!({ "n": bad }));
            let mut c = Checker::new(&o);
            assert_eq!(c.optional_str("n", 0, 120), None, "{bad:?}");
            assert_eq!(
                c.into_result().expect_err("refused")["n"],
                MSG_FORBIDDEN_CHARS
            );
        }
        for good in ["Ada Lovelace", "Zoë", "東京 live", "emoji 🎬", "a-b_c.d"] {
            assert!(!has_forbidden_chars(good), "{good:?}");
        }
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        let o = obj(json!({ "n": "é".repeat(120) }));
        let mut c = Checker::new(&o);
        assert!(c.optional_str("n", 0, 120).is_some());
    }
}
