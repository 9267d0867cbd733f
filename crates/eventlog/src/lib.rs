//! # keel-eventlog: the authoritative per-run event log
//!
//! It will own the event envelope, the stable kinds and typed payloads, canonical encoding and decoding, the lifecycle tracker, the bounded `RunLog`, subscriptions with cursors and typed recovery errors, and versioned snapshots. It builds on `keel-message` and `keel-stream`.
//!
//! This crate is still empty: it arrives with issue #4. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
