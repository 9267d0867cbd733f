//! # keel-eventlog: the authoritative per-run event log
//!
//! Each run owns one [`RunLog`]: an ordered, gap-free sequence of
//! [`Event`]s numbered from 1, each one line of RFC 8785 canonical JSON.
//! This crate owns:
//!
//! - the envelope ([`Event`]), the stable kinds ([`EventKind`]) and one
//!   typed payload per kind ([`Payload`]), with canonical encoding and
//!   decoding that round-trips byte for byte, unknown members included;
//! - the [`LifecycleTracker`]: one terminal per started scope, naming the
//!   identity its start named (a tool terminal its tool), nesting, nothing
//!   after the run's terminal; [`OpenScope`]s and their cancelled
//!   terminals;
//! - the bounded [`RunLog`]: sequence and timestamp assigned under one
//!   lock, count- and byte-bounded retention with oldest-first eviction and
//!   a terminal reserve ([`LogConfig`]);
//! - [`Subscription`]s: replay after a cursor joined atomically to the live
//!   tail, per-subscriber bounds, slow consumers cut off with a typed error
//!   carrying the recovery cursor, never blocking a commit;
//! - versioned [`Snapshot`]s and import that never renumber.
//!
//! What it is not: it does not persist anything (the SQLite journal is an
//! observer in `keel-observers`), does not run models or tools
//! (`keel-engine`), and does not call observers: observers sit behind the
//! log and only observe what it committed. It builds on `keel-message`
//! (ids, canonical JSON) and `keel-stream` (problem kinds, usage, finish
//! reasons, secret screening).
//!
//! ```
//! use keel_eventlog::*;
//! use keel_message::RunId;
//! use std::sync::Arc;
//!
//! let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
//! log.commit(&Payload::RunStarted(RunStarted::default()))?;
//! log.commit(&Payload::TurnStarted(TurnRef { turn: 1, extra: Extra::new() }))?;
//!
//! // A client joins late: it replays from its cursor and follows the tail.
//! let mut sub = log.subscribe(1, SubscriptionBounds::default())?;
//! assert_eq!(sub.try_recv()?.kind().to_string(), "turn.started");
//!
//! // Closing a parent before its children is refused and changes nothing.
//! assert!(log.commit(&Payload::RunCompleted(RunCompleted::default())).is_err());
//! assert_eq!(log.open_scopes(), vec![ScopeKey::Turn(1), ScopeKey::Run]);
//!
//! log.commit(&Payload::TurnCancelled(TurnRef { turn: 1, extra: Extra::new() }))?;
//! let end = log.commit(&Payload::RunCancelled(RunCancelled::default()))?;
//! assert_eq!(end.seq(), 4);
//! assert_eq!(Event::decode(end.line())?.line(), end.line());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod chat_id;
mod clock;
mod config;
mod decimal;
mod event;
mod foreign_run;
mod hasher;
pub mod history;
mod kind;
mod lifecycle;
pub mod links;
mod log;
mod payload;
pub mod recovery;
mod reference;
mod scope;
mod shared;
mod snapshot;
mod subscription;
mod sync;

pub use chat_id::{CHAT_ID_MAX_BYTES, ChatId, ChatIdError};
pub use clock::{Clock, SystemClock};
pub use config::{ConfigError, LogConfig, MIN_TERMINAL_BYTES};
pub use event::{ENTRY_OVERHEAD_BYTES, Event, EventDecodeError, SCHEMA_VERSION};
pub use hasher::HistoryHasher;
pub use kind::{EventKind, KindError, Phase, Scope, Terminal};
pub use lifecycle::{LifecycleError, LifecycleTracker, OpenScope};
pub use log::{CommitError, LogStats, RunLog};
pub use payload::*;
pub use reference::{DigestError, HistoryDigest, HistoryReference};
pub use scope::{ScopeKey, Transition};
pub use shared::EndReason;
pub use snapshot::{ImportError, Snapshot};
pub use subscription::{
    Durability, SubscribeError, Subscription, SubscriptionBounds, SubscriptionError, TryRecvError,
};
