//! Which scope an event belongs to ([`ScopeKey`]) and what it does to it
//! ([`Transition`]): the vocabulary payloads describe themselves in and the
//! lifecycle tracker checks.

use crate::kind::{Phase, Scope};
use keel_message::{CallId, InteractionId, OperationId};
use std::fmt;

/// Which scope an event opens or closes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKey {
    /// The run (one per log).
    Run,
    /// A turn, by number.
    Turn(u64),
    /// A model call attempt, inside a turn.
    Model {
        /// The enclosing turn.
        turn: u64,
        /// The attempt's operation id.
        operation_id: OperationId,
    },
    /// A tool call, inside a turn.
    Tool {
        /// The enclosing turn.
        turn: u64,
        /// The call id.
        call_id: CallId,
    },
    /// An interaction, inside a turn.
    Interaction {
        /// The enclosing turn.
        turn: u64,
        /// The interaction id.
        interaction_id: InteractionId,
    },
}

impl ScopeKey {
    /// The scope kind.
    pub fn scope(&self) -> Scope {
        match self {
            ScopeKey::Run => Scope::Run,
            ScopeKey::Turn(_) => Scope::Turn,
            ScopeKey::Model { .. } => Scope::Model,
            ScopeKey::Tool { .. } => Scope::Tool,
            ScopeKey::Interaction { .. } => Scope::Interaction,
        }
    }

    /// The key of the directly enclosing scope.
    pub fn parent(&self) -> Option<ScopeKey> {
        match self {
            ScopeKey::Run => None,
            ScopeKey::Turn(_) => Some(ScopeKey::Run),
            ScopeKey::Model { turn, .. }
            | ScopeKey::Tool { turn, .. }
            | ScopeKey::Interaction { turn, .. } => Some(ScopeKey::Turn(*turn)),
        }
    }
}

impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeKey::Run => f.write_str("run"),
            ScopeKey::Turn(n) => write!(f, "turn {n}"),
            ScopeKey::Model { turn, operation_id } => {
                write!(f, "model {operation_id} (turn {turn})")
            }
            ScopeKey::Tool { turn, call_id } => write!(f, "tool {call_id} (turn {turn})"),
            ScopeKey::Interaction {
                turn,
                interaction_id,
            } => write!(f, "interaction {interaction_id} (turn {turn})"),
        }
    }
}

/// What an event does to the lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Opens or closes a scope.
    Lifecycle(ScopeKey, Phase),
    /// Belongs to an open scope without changing it (a text delta or tool
    /// call belongs to its model call).
    Within(ScopeKey),
    /// Affects no scope (extension kinds). Still refused after the run ended.
    None,
}
