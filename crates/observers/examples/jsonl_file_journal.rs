//! A required observer of your own: a JSON Lines file journal.
//!
//! It shows the contract a durable observer keeps (see `RequiredObserver`):
//! acknowledge an event only once it is on disk (`sync_data`), take a batch
//! at the cost of one sync (`observe_batch`), accept a redelivered event
//! with the same bytes as a no-op (delivery is at least once), and refuse a
//! gap or different bytes for a stored seq, so the pipeline fails the run
//! instead of letting the file lie. It needs no SQLite: build it with
//! `keel-observers = { version = "0.1", default-features = false }`.
//!
//! ```sh
//! cargo run -p keel-observers --no-default-features --example jsonl_file_journal
//! ```
//!
//! (A production journal would write from its own thread, as `SqliteJournal`
//! does, instead of holding a lock across blocking file calls.)

use keel_eventlog::{
    Event, Extra, LogConfig, Payload, RunCompleted, RunLog, RunStarted, SystemClock, TurnRef,
};
use keel_message::RunId;
use keel_observers::{
    BatchError, ObserveBatchFuture, ObserveFuture, ObserverError, PipelineBuilder, RequiredObserver,
};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One run's events, one canonical line each, in seq order.
struct FileJournal {
    path: PathBuf,
    state: Mutex<Stored>,
}

struct Stored {
    file: File,
    /// Every line written, so a redelivery can be compared byte for byte.
    lines: Vec<String>,
}

impl FileJournal {
    fn create(path: &Path) -> std::io::Result<FileJournal> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)?;
        Ok(FileJournal {
            path: path.to_path_buf(),
            state: Mutex::new(Stored {
                file,
                lines: Vec::new(),
            }),
        })
    }

    /// Appends what is new in `events` and syncs once. `Ok` acknowledges
    /// them all; an error says how many leading events are durable.
    fn append(&self, events: &[Arc<Event>]) -> Result<(), BatchError> {
        let mut stored = self.state.lock().map_err(|_| BatchError {
            acknowledged: 0,
            source: ObserverError::Failed("the journal's lock is poisoned".into()),
        })?;
        let mut pending = String::new();
        let mut pending_lines = 0u64;
        for (i, event) in events.iter().enumerate() {
            let refuse = |source| BatchError {
                acknowledged: i,
                source,
            };
            let next = stored.lines.len() as u64 + 1;
            let stored_line = usize::try_from(event.seq() - 1)
                .ok()
                .and_then(|at| stored.lines.get(at));
            match stored_line {
                // At least once: the same bytes again change nothing.
                Some(line) if line == event.line() => continue,
                Some(_) => {
                    return Err(refuse(ObserverError::Conflict {
                        run_id: event.run_id().to_string(),
                        seq: event.seq(),
                    }));
                }
                None if event.seq() != next + pending_lines => {
                    return Err(refuse(ObserverError::Gap {
                        run_id: event.run_id().to_string(),
                        last_stored: next - 1,
                        seq: event.seq(),
                    }));
                }
                None => {
                    pending.push_str(event.line());
                    pending.push('\n');
                    pending_lines += 1;
                }
            }
        }
        let written = stored
            .file
            .write_all(pending.as_bytes())
            .and_then(|()| stored.file.sync_data());
        if let Err(e) = written {
            // Nothing of this batch is acknowledged: the pipeline redelivers.
            return Err(BatchError {
                acknowledged: 0,
                source: ObserverError::Failed(format!("{}: {e}", self.path.display())),
            });
        }
        stored.lines.extend(pending.lines().map(str::to_owned));
        Ok(())
    }
}

fn turn(turn: u64) -> TurnRef {
    TurnRef {
        turn,
        extra: Extra::new(),
    }
}

impl RequiredObserver for FileJournal {
    fn name(&self) -> &str {
        "jsonl-file"
    }

    fn observe<'a>(&'a self, event: &'a Arc<Event>) -> ObserveFuture<'a> {
        Box::pin(async move {
            self.append(std::slice::from_ref(event))
                .map_err(|e| e.source)
        })
    }

    fn observe_batch<'a>(&'a self, events: &'a [Arc<Event>]) -> ObserveBatchFuture<'a> {
        Box::pin(async move { self.append(events) })
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("keel-jsonl-journal-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("run_example.jsonl");
    let journal = Arc::new(FileJournal::create(&path)?);
    let pipeline = PipelineBuilder::new().required(journal.clone()).build();

    let log = RunLog::new(
        RunId::parse("run_example")?,
        LogConfig::default(),
        Arc::new(SystemClock),
    )?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let mut events = Vec::new();
    for payload in [
        Payload::RunStarted(RunStarted::default()),
        Payload::TurnStarted(turn(1)),
        Payload::TurnCompleted(turn(1)),
        Payload::RunCompleted(RunCompleted::default()),
    ] {
        let event = log.commit(&payload)?;
        rt.block_on(pipeline.dispatch(&event))?;
        events.push(event);
    }
    // A redelivery after a lost acknowledgement: a no-op, not a duplicate.
    rt.block_on(journal.observe_batch(&events))?;
    // A different line for a stored seq is refused, naming the seq.
    let other = RunLog::new(
        RunId::parse("run_example")?,
        LogConfig::default(),
        Arc::new(SystemClock),
    )?;
    other.commit(&Payload::RunStarted(RunStarted::default()))?;
    let forged = other.commit(&Payload::TurnStarted(turn(7)))?;
    let refused = rt.block_on(journal.observe(&forged));
    assert!(
        matches!(refused, Err(ObserverError::Conflict { seq: 2, .. })),
        "{refused:?}"
    );
    println!("a forged seq 2 is refused: {:?}", refused.err());

    let text = std::fs::read_to_string(&path)?;
    let stored: Vec<&str> = text.lines().collect();
    assert_eq!(
        stored.len(),
        events.len(),
        "one line per event, no duplicate"
    );
    for (line, event) in stored.iter().zip(&events) {
        assert_eq!(*line, event.line(), "the file holds the canonical lines");
    }
    println!(
        "{} events journaled to {} ({} acknowledged)",
        stored.len(),
        path.display(),
        pipeline.stats().acknowledged
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
