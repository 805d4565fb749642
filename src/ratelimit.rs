//! Per-client-IP fixed-window limiter for sign-in and sign-up (decisions.md §4). The client is
//! the TCP peer: forwarded-for headers are spoofable and are not trusted.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::config::RateLimit;

struct Window {
    started: Instant,
    count: AtomicU32,
}

/// Counts attempts per IP; the window restarts at the first attempt after the last one ended.
#[derive(Clone)]
pub struct RateLimiter {
    limit: RateLimit,
    windows: Cache<IpAddr, Arc<Window>>,
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> Self {
        let ttl = match limit {
            RateLimit::PerWindow { window, .. } => window,
            RateLimit::Off => Duration::from_secs(1),
        };
        Self {
            limit,
            windows: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// `Ok` when the attempt is allowed, else the seconds until the window ends.
    pub fn check(&self, ip: IpAddr) -> Result<(), u64> {
        let RateLimit::PerWindow { max, window } = self.limit else {
            return Ok(());
        };
        let w = self.windows.get_with(client_key(ip), || {
            Arc::new(Window {
                started: Instant::now(),
                count: AtomicU32::new(0),
            })
        });
        let n = w.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= max {
            return Ok(());
        }
        let left = window.saturating_sub(w.started.elapsed());
        Err(left.as_secs().max(1))
    }
}

/// The key one client is counted under: an IPv4 address, or the /64 of an IPv6 address (one
/// subscriber usually holds a whole /64 and can pick any address in it). IPv4-mapped IPv6
/// addresses count as their IPv4 address.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !(u128::from(u64::MAX));
                IpAddr::V6(prefix.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_max_then_refuses_with_retry_after() {
        let l = RateLimiter::new(RateLimit::PerWindow {
            max: 2,
            window: Duration::from_secs(60),
        });
        let ip: IpAddr = "192.0.2.1".parse().expect("ip");
        assert!(l.check(ip).is_ok());
        assert!(l.check(ip).is_ok());
        let retry = l.check(ip).expect_err("third is refused");
        assert!((1..=60).contains(&retry));
        assert!(l.check("192.0.2.2".parse().expect("ip")).is_ok(), "per IP");
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        let l = RateLimiter::new(RateLimit::PerWindow {
            max: 2,
            window: Duration::from_secs(60),
        });
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:fffe".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert!(l.check(a).is_ok());
        assert!(l.check(b).is_ok());
        assert!(l.check(a).is_err(), "same /64, third attempt");
        assert!(l.check(other).is_ok(), "another /64");
        assert_eq!(
            client_key("::ffff:192.0.2.7".parse().expect("ip")),
            "192.0.2.7".parse::<IpAddr>().expect("ip")
        );
    }

    #[test]
    fn off_never_limits() {
        let l = RateLimiter::new(RateLimit::Off);
        let ip: IpAddr = "192.0.2.1".parse().expect("ip");
        assert!((0..1000).all(|_| l.check(ip).is_ok()));
    }
}
