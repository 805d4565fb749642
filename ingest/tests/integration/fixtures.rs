//! Golden wire fixtures (`ingest/fixtures/`), shared with the SDK's tests: every
//! valid body is accepted, every invalid one gets exactly its expected 400 body.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use ingest::{parse_batch, EventType, Payload};
use serde_json::Value;

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(kind)
}

fn json_files(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(fixture_dir(kind))
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_valid_fixture_is_accepted() {
    let files = json_files("valid");
    assert!(
        files.len() >= 5,
        "expected valid fixtures, found {}",
        files.len()
    );
    for path in files {
        let mut bytes = fs::read(&path).expect("read");
        if let Err(e) = parse_batch(&mut bytes) {
            panic!("{} rejected: {}", path.display(), e.to_json());
        }
    }
}

#[test]
fn all_event_types_fixture_has_each_type_with_every_field() {
    let mut bytes = fs::read(fixture_dir("valid").join("all-event-types.json")).expect("read");
    let batch = parse_batch(&mut bytes).expect("valid");
    let types: Vec<EventType> = batch.events.iter().map(|e| e.event_type()).collect();
    assert_eq!(types, EventType::ALL);
    // Stored payloads keep every contract field of the fixture.
    let raw: Value = serde_json::from_slice(
        &fs::read(fixture_dir("valid").join("all-event-types.json")).expect("read"),
    )
    .expect("json");
    for (e, raw_event) in batch
        .events
        .iter()
        .zip(raw["events"].as_array().expect("array"))
    {
        let stored: Value = serde_json::from_str(&e.payload.to_json()).expect("json");
        assert_eq!(&stored, &raw_event["payload"]);
    }
}

#[test]
fn sdk_020_fixture_exposes_its_context_and_stores_the_optional_fields() {
    let path = fixture_dir("valid").join("sdk-0.2.0-full.json");
    let raw: Value = serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    let mut bytes = fs::read(&path).expect("read");
    let batch = parse_batch(&mut bytes).expect("valid");

    let ctx = batch.context.as_ref().expect("context");
    let want = &raw["context"];
    assert_eq!(ctx.sdk.as_deref(), Some("@service/player-sdk@0.2.0"));
    assert_eq!(ctx.player.as_deref(), want["player"].as_str());
    assert_eq!(ctx.content_id.as_deref(), want["contentId"].as_str());
    assert_eq!(ctx.src.as_deref(), want["src"].as_str());
    let tags: BTreeMap<String, String> = want["tags"]
        .as_object()
        .expect("tags")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_owned()))
        .collect();
    assert_eq!(ctx.tags, tags);

    let mut types: Vec<EventType> = batch.events.iter().map(|e| e.event_type()).collect();
    types.sort();
    types.dedup();
    assert_eq!(types, EventType::ALL);
    // Stored payloads keep every field of the fixture, the optional ones included.
    for (e, raw_event) in batch
        .events
        .iter()
        .zip(raw["events"].as_array().expect("array"))
    {
        let stored: Value = serde_json::from_str(&e.payload.to_json()).expect("json");
        assert_eq!(&stored, &raw_event["payload"]);
    }
    assert!(batch.events.iter().any(|e| matches!(
        &e.payload,
        Payload::QualityChange { from, width: Some(_), height: Some(_), .. } if from.is_empty()
    )));
    assert!(batch.events.iter().any(|e| matches!(
        e.payload,
        Payload::PlaybackStart {
            startup_ms: Some(_),
            ..
        }
    )));
}

#[test]
fn a_0_1_0_fixture_has_no_context() {
    let mut bytes = fs::read(fixture_dir("valid").join("all-event-types.json")).expect("read");
    assert_eq!(parse_batch(&mut bytes).expect("valid").context, None);
}

#[test]
fn every_invalid_fixture_gets_its_expected_400_body() {
    let files = json_files("invalid");
    assert!(
        files.len() >= 40,
        "expected invalid fixtures, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in files {
        let fixture: Value = serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
        assert_eq!(fixture["expected"]["status"], 400, "{}", path.display());
        let mut body: Vec<u8> = if fixture["raw"] == Value::Bool(true) {
            fixture["body"]
                .as_str()
                .expect("raw body is a string")
                .as_bytes()
                .to_vec()
        } else {
            serde_json::to_vec(&fixture["body"]).expect("serialize")
        };
        match parse_batch(&mut body) {
            Ok(_) => failures.push(format!("{}: accepted", path.display())),
            Err(e) => {
                if e.to_json() != fixture["expected"]["body"] {
                    failures.push(format!(
                        "{}:\n  expected {}\n  got      {}",
                        path.display(),
                        fixture["expected"]["body"],
                        e.to_json()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
