//! Turns a probe outcome into the probe row's status, anomaly class,
//! `httpStatus` and `detail` (decisions.md §6), and derives the snapshot's
//! `lastAction` after a probe. The status type is [`crate::probes::ProbeStatus`]
//! (re-exported here); the agent feed's `severity`, `fix` and `action` are
//! derived by [`crate::probes::agent`] when the feed is read.
//!
//! Classification (first matching row wins):
//!
//! | outcome | status | anomalyClass | detail |
//! |---|---|---|---|
//! | 2xx, manifest invalid | degraded | slow response | `manifest invalid: <why>` |
//! | 2xx, live playlist stale | degraded | slow response | `media sequence stuck at <n> for <s> s` |
//! | 2xx, valid, latency > slow-ms | degraded | slow response | `slow response: <ms> ms > <slow> ms` |
//! | 2xx, valid, latency <= slow-ms | healthy | no anomaly | `probe ok` |
//! | HTTP 4xx (and 3xx that cannot be followed) | degraded | client error | `HTTP <code>` |
//! | HTTP 5xx | failing | 5xx server error | `HTTP <code>` |
//! | DNS, connect, TLS, protocol error | failing | network / timeout | `dns: …`, `connect error: …`, `tls error: …` |
//! | timeout | failing | network / timeout | `timeout after <n> s` |
//! | refused by the guard, too many redirects | failing | network / timeout | `refused: <guard message>`, `refused: more than 5 redirects` |

use crate::prober::fetch::ProbeOutcome;
use crate::prober::manifest::ManifestCheck;
pub use crate::states::{AnomalyClass, ProbeStatus};

/// A classified probe: what the probe row stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// Probe status.
    pub status: ProbeStatus,
    /// Anomaly class (derivable from status and outcome; stored for the feed).
    pub anomaly_class: AnomalyClass,
    /// The HTTP status of the answer that decided the outcome, if any.
    pub http_status: Option<u16>,
    /// Human detail, e.g. `HTTP 404`, `timeout after 10 s`.
    pub detail: String,
    /// Why a viewer could not play the stream, or `None` when it was playable (decisions.md
    /// v1.1 §6: healthy, or degraded only because it was slow). Names the incident the agent
    /// opens: `client error`, `manifest invalid`, `stale manifest`, or a failing class.
    pub incident: Option<&'static str>,
}

impl Classified {
    /// True when a viewer could have played the stream (counts as up in `uptimePct`).
    pub fn playable(&self) -> bool {
        self.incident.is_none()
    }
}

/// Classifies one probe per decisions.md §6 (see the module table).
pub fn classify(outcome: &ProbeOutcome, latency_ms: u64, slow_ms: u64) -> Classified {
    use AnomalyClass as A;
    use ProbeStatus as S;
    let mut incident = None;
    let (status, anomaly_class, http_status, detail) = match outcome {
        ProbeOutcome::Ok {
            http_status,
            manifest,
        } => {
            let code = Some(*http_status);
            match manifest {
                ManifestCheck::Invalid(why) => {
                    incident = Some("manifest invalid");
                    (
                        S::Degraded,
                        A::SlowResponse,
                        code,
                        format!("manifest invalid: {why}"),
                    )
                }
                ManifestCheck::Stale(stale) => {
                    incident = Some("stale manifest");
                    (S::Degraded, A::SlowResponse, code, stale.to_string())
                }
                ManifestCheck::Valid(_) if latency_ms > slow_ms => (
                    S::Degraded,
                    A::SlowResponse,
                    code,
                    format!("slow response: {latency_ms} ms > {slow_ms} ms"),
                ),
                ManifestCheck::Valid(_) => (S::Healthy, A::NoAnomaly, code, "probe ok".to_owned()),
            }
        }
        ProbeOutcome::HttpStatus(code) if *code >= 500 => (
            S::Failing,
            A::ServerError,
            Some(*code),
            format!("HTTP {code}"),
        ),
        ProbeOutcome::HttpStatus(code) => (
            S::Degraded,
            A::ClientError,
            Some(*code),
            format!("HTTP {code}"),
        ),
        ProbeOutcome::Dns(why) => (S::Failing, A::NetworkTimeout, None, format!("dns: {why}")),
        ProbeOutcome::Connect(why) => (
            S::Failing,
            A::NetworkTimeout,
            None,
            format!("connect error: {why}"),
        ),
        ProbeOutcome::Tls(why) => (
            S::Failing,
            A::NetworkTimeout,
            None,
            format!("tls error: {why}"),
        ),
        ProbeOutcome::Protocol(why) => (
            S::Failing,
            A::NetworkTimeout,
            None,
            format!("protocol error: {why}"),
        ),
        ProbeOutcome::Timeout(after) => {
            let after = if after.subsec_millis() == 0 {
                format!("{} s", after.as_secs())
            } else {
                format!("{} ms", after.as_millis())
            };
            (
                S::Failing,
                A::NetworkTimeout,
                None,
                format!("timeout after {after}"),
            )
        }
        ProbeOutcome::Refused(why) => (
            S::Failing,
            A::NetworkTimeout,
            None,
            format!("refused: {why}"),
        ),
        ProbeOutcome::TooManyRedirects(max) => (
            S::Failing,
            A::NetworkTimeout,
            None,
            format!("refused: more than {max} redirects"),
        ),
    };
    if incident.is_none() && status != S::Healthy && anomaly_class != A::SlowResponse {
        incident = Some(anomaly_class.as_str());
    }
    Classified {
        status,
        anomaly_class,
        http_status,
        detail,
        incident,
    }
}

/// Snapshot `lastAction` after a probe: what the agent did, given the status of
/// the stream's previous probe (`None` for the first probe after registration) and how many
/// probes in a row before this one found it not playable (`down_before`).
///
/// | previous \ new | healthy | degraded, slow | degraded, not playable | failing |
/// |---|---|---|---|---|
/// | none, healthy | `probe ok in <ms> ms` | `raised probe frequency after degraded probe` | `raised probe frequency after degraded probe` | `opened incident: <class>` |
/// | degraded, failing | `closed incident after recovery` | `raised probe frequency after degraded probe` | `opened incident: <why>` once the previous probe was not playable either | `opened incident: <class>` |
///
/// A degraded probe that finds the stream unplayable (4xx, invalid or stale manifest) first
/// raises the probe frequency to confirm; a second one in a row confirms it, and the agent
/// opens an incident named for the reason (`client error`, `manifest invalid`,
/// `stale manifest`), as it does at once for a failing probe. So a manifest that answers 404
/// forever ends in an open incident, not an endless confirmation.
pub fn last_action(
    previous: Option<ProbeStatus>,
    down_before: i64,
    new: &Classified,
    latency_ms: u64,
) -> String {
    match (previous, new.status, new.incident) {
        (Some(ProbeStatus::Degraded | ProbeStatus::Failing), ProbeStatus::Healthy, _) => {
            "closed incident after recovery".to_owned()
        }
        (_, ProbeStatus::Healthy, _) => format!("probe ok in {latency_ms} ms"),
        (_, ProbeStatus::Degraded, Some(why)) if down_before > 0 => {
            format!("opened incident: {why}")
        }
        (_, ProbeStatus::Degraded, _) => "raised probe frequency after degraded probe".to_owned(),
        (_, ProbeStatus::Failing, _) => format!("opened incident: {}", new.anomaly_class),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::prober::manifest::{
        ManifestError, ManifestKind, ManifestSummary, MediaInfo, Staleness,
    };
    use crate::ssrf::GuardError;

    fn ok(manifest: ManifestCheck) -> ProbeOutcome {
        ProbeOutcome::Ok {
            http_status: 200,
            manifest,
        }
    }

    fn valid() -> ManifestCheck {
        ManifestCheck::Valid(ManifestSummary {
            kind: ManifestKind::HlsMedia,
            media: Some(MediaInfo {
                media_sequence: 1,
                segments: 3,
                target_duration_s: 6,
                ended: false,
            }),
            dash: None,
        })
    }

    #[test]
    fn classification_table() {
        use AnomalyClass as A;
        use ProbeStatus as S;
        let slow = 2000;
        type Case = (ProbeOutcome, u64, S, A, Option<u16>, &'static str);
        let cases: Vec<Case> = vec![
            (
                ok(valid()),
                84,
                S::Healthy,
                A::NoAnomaly,
                Some(200),
                "probe ok",
            ),
            (
                ok(valid()),
                2000,
                S::Healthy,
                A::NoAnomaly,
                Some(200),
                "probe ok",
            ),
            (
                ok(valid()),
                2001,
                S::Degraded,
                A::SlowResponse,
                Some(200),
                "slow response: 2001 ms > 2000 ms",
            ),
            (
                ok(ManifestCheck::Invalid(ManifestError::NoSegments)),
                10,
                S::Degraded,
                A::SlowResponse,
                Some(200),
                "manifest invalid: no segments",
            ),
            (
                ok(ManifestCheck::Invalid(ManifestError::NotAManifest)),
                5000,
                S::Degraded,
                A::SlowResponse,
                Some(200),
                "manifest invalid: not an HLS or DASH manifest",
            ),
            (
                ok(ManifestCheck::Stale(Staleness {
                    media_sequence: 118,
                    stuck_for: Duration::from_secs(18),
                    threshold: Duration::from_secs(18),
                })),
                10,
                S::Degraded,
                A::SlowResponse,
                Some(200),
                "media sequence stuck at 118 for 18 s",
            ),
            (
                ProbeOutcome::HttpStatus(404),
                10,
                S::Degraded,
                A::ClientError,
                Some(404),
                "HTTP 404",
            ),
            (
                ProbeOutcome::HttpStatus(403),
                10,
                S::Degraded,
                A::ClientError,
                Some(403),
                "HTTP 403",
            ),
            (
                ProbeOutcome::HttpStatus(304),
                10,
                S::Degraded,
                A::ClientError,
                Some(304),
                "HTTP 304",
            ),
            (
                ProbeOutcome::HttpStatus(500),
                10,
                S::Failing,
                A::ServerError,
                Some(500),
                "HTTP 500",
            ),
            (
                ProbeOutcome::HttpStatus(503),
                10,
                S::Failing,
                A::ServerError,
                Some(503),
                "HTTP 503",
            ),
            (
                ProbeOutcome::Dns("Hostname did not resolve".into()),
                10,
                S::Failing,
                A::NetworkTimeout,
                None,
                "dns: Hostname did not resolve",
            ),
            (
                ProbeOutcome::Connect("Connection refused (os error 111)".into()),
                1,
                S::Failing,
                A::NetworkTimeout,
                None,
                "connect error: Connection refused (os error 111)",
            ),
            (
                ProbeOutcome::Tls("bad certificate".into()),
                1,
                S::Failing,
                A::NetworkTimeout,
                None,
                "tls error: bad certificate",
            ),
            (
                ProbeOutcome::Timeout(Duration::from_secs(10)),
                10_000,
                S::Failing,
                A::NetworkTimeout,
                None,
                "timeout after 10 s",
            ),
            (
                ProbeOutcome::Timeout(Duration::from_millis(300)),
                300,
                S::Failing,
                A::NetworkTimeout,
                None,
                "timeout after 300 ms",
            ),
            (
                ProbeOutcome::Refused(GuardError::PrivateAddress("10.0.0.1".parse().unwrap())),
                1,
                S::Failing,
                A::NetworkTimeout,
                None,
                "refused: Hostname resolves to a private address (10.0.0.1)",
            ),
            (
                ProbeOutcome::Refused(GuardError::Unparseable),
                1,
                S::Failing,
                A::NetworkTimeout,
                None,
                "refused: URL could not be parsed",
            ),
            (
                ProbeOutcome::TooManyRedirects(5),
                1,
                S::Failing,
                A::NetworkTimeout,
                None,
                "refused: more than 5 redirects",
            ),
        ];
        for (outcome, latency, status, class, code, detail) in cases {
            let got = classify(&outcome, latency, slow);
            assert_eq!(
                (
                    got.status,
                    got.anomaly_class,
                    got.http_status,
                    got.detail.as_str()
                ),
                (status, class, code, detail),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn playable_is_healthy_or_only_slow() {
        let slow = 2000;
        let is = |outcome: ProbeOutcome, latency| classify(&outcome, latency, slow).incident;
        assert_eq!(is(ok(valid()), 84), None);
        assert_eq!(is(ok(valid()), 2500), None, "slow but playable");
        assert_eq!(
            is(ok(ManifestCheck::Invalid(ManifestError::NoSegments)), 84),
            Some("manifest invalid")
        );
        assert_eq!(
            is(
                ok(ManifestCheck::Stale(Staleness {
                    media_sequence: 118,
                    stuck_for: Duration::from_secs(18),
                    threshold: Duration::from_secs(18),
                })),
                84
            ),
            Some("stale manifest")
        );
        assert_eq!(is(ProbeOutcome::HttpStatus(404), 84), Some("client error"));
        assert_eq!(
            is(ProbeOutcome::HttpStatus(503), 84),
            Some("5xx server error")
        );
        assert_eq!(
            is(ProbeOutcome::Timeout(Duration::from_secs(10)), 10_000),
            Some("network / timeout")
        );
    }

    #[test]
    fn action_texts() {
        use crate::probes::agent::fix_and_action;
        use ProbeStatus as S;
        let action = |s, l, slow, r| fix_and_action(s, l, slow, r, "x").1;
        assert_eq!(
            action(S::Healthy, 84, 2000, false),
            "no action needed — stream healthy"
        );
        assert_eq!(
            action(S::Healthy, 999, 2000, false),
            "no action needed — stream healthy"
        );
        assert_eq!(
            action(S::Healthy, 1000, 2000, false),
            "watching latency — response time rising"
        );
        assert_eq!(
            action(S::Healthy, 500, 1001, false),
            "no action needed — stream healthy"
        );
        assert_eq!(
            action(S::Healthy, 501, 1001, false),
            "watching latency — response time rising"
        );
        assert_eq!(
            action(S::Degraded, 5, 2000, false),
            "raised probe frequency — confirming degradation"
        );
        assert_eq!(
            action(S::Degraded, 5, 2000, true),
            "raised probe frequency — confirming degradation"
        );
        assert_eq!(
            action(S::Failing, 5, 2000, true),
            "resolved — stream recovered"
        );
        assert_eq!(action(S::Failing, 5, 2000, false), "investigating");
        let fix = |s, r, last| fix_and_action(s, 5, 2000, r, last).0;
        assert_eq!(
            fix(S::Failing, false, "opened incident: 5xx server error"),
            "investigating"
        );
        assert_eq!(
            fix(S::Failing, true, "closed incident after recovery"),
            "closed incident after recovery"
        );
        assert_eq!(
            fix(S::Healthy, false, "probe ok in 84 ms"),
            "probe ok in 84 ms"
        );
    }

    #[test]
    fn last_action_state_table() {
        use ProbeStatus as S;
        let healthy = classify(&ok(valid()), 84, 2000);
        let degraded = classify(&ProbeOutcome::HttpStatus(404), 84, 2000);
        let failing_5xx = classify(&ProbeOutcome::HttpStatus(503), 84, 2000);
        let failing_net = classify(
            &ProbeOutcome::Timeout(Duration::from_secs(10)),
            10_000,
            2000,
        );
        let slow = classify(&ok(valid()), 2500, 2000);
        assert_eq!(last_action(None, 0, &healthy, 84), "probe ok in 84 ms");
        assert_eq!(
            last_action(Some(S::Healthy), 0, &healthy, 84),
            "probe ok in 84 ms"
        );
        assert_eq!(
            last_action(Some(S::Degraded), 3, &healthy, 84),
            "closed incident after recovery"
        );
        assert_eq!(
            last_action(Some(S::Failing), 1, &healthy, 84),
            "closed incident after recovery"
        );
        for prev in [None, Some(S::Healthy), Some(S::Degraded), Some(S::Failing)] {
            assert_eq!(
                last_action(prev, 0, &degraded, 84),
                "raised probe frequency after degraded probe"
            );
            assert_eq!(
                last_action(prev, 0, &failing_5xx, 84),
                "opened incident: 5xx server error"
            );
            assert_eq!(
                last_action(prev, 0, &failing_net, 84),
                "opened incident: network / timeout"
            );
        }
        // A second not-playable probe in a row confirms the degradation: an incident opens.
        for down_before in [1, 2, 500] {
            assert_eq!(
                last_action(Some(S::Degraded), down_before, &degraded, 84),
                "opened incident: client error"
            );
            assert_eq!(
                last_action(Some(S::Degraded), down_before, &slow, 2500),
                "raised probe frequency after degraded probe",
                "slow is playable: never an incident"
            );
        }
    }
}
