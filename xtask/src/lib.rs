//! Repository chores for Keel, run through the `cargo xtask` alias.
//!
//! The binary (`src/main.rs`) only parses arguments and prints; the rules live
//! here so that they are unit and integration tested.

pub mod arch;
pub mod modules;
pub mod rfc;
