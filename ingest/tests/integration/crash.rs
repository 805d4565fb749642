//! SIGKILL durability of the embedded sink: a child process writes batches through
//! the group-commit writer and prints each acknowledged one; the parent kills it
//! with SIGKILL mid-way, reopens the database and finds every acknowledged batch.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingest::{BatchWriter, Durability, SqliteOptions, SqliteSink, WriterConfig};

const CHILD_ENV: &str = "INGEST_CRASH_CHILD_DIR";

/// Child role: runs only when re-executed by the parent test.
#[tokio::test]
async fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let durability = match std::env::var("INGEST_CRASH_DURABILITY").as_deref() {
        Ok("normal") => Durability::Normal,
        _ => Durability::Full,
    };
    let sink =
        SqliteSink::open_in_dir_with(std::path::Path::new(&dir), SqliteOptions { durability })
            .await
            .expect("open");
    let writer = BatchWriter::spawn(Arc::new(sink), WriterConfig::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    for w in 0..32usize {
        let h = writer.handle();
        let tx = tx.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let id = w * 1_000_000 + i;
                let rows = common::session_rows("crash", &format!("b{id}"), 0, 50);
                if h.submit(rows).await.is_ok() {
                    let _ = tx.send(id);
                }
            }
        });
    }
    drop(tx);
    // Print acknowledgements as they come; the parent kills us at some point.
    while let Some(id) = rx.recv().await {
        println!("ACK {id}");
    }
}

async fn survives_sigkill(durability: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "crash::crash_child_writer",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, dir.path())
        .env("INGEST_CRASH_DURABILITY", durability)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                acked.push(id.trim().to_owned());
            }
        }
        acked
    });
    // Let it run under load for a while, then SIGKILL it mid-write.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("SIGKILL"); // std's kill() sends SIGKILL on Unix
    let _ = child.wait();
    let acked = reader.join().expect("reader");
    assert!(
        acked.len() > 50,
        "child acknowledged too little: {}",
        acked.len()
    );

    let sink = SqliteSink::open_in_dir(dir.path()).await.expect("reopen");
    let store = analytics::Store::sqlite(sink);
    let mut missing = Vec::new();
    for id in &acked {
        let n = store
            .session_events("crash", &format!("b{id}"))
            .await
            .expect("read")
            .len();
        if n != 50 {
            missing.push((id.clone(), n));
        }
    }
    assert!(
        missing.is_empty(),
        "acknowledged but not stored: {missing:?}"
    );
}

#[tokio::test]
async fn sqlite_full_acknowledged_batches_survive_sigkill() {
    survives_sigkill("full").await;
}

#[tokio::test]
async fn sqlite_normal_acknowledged_batches_survive_sigkill() {
    survives_sigkill("normal").await;
}
