//! A run between its admission and its start. [`Reservation::take`]
//! decides, under the daemon's one admission lock, whether a run may
//! start at all: the daemon is open, a `--max-live-runs` slot is free
//! (live runs and reservations count alike), and its id is claimed in the
//! shared store ([`Store::claim_run`], so of two daemons on one
//! database only one starts a run under an id). Only then are the run's
//! side effects made (its MCP servers started), so the live-run bound
//! bounds their child processes too and a refused POST starts nothing.
//!
//! [`Store::claim_run`]: keel_observers::Store::claim_run

use super::problem::Problem;
use super::{Daemon, lock};
use axum::http::StatusCode;
use keel_observers::RunClaim;
use std::collections::HashSet;
use std::sync::Arc;

/// The reservations of one daemon: their ids and the slots they hold.
#[derive(Debug, Default)]
pub(super) struct Reserved {
    ids: HashSet<String>,
    slots: usize,
}

/// One admitted run not started yet: a live-run slot (until
/// [`started`](Self::started)) and its id, kept from other admissions of
/// the same id until dropped.
#[derive(Debug)]
pub(super) struct Reservation<'d> {
    daemon: &'d Daemon,
    run_id: String,
    slot: bool,
}

impl<'d> Reservation<'d> {
    /// Admits `run_id`: 503 `shutting-down` or `too-many-live-runs`, 409
    /// `run-exists` (live here, reserved here, journaled, or claimed by a
    /// live daemon on the same journal), else the reservation.
    pub(super) async fn take(daemon: &'d Daemon, run_id: &str) -> Result<Self, Problem> {
        let _admission = daemon.admission.lock().await;
        if daemon.shutting_down() {
            return Err(shutting_down());
        }
        {
            let reserved = lock(&daemon.reserved);
            let live = daemon.engine.live_runs();
            let max = daemon.settings.max_live_runs;
            if live.saturating_add(reserved.slots) >= max {
                return Err(too_many_live_runs(max, live));
            }
            if reserved.ids.contains(run_id) || daemon.engine.live_run(run_id).is_some() {
                return Err(run_exists(run_id));
            }
        }
        let journal = Arc::clone(&daemon.journal);
        let id = run_id.to_owned();
        let claim = tokio::task::spawn_blocking(move || journal.claim_run(&id))
            .await
            .map_err(Problem::journal)?
            .map_err(Problem::journal)?;
        if claim != RunClaim::Claimed {
            return Err(run_exists(run_id));
        }
        let mut reserved = lock(&daemon.reserved);
        reserved.ids.insert(run_id.to_owned());
        reserved.slots += 1;
        Ok(Reservation {
            daemon,
            run_id: run_id.to_owned(),
            slot: true,
        })
    }

    /// The run is in the engine: its slot is the engine's live run now.
    pub(super) fn started(&mut self) {
        if std::mem::take(&mut self.slot) {
            let mut reserved = lock(&self.daemon.reserved);
            reserved.slots = reserved.slots.saturating_sub(1);
        }
    }

    /// The run was refused or never began: removes its claim while the
    /// id is still reserved (so no other admission of it here can race
    /// the removal), then frees the reservation. A claim left behind by a
    /// failure here is this host's own, claimed again by its next
    /// admission of the id, and taken over by others once this host is
    /// gone.
    pub(super) async fn release(self) {
        let journal = Arc::clone(&self.daemon.journal);
        let id = self.run_id.clone();
        let _ = tokio::task::spawn_blocking(move || journal.release_claim(&id)).await;
        drop(self);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = lock(&self.daemon.reserved);
        if self.slot {
            reserved.slots = reserved.slots.saturating_sub(1);
        }
        reserved.ids.remove(&self.run_id);
    }
}

/// 503 for a run posted while the daemon shuts down.
pub fn shutting_down() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting-down",
        "The daemon is shutting down",
        "no new runs are taken (rule engine.open)",
    )
    .with("rule", "engine.open")
}

pub(crate) fn too_many_live_runs(max: usize, live: usize) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too-many-live-runs",
        "Too many live runs",
        format!(
            "this daemon runs at most {max} runs at once (--max-live-runs); post again when one has ended"
        ),
    )
    .with("bound", "max_live_runs")
    .with("max_live_runs", max)
    .with("live_runs", live)
}

pub(crate) fn run_exists(id: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-exists",
        "Run id already used",
        "a live or stored run has this id; give the scenario another run_id, or leave it out (rule run.unique_id)",
    )
    .with("run_id", id)
    .with("rule", "run.unique_id")
}
