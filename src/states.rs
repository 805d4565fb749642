//! The closed sets of the wire, as enums with exactly one mapping to their wire strings each
//! (interface.md, decisions.md §6): a probe's status, a stream's status and agent state, an
//! agent item's severity and anomaly class. Stored as their wire strings; a stored value
//! outside the set is a decode error (a logged 500), never a panic.

/// Declares a closed set: the enum, its wire strings (one table), `as_str`, `ALL`, parsing,
/// `Display`, serde and the OpenAPI schema (a string enum).
macro_rules! closed_set {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in the contract's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire),+
                }
            }

            /// The value with this wire string.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl TryFrom<String> for $name {
            type Error = UnknownValue;

            fn try_from(s: String) -> Result<Self, UnknownValue> {
                Self::parse(&s).ok_or(UnknownValue {
                    set: stringify!($name),
                    value: s,
                })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some(Self::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

/// A stored value that is not in its closed set (schema drift, a hand-edited row).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {set}")]
pub struct UnknownValue {
    pub set: &'static str,
    pub value: String,
}

closed_set! {
    /// The outcome of one probe.
    ProbeStatus {
        /// 2xx, valid manifest, fast enough.
        Healthy = "healthy",
        /// Answering, but slow, invalid, stale or 4xx.
        Degraded = "degraded",
        /// Not answering usefully: network, timeout, guard refusal, 5xx.
        Failing = "failing",
    }
}

closed_set! {
    /// A stream's `status`: `watching` until a probe says otherwise.
    StreamStatus {
        Watching = "watching",
        Degraded = "degraded",
        Failing = "failing",
    }
}

closed_set! {
    /// A stream's `agentState`: `healthy` after a healthy probe, else `degraded`.
    AgentState {
        Healthy = "healthy",
        Degraded = "degraded",
    }
}

closed_set! {
    /// An agent item's `severity` (rule 1 of the contract).
    Severity {
        Info = "info",
        Warn = "warn",
        Critical = "critical",
    }
}

closed_set! {
    /// An agent item's `anomalyClass` (rule 2 of the contract, decisions.md §6).
    AnomalyClass {
        /// Healthy.
        NoAnomaly = "no anomaly",
        /// Degraded: slow, invalid or stale manifest.
        SlowResponse = "slow response",
        /// Degraded: HTTP 4xx.
        ClientError = "client error",
        /// Failing: DNS, connect, TLS, timeout, guard.
        NetworkTimeout = "network / timeout",
        /// Failing: HTTP 5xx.
        ServerError = "5xx server error",
    }
}

impl ProbeStatus {
    /// The stream's `status` after a probe with this outcome.
    pub const fn stream_status(self) -> StreamStatus {
        match self {
            ProbeStatus::Healthy => StreamStatus::Watching,
            ProbeStatus::Degraded => StreamStatus::Degraded,
            ProbeStatus::Failing => StreamStatus::Failing,
        }
    }

    /// The stream's `agentState` after a probe with this outcome.
    pub const fn agent_state(self) -> AgentState {
        match self {
            ProbeStatus::Healthy => AgentState::Healthy,
            _ => AgentState::Degraded,
        }
    }

    /// Rule 1: the severity of a probe with this outcome.
    pub const fn severity(self) -> Severity {
        match self {
            ProbeStatus::Healthy => Severity::Info,
            ProbeStatus::Degraded => Severity::Warn,
            ProbeStatus::Failing => Severity::Critical,
        }
    }
}

impl StreamStatus {
    /// The status of the probe that left a stream in this status.
    pub const fn probe_status(self) -> ProbeStatus {
        match self {
            StreamStatus::Watching => ProbeStatus::Healthy,
            StreamStatus::Degraded => ProbeStatus::Degraded,
            StreamStatus::Failing => ProbeStatus::Failing,
        }
    }
}

impl Severity {
    /// The probe status a severity stands for (the inverse of [`ProbeStatus::severity`]).
    pub const fn probe_status(self) -> ProbeStatus {
        match self {
            Severity::Info => ProbeStatus::Healthy,
            Severity::Warn => ProbeStatus::Degraded,
            Severity::Critical => ProbeStatus::Failing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip_and_map_between_sets() {
        for s in ProbeStatus::ALL {
            assert_eq!(ProbeStatus::parse(s.as_str()), Some(*s));
            assert_eq!(s.stream_status().probe_status(), *s);
            assert_eq!(s.severity().probe_status(), *s);
        }
        assert_eq!(ProbeStatus::Healthy.stream_status(), StreamStatus::Watching);
        assert_eq!(ProbeStatus::Failing.agent_state(), AgentState::Degraded);
        assert_eq!(ProbeStatus::Degraded.severity(), Severity::Warn);
        assert_eq!(
            AnomalyClass::parse("5xx server error"),
            Some(AnomalyClass::ServerError)
        );
        assert_eq!(
            AnomalyClass::try_from("nope".to_owned()),
            Err(UnknownValue {
                set: "AnomalyClass",
                value: "nope".into()
            })
        );
        assert_eq!(
            serde_json::to_string(&AnomalyClass::NetworkTimeout).expect("json"),
            "\"network / timeout\""
        );
    }
}

closed_set! {
    /// An alert channel's `type` (alerts.md §1).
    ChannelType {
        Webhook = "webhook",
        Slack = "slack",
        Discord = "discord",
        Pagerduty = "pagerduty",
    }
}

closed_set! {
    /// An alert rule's `kind`.
    RuleKind {
        /// Consecutive probes of one stream or of every stream.
        Stream = "stream",
        /// A QoE metric of the owner's telemetry over a window.
        Qoe = "qoe",
    }
}

closed_set! {
    /// A rule's `state`, derived from its incidents and its streams' streaks.
    RuleState {
        Ok = "ok",
        Pending = "pending",
        Firing = "firing",
    }
}

closed_set! {
    /// An incident's `state`.
    IncidentState {
        Firing = "firing",
        Resolved = "resolved",
    }
}

closed_set! {
    /// What a delivery notifies.
    DeliveryEvent {
        Firing = "firing",
        Resolved = "resolved",
        Reminder = "reminder",
        Test = "test",
    }
}

closed_set! {
    /// A delivery's `status`.
    DeliveryStatus {
        /// Waiting for its group window or its next attempt.
        Pending = "pending",
        /// A receiver answered 2xx.
        Sent = "sent",
        /// Refused for good (a 4xx other than 410 and 429, or a target the guard refuses).
        Failed = "failed",
        /// Out of retries, or its channel was disabled or deleted.
        Dead = "dead",
    }
}

closed_set! {
    /// A QoE rule's comparison.
    CompareOp {
        Above = ">",
        Below = "<",
    }
}
