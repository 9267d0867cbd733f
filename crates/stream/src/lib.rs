//! # keel-stream: the model stream union and its host-side validator
//!
//! It will own the strict `StreamItem` union (text delta, finalized tool call, completion, failure), usage, namespaced bounded provider metadata with allowlisting and secret screening, typed provider problems, the validator that computes the retry position, and the async provider trait. It builds on `keel-message` only.
//!
//! This crate is still empty: it arrives with issue #3. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
