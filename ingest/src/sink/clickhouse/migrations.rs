//! The driver of the one migration runner (the `migrate` crate) for ClickHouse:
//! `migrations/clickhouse/` on one server, `migrations/clickhouse-cluster/` on a cluster
//! (scale.md §2: every table `ON CLUSTER`, replicated and distributed, the record of
//! applied migrations a table replicated to every node, so every instance agrees).

use clickhouse::Row;
use serde::Deserialize;

use super::{map_err, ClickHouseSink, MIGRATIONS_TABLE};
use crate::sink::SinkError;

#[derive(Row, Deserialize)]
struct AppliedRow {
    version: u32,
    checksum: String,
}

/// Why the migrations did not run: a file changed since it was applied (never retried), or
/// the store's own failure.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Changed(#[from] migrate::Changed),
    #[error(transparent)]
    Store(#[from] SinkError),
}

impl From<MigrationError> for SinkError {
    fn from(e: MigrationError) -> Self {
        match e {
            MigrationError::Changed(c) => SinkError::Permanent(c.to_string()),
            MigrationError::Store(e) => e,
        }
    }
}

impl ClickHouseSink {
    /// The migrations of this sink's mode.
    fn migration_set(&self) -> &'static migrate::Set {
        if self.cluster.is_some() {
            &migrate::CLICKHOUSE_CLUSTER
        } else {
            &migrate::CLICKHOUSE
        }
    }

    /// `sql` with the sink's `{database}` and `{cluster}` spelled out (ClickHouse's own
    /// macros, `{shard}` and `{replica}`, stay for the servers to expand).
    fn expand(&self, sql: &str) -> String {
        let sql = sql.replace("{database}", &self.database);
        match &self.cluster {
            Some(c) => sql.replace("{cluster}", c),
            None => sql,
        }
    }

    /// Applies every migration of the sink's folder not yet recorded, by the one runner's
    /// rule (the `migrate` crate): this database's tables, `analytics`' included
    /// (`qoe_views`, `qoe_refresh_state`, migrated here on its behalf). Idempotent: the
    /// statements are `IF NOT EXISTS` (and each `ADD COLUMN` asks first), so two instances
    /// starting at once are harmless; a version recorded twice is read once.
    pub async fn migrate(&self) -> Result<(), MigrationError> {
        let table = match &self.cluster {
            None => format!(
                "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} \
                 (version UInt32, name String, applied_at DateTime, checksum String) \
                 ENGINE = MergeTree ORDER BY version"
            ),
            // One replica per node, not per shard: every node holds the whole record.
            Some(cluster) => format!(
                "CREATE TABLE IF NOT EXISTS {db}.{MIGRATIONS_TABLE} ON CLUSTER {cluster} \
                 (version UInt32, name String, applied_at DateTime, checksum String) \
                 ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/{db}/{MIGRATIONS_TABLE}', '{{replica}}') \
                 ORDER BY version",
                db = self.database
            ),
        };
        self.client.query(&table).execute().await.map_err(map_err)?;
        // A table from before checksums: the column, added once (another instance may have
        // added it in between, which the second check sees).
        if !self.has_column(MIGRATIONS_TABLE, "checksum").await? {
            let added = self
                .client
                .query(&format!(
                    "ALTER TABLE {MIGRATIONS_TABLE} ADD COLUMN checksum String DEFAULT ''"
                ))
                .execute()
                .await;
            if let Err(e) = added {
                if !self.has_column(MIGRATIONS_TABLE, "checksum").await? {
                    return Err(map_err(e).into());
                }
            }
        }
        // `max`: a row written before checksums has '', one written since has the sum.
        let applied: Vec<migrate::Applied> = self
            .client
            .query(&format!(
                "SELECT version, max(checksum) AS checksum FROM {MIGRATIONS_TABLE} GROUP BY version"
            ))
            .fetch_all::<AppliedRow>()
            .await
            .map_err(map_err)?
            .into_iter()
            .map(|r| migrate::Applied {
                version: i64::from(r.version),
                checksum: Some(r.checksum).filter(|c| !c.is_empty()),
            })
            .collect();
        let plan = self.migration_set().plan(&applied)?;
        for m in plan.pending {
            let name = m.name;
            for statement in migrate::statements(&self.expand(m.sql)) {
                let added = added_column(&statement);
                if let Some((table, column)) = added {
                    if self.has_column(table, column).await? {
                        continue;
                    }
                }
                if let Err(e) = self.client.query(&statement).execute().await {
                    // Another instance added the column between the check and this
                    // statement (18.16 has no `ADD COLUMN IF NOT EXISTS`): done all the same.
                    if let Some((table, column)) = added {
                        if self.has_column(table, column).await? {
                            continue;
                        }
                    }
                    let e = map_err(e);
                    // A node that cannot serve (ON CLUSTER waiting for a node that is
                    // down, ZooKeeper lost) is worth another try; anything else is the
                    // file's.
                    return Err(match e {
                        SinkError::Retryable(e) => {
                            SinkError::Retryable(format!("clickhouse migration {name} failed: {e}"))
                        }
                        SinkError::Permanent(e) => {
                            SinkError::Permanent(format!("clickhouse migration {name} failed: {e}"))
                        }
                    }
                    .into());
                }
            }
            self.record(m).await?;
            tracing::info!(engine = "clickhouse", migration = name, cluster = ?self.cluster, "applied migration");
        }
        for m in plan.unrecorded {
            self.record(m).await?;
        }
        Ok(())
    }

    /// A row of `m` with its checksum.
    async fn record(&self, m: &migrate::Migration) -> Result<(), SinkError> {
        self.client
            .query(&format!(
                "INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at, checksum) \
                 VALUES (?, ?, now(), ?)"
            ))
            .bind(u32::try_from(m.version).unwrap_or(u32::MAX))
            .bind(m.name)
            .bind(m.checksum())
            .execute()
            .await
            .map_err(map_err)
    }

    /// Whether `table` of the sink's database has `column` (18.16 has no
    /// `ADD COLUMN IF NOT EXISTS`; the migration runner asks first).
    async fn has_column(&self, table: &str, column: &str) -> Result<bool, SinkError> {
        #[derive(Row, Deserialize)]
        struct Count {
            n: u64,
        }
        let found = self
            .client
            .query(
                "SELECT toUInt64(count()) AS n FROM system.columns \
                 WHERE database = ? AND table = ? AND name = ?",
            )
            .bind(&self.database)
            .bind(table)
            .bind(column)
            .fetch_one::<Count>()
            .await
            .map_err(map_err)?;
        Ok(found.n > 0)
    }
}

/// The table and column of an `ALTER TABLE <table> ADD COLUMN <column> …` statement.
pub(super) fn added_column(statement: &str) -> Option<(&str, &str)> {
    let w: Vec<&str> = statement.split_whitespace().take(6).collect();
    let is = |i: usize, word: &str| w.get(i).is_some_and(|x| x.eq_ignore_ascii_case(word));
    (w.len() == 6 && is(0, "ALTER") && is(1, "TABLE") && is(3, "ADD") && is(4, "COLUMN"))
        .then(|| (w[2], w[5]))
}
