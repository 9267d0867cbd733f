//! The run's budget boundaries: the check before each model call (after
//! the tree's model gate admits it) and before each tool call, and the
//! charge of each model call's reported usage. A run with no budget in
//! its chain has no account, and every step here is a no-op.

use super::Runner;
use super::turn::TurnFailure;
use crate::budget::{Boundary, Breach};
use crate::error::FailureCause;
use keel_eventlog::ErrorText;
use keel_stream::Usage;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// A model call admitted by the budget: hold it until the call's terminal
/// is recorded (it holds the tree's model gate when a token limit is in
/// force).
pub(super) struct Admitted {
    _gate: Option<OwnedMutexGuard<()>>,
}

impl Runner {
    /// Waits for the model gate, then checks the budget; a breach fails
    /// the turn ([`budget_failure`]) before `model.started`.
    pub(super) async fn admit_model_call(&self) -> Result<Admitted, Breach> {
        let Some(account) = &self.budget else {
            return Ok(Admitted { _gate: None });
        };
        let gate = account.admit_model_call().await;
        account.check(Boundary::ModelCall, Instant::now())?;
        Ok(Admitted { _gate: gate })
    }

    /// Checks the budget before a tool call and counts the call; a breach
    /// fails the turn ([`budget_failure`]) before `tool.started`.
    pub(super) fn admit_tool_call(&self) -> Result<(), Breach> {
        match &self.budget {
            Some(account) => account.check(Boundary::ToolCall, Instant::now()),
            None => Ok(()),
        }
    }

    /// Charges a model call's reported usage up the budget chain.
    pub(super) fn charge_usage(&self, usage: &Usage) {
        if let Some(account) = &self.budget {
            account.charge_tokens(usage.input_tokens(), usage.output_tokens());
        }
    }
}

/// The turn's (and run's) failure for a spent budget member.
pub(super) fn budget_failure(breach: Breach) -> TurnFailure {
    let cause = FailureCause::Budget {
        member: breach.member,
        spent: breach.spent,
        limit: breach.limit,
    };
    TurnFailure {
        error: ErrorText::new(&cause.to_string()),
        event_cause: Some(breach.event_cause()),
        cause,
    }
}
