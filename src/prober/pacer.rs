//! Per-host request pacing: the prober never sends an origin host more than
//! `STREAMWATCH_PROBE_HOST_RATE` requests per second, however many streams live on it and
//! however unhealthy they are (decisions.md §10). Without it, one account registering 2,000
//! variants of one URL turns the prober into an amplifier against that host.
//!
//! Each host has a schedule of request slots spaced `1 / rate` apart. A request books the
//! earliest free slot and waits for it, so any one-second window holds at most `rate`
//! requests to a host, bursts included. The scheduler books a probe's first request when it
//! claims the stream ([`HostPacer::try_book`]); a host booked more than a second ahead gets
//! its stream deferred instead of parked in a probe slot, so a saturated host never starves
//! the probes of other hosts.
//! Time spent waiting for a slot is the prober's own doing: it is excluded from a probe's
//! latency and from its timeout (see `fetch.rs`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Hosts whose schedule has been free this long are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// The map is swept of forgotten hosts once it holds this many.
const SWEEP_AT: usize = 4096;

/// Paces requests per host. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct HostPacer {
    spacing: Duration,
    /// Host → the first instant not yet booked.
    next_free: Mutex<HashMap<String, Instant>>,
}

impl HostPacer {
    /// A pacer allowing `rate_per_sec` requests per second to each host (at least 1).
    pub fn new(rate_per_sec: u32) -> Self {
        Self {
            spacing: Duration::from_secs(1) / rate_per_sec.max(1),
            next_free: Mutex::new(HashMap::new()),
        }
    }

    /// Time between two requests to one host.
    pub fn spacing(&self) -> Duration {
        self.spacing
    }

    /// Books the next free slot of `host` and returns when it starts.
    pub fn book(&self, host: &str) -> Instant {
        let now = Instant::now();
        let mut map = self
            .next_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.len() >= SWEEP_AT {
            map.retain(|_, free| *free + FORGET_AFTER > now);
        }
        let slot = map.get(host).map_or(now, |free| (*free).max(now));
        map.insert(host.to_owned(), slot + self.spacing);
        slot
    }

    /// Books the next free slot of `host` only if it starts within `max_wait`; `None` (and
    /// nothing booked) when the host is booked further ahead.
    pub fn try_book(&self, host: &str, max_wait: Duration) -> Option<Instant> {
        let now = Instant::now();
        let mut map = self
            .next_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slot = map.get(host).map_or(now, |free| (*free).max(now));
        if slot > now + max_wait {
            return None;
        }
        map.insert(host.to_owned(), slot + self.spacing);
        Some(slot)
    }

    /// Waits for a slot of `host`; returns how long it waited.
    pub async fn wait_turn(&self, host: &str) -> Duration {
        let slot = self.book(host);
        let now = Instant::now();
        if slot > now {
            tokio::time::sleep_until(slot).await;
        }
        slot.saturating_duration_since(now)
    }

    /// How far into the future `host` is already booked (zero when it is free now).
    pub fn backlog(&self, host: &str) -> Duration {
        let map = self
            .next_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(host).map_or(Duration::ZERO, |free| {
            free.saturating_duration_since(Instant::now())
        })
    }
}

/// The pacing key of a URL: its host, lower-cased (ports do not make another host: they are
/// the same machine).
pub fn host_key(url: &url::Url) -> String {
    url.host_str().unwrap_or_default().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_host_gets_at_most_rate_requests_per_second() {
        let pacer = HostPacer::new(50);
        let start = Instant::now();
        let mut sent = Vec::new();
        for _ in 0..200 {
            pacer.wait_turn("origin.example").await;
            sent.push(Instant::now() - start);
        }
        // Every one-second window holds at most 50 of them.
        for (i, t) in sent.iter().enumerate() {
            let in_window = sent[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(1))
                .count();
            assert!(
                in_window <= 50,
                "{in_window} requests in the second after {t:?}"
            );
        }
        assert_eq!(sent[199], Duration::from_millis(199 * 20));
    }

    #[tokio::test(start_paused = true)]
    async fn hosts_are_paced_independently() {
        let pacer = HostPacer::new(10);
        let start = Instant::now();
        for _ in 0..5 {
            pacer.wait_turn("a.example").await;
        }
        let waited = pacer.wait_turn("b.example").await;
        assert_eq!(waited, Duration::ZERO, "b is not slowed by a");
        assert_eq!(Instant::now() - start, Duration::from_millis(400));
        assert_eq!(pacer.backlog("a.example"), Duration::from_millis(100));
        assert_eq!(pacer.backlog("c.example"), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn bookings_pile_up_as_backlog() {
        let pacer = HostPacer::new(50);
        for _ in 0..100 {
            pacer.book("origin.example");
        }
        assert_eq!(pacer.backlog("origin.example"), Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(pacer.backlog("origin.example"), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn try_book_refuses_beyond_the_allowed_wait_and_books_nothing() {
        let pacer = HostPacer::new(50);
        let start = Instant::now();
        let mut booked = 0;
        while pacer.try_book("h", Duration::from_secs(1)).is_some() {
            booked += 1;
        }
        // Slots at 0, 20, …, 1000 ms are within a second of now.
        assert_eq!(booked, 51);
        assert_eq!(pacer.backlog("h"), Duration::from_millis(1020));
        assert_eq!(pacer.book("h"), start + Duration::from_millis(1020));
    }

    #[test]
    fn host_keys_ignore_case_and_port() {
        let u = |s: &str| url::Url::parse(s).expect("url");
        assert_eq!(
            host_key(&u("https://CDN.Example.com:8443/a.m3u8")),
            "cdn.example.com"
        );
        assert_eq!(host_key(&u("http://127.0.0.1:9/x")), "127.0.0.1");
    }
}
