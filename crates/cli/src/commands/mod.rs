//! One module per group of subcommands.

pub mod history;
pub mod run;
pub mod transfer;
