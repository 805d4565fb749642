//! No acknowledged event is lost: a load runs against the real binary, the process is killed
//! with SIGKILL mid-way, restarted on the same stores, and every batch that got a 204 must be
//! there in full — with the embedded SQLite sink and with ClickHouse.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Process;
use reqwest::StatusCode;
use serde_json::{json, Value};

const CLIENTS: usize = 16;
const EVENTS: usize = 50;

fn batch(key: &str, session: &str) -> Value {
    let events: Vec<Value> = (0..EVENTS)
        .map(|i| {
            json!({
                "type": "rebuffer_start",
                "ts": format!("2026-11-21T10:{:02}:{:02}.{:03}Z", i / 60, i % 60, i),
                "payload": { "positionMs": i, "bufferedMs": 0 }
            })
        })
        .collect();
    json!({ "apiKey": key, "sessionId": session, "events": events })
}

async fn acknowledged_batches_survive_sigkill(extra_env: Vec<(&'static str, String)>) {
    let dir = tempfile::tempdir().expect("tmp");
    let env: Vec<(&str, &str)> = extra_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut first = Process::start(dir.path(), &env).await;
    let cookie = first.sign_up("dev@example.com").await;
    let client = reqwest::Client::new();
    let (key, _) = first.mint_key(&cookie).await;

    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut load = Vec::new();
    for c in 0..CLIENTS {
        let (client, url, key, acked) = (
            client.clone(),
            first.url("/api/v1/telemetry"),
            key.clone(),
            acked.clone(),
        );
        load.push(tokio::spawn(async move {
            for n in 0.. {
                let session = format!("s-{c}-{n}");
                match client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&batch(&key, &session))
                    .send()
                    .await
                {
                    Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                        acked.lock().expect("lock").push(session)
                    }
                    // Killed mid-request or refused afterwards: the client never got a 204.
                    _ => break,
                }
            }
        }));
    }
    // Killed mid-load once some batches were acknowledged (counted, not timed: a busy machine
    // acknowledges fewer per second).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acked.lock().expect("lock").len() < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "no batches acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    for t in load {
        t.await.expect("load task");
    }
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() >= 50,
        "the load ran ({} batches acknowledged)",
        acked.len()
    );

    let second = Process::start(dir.path(), &env).await;
    let mut missing = Vec::new();
    for session in &acked {
        let r = client
            .get(second.url(&format!("/api/v1/telemetry/sessions/{session}/events")))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("read back");
        let n = if r.status() == StatusCode::OK {
            r.json::<Value>().await.expect("json")["items"]
                .as_array()
                .map_or(0, Vec::len)
        } else {
            0
        };
        if n != EVENTS {
            missing.push((session.clone(), n));
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged batches incomplete: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_batch_is_lost_with_the_embedded_sink() {
    acknowledged_batches_survive_sigkill(vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_batch_is_lost_with_clickhouse() {
    let url = std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into());
    let db = common::test_db_name();
    acknowledged_batches_survive_sigkill(vec![
        ("CLICKHOUSE_URL", url),
        ("CLICKHOUSE_DATABASE", db),
        // The direct path; the spool's SIGKILL test is in the `spool` module.
        ("STREAMWATCH_SPOOL", "off".to_owned()),
    ])
    .await;
}

/// SIGTERM lets in-flight writes finish: under a steady load, every request answered 204
/// before or during the shutdown is stored, and the process exits cleanly. The signal is sent
/// only once batches are being acknowledged, so the test always checks some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_writes() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().expect("tmp");
    let mut p = Process::start(dir.path(), &[]).await;
    let cookie = p.sign_up("dev@example.com").await;
    let client = reqwest::Client::new();
    let (key, _) = p.mint_key(&cookie).await;
    let acks = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..16 {
        let (client, url, key, acks) = (
            client.clone(),
            p.url("/api/v1/telemetry"),
            key.clone(),
            Arc::clone(&acks),
        );
        // Each worker posts one batch after another until the server stops answering 204.
        workers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0.. {
                let session = format!("t-{w}-{n}");
                let ok = client
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&batch(&key, &session))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::NO_CONTENT);
                if !ok {
                    break;
                }
                acked.push(session);
                acks.fetch_add(1, Ordering::SeqCst);
            }
            acked
        }));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acks.load(Ordering::SeqCst) < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "no batches acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = p.terminate();
    assert!(status.success(), "graceful exit: {status:?}");
    let acked: Vec<String> = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flat_map(|r| r.expect("task"))
        .collect();
    assert!(acked.len() >= 50, "{} acknowledged", acked.len());
    let second = Process::start(dir.path(), &[]).await;
    for session in &acked {
        let r = client
            .get(second.url(&format!("/api/v1/telemetry/sessions/{session}/events")))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("read back");
        assert_eq!(r.status(), StatusCode::OK, "{session}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(EVENTS),
            "{session}"
        );
    }
}
