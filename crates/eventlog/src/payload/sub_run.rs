//! The sub-run wire: a child run's `run.started` `parent` member
//! ([`ParentLink`]), the parent's `tool.sub_run` event
//! ([`SubRunStarted`]) and the `sub_run` member of the parent's tool
//! terminal ([`SubRunRef`]). The three name each other, so a reader of the
//! store can walk a run tree both ways and check it (`crate::links`).

use super::{Cause, Extra};
use keel_message::{CallId, RunId};
use serde::{Deserialize, Serialize};

/// The member of a tool terminal (`tool.completed`, `tool.failed`,
/// `tool.cancelled`) that names the child run the call started.
pub const SUB_RUN: &str = "sub_run";

/// `run.started`'s `parent` member: the run and the tool call that started
/// this run as a sub-run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent run.
    pub run_id: RunId,
    /// The parent's tool call this run answers.
    pub call_id: CallId,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

impl ParentLink {
    /// A child of `run_id`'s call `call_id`.
    pub fn new(run_id: RunId, call_id: CallId) -> ParentLink {
        ParentLink {
            run_id,
            call_id,
            extra: Extra::new(),
        }
    }
}

/// `tool.sub_run`: committed in the parent's log, inside the open tool
/// scope of `call_id`, before the child's `run.started` (so a child never
/// exists without its parent having recorded it first). At most one per
/// call (rule `lifecycle.sub_run_scope`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubRunStarted {
    /// The enclosing turn.
    pub turn: u64,
    /// The tool call that starts the child.
    pub call_id: CallId,
    /// The child run.
    pub run_id: RunId,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The `sub_run` member of a tool terminal: the child run the call started
/// and, on `tool.failed`, the child's `run.failed` cause.
///
/// ```
/// use keel_eventlog::{Cause, Extra, SubRunRef, SUB_RUN};
/// use keel_message::RunId;
/// let child = SubRunRef { run_id: RunId::parse("run_child")?, cause: None };
/// let mut extra = Extra::new();
/// child.insert_into(&mut extra);
/// assert_eq!(extra[SUB_RUN], serde_json::json!({"run_id": "run_child"}));
/// assert_eq!(SubRunRef::from_extra(&extra), Some(child));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// Members it does not know are ignored here and kept in the terminal's
/// `extra`, so a newer writer's additions still round-trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubRunRef {
    /// The child run.
    pub run_id: RunId,
    /// The child's `run.failed` cause (on `tool.failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

impl SubRunRef {
    /// A reference to `run_id`, without a cause.
    pub fn new(run_id: RunId) -> SubRunRef {
        SubRunRef {
            run_id,
            cause: None,
        }
    }

    /// Sets the [`SUB_RUN`] member of a tool terminal's `extra`.
    pub fn insert_into(&self, extra: &mut Extra) {
        // A struct of a run id and a `Cause` (strings, integers and JSON
        // values) always converts to a JSON value.
        if let Ok(value) = serde_json::to_value(self) {
            extra.insert(SUB_RUN.to_owned(), value);
        }
    }

    /// The [`SUB_RUN`] member of a tool terminal's `extra`: `None` when it
    /// is absent or malformed ([`SubRunRef::parse_extra`] tells them
    /// apart; decoding a tool terminal refuses a malformed one, rule
    /// `payload.sub_run`).
    pub fn from_extra(extra: &Extra) -> Option<SubRunRef> {
        SubRunRef::parse_extra(extra).ok().flatten()
    }

    /// The [`SUB_RUN`] member of `extra`: `Ok(None)` when absent, an error
    /// naming the member (never its value) when malformed.
    pub fn parse_extra(extra: &Extra) -> Result<Option<SubRunRef>, super::PayloadError> {
        let Some(value) = extra.get(SUB_RUN) else {
            return Ok(None);
        };
        serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| super::PayloadError::SubRun {
                detail: keel_message::decode::elide_values(&e.to_string()),
            })
    }
}
