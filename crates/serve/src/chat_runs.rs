//! The runs of chat conversations (RFC 2026-12-04-chat-owned-runs): their
//! names, the namespace only `POST /v1/chat` may create, how a
//! conversation's last run is found, and the mark that makes a stored run
//! the chat's own.
//!
//! Conversation `x`'s runs are `chat-x-1`, `chat-x-2`, … (at most
//! [`MAX_CONVERSATION_RUNS`]). Every id starting with [`RUN_PREFIX`] is the
//! chat's: `POST /v1/runs` and `POST /v1/runs/{id}/messages` refuse to
//! create one ([`refuse_reserved`], rule `run.chat_namespace`). A chat run's
//! `run.started` records `"chat": {"id": "x", "n": n}` (set with
//! `RunRequest::chat_run`); the chat continues only a stored run that
//! carries its own mark ([`check_owned`], rule `chat.owned_runs`), so a run
//! created under the name any other way (`keel run`, `keel import`, an older
//! daemon) never becomes a conversation's history.

use super::Daemon;
use super::problem::Problem;
use axum::http::StatusCode;
use keel_eventlog::{ChatId, Event, Payload};
use keel_message::RunId;
use keel_observers::{RunStatus, RunSummary};

/// The prefix of every chat run id.
pub const RUN_PREFIX: &str = "chat-";
/// Most runs in one conversation: run `n` exists only for
/// `n <= MAX_CONVERSATION_RUNS`.
pub const MAX_CONVERSATION_RUNS: u64 = 10_000;

/// The run id of a conversation's `n`th run.
pub fn run_name(id: &ChatId, n: u64) -> String {
    format!("{RUN_PREFIX}{id}-{n}")
}

/// The prefix of conversation `id`'s run ids.
fn conversation_prefix(id: &ChatId) -> String {
    format!("{RUN_PREFIX}{id}-")
}

/// The `n` of `run_id` if it is a run of the conversation with `prefix`:
/// digits only, no leading zero (the rule of
/// `JournalReader::last_numbered_run`). A number past `u64` reads as
/// `u64::MAX`, which is past every bound.
fn number_of(run_id: &str, prefix: &str) -> Option<u64> {
    let digits = run_id.strip_prefix(prefix)?;
    let canonical = !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    canonical.then(|| digits.parse().unwrap_or(u64::MAX))
}

/// A conversation's last run: the live or stored run with the greatest
/// number.
#[derive(Debug, Clone)]
pub struct LastRun {
    /// Its number.
    pub n: u64,
    /// Whether this daemon's engine runs it now.
    pub live: bool,
    /// The journal's row, once it has one.
    pub stored: Option<RunSummary>,
}

impl LastRun {
    /// Its stored status, if stored.
    pub fn status(&self) -> Option<RunStatus> {
        self.stored.as_ref().map(|s| s.status)
    }

    /// Whether it is running here or, by the journal, elsewhere (another
    /// daemon on the same journal).
    pub fn running(&self) -> bool {
        self.live || self.status() == Some(RunStatus::Running)
    }
}

/// The conversation's last run: the greatest number among this daemon's
/// live runs and the journal's runs (one indexed range query,
/// `JournalReader::last_numbered_run`).
pub async fn last_run(daemon: &Daemon, id: &ChatId) -> Result<Option<LastRun>, Problem> {
    let prefix = conversation_prefix(id);
    let live = daemon
        .engine
        .live_run_ids()
        .iter()
        .filter_map(|run| number_of(run.as_str(), &prefix))
        .max();
    let lookup = prefix.clone();
    let stored = daemon
        .read(move |r| r.last_numbered_run(&lookup, None))
        .await?
        .and_then(|s| number_of(s.run_id.as_str(), &prefix).map(|n| (n, s)));
    Ok(Some(match (live, stored) {
        (Some(n), stored) if stored.as_ref().is_none_or(|(m, _)| n >= *m) => LastRun {
            n,
            live: true,
            stored: stored.filter(|(m, _)| *m == n).map(|(_, s)| s),
        },
        (_, Some((n, s))) => LastRun {
            n,
            live: false,
            stored: Some(s),
        },
        (_, None) => return Ok(None),
    }))
}

/// The number of the conversation's last completed run, if any.
pub async fn last_completed(daemon: &Daemon, id: &ChatId) -> Result<Option<u64>, Problem> {
    let prefix = conversation_prefix(id);
    let lookup = prefix.clone();
    let found = daemon
        .read(move |r| r.last_numbered_run(&lookup, Some(RunStatus::Completed)))
        .await?;
    Ok(found.and_then(|s| number_of(s.run_id.as_str(), &prefix)))
}

/// The run a conversation's next user message starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRun {
    /// Its number.
    pub n: u64,
    /// The completed run it continues; `None` starts from the agent's
    /// messages.
    pub previous: Option<u64>,
}

/// The run after `last` (the conversation's last run, [`last_run`]): 409
/// while `last` is running or at the bound. The history is the last
/// completed run's, and only the chat's own run is continued
/// ([`check_owned`]); with none completed, the next run starts from the
/// agent's messages, as run 1 does.
pub async fn next_run(
    daemon: &Daemon,
    id: &ChatId,
    last: Option<LastRun>,
) -> Result<NextRun, Problem> {
    let Some(last) = last else {
        return Ok(NextRun {
            n: 1,
            previous: None,
        });
    };
    if last.running() {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "conversation-busy",
            "The conversation's run is still live",
            "post the next message once the run has ended, or answer its approvals",
        )
        .with("run_id", run_name(id, last.n)));
    }
    if last.n >= MAX_CONVERSATION_RUNS {
        return Err(conversation_full(id, last.n));
    }
    let previous = last_completed(daemon, id).await?;
    if let Some(p) = previous {
        check_owned(daemon, id, p).await?;
    }
    Ok(NextRun {
        n: last.n + 1,
        previous,
    })
}

/// 409 for a conversation at its bound: run `n` is its last possible run.
pub fn conversation_full(id: &ChatId, last: u64) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "conversation-full",
        "The conversation has its most runs",
        format!(
            "a conversation has at most {MAX_CONVERSATION_RUNS} runs (bound \
             max_conversation_runs); start a new conversation"
        ),
    )
    .with("bound", "max_conversation_runs")
    .with("max_conversation_runs", MAX_CONVERSATION_RUNS)
    .with("run_id", run_name(id, last))
}

/// Refuses, before any side effect, a run id in the chat namespace for a
/// run `POST /v1/chat` does not start: 409 `run-id-reserved`, rule
/// `run.chat_namespace`.
pub fn refuse_reserved(run_id: &RunId) -> Result<(), Problem> {
    if !run_id.as_str().starts_with(RUN_PREFIX) {
        return Ok(());
    }
    Err(Problem::new(
        StatusCode::CONFLICT,
        "run-id-reserved",
        "Run id reserved for chat conversations",
        format!(
            "run ids starting with `{RUN_PREFIX}` name the runs of POST /v1/chat \
             conversations; give the scenario another run_id, or leave it out \
             (rule run.chat_namespace)"
        ),
    )
    .with("run_id", run_id.as_str())
    .with("path", "run_id")
    .with("rule", "run.chat_namespace"))
}

/// Checks that the stored run `n` of conversation `id` is the chat's own:
/// its `run.started` records `chat: {id, n}`. Else 409
/// `conversation-foreign`, rule `chat.owned_runs`.
pub async fn check_owned(daemon: &Daemon, id: &ChatId, n: u64) -> Result<(), Problem> {
    let run = run_name(id, n);
    let lookup = run.clone();
    let first = daemon.read(move |r| r.events_after(&lookup, 0, 1)).await?;
    let owned = first
        .first()
        .and_then(|line| Event::decode(line).ok())
        .is_some_and(|event| match event.payload() {
            Ok(Payload::RunStarted(started)) => started
                .chat
                .is_some_and(|chat| chat.id == *id && chat.n == n),
            _ => false,
        });
    if owned {
        return Ok(());
    }
    Err(Problem::new(
        StatusCode::CONFLICT,
        "conversation-foreign",
        "The conversation's run was not started by the chat",
        "the stored run's run.started carries no chat mark for this conversation \
         and number, so its history is not continued (rule chat.owned_runs); \
         start a new conversation",
    )
    .with("run_id", run)
    .with("rule", "chat.owned_runs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_number_is_digits_without_a_leading_zero() {
        let p = "chat-x-";
        assert_eq!(number_of("chat-x-1", p), Some(1));
        assert_eq!(number_of("chat-x-10000", p), Some(10_000));
        assert_eq!(
            number_of("chat-x-99999999999999999999999", p),
            Some(u64::MAX)
        );
        for other in [
            "chat-x-",
            "chat-x-01",
            "chat-x-1-2",
            "chat-x-1a",
            "chat-y-1",
        ] {
            assert_eq!(number_of(other, p), None, "{other}");
        }
    }

    #[test]
    fn only_chat_ids_are_reserved() {
        let id = |s: &str| RunId::parse(s).unwrap();
        assert!(refuse_reserved(&id("run_1")).is_ok());
        assert!(refuse_reserved(&id("chatty-1")).is_ok());
        let p = refuse_reserved(&id("chat-x-1")).unwrap_err();
        assert_eq!(p.status(), StatusCode::CONFLICT);
        assert_eq!(p.to_json()["rule"], "run.chat_namespace");
    }
}
