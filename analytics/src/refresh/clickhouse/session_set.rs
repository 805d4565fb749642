//! The sessions of the chunk a ClickHouse refresh step reads, as a temporary table of the
//! step's own ClickHouse session.

use std::sync::atomic::{AtomicU64, Ordering};

use clickhouse::{Client, Row};
use serde::Serialize;

use crate::refresh::now_ms;
use crate::store::clickhouse::map_err;
use crate::store::AnalyticsError;

/// A row of [`SessionSet`]'s table.
#[derive(Row, Serialize)]
struct SessionIdRow<'a> {
    session_id: &'a str,
}

/// The temporary table holding the sessions a refresh step reads (see [`SessionSet`]).
pub(super) const SESSION_SET: &str = "refresh_sessions";

/// The sessions of the chunk a refresh step reads, as a temporary table of the step's own
/// ClickHouse session (HTTP `session_id`), which its reads filter on with
/// `session_id IN refresh_sessions` (still narrowing the primary-key range). Sent in each
/// query as an array literal instead, a set of 100,000 sessions cost ClickHouse 0.08–0.15 s
/// of CPU per query to parse and build, twice per chunk (docs/benchmarks.md); loading the
/// table costs 0.004 s. ClickHouse refuses overlapping requests of one session, so only
/// the step's reads go through it (its `qoe_views` insert, open while the events stream
/// in, goes through the shared client); and every request of a step must reach the same
/// server, which a `CLICKHOUSE_URL` balancing over replicas must ensure by pinning
/// sessions.
pub(super) struct SessionSet {
    client: Client,
}

impl SessionSet {
    /// A new session with an empty table.
    pub(super) async fn open(client: &Client) -> Result<Self, AnalyticsError> {
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "streamwatch-refresh-{}-{}-{}",
            std::process::id(),
            now_ms(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        // The session outlives the gaps between a step's reads (a chunk's insert is
        // answered in between); a failed step's session ends on its own.
        let client = client
            .clone()
            .with_setting("session_id", id)
            .with_setting("session_timeout", "300");
        client
            .query(&format!(
                "CREATE TEMPORARY TABLE {SESSION_SET} (session_id String) ENGINE = Memory"
            ))
            .execute()
            .await
            .map_err(map_err)?;
        Ok(SessionSet { client })
    }

    /// Makes `sessions` the set.
    pub(super) async fn load<S: AsRef<str>>(&self, sessions: &[S]) -> Result<(), AnalyticsError> {
        self.client
            .query(&format!("TRUNCATE TEMPORARY TABLE {SESSION_SET}"))
            .execute()
            .await
            .map_err(map_err)?;
        let mut insert = self
            .client
            .insert::<SessionIdRow<'_>>(SESSION_SET)
            .await
            .map_err(map_err)?;
        for s in sessions {
            insert
                .write(&SessionIdRow {
                    session_id: s.as_ref(),
                })
                .await
                .map_err(map_err)?;
        }
        insert.end().await.map_err(map_err)
    }

    pub(super) fn query(&self, sql: &str) -> clickhouse::query::Query {
        self.client.query(sql)
    }

    /// Ends the session's table now rather than at its timeout (best effort: it goes
    /// with the session anyway).
    pub(super) async fn close(self) {
        let dropped = self
            .client
            .query(&format!("DROP TEMPORARY TABLE IF EXISTS {SESSION_SET}"))
            .execute()
            .await;
        if let Err(e) = dropped {
            tracing::debug!(error = %e, "dropping the refresh step's session table");
        }
    }
}
