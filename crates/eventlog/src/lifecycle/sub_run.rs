//! Where a `tool.sub_run` may stand: inside the open scope of the tool
//! call it names, at most once per call (rule `lifecycle.sub_run_scope`).

use super::LifecycleError;
use crate::payload::Payload;
use crate::scope::ScopeKey;
use keel_message::CallId;
use std::collections::HashSet;

/// The open tool scopes that already recorded their child run. A scope
/// leaves the set when it ends, so the set never outgrows the open scopes.
/// A tracker resumed from a snapshot starts empty: a second link for a
/// call whose first link is before the seam is not seen, which a writer
/// never produces (recovery closes scopes; it does not start children).
#[derive(Debug, Clone, Default)]
pub(super) struct SubRunScope {
    linked: HashSet<ScopeKey>,
}

impl SubRunScope {
    /// Checks that `payload`, if a `tool.sub_run`, names a tool scope in
    /// `open` that has no link yet. Checked before the generic
    /// in-open-scope rule, so a misplaced link names this rule.
    pub(super) fn check(&self, payload: &Payload, open: &[ScopeKey]) -> Result<(), LifecycleError> {
        let Payload::ToolSubRun(p) = payload else {
            return Ok(());
        };
        let key = tool_key(p.turn, &p.call_id);
        if !open.contains(&key) {
            return Err(LifecycleError::SubRunOutsideScope { key });
        }
        if self.linked.contains(&key) {
            return Err(LifecycleError::SecondSubRun { key });
        }
        Ok(())
    }

    /// Records what `payload` (checked) changes.
    pub(super) fn apply(&mut self, payload: &Payload) {
        match payload {
            Payload::ToolSubRun(p) => {
                self.linked.insert(tool_key(p.turn, &p.call_id));
            }
            Payload::ToolCompleted(p) => self.end(p.turn, &p.call_id),
            Payload::ToolFailed(p) => self.end(p.turn, &p.call_id),
            Payload::ToolCancelled(p) => self.end(p.turn, &p.call_id),
            _ => {}
        }
    }

    fn end(&mut self, turn: u64, call_id: &CallId) {
        self.linked.remove(&tool_key(turn, call_id));
    }
}

fn tool_key(turn: u64, call_id: &CallId) -> ScopeKey {
    ScopeKey::Tool {
        turn,
        call_id: call_id.clone(),
    }
}
