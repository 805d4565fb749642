//! Numbers and times as the dashboard prints them. Times are printed in UTC on the server
//! (`2026-11-23 10:00 UTC`) inside `<time datetime>`, which the module rewrites to the
//! viewer's zone; the UTC text is the no-script fallback and the hover title.

use crate::time::iso_ms;

/// A `<time>` element's parts: the ISO instant and the UTC text.
pub struct When {
    pub iso: String,
    pub utc: String,
}

impl When {
    pub fn at(ms: i64) -> Self {
        let iso = iso_ms(ms);
        // `2026-11-23T10:00:00.000Z` → `2026-11-23 10:00 UTC`.
        let utc = format!("{} {} UTC", &iso[..10], &iso[11..16]);
        When { iso, utc }
    }
}

/// `12,345` (thousands separated by commas).
pub fn int(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number with at most `decimals` decimals and no trailing zeros: `0.92`, `1.5`, `3,000`.
pub fn num(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    let (whole, frac) = s.split_once('.').unwrap_or((&s, ""));
    let whole = whole
        .parse::<i64>()
        .map(int)
        .unwrap_or_else(|_| whole.to_owned());
    // `-0.4` keeps its sign though its whole part parses as 0.
    let whole = if x < 0.0 && !whole.starts_with('-') {
        format!("-{whole}")
    } else {
        whole
    };
    if frac.is_empty() {
        whole
    } else {
        format!("{whole}.{frac}")
    }
}

/// `1.9 %`, or `—` for no value.
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(dash, |v| format!("{} %", num(v, 2)))
}

/// `1,820 ms`, or `—`.
pub fn ms(v: Option<f64>) -> String {
    v.map_or_else(dash, |v| format!("{} ms", num(v, 0)))
}

/// A duration in ms, as `3.9 s`, `2 min 5 s`, `1 h 20 min`.
pub fn duration(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 60.0 {
        format!("{} s", num(s, 1))
    } else if s < 3600.0 {
        format!("{} min {} s", (s / 60.0).floor(), (s % 60.0).floor())
    } else {
        format!(
            "{} h {} min",
            (s / 3600.0).floor(),
            ((s % 3600.0) / 60.0).floor()
        )
    }
}

/// A plain number or `—`.
pub fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(dash, |v| num(v, decimals))
}

fn dash() -> String {
    "—".to_owned()
}

/// Percent-encodes a query value (`application/x-www-form-urlencoded`).
pub fn q(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(int(0), "0");
        assert_eq!(int(999), "999");
        assert_eq!(int(1000), "1,000");
        assert_eq!(int(-1234567), "-1,234,567");
        assert_eq!(num(0.92, 2), "0.92");
        assert_eq!(num(1.5, 2), "1.5");
        assert_eq!(num(3000.0, 2), "3,000");
        assert_eq!(num(-0.4, 1), "-0.4");
        assert_eq!(num(1234.567, 2), "1,234.57");
        assert_eq!(pct(Some(87.5)), "87.5 %");
        assert_eq!(pct(None), "—");
        assert_eq!(ms(Some(1950.0)), "1,950 ms");
        assert_eq!(duration(3_944), "3.9 s");
        assert_eq!(duration(125_000), "2 min 5 s");
        assert_eq!(duration(4_800_000), "1 h 20 min");
    }

    #[test]
    fn times() {
        let w = When::at(1_767_261_600_000);
        assert_eq!(w.iso, "2026-01-01T10:00:00.000Z");
        assert_eq!(w.utc, "2026-01-01 10:00 UTC");
    }
}
