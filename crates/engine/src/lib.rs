//! # keel-engine: composition and the run loop
//!
//! It will own `EngineBuilder` (providers, tools, observers, metadata allowlist, clock, limits), the run loop, cancellation, retries and shutdown.
//!
//! This crate is still empty: it arrives with issue #6. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
