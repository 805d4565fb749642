//! Group-commit batch writer: requests submit their rows and await an ack; one
//! task writes at once when idle and gathers everything that queued while a write
//! was in flight into the next large insert. No timer, no fixed delay. Where the
//! sink runs writes in parallel (ClickHouse: two in flight), a second write starts
//! as soon as a full-size batch ([`WriterConfig::parallel_write_min_rows`]) waits.
//!
//! Guarantees:
//! - a submitter gets `Ok` only after the write carrying its rows returned `Ok`
//!   from the sink (durable), and gets that write's error otherwise;
//! - a write carries whole submissions only, at most `max_rows_per_write` rows
//!   (one submission larger than that is written alone);
//! - [`BatchWriter::shutdown`] stops accepting, then finishes every queued and
//!   in-flight write before returning.

use std::collections::VecDeque;
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::row::{bare_records, BatchRecord, EventRow, SinkWrite};
use crate::sink::{EventSink, SinkError};

/// Tuning of the [`BatchWriter`].
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// Upper bound of rows in one sink write (default 100,000).
    pub max_rows_per_write: usize,
    /// Writes allowed in flight at once; 0 (the default) lets the sink choose
    /// ([`EventSink::preferred_writes_in_flight`]). With 1, everything that arrives
    /// during a write goes into the next one: the largest inserts, but a request
    /// may wait for a whole write before its own starts. With 2, a new write starts
    /// while one is in flight, which halves that wait where the store runs
    /// inserts in parallel (ClickHouse).
    pub max_in_flight: usize,
    /// Submissions that may wait in the queue before `submit` applies
    /// backpressure (default 16,384).
    pub queue_capacity: usize,
    /// With more than one write allowed in flight: a write beyond the first
    /// starts only once at least this many rows wait (default 5,000), so
    /// parallel writes are full-size inserts, not a trickle of small ones (each
    /// ClickHouse insert has a large fixed cost). An idle writer still writes at
    /// once, whatever the size; nothing ever waits on a timer.
    pub parallel_write_min_rows: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            max_rows_per_write: 100_000,
            max_in_flight: 0,
            queue_capacity: 16_384,
            parallel_write_min_rows: 5_000,
        }
    }
}

/// One request's rows, its batch records and the channel its outcome is reported on.
struct Job {
    rows: Vec<EventRow>,
    batches: Vec<BatchRecord>,
    ack: Ack,
}

/// Cloneable submission side of the writer, held by request handlers.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Job>,
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").finish_non_exhaustive()
    }
}

/// Error returned when the writer no longer accepts rows.
fn closed() -> SinkError {
    SinkError::Retryable("batch writer is shut down".to_owned())
}

impl WriterHandle {
    /// Queues one ingest batch (its rows and its [`BatchRecord`], see
    /// [`crate::Batch::into_write`]) and waits until both are durably stored (`Ok`) or
    /// the write that carried them failed (`Err`). Empty `rows` return `Ok` at once.
    pub async fn submit_batch(
        &self,
        rows: Vec<EventRow>,
        record: BatchRecord,
    ) -> Result<(), SinkError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.send(rows, vec![record]).await
    }

    /// Queues `rows` and waits until they are durably stored (`Ok`) or the write
    /// that carried them failed (`Err`). An empty `rows` returns `Ok` at once.
    ///
    /// The row-only form: each `(owner, session)` in `rows` gets a record without
    /// context and with an unknown user agent ([`BatchRecord::bare`]); the ingest route
    /// uses [`WriterHandle::submit_batch`].
    pub async fn submit(&self, rows: Vec<EventRow>) -> Result<(), SinkError> {
        if rows.is_empty() {
            return Ok(());
        }
        let batches = bare_records(&rows);
        self.send(rows, batches).await
    }

    /// Queues a whole write (many batches' rows and records: the spool's drainer) and waits
    /// until it is durably stored (`Ok`) or its write failed (`Err`). Written alone when it
    /// holds more than `max_rows_per_write` rows.
    pub async fn submit_write(&self, write: SinkWrite) -> Result<(), SinkError> {
        if write.is_empty() {
            return Ok(());
        }
        self.send(write.rows, write.batches).await
    }

    async fn send(&self, rows: Vec<EventRow>, batches: Vec<BatchRecord>) -> Result<(), SinkError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Job { rows, batches, ack })
            .await
            .map_err(|_| closed())?;
        // A dropped ack sender means the writer task died before answering.
        done.await.unwrap_or_else(|_| Err(closed()))
    }
}

/// The writer task and its shutdown control.
pub struct BatchWriter {
    handle: WriterHandle,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    failure: watch::Receiver<Option<String>>,
}

impl std::fmt::Debug for BatchWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchWriter").finish_non_exhaustive()
    }
}

impl BatchWriter {
    /// Spawns the writer task on the current tokio runtime.
    pub fn spawn(sink: Arc<dyn EventSink>, config: WriterConfig) -> Self {
        let max_in_flight = match config.max_in_flight {
            0 => sink.preferred_writes_in_flight(),
            n => n,
        };
        let max_rows_per_write = config.max_rows_per_write.max(1);
        let config = WriterConfig {
            max_rows_per_write,
            max_in_flight: max_in_flight.max(1),
            queue_capacity: config.queue_capacity.max(1),
            parallel_write_min_rows: config.parallel_write_min_rows.min(max_rows_per_write),
        };
        let (tx, rx) = mpsc::channel(config.queue_capacity);
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let (failed, failure) = watch::channel(None);
        let task = tokio::spawn(async move {
            let ran = AssertUnwindSafe(run(sink, config, rx, shutdown_rx))
                .catch_unwind()
                .await;
            if let Err(payload) = ran {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-text panic payload".to_owned());
                let _ = failed.send(Some(message));
            }
        });
        Self {
            handle: WriterHandle { tx },
            shutdown: Some(shutdown_tx),
            task,
            failure,
        }
    }

    /// Becomes `Some(panic message)` if the writer task dies. Its submitters then get
    /// errors; the server watching this stops the process rather than run without a writer.
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.failure.clone()
    }

    /// A handle for submitting rows.
    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Stops accepting new submissions, finishes every queued and in-flight
    /// write (acknowledging each submitter), then returns.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Err(e) = (&mut self.task).await {
            tracing::error!(error = %e, "batch writer task failed");
        }
    }
}

/// Where one submitter's outcome is sent.
type Ack = oneshot::Sender<Result<(), SinkError>>;

/// Outcome of one sink write, with the submitters it answers and its row count.
type Done = (Vec<Ack>, Result<(), SinkError>, usize);

async fn run(
    sink: Arc<dyn EventSink>,
    config: WriterConfig,
    mut rx: mpsc::Receiver<Job>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut in_flight = FuturesUnordered::new();
    // Jobs taken from the queue that are not in a write yet (a job that did not
    // fit into the previous write, or jobs gathered while waiting for enough
    // rows to start a parallel write), and their row count. Bounded by one
    // write's worth: beyond that, jobs stay in the channel (backpressure).
    let mut pending: VecDeque<Job> = VecDeque::new();
    let mut pending_rows = 0usize;
    let mut open = true;
    let mut shutting_down = false;

    loop {
        // Start a write when idle and rows are waiting; with a write already in
        // flight and a slot free, only once a full-size write's worth waits.
        let slot_free = in_flight.len() < config.max_in_flight;
        if slot_free && (in_flight.is_empty() || pending_rows >= config.parallel_write_min_rows) {
            if let Some(batch) = gather(
                &mut rx,
                &mut pending,
                &mut pending_rows,
                config.max_rows_per_write,
            ) {
                let sink = sink.clone();
                in_flight.push(async move {
                    let (write, acks) = batch;
                    let n = write.rows.len();
                    let started = std::time::Instant::now();
                    let result = sink.write(write).await;
                    record_insert(sink.name(), n, started.elapsed(), &result);
                    (acks, result, n)
                });
                metrics::gauge!("streamwatch_writer_writes_in_flight").set(in_flight.len() as f64);
                metrics::gauge!("streamwatch_writer_queue_depth")
                    .set((rx.len() + pending.len()) as f64);
                continue;
            }
        }
        if !open && pending.is_empty() && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                answer(done);
                metrics::gauge!("streamwatch_writer_writes_in_flight").set(in_flight.len() as f64);
            }
            job = rx.recv(), if open && slot_free && pending_rows < config.max_rows_per_write => {
                match job {
                    Some(job) => {
                        pending_rows += job.rows.len();
                        pending.push_back(job);
                    }
                    None => open = false,
                }
            }
            _ = &mut shutdown, if !shutting_down => {
                shutting_down = true;
                // Refuse new submissions; those already queued are still drained.
                rx.close();
            }
            else => break,
        }
    }
    tracing::debug!("batch writer stopped");
}

/// Takes waiting jobs (the pending ones first, then the queue) up to
/// `max_rows`, without waiting. A job that does not fit stays pending.
fn gather(
    rx: &mut mpsc::Receiver<Job>,
    pending: &mut VecDeque<Job>,
    pending_rows: &mut usize,
    max_rows: usize,
) -> Option<(SinkWrite, Vec<Ack>)> {
    // Jobs whose submitter gave up (it answered 500 after its deadline) are dropped
    // unwritten: writing them would only delay the live ones behind a slow store.
    let mut next = |pending: &mut VecDeque<Job>, pending_rows: &mut usize| loop {
        let job = match pending.pop_front() {
            Some(job) => {
                *pending_rows -= job.rows.len();
                job
            }
            None => rx.try_recv().ok()?,
        };
        if !job.ack.is_closed() {
            return Some(job);
        }
    };
    let first = next(pending, pending_rows)?;
    let mut total = first.rows.len();
    let mut jobs = vec![first];
    while total < max_rows {
        let Some(job) = next(pending, pending_rows) else {
            break;
        };
        if total + job.rows.len() > max_rows {
            *pending_rows += job.rows.len();
            pending.push_front(job);
            break;
        }
        total += job.rows.len();
        jobs.push(job);
    }
    // One allocation of the write's exact size: growing it job by job allocated twice
    // that, in blocks of every size up to the write's (heaptrack, docs/benchmarks.md,
    // "Memory at full ingest").
    let mut write = SinkWrite {
        rows: Vec::with_capacity(total),
        batches: Vec::with_capacity(jobs.iter().map(|j| j.batches.len()).sum()),
    };
    let mut acks = Vec::with_capacity(jobs.len());
    for job in jobs {
        write.rows.extend(job.rows);
        write.batches.extend(job.batches);
        acks.push(job.ack);
    }
    Some((write, acks))
}

/// One insert's metrics: count by result, rows, latency, and failures by kind.
fn record_insert(
    sink: &'static str,
    rows: usize,
    took: std::time::Duration,
    result: &Result<(), SinkError>,
) {
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("streamwatch_writer_inserts_total", "sink" => sink, "result" => outcome)
        .increment(1);
    metrics::histogram!("streamwatch_writer_insert_rows", "sink" => sink).record(rows as f64);
    metrics::histogram!("streamwatch_writer_insert_duration_seconds", "sink" => sink)
        .record(took.as_secs_f64());
    if let Err(e) = result {
        let kind = if e.is_retryable() {
            "retryable"
        } else {
            "permanent"
        };
        metrics::counter!("streamwatch_writer_store_errors_total", "sink" => sink, "kind" => kind)
            .increment(1);
    }
}

fn answer((acks, result, rows): Done) {
    if let Err(e) = &result {
        tracing::warn!(error = %e, rows, submitters = acks.len(), "telemetry write failed");
    }
    for ack in acks {
        // The submitter may have gone away (client disconnected); nothing to do.
        let _ = ack.send(result.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio::sync::Notify;

    use crate::wire::EventType;

    /// Records every write; the first write blocks until released, so tests can
    /// queue submissions behind it. Writes containing a row with ts 666 fail.
    #[derive(Default)]
    struct MockSink {
        writes: Mutex<Vec<Vec<i64>>>,
        gate: Notify,
        gated: std::sync::atomic::AtomicBool,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
        delay_ms: u64,
    }

    #[async_trait]
    impl EventSink for MockSink {
        async fn write(&self, write: SinkWrite) -> Result<(), SinkError> {
            let rows = write.rows;
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            if self.gated.swap(false, Ordering::SeqCst) {
                self.gate.notified().await;
            }
            if self.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(self.delay_ms)).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if rows.iter().any(|r| r.ts_ms == 666) {
                return Err(SinkError::Retryable("boom".into()));
            }
            self.writes
                .lock()
                .expect("lock")
                .push(rows.iter().map(|r| r.ts_ms).collect());
            Ok(())
        }
        async fn ping(&self) -> Result<(), SinkError> {
            Ok(())
        }
        fn name(&self) -> &'static str {
            "mock"
        }
    }

    fn rows(ts: &[i64]) -> Vec<EventRow> {
        ts.iter()
            .map(|&t| EventRow {
                owner: "o".into(),
                session_id: "s".into(),
                ts_ms: t,
                event_type: EventType::PlaybackPause,
                payload: "{}".into(),
                content_id: String::new(),
            })
            .collect()
    }

    fn gated_sink() -> Arc<MockSink> {
        let sink = Arc::new(MockSink::default());
        sink.gated.store(true, Ordering::SeqCst);
        sink
    }

    /// Returns once every other task has run as far as it can. The tests run on a
    /// current-thread runtime with time paused: the clock only moves (and this sleep only
    /// ends) when no task can make progress, so no event order depends on how fast the
    /// machine is.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn writes_at_once_when_idle() {
        let sink = Arc::new(MockSink::default());
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        let start = tokio::time::Instant::now();
        writer.handle().submit(rows(&[1, 2])).await.expect("ok");
        // With the clock paused, any timer the writer waited on would have moved it.
        assert_eq!(start.elapsed(), Duration::ZERO, "no fixed delay");
        assert_eq!(*sink.writes.lock().expect("lock"), vec![vec![1, 2]]);
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn gathers_concurrent_submitters_into_one_write() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        let h = writer.handle();
        // First submission starts a write that blocks on the gate.
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[0])).await }
        });
        settle().await;
        // These queue while the first write is in flight.
        let mut waiting = Vec::new();
        for i in 1..=10 {
            let h = h.clone();
            waiting.push(tokio::spawn(async move {
                h.submit(rows(&[i * 10, i * 10 + 1])).await
            }));
        }
        settle().await;
        assert!(
            sink.writes.lock().expect("lock").is_empty(),
            "nothing acknowledged yet"
        );
        sink.gate.notify_one();
        first.await.expect("join").expect("first ok");
        for w in waiting {
            w.await.expect("join").expect("ok");
        }
        let writes = sink.writes.lock().expect("lock").clone();
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert_eq!(writes[0], vec![0]);
        assert_eq!(
            writes[1].len(),
            20,
            "all ten gathered into the second write"
        );
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn failure_reaches_exactly_the_submitters_of_that_write() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(
            sink.clone(),
            WriterConfig {
                max_rows_per_write: 4,
                ..WriterConfig::default()
            },
        );
        let h = writer.handle();
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[1])).await }
        });
        settle().await;
        // Queued in order: [2,3] + [666,4] fill write 2 (4 rows, fails);
        // [5,6] goes into write 3 (succeeds).
        let mut handles = Vec::new();
        for ts in [vec![2, 3], vec![666, 4], vec![5, 6]] {
            let h = h.clone();
            handles.push(tokio::spawn(async move { h.submit(rows(&ts)).await }));
            settle().await;
        }
        sink.gate.notify_one();
        assert!(first.await.expect("join").is_ok());
        let results: Vec<_> = futures_util::future::join_all(handles)
            .await
            .into_iter()
            .map(|r| r.expect("join"))
            .collect();
        assert!(
            results[0].as_ref().is_err_and(|e| e.is_retryable()),
            "{results:?}"
        );
        assert!(results[1].is_err(), "{results:?}");
        assert!(results[2].is_ok(), "{results:?}");
        let writes = sink.writes.lock().expect("lock").clone();
        assert_eq!(
            writes,
            vec![vec![1], vec![5, 6]],
            "failed rows not recorded as stored"
        );
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn caps_rows_per_write_without_splitting_submissions() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(
            sink.clone(),
            WriterConfig {
                max_rows_per_write: 5,
                ..WriterConfig::default()
            },
        );
        let h = writer.handle();
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[0])).await }
        });
        settle().await;
        let mut hs = Vec::new();
        for i in 0..6 {
            let h = h.clone();
            hs.push(tokio::spawn(
                async move { h.submit(rows(&[i, i, i])).await },
            ));
        }
        // A submission larger than the cap is written alone.
        let big = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[9; 7])).await }
        });
        settle().await;
        sink.gate.notify_one();
        first.await.expect("join").expect("ok");
        for x in hs {
            x.await.expect("join").expect("ok");
        }
        big.await.expect("join").expect("ok");
        let writes = sink.writes.lock().expect("lock").clone();
        assert!(
            writes
                .iter()
                .skip(1)
                .all(|w| w.len() % 3 == 0 || w.len() == 7),
            "{writes:?}"
        );
        assert!(
            writes.iter().all(|w| w.len() <= 5 || w.len() == 7),
            "{writes:?}"
        );
        assert_eq!(writes.iter().map(Vec::len).sum::<usize>(), 1 + 18 + 7);
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_finishes_queued_and_in_flight_writes() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        let h = writer.handle();
        let mut pending = Vec::new();
        for i in 0..5 {
            let h = h.clone();
            pending.push(tokio::spawn(async move { h.submit(rows(&[i])).await }));
            settle().await;
        }
        let shutdown = tokio::spawn(writer.shutdown());
        settle().await;
        assert!(!shutdown.is_finished(), "waits for the in-flight write");
        // New submissions are refused once shutdown began.
        let late = h.submit(rows(&[100])).await;
        assert!(late.is_err_and(|e| e.is_retryable()));
        sink.gate.notify_one();
        shutdown.await.expect("join");
        for p in pending {
            p.await.expect("join").expect("acknowledged");
        }
        let stored: usize = sink.writes.lock().expect("lock").iter().map(Vec::len).sum();
        assert_eq!(stored, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn several_writes_in_flight_when_configured() {
        let sink = Arc::new(MockSink {
            delay_ms: 200,
            ..MockSink::default()
        });
        let writer = BatchWriter::spawn(
            sink.clone(),
            WriterConfig {
                max_in_flight: 3,
                parallel_write_min_rows: 1,
                ..WriterConfig::default()
            },
        );
        let mut hs = Vec::new();
        for i in 0..6 {
            let h = writer.handle();
            hs.push(tokio::spawn(async move { h.submit(rows(&[i])).await }));
            settle().await;
        }
        for x in hs {
            x.await.expect("join").expect("ok");
        }
        assert_eq!(sink.max_in_flight.load(Ordering::SeqCst), 3);
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn parallel_write_waits_for_a_full_size_batch() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(
            sink.clone(),
            WriterConfig {
                max_in_flight: 2,
                parallel_write_min_rows: 4,
                ..WriterConfig::default()
            },
        );
        let h = writer.handle();
        // The first write starts at once (idle) and blocks on the gate.
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[0])).await }
        });
        settle().await;
        // Two rows wait: fewer than 4, so no second write starts.
        let small = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[1, 2])).await }
        });
        settle().await;
        assert!(sink.writes.lock().expect("lock").is_empty());
        assert!(!small.is_finished(), "waits for a full-size batch");
        // Two more make four: the second write starts while the first is gated.
        let more = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[3, 4])).await }
        });
        small.await.expect("join").expect("ok");
        more.await.expect("join").expect("ok");
        assert_eq!(
            *sink.writes.lock().expect("lock"),
            vec![vec![1, 2, 3, 4]],
            "parallel write done while the first is still in flight"
        );
        sink.gate.notify_one();
        first.await.expect("join").expect("ok");
        writer.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn empty_submission_is_acknowledged_without_a_write() {
        let sink = Arc::new(MockSink::default());
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        writer.handle().submit(Vec::new()).await.expect("ok");
        writer.shutdown().await;
        assert!(sink.writes.lock().expect("lock").is_empty());
    }

    /// A panicking sink kills the writer task; `failure()` reports the panic so the server
    /// can stop instead of answering 500 forever with no writer behind it.
    #[tokio::test(start_paused = true)]
    async fn a_panic_in_the_writer_is_reported() {
        struct Panics;
        #[async_trait]
        impl EventSink for Panics {
            async fn write(&self, _: SinkWrite) -> Result<(), SinkError> {
                panic!("sink exploded");
            }
            async fn ping(&self) -> Result<(), SinkError> {
                Ok(())
            }
            fn name(&self) -> &'static str {
                "panics"
            }
        }
        let writer = BatchWriter::spawn(Arc::new(Panics), WriterConfig::default());
        let mut failure = writer.failure();
        assert!(writer.handle().submit(rows(&[1])).await.is_err());
        let message = failure
            .wait_for(Option::is_some)
            .await
            .expect("reported")
            .clone();
        assert_eq!(message.as_deref(), Some("sink exploded"));
    }

    /// A submitter that gave up (its request answered 500 after the store deadline) is not
    /// written: its rows would only delay live submissions behind a slow store.
    #[tokio::test(start_paused = true)]
    async fn abandoned_submissions_are_not_written() {
        let sink = gated_sink();
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        let h = writer.handle();
        let first = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[1])).await }
        });
        settle().await;
        let abandoned = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[2])).await }
        });
        settle().await;
        abandoned.abort();
        settle().await;
        let live = tokio::spawn({
            let h = h.clone();
            async move { h.submit(rows(&[3])).await }
        });
        settle().await;
        sink.gate.notify_one();
        first.await.expect("join").expect("ok");
        live.await.expect("join").expect("ok");
        assert_eq!(*sink.writes.lock().expect("lock"), vec![vec![1], vec![3]]);
        writer.shutdown().await;
    }
}
