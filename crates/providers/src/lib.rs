//! # keel-providers: real provider wire formats
//!
//! It will own adapters from OpenAI-compatible chat completions and Anthropic messages streams to the `keel-stream` union. It names only `keel-message` and `keel-stream`.
//!
//! This crate is still empty: it arrives with issue #9. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
