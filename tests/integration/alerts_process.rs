//! The alert outbox across processes (the real binary, real HTTP on loopback): a SIGKILL with
//! 100 deliveries pending loses none and sends none twice after a restart, and two instances
//! on one PostgreSQL send each delivery once. Receivers dedup by `webhook-id` and count. The
//! 100 are test deliveries to 10 channels of one receiver (a channel takes 10 tests a minute).

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::receiver::{Received, Receiver};
use common::Process;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Generous: a PostgreSQL lease of a killed attempt runs out after 30 s (3 × the 10 s
/// request timeout) before its delivery is claimed again.
const LIMIT: Duration = Duration::from_secs(120);
const DELIVERIES: usize = 100;
/// Channels the deliveries are spread over: 10 tests each, the most a minute allows.
const CHANNELS: usize = 10;

struct Session<'a> {
    p: &'a Process,
    cookie: String,
    http: reqwest::Client,
}

impl<'a> Session<'a> {
    async fn sign_up(p: &'a Process, email: &str) -> Session<'a> {
        let cookie = p.sign_up(email).await;
        Session {
            p,
            cookie,
            http: reqwest::Client::new(),
        }
    }

    async fn sign_in(p: &'a Process, email: &str) -> Session<'a> {
        let r = reqwest::Client::new()
            .post(p.url("/api/auth/sign-in/email"))
            .json(&json!({ "email": email, "password": "correct-horse-battery" }))
            .send()
            .await
            .expect("sign in");
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = common::session_cookie_of(&r).expect("cookie");
        Session {
            p,
            cookie,
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.p.url(path))
            .header("cookie", format!("auth.session_token={}", self.cookie))
            .json(&body)
            .send()
            .await
            .expect("post");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn deliveries(&self) -> Vec<Value> {
        let r = self
            .http
            .get(self.p.url("/api/v1/alerts/deliveries?limit=500"))
            .header("cookie", format!("auth.session_token={}", self.cookie))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), StatusCode::OK);
        let body: Value = r.json().await.expect("json");
        body["items"].as_array().expect("items").clone()
    }

    async fn webhook(&self, url: &str) -> String {
        let (s, ch) = self
            .post(
                "/api/v1/alerts/channels",
                json!({ "name": "hook", "type": "webhook", "url": url, "groupWindow": "0s" }),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{ch}");
        ch["id"].as_str().expect("id").to_owned()
    }

    /// `CHANNELS` webhook channels to one receiver.
    async fn webhooks(&self, url: &str) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..CHANNELS {
            ids.push(self.webhook(url).await);
        }
        ids
    }

    async fn send_test(&self, channel: &str) {
        let (s, b) = self
            .post(
                &format!("/api/v1/alerts/channels/{channel}/test"),
                json!({}),
            )
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    }

    /// Waits until every delivery of the log is `sent`: after that nothing is sent again.
    async fn until_all_sent(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let log = self.deliveries().await;
            if log.len() == n && log.iter().all(|d| d["status"] == "sent") {
                return log;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all sent: {log:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Each `webhook-id` answered, with how many times.
fn answered(got: &[Received]) -> HashMap<String, usize> {
    let mut ids = HashMap::new();
    for r in got {
        *ids.entry(r.header("webhook-id").expect("webhook-id").to_owned())
            .or_insert(0) += 1;
    }
    ids
}

async fn sigkill_with_deliveries_pending(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start().await;
    hook.hold();
    let mut first = Process::start(dir.path(), env).await;
    let s = Session::sign_up(&first, "crash@example.com").await;
    let channels = s.webhooks(&hook.url).await;
    for i in 0..DELIVERIES {
        s.send_test(&channels[i % CHANNELS]).await;
    }
    // A batch is in flight, held unanswered, when the process dies.
    hook.wait_for_arrivals(1, LIMIT).await;
    first.kill();
    hook.release_dropping();
    assert_eq!(
        hook.requests().len(),
        0,
        "nothing was answered before the kill"
    );

    let second = Process::start(dir.path(), env).await;
    let s = Session::sign_in(&second, "crash@example.com").await;
    let log = s.until_all_sent(DELIVERIES).await;
    let got = hook.requests();
    let ids = answered(&got);
    assert_eq!(ids.len(), DELIVERIES, "every delivery arrived");
    assert!(ids.values().all(|&n| n == 1), "none twice: {ids:?}");
    for d in &log {
        assert!(
            ids.contains_key(d["webhookId"].as_str().expect("webhookId")),
            "{d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_100_pending_delivers_all_once_after_restart_sqlite() {
    sigkill_with_deliveries_pending(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_100_pending_delivers_all_once_after_restart_postgres() {
    let url = common::fresh_pg_database().await;
    sigkill_with_deliveries_pending(&[("DATABASE_URL", &url)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_postgres_send_each_delivery_once() {
    let url = common::fresh_pg_database().await;
    // Instances of one deployment share the secret that seals channel secrets.
    let env = [
        ("DATABASE_URL", url.as_str()),
        (
            "STREAMWATCH_SECRET",
            "two-instances-share-this-secret-0123456789",
        ),
    ];
    let (a_dir, b_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let a = Process::start(a_dir.path(), &env).await;
    let b = Process::start(b_dir.path(), &env).await;
    let hook = Receiver::start().await;
    let on_a = Session::sign_up(&a, "two@example.com").await;
    let on_b = Session::sign_in(&b, "two@example.com").await;
    let channels = on_a.webhooks(&hook.url).await;
    // Both instances create deliveries and both senders race for all of them.
    for i in 0..DELIVERIES {
        let channel = &channels[i % CHANNELS];
        if i % 2 == 0 {
            on_a.send_test(channel).await
        } else {
            on_b.send_test(channel).await
        }
    }
    let log = on_b.until_all_sent(DELIVERIES).await;
    let ids = answered(&hook.requests());
    assert_eq!(ids.len(), DELIVERIES);
    assert!(ids.values().all(|&n| n == 1), "none twice: {ids:?}");
    assert!(
        log.iter().all(|d| d["attempts"] == 1),
        "one attempt each: {log:?}"
    );
}
