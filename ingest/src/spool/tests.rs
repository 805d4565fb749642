//! Unit tests of the spool: group commit (with the thread held by a gate, so that
//! what is queued is known), the memory budget, order, limits, reopening, and a
//! record whose checksum fails. File damage and SIGKILL are in tests/integration/spool.rs.

use super::*;

fn record(id_hint: usize, len: usize) -> Record {
    let mut payload = format!("record-{id_hint:06}-").into_bytes();
    payload.resize(len, b'x');
    Record {
        events: (id_hint % 50) as u32 + 1,
        payload,
    }
}

/// Yields until `cond` holds (the test runtime is single-threaded: every other
/// task has run as far as it can each time this one runs again).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn one_commit_takes_every_append_queued_while_the_thread_was_busy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    let gate = spool.gate();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let spool = spool.clone();
            tokio::spawn(async move { spool.append(record(i, 300)).await })
        })
        .collect();
    until(|| spool.stats().queued_records == 200).await;
    assert_eq!(spool.stats().commits, 0);
    drop(gate);
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.expect("join").expect("append"));
    }
    ids.sort();
    assert_eq!(ids, (1..=200).map(RecordId).collect::<Vec<_>>());
    let stats = spool.stats();
    assert_eq!((stats.appended, stats.commits), (200, 1));
    assert_eq!(
        (stats.records, stats.queued_records, stats.queued_bytes),
        (200, 0, 0)
    );
    assert_eq!(stats.bytes, 200 * (300 + RECORD_OVERHEAD));
}

#[tokio::test]
async fn appends_wait_for_room_in_the_memory_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Room in memory for 6 records of 100 + 64 bytes.
    let options = SpoolOptions {
        max_bytes: 1 << 30,
        memory_bytes: 1000,
    };
    let spool = Spool::open_with(dir.path(), options).await.expect("open");
    let gate = spool.gate();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let spool = spool.clone();
            tokio::spawn(async move { spool.append(record(i, 100)).await })
        })
        .collect();
    until(|| spool.stats().queued_records == 6).await;
    // Every task has run as far as it can: the other four wait for memory.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let stats = spool.stats();
    assert_eq!(stats.queued_records, 6);
    // All ten count against max_bytes already.
    assert_eq!(stats.queued_bytes, 10 * 164);
    drop(gate);
    for t in tasks {
        t.await.expect("join").expect("append");
    }
    assert_eq!(spool.stats().records, 10);
    let too_large = spool.append(record(0, 1000)).await;
    assert!(
        matches!(
            too_large,
            Err(SpoolError::TooLarge {
                bytes: 1064,
                max: 1000
            })
        ),
        "{too_large:?}"
    );
}

#[tokio::test]
async fn peeks_oldest_first_within_limits_and_removes_through_an_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    for i in 1..=10 {
        assert_eq!(
            spool.append(record(i, 100)).await.expect("append"),
            RecordId(i as i64)
        );
    }
    let ids = |recs: &[SpooledRecord]| recs.iter().map(|r| r.id.0).collect::<Vec<_>>();
    assert_eq!(
        ids(&spool.peek(4, 1 << 20).await.expect("peek")),
        [1, 2, 3, 4]
    );
    // 250 bytes: two records of 100, not three.
    assert_eq!(ids(&spool.peek(100, 250).await.expect("peek")), [1, 2]);
    // A first record larger than max_bytes still comes, alone.
    assert_eq!(ids(&spool.peek(100, 10).await.expect("peek")), [1]);
    let all = spool.peek(100, 1 << 20).await.expect("peek");
    assert_eq!(ids(&all), (1..=10).collect::<Vec<_>>());
    for r in &all {
        assert_eq!(r.payload, record(r.id.0 as usize, 100).payload);
        assert_eq!(r.events, record(r.id.0 as usize, 100).events);
    }
    let removed = spool.remove_through(RecordId(3)).await.expect("remove");
    let events: u64 = (1..=3).map(|i| u64::from(record(i, 100).events)).sum();
    assert_eq!(
        removed,
        Removed {
            records: 3,
            events,
            bytes: 3 * 164
        }
    );
    assert_eq!(
        ids(&spool.peek(100, 1 << 20).await.expect("peek")),
        (4..=10).collect::<Vec<_>>()
    );
    // Again, or an older id: nothing more to remove.
    assert_eq!(
        spool
            .remove_through(RecordId(2))
            .await
            .expect("remove")
            .records,
        0
    );
    let stats = spool.stats();
    assert_eq!((stats.records, stats.bytes), (7, 7 * 164));
    assert_eq!((stats.drained_records, stats.drained_events), (3, events));
    let oldest = all[3].spooled_at_ms;
    assert_eq!(stats.oldest_spooled_at_ms, Some(oldest));
    spool.remove_through(RecordId(10)).await.expect("remove");
    assert!(spool.peek(100, 1 << 20).await.expect("peek").is_empty());
    let stats = spool.stats();
    assert_eq!(
        (stats.records, stats.bytes, stats.oldest_spooled_at_ms),
        (0, 0, None)
    );
}

#[tokio::test]
async fn full_at_max_bytes_at_once_and_room_again_after_a_removal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 10 * 164).await.expect("open");
    for i in 1..=10 {
        spool.append(record(i, 100)).await.expect("append");
    }
    let full = spool.append(record(11, 100)).await;
    assert!(
        matches!(
            full,
            Err(SpoolError::Full {
                held: 1640,
                max: 1640
            })
        ),
        "{full:?}"
    );
    // An empty record counts its overhead too.
    assert!(matches!(
        spool.append(record(11, 0)).await,
        Err(SpoolError::Full { .. })
    ));
    spool.remove_through(RecordId(2)).await.expect("remove");
    assert_eq!(
        spool.append(record(11, 100)).await.expect("append"),
        RecordId(11)
    );
    assert_eq!(
        spool.append(record(12, 100)).await.expect("append"),
        RecordId(12)
    );
    assert!(matches!(
        spool.append(record(13, 100)).await,
        Err(SpoolError::Full { .. })
    ));
    assert_eq!(spool.stats().records, 10);
}

#[tokio::test]
async fn a_second_open_of_the_directory_is_refused_until_the_first_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 20).await.expect("open");
    let second = Spool::open(dir.path(), 1 << 20).await;
    match second {
        Err(SpoolError::Locked { dir: d, holder }) => {
            assert_eq!(d, dir.path());
            assert_eq!(holder, Some(std::process::id()));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    let message = Spool::open(dir.path(), 1 << 20)
        .await
        .expect_err("locked")
        .to_string();
    assert_eq!(
        message,
        format!(
            "spool directory {} is in use by another process (pid {})",
            dir.path().display(),
            std::process::id()
        )
    );
    spool.close().await.expect("close");
    assert!(matches!(
        spool.append(record(1, 10)).await,
        Err(SpoolError::Closed)
    ));
    assert!(matches!(spool.peek(1, 1).await, Err(SpoolError::Closed)));
    Spool::open(dir.path(), 1 << 20)
        .await
        .expect("reopen after close");
}

#[tokio::test]
async fn records_ids_and_removals_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    for i in 1..=10 {
        spool.append(record(i, 200)).await.expect("append");
    }
    spool.remove_through(RecordId(4)).await.expect("remove");
    spool.close().await.expect("close");

    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(spool.recovery(), &Recovery::default());
    let stats = spool.stats();
    assert_eq!((stats.records, stats.bytes), (6, 6 * 264));
    let held = spool.peek(100, 1 << 20).await.expect("peek");
    assert_eq!(held.first().map(|r| r.id), Some(RecordId(5)));
    assert_eq!(stats.oldest_spooled_at_ms, Some(held[0].spooled_at_ms));
    let removed = spool.remove_through(RecordId(8)).await.expect("remove");
    assert_eq!(removed.records, 4);
    spool.remove_through(RecordId(10)).await.expect("remove");
    spool.close().await.expect("close");

    // Empty, reopened: ids go on from where they were, never reused.
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(spool.stats().records, 0);
    assert_eq!(
        spool.append(record(11, 10)).await.expect("append"),
        RecordId(11)
    );
}

#[tokio::test]
async fn empty_and_large_records_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    let large: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let records = [
        Record {
            events: 0,
            payload: Vec::new(),
        },
        Record {
            events: 1000,
            payload: large.clone(),
        },
        Record {
            events: 7,
            payload: vec![0],
        },
    ];
    for r in &records {
        spool.append(r.clone()).await.expect("append");
    }
    spool.close().await.expect("close");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    let back = spool.peek(10, 1).await.expect("peek");
    assert_eq!(back.len(), 1, "max_bytes 1 still returns the first record");
    assert!(back[0].payload.is_empty());
    let back = spool.peek(10, 8 << 20).await.expect("peek");
    let got: Vec<Record> = back
        .into_iter()
        .map(|r| Record {
            events: r.events,
            payload: r.payload,
        })
        .collect();
    assert_eq!(got, records);
}

#[tokio::test]
async fn a_record_failing_its_checksum_is_quarantined_and_the_rest_drained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    for i in 1..=6 {
        spool.append(record(i, 100)).await.expect("append");
    }
    spool.close().await.expect("close");
    // Damage SQLite cannot see: the rows are well-formed, the values are not the
    // ones written (a flipped payload byte, a changed event count).
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open db");
    conn.execute(
        "UPDATE records SET payload = CAST(replace(CAST(payload AS TEXT), 'x', 'y') AS BLOB) WHERE id = 2",
        [],
    )
    .expect("damage payload");
    conn.execute("UPDATE records SET events = events + 1 WHERE id = 5", [])
        .expect("damage events");
    drop(conn);

    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(spool.stats().records, 6);
    let ids: Vec<i64> = spool
        .peek(100, 1 << 20)
        .await
        .expect("peek")
        .iter()
        .map(|r| r.id.0)
        .collect();
    assert_eq!(ids, [1, 3, 4, 6]);
    let stats = spool.stats();
    assert_eq!(
        (stats.records, stats.bytes, stats.quarantined),
        (4, 4 * 164, 2)
    );
    // Peeking past a quarantined head: the next good record is the oldest.
    spool.remove_through(RecordId(1)).await.expect("remove");
    assert_eq!(
        spool.peek(1, 1 << 20).await.expect("peek")[0].id,
        RecordId(3)
    );
    spool.close().await.expect("close");

    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(spool.stats().quarantined, 2, "the quarantine is kept");
    spool.close().await.expect("close");
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open db");
    let reasons: Vec<(i64, String, Vec<u8>)> = conn
        .prepare("SELECT id, reason, payload FROM quarantine ORDER BY id")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(reasons.len(), 2);
    assert_eq!(
        (reasons[0].0, reasons[0].1.as_str()),
        (2, "checksum mismatch")
    );
    assert_eq!(
        reasons[1].2,
        record(5, 100).payload,
        "the record is kept as it was"
    );
}

#[tokio::test]
async fn a_peek_whose_records_all_fail_their_checksum_reads_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    for i in 1..=5 {
        spool.append(record(i, 10)).await.expect("append");
    }
    spool.close().await.expect("close");
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).expect("open db");
    conn.execute("UPDATE records SET crc = crc + 1 WHERE id <= 3", [])
        .expect("damage");
    drop(conn);
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    let got = spool.peek(2, 1 << 20).await.expect("peek");
    assert_eq!(got.iter().map(|r| r.id.0).collect::<Vec<_>>(), [4, 5]);
    assert_eq!(spool.stats().quarantined, 3);
}

#[test]
fn oldest_age_is_measured_from_the_oldest_record() {
    let stats = SpoolStats {
        bytes: 0,
        records: 1,
        oldest_spooled_at_ms: Some(1_000),
        queued_bytes: 0,
        queued_records: 0,
        max_bytes: 1,
        appended: 0,
        commits: 0,
        drained_records: 0,
        drained_events: 0,
        quarantined: 0,
        rebuilds: 0,
    };
    let now = UNIX_EPOCH + Duration::from_millis(3_500);
    assert_eq!(stats.oldest_age(now), Some(Duration::from_millis(2_500)));
    assert_eq!(stats.oldest_age(UNIX_EPOCH), Some(Duration::ZERO));
    let empty = SpoolStats {
        oldest_spooled_at_ms: None,
        ..stats
    };
    assert_eq!(empty.oldest_age(now), None);
}

#[tokio::test]
async fn wait_for_records_returns_once_a_commit_added_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    let waiter = {
        let spool = spool.clone();
        tokio::spawn(async move { spool.wait_for_records().await })
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        !waiter.is_finished(),
        "an empty spool has nothing to wait for"
    );
    spool.append(record(1, 10)).await.expect("append");
    waiter.await.expect("woken");
    // Records held: returns at once.
    spool.wait_for_records().await;
}

#[tokio::test]
async fn a_drained_spool_hands_its_free_pages_back_to_the_filesystem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    let db = dir.path().join(DB_FILE);
    // 4 MiB of records, committed in a few groups.
    let appends: Vec<_> = (0..1000)
        .map(|i| {
            let spool = spool.clone();
            tokio::spawn(async move { spool.append(record(i, 4000)).await })
        })
        .collect();
    for a in appends {
        a.await.expect("join").expect("append");
    }
    // Draining half leaves more held than free: nothing is moved yet.
    spool.remove_through(RecordId(500)).await.expect("remove");
    spool.close().await.expect("close");
    let half = std::fs::metadata(&db).expect("db").len();
    assert!(half > 3 << 20, "{half}");

    let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    spool.remove_through(RecordId(1000)).await.expect("remove");
    // The pages are handed back in steps of 64 pages (in tests) after the removal
    // is answered, between requests: the file shrinks while the spool goes on.
    let peeked = spool.peek(1, 1).await.expect("peek");
    assert!(peeked.is_empty());
    let mut polls = 0;
    let empty = loop {
        let len = std::fs::metadata(&db).expect("db").len();
        if len < 1 << 20 {
            break len;
        }
        polls += 1;
        assert!(polls < 3000, "{len} bytes 30 s after the drain");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(empty < 1 << 20, "{empty} bytes after the drain");
    assert_eq!(
        spool.append(record(1, 10)).await.expect("append"),
        RecordId(1001)
    );
    assert_eq!(spool.peek(10, 1 << 20).await.expect("peek").len(), 1);
}

#[tokio::test]
async fn a_drainer_that_keeps_up_peeks_from_memory_without_the_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    for i in 0..3 {
        spool.append(record(i, 100)).await.expect("append");
    }
    // The thread is held: only the tail can answer.
    let gate = spool.gate();
    let first = spool
        .peek_after(RecordId(0), 2, 1 << 20)
        .await
        .expect("peek");
    assert_eq!(
        first,
        vec![
            SpooledRecord {
                id: RecordId(1),
                spooled_at_ms: first[0].spooled_at_ms,
                events: 1,
                payload: record(0, 100).payload
            },
            SpooledRecord {
                id: RecordId(2),
                spooled_at_ms: first[1].spooled_at_ms,
                events: 2,
                payload: record(1, 100).payload
            },
        ]
    );
    let next = spool
        .peek_after(RecordId(2), 10, 1 << 20)
        .await
        .expect("peek");
    assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), [RecordId(3)]);
    drop(gate);
    // Peeked from memory, still in the spool: a peek from the oldest reads them again.
    let again = spool.peek(10, 1 << 20).await.expect("peek");
    assert_eq!(
        again.iter().map(|r| r.id).collect::<Vec<_>>(),
        [RecordId(1), RecordId(2), RecordId(3)]
    );
    assert_eq!(again[..2], first[..]);
    assert_eq!(spool.stats().records, 3);
}
