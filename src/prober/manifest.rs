//! Manifest checks of one probe (HLS with m3u8-rs, DASH with quick-xml) and the
//! staleness memory across probes of live HLS playlists.
//!
//! * A body starting with `#EXTM3U` is HLS; a body containing `<MPD` is DASH;
//!   anything else is not a manifest.
//! * HLS master playlist: the prober fetches one variant ([`pick_variant`]: the
//!   lowest-bandwidth non-I-frame variant, first on ties) and checks it as a media
//!   playlist. A media playlist must parse and have at least one segment.
//! * DASH: the MPD must be well-formed XML with root `MPD` and at least one
//!   Period with at least one AdaptationSet. This is a structural check with
//!   quick-xml rather than the dash-mpd crate: dash-mpd (even without default
//!   features) adds ~28 crates (serde_with + darling, a second `syn` major,
//!   webm/ebml, xattr) and ~90 s of clean build for a verdict the prober only
//!   needs as "parses and has content"; its typed model is also stricter
//!   than players on vendor quirks (a bad optional attribute would mark a
//!   playable stream degraded).
//! * Staleness ([`StalenessTracker`]): a live media playlist (no
//!   `#EXT-X-ENDLIST`) whose progress has not moved for 3 × target duration is
//!   stale. Progress is the pair (media sequence, segment count), so a sliding
//!   window (sequence moves) and an EVENT playlist (segments appended under a
//!   constant sequence) both count as moving.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use m3u8_rs::Playlist;

/// Why a manifest is invalid. `Display` is the text after `manifest invalid: `
/// in the probe detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Neither `#EXTM3U` nor `<MPD`.
    #[error("not an HLS or DASH manifest")]
    NotAManifest,
    /// The body is larger than the probe's cap (bytes).
    #[error("body larger than {0} bytes")]
    TooLarge(usize),
    /// m3u8-rs could not parse the playlist.
    #[error("HLS playlist does not parse")]
    HlsParse,
    /// A master playlist without any variant stream.
    #[error("master playlist has no variants")]
    NoVariants,
    /// The variant URI of a master playlist is not a valid URL.
    #[error("variant URI could not be parsed")]
    BadVariantUri,
    /// The variant playlist is itself a master playlist (or not HLS at all).
    #[error("variant is not a media playlist")]
    VariantNotMedia,
    /// A media playlist without segments.
    #[error("no segments")]
    NoSegments,
    /// The MPD is not UTF-8.
    #[error("MPD is not UTF-8")]
    DashNotUtf8,
    /// The MPD is not well-formed XML or its root is not `MPD`.
    #[error("MPD does not parse: {0}")]
    DashParse(String),
    /// An MPD without a Period.
    #[error("MPD has no Period")]
    NoPeriods,
    /// An MPD whose Periods have no AdaptationSet.
    #[error("MPD has no AdaptationSet")]
    NoAdaptationSets,
}

/// What a media playlist told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaInfo {
    /// `#EXT-X-MEDIA-SEQUENCE` (0 when absent).
    pub media_sequence: u64,
    /// Number of segments (at least 1 once checked).
    pub segments: usize,
    /// `#EXT-X-TARGETDURATION` in seconds.
    pub target_duration_s: u64,
    /// `#EXT-X-ENDLIST` present: VOD or finished event, never stale.
    pub ended: bool,
}

/// What an MPD told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashInfo {
    /// Number of Periods.
    pub periods: usize,
    /// AdaptationSets over all Periods.
    pub adaptation_sets: usize,
    /// `type="dynamic"` (live).
    pub dynamic: bool,
}

/// A parsed top-level document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// HLS master playlist; `variant_uri` is the one to fetch (relative to the
    /// master's URL).
    HlsMaster {
        /// URI of the chosen variant, as written in the playlist.
        variant_uri: String,
        /// Number of variants in the playlist.
        variants: usize,
    },
    /// HLS media playlist with at least one segment.
    HlsMedia(MediaInfo),
    /// DASH MPD with at least one Period and AdaptationSet.
    Dash(DashInfo),
}

/// Kind of a valid manifest, as probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestKind {
    /// HLS master playlist plus one checked variant.
    HlsMaster,
    /// HLS media playlist.
    HlsMedia,
    /// DASH MPD.
    Dash,
}

/// A valid manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestSummary {
    /// What was probed.
    pub kind: ManifestKind,
    /// The media playlist checked (the variant for a master playlist).
    pub media: Option<MediaInfo>,
    /// The MPD for DASH.
    pub dash: Option<DashInfo>,
}

/// The manifest part of a probe outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestCheck {
    /// Parsed and has content.
    Valid(ManifestSummary),
    /// Does not parse or has no content.
    Invalid(ManifestError),
    /// Valid but the live playlist has not moved for 3 target durations.
    Stale(Staleness),
}

impl ManifestCheck {
    /// Applies the staleness rule to a valid live media playlist, remembering its
    /// progress under `key`. A playlist with `#EXT-X-ENDLIST` clears the memory;
    /// invalid manifests leave it untouched.
    pub fn with_staleness<K: Hash + Eq>(
        self,
        tracker: &mut StalenessTracker<K>,
        key: K,
        now: Instant,
    ) -> ManifestCheck {
        match self {
            ManifestCheck::Valid(summary) => match summary.media {
                Some(media) if media.ended => {
                    tracker.forget(&key);
                    ManifestCheck::Valid(summary)
                }
                Some(media) => match tracker.observe(key, &media, now) {
                    Some(stale) => ManifestCheck::Stale(stale),
                    None => ManifestCheck::Valid(summary),
                },
                None => ManifestCheck::Valid(summary),
            },
            other => other,
        }
    }
}

/// Parses a top-level manifest body.
pub fn parse_manifest(body: &[u8]) -> Result<Parsed, ManifestError> {
    let text = strip_preamble(body);
    if text.starts_with(b"#EXTM3U") {
        return parse_hls(text);
    }
    if looks_like_mpd(text) {
        return parse_dash(text).map(Parsed::Dash);
    }
    Err(ManifestError::NotAManifest)
}

/// Checks the body of a variant playlist: it must be an HLS media playlist
/// with segments.
pub fn check_variant(body: &[u8]) -> Result<MediaInfo, ManifestError> {
    let text = strip_preamble(body);
    if !text.starts_with(b"#EXTM3U") {
        return Err(ManifestError::VariantNotMedia);
    }
    match parse_hls(text)? {
        Parsed::HlsMedia(info) => Ok(info),
        _ => Err(ManifestError::VariantNotMedia),
    }
}

/// Index of the variant to probe: the lowest-bandwidth regular (non-I-frame)
/// variant, first on ties; I-frame variants only if there is nothing else.
pub fn pick_variant(variants: &[m3u8_rs::VariantStream]) -> Option<usize> {
    let lowest = |iframe: bool| {
        variants
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_i_frame == iframe)
            .min_by_key(|(i, v)| (v.bandwidth, *i))
            .map(|(i, _)| i)
    };
    lowest(false).or_else(|| lowest(true))
}

fn parse_hls(text: &[u8]) -> Result<Parsed, ManifestError> {
    match m3u8_rs::parse_playlist_res(text) {
        Ok(Playlist::MasterPlaylist(master)) => {
            let i = pick_variant(&master.variants).ok_or(ManifestError::NoVariants)?;
            let uri = master.variants[i].uri.trim();
            if uri.is_empty() {
                return Err(ManifestError::BadVariantUri);
            }
            Ok(Parsed::HlsMaster {
                variant_uri: uri.to_owned(),
                variants: master.variants.len(),
            })
        }
        Ok(Playlist::MediaPlaylist(media)) => {
            if media.segments.is_empty() {
                return Err(ManifestError::NoSegments);
            }
            Ok(Parsed::HlsMedia(MediaInfo {
                media_sequence: media.media_sequence,
                segments: media.segments.len(),
                target_duration_s: media.target_duration,
                ended: media.end_list,
            }))
        }
        Err(_) => Err(ManifestError::HlsParse),
    }
}

/// Structural MPD check with quick-xml: well-formed XML (end names checked,
/// no entity expansion), root element `MPD` (any namespace prefix), at least
/// one `MPD/Period`, at least one `MPD/Period/AdaptationSet`.
fn parse_dash(text: &[u8]) -> Result<DashInfo, ManifestError> {
    use quick_xml::events::Event;
    let xml = std::str::from_utf8(text).map_err(|_| ManifestError::DashNotUtf8)?;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let parse_err = |reader: &quick_xml::Reader<&[u8]>, e: &dyn fmt::Display| {
        ManifestError::DashParse(short(&format!("{e} at byte {}", reader.error_position())))
    };
    // Local names of the open elements, root first.
    let mut open: Vec<Vec<u8>> = Vec::new();
    let (mut seen_root, mut periods, mut adaptation_sets, mut dynamic) = (false, 0, 0, false);
    loop {
        let event = reader.read_event().map_err(|e| parse_err(&reader, &e))?;
        let (e, empty) = match &event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                open.pop();
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let name = e.local_name().as_ref().to_vec();
        match open.len() {
            0 if seen_root => {
                return Err(ManifestError::DashParse(
                    "more than one root element".into(),
                ))
            }
            0 if name != b"MPD" => {
                return Err(ManifestError::DashParse("root element is not MPD".into()))
            }
            0 => {
                seen_root = true;
                dynamic = e
                    .try_get_attribute("type")
                    .ok()
                    .flatten()
                    .is_some_and(|a| a.value.as_ref() == b"dynamic");
            }
            1 if name == b"Period" => periods += 1,
            2 if name == b"AdaptationSet" && open[1] == b"Period" => adaptation_sets += 1,
            _ => {}
        }
        if !empty {
            open.push(name);
        }
    }
    if !seen_root {
        return Err(ManifestError::DashParse("no MPD element".into()));
    }
    if !open.is_empty() {
        return Err(ManifestError::DashParse(
            "unexpected end of document".into(),
        ));
    }
    if periods == 0 {
        return Err(ManifestError::NoPeriods);
    }
    if adaptation_sets == 0 {
        return Err(ManifestError::NoAdaptationSets);
    }
    Ok(DashInfo {
        periods,
        adaptation_sets,
        dynamic,
    })
}

/// Parser messages can quote the whole document; keep details one short line.
fn short(msg: &str) -> String {
    let line = msg.lines().next().unwrap_or_default();
    if line.chars().count() > 120 {
        let cut: String = line.chars().take(120).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

fn strip_preamble(body: &[u8]) -> &[u8] {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    &body[start..]
}

fn looks_like_mpd(text: &[u8]) -> bool {
    text.first() == Some(&b'<') && text.windows(4).any(|w| w == b"<MPD" || w == b":MPD")
}

/// A live playlist that has not moved: detail text via `Display`, e.g.
/// `media sequence stuck at 118 for 18 s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staleness {
    /// The media sequence that has not moved.
    pub media_sequence: u64,
    /// Time since the progress was first seen at this value.
    pub stuck_for: Duration,
    /// 3 × target duration.
    pub threshold: Duration,
}

impl fmt::Display for Staleness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "media sequence stuck at {} for {} s",
            self.media_sequence,
            self.stuck_for.as_secs()
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    media_sequence: u64,
    segments: usize,
    since: Instant,
}

/// Memory of each live stream's playlist progress across probes. Pure: the
/// caller passes the time of each observation. Keyed by stream id; the owner
/// calls [`StalenessTracker::forget`] / [`StalenessTracker::retain`] when
/// streams go away.
#[derive(Debug, Clone)]
pub struct StalenessTracker<K = String> {
    seen: HashMap<K, Progress>,
}

impl<K: Hash + Eq> Default for StalenessTracker<K> {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> StalenessTracker<K> {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a live media playlist seen at `now`. Returns the staleness when
    /// its progress (media sequence, segment count) is unchanged since at least
    /// 3 × target duration (a target duration of 0 counts as 1 s).
    pub fn observe(&mut self, key: K, media: &MediaInfo, now: Instant) -> Option<Staleness> {
        let threshold = Duration::from_secs(3 * media.target_duration_s.max(1));
        let entry = self.seen.entry(key).or_insert(Progress {
            media_sequence: media.media_sequence,
            segments: media.segments,
            since: now,
        });
        if entry.media_sequence != media.media_sequence || entry.segments != media.segments {
            *entry = Progress {
                media_sequence: media.media_sequence,
                segments: media.segments,
                since: now,
            };
            return None;
        }
        let stuck_for = now.saturating_duration_since(entry.since);
        (stuck_for >= threshold).then_some(Staleness {
            media_sequence: media.media_sequence,
            stuck_for,
            threshold,
        })
    }

    /// Drops the memory of `key`.
    pub fn forget(&mut self, key: &K) {
        self.seen.remove(key);
    }

    /// Keeps only the keys for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.seen.retain(|k, _| keep(k));
    }

    /// Number of streams remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no stream is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MASTER: &str = "#EXTM3U\n#EXT-X-VERSION:3\n\
        #EXT-X-STREAM-INF:BANDWIDTH=2800000,RESOLUTION=1280x720\nhigh/index.m3u8\n\
        #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360\nlow/index.m3u8\n\
        #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360\nlow2/index.m3u8\n";

    fn live(seq: u64, n: usize) -> String {
        let mut s = format!(
            "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:{seq}\n"
        );
        for i in 0..n {
            s.push_str(&format!("#EXTINF:6.0,\nseg{}.ts\n", seq + i as u64));
        }
        s
    }

    const MPD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT10S" minBufferTime="PT2S" profiles="urn:mpeg:dash:profile:isoff-on-demand:2011">
  <Period id="0">
    <AdaptationSet mimeType="video/mp4" segmentAlignment="true">
      <Representation id="v0" bandwidth="800000" codecs="avc1.4d401f" width="640" height="360">
        <BaseURL>v0.mp4</BaseURL>
      </Representation>
    </AdaptationSet>
  </Period>
</MPD>"#;

    #[test]
    fn master_playlist_picks_lowest_bandwidth_first_on_ties() {
        assert_eq!(
            parse_manifest(MASTER.as_bytes()),
            Ok(Parsed::HlsMaster {
                variant_uri: "low/index.m3u8".into(),
                variants: 3
            })
        );
    }

    #[test]
    fn master_playlist_prefers_regular_variants_over_iframe() {
        let m = "#EXTM3U\n#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=100,URI=\"iframe.m3u8\"\n\
                 #EXT-X-STREAM-INF:BANDWIDTH=900000\nmain.m3u8\n";
        assert_eq!(
            parse_manifest(m.as_bytes()),
            Ok(Parsed::HlsMaster {
                variant_uri: "main.m3u8".into(),
                variants: 2
            })
        );
    }

    #[test]
    fn media_playlist_with_segments_is_valid() {
        let body = format!("\u{feff}\n{}", live(118, 3));
        assert_eq!(
            parse_manifest(body.as_bytes()),
            Ok(Parsed::HlsMedia(MediaInfo {
                media_sequence: 118,
                segments: 3,
                target_duration_s: 6,
                ended: false
            }))
        );
        let vod = format!("{}#EXT-X-ENDLIST\n", live(0, 2));
        assert!(matches!(
            parse_manifest(vod.as_bytes()),
            Ok(Parsed::HlsMedia(MediaInfo { ended: true, .. }))
        ));
    }

    #[test]
    fn media_playlist_without_segments_is_invalid() {
        assert_eq!(
            parse_manifest(live(5, 0).as_bytes()),
            Err(ManifestError::NoSegments)
        );
        assert_eq!(parse_manifest(b"#EXTM3U\n"), Err(ManifestError::NoSegments));
        assert_eq!(ManifestError::NoSegments.to_string(), "no segments");
    }

    #[test]
    fn variant_must_be_a_media_playlist() {
        assert!(check_variant(live(1, 1).as_bytes()).is_ok());
        assert_eq!(
            check_variant(MASTER.as_bytes()),
            Err(ManifestError::VariantNotMedia)
        );
        assert_eq!(
            check_variant(b"<html></html>"),
            Err(ManifestError::VariantNotMedia)
        );
        assert_eq!(
            check_variant(live(1, 0).as_bytes()),
            Err(ManifestError::NoSegments)
        );
    }

    #[test]
    fn dash_mpd_parses() {
        assert_eq!(
            parse_manifest(MPD.as_bytes()),
            Ok(Parsed::Dash(DashInfo {
                periods: 1,
                adaptation_sets: 1,
                dynamic: false
            }))
        );
    }

    #[test]
    fn dash_without_period_or_adaptation_set_is_invalid() {
        let no_period = r#"<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" minBufferTime="PT2S"></MPD>"#;
        assert_eq!(
            parse_manifest(no_period.as_bytes()),
            Err(ManifestError::NoPeriods)
        );
        let no_as = r#"<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="dynamic"><Period id="1"></Period></MPD>"#;
        assert_eq!(
            parse_manifest(no_as.as_bytes()),
            Err(ManifestError::NoAdaptationSets)
        );
        let broken = "<MPD><Period><AdaptationSet></Period>";
        assert!(matches!(
            parse_manifest(broken.as_bytes()),
            Err(ManifestError::DashParse(_))
        ));
        assert_eq!(
            parse_manifest(b"<MPD \xff\xfe>"),
            Err(ManifestError::DashNotUtf8)
        );
    }

    #[test]
    fn dash_structure_rules() {
        let dash = |s: &str| parse_manifest(s.as_bytes());
        // Namespace prefix on the root, several periods, comments and a doctype.
        let prefixed = r#"<?xml version="1.0"?><!-- live --><!DOCTYPE MPD [<!ENTITY x "y">]>
            <mpd:MPD xmlns:mpd="urn:mpeg:dash:schema:mpd:2011" type="dynamic">
              <mpd:Period id="1"><mpd:AdaptationSet/></mpd:Period>
              <mpd:Period id="2"><mpd:AdaptationSet/><mpd:AdaptationSet/></mpd:Period>
            </mpd:MPD>"#;
        assert_eq!(
            dash(prefixed),
            Ok(Parsed::Dash(DashInfo {
                periods: 2,
                adaptation_sets: 3,
                dynamic: true
            }))
        );
        // AdaptationSet only counts inside MPD/Period.
        let misplaced =
            "<MPD><AdaptationSet/><Period/><Other><Period><AdaptationSet/></Period></Other></MPD>";
        assert_eq!(dash(misplaced), Err(ManifestError::NoAdaptationSets));
        let unclosed = "<MPD><Period><AdaptationSet/></Period>";
        assert_eq!(
            dash(unclosed),
            Err(ManifestError::DashParse(
                "unexpected end of document".into()
            ))
        );
        let html = "<html><body><MPD/></body></html>";
        assert_eq!(
            dash(html),
            Err(ManifestError::DashParse("root element is not MPD".into()))
        );
        let two_roots = "<MPD><Period><AdaptationSet/></Period></MPD><MPD/>";
        assert_eq!(
            dash(two_roots),
            Err(ManifestError::DashParse(
                "more than one root element".into()
            ))
        );
        match dash("<MPD><Period><AdaptationSet></Period></MPD>") {
            Err(ManifestError::DashParse(msg)) => assert!(msg.contains("AdaptationSet"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_bodies_are_not_manifests() {
        for body in [
            &b""[..],
            b"<html><body>hi</body></html>",
            b"{\"ok\":true}",
            b"EXTM3U",
            b"\x00\x01",
        ] {
            assert_eq!(
                parse_manifest(body),
                Err(ManifestError::NotAManifest),
                "{body:?}"
            );
        }
    }

    fn info(seq: u64, segments: usize) -> MediaInfo {
        MediaInfo {
            media_sequence: seq,
            segments,
            target_duration_s: 6,
            ended: false,
        }
    }

    #[test]
    fn sequence_stuck_for_three_target_durations_is_stale() {
        let mut t = StalenessTracker::new();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(t.observe("a", &info(118, 3), s(0)), None);
        assert_eq!(t.observe("a", &info(118, 3), s(6)), None);
        assert_eq!(t.observe("a", &info(118, 3), s(17)), None);
        let stale = t
            .observe("a", &info(118, 3), s(18))
            .expect("stale at 3 × 6 s");
        assert_eq!(stale.to_string(), "media sequence stuck at 118 for 18 s");
        assert_eq!(stale.threshold, Duration::from_secs(18));
        // Moving again clears it and restarts the clock.
        assert_eq!(t.observe("a", &info(119, 3), s(24)), None);
        assert_eq!(t.observe("a", &info(119, 3), s(41)), None);
        assert!(t.observe("a", &info(119, 3), s(42)).is_some());
    }

    #[test]
    fn appended_segments_count_as_progress_and_keys_are_independent() {
        let mut t = StalenessTracker::new();
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(t.observe("event", &info(0, 3), s(0)), None);
        assert_eq!(t.observe("event", &info(0, 4), s(20)), None);
        assert_eq!(t.observe("other", &info(0, 4), s(20)), None);
        assert!(t.observe("event", &info(0, 4), s(40)).is_some());
        assert_eq!(t.observe("other", &info(0, 4), s(37)), None);
        t.forget(&"event");
        assert_eq!(t.observe("event", &info(0, 4), s(60)), None);
        t.retain(|k| *k == "other");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn with_staleness_marks_only_live_media_playlists() {
        let mut t = StalenessTracker::<String>::new();
        let t0 = Instant::now();
        let valid = |ended| {
            ManifestCheck::Valid(ManifestSummary {
                kind: ManifestKind::HlsMaster,
                media: Some(MediaInfo {
                    ended,
                    ..info(7, 2)
                }),
                dash: None,
            })
        };
        assert!(matches!(
            valid(false).with_staleness(&mut t, "s".into(), t0),
            ManifestCheck::Valid(_)
        ));
        let later = t0 + Duration::from_secs(30);
        match valid(false).with_staleness(&mut t, "s".into(), later) {
            ManifestCheck::Stale(s) => {
                assert_eq!(s.to_string(), "media sequence stuck at 7 for 30 s")
            }
            other => panic!("{other:?}"),
        }
        // VOD never goes stale and clears the memory.
        assert!(matches!(
            valid(true).with_staleness(&mut t, "s".into(), later),
            ManifestCheck::Valid(_)
        ));
        assert!(t.is_empty());
        let dash = ManifestCheck::Valid(ManifestSummary {
            kind: ManifestKind::Dash,
            media: None,
            dash: Some(DashInfo {
                periods: 1,
                adaptation_sets: 1,
                dynamic: true,
            }),
        });
        assert_eq!(dash.clone().with_staleness(&mut t, "d".into(), later), dash);
    }
}
