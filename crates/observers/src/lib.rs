//! # keel-observers: required and best-effort observers
//!
//! It will own the observer contracts and the dispatch pipeline behind the log, plus built-in observers: the SQLite journal (the embedded default store), a `tracing` bridge, and NATS JetStream behind a feature. Observers only observe: the log assigns sequences.
//!
//! This crate is still empty: it arrives with issue #5. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
