//! A telemetry batch as the server spools it (scale.md §3): its event rows and its
//! [`BatchRecord`], exactly as [`crate::Batch::into_write`] made them at acknowledgement,
//! so the drainer stores what the request would have stored, whatever changes in
//! validation or user-agent classification between the two.
//!
//! The format is a small length-prefixed binary one, versioned by its first byte; the spool
//! checksums every record, so decoding only meets bytes this module wrote (a version it
//! does not know is an error, not a guess). Owner and session are written once per batch.
//!
//! ```text
//! version u8 = 1
//! owner str, session str, first_ts i64, ua.browser str, ua.os str, ua.device str,
//! sdk opt, player opt, content_id opt, src opt, tags u32 × (key str, value str),
//! rows u32 × (ts i64, type u8, payload str, content_id str)
//! str = u32 length (LE) + UTF-8 bytes; opt = u8 0 | 1 + str; integers little-endian
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::row::{BatchRecord, EventRow};
use crate::ua::UaClass;
use crate::wire::{Context, EventType};

const VERSION: u8 = 1;

/// Device types a [`UaClass`] can carry (its field is `&'static str`).
const DEVICE_TYPES: [&str; 6] = ["desktop", "mobile", "tablet", "tv", "other", "unknown"];

/// A spooled payload that could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spooled batch cannot be decoded: {0}")]
pub struct DecodeError(&'static str);

/// The bytes of one batch: its `rows` (all of one owner and session, as
/// [`crate::Batch::into_write`] makes them) and its `record`.
pub fn encode(rows: &[EventRow], record: &BatchRecord) -> Vec<u8> {
    let size = 64 + rows.iter().map(|r| 24 + r.payload.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(VERSION);
    put_str(&mut out, &record.owner);
    put_str(&mut out, &record.session_id);
    out.extend_from_slice(&record.first_ts_ms.to_le_bytes());
    put_str(&mut out, &record.user_agent.browser);
    put_str(&mut out, &record.user_agent.os);
    put_str(&mut out, record.user_agent.device_type);
    let c = &record.context;
    for field in [&c.sdk, &c.player, &c.content_id, &c.src] {
        match field {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                put_str(&mut out, v);
            }
        }
    }
    put_len(&mut out, c.tags.len());
    for (k, v) in &c.tags {
        put_str(&mut out, k);
        put_str(&mut out, v);
    }
    put_len(&mut out, rows.len());
    for r in rows {
        out.extend_from_slice(&r.ts_ms.to_le_bytes());
        out.push(type_code(r.event_type));
        put_str(&mut out, &r.payload);
        put_str(&mut out, &r.content_id);
    }
    out
}

/// The rows and record [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<(Vec<EventRow>, BatchRecord), DecodeError> {
    let mut r = Reader { bytes };
    if r.u8()? != VERSION {
        return Err(DecodeError("unknown version"));
    }
    let owner: Arc<str> = Arc::from(r.str()?);
    let session_id: Arc<str> = Arc::from(r.str()?);
    let first_ts_ms = r.i64()?;
    let browser = Arc::from(r.str()?);
    let os = Arc::from(r.str()?);
    let device = r.str()?;
    let device_type = DEVICE_TYPES
        .into_iter()
        .find(|d| *d == device)
        .ok_or(DecodeError("unknown device type"))?;
    let mut opt = || -> Result<Option<String>, DecodeError> {
        match r.u8()? {
            0 => Ok(None),
            1 => Ok(Some(r.str()?.to_owned())),
            _ => Err(DecodeError("bad optional field")),
        }
    };
    let (sdk, player, content_id, src) = (opt()?, opt()?, opt()?, opt()?);
    let mut tags = BTreeMap::new();
    for _ in 0..r.len()? {
        let k = r.str()?.to_owned();
        tags.insert(k, r.str()?.to_owned());
    }
    let n = r.len()?;
    // Each row takes at least 17 bytes: a length from damaged bytes cannot allocate much.
    let mut rows = Vec::with_capacity(n.min(r.bytes.len() / 17));
    for _ in 0..n {
        let ts_ms = r.i64()?;
        let event_type = *EventType::ALL
            .get(usize::from(r.u8()?))
            .ok_or(DecodeError("unknown event type"))?;
        rows.push(EventRow {
            owner: owner.clone(),
            session_id: session_id.clone(),
            ts_ms,
            event_type,
            payload: r.str()?.to_owned(),
            content_id: r.str()?.to_owned(),
        });
    }
    if !r.bytes.is_empty() {
        return Err(DecodeError("trailing bytes"));
    }
    let record = BatchRecord {
        owner,
        session_id,
        first_ts_ms,
        context: Arc::new(Context {
            sdk,
            player,
            content_id,
            src,
            tags,
        }),
        user_agent: UaClass {
            browser,
            os,
            device_type,
        },
    };
    Ok((rows, record))
}

fn type_code(t: EventType) -> u8 {
    // ALL holds the eight types: the position always fits.
    EventType::ALL.iter().position(|a| *a == t).unwrap_or(0) as u8
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError("truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn len(&mut self) -> Result<usize, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| DecodeError("not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(context: Context, ua: UaClass) -> (Vec<EventRow>, BatchRecord) {
        let owner: Arc<str> = Arc::from("owner-1");
        let session: Arc<str> = Arc::from("session-é");
        let rows = EventType::ALL
            .iter()
            .enumerate()
            .map(|(i, t)| EventRow {
                owner: owner.clone(),
                session_id: session.clone(),
                ts_ms: 1_700_000_000_000 + i as i64,
                event_type: *t,
                payload: format!("{{\"positionMs\":{i}}}"),
                content_id: if i == 0 {
                    "movie".into()
                } else {
                    String::new()
                },
            })
            .collect();
        let record = BatchRecord {
            owner,
            session_id: session,
            first_ts_ms: 1_700_000_000_000,
            context: Arc::new(context),
            user_agent: ua,
        };
        (rows, record)
    }

    #[test]
    fn a_batch_comes_back_as_it_was_written() {
        let mut tags = BTreeMap::new();
        tags.insert("plan".to_owned(), "gold".to_owned());
        tags.insert("empty".to_owned(), String::new());
        let full = Context {
            sdk: Some("@service/player-sdk@0.2.0".into()),
            player: Some(String::new()),
            content_id: None,
            src: Some("https://cdn.example.com/a.m3u8".into()),
            tags,
        };
        let ua = UaClass {
            browser: Arc::from("Chrome"),
            os: Arc::from("Android"),
            device_type: "mobile",
        };
        for (rows, record) in [
            batch(full, ua),
            batch(Context::default(), UaClass::unknown()),
        ] {
            let bytes = encode(&rows, &record);
            assert_eq!(decode(&bytes), Ok((rows, record)));
        }
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let (rows, record) = batch(Context::default(), UaClass::unknown());
        let bytes = encode(&rows, &record);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(DecodeError("trailing bytes")));
        let mut other = bytes;
        other[0] = 9;
        assert_eq!(decode(&other), Err(DecodeError("unknown version")));
    }
}
