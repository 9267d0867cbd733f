//! `keel run SCENARIO`: one agent run, journaled, shown live.
//!
//! Scenario, provider and tool errors exit 2 before the database is
//! opened (`prepare` runs before `open_engine`). Live output comes only
//! from the run's subscription (`LiveView`), so `--json` prints exactly
//! the stored lines. The first Ctrl-C cancels the run and waits for its
//! cancelled terminals to be journaled (exit 130); a second exits at once
//! (`Interrupts`).

use crate::approval::Approver;
use crate::args::{CompactArgs, RunArgs};
use crate::error::{CliError, EXIT_CANCELLED, EXIT_FAILED, EXIT_OK};
use crate::render::Transcript;
use crate::screen::Screen;
use keel_engine::{Engine, RunCanceller, RunHandle, RunOutcome, RunRequest};
use keel_eventlog::{SubscriptionBounds, SubscriptionError};
use keel_message::RunId;
use keel_observers::conversation;
use keel_observers::{
    JetStreamObserver, JournalConfig, RequiredObserver, Store, StoreLocation, StoreReader,
};
use keel_scenario::Scenario;
use keel_scenario::file as scenario;
use keel_scenario::launch::{self, Launch};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Runs `keel compact`: `keel run` of the scenario continuing the run,
/// as a compaction-only run. Without `--scenario`, bad input: keel has no
/// default provider to summarize with.
pub fn compact(args: CompactArgs) -> Result<i32, CliError> {
    let Some(scenario) = args.scenario else {
        return Err(CliError::bad_input(format!(
            "keel compact {}: --scenario FILE is required (the model and provider that write the summary; keel has no default provider)",
            args.run_id
        )));
    };
    run(RunArgs {
        scenario,
        db: args.db,
        json: args.json,
        approve: crate::approval::ApprovalMode::None,
        files: None,
        nats: None,
        continue_run: Some(args.run_id),
        fork: None,
        at: None,
        message: None,
        compact: true,
    })
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

/// The message limits of `keel run`'s engine: what its history, a
/// continuation's rebuilt history and MCP results are checked against.
fn message_limits() -> keel_message::Limits {
    keel_message::Limits::default()
}

/// A scenario made ready to run: checked, with its request built, before
/// any store is opened (a bad provider or tool is bad input, exit 2).
struct Prepared {
    scenario: Scenario,
    request: RunRequest,
    run_id: RunId,
}

fn prepare(args: &RunArgs, screen: &Screen) -> Result<Prepared, CliError> {
    let file = args.scenario.as_path();
    let scenario = scenario::load(file).map_err(|e| CliError::bad_input(e.to_string()))?;
    let files = match &args.files {
        Some(dir) => Some(files_dir(dir)?),
        None => None,
    };
    let run_id = match &scenario.run_id {
        Some(id) => id.clone(),
        None => RunId::generate(),
    };
    let launch = Launch {
        files: files.as_deref(),
        approvals: Approver::new(args.approve, screen.clone()),
        default_approval_timeout: None,
    };
    let bad = |e: &dyn std::fmt::Display| CliError::bad_input(format!("{}: {e}", file.display()));
    let request = match (&args.continue_run, &args.fork, &args.message) {
        (Some(previous), None, None) if args.compact => {
            let continuation = compaction_of(args, previous, &run_id)?;
            launch::follow_up_request(&scenario, run_id.clone(), &launch, continuation)
                .map_err(|e| bad(&e))?
                .compaction_only()
        }
        (Some(previous), _, Some(text)) => {
            let reader = StoreReader::open(&args.db.db)?;
            let limits = message_limits();
            let continuation = conversation::user_message(text, &limits)
                .and_then(|m| conversation::continuation(&reader, previous, &[m], &run_id, &limits))
                .map_err(|e| CliError::bad_input(format!("--continue {previous}: {e}")))?;
            launch::follow_up_request(&scenario, run_id.clone(), &launch, continuation)
                .map_err(|e| bad(&e))?
        }
        (_, Some(parent), message) => {
            let fork = fork_of(args, parent, message.as_deref(), &run_id)?;
            launch::fork_request(&scenario, run_id.clone(), &launch, fork).map_err(|e| bad(&e))?
        }
        _ => launch::run_request(&scenario, run_id.clone(), &launch).map_err(|e| bad(&e))?,
    };
    Ok(Prepared {
        scenario,
        request,
        run_id,
    })
}

/// `keel compact PREVIOUS`: the continuation of PREVIOUS with no new
/// message, for a compaction-only run.
fn compaction_of(
    args: &RunArgs,
    previous: &str,
    run_id: &RunId,
) -> Result<conversation::Continuation, CliError> {
    let reader = StoreReader::open(&args.db.db)?;
    conversation::continuation(&reader, previous, &[], run_id, &message_limits())
        .map_err(|e| CliError::bad_input(format!("keel compact {previous}: {e}")))
}

/// `--fork PARENT --at SEQ [--message TEXT]`: the parent's history
/// through SEQ (a fork point), plus the message.
fn fork_of(
    args: &RunArgs,
    parent: &str,
    message: Option<&str>,
    run_id: &RunId,
) -> Result<conversation::Fork, CliError> {
    let at = args.at.unwrap_or_default();
    let refuse =
        |e: &dyn std::fmt::Display| CliError::bad_input(format!("--fork {parent} --at {at}: {e}"));
    let reader = StoreReader::open(&args.db.db)?;
    let limits = message_limits();
    let messages = match message {
        Some(text) => vec![conversation::user_message(text, &limits).map_err(|e| refuse(&e))?],
        None => Vec::new(),
    };
    conversation::fork(&reader, parent, at, &messages, run_id, &limits).map_err(|e| refuse(&e))
}

/// Opens the journal (and `--nats`), claiming the run id (refused when it
/// is stored or another live process claimed it),
/// and builds the engine with them as its required observers.
async fn open_engine(args: &RunArgs, run_id: &RunId) -> Result<(Engine, Arc<Store>), CliError> {
    let db = &args.db.db;
    // On a blocking thread: a store may block on the network (PostgreSQL's
    // blocking client refuses to run on a runtime thread).
    let (journal, claim) = {
        let (location, id) = (db.clone(), run_id.as_str().to_owned());
        tokio::task::spawn_blocking(move || {
            let journal = Store::open(&location, JournalConfig::default())?;
            // Claimed in the store, as a daemon's admission does, so that
            // a daemon on the same journal cannot start a run under this
            // id meanwhile.
            let claim = journal.claim_run(&id)?;
            Ok::<_, keel_observers::JournalError>((Arc::new(journal), claim))
        })
        .await
        .map_err(|e| CliError::failure(format!("opening the journal: {e}")))??
    };
    if claim != keel_observers::RunClaim::Claimed {
        return Err(CliError::bad_input(format!(
            "{}: run {run_id} is already stored in {} (or being started by another process); give the scenario another run_id, or leave it out to generate one",
            args.scenario.display(),
            db
        )));
    }
    let mut builder = Engine::builder()
        .message_limits(message_limits())
        .required_observer(Arc::clone(&journal) as Arc<dyn RequiredObserver>);
    // `--nats`: the second required observer, after the journal, so every
    // event is committed locally and then acknowledged by JetStream.
    if let Some(url) = &args.nats {
        let observer = JetStreamObserver::new(
            keel_serve::nats_connect::connect(url)
                .await
                .map_err(|e| CliError::bad_input(e.to_string()))?,
        );
        builder = builder.required_observer(Arc::new(observer) as Arc<dyn RequiredObserver>);
    }
    let engine = builder
        .build()
        .map_err(|e| CliError::bad_input(format!("{}: {e}", args.scenario.display())))?;
    Ok((engine, journal))
}

/// The request with the scenario's MCP servers started (the file is the
/// operator's own, so full entries start as written; `keel run` provides
/// no servers by name).
#[cfg(feature = "mcp")]
async fn with_mcp_servers(args: &RunArgs, prepared: &Prepared) -> Result<RunRequest, CliError> {
    use launch::McpLaunchError;
    let file = args.scenario.display();
    launch::with_mcp(
        prepared.request.clone(),
        &prepared.scenario,
        &[],
        keel_scenario::mcp::Trust::Operator,
        &message_limits(),
    )
    .await
    .map_err(|e| match e {
        McpLaunchError::Resolve(_) => CliError::bad_input(format!("{file}: {e}")),
        McpLaunchError::Start(_) => CliError::failure(format!("{file}: {e}")),
    })
}

#[cfg(not(feature = "mcp"))]
async fn with_mcp_servers(_args: &RunArgs, prepared: &Prepared) -> Result<RunRequest, CliError> {
    Ok(prepared.request.clone())
}

async fn run_async(args: RunArgs) -> Result<i32, CliError> {
    let interrupts = Interrupts::install()?;
    let json = args.json;
    let screen = Screen::new(!json && std::io::stderr().is_terminal());
    // It reads the store (a continuation, a fork), which may block on the
    // network: off the runtime's thread (the blocking PostgreSQL client
    // refuses to run on one).
    let prepared = tokio::task::block_in_place(|| prepare(&args, &screen))?;
    let (engine, journal) = open_engine(&args, &prepared.run_id).await?;
    let request = with_mcp_servers(&args, &prepared).await?;
    let handle = engine
        .start(request)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", args.scenario.display())))?;
    interrupts.set_canceller(handle.canceller());
    let color = !json
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let view = LiveView {
        screen: screen.clone(),
        json,
        color,
    };
    let outcome = view.follow(handle, &prepared.scenario).await?;
    let shutdown = engine.shutdown(Duration::from_secs(5)).await;
    if shutdown.runs_abandoned > 0 || !shutdown.unacknowledged.is_empty() {
        screen.note("keel: the run did not finish closing within 5 s");
    }
    drop(engine);
    close_journal(journal, &screen).await;
    let code = match &outcome {
        RunOutcome::Completed { .. } => EXIT_OK,
        RunOutcome::Failed { cause } => {
            if json {
                screen.note(&format!("keel: run {} failed: {cause}", prepared.run_id));
            }
            EXIT_FAILED
        }
        RunOutcome::Cancelled => EXIT_CANCELLED,
    };
    if !json {
        view.hint(&prepared.run_id, &args.db.db);
    }
    Ok(code)
}

/// The terminal view of a live run: the transcript (or `--json` lines)
/// from the run's subscription, with a spinner while it waits.
struct LiveView {
    screen: Screen,
    json: bool,
    color: bool,
}

impl LiveView {
    async fn follow(&self, handle: RunHandle, scenario: &Scenario) -> Result<RunOutcome, CliError> {
        let bounds = SubscriptionBounds {
            max_events: usize::MAX,
            max_bytes: usize::MAX,
            ..Default::default()
        };
        let log = handle.log().clone();
        let mut subscription = handle
            .subscribe_with(0, bounds)
            .map_err(|e| CliError::failure(format!("cannot follow the run: {e}")))?;
        let joined = tokio::spawn(handle.join());
        let spinner = self.spinner();
        let mut transcript = Transcript::new(self.color)
            .partial_restart(scenario.limits.retry.partial == keel_engine::PartialRetry::Restart);
        if !self.json {
            let shown: Vec<(&str, String)> = scenario
                .messages
                .iter()
                .map(|m| (m.role().as_str(), crate::render::message_text(m)))
                .collect();
            let prelude = transcript.prelude(shown.iter().map(|(r, t)| (*r, t.as_str())));
            self.screen.print(&prelude, None, true);
        }
        loop {
            match subscription.recv().await {
                Some(Ok(event)) => self.show(&mut transcript, &event),
                Some(Err(SubscriptionError::SlowConsumer {
                    recovery_cursor, ..
                })) => match log.subscribe(recovery_cursor, bounds) {
                    Ok(s) => subscription = s,
                    Err(e) => {
                        self.screen
                            .note(&format!("keel: the live view stopped: {e}"));
                        break;
                    }
                },
                Some(Err(e)) => {
                    self.screen
                        .note(&format!("keel: the live view stopped: {e}"));
                    break;
                }
                None => break,
            }
        }
        let outcome = joined
            .await
            .map_err(|e| CliError::failure(format!("the run task ended abnormally: {e}")))?;
        spinner.abort();
        self.screen.finish();
        Ok(outcome)
    }

    fn spinner(&self) -> tokio::task::JoinHandle<()> {
        let screen = self.screen.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(90));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                screen.tick();
            }
        })
    }

    fn show(&self, transcript: &mut Transcript, event: &keel_eventlog::Event) {
        if self.json {
            let mut line = String::with_capacity(event.line().len() + 1);
            line.push_str(event.line());
            line.push('\n');
            self.screen.print(&line, None, true);
        } else {
            let text = transcript.render(event);
            self.screen
                .print(&text, transcript.waiting(), transcript.at_line_start());
        }
    }

    fn hint(&self, run_id: &RunId, db: &StoreLocation) {
        let hint = format!(
            "  run {run_id} is stored in {db} · replay it with: {} events {run_id}{}",
            program(),
            db_flag(db)
        );
        let hint = if self.color {
            format!("\x1b[2m{hint}\x1b[0m\n")
        } else {
            format!("{hint}\n")
        };
        self.screen.print(&hint, None, true);
    }
}

/// How this binary was invoked (`target/release/keel` under `cargo run`),
/// so the hint can be pasted as is; `keel` when it came from `PATH`.
fn program() -> String {
    match std::env::args().next() {
        Some(arg0) if arg0.contains(std::path::MAIN_SEPARATOR) => arg0,
        _ => "keel".to_owned(),
    }
}

/// `--db LOCATION` when the store is not what `keel events` would use
/// anyway (a URL shown without its password).
fn db_flag(db: &StoreLocation) -> String {
    let default = std::env::var_os("KEEL_DB").map_or_else(
        || StoreLocation::Sqlite(PathBuf::from("keel.db")),
        |text| {
            StoreLocation::parse(&text.to_string_lossy())
                .unwrap_or_else(|_| StoreLocation::Sqlite(PathBuf::from(text)))
        },
    );
    if *db == default {
        String::new()
    } else {
        format!(" --db {db}")
    }
}

/// Drains and closes the journal (every acknowledged event is already
/// committed; this checkpoints the WAL).
async fn close_journal(journal: Arc<Store>, screen: &Screen) {
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
