//! Durations of the alerts contract: `<n>s`, `<n>m`, `<n>h` or `<n>d` (alerts.md §1).

/// Message of a value that is not such a duration.
pub const MSG_INVALID: &str = "Invalid duration: use <n>s, <n>m, <n>h or <n>d (e.g. 30s, 5m)";

const UNITS: [(char, i64); 4] = [
    ('d', 86_400_000),
    ('h', 3_600_000),
    ('m', 60_000),
    ('s', 1_000),
];

/// Milliseconds of a duration string; `None` when it is not one (or absurdly long).
pub fn parse(s: &str) -> Option<i64> {
    let unit = s.chars().last()?;
    let digits = &s[..s.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    let (_, ms) = UNITS.iter().find(|(u, _)| *u == unit)?;
    Some(n * ms)
}

/// The shortest exact form: `30s`, `5m`, `2h`, `1d`; `0s` for zero.
pub fn format(ms: i64) -> String {
    for (unit, size) in UNITS {
        if ms != 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{}s", ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse("30s"), Some(30_000));
        assert_eq!(parse("5m"), Some(300_000));
        assert_eq!(parse("2h"), Some(7_200_000));
        assert_eq!(parse("1d"), Some(86_400_000));
        assert_eq!(parse("0s"), Some(0));
        for bad in [
            "",
            "s",
            "5",
            "5x",
            "-5m",
            "1.5h",
            " 5m",
            "5m ",
            "5M",
            "1234567890s",
            "５m",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(format(30_000), "30s");
        assert_eq!(format(300_000), "5m");
        assert_eq!(format(90_000), "90s");
        assert_eq!(format(86_400_000), "1d");
        assert_eq!(format(0), "0s");
    }
}
