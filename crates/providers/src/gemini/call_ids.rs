//! Keel call ids for Gemini function calls.
//!
//! A Gemini `functionCall` part usually has no id: the API pairs a
//! `functionResponse` with its call by name and position. Keel needs a
//! call id that is unique in the history, so the adapter makes one:
//!
//! - a `functionCall` that carries a non-empty `id` (Vertex AI and some
//!   newer models send one) keeps it;
//! - otherwise the `n`-th call of the stream without one (from 0) is
//!   `call_{operation id}_{n}`, e.g. `call_op_3_0`, with `n` moved past
//!   any id the request's history already holds.
//!
//! So ids are stable (the same request and stream give the same ids),
//! unique within the stream and against the history (the checks of
//! `keel_message::ModelRequest` and the stream validator), and unique
//! within a run (the engine issues each model call of a run its own
//! operation id, retries included).
//!
//! On the next request the id travels back twice: as `functionCall.id` on
//! the call and as `functionResponse.id` on its result, next to the
//! `name` the API matches by (looked up from the call in the history).

use keel_message::{ModelRequest, Part};
use std::collections::BTreeSet;

/// Issues the call ids of one stream.
#[derive(Debug)]
pub(crate) struct CallIds {
    operation_id: String,
    /// Every call id of the history, and every id issued so far.
    used: BTreeSet<String>,
    next: u64,
}

impl CallIds {
    /// The ids for a stream answering `request`.
    pub(crate) fn for_request(request: &ModelRequest) -> CallIds {
        let used = request
            .history()
            .iter()
            .flat_map(|message| message.parts())
            // Every result's id is a call's (rule call_id.orphan_result).
            .filter_map(|part| match part {
                Part::ToolCall(call) => Some(call.call_id().as_str().to_owned()),
                _ => None,
            })
            .collect();
        CallIds::new(request.operation_id().as_str(), used)
    }

    /// The ids for operation `operation_id`, avoiding `used`.
    pub(crate) fn new(operation_id: &str, used: BTreeSet<String>) -> CallIds {
        CallIds {
            operation_id: operation_id.to_owned(),
            used,
            next: 0,
        }
    }

    /// The id of the next call: `wire_id` when the part carried a
    /// non-empty one, else the next free `call_{operation id}_{n}`.
    pub(crate) fn issue(&mut self, wire_id: Option<&str>) -> String {
        if let Some(id) = wire_id.filter(|id| !id.is_empty()) {
            self.used.insert(id.to_owned());
            return id.to_owned();
        }
        loop {
            let id = format!("call_{}_{}", self.operation_id, self.next);
            self.next += 1;
            if self.used.insert(id.clone()) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(used: &[&str], wire: &[Option<&str>], expected: &[&str]) {
        let used = used.iter().map(|s| (*s).to_owned()).collect();
        let mut ids = CallIds::new("op_2", used);
        let issued: Vec<String> = wire.iter().map(|w| ids.issue(*w)).collect();
        assert_eq!(issued, expected, "{wire:?}");
    }

    #[test]
    fn ids_are_stable_unique_and_skip_the_history() {
        check(&[], &[None, None], &["call_op_2_0", "call_op_2_1"]);
        // A server id is kept; an empty one is not an id.
        check(
            &[],
            &[Some("fc-9"), Some(""), None],
            &["fc-9", "call_op_2_0", "call_op_2_1"],
        );
        // Ids the history holds (an earlier run's op_2) are skipped.
        check(
            &["call_op_2_0", "call_op_2_2"],
            &[None, None, None],
            &["call_op_2_1", "call_op_2_3", "call_op_2_4"],
        );
    }
}
