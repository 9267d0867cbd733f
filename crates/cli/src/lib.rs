//! # keel-cli: the `keel` binary
//!
//! It will own the `keel` binary: `run`, `events`, `verify` and `serve`, over the engine, the SQLite journal and the provider adapters.
//!
//! This crate is still empty: it arrives with issue #7. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
