//! The ClickHouse client of every caller (the sink's inserts, the refresher, every read):
//! one or more HTTP endpoints serving the same data (replicas, or nodes of one cluster),
//! and failover between them (scale.md §1).
//!
//! A request goes to the endpoint that last served (the first listed at start). A refused
//! connection, a timeout, or an answer saying the node cannot serve now (a replicated table
//! read-only because ZooKeeper is lost, a shard it cannot reach, a node shutting down)
//! moves that request to the next endpoint; the failed one is tried again after a backoff
//! (1 s doubling to 30 s), or at once when every endpoint is failing (so a cluster that
//! returns as a whole serves again without waiting). A node that accepts connections but
//! does not answer (hung, SIGSTOPped) is found by a ping sent beside any request that takes
//! longer than [`STALL_CHECK`]: no answer within [`PING_TIMEOUT`] abandons the request
//! there, so moving on takes under 2 s however long the request itself may legitimately
//! run. Inserts are idempotent (the dedup key), so one abandoned midway is safe to repeat.
//!
//! Requests made of several dependent calls on one node (a streamed read, a session's
//! temporary table) take one endpoint with [`ChClient::pinned`] and report its failure
//! with [`ChClient::failed`]; the caller's retry then goes elsewhere.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clickhouse::error::Error;
use clickhouse::sql::Bind;
use clickhouse::{Client, RowOwned, RowRead};

/// A request running longer than this has its endpoint pinged.
pub const STALL_CHECK: Duration = Duration::from_millis(1000);

/// An endpoint whose ping is not answered within this is abandoned.
pub const PING_TIMEOUT: Duration = Duration::from_millis(800);

/// First pause before a failed endpoint is tried again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Server error codes meaning "this node cannot serve now; another may": the request is
/// moved to the next endpoint. (Every other server error is the request's own, and would
/// fail the same anywhere.)
const CANNOT_SERVE: &[u32] = &[
    3,   // UNEXPECTED_END_OF_FILE (a connection to another node cut)
    32,  // ATTEMPT_TO_READ_AFTER_EOF (idem)
    159, // TIMEOUT_EXCEEDED (e.g. ON CLUSTER DDL waiting for a node)
    202, // TOO_MANY_SIMULTANEOUS_QUERIES
    209, // SOCKET_TIMEOUT
    210, // NETWORK_ERROR
    225, // NO_ZOOKEEPER
    241, // MEMORY_LIMIT_EXCEEDED
    242, // TABLE_IS_READ_ONLY (ZooKeeper lost)
    279, // ALL_CONNECTION_TRIES_FAILED (a shard out of reach)
    319, // UNKNOWN_STATUS_OF_INSERT
    394, // QUERY_WAS_CANCELLED (shutting down)
    999, // KEEPER_EXCEPTION
];

/// Whether `e` says the endpoint (not the request) failed: the request moves on.
pub fn moves_on(e: &Error) -> bool {
    match e {
        Error::Network(_) | Error::TimedOut => true,
        // No code: not ClickHouse's own answer (a proxy's, a cut response).
        Error::BadResponse(text) => {
            super::server_code(text).is_none_or(|c| CANNOT_SERVE.contains(&c))
        }
        _ => false,
    }
}

/// The client of one or more endpoints. Cheap to clone (shared health).
#[derive(Clone)]
pub struct ChClient {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    /// The tables are a cluster's (`Distributed` over replicated tables).
    cluster: bool,
    /// The endpoint requests go to first: the one that last served.
    current: AtomicUsize,
}

struct Endpoint {
    url: String,
    client: Client,
    health: Mutex<Health>,
}

#[derive(Default)]
struct Health {
    /// Consecutive failures (0: healthy).
    failures: u32,
    /// Not tried before this unless every endpoint is failing.
    retry_at: Option<Instant>,
}

impl Endpoint {
    fn served(&self) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        *h = Health::default();
    }

    fn failed(&self, e: &dyn std::fmt::Display) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if h.failures == 0 {
            tracing::warn!(endpoint = %self.url, error = %e, "clickhouse endpoint cannot serve: requests move to the next one");
        }
        let backoff = FIRST_BACKOFF
            .saturating_mul(1 << h.failures.min(5))
            .min(MAX_BACKOFF);
        h.failures = h.failures.saturating_add(1);
        h.retry_at = Some(Instant::now() + backoff);
    }

    /// `None` when it may be tried now, else when.
    fn waiting_until(&self, now: Instant) -> Option<Instant> {
        let h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.retry_at.filter(|t| *t > now)
    }
}

/// One endpoint taken for a multi-call request ([`ChClient::pinned`]).
#[derive(Clone)]
pub struct Pinned {
    index: usize,
    pub client: Client,
}

impl From<Client> for ChClient {
    /// One endpoint.
    fn from(client: Client) -> Self {
        ChClient::new(vec![(String::new(), client)])
    }
}

impl ChClient {
    /// A client of `endpoints` (url for logs, its client), tried in this order. Panics on
    /// an empty list (configuration parsing refuses one).
    pub fn new(endpoints: Vec<(String, Client)>) -> Self {
        assert!(!endpoints.is_empty(), "at least one ClickHouse endpoint");
        ChClient {
            inner: Arc::new(Inner {
                endpoints: endpoints
                    .into_iter()
                    .map(|(url, client)| Endpoint {
                        url,
                        client,
                        health: Mutex::new(Health::default()),
                    })
                    .collect(),
                current: AtomicUsize::new(0),
                cluster: false,
            }),
        }
    }

    /// The same endpoints, marked as a cluster's ([`ChClient::is_cluster`]).
    pub fn on_cluster(self, cluster: bool) -> ChClient {
        let mut c = self.map(|c| c);
        if let Some(inner) = Arc::get_mut(&mut c.inner) {
            inner.cluster = cluster;
        }
        c
    }

    /// Whether the tables are a cluster's: no Buffer table, no server-restart recovery
    /// (nothing is held in one node's memory), `Distributed` reads.
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster
    }

    /// How many endpoints.
    pub fn len(&self) -> usize {
        self.inner.endpoints.len()
    }

    /// Never empty ([`ChClient::new`]).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every endpoint's client, in the configured order (e.g. DDL run once per node).
    pub fn each(&self) -> impl Iterator<Item = &Client> {
        self.inner.endpoints.iter().map(|e| &e.client)
    }

    /// The same endpoints with `f` applied to each client (a setting, another database).
    /// The copy has health of its own.
    pub fn map(&self, f: impl Fn(Client) -> Client) -> ChClient {
        let mut c = ChClient::new(
            self.inner
                .endpoints
                .iter()
                .map(|e| (e.url.clone(), f(e.client.clone())))
                .collect(),
        );
        if let Some(inner) = Arc::get_mut(&mut c.inner) {
            inner.cluster = self.inner.cluster;
        }
        c
    }

    /// The order to try the endpoints in: those not backing off, from the current one on,
    /// then those backing off, soonest first.
    fn order(&self) -> Vec<usize> {
        let n = self.inner.endpoints.len();
        let start = self.inner.current.load(Ordering::Relaxed) % n;
        let now = Instant::now();
        let mut ready = Vec::with_capacity(n);
        let mut waiting = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match self.inner.endpoints[i].waiting_until(now) {
                None => ready.push(i),
                Some(t) => waiting.push((t, i)),
            }
        }
        waiting.sort();
        ready.extend(waiting.into_iter().map(|(_, i)| i));
        ready
    }

    /// The endpoint to run a multi-call request on: the first of [`ChClient::order`].
    pub fn pinned(&self) -> Pinned {
        let index = self.order()[0];
        Pinned {
            index,
            client: self.inner.endpoints[index].client.clone(),
        }
    }

    /// Reports that a request on `pinned` failed in a way another endpoint may not (the
    /// caller's retryable errors): the next request starts elsewhere.
    pub fn failed(&self, pinned: &Pinned, why: &dyn std::fmt::Display) {
        self.inner.endpoints[pinned.index].failed(why);
        self.advance_from(pinned.index);
    }

    /// Reports that a request on `pinned` was served.
    pub fn served(&self, pinned: &Pinned) {
        self.inner.endpoints[pinned.index].served();
    }

    /// Makes the endpoint after `i` current if `i` still is.
    fn advance_from(&self, i: usize) {
        let n = self.inner.endpoints.len();
        let _ = self.inner.current.compare_exchange(
            i,
            (i + 1) % n,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Runs `attempt` on one endpoint after another until one serves it (or fails it for
    /// a reason of the request's own). The last endpoint's error when none could serve.
    pub async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let order = self.order();
        let watch = order.len() > 1;
        let mut last = None;
        for i in order {
            let e = &self.inner.endpoints[i];
            let result = if watch {
                watched(&e.client, attempt(e.client.clone())).await
            } else {
                attempt(e.client.clone()).await
            };
            match result {
                Ok(v) => {
                    e.served();
                    self.inner.current.store(i, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(err) if moves_on(&err) => {
                    e.failed(&err);
                    self.advance_from(i);
                    last = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(last.expect("at least one endpoint was tried"))
    }

    /// Answers when any endpoint answers `probe` (all asked at once, so a hung one costs
    /// nothing): the supervisor's ping. The first endpoint's error when none does.
    pub async fn any<F, Fut>(&self, probe: F) -> Result<(), Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<(), Error>>,
    {
        let tries = self.inner.endpoints.iter().map(|e| {
            let fut = probe(e.client.clone());
            Box::pin(async move {
                let r = fut.await;
                match &r {
                    Ok(()) => e.served(),
                    Err(err) if moves_on(err) => e.failed(err),
                    Err(_) => {}
                }
                r
            })
        });
        let results = futures_util::future::join_all(tries).await;
        let mut first_err = None;
        for r in results {
            match r {
                Ok(()) => return Ok(()),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.expect("at least one endpoint"))
    }

    /// A request of `sql` (`?` bound client-side by [`ChQuery::bind`]).
    pub fn query(&self, sql: &str) -> ChQuery {
        ChQuery {
            client: self.clone(),
            query: self.inner.endpoints[0].client.query(sql),
            settings: Vec::new(),
        }
    }
}

/// `request`, abandoned with [`Error::TimedOut`] when it runs longer than [`STALL_CHECK`]
/// and a ping of its endpoint is then not answered within [`PING_TIMEOUT`].
async fn watched<T>(
    client: &Client,
    request: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let stalled = async {
        loop {
            tokio::time::sleep(STALL_CHECK).await;
            let ping = tokio::time::timeout(PING_TIMEOUT, client.query("SELECT 1").execute()).await;
            if !matches!(ping, Ok(Ok(()))) {
                return;
            }
        }
    };
    tokio::select! {
        r = request => r,
        () = stalled => Err(Error::TimedOut),
    }
}

/// A request built like the crate's `Query` (same method names), run with failover.
pub struct ChQuery {
    client: ChClient,
    /// Holds the text and the bound arguments (on the first endpoint's client; only its
    /// text is sent).
    query: clickhouse::query::Query,
    settings: Vec<(String, String)>,
}

impl ChQuery {
    /// Binds `value` to the next `?`.
    #[track_caller]
    pub fn bind(mut self, value: impl Bind) -> Self {
        self.query = self.query.bind(value);
        self
    }

    /// A setting of this request.
    pub fn with_setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// The request as `client` sends it.
    fn on(&self, sql: &str, client: &Client) -> clickhouse::query::Query {
        let mut q = client.query_raw(sql);
        for (k, v) in &self.settings {
            q = q.with_setting(k.clone(), v.clone());
        }
        q
    }

    fn text(&self) -> String {
        self.query.sql_display().to_string()
    }

    pub async fn execute(self) -> Result<(), Error> {
        let sql = self.text();
        self.client.run(|c| self.on(&sql, &c).execute()).await
    }

    pub async fn fetch_all<T>(self) -> Result<Vec<T>, Error>
    where
        T: RowOwned + RowRead,
    {
        let sql = self.text();
        self.client
            .run(|c| self.on(&sql, &c).fetch_all::<T>())
            .await
    }

    pub async fn fetch_one<T>(self) -> Result<T, Error>
    where
        T: RowOwned + RowRead,
    {
        let sql = self.text();
        self.client
            .run(|c| self.on(&sql, &c).fetch_one::<T>())
            .await
    }

    pub async fn fetch_optional<T>(self) -> Result<Option<T>, Error>
    where
        T: RowOwned + RowRead,
    {
        let sql = self.text();
        self.client
            .run(|c| self.on(&sql, &c).fetch_optional::<T>())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: usize) -> ChClient {
        ChClient::new(
            (0..n)
                .map(|i| {
                    (
                        format!("e{i}"),
                        Client::default().with_url(format!("http://127.0.0.1:{}", 1 + i)),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn failed_endpoints_go_last_until_their_backoff_ends() {
        let c = client(3);
        assert_eq!(c.order(), vec![0, 1, 2]);
        c.inner.endpoints[0].failed(&Error::TimedOut);
        c.advance_from(0);
        assert_eq!(c.order(), vec![1, 2, 0]);
        c.inner.endpoints[2].failed(&Error::TimedOut);
        assert_eq!(
            c.order(),
            vec![1, 0, 2],
            "soonest retry first among the failing"
        );
        c.inner.endpoints[2].served();
        assert_eq!(c.order(), vec![1, 2, 0], "served: no longer backing off");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let c = client(1);
        let e = &c.inner.endpoints[0];
        let now = Instant::now();
        e.failed(&Error::TimedOut);
        let first = e.waiting_until(now).expect("backing off") - now;
        assert!(first <= FIRST_BACKOFF + Duration::from_millis(500));
        for _ in 0..10 {
            e.failed(&Error::TimedOut);
        }
        let capped = e.waiting_until(now).expect("backing off") - now;
        assert!(capped > Duration::from_secs(20) && capped <= MAX_BACKOFF + Duration::from_secs(1));
        e.served();
        assert!(e.waiting_until(Instant::now()).is_none());
    }

    #[test]
    fn node_failures_move_on_and_request_errors_do_not() {
        let answer = |code: u32| {
            Error::BadResponse(format!("Code: {code}, e.displayText() = DB::Exception: x"))
        };
        assert!(moves_on(&Error::TimedOut));
        assert!(moves_on(&answer(242)), "read-only replica");
        assert!(moves_on(&answer(279)), "shard out of reach");
        assert!(moves_on(&Error::BadResponse("502 Bad Gateway".into())));
        assert!(!moves_on(&answer(62)), "syntax error");
        assert!(!moves_on(&answer(60)), "unknown table");
        assert!(!moves_on(&Error::RowNotFound));
    }

    #[tokio::test]
    async fn a_refused_endpoint_moves_the_request_to_the_next() {
        // Two ports nothing listens on: both refuse, and the last error is returned
        // after both were tried.
        let c = client(2);
        let mut tried = Vec::new();
        let r: Result<(), Error> = c
            .run(|cl| {
                tried.push(());
                async move { cl.query("SELECT 1").execute().await }
            })
            .await;
        assert!(matches!(r, Err(Error::Network(_))), "{r:?}");
        assert_eq!(tried.len(), 2);
    }

    #[test]
    fn bound_text_is_what_each_endpoint_sends() {
        let q = client(2)
            .query("SELECT ? AS a, ? AS b")
            .bind("x'y")
            .bind(5u32);
        assert_eq!(q.text(), "SELECT 'x\\'y' AS a, 5 AS b");
    }
}
