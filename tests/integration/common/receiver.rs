//! A webhook receiver for the alert tests: a real HTTP/1.1 server on loopback that records
//! every connection and request and answers from a script (status codes in order, then the
//! default), optionally holding requests unanswered until released (answered) or dropped
//! (never answered: the sender died waiting). Hand-written on a `TcpListener` so it can count
//! connections that never send a request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

#[derive(Default)]
struct State {
    requests: Vec<Received>,
    script: VecDeque<u16>,
    default_status: u16,
    retry_after: Option<String>,
    /// Requests read, answered or not.
    arrivals: usize,
    /// Held requests are closed unanswered and unrecorded when released.
    drop_held: bool,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    state: Arc<Mutex<State>>,
    connections: Arc<AtomicUsize>,
    arrived: Arc<Notify>,
    hold: watch::Sender<bool>,
}

impl Receiver {
    /// Listens on `ip:0` (any loopback address: 127.0.0.2 is not 127.0.0.1 to the guard).
    pub async fn start_on(ip: &str) -> Receiver {
        let listener = TcpListener::bind(format!("{ip}:0"))
            .await
            .expect("bind receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State {
            default_status: 200,
            ..State::default()
        }));
        let connections = Arc::new(AtomicUsize::new(0));
        let arrived = Arc::new(Notify::new());
        let (hold, held) = watch::channel(false);
        let r = Receiver {
            url,
            state: state.clone(),
            connections: connections.clone(),
            arrived: arrived.clone(),
            hold,
        };
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (state, arrived, mut held) = (state.clone(), arrived.clone(), held.clone());
                tokio::spawn(async move {
                    let (read, mut write) = sock.into_split();
                    let mut reader = BufReader::new(read);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                        let mut headers = Vec::new();
                        let mut length = 0usize;
                        loop {
                            let mut h = String::new();
                            if reader.read_line(&mut h).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let h = h.trim_end();
                            if h.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = h.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    length = v.trim().parse().unwrap_or(0);
                                }
                                headers.push((k.trim().to_owned(), v.trim().to_owned()));
                            }
                        }
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        state.lock().expect("state").arrivals += 1;
                        arrived.notify_waiters();
                        // Held: the request stays unanswered until released (or the sender
                        // gives up, or dies).
                        let was_held = *held.borrow();
                        let _ = held.wait_for(|h| !*h).await;
                        let (status, retry_after) = {
                            let mut s = state.lock().expect("state");
                            if was_held && s.drop_held {
                                return;
                            }
                            s.requests.push(Received {
                                path,
                                headers,
                                body: String::from_utf8_lossy(&body).into_owned(),
                            });
                            let status = s.script.pop_front().unwrap_or(s.default_status);
                            (status, s.retry_after.clone())
                        };
                        arrived.notify_waiters();
                        let mut resp = format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: keep-alive\r\n"
                        );
                        if let Some(ra) = retry_after {
                            resp.push_str(&format!("retry-after: {ra}\r\n"));
                        }
                        resp.push_str("\r\nok");
                        if write.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        r
    }

    pub async fn start() -> Receiver {
        Receiver::start_on("127.0.0.1").await
    }

    /// Answers these statuses to the next requests, in order, then the default.
    pub fn script(&self, statuses: &[u16]) {
        self.state.lock().expect("state").script.extend(statuses);
    }

    pub fn default_status(&self, status: u16) {
        self.state.lock().expect("state").default_status = status;
    }

    pub fn retry_after(&self, value: Option<&str>) {
        self.state.lock().expect("state").retry_after = value.map(str::to_owned);
    }

    /// Holds every request unanswered until [`Receiver::release`] (recorded on release).
    pub fn hold(&self) {
        let _ = self.hold.send(true);
    }

    pub fn release(&self) {
        let _ = self.hold.send(false);
    }

    /// Ends the hold without answering what was held: those requests are closed unanswered
    /// and not recorded (their sender is gone); later ones are answered.
    pub fn release_dropping(&self) {
        self.state.lock().expect("state").drop_held = true;
        let _ = self.hold.send(false);
    }

    /// Requests read so far, answered or held.
    pub fn arrivals(&self) -> usize {
        self.state.lock().expect("state").arrivals
    }

    /// Waits until at least `n` requests have been read (held or answered).
    pub async fn wait_for_arrivals(&self, n: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.arrived.notified();
            if self.arrivals() >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("receiver read {} of {n} requests", self.arrivals());
            }
        }
    }

    pub fn requests(&self) -> Vec<Received> {
        self.state.lock().expect("state").requests.clone()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` requests have arrived; panics after `limit` (a broken run).
    pub async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.arrived.notified();
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("receiver got {} of {n} requests", self.requests().len());
            }
        }
    }
}
