//! The ClickHouse engine of the [`Store`](crate::Store): the client and how a request is
//! built from [`Sql`] (this file), the rows of `qoe_views` and of the reads ([`rows`]), and
//! the reads themselves ([`reads`]): aggregations over `qoe_views FINAL`, the views list and
//! the session read-back over `telemetry_events FINAL`. The refresher that writes
//! `qoe_views` is [`crate::refresh`]'s. Runs on ClickHouse 18.16 and current releases:
//! client-side `?` binds, RowBinary without type validation, no function newer than 18.16
//! (shared/notes).

mod reads;
pub(crate) mod rows;
pub(crate) mod session;

use ingest::ChClient;

use super::sql::{Arg, Dialect, Sql};
use super::AnalyticsError;

pub(crate) use self::rows::ViewRow;
pub(crate) use self::session::SessionSet;

const D: Dialect = Dialect::ClickHouse;

/// The ClickHouse engine.
#[derive(Clone)]
pub(crate) struct ChStore {
    /// The shared client of every endpoint (database selected); the refresher and the
    /// events pages use it.
    pub(crate) client: ChClient,
}

pub(crate) fn map_err(e: clickhouse::error::Error) -> AnalyticsError {
    ingest::sink::clickhouse::classify_error(e).into()
}

impl ChStore {
    pub fn new(client: ChClient) -> Self {
        ChStore { client }
    }

    /// The request of `sql`, its arguments bound in order.
    fn query(&self, sql: &Sql) -> ingest::sink::clickhouse::ChQuery {
        let mut q = self.client.query(&sql.text);
        for a in &sql.args {
            q = match a {
                Arg::Str(s) => q.bind(s.as_str()),
                Arg::Int(i) => q.bind(*i),
            };
        }
        q
    }
}

/// The request of `sql` on one endpoint's `client`, its arguments bound in order.
pub(crate) fn bind(client: &clickhouse::Client, sql: &Sql) -> clickhouse::query::Query {
    let mut q = client.query(&sql.text);
    for a in &sql.args {
        q = match a {
            Arg::Str(s) => q.bind(s.as_str()),
            Arg::Int(i) => q.bind(*i),
        };
    }
    q
}
