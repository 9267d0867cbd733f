//! `keel delete` and `keel prune`: remove stored runs, leaving tombstones.
//!
//! Both open the journal as a host (as `keel recover` does), ask it to
//! delete in one transaction ([`Store::delete_runs`]), and print
//! one line per tombstone, then a summary. The rules are the store's
//! (`keel_observers::deletion`): a running run is refused
//! (`deletion.live`, exit 1: end or `keel recover` it first), and so is a
//! run another stored run continues or forks from (`deletion.dependents`,
//! exit 1, naming them); a run not stored, a bad `--who` or `--older-than`
//! is bad input (exit 2).

use crate::args::{DbArgs, DeleteArgs, PruneArgs};
use crate::error::{CliError, EXIT_OK, write_error};
use keel_message::RunId;
use keel_observers::deletion::{
    DeleteError, DeletionRequest, DeletionTarget, OlderThan, Tombstone, Who,
};
use keel_observers::{JournalConfig, Store, StoreReader};
use std::io::{BufWriter, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// `keel delete RUN_ID [--conversation] [--who WHO] [--db PATH_OR_URL]`.
pub fn delete(args: DeleteArgs) -> Result<i32, CliError> {
    let run_id = RunId::parse(&args.run_id)
        .map_err(|e| CliError::bad_input(format!("delete: run id: {e}")))?;
    let target = if args.conversation {
        DeletionTarget::Conversation(run_id)
    } else {
        DeletionTarget::Run(run_id)
    };
    let who = who(args.who.as_deref())?;
    let request = DeletionRequest::new(target, who);
    execute(&args.db, args.nats.as_deref(), &request, "delete")
}

/// `keel prune --older-than DURATION [--who WHO] [--db PATH_OR_URL]`.
pub fn prune(args: PruneArgs) -> Result<i32, CliError> {
    let age = OlderThan::parse(&args.older_than)
        .map_err(|e| CliError::bad_input(format!("prune: {e}")))?;
    let who = who(args.who.as_deref())?;
    let request = DeletionRequest::new(age.target(now_ms()), who);
    execute(&args.db, args.nats.as_deref(), &request, "prune")
}

/// `--who`, or `cli:$USER` (`cli` when `USER` is unset).
fn who(given: Option<&str>) -> Result<Who, CliError> {
    let default;
    let text = match given {
        Some(text) => text,
        None => {
            default = match std::env::var("USER") {
                Ok(user) if !user.is_empty() => format!("cli:{user}"),
                _ => "cli".to_owned(),
            };
            &default
        }
    };
    Who::parse(text).map_err(|e| CliError::bad_input(format!("--who: {e}")))
}

fn execute(
    db: &DbArgs,
    nats: Option<&str>,
    request: &DeletionRequest,
    command: &str,
) -> Result<i32, CliError> {
    // Refuse a missing, newer or foreign store without creating anything,
    // as the read commands do (exit 2).
    drop(StoreReader::open(&db.db)?);
    let shared = match nats {
        Some(url) => Some(delete_on_jetstream(url, request, command)?),
        None => None,
    };
    let journal = Store::open(&db.db, JournalConfig::default())?;
    let local = journal.delete_runs(request);
    journal.close()?;
    // With `--nats` the stream's tombstones are the answer; the journal,
    // this host's copy, may not hold the runs.
    let tombstones = match (shared, local) {
        (Some(shared), Ok(_) | Err(DeleteError::NotFound { .. })) => shared,
        (_, Err(e)) => return Err(refusal(e, command)),
        (None, Ok(local)) => local,
    };
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    print(&mut out, &tombstones, command, db).map_err(write_error)?;
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}

/// Deletes on JetStream at `url` first: a refusal there deletes nothing
/// anywhere.
fn delete_on_jetstream(
    url: &str,
    request: &DeletionRequest,
    command: &str,
) -> Result<Vec<Tombstone>, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        let handle = keel_serve::nats_connect::connect(url)
            .await
            .map_err(|e| CliError::bad_input(e.to_string()))?;
        handle
            .delete_runs(request)
            .await
            .map_err(|e| refusal(e, command))
    })
}

/// `deleted  RUN_ID  N events` per tombstone, then
/// `delete: N run(s) deleted, M events (by WHO) (DB)`.
fn print(
    out: &mut impl Write,
    tombstones: &[Tombstone],
    command: &str,
    db: &DbArgs,
) -> std::io::Result<()> {
    for t in tombstones {
        writeln!(out, "deleted  {}  {} events", t.run_id(), t.events())?;
    }
    let events: u64 = tombstones.iter().map(Tombstone::events).sum();
    let by = tombstones
        .first()
        .map(|t| format!(" by {}", t.who()))
        .unwrap_or_default();
    writeln!(
        out,
        "{command}: {} run(s) deleted, {events} events{by} ({})",
        tombstones.len(),
        db.db
    )
}

/// A refused or failed deletion: not stored or bad input exit 2, a rule
/// the store's state breaks (live, dependents) or a failing store exit 1.
fn refusal(e: DeleteError, command: &str) -> CliError {
    match e {
        DeleteError::Journal(e) => CliError::from(e),
        DeleteError::NotFound { .. } | DeleteError::InvalidWho { .. } => {
            CliError::bad_input(format!("{command}: {e}"))
        }
        e => CliError::failure(format!("{command}: {e}")),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
