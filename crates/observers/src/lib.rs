//! # keel-observers: who sees a run's events, and who must acknowledge them
//!
//! A run's [`RunLog`](keel_eventlog::RunLog) commits events in memory; this
//! crate decides where they go next and when a run may proceed. It owns:
//!
//! - the two observer contracts: a [`RequiredObserver`] acknowledges each
//!   event (or batch, [`RequiredObserver::observe_batch`]) durably, within
//!   a deadline, and the run waits for it; a [`BestEffortObserver`] sees
//!   events only after every required observer acknowledged them, through a
//!   bounded queue on its own thread, and can never block or fail a run;
//! - the [`Pipeline`] that runs them (construction order, deadlines, panic
//!   guards, counted drops, [`PipelineStats`], shutdown) and its per-run
//!   [`RunWindow`]: pipelined acknowledgements with group commit, whose
//!   state machine ([`WindowCore`]) is synchronous so the loom models drive
//!   the real code;
//! - the stores and bridges that implement the contracts, each behind a
//!   feature (table below): the SQLite journal ([`SqliteJournal`] and its
//!   reader and recovery), behind one type for any durable store
//!   ([`Store`], [`StoreReader`], [`StoreLocation`]), the `tracing` bridge
//!   (`TracingObserver`) and NATS JetStream (`JetStreamObserver`, remote
//!   subscription, recovery);
//! - deletion and retention (`deletion`, feature `sqlite`): the request,
//!   the rules and the planning every durable store deletes by, and the
//!   tombstones deleted runs leave.
//!
//! What it is not: it does not run agents or decide what to commit (that
//! is `keel-engine`), and it does not define events (that is
//! `keel-eventlog`). A best-effort observer is not a store: losing it
//! loses nothing the run's history needs.
//!
//! | feature | default | what it adds | what it compiles |
//! | --- | --- | --- | --- |
//! | `sqlite` | on | `journal`: [`SqliteJournal`], `JournalReader`, recovery | bundled SQLite (rusqlite) |
//! | `tracing` | on | `TracingObserver`: lifecycle events as `tracing` spans with OpenTelemetry GenAI attribute names | `tracing` |
//! | `otel` | off | `otel`: `OtelObserver`, spans over OTLP/HTTP with the GenAI semantic conventions | `opentelemetry-otlp` (reqwest blocking) |
//! | `nats` | off | `nats`: the JetStream required observer, remote subscription, multi-host recovery | `async-nats` |
//!
//! **Observer authors** depend on this crate with `default-features =
//! false`: the traits and the pipeline then compile with no SQLite, no
//! `tracing` and no NATS client (CI checks that `cargo tree -p
//! keel-observers --no-default-features` holds no SQLite).
//!
//! Neighbours: it depends on `keel-message`, `keel-stream` and
//! `keel-eventlog`; `keel-engine` builds one [`Pipeline`] per engine and
//! gives each run a [`RunWindow`]; `keel-testkit` has recording and
//! fault-injecting observers; the `keel` binary journals every run with
//! [`SqliteJournal`].
//!
//! A required observer of your own, acknowledging events in a pipeline:
//!
//! ```
//! use keel_eventlog::{LogConfig, Payload, RunLog, RunStarted, SystemClock};
//! use keel_message::RunId;
//! use keel_observers::{ObserveFuture, ObserverError, PipelineBuilder, RequiredObserver};
//! use std::sync::{Arc, Mutex};
//!
//! /// Keeps each event's canonical line; refuses none.
//! #[derive(Default)]
//! struct Lines(Mutex<Vec<String>>);
//!
//! impl RequiredObserver for Lines {
//!     fn name(&self) -> &str {
//!         "lines"
//!     }
//!     fn observe<'a>(&'a self, event: &'a Arc<keel_eventlog::Event>) -> ObserveFuture<'a> {
//!         Box::pin(async move {
//!             let mut lines = self.0.lock().map_err(|_| ObserverError::Failed("poisoned".into()))?;
//!             lines.push(event.line().to_owned());
//!             Ok(())
//!         })
//!     }
//! }
//!
//! let lines = Arc::new(Lines::default());
//! let pipeline = PipelineBuilder::new().required(lines.clone()).build();
//! let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
//! let event = log.commit(&Payload::RunStarted(RunStarted::default()))?;
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! rt.block_on(pipeline.dispatch(&event))?;
//! assert_eq!(lines.0.lock().unwrap().len(), 1);
//! assert_eq!(pipeline.stats().acknowledged, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dispatch;
#[cfg(any(feature = "tracing", feature = "otel"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "tracing", feature = "otel"))))]
pub mod genai;
mod history;
mod host_id;
mod observer;
mod pipeline;
mod queue;
mod run_window;
#[cfg(feature = "tracing")]
mod tracing_bridge;
mod window;

pub use dispatch::{BatchOutcome, DispatchError};
pub use history::{RunHistory, RunHistoryError, RunStatus, StoredRun};
pub use host_id::{MAX_HOST_ID_BYTES, valid_host_id};
pub use observer::{
    BatchError, BestEffortObserver, ObserveBatchFuture, ObserveFuture, ObserverError,
    RequiredObserver,
};
pub use pipeline::{
    BestEffortStats, Pipeline, PipelineBuilder, PipelineConfig, PipelineStats, ShutdownReport,
};
pub use run_window::RunWindow;
#[cfg(feature = "tracing")]
#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
pub use tracing_bridge::TracingObserver;
pub use window::{Admission, Settled, Take, WindowCore, WindowError};

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod conversation;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod deletion;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod journal;
#[cfg(feature = "sqlite")]
mod journal_error;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use journal::{
    JournalConfig, JournalError, JournalReader, JournalStats, ListedRun, PAGE_BYTES, RecoveredRun,
    RecoveryReport, RunClaim, RunSummary, RunTotals, RunsCursor, RunsPage, RunsQuery, SkipReason,
    SkippedRun, SqliteJournal, Synchronous, is_last_page,
};

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use otel::{OtelConfig, OtelError, OtelObserver, OtelStats, OtlpEndpoint};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod store;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::{Store, StoreLocation, StoreLocationError, StoreReader, StoreReads};

#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::{PgJournal, PgReader, PgUrl, PgUrlError};
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub use nats::{
    HostHeartbeat, JetStreamConfig, JetStreamError, JetStreamHandle, JetStreamObserver,
    JetStreamRecovery, JetStreamRecoveryError, LocalSync, Ownership, RecoveredInStream,
    RemoteSubscribeError, RemoteSubscription, RemoteSubscriptionError, StreamRecovery,
    StreamStanding,
};
