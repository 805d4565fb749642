//! The group-commit writer in front of real sinks: many concurrent submitters,
//! every acknowledged row readable afterwards, failures reported to submitters.

use crate::common;

use std::sync::Arc;

use common::{session_rows, TestSink};
use ingest::{BatchWriter, WriterConfig};

async fn concurrent_submitters_are_all_stored(t: TestSink) {
    let writer = BatchWriter::spawn(t.sink.clone(), WriterConfig::default());
    let mut tasks = Vec::new();
    for i in 0..200 {
        let h = writer.handle();
        tasks.push(tokio::spawn(async move {
            h.submit(session_rows("u1", &format!("player-{i:03}"), i, 50))
                .await
        }));
    }
    for task in tasks {
        task.await.expect("join").expect("acknowledged");
    }
    writer.shutdown().await;
    let sessions = t.store.sessions("u1", 500).await.expect("sessions");
    assert_eq!(sessions.len(), 200);
    assert!(sessions.iter().all(|s| s.event_count == 50));
    t.finish().await;
}

#[tokio::test]
async fn sqlite_concurrent_submitters_are_all_stored() {
    concurrent_submitters_are_all_stored(common::sqlite().await).await;
}

#[tokio::test]
async fn clickhouse_concurrent_submitters_are_all_stored() {
    concurrent_submitters_are_all_stored(common::clickhouse().await).await;
}

#[tokio::test]
async fn clickhouse_failure_is_reported_and_nothing_acknowledged_is_missing() {
    let config = common::clickhouse_config();
    let sink = Arc::new(
        ingest::ClickHouseSink::connect(&config)
            .await
            .expect("connect"),
    );
    let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
    let h = writer.handle();
    h.submit(session_rows("u1", "before", 0, 10))
        .await
        .expect("stored");
    sink.client()
        .query("RENAME TABLE telemetry_events TO telemetry_events_away")
        .execute()
        .await
        .expect("rename");
    let err = h
        .submit(session_rows("u1", "during", 0, 10))
        .await
        .expect_err("table gone");
    assert!(!err.is_retryable(), "{err}");
    sink.client()
        .query("RENAME TABLE telemetry_events_away TO telemetry_events")
        .execute()
        .await
        .expect("rename back");
    h.submit(session_rows("u1", "after", 0, 10))
        .await
        .expect("stored again");
    writer.shutdown().await;
    let ids: Vec<String> = analytics::Store::clickhouse(sink.client().clone())
        .sessions("u1", 10)
        .await
        .expect("s")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"before".to_owned()) && ids.contains(&"after".to_owned()));
    let _ = sink
        .client()
        .query(&format!("DROP DATABASE {}", config.database))
        .execute()
        .await;
}
