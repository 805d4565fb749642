//! A telemetry store that may be down: the service starts and serves while ClickHouse is
//! unreachable or hung, and recovers by itself when it comes back (decisions.md §11).
//!
//! [`SupervisedSink`] wraps the real sink with a state and a circuit breaker:
//!
//! * **connecting** — no store yet; [`SupervisedSink::run`] connects (and migrates) with
//!   backoff until it succeeds;
//! * **ready** — requests go through; a write that fails retryably or times out, or a request
//!   that gave up waiting ([`SupervisedSink::suspect`]) makes the supervisor ping the store at
//!   once, and a failed ping opens the breaker;
//! * **down** (breaker open) — every request fails at once, without queueing behind a dead
//!   store; the supervisor pings every second and closes the breaker when the store answers.
//!
//! While not ready, writes and reads fail with [`SinkError::Retryable`] immediately, so a
//! telemetry request is answered 500 well within 2 s and the SDK retries it later: nothing
//! acknowledged is ever lost, since acknowledgement still waits for the store.
//!
//! Reads are the `analytics` crate's; they go through the same breaker with
//! [`SupervisedSink::guard_read`] (fail fast while not ready, bounded by
//! [`SupervisorTiming::read_timeout`], a timeout opens the breaker), which
//! `analytics::Store::guarded_by` wires in.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};

use super::{EventSink, SinkError};
use crate::row::SinkWrite;

/// Opens the real store (connect, create the database, migrate).
pub type Connector = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn EventSink>, SinkError>> + Send>>
        + Send
        + Sync,
>;

/// How the supervisor times its checks.
#[derive(Debug, Clone, Copy)]
pub struct SupervisorTiming {
    /// Bound on one connect-and-migrate attempt.
    pub connect_timeout: Duration,
    /// Longest pause between two connect attempts (backoff doubles from 250 ms up to it).
    pub max_backoff: Duration,
    /// Bound on one ping.
    pub ping_timeout: Duration,
    /// Ping period while ready.
    pub healthy_every: Duration,
    /// Ping period while down.
    pub down_every: Duration,
    /// Bound on one write through the supervisor (the breaker opens when it passes).
    pub write_timeout: Duration,
    /// Bound on one read through the supervisor.
    pub read_timeout: Duration,
}

impl Default for SupervisorTiming {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            max_backoff: Duration::from_secs(5),
            ping_timeout: Duration::from_secs(1),
            healthy_every: Duration::from_secs(5),
            down_every: Duration::from_secs(1),
            write_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(10),
        }
    }
}

/// What readiness reports about the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Ready,
    /// Not usable now, with the reason (e.g. `connection refused`).
    Unready(String),
}

#[derive(Clone)]
enum State {
    Connecting {
        reason: String,
    },
    Ready(Arc<dyn EventSink>),
    Down {
        sink: Arc<dyn EventSink>,
        reason: String,
    },
}

struct Inner {
    name: &'static str,
    writes_in_flight: usize,
    timing: SupervisorTiming,
    state: RwLock<State>,
    /// Wakes the supervisor to ping now (a request gave up, a write failed).
    suspect: Notify,
}

/// The telemetry store behind a circuit breaker. Cheap to clone.
#[derive(Clone)]
pub struct SupervisedSink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SupervisedSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedSink")
            .field("name", &self.inner.name)
            .field("health", &self.health())
            .finish()
    }
}

impl SupervisedSink {
    /// A store named `name` (`clickhouse`, `sqlite`) that is not connected yet; the writer
    /// should keep `writes_in_flight` writes in flight on it.
    pub fn new(name: &'static str, writes_in_flight: usize, timing: SupervisorTiming) -> Self {
        Self {
            inner: Arc::new(Inner {
                name,
                writes_in_flight,
                timing,
                state: RwLock::new(State::Connecting {
                    reason: "not connected yet".to_owned(),
                }),
                suspect: Notify::new(),
            }),
        }
    }

    /// A store that is ready from the start (an embedded store that opened at start-up).
    pub fn ready(sink: Arc<dyn EventSink>, timing: SupervisorTiming) -> Self {
        let s = Self::new(sink.name(), sink.preferred_writes_in_flight(), timing);
        s.set(State::Ready(sink));
        s
    }

    /// Ready, or why not.
    pub fn health(&self) -> Health {
        match &*self.read_state() {
            State::Ready(_) => Health::Ready,
            State::Connecting { reason } | State::Down { reason, .. } => {
                Health::Unready(reason.clone())
            }
        }
    }

    /// The store when it is ready; the retryable "unavailable" error otherwise.
    fn usable(&self) -> Result<Arc<dyn EventSink>, SinkError> {
        match &*self.read_state() {
            State::Ready(sink) => Ok(Arc::clone(sink)),
            State::Connecting { reason } | State::Down { reason, .. } => Err(SinkError::Retryable(
                format!("telemetry store unavailable: {reason}"),
            )),
        }
    }

    /// A request gave up waiting on the store: check it now.
    pub fn suspect(&self) {
        self.inner.suspect.notify_one();
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, state: State) {
        let up = matches!(state, State::Ready(_));
        metrics::gauge!("streamwatch_telemetry_store_up").set(if up { 1.0 } else { 0.0 });
        *self
            .inner
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    /// Opens the breaker (ready → down) with a reason.
    fn trip(&self, reason: String) {
        let mut state = self
            .inner
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let State::Ready(sink) = &*state {
            tracing::warn!(store = self.inner.name, %reason, "telemetry store down, failing fast until it answers");
            metrics::counter!("streamwatch_telemetry_store_breaker_opens_total").increment(1);
            *state = State::Down {
                sink: Arc::clone(sink),
                reason,
            };
            metrics::gauge!("streamwatch_telemetry_store_up").set(0.0);
        }
    }

    /// The supervisor: connects (with backoff) until the store is there, then watches it,
    /// until `stop` turns true.
    pub async fn run(self, connect: Connector, mut stop: watch::Receiver<bool>) {
        let t = self.inner.timing;
        let mut backoff = Duration::from_millis(250);
        let mut attempts = 0u32;
        loop {
            if *stop.borrow() {
                return;
            }
            let state = self.read_state().clone();
            let pause = match state {
                State::Connecting { .. } => {
                    attempts += 1;
                    match tokio::time::timeout(t.connect_timeout, connect()).await {
                        Ok(Ok(sink)) => {
                            tracing::info!(
                                store = self.inner.name,
                                attempts,
                                "telemetry store ready"
                            );
                            self.set(State::Ready(sink));
                            backoff = Duration::from_millis(250);
                            continue;
                        }
                        Ok(Err(e)) => self.not_connected(attempts, e.to_string()),
                        Err(_) => self.not_connected(
                            attempts,
                            format!("no answer within {} s", t.connect_timeout.as_secs()),
                        ),
                    }
                    let pause = backoff;
                    backoff = (backoff * 2).min(t.max_backoff);
                    pause
                }
                State::Ready(sink) => {
                    tokio::select! {
                        () = tokio::time::sleep(t.healthy_every) => {}
                        () = self.inner.suspect.notified() => {}
                        _ = stop.changed() => return,
                    }
                    match ping(&sink, t.ping_timeout).await {
                        Ok(()) => metrics::gauge!("streamwatch_telemetry_store_up").set(1.0),
                        Err(reason) => self.trip(reason),
                    }
                    continue;
                }
                State::Down { sink, .. } => match ping(&sink, t.ping_timeout).await {
                    Ok(()) => {
                        tracing::info!(store = self.inner.name, "telemetry store answers again");
                        self.set(State::Ready(sink));
                        continue;
                    }
                    Err(reason) => {
                        self.set(State::Down { sink, reason });
                        t.down_every
                    }
                },
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.changed() => return,
            }
        }
    }

    fn not_connected(&self, attempts: u32, reason: String) {
        // The first failure and then every tenth: a long outage does not flood the log.
        if attempts == 1 || attempts.is_multiple_of(10) {
            tracing::warn!(store = self.inner.name, attempts, %reason, "telemetry store not reachable, retrying");
        }
        self.set(State::Connecting { reason });
    }

    /// Runs one operation on the ready store within `limit`; a retryable failure or a timeout
    /// makes the supervisor check the store at once.
    async fn call<T, F, Fut>(&self, limit: Duration, op: F) -> Result<T, SinkError>
    where
        F: FnOnce(Arc<dyn EventSink>) -> Fut,
        Fut: Future<Output = Result<T, SinkError>>,
    {
        let sink = self.usable()?;
        match tokio::time::timeout(limit, op(sink)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if e.is_retryable() {
                    self.suspect();
                }
                Err(e)
            }
            Err(_) => {
                self.trip(format!("no answer within {} s", limit.as_secs()));
                Err(SinkError::Retryable(
                    "telemetry store did not answer in time".to_owned(),
                ))
            }
        }
    }
}

impl SupervisedSink {
    /// Runs one read of the telemetry store (an `analytics` query) under the breaker: fails
    /// at once with [`SinkError::Retryable`] while the store is not ready, gives up after
    /// [`SupervisorTiming::read_timeout`] (which opens the breaker, as for a write), and a
    /// retryable failure makes the supervisor check the store at once.
    pub async fn guard_read<T, Fut>(&self, read: Fut) -> Result<T, SinkError>
    where
        Fut: Future<Output = Result<T, SinkError>>,
    {
        self.call(self.inner.timing.read_timeout, |_| read).await
    }

    /// Ready now (a cheap check, no round trip).
    pub fn is_ready(&self) -> bool {
        matches!(&*self.read_state(), State::Ready(_))
    }
}

/// Pings with a bound; the error is a short reason for readiness and logs.
async fn ping(sink: &Arc<dyn EventSink>, limit: Duration) -> Result<(), String> {
    match tokio::time::timeout(limit, sink.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

#[async_trait]
impl EventSink for SupervisedSink {
    async fn write(&self, write: SinkWrite) -> Result<(), SinkError> {
        self.call(self.inner.timing.write_timeout, |s| async move {
            s.write(write).await
        })
        .await
    }

    async fn ping(&self) -> Result<(), SinkError> {
        self.usable()?.ping().await
    }

    fn name(&self) -> &'static str {
        self.inner.name
    }

    fn preferred_writes_in_flight(&self) -> usize {
        self.inner.writes_in_flight
    }
}
