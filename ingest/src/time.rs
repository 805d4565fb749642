//! ISO 8601 timestamps on the wire: parsing into epoch milliseconds and rendering
//! back as `YYYY-MM-DDTHH:MM:SS.sssZ`.
//!
//! The accepted grammar is the one the SDK's zod schema accepts
//! (`z.string().datetime({ offset: true })`): `YYYY-MM-DDTHH:MM:SS`, optional
//! fractional seconds of any length, then `Z` or an offset `±HH:MM` / `±HHMM`.
//! Calendar dates are checked (leap years included). Digits past milliseconds are
//! truncated, so every stored timestamp has exactly millisecond precision.

use serde::Serializer;

/// Milliseconds in one day.
const MS_PER_DAY: i64 = 86_400_000;

/// Earliest accepted instant: 0000-01-01T00:00:00.000Z.
pub const MIN_MS: i64 = -62_167_219_200_000;
/// Latest accepted instant: 9999-12-31T23:59:59.999Z.
pub const MAX_MS: i64 = 253_402_300_799_999;

/// Parses an ISO 8601 timestamp into milliseconds since the Unix epoch (UTC).
///
/// Returns `None` when the text is not a valid timestamp, or when the instant falls outside
/// years 0000–9999 once converted to UTC (`9999-12-31T23:59:59.999-23:59` is in year 10000:
/// it could not be written back in the four-digit form).
pub fn parse_iso8601_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    // Shortest valid form: "2024-01-01T00:00:00Z" (20 bytes).
    if b.len() < 20 {
        return None;
    }
    let year = digits(b, 0, 4)?;
    let month = digits(b, 5, 2)?;
    let day = digits(b, 8, 2)?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }

    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 3 {
                millis = millis * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..3 {
            millis *= 10;
        }
    }

    let offset_minutes: i64 = match b.get(i) {
        Some(b'Z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let rest = &b[i + 1..];
            let (oh, om) = match rest.len() {
                5 if rest[2] == b':' => (digits(rest, 0, 2)?, digits(rest, 3, 2)?),
                4 => (digits(rest, 0, 2)?, digits(rest, 2, 2)?),
                _ => return None,
            };
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if sign == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };

    let days = days_from_civil(year, month, day);
    let local_ms = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis;
    Some(local_ms - offset_minutes * 60_000).filter(|ms| (MIN_MS..=MAX_MS).contains(ms))
}

/// Renders epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC).
///
/// Years outside 0..=9999 cannot come from [`parse_iso8601_ms`]; they are rendered
/// with as many digits as needed.
pub fn format_ms(ms: i64) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let hh = in_day / 3_600_000;
    let mm = (in_day / 60_000) % 60;
    let ss = (in_day / 1000) % 60;
    let sss = in_day % 1000;
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{sss:03}Z")
}

/// Serde helper: serializes epoch milliseconds as an ISO 8601 string.
pub fn serialize_ms<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_ms(*ms))
}

/// Reads `len` ASCII digits at `at`.
fn digits(b: &[u8], at: usize, len: usize) -> Option<i64> {
    let slice = b.get(at..at + len)?;
    let mut v = 0i64;
    for &c in slice {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(v)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_years_stay_within_0000_to_9999() {
        assert_eq!(parse_iso8601_ms("9999-12-31T23:59:59.999Z"), Some(MAX_MS));
        assert_eq!(format_ms(MAX_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_iso8601_ms("0000-01-01T00:00:00.000Z"), Some(MIN_MS));
        assert_eq!(format_ms(MIN_MS), "0000-01-01T00:00:00.000Z");
        // Offsets that push the UTC instant out of the four-digit years.
        assert_eq!(parse_iso8601_ms("9999-12-31T23:59:59.999-23:59"), None);
        assert_eq!(parse_iso8601_ms("9999-12-31T23:30:00.000-00:31"), None);
        assert_eq!(parse_iso8601_ms("0000-01-01T00:00:00.000+00:01"), None);
        // Inside the range with an offset: fine.
        assert_eq!(
            parse_iso8601_ms("9999-12-31T22:59:59.999-01:00"),
            Some(MAX_MS)
        );
    }

    #[test]
    fn parses_utc_with_millis() {
        assert_eq!(parse_iso8601_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            parse_iso8601_ms("2024-05-01T12:34:56.789Z"),
            Some(1_714_566_896_789)
        );
    }

    #[test]
    fn parses_without_fraction_and_with_long_fraction() {
        assert_eq!(
            parse_iso8601_ms("2024-05-01T12:34:56Z"),
            Some(1_714_566_896_000)
        );
        assert_eq!(
            parse_iso8601_ms("2024-05-01T12:34:56.7Z"),
            Some(1_714_566_896_700)
        );
        assert_eq!(
            parse_iso8601_ms("2024-05-01T12:34:56.789999Z"),
            Some(1_714_566_896_789)
        );
    }

    #[test]
    fn applies_offsets() {
        let utc = parse_iso8601_ms("2024-05-01T12:34:56.789Z");
        assert_eq!(parse_iso8601_ms("2024-05-01T14:34:56.789+02:00"), utc);
        assert_eq!(parse_iso8601_ms("2024-05-01T14:34:56.789+0200"), utc);
        assert_eq!(parse_iso8601_ms("2024-05-01T07:04:56.789-05:30"), utc);
        assert_eq!(parse_iso8601_ms("2024-05-01T12:34:56.789+00:00"), utc);
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "2024-05-01",
            "2024-05-01 12:34:56Z",
            "2024-05-01T12:34:56",
            "2024-05-01T12:34Z",
            "2024-05-01t12:34:56Z",
            "2024-05-01T12:34:56z",
            "2024-05-01T12:34:56.Z",
            "2024-13-01T12:34:56Z",
            "2024-02-30T12:34:56Z",
            "2023-02-29T12:34:56Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T12:60:00Z",
            "2024-05-01T12:00:60Z",
            "2024-05-01T12:34:56+02",
            "2024-05-01T12:34:56+2:00",
            "2024-05-01T12:34:56+24:00",
            "2024-05-01T12:34:56Z ",
            "not a date at all, really",
            "+2024-05-01T12:34:56Z",
        ] {
            assert_eq!(parse_iso8601_ms(s), None, "{s:?}");
        }
    }

    #[test]
    fn accepts_leap_day() {
        assert!(parse_iso8601_ms("2024-02-29T00:00:00Z").is_some());
        assert!(parse_iso8601_ms("2000-02-29T00:00:00Z").is_some());
        assert!(parse_iso8601_ms("1900-02-29T00:00:00Z").is_none());
    }

    #[test]
    fn formats_round_trip() {
        for s in [
            "1970-01-01T00:00:00.000Z",
            "2024-05-01T12:34:56.789Z",
            "1969-12-31T23:59:59.999Z",
            "2000-02-29T23:59:59.001Z",
            "9999-12-31T23:59:59.999Z",
            "0000-01-01T00:00:00.000Z",
        ] {
            let ms = parse_iso8601_ms(s).expect(s);
            assert_eq!(format_ms(ms), s);
        }
        assert_eq!(format_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
