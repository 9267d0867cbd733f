//! # keel-observers (in progress)
#![deny(missing_docs)]

mod observer;
mod pipeline;
mod queue;
mod run_window;
#[cfg(feature = "tracing")]
mod tracing_bridge;
mod window;

pub use observer::{
    BatchError, BestEffortObserver, ObserveBatchFuture, ObserveFuture, ObserverError,
    RequiredObserver,
};
pub use pipeline::{
    BatchOutcome, BestEffortStats, DispatchError, Pipeline, PipelineBuilder, PipelineConfig,
    PipelineStats, ShutdownReport,
};
pub use run_window::RunWindow;
#[cfg(feature = "tracing")]
pub use tracing_bridge::TracingObserver;
pub use window::{Admission, Take, WindowCore, WindowError};

#[cfg(feature = "sqlite")]
pub mod journal;
#[cfg(feature = "sqlite")]
pub use journal::{
    JournalConfig, JournalError, JournalReader, JournalStats, RecoveredRun, RecoveryReport,
    RunStatus, RunSummary, RunTotals, SkipReason, SkippedRun, SqliteJournal, Synchronous,
};

#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "nats")]
pub use nats::{
    JetStreamConfig, JetStreamError, JetStreamHandle, JetStreamObserver, RemoteSubscribeError,
    RemoteSubscription, RemoteSubscriptionError,
};
#[cfg(feature = "nats")]
pub mod nats_recovery;
#[cfg(feature = "nats")]
pub use nats_recovery::{
    HostHeartbeat, JetStreamRecovery, JetStreamRecoveryError, LocalSync, Ownership,
    RecoveredInStream, StreamRecovery, StreamStanding,
};
