//! A view's dimensions (content, source, SDK, player, tags, browser, OS, device type),
//! resolved from the ingest batches that carried them.
//!
//! Dimensions come from batches, not events: each batch may carry a `context`
//! (`sdk`, `player`, `contentId`, `src`, `tags`), and the server derives `browser`,
//! `os` and `deviceType` from the request's `User-Agent` (`unknown` when absent).
//! Batches are ordered by `(earliest event ts of the batch, write sequence)`:
//!
//! - each context field takes its value from the first batch in that order that
//!   carries a non-empty value for it;
//! - `contentId` falls back to the `contentId` of the view's first `playback_start` (ts
//!   order) with a non-empty one when no batch carries it;
//! - `tags` are merged per key by the same rule (a key's first non-empty value wins);
//! - the user-agent triple is taken together from the first batch in that order, and
//!   is `unknown` for all three when there is no batch (an empty part is `unknown` too).
//!
//! So a retried batch (same events, same context, later sequence) changes nothing, and a
//! batch that arrives late but holds earlier events still wins, as it would have had the
//! network delivered in order.

use std::collections::BTreeMap;

/// The value of `browser`, `os` and `deviceType` when the `User-Agent` is absent or
/// unparsable (analytics.md §1).
pub const UNKNOWN: &str = "unknown";

/// Browser, operating system and device type derived from one request's `User-Agent`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserAgent {
    /// Browser name without version, e.g. `Chrome`.
    pub browser: String,
    /// OS name without version, e.g. `iOS`.
    pub os: String,
    /// `desktop`, `mobile`, `tablet`, `tv`, `other` or `unknown`.
    pub device_type: String,
}

impl UserAgent {
    /// `unknown` for all three (no or unparsable `User-Agent`).
    pub fn unknown() -> Self {
        UserAgent {
            browser: UNKNOWN.into(),
            os: UNKNOWN.into(),
            device_type: UNKNOWN.into(),
        }
    }
}

impl Default for UserAgent {
    fn default() -> Self {
        UserAgent::unknown()
    }
}

/// What one ingest batch says about its view's dimensions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchDims {
    /// Earliest event `ts` in the batch (epoch ms), duplicates included.
    pub first_ts_ms: i64,
    /// Write sequence: orders batches with the same `first_ts_ms` (smaller = written first).
    pub seq: u64,
    /// `context.sdk`.
    pub sdk: Option<String>,
    /// `context.player`.
    pub player: Option<String>,
    /// `context.contentId`.
    pub content_id: Option<String>,
    /// `context.src`.
    pub src: Option<String>,
    /// `context.tags`.
    pub tags: BTreeMap<String, String>,
    /// Derived from the request's `User-Agent`.
    pub user_agent: UserAgent,
}

/// The `dims` JSON of a stored batch record (`ingest::BatchRecord::dims_json`).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct DimsJson {
    sdk: Option<String>,
    player: Option<String>,
    content_id: Option<String>,
    src: Option<String>,
    tags: BTreeMap<String, String>,
    browser: Option<String>,
    os: Option<String>,
    device_type: Option<String>,
}

impl BatchDims {
    /// A stored batch record (`view_batches` row): its earliest `ts`, write sequence and
    /// `dims` JSON. `""` is a record whose `dims` an earlier record of the view already
    /// says (`ingest::record_dims`): it carries nothing and is never the first record, so
    /// it reads as a record without context. Tolerant: unreadable JSON reads the same way,
    /// with an unknown user agent (a stored record is never a reason to fail a view).
    pub fn from_stored(first_ts_ms: i64, seq: u64, dims_json: &str) -> Self {
        let d: DimsJson = if dims_json.is_empty() {
            DimsJson::default()
        } else {
            serde_json::from_str(dims_json).unwrap_or_default()
        };
        let part = |v: Option<String>| v.unwrap_or_else(|| UNKNOWN.to_owned());
        BatchDims {
            first_ts_ms,
            seq,
            sdk: d.sdk,
            player: d.player,
            content_id: d.content_id,
            src: d.src,
            tags: d.tags,
            user_agent: UserAgent {
                browser: part(d.browser),
                os: part(d.os),
                device_type: part(d.device_type),
            },
        }
    }
}

/// What one batch says about its view's dimensions, borrowed: from a record read back
/// ([`BatchDims`]) or from one this process just stored (`ingest::BatchRecord`, whose
/// strings the live views then never copy: a session's later batches usually give no
/// new value).
#[derive(Debug, Clone, Copy)]
pub struct DimsOf<'a> {
    /// Earliest event `ts` in the batch (epoch ms).
    pub first_ts_ms: i64,
    sdk: Option<&'a str>,
    player: Option<&'a str>,
    content_id: Option<&'a str>,
    src: Option<&'a str>,
    tags: &'a BTreeMap<String, String>,
    browser: &'a str,
    os: &'a str,
    device_type: &'a str,
}

impl<'a> From<&'a BatchDims> for DimsOf<'a> {
    fn from(b: &'a BatchDims) -> Self {
        DimsOf {
            first_ts_ms: b.first_ts_ms,
            sdk: b.sdk.as_deref(),
            player: b.player.as_deref(),
            content_id: b.content_id.as_deref(),
            src: b.src.as_deref(),
            tags: &b.tags,
            browser: &b.user_agent.browser,
            os: &b.user_agent.os,
            device_type: &b.user_agent.device_type,
        }
    }
}

impl<'a> From<&'a ingest::BatchRecord> for DimsOf<'a> {
    fn from(r: &'a ingest::BatchRecord) -> Self {
        let c = &*r.context;
        DimsOf {
            first_ts_ms: r.first_ts_ms,
            sdk: c.sdk.as_deref(),
            player: c.player.as_deref(),
            content_id: c.content_id.as_deref(),
            src: c.src.as_deref(),
            tags: &c.tags,
            browser: &r.user_agent.browser,
            os: &r.user_agent.os,
            device_type: r.user_agent.device_type,
        }
    }
}

/// The resolved dimensions of one view (`streamId` is not here: it is resolved from
/// `src` at query time, so streams registered later still match).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dims {
    /// `contentId`.
    pub content_id: Option<String>,
    /// `src`, the manifest URL.
    pub src: Option<String>,
    /// `sdk`.
    pub sdk: Option<String>,
    /// `player`.
    pub player: Option<String>,
    /// `tags`, by name.
    pub tags: BTreeMap<String, String>,
    /// Browser, OS and device type.
    pub user_agent: UserAgent,
}

impl Dims {
    /// Resolves a view's dimensions from its batches (any order, retries included) and
    /// the `contentId` of its first `playback_start`, by the rule of this module's doc.
    pub fn resolve(batches: &[BatchDims], playback_content_id: Option<&str>) -> Dims {
        let mut ordered: Vec<&BatchDims> = batches.iter().collect();
        ordered.sort_by_key(|b| (b.first_ts_ms, b.seq));
        let mut fold = DimsFold::default();
        for b in ordered {
            fold.push(b);
        }
        fold.dims(playback_content_id)
    }
}

/// The rule of this module's doc as a fold over a view's batches taken in their order
/// (`(first_ts_ms, seq)`): each field keeps the first non-empty value it is given, the
/// user-agent triple the first batch's. [`Dims::resolve`] sorts and folds; live views
/// (`crate::live`) fold each batch as it is stored, in that order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DimsFold {
    content_id: Option<String>,
    src: Option<String>,
    sdk: Option<String>,
    player: Option<String>,
    tags: BTreeMap<String, String>,
    user_agent: Option<UserAgent>,
}

impl DimsFold {
    /// Takes the next batch in order (a `&BatchDims` or a `&ingest::BatchRecord`). Copies
    /// only the values it did not hold yet.
    pub fn push<'a>(&mut self, b: impl Into<DimsOf<'a>>) {
        fn fill(field: &mut Option<String>, value: Option<&str>) {
            if field.is_none() {
                *field = value.filter(|v| !v.is_empty()).map(str::to_owned);
            }
        }
        let b = b.into();
        fill(&mut self.content_id, b.content_id);
        fill(&mut self.src, b.src);
        fill(&mut self.sdk, b.sdk);
        fill(&mut self.player, b.player);
        for (k, v) in b.tags {
            if !v.is_empty() && !self.tags.contains_key(k) {
                self.tags.insert(k.clone(), v.clone());
            }
        }
        if self.user_agent.is_none() {
            let part = |s: &str| if s.is_empty() { UNKNOWN } else { s }.to_owned();
            self.user_agent = Some(UserAgent {
                browser: part(b.browser),
                os: part(b.os),
                device_type: part(b.device_type),
            });
        }
    }

    /// The dimensions so far, `contentId` falling back to `playback_content_id`.
    pub fn dims(&self, playback_content_id: Option<&str>) -> Dims {
        Dims {
            content_id: self.content_id.clone().or_else(|| {
                playback_content_id
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
            }),
            src: self.src.clone(),
            sdk: self.sdk.clone(),
            player: self.player.clone(),
            tags: self.tags.clone(),
            user_agent: self.user_agent.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ua(browser: &str) -> UserAgent {
        UserAgent {
            browser: browser.into(),
            os: "os-".to_owned() + browser,
            device_type: "desktop".into(),
        }
    }

    fn batch(first_ts_ms: i64, seq: u64) -> BatchDims {
        BatchDims {
            first_ts_ms,
            seq,
            user_agent: ua(&format!("b{seq}")),
            ..BatchDims::default()
        }
    }

    /// What `record` says, as a stored record read back with write sequence `seq` should.
    fn from_record(record: &ingest::BatchRecord, seq: u64) -> BatchDims {
        let c = &record.context;
        BatchDims {
            first_ts_ms: record.first_ts_ms,
            seq,
            sdk: c.sdk.clone(),
            player: c.player.clone(),
            content_id: c.content_id.clone(),
            src: c.src.clone(),
            tags: c.tags.clone(),
            user_agent: UserAgent {
                browser: record.user_agent.browser.to_string(),
                os: record.user_agent.os.to_string(),
                device_type: record.user_agent.device_type.to_owned(),
            },
        }
    }

    #[test]
    fn reads_stored_records_as_written() {
        let mut tags = BTreeMap::new();
        tags.insert("plan".to_owned(), "free".to_owned());
        let record = ingest::BatchRecord {
            owner: "o".into(),
            session_id: "s".into(),
            first_ts_ms: 7,
            context: std::sync::Arc::new(ingest::Context {
                sdk: Some("sdk".into()),
                player: None,
                content_id: Some(String::new()),
                src: Some("https://x".into()),
                tags,
            }),
            user_agent: ingest::UaClass {
                browser: "Chrome".into(),
                os: "Windows".into(),
                device_type: "desktop",
            },
        };
        let stored = BatchDims::from_stored(7, 3, &record.dims_json());
        assert_eq!(stored, from_record(&record, 3));
        let bare = BatchDims::from_stored(1, 0, "not json");
        assert_eq!(bare.user_agent, UserAgent::unknown());
        assert_eq!(bare.sdk, None);
    }

    #[test]
    fn no_batches_gives_unknown_user_agent_and_no_context() {
        let d = Dims::resolve(&[], None);
        assert_eq!(d, Dims::default());
        assert_eq!(d.user_agent.browser, "unknown");
        assert_eq!(d.user_agent.os, "unknown");
        assert_eq!(d.user_agent.device_type, "unknown");
    }

    #[test]
    fn earliest_events_win_not_first_written() {
        // Written first but holding later events: loses to the batch with earlier events.
        let late = BatchDims {
            sdk: Some("late".into()),
            ..batch(2_000, 0)
        };
        let early = BatchDims {
            sdk: Some("early".into()),
            ..batch(1_000, 1)
        };
        let d = Dims::resolve(&[late, early], None);
        assert_eq!(d.sdk.as_deref(), Some("early"));
        assert_eq!(d.user_agent, ua("b1"));
    }

    #[test]
    fn ties_in_earliest_ts_go_to_the_batch_written_first() {
        let a = BatchDims {
            player: Some("a".into()),
            ..batch(1_000, 7)
        };
        let b = BatchDims {
            player: Some("b".into()),
            ..batch(1_000, 3)
        };
        let d = Dims::resolve(&[a, b], None);
        assert_eq!(d.player.as_deref(), Some("b"));
        assert_eq!(d.user_agent, ua("b3"));
    }

    #[test]
    fn each_field_skips_batches_without_a_non_empty_value() {
        let old_sdk = batch(100, 0); // SDK 0.1.0: no context at all
        let empty = BatchDims {
            src: Some(String::new()),
            sdk: Some(String::new()),
            ..batch(200, 1)
        };
        let full = BatchDims {
            src: Some("https://cdn/x.m3u8".into()),
            sdk: Some("sdk@0.2.0".into()),
            content_id: Some("c9".into()),
            ..batch(300, 2)
        };
        let d = Dims::resolve(&[full, empty, old_sdk], Some("from-start"));
        assert_eq!(d.src.as_deref(), Some("https://cdn/x.m3u8"));
        assert_eq!(d.sdk.as_deref(), Some("sdk@0.2.0"));
        assert_eq!(d.content_id.as_deref(), Some("c9"));
        assert_eq!(d.player, None);
        // The user-agent triple comes from the earliest batch even though it has no context.
        assert_eq!(d.user_agent, ua("b0"));
    }

    #[test]
    fn empty_user_agent_parts_are_unknown() {
        let b = BatchDims {
            user_agent: UserAgent {
                browser: "Chrome".into(),
                os: String::new(),
                device_type: String::new(),
            },
            ..batch(1, 0)
        };
        let d = Dims::resolve(&[b], None);
        assert_eq!(
            (
                d.user_agent.browser.as_str(),
                d.user_agent.os.as_str(),
                d.user_agent.device_type.as_str()
            ),
            ("Chrome", "unknown", "unknown")
        );
    }

    #[test]
    fn content_id_falls_back_to_playback_start() {
        let d = Dims::resolve(&[batch(1, 0)], Some("movie-1"));
        assert_eq!(d.content_id.as_deref(), Some("movie-1"));
        let d = Dims::resolve(&[batch(1, 0)], Some(""));
        assert_eq!(d.content_id, None);
        let d = Dims::resolve(&[], Some("movie-2"));
        assert_eq!(d.content_id.as_deref(), Some("movie-2"));
    }

    #[test]
    fn tags_merge_per_key_by_batch_order() {
        let mut t1 = BTreeMap::new();
        t1.insert("plan".to_owned(), "free".to_owned());
        t1.insert("region".to_owned(), String::new());
        let mut t2 = BTreeMap::new();
        t2.insert("plan".to_owned(), "premium".to_owned());
        t2.insert("region".to_owned(), "eu".to_owned());
        t2.insert("ab".to_owned(), "B".to_owned());
        let later = BatchDims {
            tags: t2,
            ..batch(50, 0)
        };
        let earlier = BatchDims {
            tags: t1,
            ..batch(10, 1)
        };
        let d = Dims::resolve(&[later, earlier], None);
        let got: Vec<(&str, &str)> = d
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, vec![("ab", "B"), ("plan", "free"), ("region", "eu")]);
    }

    #[test]
    fn retried_batches_change_nothing() {
        let a = BatchDims {
            sdk: Some("s".into()),
            ..batch(10, 0)
        };
        let b = BatchDims {
            player: Some("p".into()),
            ..batch(20, 1)
        };
        let once = Dims::resolve(&[a.clone(), b.clone()], None);
        let retried = Dims::resolve(
            &[
                b.clone(),
                BatchDims {
                    seq: 5,
                    ..a.clone()
                },
                a,
                BatchDims { seq: 9, ..b },
            ],
            None,
        );
        assert_eq!(once.sdk, retried.sdk);
        assert_eq!(once.player, retried.player);
        assert_eq!(once.tags, retried.tags);
        // The UA of a retry is the same request's UA, so the triple is unchanged too.
        assert_eq!(once.user_agent, retried.user_agent);
    }
}
