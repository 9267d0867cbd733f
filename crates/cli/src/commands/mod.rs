//! One module per group of subcommands.

pub mod delete;
pub mod history;
pub mod recover;
pub mod replay;
pub mod run;
pub mod serve;
pub mod transfer;
pub mod tree;
