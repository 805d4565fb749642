//! A set of strings as a temporary table of a ClickHouse session of its own, which queries
//! filter on with `x GLOBAL IN <table>`: the sessions of a refresh step's chunk, the
//! registered sources of a breakdown by `streamId`. No list of the set goes into a query's
//! text. `GLOBAL`: on a cluster the table is sent along to every shard a `Distributed`
//! query reaches (the session, and so the table, lives on one node); on one server it is a
//! plain `IN`.

use std::sync::atomic::{AtomicU64, Ordering};

use clickhouse::{Client, Row};
use serde::Serialize;

use super::{bind, map_err};
use crate::store::sql::Sql;
use crate::store::AnalyticsError;

/// Wall-clock ms, to name sessions uniquely across restarts.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A row of [`SessionSet`]'s table.
#[derive(Row, Serialize)]
struct ValueRow<'a> {
    value: &'a str,
}

/// A set of strings as a temporary table of its own ClickHouse session (HTTP
/// `session_id`), e.g. the sessions of the chunk a refresh step reads, which its reads
/// filter on with `session_id GLOBAL IN refresh_sessions` (still narrowing the primary-key
/// range). Sent in each
/// query as an array literal instead, a set of 100,000 sessions cost ClickHouse 0.08–0.15 s
/// of CPU per query to parse and build, twice per chunk (docs/benchmarks.md); loading the
/// table costs 0.004 s. ClickHouse refuses overlapping requests of one session, so only
/// the step's reads go through it (its `qoe_views` insert, open while the events stream
/// in, goes through the shared client); and every request of the session goes to one
/// endpoint (`ingest::ChClient::pinned`): its caller's retry, after a failure, opens
/// another session, possibly elsewhere.
pub(crate) struct SessionSet {
    client: Client,
    table: &'static str,
}

impl SessionSet {
    /// A new session with an empty table named `table` (one `String` column).
    pub(crate) async fn open(client: &Client, table: &'static str) -> Result<Self, AnalyticsError> {
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "streamwatch-{table}-{}-{}-{}",
            std::process::id(),
            now_ms(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        // The session outlives the gaps between a refresh step's reads (a chunk's insert
        // is answered in between); a failed step's session ends on its own.
        let client = client
            .clone()
            .with_setting("session_id", id)
            .with_setting("session_timeout", "300");
        client
            .query(&format!(
                "CREATE TEMPORARY TABLE {table} (value String) ENGINE = Memory"
            ))
            .execute()
            .await
            .map_err(map_err)?;
        Ok(SessionSet { client, table })
    }

    /// Makes `values` the set.
    pub(crate) async fn load<S: AsRef<str>>(&self, values: &[S]) -> Result<(), AnalyticsError> {
        self.client
            .query(&format!("TRUNCATE TEMPORARY TABLE {}", self.table))
            .execute()
            .await
            .map_err(map_err)?;
        let mut insert = self
            .client
            .insert::<ValueRow<'_>>(self.table)
            .await
            .map_err(map_err)?;
        for v in values {
            insert
                .write(&ValueRow { value: v.as_ref() })
                .await
                .map_err(map_err)?;
        }
        insert.end().await.map_err(map_err)
    }

    /// A request in the set's session.
    pub(crate) fn query(&self, sql: &str) -> clickhouse::query::Query {
        self.client.query(sql)
    }

    /// [`SessionSet::query`] of `sql` with its arguments bound.
    pub(crate) fn query_sql(&self, sql: &Sql) -> clickhouse::query::Query {
        bind(&self.client, sql)
    }

    /// Ends the session's table now rather than at its timeout (best effort: it goes
    /// with the session anyway).
    pub(crate) async fn close(self) {
        let dropped = self
            .client
            .query(&format!("DROP TEMPORARY TABLE IF EXISTS {}", self.table))
            .execute()
            .await;
        if let Err(e) = dropped {
            tracing::debug!(error = %e, table = self.table, "dropping a session's temporary table");
        }
    }
}
