//! # keel-cli: the `keel` binary
//!
//! `keel` runs agent runs from JSON scenario files and reads back the
//! history the SQLite journal kept of them:
//!
//! | command | what it does |
//! | --- | --- |
//! | `keel run SCENARIO [--db PATH] [--json] [--approve all\|none\|ask] [--files DIR]` | one run: a live transcript (or, with `--json`, each event's canonical line exactly as stored), journaled; exit 0 completed, 1 failed, 130 cancelled (Ctrl-C), 2 bad input |
//! | `keel events RUN_ID [--after N] [--follow]` | a run's stored lines, in order |
//! | `keel run SCENARIO --continue RUN_ID --message TEXT` | a follow-up run: the completed run's history (rebuilt from the journal) plus the message; the run records the run it continues |
//! | `keel runs [--conversation RUN_ID]` | one line per run: id, status, turns, events, duration, the run it continues; or one conversation's chain |
//! | `keel recover` | close every abandoned run (rule `run.host_lost`); runs a live process owns are skipped; exit 1 if a run needs attention |
//! | `keel verify` | every run: contiguous seqs from 1, canonical lines, lifecycle, status; exit 1 on the first violation |
//! | `keel export RUN_ID [-o FILE]` / `keel import FILE` | a run as JSON Lines (the eventlog snapshot format); never renumbered |
//! | `keel serve [--listen ADDR] [--token-file F]` | the HTTP daemon ([`serve`]): runs, SSE event streams with resume, approvals |
//!
//! Multi-host (`--nats URL`, always compiled in): `keel run --nats` also
//! journals every event to NATS JetStream, and `keel serve --nats` streams
//! runs it does not have from there ([`jetstream`], `docs/DEPLOYMENT.md`).
//!
//! MCP tools (feature `mcp`, on by default): a scenario's `mcp_servers`
//! mounts MCP servers' tools through `keel-mcp`, and `keel serve --mcp`
//! lists the servers posted scenarios may use (the `mcp` module).
//!
//! The database is `--db PATH`, else `$KEEL_DB`, else `keel.db`.
//!
//! This library holds the binary's logic so that it can be tested: the
//! strict scenario loader ([`scenario`]), the built-in tools
//! ([`builtins`]), the transcript renderer ([`render`]), the approval
//! handler ([`approval`]) and the subcommands ([`commands`]). The binary
//! (`src/main.rs`) only calls [`main`].
//!
//! What it is not: it owns no run semantics (the engine does: turns,
//! retries, cancellation, closing), no storage format (the journal's), no
//! provider wire format (`keel-providers` has them; `keel serve` still
//! refuses the network provider types and runs scripted scenarios only).
//!
//! Neighbours: it composes `keel-engine` (the run loop), `keel-observers`
//! (the SQLite journal, as a required observer, and its reader),
//! `keel-eventlog` (events, subscriptions, `RunLog::import`) and
//! `keel-testkit` (the scripted provider and tools that scenario files
//! describe, and the lifecycle checker `verify` uses). Depending on the
//! testkit is a recorded decision: see
//! `docs/rfc/implemented/2026-11-30-cli-scripted-provider.md`.
//!
//! Live output comes only from the run's log, through a subscription: the
//! transcript and `--json` show exactly what was committed, in order, and
//! `keel run --json` prints the same bytes as `keel events` afterwards.
#![deny(missing_docs)]

pub mod approval;
pub mod args;
pub mod builtins;
pub mod commands;
pub mod conversation;
pub mod error;
pub mod jetstream;
pub mod launch;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod render;
pub mod scenario;
pub mod screen;
pub mod serve;
pub mod strict_json;
pub mod time;
pub mod views;

use clap::Parser;

/// Parses the command line, runs the subcommand, prints any error as
/// `keel: …` on stderr, and returns the process exit code.
pub fn main() -> i32 {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Run(a) => commands::run::run(a),
        args::Command::Events(a) => commands::history::events(a),
        args::Command::Runs(a) => commands::history::runs(a),
        args::Command::Verify(a) => commands::history::verify(a),
        args::Command::Recover(a) => commands::recover::recover(a),
        args::Command::Export(a) => commands::transfer::export(a),
        args::Command::Import(a) => commands::transfer::import(a),
        args::Command::Serve(a) => serve::serve(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if !e.message.is_empty() {
                eprintln!("keel: {e}");
            }
            e.code
        }
    }
}
