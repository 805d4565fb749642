//! Supervision of the server's background work (decisions.md §11): nothing fails silently.
//!
//! A *service* (prober, key-cache listener, `lastUsedAt` writer, telemetry store supervisor,
//! the batch writer's watch) runs until shutdown; a *job* (the start-up migrator) may finish.
//! A service that ends before shutdown, or any task that panics, is a death: its cause is
//! logged, the server stops, and the process exits non-zero so that its supervisor (systemd,
//! Kubernetes) restarts it, instead of a process that keeps answering while, say, no probe
//! runs any more.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// A background task that died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The task's name, e.g. `prober`.
    pub task: &'static str,
    /// What happened: the panic message, or why it ended.
    pub cause: String,
}

impl std::fmt::Display for Death {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "background task {} died: {}", self.task, self.cause)
    }
}

/// The background tasks of one server and the stop signal they all take.
pub struct Supervisor {
    tasks: JoinSet<()>,
    stop: watch::Sender<bool>,
    deaths_tx: mpsc::UnboundedSender<Death>,
    deaths: mpsc::UnboundedReceiver<Death>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervisor {
    pub fn new() -> Self {
        let (stop, _) = watch::channel(false);
        let (deaths_tx, deaths) = mpsc::unbounded_channel();
        Self {
            tasks: JoinSet::new(),
            stop,
            deaths_tx,
            deaths,
        }
    }

    /// The signal every task watches: true once the server shuts down.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Spawns a service: it must run until the stop signal; it reports a death by returning an
    /// `Err` with the cause, by returning early, or by panicking.
    pub fn service<F>(&mut self, task: &'static str, fut: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.spawn(task, fut, true);
    }

    /// Spawns a job: it may finish; a panic or an `Err` is a death.
    pub fn job<F>(&mut self, task: &'static str, fut: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.spawn(task, fut, false);
    }

    fn spawn<F>(&mut self, task: &'static str, fut: F, must_run: bool)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let stop = self.stop.subscribe();
        let deaths = self.deaths_tx.clone();
        self.tasks.spawn(async move {
            let cause = match AssertUnwindSafe(fut).catch_unwind().await {
                Err(payload) => Some(format!("panicked: {}", panic_message(&*payload))),
                Ok(Err(cause)) => Some(cause),
                Ok(Ok(())) if must_run && !*stop.borrow() => {
                    Some("stopped before shutdown".to_owned())
                }
                Ok(Ok(())) => None,
            };
            if let Some(cause) = cause {
                let death = Death { task, cause };
                tracing::error!(task, cause = %death.cause, "background task died");
                let _ = deaths.send(death);
            }
        });
    }

    /// Waits for the first death (forever, if none happens).
    pub async fn died(&mut self) -> Death {
        match self.deaths.recv().await {
            Some(d) => d,
            // The supervisor itself holds a sender: never reached.
            None => std::future::pending().await,
        }
    }

    /// Tells every task to stop, without waiting.
    pub fn signal_stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Signals every task to stop, waits until all have ended, and returns the deaths reported
    /// meanwhile (a task that panicked while stopping).
    pub async fn stop(mut self) -> Vec<Death> {
        self.signal_stop();
        while self.tasks.join_next().await.is_some() {}
        let mut deaths = Vec::new();
        while let Ok(d) = self.deaths.try_recv() {
            deaths.push(d);
        }
        deaths
    }
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_service_is_a_death_with_its_message() {
        let mut s = Supervisor::new();
        let stop = s.stop_signal();
        s.service("steady", async move {
            let mut stop = stop;
            let _ = stop.wait_for(|v| *v).await;
            Ok(())
        });
        s.service("prober", async {
            let v: Vec<u8> = Vec::new();
            let _ = v[3];
            Ok(())
        });
        let death = s.died().await;
        assert_eq!(death.task, "prober");
        assert!(
            death.cause.starts_with("panicked: index out of bounds"),
            "{}",
            death.cause
        );
        s.stop().await;
    }

    #[tokio::test]
    async fn a_service_that_returns_early_is_a_death_a_finished_job_is_not() {
        let mut s = Supervisor::new();
        s.job("migrator", async { Ok(()) });
        s.service("listener", async { Ok(()) });
        let death = s.died().await;
        assert_eq!(
            death,
            Death {
                task: "listener",
                cause: "stopped before shutdown".into()
            }
        );
        s.service("writer", async {
            Err("writer panicked: disk on fire".into())
        });
        assert_eq!(s.died().await.cause, "writer panicked: disk on fire");
        assert_eq!(s.stop().await, vec![]);
    }

    #[tokio::test]
    async fn services_that_end_on_stop_are_no_death() {
        let mut s = Supervisor::new();
        for name in ["a", "b"] {
            let mut stop = s.stop_signal();
            s.service(name, async move {
                let _ = stop.wait_for(|v| *v).await;
                Ok(())
            });
        }
        assert_eq!(s.stop().await, vec![]);
    }

    #[test]
    fn panic_messages() {
        assert_eq!(panic_message(&"boom"), "boom");
        assert_eq!(panic_message(&String::from("bang")), "bang");
        assert_eq!(panic_message(&7u8), "non-text panic payload");
    }
}
