//! SQL text with positional `?` arguments, and the selection and grouping expressions
//! both engines share (analytics.md §3, §4): the same filter semantics written twice,
//! once per dialect.

use std::collections::BTreeSet;

use crate::query::{Dimension, StreamIds};

use super::Selection;

/// One positional argument.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Str(String),
    Int(i64),
}

/// SQL text and its arguments in textual order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sql {
    pub text: String,
    pub args: Vec<Arg>,
}

impl Sql {
    pub fn new(text: &str) -> Self {
        Sql {
            text: text.to_owned(),
            args: Vec::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.text.push('?');
        self.args.push(Arg::Str(v.to_owned()));
        self
    }

    pub fn int(&mut self, v: i64) -> &mut Self {
        self.text.push('?');
        self.args.push(Arg::Int(v));
        self
    }

    /// `(?, ?, …)` of `values` (non-empty).
    pub fn list<'a>(&mut self, values: impl IntoIterator<Item = &'a str>) -> &mut Self {
        self.text.push('(');
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.str(v);
        }
        self.text.push(')');
        self
    }
}

/// The two SQL dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// ClickHouse over `qoe_views` (no alias); tags in `tag_keys` / `tag_values`.
    ClickHouse,
    /// SQLite over `qoe_views v`; tags in `qoe_view_tags`.
    Sqlite,
}

impl Dialect {
    /// A column of `qoe_views`.
    pub fn col(self, name: &str) -> String {
        match self {
            Dialect::ClickHouse => name.to_owned(),
            Dialect::Sqlite => format!("v.{name}"),
        }
    }

    /// Appends the expression of `dim`'s value (NULL when the view has none).
    /// `streamId` is not a column; see [`push_filters`] and the engines' breakdowns.
    pub fn push_value(self, sql: &mut Sql, dim: &Dimension) {
        let column = match dim {
            Dimension::ContentId => "content_id",
            Dimension::Browser => "browser",
            Dimension::Os => "os",
            Dimension::DeviceType => "device_type",
            Dimension::Sdk => "sdk",
            Dimension::Player => "player",
            Dimension::StreamId => "src",
            Dimension::Tag(name) => {
                match self {
                    Dialect::ClickHouse => {
                        sql.push("if(has(tag_keys, ")
                            .str(name)
                            .push("), tag_values[indexOf(tag_keys, ")
                            .str(name)
                            .push(")], NULL)");
                    }
                    Dialect::Sqlite => {
                        sql.push(
                            "(SELECT t.value FROM qoe_view_tags t WHERE t.owner = v.owner \
                             AND t.session_id = v.session_id AND t.name = ",
                        )
                        .str(name)
                        .push(")");
                    }
                }
                return;
            }
        };
        sql.push(&self.col(column));
    }
}

/// The sources whose registered stream is one of `ids`, sorted.
pub(crate) fn sources_of(streams: &StreamIds, ids: &[String]) -> Vec<String> {
    let set: BTreeSet<&str> = streams
        .iter()
        .filter(|(_, id)| ids.iter().any(|i| i == *id))
        .map(|(src, _)| src.as_str())
        .collect();
    set.into_iter().map(str::to_owned).collect()
}

/// Appends `owner = ? AND started_at in [from, to)`, the filters and the `src`
/// restriction of a selection.
pub(crate) fn push_selection(sql: &mut Sql, d: Dialect, sel: &Selection<'_>) {
    sql.push(&d.col("owner"))
        .push(" = ")
        .str(sel.owner)
        .push(" AND ")
        .push(&d.col("started_at"))
        .push(" >= ")
        .int(sel.range.from_ms)
        .push(" AND ")
        .push(&d.col("started_at"))
        .push(" < ")
        .int(sel.range.to_ms);
    if d == Dialect::ClickHouse {
        // The sort key's day column, so only the range's days are read; tombstones of a
        // view that moved to an earlier day are dropped after FINAL.
        sql.push(" AND started_day >= ")
            .int(day_of(sel.range.from_ms))
            .push(" AND started_day <= ")
            .int(day_of(sel.range.to_ms.saturating_sub(1)))
            .push(" AND deleted = 0");
    }
    if let Some(src) = sel.src {
        sql.push(" AND ").push(&d.col("src")).push(" = ").str(src);
    }
    push_filters(sql, d, sel);
}

/// Appends ` AND …` per filter clause: per dimension, a `dim:value` list the value must
/// be in (a view without a value fails it) and a `!dim:value` list it must not be in (a
/// view without a value passes it). `streamId` becomes a condition on `src` through the
/// caller's map, so streams registered after the view still match.
fn push_filters(sql: &mut Sql, d: Dialect, sel: &Selection<'_>) {
    for (dim, clause) in &sel.filters.clauses {
        if *dim == Dimension::StreamId {
            let src = d.col("src");
            if !clause.include.is_empty() {
                let srcs = sources_of(sel.streams, &clause.include);
                if srcs.is_empty() {
                    sql.push(" AND 0 = 1");
                } else {
                    sql.push(" AND ")
                        .push(&src)
                        .push(" IN ")
                        .list(srcs.iter().map(String::as_str));
                }
            }
            let srcs = sources_of(sel.streams, &clause.exclude);
            if !srcs.is_empty() {
                sql.push(" AND (")
                    .push(&src)
                    .push(" IS NULL OR ")
                    .push(&src)
                    .push(" NOT IN ")
                    .list(srcs.iter().map(String::as_str))
                    .push(")");
            }
            continue;
        }
        if !clause.include.is_empty() {
            sql.push(" AND ");
            d.push_value(sql, dim);
            sql.push(" IN ")
                .list(clause.include.iter().map(String::as_str));
        }
        if !clause.exclude.is_empty() {
            sql.push(" AND (");
            d.push_value(sql, dim);
            sql.push(" IS NULL OR ");
            d.push_value(sql, dim);
            sql.push(" NOT IN ")
                .list(clause.exclude.iter().map(String::as_str))
                .push(")");
        }
    }
}

/// ClickHouse `qoe_views.started_day` of a time: epoch ms / 86,400,000 truncated toward
/// zero, as `intDiv` computes it (monotonic, so `[from, to)` lies in
/// `[day_of(from), day_of(to − 1)]`).
pub(crate) fn day_of(ms: i64) -> i64 {
    ms / crate::query::DAY_MS
}

/// `started_at` floored to a UTC-aligned bucket of `width` ms (floor division, also for
/// times before 1970), as both engines write it. ClickHouse 18.16 types `Int64 % 60000`
/// by the divisor's width (`Int16`, so remainders over 32,767 wrap): the divisor is cast.
pub(crate) fn bucket_expr(d: Dialect, width: i64) -> String {
    let c = d.col("started_at");
    let w = match d {
        Dialect::ClickHouse => format!("toInt64({width})"),
        Dialect::Sqlite => width.to_string(),
    };
    format!("({c} - ((({c} % {w}) + {w}) % {w}))")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{Filters, OverviewQuery, TimeRange};

    fn filters(raw: &[&str]) -> Filters {
        let pairs: Vec<(String, String)> = raw
            .iter()
            .map(|f| ("filter".to_owned(), (*f).to_owned()))
            .collect();
        OverviewQuery::parse(&pairs, 0).expect("valid").filters
    }

    #[test]
    fn selection_sql_per_dialect() {
        let f = filters(&["os:iOS", "os:Android", "!tag.plan:free", "streamId:st1"]);
        let mut streams = StreamIds::new();
        streams.insert("https://a".into(), "st1".into());
        let sel = Selection {
            owner: "o",
            range: TimeRange {
                from_ms: 1,
                to_ms: 2,
            },
            filters: &f,
            streams: &streams,
            src: None,
        };
        let mut ch = Sql::default();
        push_selection(&mut ch, Dialect::ClickHouse, &sel);
        assert_eq!(
            ch.text,
            "owner = ? AND started_at >= ? AND started_at < ? AND started_day >= ? \
             AND started_day <= ? AND deleted = 0 AND os IN (?, ?) \
             AND src IN (?) AND (if(has(tag_keys, ?), tag_values[indexOf(tag_keys, ?)], NULL) IS NULL \
             OR if(has(tag_keys, ?), tag_values[indexOf(tag_keys, ?)], NULL) NOT IN (?))"
        );
        assert_eq!(ch.args.len(), 3 + 2 + 2 + 1 + 5);
        let mut sq = Sql::default();
        push_selection(&mut sq, Dialect::Sqlite, &sel);
        assert!(sq.text.starts_with("v.owner = ? AND v.started_at >= ?"));
        assert!(sq.text.contains("v.src IN (?)"));
        // A streamId nobody registered selects nothing.
        let f = filters(&["streamId:nope"]);
        let sel = Selection { filters: &f, ..sel };
        let mut sq = Sql::default();
        push_selection(&mut sq, Dialect::Sqlite, &sel);
        assert!(sq.text.ends_with(" AND 0 = 1"));
    }

    #[test]
    fn day_of_truncates_like_int_div() {
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(-1), 0);
        assert_eq!(day_of(-86_400_001), -1);
        assert_eq!(day_of(1_714_521_599_999), 19_843);
        assert_eq!(day_of(1_714_521_600_000), 19_844);
    }

    #[test]
    fn bucket_floor_division() {
        assert_eq!(
            bucket_expr(Dialect::ClickHouse, 60_000),
            "(started_at - (((started_at % toInt64(60000)) + toInt64(60000)) % toInt64(60000)))"
        );
    }
}
