//! # keel-testkit: test helpers for Keel hosts
//!
//! It will own scripted providers and tools, a manual clock, recording and fault-injecting observers, the lifecycle checker, proptest strategies, and a provider conformance suite, in the spirit of tokio-test and tower-test.
//!
//! This crate is still empty: it arrives with issue #6. Until then it only
//! holds its place in the workspace so that the dependency direction
//! (see `ARCHITECTURE.md`) is fixed from the start.
#![deny(missing_docs)]
