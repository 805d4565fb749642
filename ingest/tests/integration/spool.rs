//! The spool against its real files and a real process: SIGKILL of a child
//! appending and draining flat out (every acknowledged record is there after a
//! reopen, every acknowledged removal is gone), the directory lock across
//! processes, and damage done to the files themselves: a WAL cut mid-commit or
//! with garbage after it, garbage after the database's last page, a truncated
//! database, a zeroed page, a flipped payload byte.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ingest::spool::{Record, RecordId, Spool, SpoolError, SpooledRecord, DB_FILE, WAL_FILE};

const CHILD_DIR_ENV: &str = "INGEST_SPOOL_CHILD_DIR";

/// The payload of the `i`-th record written by writer `w`: its identity, then
/// filler, `len` bytes in all.
fn payload(w: usize, i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("w{w:02}-i{i:08}-").into_bytes();
    p.resize(len.max(p.len()), b'.');
    p
}

async fn all_records(spool: &Spool) -> Vec<SpooledRecord> {
    spool.peek(usize::MAX, usize::MAX).await.expect("peek")
}

fn ids(records: &[SpooledRecord]) -> Vec<i64> {
    records.iter().map(|r| r.id.0).collect()
}

/// Child role (runs only when re-executed by a parent test): 16 writers append
/// flat out, a drainer removes what it peeks; every acknowledged append and
/// removal is printed once it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_child_appends_and_drains() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return;
    };
    let spool = Spool::open(&dir, 1 << 30).await.expect("open");
    // libtest printed "test <name> ... " without a newline.
    println!();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for w in 0..16usize {
        let (spool, tx) = (spool.clone(), tx.clone());
        tokio::spawn(async move {
            for i in 0.. {
                // 5-event and 50-event batch sizes, alternately.
                let len = if i % 2 == 0 { 600 } else { 6000 };
                let record = Record {
                    events: (w * 100 + i % 100) as u32,
                    payload: payload(w, i, len),
                };
                if let Ok(id) = spool.append(record).await {
                    let _ = tx.send(format!("ACK {id} {w} {i} {len}"));
                }
            }
        });
    }
    drop(tx);
    // 0: no drainer (the spool grows to thousands of records); else the most
    // records a peek takes.
    let drain: usize = std::env::var("INGEST_SPOOL_CHILD_DRAIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let drainer = spool.clone();
    tokio::spawn(async move {
        if drain == 0 {
            return;
        }
        loop {
            let batch = drainer.peek(drain, 64 << 20).await.expect("peek");
            match batch.last() {
                Some(last) => {
                    // Printed before the removal may happen (the parent allows these
                    // records to be gone), and after it is acknowledged (they must be).
                    println!("REMOVING {}", last.id);
                    drainer.remove_through(last.id).await.expect("remove");
                    println!("REMOVED {}", last.id);
                }
                None => tokio::task::yield_now().await,
            }
        }
    });
    while let Some(line) = rx.recv().await {
        println!("{line}");
    }
}

/// Child role: opens the spool, says so, and holds it until killed.
#[tokio::test]
async fn spool_child_holds_the_lock() {
    let Ok(dir) = std::env::var("INGEST_SPOOL_LOCK_CHILD_DIR") else {
        return;
    };
    let _spool = Spool::open(&dir, 1 << 20).await.expect("open");
    println!();
    println!("OPEN");
    std::future::pending::<()>().await;
}

/// Re-executes this test binary as `child` (the test's whole name,
/// `spool::<test>`) with `env`; its stdout lines come through the returned
/// channel.
fn spawn_child(child: &str, env: &[(&str, &std::ffi::OsStr)]) -> (Child, mpsc::Receiver<String>) {
    let mut process = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", child, "--nocapture", "--test-threads", "1"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = process.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (process, rx)
}

/// Waits for a child's line; the timeout only keeps a broken child from hanging
/// the suite (it is no measure of anything).
fn next_line(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(120))
        .expect("child went quiet")
}

#[tokio::test]
async fn acknowledged_records_survive_sigkill_and_acknowledged_removals_stay_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Kill after different numbers of acknowledgements, on the same spool: each
    // round opens what the previous SIGKILL left. Round 0 only appends (killed
    // with thousands of records spooled), round 1 drains in large removals, the
    // others in small ones, as a drainer keeping up does.
    for (round, (kill_after, drain)) in [
        (3000usize, "0"),
        (2000, "5000"),
        (400, "200"),
        (1500, "200"),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut child, lines) = spawn_child(
            "spool::spool_child_appends_and_drains",
            &[
                (CHILD_DIR_ENV, dir.path().as_os_str()),
                ("INGEST_SPOOL_CHILD_DRAIN", drain.as_ref()),
            ],
        );
        let mut acked: Vec<(i64, usize, usize, usize)> = Vec::new();
        let (mut removing_through, mut removed_through) = (0i64, 0i64);
        let mut record_line = |line: &str| {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["ACK", id, w, i, len] => acked.push((
                    id.parse().expect("id"),
                    w.parse().expect("w"),
                    i.parse().expect("i"),
                    len.parse().expect("len"),
                )),
                ["REMOVING", id] => {
                    removing_through = removing_through.max(id.parse().expect("id"));
                }
                ["REMOVED", id] => {
                    removed_through = removed_through.max(id.parse().expect("id"));
                }
                _ => {}
            }
        };
        let mut acks = 0;
        while acks < kill_after {
            let line = next_line(&lines);
            acks += usize::from(line.starts_with("ACK "));
            record_line(&line);
        }
        child.kill().expect("SIGKILL"); // std's kill() is SIGKILL on Unix
        child.wait().expect("wait");
        // Lines printed before the kill may still be in the pipe.
        while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
            record_line(&line);
        }

        let spool = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
        let held = all_records(&spool).await;
        let held_ids = ids(&held);
        assert!(
            held_ids.windows(2).all(|w| w[0] < w[1]),
            "round {round}: records out of order"
        );
        assert!(
            held_ids
                .first()
                .is_none_or(|&first| first > removed_through),
            "round {round}: a removal acknowledged through {removed_through} came back: {:?}",
            held_ids.first()
        );
        // Every acknowledged record is held unless an announced removal may have
        // taken it; and removal takes a prefix, so none is missing after the first
        // record held.
        let first = held_ids.first().copied().unwrap_or(i64::MAX);
        let by_id: HashMap<i64, &SpooledRecord> = held.iter().map(|r| (r.id.0, r)).collect();
        let mut missing = Vec::new();
        for &(id, w, i, len) in acked
            .iter()
            .filter(|a| a.0 >= first || a.0 > removing_through)
        {
            match by_id.get(&id) {
                Some(r) if r.payload == payload(w, i, len) => {}
                other => missing.push((id, other.map(|r| r.payload.len()))),
            }
        }
        assert!(
            missing.is_empty(),
            "round {round}: acknowledged but not held as written: {missing:?}; held {:?}..{:?}, \
             removals announced through {removing_through}, acknowledged through {removed_through}",
            held_ids.first(),
            held_ids.last(),
        );
        assert_eq!(spool.stats().quarantined, 0);
        assert!(spool.recovery().rebuilt.is_none());
        spool.close().await.expect("close");
    }
}

#[tokio::test]
async fn a_second_process_cannot_open_the_directory_until_the_first_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, lines) = spawn_child(
        "spool::spool_child_holds_the_lock",
        &[("INGEST_SPOOL_LOCK_CHILD_DIR", dir.path().as_os_str())],
    );
    while next_line(&lines) != "OPEN" {}
    match Spool::open(dir.path(), 1 << 20).await {
        Err(SpoolError::Locked { dir: d, holder }) => {
            assert_eq!(d, dir.path());
            assert_eq!(holder, Some(child.id()));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    Spool::open(dir.path(), 1 << 20)
        .await
        .expect("open once the holder is dead");
}

/// A spool in `dir` with `n` records of `len` bytes, appended one by one (one
/// commit each), still open.
async fn filled(dir: &Path, n: usize, len: usize) -> Spool {
    let spool = Spool::open(dir, 1 << 30).await.expect("open");
    for i in 1..=n {
        let id = spool
            .append(Record {
                events: 5,
                payload: payload(0, i, len),
            })
            .await
            .expect("append");
        assert_eq!(id, RecordId(i as i64));
    }
    spool
}

/// What a crash leaves: the database and its WAL as they are on disk between two
/// commits (the spool's thread is idle), copied to `to`.
fn crash_copy(from: &Path, to: &Path) {
    for name in [DB_FILE, WAL_FILE] {
        std::fs::copy(from.join(name), to.join(name)).expect("copy");
    }
}

fn append_garbage(path: &Path, bytes: usize) {
    let garbage: Vec<u8> = (0..bytes).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open")
        .write_all(&garbage)
        .expect("append");
}

fn truncate_by(path: &Path, bytes: u64) {
    let len = std::fs::metadata(path).expect("len").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(len - bytes)
        .expect("truncate");
}

fn assert_payloads(records: &[SpooledRecord], len: usize) {
    for r in records {
        assert_eq!(
            r.payload,
            payload(0, r.id.0 as usize, len),
            "record {}",
            r.id
        );
    }
}

#[tokio::test]
async fn a_wal_cut_mid_commit_loses_only_that_commit_and_is_cut_at_open() {
    let (live, crashed) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let spool = filled(live.path(), 20, 500).await;
    crash_copy(live.path(), crashed.path());
    let wal = crashed.path().join(WAL_FILE);
    let wal_len = std::fs::metadata(&wal).expect("wal").len();
    // The last commit's last frame, torn 100 bytes short (as a power loss during
    // its write would leave it; that append was never acknowledged).
    truncate_by(&wal, 100);

    let reopened = Spool::open(crashed.path(), 1 << 30).await.expect("open");
    let recovery = reopened.recovery().clone();
    let held = all_records(&reopened).await;
    assert_eq!(ids(&held), (1..=19).collect::<Vec<_>>());
    assert_payloads(&held, 500);
    // Every frame of the torn commit was cut (a commit is at least one frame).
    assert!(
        recovery.wal_bytes_cut >= 4096 + 24 - 100 && recovery.wal_bytes_cut < wal_len,
        "{recovery:?}"
    );
    assert_eq!((recovery.db_bytes_cut, recovery.rebuilt), (0, None));
    // The next append takes the lost commit's id: it was never acknowledged.
    assert_eq!(
        reopened.append(Record::default()).await.expect("append"),
        RecordId(20)
    );
    reopened.close().await.expect("close");
    let again = Spool::open(crashed.path(), 1 << 30).await.expect("reopen");
    assert_eq!(
        again.recovery(),
        &ingest::spool::Recovery::default(),
        "nothing left to cut"
    );
    spool.close().await.expect("close");
}

#[tokio::test]
async fn frames_of_an_earlier_wal_generation_are_stale_not_cut() {
    let (live, crashed) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    // Records of about a page each: the first ~1,000 pages of WAL end in SQLite's
    // auto-checkpoint, and the next commits write over the start of the file, so
    // the crash leaves the first generation's later frames behind the last commit.
    let wal = live.path().join(WAL_FILE);
    let spool = Spool::open(live.path(), 1 << 30).await.expect("open");
    let mut n = 0usize;
    let mut longest = 0u64;
    let mut first_salt = None;
    loop {
        n += 1;
        append_page(&spool, n).await;
        let len = std::fs::metadata(&wal).expect("wal").len();
        assert!(
            len >= longest,
            "the WAL file was cut back: {len} < {longest}"
        );
        longest = len;
        let salt = wal_salt(&wal);
        if *first_salt.get_or_insert(salt) != salt {
            break;
        }
        assert!(n < 5000, "the WAL never started over");
    }
    // A few commits into the new generation, far short of the old one's length.
    for _ in 0..5 {
        n += 1;
        append_page(&spool, n).await;
    }
    assert_eq!(std::fs::metadata(&wal).expect("wal").len(), longest);
    crash_copy(live.path(), crashed.path());
    let wal_len = std::fs::metadata(crashed.path().join(WAL_FILE))
        .expect("wal")
        .len();

    let reopened = Spool::open(crashed.path(), 1 << 30).await.expect("open");
    let recovery = reopened.recovery().clone();
    assert_eq!(recovery.wal_bytes_cut, 0, "{recovery:?}");
    assert_eq!(recovery.wal_stale_bytes % (4096 + 24), 0, "{recovery:?}");
    assert!(
        recovery.wal_stale_bytes > wal_len / 2 && recovery.wal_stale_bytes < wal_len,
        "{recovery:?} of {wal_len}"
    );
    assert_eq!((recovery.db_bytes_cut, recovery.rebuilt), (0, None));
    let held = all_records(&reopened).await;
    assert_eq!(ids(&held), (1..=n as i64).collect::<Vec<_>>());
    assert_payloads(&held, 3000);
    spool.close().await.expect("close");
}

/// Appends record `i`: 3,000 bytes, one leaf page of the spool's table.
async fn append_page(spool: &Spool, i: usize) {
    spool
        .append(Record {
            events: 1,
            payload: payload(0, i, 3000),
        })
        .await
        .expect("append");
}

/// The salt-1 of the WAL's header: SQLite adds one to it each time the WAL starts
/// over (sqlite.org/fileformat2.html §4.1).
fn wal_salt(wal: &Path) -> u32 {
    let mut header = [0u8; 20];
    std::fs::File::open(wal)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header))
        .expect("read the WAL's header");
    u32::from_be_bytes([header[16], header[17], header[18], header[19]])
}

#[tokio::test]
async fn garbage_after_the_wal_is_cut_and_every_record_kept() {
    let (live, crashed) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let spool = filled(live.path(), 20, 500).await;
    crash_copy(live.path(), crashed.path());
    append_garbage(&crashed.path().join(WAL_FILE), 5000);

    let reopened = Spool::open(crashed.path(), 1 << 30).await.expect("open");
    assert_eq!(reopened.recovery().wal_bytes_cut, 5000);
    let held = all_records(&reopened).await;
    assert_eq!(ids(&held), (1..=20).collect::<Vec<_>>());
    assert_payloads(&held, 500);
    spool.close().await.expect("close");
}

#[tokio::test]
async fn a_wal_of_garbage_only_is_cut_and_the_database_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    filled(dir.path(), 10, 300)
        .await
        .close()
        .await
        .expect("close");
    append_garbage(&dir.path().join(WAL_FILE), 70_000);

    let reopened = Spool::open(dir.path(), 1 << 30).await.expect("open");
    assert_eq!(reopened.recovery().wal_bytes_cut, 70_000);
    assert_eq!(
        ids(&all_records(&reopened).await),
        (1..=10).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn garbage_after_the_database_file_is_cut_and_every_record_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    filled(dir.path(), 30, 1000)
        .await
        .close()
        .await
        .expect("close");
    let db = dir.path().join(DB_FILE);
    let clean_len = std::fs::metadata(&db).expect("db").len();
    append_garbage(&db, 10_000);

    let reopened = Spool::open(dir.path(), 1 << 30).await.expect("open");
    assert_eq!(reopened.recovery().db_bytes_cut, 10_000);
    assert!(reopened.recovery().rebuilt.is_none());
    let held = all_records(&reopened).await;
    assert_eq!(ids(&held), (1..=30).collect::<Vec<_>>());
    assert_payloads(&held, 1000);
    reopened.close().await.expect("close");
    assert_eq!(std::fs::metadata(&db).expect("db").len(), clean_len);
    let again = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(again.recovery(), &ingest::spool::Recovery::default());
}

/// A closed spool of `n` records of 1000 bytes, appended 100 at a time; returns
/// each id's payload.
async fn closed_spool_of(dir: &Path, n: usize) -> HashMap<i64, Vec<u8>> {
    let spool = Spool::open(dir, 1 << 30).await.expect("open");
    let mut written = HashMap::new();
    for chunk in (1..=n).collect::<Vec<usize>>().chunks(100) {
        let appends = chunk.iter().map(|&i| {
            let spool = spool.clone();
            tokio::spawn(async move {
                let record = Record {
                    events: 5,
                    payload: payload(0, i, 1000),
                };
                (
                    spool.append(record.clone()).await.expect("append"),
                    record.payload,
                )
            })
        });
        for a in appends.collect::<Vec<_>>() {
            let (id, payload) = a.await.expect("join");
            written.insert(id.0, payload);
        }
    }
    spool.close().await.expect("close");
    written
}

fn assert_written(records: &[SpooledRecord], written: &HashMap<i64, Vec<u8>>) {
    for r in records {
        assert_eq!(Some(&r.payload), written.get(&r.id.0), "record {}", r.id);
    }
}

/// Cuts the last 40 % of a closed spool of `n` records and opens it: it opens,
/// what it holds is what was written, in order, every record is accounted for,
/// and the next open has nothing left to repair. Returns the records held.
async fn truncated_database_opens_and_drains(n: usize) -> Vec<SpooledRecord> {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = closed_spool_of(dir.path(), n).await;
    let db = dir.path().join(DB_FILE);
    truncate_by(&db, std::fs::metadata(&db).expect("db").len() * 2 / 5);

    let reopened = Spool::open(dir.path(), 1 << 30)
        .await
        .expect("open despite the damage");
    let rebuilt = reopened.recovery().rebuilt.clone().expect("rebuilt");
    assert!(rebuilt.moved_to.join(DB_FILE).exists(), "{rebuilt:?}");
    let held = all_records(&reopened).await;
    let held_ids = ids(&held);
    assert!(held_ids.windows(2).all(|w| w[0] < w[1]));
    assert_written(&held, &written);
    // Rows read from the page the cut went through may hold zeros where the file
    // ended: salvaged as they were, then caught by their checksum.
    let failed_checksum = rebuilt.salvaged - held.len() as u64;
    assert!(failed_checksum <= 4, "{rebuilt:?}, {} held", held.len());
    assert!(held.len() < n, "{rebuilt:?}");
    // Whatever could not be read is accounted for: as unreadable ids when the
    // highest id was readable, else as a tail of unknown length.
    match rebuilt.tail_lost_after {
        Some(after) => assert!(
            after.0 >= held_ids.last().copied().unwrap_or(0),
            "{rebuilt:?}"
        ),
        None => assert_eq!(
            rebuilt.salvaged + rebuilt.unreadable,
            n as u64,
            "{rebuilt:?}"
        ),
    }
    assert_eq!(
        reopened.stats().quarantined,
        rebuilt.unreadable + failed_checksum
    );
    // New ids do not reuse any id the damaged file may have held.
    let id = reopened.append(Record::default()).await.expect("append");
    assert!(id.0 > n as i64, "{id}");
    // Drained to the end, then opened again: nothing more to repair.
    reopened.remove_through(id).await.expect("remove");
    reopened.close().await.expect("close");
    let again = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert_eq!(again.recovery(), &ingest::spool::Recovery::default());
    assert!(all_records(&again).await.is_empty());
    held
}

#[tokio::test]
async fn a_truncated_database_is_rebuilt_from_the_records_still_reachable() {
    // 200 records: the table's root page points at its leaves directly, so the
    // leaves before the cut are all reachable.
    let held = truncated_database_opens_and_drains(200).await;
    assert!(held.len() >= 100, "{}", held.len());
    assert_eq!(ids(&held)[..100], (1..=100).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_database_truncated_through_its_tree_still_opens_and_reports_the_loss() {
    // 2000 records: the root's children are interior pages written late in the
    // file; the cut takes them, and with them the way to every leaf.
    truncated_database_opens_and_drains(2000).await;
}

#[tokio::test]
async fn a_zeroed_page_in_the_middle_is_rebuilt_around_and_the_rest_drained_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = closed_spool_of(dir.path(), 2000).await;
    let db = dir.path().join(DB_FILE);
    let mut bytes = std::fs::read(&db).expect("read");
    // The leaf page holding record 1000.
    let marker = &written[&1000];
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_slice())
        .expect("record 1000 in the file");
    let page = at / 4096;
    bytes[page * 4096..(page + 1) * 4096].fill(0);
    std::fs::write(&db, &bytes).expect("write");

    let reopened = Spool::open(dir.path(), 1 << 30)
        .await
        .expect("open despite the damage");
    let rebuilt = reopened.recovery().rebuilt.clone().expect("rebuilt");
    let held = all_records(&reopened).await;
    let held_ids = ids(&held);
    assert_written(&held, &written);
    assert!(held_ids.windows(2).all(|w| w[0] < w[1]));
    assert!(!held_ids.contains(&1000));
    assert_eq!(held.len() as u64, rebuilt.salvaged);
    assert_eq!(rebuilt.tail_lost_after, None);
    assert_eq!(rebuilt.salvaged + rebuilt.unreadable, 2000, "{rebuilt:?}");
    assert!(rebuilt.unreadable < 100, "one page's records: {rebuilt:?}");
    // Records on both sides of the damage are there.
    assert_eq!(held_ids.first(), Some(&1));
    assert_eq!(held_ids.last(), Some(&2000));
    assert_eq!(reopened.stats().quarantined, rebuilt.unreadable);
}

#[tokio::test]
async fn a_flipped_payload_byte_in_the_file_is_quarantined_and_the_rest_drained() {
    let dir = tempfile::tempdir().expect("tempdir");
    filled(dir.path(), 20, 300)
        .await
        .close()
        .await
        .expect("close");
    let db = dir.path().join(DB_FILE);
    let mut bytes = std::fs::read(&db).expect("read");
    // Every copy of record 7 (b-tree page splits leave older copies on free pages).
    let marker = payload(0, 7, 300);
    let copies: Vec<usize> = (0..bytes.len() - marker.len())
        .filter(|&at| bytes[at..at + marker.len()] == marker[..])
        .collect();
    assert!(!copies.is_empty(), "record 7 in the file");
    for at in copies {
        bytes[at + 100] ^= 0x01;
    }
    std::fs::write(&db, &bytes).expect("write");

    let reopened = Spool::open(dir.path(), 1 << 30).await.expect("open");
    assert!(
        reopened.recovery().rebuilt.is_none(),
        "SQLite sees nothing wrong"
    );
    let held = all_records(&reopened).await;
    assert_eq!(ids(&held), (1..=20).filter(|&i| i != 7).collect::<Vec<_>>());
    assert_payloads(&held, 300);
    assert_eq!(reopened.stats().quarantined, 1);
    assert_eq!(reopened.stats().records, 19);
}

#[tokio::test]
async fn a_database_of_garbage_is_moved_aside_and_the_spool_starts_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    filled(dir.path(), 5, 100)
        .await
        .close()
        .await
        .expect("close");
    let db = dir.path().join(DB_FILE);
    let len = std::fs::metadata(&db).expect("db").len() as usize;
    std::fs::write(&db, vec![0xA5u8; len]).expect("overwrite");

    let reopened = Spool::open(dir.path(), 1 << 30)
        .await
        .expect("open despite the damage");
    let rebuilt = reopened.recovery().rebuilt.clone().expect("rebuilt");
    assert_eq!(rebuilt.salvaged, 0);
    assert!(rebuilt.moved_to.join(DB_FILE).exists());
    assert!(all_records(&reopened).await.is_empty());
    reopened.append(Record::default()).await.expect("append");
    reopened.close().await.expect("close");
    let again = Spool::open(dir.path(), 1 << 30).await.expect("reopen");
    assert!(
        again.recovery().rebuilt.is_none(),
        "no crash loop: repaired once"
    );
    assert_eq!(all_records(&again).await.len(), 1);
}

#[tokio::test]
async fn concurrent_appenders_share_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    let writers: Vec<_> = (0..32)
        .map(|w| {
            let spool = spool.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    spool
                        .append(Record {
                            events: 5,
                            payload: payload(w, i, 600),
                        })
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("join");
    }
    let stats = spool.stats();
    assert_eq!(stats.appended, 1600);
    // 32 appenders each waiting for its commit: a commit takes every append
    // queued meanwhile, so there are far fewer commits than appends.
    assert!(stats.commits * 2 <= stats.appended, "{stats:?}");
    let held = all_records(&spool).await;
    assert_eq!(ids(&held), (1..=1600).collect::<Vec<_>>());
}

#[tokio::test]
async fn damage_met_while_running_is_rebuilt_in_place_and_the_rest_drained() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 27 MB: far more than SQLite's page cache (2 MB), so the pages a peek reads
    // first come from the file, not from memory.
    let written = closed_spool_of(dir.path(), 20_000).await;
    let spool = Spool::open(dir.path(), 1 << 30).await.expect("open");
    assert!(spool.recovery().rebuilt.is_none());
    let db = dir.path().join(DB_FILE);
    let mut bytes = std::fs::read(&db).expect("read");
    let marker = &written[&100];
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_slice())
        .expect("record 100 in the file");
    let page = at / 4096;
    bytes[page * 4096..(page + 1) * 4096].fill(0);
    std::fs::write(&db, &bytes).expect("write");

    // The peek that meets the damage fails (nothing was acknowledged by it); the
    // spool's thread rebuilds the file and goes on.
    let met = spool.peek(usize::MAX, usize::MAX).await;
    assert!(matches!(met, Err(SpoolError::Store(_))), "{met:?}");
    let held = all_records(&spool).await;
    let stats = spool.stats();
    assert_eq!(stats.rebuilds, 1);
    assert_written(&held, &written);
    assert!(!ids(&held).contains(&100));
    assert_eq!(held.len() as u64 + stats.quarantined, 20_000, "{stats:?}");
    assert!(stats.quarantined < 50, "one page's records: {stats:?}");
    assert_eq!(stats.records, held.len() as u64);
    // It takes appends and removals as before.
    let id = spool.append(Record::default()).await.expect("append");
    assert!(id.0 > 20_000);
    spool.remove_through(id).await.expect("remove");
    assert!(all_records(&spool).await.is_empty());
}
