//! Connection limits (decisions.md §10) with raw sockets, bounded in count and time: headers
//! must complete within 10 s of their first byte (slowloris), idle keep-alive connections close
//! after 60 s (shortened here), a body that stops arriving is cut off, and at most
//! `STREAMWATCH_MAX_CONNECTIONS` are open while `/healthz` keeps answering.
//!
//! Timing assertions are lower bounds (load only delays a close) plus generous upper bounds
//! that only catch a connection held forever.

mod common;

use std::time::Duration;

use common::{spawn_with, Engine, TestApp};
use streamwatch::config::HttpLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection (or `within` passes); returns what it sent and
/// when it closed.
async fn read_until_closed(sock: &mut TcpStream, within: Duration) -> (String, Option<Instant>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&got).into(), Some(Instant::now()))
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), None),
        }
    }
}

/// Sends a whole `GET /healthz` that asks to close, and waits for the answer.
async fn healthz_over_raw_socket(addr: &str) -> String {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    read_until_closed(&mut sock, Duration::from_secs(60))
        .await
        .0
}

/// A slowloris client: starts a request head and then drips one header byte a second, never
/// finishing it. Returns when its first byte went out and when the server closed it.
async fn slowloris(addr: String) -> (Instant, Option<Instant>) {
    let mut sock = TcpStream::connect(&addr).await.expect("connect");
    let first = Instant::now();
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let deadline = first + Duration::from_secs(40);
    let mut buf = [0u8; 1024];
    loop {
        tokio::select! {
            read = sock.read(&mut buf) => match read {
                Ok(0) | Err(_) => return (first, Some(Instant::now())),
                Ok(_) => {}
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if sock.write_all(b"X").await.is_err() {
                    return (first, Some(Instant::now()));
                }
            }
        }
        if Instant::now() > deadline {
            return (first, None);
        }
    }
}

/// The slowloris test of the issue: 16 connections allowed; 15 slowloris sockets leave room for
/// `/healthz`; a 16th fills the cap, and three more connections then wait in the backlog until
/// the server drops slowloris sockets, 10 s after their first byte, though they kept sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_at_ten_seconds_and_the_cap_holds() {
    let app = spawn_with(Engine::Sqlite, |c| c.max_connections = 16).await;
    let addr = addr(&app);
    let mut slow = Vec::new();
    for _ in 0..15 {
        slow.push(tokio::spawn(slowloris(addr.clone())));
    }
    // Give the 15 time to be accepted (they hold their slots from accept on).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let health = healthz_over_raw_socket(&addr).await;
    assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
    slow.push(tokio::spawn(slowloris(addr.clone())));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The cap is reached: these wait, unanswered, until slots free up.
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut sock = TcpStream::connect(&addr).await.expect("connect");
                sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .expect("write");
                let (answer, closed) = read_until_closed(&mut sock, Duration::from_secs(60)).await;
                (answer, closed.expect("answered and closed"))
            })
        })
        .collect();

    let mut first_byte_of_first = None::<Instant>;
    for s in slow {
        let (first_byte, closed) = s.await.expect("join");
        let closed = closed.expect("the server closed a slowloris connection");
        let held = closed - first_byte;
        assert!(
            held >= Duration::from_millis(9_900),
            "closed {held:?} after the first byte: before the 10 s header limit"
        );
        assert!(held < Duration::from_secs(30), "held {held:?}");
        first_byte_of_first = Some(first_byte_of_first.map_or(first_byte, |f| f.min(first_byte)));
    }
    // No slot frees before the oldest slowloris socket hits its 10 s header limit, so a
    // connection over the cap cannot be answered before that (a lower bound: load only delays).
    let earliest_free =
        first_byte_of_first.expect("slowloris sockets") + Duration::from_millis(9_900);
    for w in waiting {
        let (answer, answered_at) = w.await.expect("join");
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert!(
            answered_at >= earliest_free,
            "a connection over the cap was served before any slot was free"
        );
    }
    // And the service is fine afterwards.
    assert!(healthz_over_raw_socket(&addr)
        .await
        .starts_with("HTTP/1.1 200 "));
}

/// With shortened limits: an idle keep-alive connection outlives the header limit and closes at
/// the idle limit, counted again from each response; a body that stops arriving is a 400 once
/// the body limit passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_at_the_idle_limit_and_stalled_bodies_are_cut() {
    let limits = HttpLimits {
        header: Duration::from_secs(1),
        idle: Duration::from_secs(6),
        body: Duration::from_secs(1),
        ..HttpLimits::default()
    };
    let app = spawn_with(Engine::Sqlite, |c| c.http_limits = limits).await;
    let addr = addr(&app);

    // Idle from accept: still served after the header limit has passed.
    let mut a = TcpStream::connect(&addr).await.expect("connect");
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(30), a.read(&mut buf))
        .await
        .expect("answered")
        .expect("read");
    let answered = Instant::now();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 "));
    // Then idle after the response: closed once the idle limit has passed.
    let (_, closed) = read_until_closed(&mut a, Duration::from_secs(40)).await;
    let idle_for = closed.expect("idle connection closed") - answered;
    assert!(
        idle_for >= Duration::from_millis(5_900),
        "closed after {idle_for:?} idle"
    );

    // A never-used connection closes at the idle limit too.
    let connected = Instant::now();
    let mut b = TcpStream::connect(&addr).await.expect("connect");
    let (_, closed) = read_until_closed(&mut b, Duration::from_secs(40)).await;
    let idle_for = closed.expect("idle connection closed") - connected;
    assert!(
        idle_for >= Duration::from_millis(5_900),
        "closed after {idle_for:?}"
    );

    // A body that stops arriving.
    let mut c = TcpStream::connect(&addr).await.expect("connect");
    c.write_all(
        b"POST /api/v1/telemetry HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer svc_nope\r\n\
          Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"apiKey\"",
    )
    .await
    .expect("write");
    let (answer, _) = read_until_closed(&mut c, Duration::from_secs(30)).await;
    // The key is checked before the body is read: an unknown key is refused at once.
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");

    let cookie = app.user("dev@example.com").await;
    let minted: serde_json::Value = app
        .post(
            "/api/v1/keys",
            Some(&cookie),
            serde_json::json!({ "label": "k" }),
        )
        .await
        .json()
        .await
        .expect("json");
    let key = minted["rawKey"].as_str().expect("rawKey");
    let mut d = TcpStream::connect(&addr).await.expect("connect");
    let sent = Instant::now();
    d.write_all(
        format!(
            "POST /api/v1/telemetry HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"apiKey\""
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let (answer, closed) = read_until_closed(&mut d, Duration::from_secs(30)).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.ends_with(r#"{"errors":{"events":"Request body could not be read"}}"#),
        "{answer}"
    );
    let waited = closed.unwrap_or_else(Instant::now) - sent;
    assert!(waited >= Duration::from_millis(900), "cut after {waited:?}");
}
