//! Cluster mode (scale.md §1–§2) on private ClickHouse clusters of
//! `scripts/clickhouse-cluster` (2 shards × 2 replicas and ZooKeeper, on free ports, gone
//! when the test process exits): the tables are replicated and distributed as specified; a
//! fleet split at random between two instances on one PostgreSQL gives the answers of one
//! server; and the faults of scale.md §2 with the spool off. Never the shared server.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use analytics::fleet::{Fleet, FleetConfig, GenBatch};
use common::{spawn_quiet, Engine, TestApp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::Value;
use streamwatch::config::DatabaseUrl;

/// A cluster of `scripts/clickhouse-cluster` in a directory of its own.
struct Cluster {
    dir: PathBuf,
    /// `CLICKHOUSE_URL` of every node, in node order.
    urls: Vec<String>,
    /// `CLICKHOUSE_CLUSTER` (empty for a single server).
    name: String,
    nodes: Vec<String>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse-cluster")
}

impl Cluster {
    /// Starts a cluster (`shape`: extra options of `up`, e.g. `--single`); it is purged
    /// when this test process exits, whatever happens.
    fn up(shape: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("sw-cluster-")
            .tempdir()
            .expect("tempdir")
            .keep();
        let pid = std::process::id().to_string();
        let out = Command::new(script())
            .arg("up")
            .args(shape)
            .args(["--base-port", "auto", "--dir"])
            .arg(&dir)
            .args(["--exit-with", &pid])
            .output()
            .expect("run scripts/clickhouse-cluster");
        assert!(
            out.status.success(),
            "cluster up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Cluster {
            dir,
            urls: env["CLICKHOUSE_URL"]
                .split(',')
                .map(str::to_owned)
                .collect(),
            name: env["CLICKHOUSE_CLUSTER"].clone(),
            nodes: env["CH_CLUSTER_NODES"]
                .split(',')
                .map(str::to_owned)
                .collect(),
        }
    }

    fn url_list(&self) -> String {
        self.urls.join(",")
    }

    #[allow(dead_code)]
    fn node_url(&self, node: &str) -> &str {
        let i = self.nodes.iter().position(|n| n == node).expect("node");
        &self.urls[i]
    }

    /// Runs `scripts/clickhouse-cluster <args>` on this cluster.
    #[allow(dead_code)]
    async fn control(&self, args: &[&str]) {
        let out = tokio::process::Command::new(script())
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .await
            .expect("run scripts/clickhouse-cluster");
        assert!(
            out.status.success(),
            "clickhouse-cluster {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", "--purge", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

/// The 2 × 2 cluster the tests that do not stop its processes share: started by the first
/// of them, purged when the last one running lets go of it (the test binary's other modules
/// run on long after, and need not share the machine with it).
fn shared() -> Arc<Cluster> {
    static CLUSTER: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut held = CLUSTER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = held.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(Cluster::up(&[]));
    *held = Arc::downgrade(&cluster);
    cluster
}

/// One query's text answer (TSV) from the node at `url`.
async fn sql(url: &str, query: &str) -> String {
    let r = reqwest::Client::new()
        .post(url)
        .body(query.to_owned())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("clickhouse answers");
    let status = r.status();
    let text = r.text().await.expect("body");
    assert!(status.is_success(), "{query}: {text}");
    text
}

/// An instance on `cluster` through `urls` (database `db`, relational store `pg`, else the
/// embedded one) whose refresher steps every second.
async fn instance(cluster: &Cluster, urls: &str, db: &str, pg: Option<&str>) -> TestApp {
    let (urls, name, db) = (urls.to_owned(), cluster.name.clone(), db.to_owned());
    let pg = pg.map(str::to_owned);
    spawn_quiet(Engine::Sqlite, move |c| {
        c.clickhouse_url = Some(urls);
        c.clickhouse_cluster = name;
        c.clickhouse_database = db;
        c.database_url = pg.map(DatabaseUrl::Postgres);
        c.qoe_refresh = Duration::from_secs(1);
        // The spool off (scale.md §2's right-hand column): 204 means stored in the
        // cluster, which these tests then read.
        c.spool = Some(streamwatch::config::SpoolSetting::Off);
        // Instances behind one balancer share the cookie secret.
        c.secret = Some("cluster-test-secret-of-forty-characters!".to_owned());
    })
    .await
}

async fn post_batch(app: &TestApp, key: &str, b: &GenBatch) -> StatusCode {
    let mut r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(30));
    if let Some(ua) = &b.user_agent {
        r = r.header("user-agent", ua);
    }
    r.body(b.wire_json(key))
        .send()
        .await
        .map(|r| r.status())
        .unwrap_or(StatusCode::BAD_GATEWAY)
}

/// Waits until `check` holds, polling every 200 ms; panics naming `what` after `limit`.
async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn cluster_tables_are_replicated_and_distributed_as_specified() {
    let cluster = shared();
    let db = common::test_db_name();
    let pg = common::fresh_pg_database().await;
    let app = instance(&cluster, &cluster.url_list(), &db, Some(&pg)).await;
    let tables = format!(
        "SELECT name, engine FROM system.tables WHERE database = '{db}' ORDER BY name FORMAT TSV"
    );
    let expected = "qoe_refresh_state\tReplicatedReplacingMergeTree\n\
                    qoe_views\tDistributed\n\
                    qoe_views_local\tReplicatedReplacingMergeTree\n\
                    schema_migrations\tReplicatedMergeTree\n\
                    telemetry_events\tDistributed\n\
                    telemetry_events_local\tReplicatedReplacingMergeTree\n\
                    view_batches\tDistributed\n\
                    view_batches_local\tReplicatedMergeTree\n";
    for url in &cluster.urls {
        assert_eq!(sql(url, &tables).await, expected, "tables on {url}");
    }
    // Sharded by (owner, session_id) over the local tables.
    let engine = sql(
        &cluster.urls[0],
        &format!("SELECT engine_full FROM system.tables WHERE database = '{db}' AND name = 'telemetry_events' FORMAT TSV"),
    )
    .await;
    assert!(
        engine.contains("telemetry_events_local")
            && engine.contains("cityHash64(owner, session_id)"),
        "{engine}"
    );
    // Each node replicates its shard's tables under the specified paths, and the
    // unsharded state on every node.
    for (i, node) in cluster.nodes.iter().enumerate() {
        let shard = &node[1..node.find('r').expect("s<n>r<m>")];
        let replicas = sql(
            &cluster.urls[i],
            &format!("SELECT table, zookeeper_path, replica_name FROM system.replicas WHERE database = '{db}' ORDER BY table FORMAT TSV"),
        )
        .await;
        let want: String = [
            ("qoe_refresh_state", "all".to_owned()),
            ("qoe_views_local", shard.to_owned()),
            ("schema_migrations", "all".to_owned()),
            ("telemetry_events_local", shard.to_owned()),
            ("view_batches_local", shard.to_owned()),
        ]
        .iter()
        .map(|(t, s)| {
            let base = t.trim_end_matches("_local");
            format!("{t}\t/clickhouse/tables/{s}/{db}/{base}\t{node}\n")
        })
        .collect();
        assert_eq!(replicas, want, "replicas on {node}");
    }

    // A fleet's rows: every view on one shard, both replicas of a shard holding the same.
    let cookie = app.user("ops@example.com").await;
    let key = app.api_key(&cookie).await;
    let fleet = Fleet::generate(&FleetConfig::realistic(30, 40));
    for b in &fleet.batches {
        assert_eq!(post_batch(&app, &key, b).await, StatusCode::NO_CONTENT);
    }
    let sessions: BTreeSet<&str> = fleet
        .batches
        .iter()
        .map(|b| b.session_id.as_str())
        .collect();
    let per_node = |url: String| {
        let db = db.clone();
        async move {
            sql(&url, &format!("SELECT session_id, count() FROM {db}.telemetry_events_local FINAL GROUP BY session_id ORDER BY session_id FORMAT TSV")).await
        }
    };
    // Replicas catch up by themselves: wait until each pair agrees.
    for s in 0..2 {
        let (a, b) = (cluster.urls[2 * s].clone(), cluster.urls[2 * s + 1].clone());
        wait_until("replicas of a shard agree", Duration::from_secs(60), || {
            let (a, b) = (a.clone(), b.clone());
            async move { per_node(a).await == per_node(b).await }
        })
        .await;
    }
    let shard1 = per_node(cluster.urls[0].clone()).await;
    let shard2 = per_node(cluster.urls[2].clone()).await;
    let on = |t: &str| -> BTreeSet<String> {
        t.lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_owned())
            .collect()
    };
    let (on1, on2) = (on(&shard1), on(&shard2));
    assert!(!on1.is_empty() && !on2.is_empty(), "both shards hold views");
    assert!(on1.is_disjoint(&on2), "a view lives on one shard");
    let all: BTreeSet<String> = on1.union(&on2).cloned().collect();
    assert_eq!(all, sessions.iter().map(|s| s.to_string()).collect());
    // No Buffer table on a cluster: records are in view_batches at once.
    let recorded = sql(
        &cluster.urls[3],
        &format!("SELECT uniqExact(session_id) FROM {db}.view_batches FORMAT TSV"),
    )
    .await;
    assert_eq!(recorded.trim(), sessions.len().to_string());
    app.shutdown().await;
}

/// Every answer the test compares, by path (QoE routes over the fleet's day, and each
/// session's events).
async fn answers(
    app: &TestApp,
    cookie: &str,
    sessions: &BTreeSet<String>,
) -> BTreeMap<String, (StatusCode, Value)> {
    const R: &str = "from=2024-04-30T00:00:00.000Z&to=2024-05-02T00:00:00.000Z";
    let mut paths: Vec<String> = [
        "/api/v1/qoe/overview",
        "/api/v1/qoe/timeseries?metric=views&granularity=hour",
        "/api/v1/qoe/timeseries?metric=rebufferPct&granularity=hour",
        "/api/v1/qoe/timeseries?metric=startupTimeMs&measurement=p95&granularity=hour",
        "/api/v1/qoe/breakdown?metric=playbackFailurePct&by=browser",
        "/api/v1/qoe/breakdown?metric=startupTimeMs&measurement=p95&by=contentId",
        "/api/v1/qoe/breakdown?metric=views&by=streamId&orderBy=views",
        "/api/v1/qoe/views?limit=1000",
        "/api/v1/qoe/views?limit=7",
        "/api/v1/qoe/overview?filter=!deviceType:desktop&filter=browser:Chrome&filter=browser:Safari",
        "/api/v1/qoe/timeseries?metric=avgBitrateKbps&granularity=day",
        "/api/v1/qoe/breakdown?metric=rebufferPct&by=os&orderBy=value&limit=3",
    ]
    .iter()
    .map(|p| format!("{p}{}{R}", if p.contains('?') { "&" } else { "?" }))
    .collect();
    paths.extend(
        sessions
            .iter()
            .map(|s| format!("/api/v1/telemetry/sessions/{s}/events")),
    );
    let mut out = BTreeMap::new();
    for p in paths {
        let got = common::parts(app.get(&p, Some(cookie)).await).await;
        out.insert(p, got);
    }
    out
}

#[tokio::test]
async fn a_fleet_split_between_two_instances_answers_as_one_server() {
    let cluster = shared();
    let single = Cluster::up(&["--single"]);
    let db = common::test_db_name();
    let pg = common::fresh_pg_database().await;
    // Two instances on one PostgreSQL, each listing the nodes in another order.
    let a = instance(&cluster, &cluster.url_list(), &db, Some(&pg)).await;
    let reversed: Vec<String> = cluster.urls.iter().rev().cloned().collect();
    let b = instance(&cluster, &reversed.join(","), &db, Some(&pg)).await;
    let one = instance(&single, &single.url_list(), &common::test_db_name(), None).await;

    let cookie = a.user("ops@example.com").await;
    let key = a.api_key(&cookie).await;
    let one_cookie = one.user("ops@example.com").await;
    let one_key = one.api_key(&one_cookie).await;

    // Re-sent, overlapping and reordered batches; each sent to one instance at random,
    // a quarter of them again through the other (a retry after a lost answer).
    let fleet = Fleet::generate(&FleetConfig::adversarial(11, 60));
    let mut rng = StdRng::seed_from_u64(5);
    for batch in &fleet.batches {
        assert_eq!(
            post_batch(&one, &one_key, batch).await,
            StatusCode::NO_CONTENT
        );
        let (first, other) = if rng.gen_bool(0.5) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert_eq!(post_batch(first, &key, batch).await, StatusCode::NO_CONTENT);
        if rng.gen_bool(0.25) {
            assert_eq!(post_batch(other, &key, batch).await, StatusCode::NO_CONTENT);
        }
    }
    let sessions: BTreeSet<String> = fleet.batches.iter().map(|b| b.session_id.clone()).collect();
    let views = fleet.views().len() as u64;

    // The one server's refresher has every view...
    let overview = "/api/v1/qoe/overview?from=2024-04-30T00:00:00.000Z&to=2024-05-02T00:00:00.000Z";
    wait_until(
        "the one server derived every view",
        Duration::from_secs(60),
        || async {
            let (_, body) = common::parts(one.get(overview, Some(&one_cookie)).await).await;
            body["views"].as_u64() == Some(views)
        },
    )
    .await;
    // ...and both instances answer as it does, whichever ingested what (within the
    // refresh interval and a few seconds; the one server's last views may still be
    // settling too, so both sides are read again each round).
    for app in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let want = answers(&one, &one_cookie, &sessions).await;
            assert!(want.values().all(|(s, _)| *s == StatusCode::OK), "{want:?}");
            let got = answers(app, &cookie, &sessions).await;
            if got == want {
                break;
            }
            if Instant::now() > deadline {
                let differ: Vec<_> = got
                    .iter()
                    .filter(|(p, v)| want.get(*p) != Some(v))
                    .map(|(p, v)| format!("{p}:\n  cluster {v:?}\n  one     {:?}", want.get(p)))
                    .collect();
                panic!("answers differ after 60 s:\n{}", differ.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    for app in [a, b, one] {
        app.shutdown().await;
    }
}

/// What one telemetry request got, and when.
struct Sent {
    at: Instant,
    status: StatusCode,
    batch: usize,
}

/// Sends `batches` through `app` from `senders` concurrent clients, in order; `count` goes
/// up by one per answer.
fn ingest(
    app: &TestApp,
    key: &str,
    batches: Vec<GenBatch>,
    senders: usize,
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinHandle<Vec<Sent>> {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};
    let (http, url, key) = (
        app.http.clone(),
        app.url("/api/v1/telemetry"),
        key.to_owned(),
    );
    let queue = Arc::new(Mutex::new(
        (0..batches.len()).collect::<std::collections::VecDeque<_>>(),
    ));
    let batches = Arc::new(batches);
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..senders {
            let (http, url, key, queue, batches, count) = (
                http.clone(),
                url.clone(),
                key.clone(),
                Arc::clone(&queue),
                Arc::clone(&batches),
                Arc::clone(&count),
            );
            tasks.spawn(async move {
                let mut sent = Vec::new();
                loop {
                    let Some(i) = queue.lock().expect("queue").pop_front() else {
                        return sent;
                    };
                    let b = &batches[i];
                    let mut r = http
                        .post(&url)
                        .bearer_auth(&key)
                        .header("content-type", "application/json")
                        .timeout(Duration::from_secs(30));
                    if let Some(ua) = &b.user_agent {
                        r = r.header("user-agent", ua);
                    }
                    let status = r
                        .body(b.wire_json(&key))
                        .send()
                        .await
                        .map(|r| r.status())
                        .unwrap_or(StatusCode::BAD_GATEWAY);
                    sent.push(Sent {
                        at: Instant::now(),
                        status,
                        batch: i,
                    });
                    count.fetch_add(1, Ordering::SeqCst);
                    // A fleet's pace, not a benchmark's.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
        let mut all = Vec::new();
        while let Some(sent) = tasks.join_next().await {
            all.extend(sent.expect("sender"));
        }
        all.sort_by_key(|s| s.at);
        all
    })
}

/// Waits until `count` reaches `n`.
async fn sent_at_least(count: &std::sync::atomic::AtomicUsize, n: usize) {
    wait_until("telemetry sent", Duration::from_secs(120), || async {
        count.load(std::sync::atomic::Ordering::SeqCst) >= n
    })
    .await;
}

/// Every event of every batch answered 204 is stored (read through the cluster). A read
/// through a `Distributed` table may reach a replica still fetching its shard's newest parts
/// (204 means on one replica of the shard): the replicas converge, so this reads again until
/// nothing is missing or a generous deadline passes.
async fn assert_acknowledged_stored(url: &str, db: &str, batches: &[GenBatch], sent: &[Sent]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored: BTreeSet<(String, i64, String)> = sql(
            url,
            &format!("SELECT session_id, ts, type FROM {db}.telemetry_events FINAL FORMAT TSV"),
        )
        .await
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_owned(), f[1].parse().expect("ts"), f[2].to_owned())
        })
        .collect();
        let mut missing = 0;
        for s in sent.iter().filter(|s| s.status == StatusCode::NO_CONTENT) {
            let b = &batches[s.batch];
            for e in &b.events {
                let k = (
                    b.session_id.clone(),
                    e.ts_ms,
                    e.event_type.as_str().to_owned(),
                );
                missing += usize::from(!stored.contains(&k));
            }
        }
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged events missing: {missing}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The faults of scale.md §2 with the spool off, in turn on one private 2 × 2 cluster: a
/// replica killed during ingest, the node an instance talks to killed, ZooKeeper stopped.
#[tokio::test]
async fn faults_of_a_cluster_with_the_spool_off() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let cluster = Cluster::up(&[]);
    let db = common::test_db_name();
    // The instance talks to s2r2 first, then s2r1, s1r2, s1r1.
    let order = ["s2r2", "s2r1", "s1r2", "s1r1"];
    let urls: Vec<&str> = order.iter().map(|n| cluster.node_url(n)).collect();
    let app = instance(&cluster, &urls.join(","), &db, None).await;
    let cookie = app.user("ops@example.com").await;
    let key = app.api_key(&cookie).await;
    let fleet = Fleet::generate(&FleetConfig::realistic(3, 60)).batches;
    let (first, rest) = fleet.split_at(fleet.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);

    // 1. A replica the inserts go to (the first of shard 1) SIGKILLed during ingest, and
    //    restarted: 204 throughout, nothing acknowledged lost, and it catches up alone.
    let count = Arc::new(AtomicUsize::new(0));
    let run = ingest(&app, &key, first.to_vec(), 4, Arc::clone(&count));
    sent_at_least(&count, first.len() / 4).await;
    cluster.control(&["stop-node", "s1r1", "--kill"]).await;
    sent_at_least(&count, first.len() / 2).await;
    cluster.control(&["start-node", "s1r1"]).await;
    let sent = run.await.expect("ingest");
    let refused: Vec<_> = sent
        .iter()
        .filter(|s| s.status != StatusCode::NO_CONTENT)
        .map(|s| s.status)
        .collect();
    assert!(refused.is_empty(), "a replica down: {refused:?}");
    let local = |node: &'static str| {
        let (url, db) = (cluster.node_url(node).to_owned(), db.clone());
        async move {
            sql(
                &url,
                &format!("SELECT count() FROM {db}.telemetry_events_local FORMAT TSV"),
            )
            .await
        }
    };
    wait_until(
        "the restarted replica caught up",
        Duration::from_secs(120),
        || async { local("s1r1").await == local("s1r2").await },
    )
    .await;
    assert_acknowledged_stored(cluster.node_url("s2r2"), &db, first, &sent).await;

    // 2. The node the instance talks to killed: at most 2 s of 500s, then 204 through the
    //    next endpoint.
    let count = Arc::new(AtomicUsize::new(0));
    let run = ingest(&app, &key, second.to_vec(), 4, Arc::clone(&count));
    sent_at_least(&count, second.len() / 4).await;
    cluster.control(&["stop-node", "s2r2", "--kill"]).await;
    let sent = run.await.expect("ingest");
    let failed: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.status != StatusCode::NO_CONTENT)
        .collect();
    if let (Some(f), Some(l)) = (failed.first(), failed.last()) {
        assert!(failed
            .iter()
            .all(|s| s.status == StatusCode::INTERNAL_SERVER_ERROR));
        let span = l.at - f.at;
        eprintln!("node killed: {} answers 500 over {span:?}", failed.len());
        assert!(span <= Duration::from_secs(2), "500s for {span:?}");
    }
    assert_eq!(sent.last().map(|s| s.status), Some(StatusCode::NO_CONTENT));
    // A batch acknowledged just before the kill may be on the killed node alone (204 means
    // on one replica of its shard, scale.md §2): its rows are readable once the node is back
    // and its shard's replicas agree, not while it is down.
    cluster.control(&["start-node", "s2r2"]).await;
    wait_until(
        "the restarted node's shard agrees",
        Duration::from_secs(120),
        || async { local("s2r1").await == local("s2r2").await },
    )
    .await;
    assert_acknowledged_stored(cluster.node_url("s1r1"), &db, second, &sent).await;

    // 3. ZooKeeper stopped for 30 s: telemetry 500 within 2 s, /readyz 503 naming the
    //    cause; ingest again within 30 s of its return, without a restart. From the stop
    //    on, every batch is answered 500 within 2 s: before readiness notices (its check
    //    runs every few seconds), and after.
    let stopped = Instant::now();
    cluster.control(&["stop-node", "zookeeper"]).await;
    let mut during = third[2..].iter();
    let mut unready_after = None;
    let mut answered = Vec::new();
    while unready_after.is_none() || answered.len() < 3 {
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "/readyz still 200"
        );
        let batch = during.next().expect("batches for the outage");
        let t = Instant::now();
        let status = post_batch(&app, &key, batch).await;
        answered.push((status, t.elapsed()));
        if unready_after.is_none()
            && app.get("/readyz", None).await.status() == StatusCode::SERVICE_UNAVAILABLE
        {
            unready_after = Some(stopped.elapsed());
        }
    }
    assert!(
        answered
            .iter()
            .all(|&(s, d)| s == StatusCode::INTERNAL_SERVER_ERROR && d <= Duration::from_secs(2)),
        "with ZooKeeper stopped: {answered:?}"
    );
    let (_, readyz) = common::parts(app.get("/readyz", None).await).await;
    let cause = readyz["checks"]["telemetry"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(cause.contains("read-only"), "{readyz}");
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(stopped.elapsed())).await;
    cluster.control(&["start-node", "zookeeper"]).await;
    let back = Instant::now();
    wait_until(
        "ingest after ZooKeeper's return",
        Duration::from_secs(30),
        || async { post_batch(&app, &key, &third[1]).await == StatusCode::NO_CONTENT },
    )
    .await;
    eprintln!(
        "zookeeper stopped: {} batches answered 500 (slowest {:?}); /readyz 503 after {:?}; ingest again {:?} after its return",
        answered.len(),
        answered.iter().map(|a| a.1).max(),
        unready_after,
        back.elapsed()
    );
    assert!(back.elapsed() <= Duration::from_secs(30));
    let (s, _) = common::parts(app.get("/readyz", None).await).await;
    assert_eq!(s, StatusCode::OK);
    app.shutdown().await;
}

/// The statements of the fenced block tagged `tag` in docs/operations.md, `<db>` and
/// `<old>` filled in.
fn documented_sql(tag: &str, db: &str, old: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"),
    )
    .expect("docs/operations.md");
    let open = format!("```sql {tag}\n");
    let start = doc.find(&open).unwrap_or_else(|| panic!("no block {tag}")) + open.len();
    let block = &doc[start..start + doc[start..].find("```").expect("block end")];
    block
        .split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace("<db>", db).replace("<old>", old))
        .collect()
}

#[tokio::test]
async fn one_server_moves_to_a_cluster_with_the_same_answers() {
    let cluster = shared();
    let single = Cluster::up(&["--single"]);
    let db = common::test_db_name();
    let pg = common::fresh_pg_database().await;
    let old = instance(&single, &single.url_list(), &db, Some(&pg)).await;
    let cookie = old.user("ops@example.com").await;
    let key = old.api_key(&cookie).await;
    let fleet = Fleet::generate(&FleetConfig::adversarial(21, 40));
    for b in &fleet.batches {
        assert_eq!(post_batch(&old, &key, b).await, StatusCode::NO_CONTENT);
    }
    let sessions: BTreeSet<String> = fleet.batches.iter().map(|b| b.session_id.clone()).collect();
    let views = fleet.views().len() as u64;
    let overview = "/api/v1/qoe/overview?from=2024-04-30T00:00:00.000Z&to=2024-05-02T00:00:00.000Z";
    wait_until(
        "the one server derived every view",
        Duration::from_secs(60),
        || async {
            let (_, body) = common::parts(old.get(overview, Some(&cookie)).await).await;
            body["views"].as_u64() == Some(views)
        },
    )
    .await;
    // Settled: two reads a few refresh steps apart agree.
    let mut before = answers(&old, &cookie, &sessions).await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let again = answers(&old, &cookie, &sessions).await;
        if again == before {
            break;
        }
        before = again;
    }
    assert!(before.values().all(|(s, _)| *s == StatusCode::OK));
    old.shutdown().await;

    // The documented move: the cluster's tables made by an instance, the rows copied.
    let new = instance(&cluster, &cluster.url_list(), &db, Some(&pg)).await;
    // The two DDL folders describe the same tables: every table both have (the cluster's
    // Distributed one under the name analysts use) has the same columns and types, and
    // each `_local` table those of its Distributed one. Only how `started_day` is filled
    // (MATERIALIZED on one server, DEFAULT through Distributed) may differ.
    let columns = |url: String| {
        let db = db.clone();
        async move {
            let text = sql(&url, &format!("SELECT table, name, type FROM system.columns WHERE database = '{db}' ORDER BY table, name FORMAT TSV")).await;
            let mut by_table = std::collections::BTreeMap::<String, Vec<String>>::new();
            for line in text.lines() {
                let (table, column) = line.split_once('\t').expect("table, name, type");
                by_table
                    .entry(table.to_owned())
                    .or_default()
                    .push(column.to_owned());
            }
            by_table
        }
    };
    let one_server = columns(single.urls[0].clone()).await;
    let on_cluster = columns(cluster.urls[0].clone()).await;
    let mut shared_tables = 0;
    for (table, cols) in on_cluster.iter().filter(|(t, _)| !t.ends_with("_local")) {
        if let Some(local) = on_cluster.get(&format!("{table}_local")) {
            assert_eq!(local, cols, "{table}_local and {table} on the cluster");
        }
        if let Some(same) = one_server.get(table) {
            assert_eq!(same, cols, "{table}: one server and cluster");
            shared_tables += 1;
        }
    }
    assert!(shared_tables >= 5, "tables on both: {shared_tables}");
    for s in documented_sql("move-to-cluster-on-the-one-server", &db, "") {
        sql(&single.urls[0], &s).await;
    }
    let port: u16 = single.urls[0]
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let old_native = format!("127.0.0.1:{}", port + 1);
    let node = format!("{}/?insert_distributed_sync=1", cluster.urls[0]);
    for s in documented_sql("move-to-cluster-on-a-cluster-node", &db, &old_native) {
        sql(&node, &s).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let after = answers(&new, &cookie, &sessions).await;
        if after == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "answers differ after the move: {after:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    new.shutdown().await;
}
