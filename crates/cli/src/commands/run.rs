//! `keel run SCENARIO`: one agent run, journaled, shown live.

use crate::approval::Approver;
use crate::args::RunArgs;
use crate::error::{CliError, EXIT_CANCELLED, EXIT_FAILED, EXIT_OK};
use crate::render::Transcript;
use crate::scenario::{self, ProviderSpec, Scenario, ToolEntry};
use crate::screen::Screen;
use keel_engine::{Engine, RunCanceller, RunOutcome, RunRequest, Tool};
use keel_eventlog::{SubscriptionBounds, SubscriptionError};
use keel_message::RunId;
use keel_observers::{JetStreamObserver, JournalConfig, RequiredObserver, SqliteJournal};
use keel_providers::{
    ANTHROPIC_BASE_URL, Anthropic, AnthropicConfig, ApiKey, OpenAiCompatible, OpenAiConfig,
};
use keel_stream::ModelProvider;
use keel_testkit::{ScriptedProvider, ScriptedTool};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider name the scenario's provider is registered under.
const PROVIDER: &str = "scenario";

/// Runs `keel run` on a runtime of its own; returns the exit code.
pub fn run(args: RunArgs) -> Result<i32, CliError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("keel-run")
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    let result = rt.block_on(run_async(args));
    // A prompt thread may still be blocked on stdin; do not wait for it.
    rt.shutdown_background();
    result
}

/// Ctrl-C handling: the first SIGINT cancels the run (once it exists),
/// the second exits at once with 130.
#[derive(Clone, Default)]
struct Interrupts(Arc<Mutex<InterruptState>>);

#[derive(Default)]
struct InterruptState {
    count: u32,
    canceller: Option<RunCanceller>,
}

impl Interrupts {
    /// Installs the handler. Signals that arrive before the run starts are
    /// remembered and cancel it as soon as it does.
    fn install() -> Result<Interrupts, CliError> {
        let interrupts = Interrupts::default();
        let state = interrupts.clone();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut sigint = signal(SignalKind::interrupt()).map_err(|e| {
                CliError::failure(format!("cannot install the SIGINT handler: {e}"))
            })?;
            tokio::spawn(async move {
                while sigint.recv().await.is_some() {
                    state.interrupted();
                }
            });
        }
        #[cfg(not(unix))]
        {
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    state.interrupted();
                }
            });
        }
        Ok(interrupts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InterruptState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn interrupted(&self) {
        let mut state = self.lock();
        state.count += 1;
        if state.count == 1 {
            if let Some(c) = &state.canceller {
                c.cancel();
            }
            eprintln!("\nkeel: cancelling the run (press Ctrl-C again to exit at once)");
        } else {
            // The journal is WAL and transactional: what it committed
            // stays, as a contiguous prefix of the run.
            eprintln!("keel: exiting at once");
            std::process::exit(EXIT_CANCELLED);
        }
    }

    fn set_canceller(&self, canceller: RunCanceller) {
        let mut state = self.lock();
        if state.count > 0 {
            canceller.cancel();
        }
        state.canceller = Some(canceller);
    }
}

/// The scenario's provider: scripted, or a network adapter whose key is read
/// from the named environment variable (never printed).
pub(crate) fn build_provider(
    spec: &ProviderSpec,
    file: &Path,
) -> Result<Arc<dyn ModelProvider>, CliError> {
    let (kind, base_url, api_key_env) = match spec {
        ProviderSpec::Scripted { calls } => {
            return Ok(Arc::new(ScriptedProvider::new(calls.clone())));
        }
        ProviderSpec::Network {
            kind,
            base_url,
            api_key_env,
        } => (*kind, base_url, api_key_env),
    };
    let bad = |what: String| CliError::bad_input(format!("{}: provider: {what}", file.display()));
    let key = ApiKey::from_env(api_key_env).map_err(|e| bad(e.to_string()))?;
    let provider: Arc<dyn ModelProvider> = match kind {
        "anthropic" => Arc::new(
            Anthropic::new(AnthropicConfig::new(
                base_url
                    .clone()
                    .unwrap_or_else(|| ANTHROPIC_BASE_URL.to_owned()),
                Some(key),
            ))
            .map_err(|e| bad(e.to_string()))?,
        ),
        _ => Arc::new(
            OpenAiCompatible::new(OpenAiConfig::new(
                base_url.clone().unwrap_or_default(),
                Some(key),
            ))
            .map_err(|e| bad(e.to_string()))?,
        ),
    };
    Ok(provider)
}

async fn run_async(args: RunArgs) -> Result<i32, CliError> {
    let interrupts = Interrupts::install()?;
    let file = args.scenario.as_path();
    let scenario = scenario::load(file).map_err(|e| CliError::bad_input(e.to_string()))?;
    // Built before the database is opened: a bad provider is bad input.
    let provider = build_provider(&scenario.provider, file)?;
    let files = match &args.files {
        Some(dir) => Some(files_dir(dir)?),
        None => None,
    };
    let tools = build_tools(&scenario, file, files.as_deref())?;
    let db = args.db.db.clone();
    let journal = Arc::new(SqliteJournal::open(&db, JournalConfig::default())?);
    let run_id = match &scenario.run_id {
        Some(id) => id.clone(),
        None => new_run_id()?,
    };
    if journal.reader()?.run_status(run_id.as_str())?.is_some() {
        return Err(CliError::bad_input(format!(
            "{}: run {run_id} is already stored in {}; give the scenario another run_id, or leave it out to generate one",
            file.display(),
            db.display()
        )));
    }

    // `--nats`: the second required observer, after the journal, so every
    // event is committed locally and then acknowledged by JetStream.
    let jetstream = match &args.nats {
        Some(url) => Some(Arc::new(JetStreamObserver::new(
            crate::jetstream::connect(url).await?,
        ))),
        None => None,
    };

    let json = args.json;
    let screen = Screen::new(!json && std::io::stderr().is_terminal());
    let mut builder = Engine::builder()
        .provider(PROVIDER, provider)
        .required_observer(Arc::clone(&journal) as Arc<dyn RequiredObserver>)
        .allow_metadata(scenario.allow_metadata.clone())
        .limits(scenario.limits.clone())
        .interaction_handler(Approver::new(args.approve, screen.clone()));
    if let Some(observer) = jetstream {
        builder = builder.required_observer(observer as Arc<dyn RequiredObserver>);
    }
    for tool in tools {
        builder = builder.tool(tool);
    }
    let engine = builder
        .build()
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    let handle = engine
        .start(RunRequest {
            run_id: run_id.clone(),
            provider: PROVIDER.to_owned(),
            model: scenario.model.clone(),
            history: scenario.messages.clone(),
        })
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    let bounds = SubscriptionBounds {
        max_events: usize::MAX,
        max_bytes: usize::MAX,
    };
    let log = handle.log().clone();
    let mut subscription = handle
        .subscribe_with(0, bounds)
        .map_err(|e| CliError::failure(format!("cannot follow the run: {e}")))?;
    interrupts.set_canceller(handle.canceller());
    let joined = tokio::spawn(handle.join());

    let spinner = {
        let screen = screen.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(90));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                screen.tick();
            }
        })
    };
    let color = !json
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let mut transcript = Transcript::new(color)
        .partial_restart(scenario.limits.retry.partial == keel_engine::PartialRetry::Restart);
    if !json {
        let shown: Vec<(&str, String)> = scenario
            .messages
            .iter()
            .map(|m| (m.role().as_str(), m.joined_text()))
            .collect();
        let prelude = transcript.prelude(shown.iter().map(|(r, t)| (*r, t.as_str())));
        screen.print(&prelude, None, true);
    }
    loop {
        match subscription.recv().await {
            Some(Ok(event)) => {
                if json {
                    let mut line = String::with_capacity(event.line().len() + 1);
                    line.push_str(event.line());
                    line.push('\n');
                    screen.print(&line, None, true);
                } else {
                    let text = transcript.render(&event);
                    screen.print(&text, transcript.waiting(), transcript.at_line_start());
                }
            }
            Some(Err(SubscriptionError::SlowConsumer {
                recovery_cursor, ..
            })) => match log.subscribe(recovery_cursor, bounds) {
                Ok(s) => subscription = s,
                Err(e) => {
                    screen.note(&format!("keel: the live view stopped: {e}"));
                    break;
                }
            },
            Some(Err(e)) => {
                screen.note(&format!("keel: the live view stopped: {e}"));
                break;
            }
            None => break,
        }
    }
    let outcome = joined
        .await
        .map_err(|e| CliError::failure(format!("the run task ended abnormally: {e}")))?;
    spinner.abort();
    screen.finish();

    let shutdown = engine.shutdown(Duration::from_secs(5)).await;
    if shutdown.runs_abandoned > 0 {
        screen.note("keel: the run did not finish closing within 5 s");
    }
    drop(engine);
    close_journal(journal, &screen).await;

    let code = match &outcome {
        RunOutcome::Completed { .. } => EXIT_OK,
        RunOutcome::Failed { cause } => {
            if json {
                screen.note(&format!("keel: run {run_id} failed: {cause}"));
            }
            EXIT_FAILED
        }
        RunOutcome::Cancelled => EXIT_CANCELLED,
    };
    if !json {
        let hint = format!(
            "  run {run_id} is stored in {} · replay it with: {} events {run_id}{}",
            db.display(),
            program(),
            db_flag(&db)
        );
        let hint = if color {
            format!("\x1b[2m{hint}\x1b[0m\n")
        } else {
            format!("{hint}\n")
        };
        screen.print(&hint, None, true);
    }
    Ok(code)
}

/// How this binary was invoked (`target/release/keel` under `cargo run`),
/// so the hint can be pasted as is; `keel` when it came from `PATH`.
fn program() -> String {
    match std::env::args().next() {
        Some(arg0) if arg0.contains(std::path::MAIN_SEPARATOR) => arg0,
        _ => "keel".to_owned(),
    }
}

/// `--db PATH` when the path is not what `keel events` would use anyway.
fn db_flag(db: &Path) -> String {
    let default =
        std::env::var_os("KEEL_DB").map_or_else(|| PathBuf::from("keel.db"), PathBuf::from);
    if db == default {
        String::new()
    } else {
        format!(" --db {}", db.display())
    }
}

/// Drains and closes the journal (every acknowledged event is already
/// committed; this checkpoints the WAL).
async fn close_journal(journal: Arc<SqliteJournal>, screen: &Screen) {
    match Arc::try_unwrap(journal) {
        Ok(journal) => match tokio::task::spawn_blocking(move || journal.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => screen.note(&format!("keel: closing the journal: {e}")),
            Err(e) => screen.note(&format!("keel: closing the journal: {e}")),
        },
        // Someone still holds it (should not happen); dropping the last
        // reference drains and closes it the same way.
        Err(journal) => drop(journal),
    }
}

/// The canonical `--files` directory.
fn files_dir(dir: &Path) -> Result<PathBuf, CliError> {
    let canonical = std::fs::canonicalize(dir)
        .map_err(|e| CliError::bad_input(format!("--files {}: {e}", dir.display())))?;
    if !canonical.is_dir() {
        return Err(CliError::bad_input(format!(
            "--files {}: not a directory",
            dir.display()
        )));
    }
    Ok(canonical)
}

fn build_tools(
    scenario: &Scenario,
    file: &Path,
    files: Option<&Path>,
) -> Result<Vec<Arc<dyn Tool>>, CliError> {
    scenario_tools(scenario, files).map_err(|(index, e)| {
        CliError::bad_input(format!("{}: at tools[{index}]: {e}", file.display()))
    })
}

/// The scenario's tools (scripted, and built-ins with `read_file` confined
/// to `files`); a built-in that cannot be built is reported with its index
/// in `tools`. Shared by `keel run` and `keel serve`.
pub(crate) fn scenario_tools(
    scenario: &Scenario,
    files: Option<&Path>,
) -> Result<Vec<Arc<dyn Tool>>, (usize, String)> {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(scenario.tools.len());
    for entry in &scenario.tools {
        match entry {
            ToolEntry::Scripted {
                definition,
                script,
                policy,
            } => tools.push(Arc::new(
                ScriptedTool::new(definition.clone(), script.clone()).with_policy(policy.clone()),
            )),
            ToolEntry::Builtin {
                builtin,
                policy,
                index,
            } => tools.push(
                builtin
                    .tool(policy.clone(), files)
                    .map_err(|e| (*index, e.to_string()))?,
            ),
        }
    }
    Ok(tools)
}

/// `run_<UTC time>_<12 random hex digits>`, e.g.
/// `run_20261130T120000Z_3fa9c2d41b07`.
pub fn new_run_id() -> Result<RunId, CliError> {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now();
    let stamp = crate::time::compact_utc(now).unwrap_or_else(|| "0".to_owned());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    let random = hasher.finish() & 0xffff_ffff_ffff;
    RunId::parse(&format!("run_{stamp}_{random:012x}"))
        .map_err(|e| CliError::failure(format!("generated run id refused: {e}")))
}
