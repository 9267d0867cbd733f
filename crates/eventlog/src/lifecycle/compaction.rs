//! Where the compaction events may stand: a `context.compacted` right
//! after its compaction call's `model.completed`, a
//! `context.compaction_failed` after its compaction call ended, each at
//! most once per call (rule `lifecycle.compaction_order`).

use super::LifecycleError;
use crate::payload::{ModelPurpose, Payload};
use keel_message::OperationId;
use std::collections::HashSet;

/// The compaction calls of the current turn, as far as the order rule
/// needs them. Forgotten when the next turn starts, so memory is bounded
/// by one turn's calls. A tracker resumed from a snapshot starts empty: a
/// compaction event right after the seam is refused, which a writer never
/// needs (recovery closes scopes; it does not compact).
#[derive(Debug, Clone, Default)]
pub(super) struct CompactionOrder {
    /// Compaction calls started in this turn and still open.
    open: HashSet<OperationId>,
    /// Compaction calls of this turn that ended and have no outcome
    /// event yet.
    ended: HashSet<OperationId>,
    /// The compaction call whose `model.completed` is the last event.
    just_completed: Option<OperationId>,
}

impl CompactionOrder {
    /// Checks that `payload` may follow what was applied.
    pub(super) fn check(&self, payload: &Payload) -> Result<(), LifecycleError> {
        let (operation_id, kind) = match payload {
            Payload::ContextCompacted(p) => {
                if self.just_completed.as_ref() == Some(&p.operation_id) {
                    return Ok(());
                }
                (&p.operation_id, "context.compacted")
            }
            Payload::ContextCompactionFailed(p) => {
                if self.ended.contains(&p.operation_id) {
                    return Ok(());
                }
                (&p.operation_id, "context.compaction_failed")
            }
            _ => return Ok(()),
        };
        Err(LifecycleError::CompactionOrder {
            kind,
            operation_id: operation_id.clone(),
        })
    }

    /// Records what `payload` (checked) changes.
    pub(super) fn apply(&mut self, payload: &Payload) {
        let completed = match payload {
            Payload::TurnStarted(_) => {
                *self = CompactionOrder::default();
                None
            }
            Payload::ModelStarted(p) if p.purpose == Some(ModelPurpose::Compaction) => {
                self.open.insert(p.operation_id.clone());
                None
            }
            Payload::ModelCompleted(p) => self.end(&p.operation_id).then(|| p.operation_id.clone()),
            Payload::ModelFailed(p) => {
                self.end(&p.operation_id);
                None
            }
            Payload::ModelCancelled(p) => {
                self.end(&p.operation_id);
                None
            }
            Payload::ContextCompacted(p) => {
                self.ended.remove(&p.operation_id);
                None
            }
            Payload::ContextCompactionFailed(p) => {
                self.ended.remove(&p.operation_id);
                None
            }
            _ => None,
        };
        self.just_completed = completed;
    }

    /// Moves a compaction call from open to ended; whether it was one.
    fn end(&mut self, operation_id: &OperationId) -> bool {
        let was_open = self.open.remove(operation_id);
        if was_open {
            self.ended.insert(operation_id.clone());
        }
        was_open
    }
}
