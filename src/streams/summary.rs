//! What the dashboard shows about many streams at once: counts by status, a filtered and
//! paged list, each stream's last 24 hours as hourly cells, and its latest probe latency.
//! Every query is bounded by the page (at most one page of streams) or by an index.

use std::collections::HashMap;

use super::uptime::{hour_of, HOUR_MS};
use super::{Stream, StreamError, StreamRow, Streams, COLUMNS};
use crate::states::StreamStatus;

/// Streams by what their latest probe found (decisions.md §15): a stream whose latest probe
/// was not playable (v1.1 rule: a 404 manifest, an invalid one, a failure) is **down**, whatever
/// its status string says (a 404 is `degraded` by the contract's mapping); the others by
/// status. Streams never probed yet are counted apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// Playable and `watching`.
    pub healthy: i64,
    /// Playable but `degraded` (slow).
    pub degraded: i64,
    /// Not playable.
    pub down: i64,
    /// No probe yet.
    pub unprobed: i64,
}

impl StatusCounts {
    pub fn total(&self) -> i64 {
        self.healthy + self.degraded + self.down + self.unprobed
    }
}

/// A filter and page of the streams list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFilter {
    /// Case-insensitive substring of the name or the source URL.
    pub text: Option<String>,
    pub status: Option<StreamStatus>,
    /// Only the streams whose latest probe was not playable (see [`StatusCounts`]).
    pub down: bool,
    pub limit: i64,
    pub offset: i64,
}

/// One hour of a stream's 24-hour strip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HourCell {
    /// No probe in the hour.
    None,
    /// Every probe found the stream playable.
    Healthy,
    /// Some probes found it not playable.
    Degraded,
    /// No probe found it playable.
    Failing,
}

impl HourCell {
    fn of(total: i64, down: i64) -> Self {
        match (total, down) {
            (t, _) if t <= 0 => HourCell::None,
            (_, 0) => HourCell::Healthy,
            (t, d) if d >= t => HourCell::Failing,
            _ => HourCell::Degraded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HourCell::None => "none",
            HourCell::Healthy => "healthy",
            HourCell::Degraded => "degraded",
            HourCell::Failing => "failing",
        }
    }
}

/// The 24 hours of a strip: the current hour and the 23 before it, oldest first.
pub const STRIP_HOURS: i64 = 24;

/// First hour of the strip ending with the hour of `now`.
pub fn strip_start(now: i64) -> i64 {
    hour_of(now) - (STRIP_HOURS - 1) * HOUR_MS
}

/// `$first, $first+1, …` for `n` ids.
fn placeholders(first: usize, n: usize) -> String {
    (0..n)
        .map(|i| format!("${}", first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Streams {
    /// How many streams are healthy, degraded, down or not probed yet ([`StatusCounts`]).
    pub async fn status_counts(&self) -> Result<StatusCounts, StreamError> {
        // `down_streak` counts the not-playable probes in a row up to the latest one.
        let class = "CASE WHEN last_checked_at IS NULL THEN 'unprobed' \
                     WHEN down_streak > 0 THEN 'down' ELSE status END";
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT {class}, COUNT(*) FROM streams GROUP BY {class}"
        ))
        .fetch_all(&self.db.pool)
        .await?;
        let mut c = StatusCounts::default();
        for (class, n) in rows {
            match class.as_str() {
                "unprobed" => c.unprobed += n,
                "down" => c.down += n,
                other => match StreamStatus::parse(other) {
                    Some(StreamStatus::Watching) => c.healthy += n,
                    Some(StreamStatus::Degraded) => c.degraded += n,
                    // A failing probe is never playable: counted as down above.
                    Some(StreamStatus::Failing) => c.down += n,
                    None => {}
                },
            }
        }
        Ok(c)
    }

    /// One page of the streams matching `f`, newest first, and how many match in all.
    pub async fn search(&self, f: &StreamFilter) -> Result<(Vec<Stream>, i64), StreamError> {
        // LIKE is case-insensitive for ASCII on SQLite only; lower() both sides everywhere.
        // `%` and `_` in the text are literal.
        let pattern = f.text.as_deref().map(|t| {
            let escaped = t
                .to_lowercase()
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        let filter = "($1 IS NULL OR lower(name) LIKE $1 ESCAPE '\\' OR lower(source_url) LIKE $1 ESCAPE '\\') \
                      AND ($2 IS NULL OR status = $2) AND ($3 = 0 OR down_streak > 0)";
        let status = f.status.map(|s| s.as_str());
        let down = i64::from(f.down);
        let (total,): (i64,) =
            sqlx::query_as(&format!("SELECT COUNT(*) FROM streams WHERE {filter}"))
                .bind(pattern.as_deref())
                .bind(status)
                .bind(down)
                .fetch_one(&self.db.pool)
                .await?;
        let rows: Vec<StreamRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams WHERE {filter} \
             ORDER BY created_at DESC, seq DESC LIMIT $4 OFFSET $5"
        ))
        .bind(pattern.as_deref())
        .bind(status)
        .bind(down)
        .bind(f.limit)
        .bind(f.offset)
        .fetch_all(&self.db.pool)
        .await?;
        Ok((self.with_uptime(rows).await?, total))
    }

    /// Each listed stream's hours from [`strip_start`]`(now)` to the hour of `now`, oldest
    /// first, from the hourly rollups (one indexed read per page).
    pub async fn strips(
        &self,
        ids: &[&str],
        now: i64,
    ) -> Result<HashMap<String, Vec<HourCell>>, StreamError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let start = strip_start(now);
        let sql = format!(
            "SELECT stream_id, hour, total, down FROM probe_rollups \
             WHERE hour >= $1 AND stream_id IN ({})",
            placeholders(2, ids.len())
        );
        let mut q = sqlx::query_as(&sql).bind(start);
        for id in ids {
            q = q.bind(*id);
        }
        let rows: Vec<(String, i64, i64, i64)> = q.fetch_all(&self.db.pool).await?;
        let mut strips: HashMap<String, Vec<HourCell>> = ids
            .iter()
            .map(|id| ((*id).to_owned(), vec![HourCell::None; STRIP_HOURS as usize]))
            .collect();
        for (id, hour, total, down) in rows {
            let i = (hour - start) / HOUR_MS;
            if let (Some(cells), Ok(i)) = (strips.get_mut(&id), usize::try_from(i)) {
                if let Some(cell) = cells.get_mut(i) {
                    *cell = HourCell::of(total, down);
                }
            }
        }
        Ok(strips)
    }

    /// The latency of each listed stream's newest probe (streams never probed are absent).
    pub async fn last_latencies(&self, ids: &[&str]) -> Result<HashMap<String, i64>, StreamError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        // One index probe per stream (probes_stream is ordered by created_at per stream).
        let sql = format!(
            "SELECT s.id, (SELECT p.latency_ms FROM probes p WHERE p.stream_id = s.id \
                           ORDER BY p.created_at DESC LIMIT 1) \
             FROM streams s WHERE s.id IN ({})",
            placeholders(1, ids.len())
        );
        let mut q = sqlx::query_as(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        let rows: Vec<(String, Option<i64>)> = q.fetch_all(&self.db.pool).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, ms)| Some((id, ms?)))
            .collect())
    }

    /// Every stream's id and name, by name (for filter menus).
    pub async fn names(&self) -> Result<Vec<(String, String)>, StreamError> {
        Ok(
            sqlx::query_as("SELECT id, name FROM streams ORDER BY lower(name), id")
                .fetch_all(&self.db.pool)
                .await?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_cells() {
        assert_eq!(HourCell::of(0, 0), HourCell::None);
        assert_eq!(HourCell::of(120, 0), HourCell::Healthy);
        assert_eq!(HourCell::of(120, 1), HourCell::Degraded);
        assert_eq!(HourCell::of(120, 120), HourCell::Failing);
    }

    #[test]
    fn the_strip_ends_with_the_current_hour() {
        let now = 1_767_261_600_000 + 30 * 60_000; // 10:30
        assert_eq!(strip_start(now), 1_767_261_600_000 - 23 * HOUR_MS);
    }
}
