//! A downstream-style test (public API only): a run exported with `keel
//! export` (examples/weather_tools.json: parallel tool calls with
//! different delays, an approval, three turns) replays against the
//! current code, and a change of composition is reported at its first
//! diverging seq.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_engine::{Engine, EngineLimits};
use keel_message::RunId;
use keel_testkit::replay::{Recording, compare, replay};

/// The exported file: a header line, then the run's events.
const EXPORT: &str = include_str!("fixtures/replay/weather_export.jsonl");

fn recording() -> Recording {
    Recording::from_lines(EXPORT.lines().skip(1)).unwrap()
}

async fn replay_with(limits: EngineLimits) -> Result<(), keel_testkit::replay::Divergence> {
    let recording = recording();
    let request = recording
        .request(RunId::parse("run_downstream").unwrap())
        .unwrap()
        .limits(limits);
    // The composition: the metadata namespaces the run recorded.
    let engine = Engine::builder()
        .allow_metadata(recording.metadata_allowlist().unwrap())
        .build()
        .unwrap();
    let replayed = replay(&engine, request, &recording).await.unwrap();
    compare(recording.events(), &replayed)
}

#[tokio::test(start_paused = true)]
async fn an_exported_run_replays_identical_against_the_current_code() {
    assert_eq!(replay_with(EngineLimits::default()).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn running_tools_one_at_a_time_diverges_where_the_second_call_started() {
    let divergence = replay_with(EngineLimits {
        max_parallel_tools: 1,
        ..EngineLimits::default()
    })
    .await
    .unwrap_err();
    assert_eq!(divergence.seq, 12, "{divergence}");
    let recorded = divergence.recorded.unwrap();
    let replayed = divergence.replayed.unwrap();
    assert!(
        recorded.contains(r#""kind":"tool.started""#) && recorded.contains(r#""c2""#),
        "{recorded}"
    );
    assert!(
        replayed.contains(r#""kind":"tool.completed""#) && replayed.contains(r#""c1""#),
        "{replayed}"
    );
}
