//! The HTTP/1.1 server loop, with the connection limits of decisions.md §10 that `axum::serve`
//! cannot express:
//!
//! * at most `STREAMWATCH_MAX_CONNECTIONS` connections are open; past that, new ones wait in
//!   the kernel's listen backlog (a permit is taken before `accept`), so a flood of idle
//!   sockets can neither exhaust the file descriptors nor starve connections already open;
//! * request headers must arrive within [`HttpLimits::header`] (10 s) of their first byte;
//! * an idle keep-alive connection (no request under way, no byte received) closes after
//!   [`HttpLimits::idle`] (60 s);
//! * a request body must keep arriving: [`HttpLimits::body`] (30 s) without a byte ends it
//!   (the handler sees an unreadable body, answered as a 400);
//! * a response must keep leaving (decisions.md §14): [`HttpLimits::write`] (30 s) in which the
//!   client takes no byte of it ends the connection, so a reader that never reads cannot pin a
//!   connection (and its buffered responses) forever;
//! * at most one response is ahead of the client: a pipelined request is handled only once the
//!   previous response has left hyper's buffer for the socket ([`Flushed`]), so 40 pipelined
//!   requests never read build one response at a time, not 40.
//!
//! hyper has one timer for the first two: its header-read timeout starts as soon as a
//! connection waits for a request head, idle or not. [`ConnTimer`] gives it both meanings: the
//! deadline is the idle limit until the first byte of a head arrives ([`WatchedIo`] notes it),
//! then the header limit from that byte.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::timeout::RequestBodyTimeoutLayer;

pub use crate::config::HttpLimits;

/// Serves `router` on `listener` until `shutdown` resolves, with at most `max_connections`
/// open; then stops accepting and waits for the requests under way to finish (idle
/// connections are closed at once).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    max_connections: usize,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_with(
        listener,
        router,
        limits,
        max_connections,
        Some("streamwatch_http_connections_open"),
        shutdown,
    )
    .await
}

/// Connections the metrics listener holds open at most (decisions.md §14): a scraper needs one.
pub const METRICS_MAX_CONNECTIONS: usize = 64;

/// [`serve`] for the metrics listener: the same header, idle and write limits, at most
/// [`METRICS_MAX_CONNECTIONS`], and its connections not counted with the API's.
pub async fn serve_metrics(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_with(
        listener,
        router,
        limits,
        METRICS_MAX_CONNECTIONS,
        None,
        shutdown,
    )
    .await
}

async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    max_connections: usize,
    connections_gauge: Option<&'static str>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    // Around the router, not through `Router::layer`: no boxed level per route.
    let router = ServiceBuilder::new()
        .layer(RequestBodyTimeoutLayer::new(limits.body))
        .service(router);
    tokio::pin!(shutdown);
    loop {
        // The permit comes first: at the cap, connections wait in the listen backlog.
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (or a connection reset before accept): pause
                    // instead of spinning, then go on serving the connections already open.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let head = Arc::new(HeadWait::default());
        let flushed = Arc::new(Flushed::default());
        let io = TokioIo::new(WatchedIo {
            inner: stream,
            head: Arc::clone(&head),
            flushed: Arc::clone(&flushed),
            write_limit: limits.write,
            stalled: None,
        });
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let (router, flushed) = (router.clone(), Arc::clone(&flushed));
            async move {
                // A pipelined request waits until the response before it has left for the
                // socket: one response ahead of the client at most.
                flushed.wait().await;
                router.oneshot(req).await
            }
        });
        let conn = http1::Builder::new()
            .timer(ConnTimer { head, limits })
            .header_read_timeout(limits.header)
            .keep_alive(true)
            .serve_connection(io, service);
        let conn = graceful.watch(conn);
        let open = connections_gauge.map(|name| metrics::gauge!(name));
        if let Some(g) = &open {
            g.increment(1.0);
        }
        tokio::spawn(async move {
            let ended = conn.await;
            if let Some(g) = &open {
                g.decrement(1.0);
            }
            if let Err(e) = ended {
                // Timeouts, resets and malformed requests end only their own connection.
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Whether the connection waits for a request head, and when its first byte came.
#[derive(Debug, Default)]
struct HeadWait {
    waiting: AtomicBool,
    first_byte: Mutex<Option<Instant>>,
}

impl HeadWait {
    fn begin(&self) {
        *self
            .first_byte
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.waiting.store(true, Ordering::Release);
    }

    fn end(&self) {
        self.waiting.store(false, Ordering::Release);
    }

    fn saw_bytes(&self) {
        if self.waiting.load(Ordering::Acquire) {
            let mut first = self
                .first_byte
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            first.get_or_insert_with(Instant::now);
        }
    }

    fn first_byte(&self) -> Option<Instant> {
        *self
            .first_byte
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether bytes hyper handed to the socket are still on their way, and a wake-up for the
/// request that waits for them. hyper calls `poll_flush` on the socket only once its own
/// buffer is empty, so a completed flush means every response so far has left the process.
#[derive(Debug, Default)]
struct Flushed {
    unflushed: AtomicBool,
    done: tokio::sync::Notify,
}

impl Flushed {
    fn wrote(&self) {
        self.unflushed.store(true, Ordering::Release);
    }

    fn flushed(&self) {
        if self.unflushed.swap(false, Ordering::AcqRel) {
            self.done.notify_waiters();
        }
    }

    /// Returns once nothing written is waiting in hyper's buffer.
    async fn wait(&self) {
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.unflushed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// The socket, noting the first byte of each request head, when written bytes have been
/// flushed, and how long a write has been blocked (the client not reading).
struct WatchedIo {
    inner: TcpStream,
    head: Arc<HeadWait>,
    flushed: Arc<Flushed>,
    write_limit: Duration,
    /// Armed when a write finds the socket full; cleared by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WatchedIo {
    /// A write that made no progress arms (or checks) the write limit: past it, the write
    /// fails and hyper ends the connection. Any progress disarms it.
    fn watch_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.write_limit;
        let stall = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if stall.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no byte of the response within the write limit",
            )));
        }
        Poll::Pending
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.head.saw_bytes();
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !buf.is_empty() {
            self.flushed.wrote();
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch_write(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.flushed.flushed();
        }
        self.watch_write(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if bufs.iter().any(|b| !b.is_empty()) {
            self.flushed.wrote();
        }
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// hyper's timer for one HTTP/1 connection. hyper asks it for exactly one kind of deadline,
/// the header-read timeout, each time the connection starts waiting for a request head.
#[derive(Clone)]
struct ConnTimer {
    head: Arc<HeadWait>,
    limits: HttpLimits,
}

impl hyper::rt::Timer for ConnTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(PlainSleep(Box::pin(tokio::time::sleep(duration))))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.head.begin();
        // hyper computed the deadline as "now + header limit": the wait began at `began`.
        let began = Instant::from_std(deadline) - self.limits.header;
        Box::pin(HeadSleep {
            head: Arc::clone(&self.head),
            idle_deadline: began + self.limits.idle,
            header: self.limits.header,
            sleep: Box::pin(tokio::time::sleep_until(began + self.limits.idle)),
        })
    }
}

/// Completes `header` after the first byte of the head, or `idle` after the wait began when
/// no byte came.
struct HeadSleep {
    head: Arc<HeadWait>,
    idle_deadline: Instant,
    header: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = match self.head.first_byte() {
            Some(first) => first + self.header,
            None => self.idle_deadline,
        };
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        self.sleep.as_mut().poll(cx)
    }
}

impl Drop for HeadSleep {
    // hyper drops the timer as soon as the head is parsed: what follows is body.
    fn drop(&mut self) {
        self.head.end();
    }
}

impl hyper::rt::Sleep for HeadSleep {}

struct PlainSleep(Pin<Box<tokio::time::Sleep>>);

impl Future for PlainSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for PlainSleep {}

/// Raises the process's open-file limit towards what `max_connections` needs (plus room for
/// database pools, probes and files), and returns the connection cap the limit allows.
pub fn fit_connection_cap(max_connections: usize) -> usize {
    /// Descriptors kept for everything that is not an HTTP connection.
    const RESERVE: u64 = 1024;
    let wanted = max_connections as u64 + RESERVE;
    match rlimit::increase_nofile_limit(wanted) {
        Ok(limit) if limit >= wanted => max_connections,
        Ok(limit) => {
            let fitted = usize::try_from(limit.saturating_sub(RESERVE).max(64)).unwrap_or(64);
            tracing::warn!(
                wanted = max_connections,
                allowed = fitted,
                open_files_limit = limit,
                "STREAMWATCH_MAX_CONNECTIONS is above what the open-file limit allows; lowered"
            );
            fitted
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-file limit");
            max_connections
        }
    }
}
