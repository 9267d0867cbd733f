//! `keel replay RUN_ID [--scenario FILE]`: re-runs a stored run with the
//! current code and compares the logs.
//!
//! The run's model calls, tool results and approvals are served from its
//! stored events (`keel_testkit::replay`), so nothing reaches a network
//! and no tool runs. The replayed run lives in memory under the recorded
//! run's id (nothing is stored: the journal is only read), so its lines
//! differ from the recorded ones only where the code under test behaves
//! differently (and in `ts`, which the comparison ignores).

use crate::args::ReplayArgs;
use crate::commands::history::all_lines;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use keel_engine::{Engine, EngineLimits};
use keel_message::RunId;
use keel_observers::StoreReader;
use keel_observers::conversation;
use keel_scenario::file::{self as scenario, Scenario};
use keel_testkit::replay::{Recording, ReplayTools, compare, replay as replay_run};

/// Runs `keel replay`; returns the exit code (0 identical, 1 diverged).
pub fn replay(args: ReplayArgs) -> Result<i32, CliError> {
    let composition = match &args.scenario {
        Some(file) => Some(
            scenario::load(file)
                .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?,
        ),
        None => None,
    };
    let reader = StoreReader::open(&args.db.db)?;
    if reader.run_status(&args.run_id)?.is_none() {
        return Err(CliError::bad_input(format!(
            "unknown run {} in {} (see `keel runs`)",
            args.run_id,
            reader.location()
        )));
    }
    let lines = all_lines(&reader, &args.run_id, 0)?;
    let recording = Recording::from_lines(lines.iter().map(String::as_str))
        .map_err(|e| CliError::bad_input(format!("run {}: {e}", args.run_id)))?;
    let inherited = inherited_history(&reader, &recording)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let replayed = rt.block_on(replay_with(&recording, inherited, composition.as_ref()))?;
    match compare(recording.events(), &replayed) {
        Ok(()) => {
            println!("identical");
            Ok(EXIT_OK)
        }
        Err(divergence) => {
            println!("{divergence}");
            Ok(EXIT_FAILED)
        }
    }
}

/// The history a continued run inherits by reference, rebuilt from the
/// journal and checked against the recorded reference.
fn inherited_history(
    reader: &StoreReader,
    recording: &Recording,
) -> Result<Vec<keel_message::Message>, CliError> {
    let Some(reference) = recording.input_reference() else {
        return Ok(Vec::new());
    };
    let rebuilt =
        conversation::rebuild(reader, &reference.run_id, &keel_message::Limits::default())
            .map_err(|e| CliError::bad_input(format!("run {}: {e}", recording.run_id())))?;
    if rebuilt.reference.digest != reference.digest
        || rebuilt.reference.last_seq != reference.last_seq
    {
        return Err(CliError::bad_input(format!(
            "run {}: the history it inherits from run {} no longer matches its recorded reference (rule replay.input_reference)",
            recording.run_id(),
            reference.run_id
        )));
    }
    Ok(rebuilt.history)
}

/// Replays under the recorded run id, with the scenario's composition.
async fn replay_with(
    recording: &Recording,
    inherited: Vec<keel_message::Message>,
    composition: Option<&Scenario>,
) -> Result<Vec<keel_eventlog::Event>, CliError> {
    let mut tools = ReplayTools::new(recording);
    let mut limits = EngineLimits::default();
    let recorded_namespaces = recording
        .metadata_allowlist()
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    let mut builder = Engine::builder().allow_metadata(recorded_namespaces);
    if let Some(scenario) = composition {
        limits = scenario.limits.clone();
        builder = builder.allow_metadata(scenario.allow_metadata.clone());
        for entry in &scenario.tools {
            let name = keel_message::ToolName::parse(entry.name())
                .map_err(|e| CliError::bad_input(e.to_string()))?;
            let policy = entry.policy();
            tools = tools.with_policy(name, policy.clone());
        }
    }
    let engine = builder
        .limits(limits.clone())
        .build()
        .map_err(|e| CliError::bad_input(e.to_string()))?;
    let run_id: RunId = recording.run_id().clone();
    let request = recording
        .request_with(run_id, inherited, tools)
        .map_err(|e| CliError::bad_input(e.to_string()))?
        .limits(limits);
    replay_run(&engine, request, recording)
        .await
        .map_err(|e| CliError::failure(e.to_string()))
}
