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
//! | `keel compact RUN_ID --scenario FILE` | a compaction-only run continuing RUN_ID: the scenario's model summarizes all but the system messages and the last turns (`limits.context`), recorded as `context.compacted`; the conversation continues from it; exit 2 without `--scenario` |
//! | `keel run SCENARIO --fork RUN_ID --at SEQ [--message TEXT]` | a fork: the run's history as its log rebuilds it through SEQ (a fork point, rule `fork.point`) plus the message if given; the run records `forked_from`; the run forked is only read; the scenario's messages are not used |
//! | `keel runs [--conversation RUN_ID]` | one line per run: id, status, turns, events, duration, the run it continues or is forked from; or one conversation's chain |
//! | `keel runs --tree RUN_ID` | the tree of RUN_ID's conversation: the root, then each continuation and fork indented under the run it comes from, with its status and `forked at SEQ` |
//! | `keel recover` | close every abandoned run (rule `run.host_lost`); runs a live process owns are skipped; exit 1 if a run needs attention |
//! | `keel verify` | every run: contiguous seqs from 1, canonical lines, lifecycle, status; exit 1 on the first violation |
//! | `keel export RUN_ID [-o FILE]` / `keel import FILE` | a run as JSON Lines (the eventlog snapshot format); never renumbered |
//! | `keel serve [--listen ADDR] [--token-file F]` | the HTTP daemon (`keel-serve`): runs, SSE event streams with resume, approvals, chat, AG-UI, the viewer |
//!
//! Multi-host (`--nats URL`, always compiled in): `keel run --nats` also
//! journals every event to NATS JetStream, and `keel serve --nats` streams
//! runs it does not have from there (`docs/DEPLOYMENT.md`).
//!
//! The store is `--db PATH_OR_URL`, else `$KEEL_DB`, else `keel.db`: a
//! SQLite file, or a `postgres://` URL in a build with the feature
//! `postgres` (`keel_observers::StoreLocation`; a refusal never shows the
//! URL's password, and `--help` never shows `KEEL_DB`'s value).
//!
//! This crate is the command line only: flags ([`args`]), the subcommands
//! ([`commands`]), the transcript renderer ([`render`], [`screen`]) and
//! the terminal's approval handler ([`approval`]). The binary
//! (`src/main.rs`) only calls [`main`].
//!
//! What it is not: it owns no run semantics (`keel-engine`), no storage
//! format (the journal's, `keel-observers`), no scenario format
//! (`keel-scenario` loads scenario files and turns them into runs), no
//! HTTP (`keel-serve` is the daemon; `keel serve` maps its flags onto a
//! `ServeConfig` and a `ScenarioFactory`), no frontend protocol
//! (`keel-views`).
//!
//! Live output comes only from the run's log, through a subscription: the
//! transcript and `--json` show exactly what was committed, in order, and
//! `keel run --json` prints the same bytes as `keel events` afterwards.
#![deny(missing_docs)]

pub mod approval;
pub mod args;
pub mod commands;
pub mod error;
pub mod render;
pub mod screen;
pub mod time;

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
        args::Command::Compact(a) => commands::run::compact(a),
        args::Command::Export(a) => commands::transfer::export(a),
        args::Command::Import(a) => commands::transfer::import(a),
        args::Command::Serve(a) => commands::serve::serve(a),
        args::Command::Replay(a) => commands::replay::replay(a),
        args::Command::Delete(a) => commands::delete::delete(a),
        args::Command::Prune(a) => commands::delete::prune(a),
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
