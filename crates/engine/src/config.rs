//! Engine limits and the retry policy: `EngineLimits` (turns, parallel
//! tools, timeouts, the closing deadline) with `validate` and its
//! `LimitError`, `MIN_CLOSING_DEADLINE`, `RetryPolicy` (attempts and
//! backoff, never past `max_backoff`) and `PartialRetry`.

use std::time::Duration;

mod context;
pub use context::{
    ContextPolicy, DEFAULT_COMPACTION_INSTRUCTION, MAX_COMPACTION_INSTRUCTION_BYTES,
};

/// What to do when a model call fails after yielding output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartialRetry {
    /// Never retry a partial failure (the default): part of the answer was
    /// already recorded, and a silent retry would present a different
    /// answer as if it were the same one.
    #[default]
    Never,
    /// Restart the call as a new model scope. The discarded partial output
    /// stays in the log under the failed attempt.
    Restart,
}

/// When and how failed model calls are retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Most attempts per turn, the first included. Default 3.
    pub max_attempts: u32,
    /// Backoff before the first retry. Default 200 ms.
    pub initial_backoff: Duration,
    /// The longest wait before a retry. Default 10 s. A provider that asks
    /// for a longer wait (retry-after) is not retried: the failure stands.
    pub max_backoff: Duration,
    /// Growth per retry. Default 2.0.
    pub multiplier: f64,
    /// Fraction of each backoff that is randomized (0 = none, 1 = full
    /// jitter). Default 0.5.
    pub jitter: f64,
    /// Partial failures. Default [`PartialRetry::Never`].
    pub partial: PartialRetry,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.5,
            partial: PartialRetry::Never,
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait before attempt `attempt + 1` (attempt counts from 1),
    /// with jitter drawn from `seed`, and never less than a provider's
    /// retry-after; `None` when that retry-after is longer than
    /// `max_backoff` (the policy will not wait that long, so no retry).
    ///
    /// ```
    /// use keel_engine::RetryPolicy;
    /// use std::time::Duration;
    /// let policy = RetryPolicy::default();
    /// assert!(policy.backoff(1, 7, None).unwrap() <= Duration::from_millis(200));
    /// assert_eq!(policy.backoff(1, 7, Some(Duration::from_secs(3))), Some(Duration::from_secs(3)));
    /// assert_eq!(policy.backoff(1, 7, Some(Duration::from_secs(3600))), None);
    /// ```
    pub fn backoff(
        &self,
        attempt: u32,
        seed: u64,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        let exp = self
            .multiplier
            .max(1.0)
            .powi(attempt.saturating_sub(1) as i32);
        let base = self.initial_backoff.as_secs_f64() * exp;
        let capped = base.min(self.max_backoff.as_secs_f64()).max(0.0);
        let jitter = self.jitter.clamp(0.0, 1.0);
        // xorshift64*: deterministic per seed, so runs are reproducible.
        let mut x =
            seed ^ 0x9E37_79B9_7F4A_7C15 ^ u64::from(attempt).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        let wait = capped * (1.0 - jitter * unit);
        let wait = Duration::from_secs_f64(wait);
        match retry_after {
            Some(after) if after > self.max_backoff => None,
            Some(after) => Some(after.max(wait)),
            None => Some(wait),
        }
    }
}

/// The floor of [`EngineLimits::closing_deadline`]: enough for a local
/// journal to take a run's closing terminals (a few fsyncs) under load.
pub const MIN_CLOSING_DEADLINE: Duration = Duration::from_millis(500);

/// Which limit a [`LimitError`] names. Exhaustive on purpose: a host that
/// maps limits to its own configuration names (the scenario loader maps
/// them to JSON paths) gets a compile error, not a silent default, when a
/// limit is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitField {
    /// [`EngineLimits::max_turns`].
    MaxTurns,
    /// [`EngineLimits::max_tool_calls_per_turn`].
    MaxToolCallsPerTurn,
    /// [`EngineLimits::max_parallel_tools`].
    MaxParallelTools,
    /// [`EngineLimits::model_call_timeout`].
    ModelCallTimeout,
    /// [`EngineLimits::tool_call_timeout`].
    ToolCallTimeout,
    /// [`EngineLimits::closing_deadline`].
    ClosingDeadline,
    /// [`EngineLimits::approval_timeout`].
    ApprovalTimeout,
    /// [`RetryPolicy::max_attempts`].
    RetryMaxAttempts,
    /// [`RetryPolicy::initial_backoff`] (against `max_backoff`).
    RetryInitialBackoff,
    /// [`RetryPolicy::multiplier`].
    RetryMultiplier,
    /// [`RetryPolicy::jitter`].
    RetryJitter,
    /// [`ContextPolicy::window_tokens`].
    ContextWindowTokens,
    /// [`ContextPolicy::compact_at`].
    ContextCompactAt,
    /// [`ContextPolicy::bytes_per_token`].
    ContextBytesPerToken,
    /// [`ContextPolicy::instruction`].
    ContextInstruction,
}

impl LimitField {
    /// The field's path in [`EngineLimits`], e.g. `max_turns` or
    /// `retry.jitter`.
    pub fn name(self) -> &'static str {
        match self {
            LimitField::MaxTurns => "max_turns",
            LimitField::MaxToolCallsPerTurn => "max_tool_calls_per_turn",
            LimitField::MaxParallelTools => "max_parallel_tools",
            LimitField::ModelCallTimeout => "model_call_timeout",
            LimitField::ToolCallTimeout => "tool_call_timeout",
            LimitField::ClosingDeadline => "closing_deadline",
            LimitField::ApprovalTimeout => "approval_timeout",
            LimitField::RetryMaxAttempts => "retry.max_attempts",
            LimitField::RetryInitialBackoff => "retry.initial_backoff",
            LimitField::RetryMultiplier => "retry.multiplier",
            LimitField::RetryJitter => "retry.jitter",
            LimitField::ContextWindowTokens => "context.window_tokens",
            LimitField::ContextCompactAt => "context.compact_at",
            LimitField::ContextBytesPerToken => "context.bytes_per_token",
            LimitField::ContextInstruction => "context.instruction",
        }
    }
}

impl std::fmt::Display for LimitField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit that makes no sense (zero turns, zero parallelism, a closing
/// deadline under its floor, a shrinking backoff, …): which field, its
/// value, the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limits.{field} is {value} (rule engine.limits: {rule})")]
pub struct LimitError {
    field: LimitField,
    value: String,
    rule: &'static str,
}

impl LimitError {
    /// The field.
    pub fn field(&self) -> LimitField {
        self.field
    }
    /// The offending value, rendered.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// What the field must be.
    pub fn rule(&self) -> &'static str {
        self.rule
    }
}

/// Bounds on what one run may do.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineLimits {
    /// Most turns per run. Default 16.
    pub max_turns: u64,
    /// Most tool calls the model may make in one turn. Default 32.
    pub max_tool_calls_per_turn: usize,
    /// Most tool calls running at once within a turn. Default 4.
    pub max_parallel_tools: usize,
    /// Time for one model call (start to terminal). Default 120 s.
    pub model_call_timeout: Duration,
    /// Time for one tool call, unless its policy says otherwise. Default 60 s.
    pub tool_call_timeout: Duration,
    /// How long cancellation waits for observers to take the closing
    /// terminals. Default 2 s; at least [`MIN_CLOSING_DEADLINE`], so no
    /// configuration can store a cancelled run without its terminals.
    pub closing_deadline: Duration,
    /// How long an approval may stay unanswered before the interaction
    /// fails (`interaction.failed`, the tool is not run). Default 10 min.
    pub approval_timeout: Duration,
    /// Retries of failed model calls (compaction calls included).
    pub retry: RetryPolicy,
    /// When and how the model context is compacted. `None` (the default)
    /// never compacts.
    pub context: Option<ContextPolicy>,
    /// How deep sub-runs may nest: a run started by the host has depth 0,
    /// a child of it depth 1. An agent tool call that would start a child
    /// deeper than this fails (rule `limits.max_sub_run_depth`). The bound
    /// in force is the least of the run's and every ancestor's, so a child
    /// cannot widen it. 0 allows no sub-runs. Default 3.
    pub max_sub_run_depth: u32,
    /// Most children one run may start (rule `limits.max_sub_runs`); the
    /// least of the run's and every ancestor's applies. 0 allows none.
    /// Default 16.
    pub max_sub_runs: u32,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            max_turns: 16,
            max_tool_calls_per_turn: 32,
            max_parallel_tools: 4,
            model_call_timeout: Duration::from_secs(120),
            tool_call_timeout: Duration::from_secs(60),
            closing_deadline: Duration::from_secs(2),
            approval_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            context: None,
            max_sub_run_depth: 3,
            max_sub_runs: 16,
        }
    }
}

impl EngineLimits {
    /// Checks every field against its rule and, where the log bounds it,
    /// against `log` (each running tool or approval is a scope beside the
    /// run and the turn): [`EngineLimits::check`], then the log's bound.
    ///
    /// ```
    /// use keel_engine::{EngineLimits, LimitField};
    /// use std::time::Duration;
    /// let log = keel_eventlog::LogConfig::default();
    /// assert!(EngineLimits::default().validate(&log).is_ok());
    /// let low = EngineLimits { closing_deadline: Duration::from_millis(1), ..EngineLimits::default() };
    /// assert_eq!(low.validate(&log).unwrap_err().field(), LimitField::ClosingDeadline);
    /// ```
    pub fn validate(&self, log: &keel_eventlog::LogConfig) -> Result<(), LimitError> {
        self.check()?;
        if self.max_parallel_tools.saturating_add(2) > log.max_open_scopes {
            return Err(LimitError {
                field: LimitField::MaxParallelTools,
                value: self.max_parallel_tools.to_string(),
                rule: "at most log.max_open_scopes - 2",
            });
        }
        Ok(())
    }

    /// Checks every field against its own rule, without a log to bound
    /// them: counts and timeouts at least 1, the closing deadline at least
    /// [`MIN_CLOSING_DEADLINE`], and a retry policy whose backoff grows
    /// (multiplier ≥ 1), whose jitter is a fraction (0 to 1) and whose
    /// first wait is at most its longest. The one rule set for engine
    /// limits: a configuration loader calls it and maps [`LimitError::field`]
    /// to its own names.
    ///
    /// ```
    /// use keel_engine::{EngineLimits, LimitField, RetryPolicy};
    /// let jumpy = EngineLimits {
    ///     retry: RetryPolicy { jitter: 1.5, ..RetryPolicy::default() },
    ///     ..EngineLimits::default()
    /// };
    /// assert_eq!(jumpy.check().unwrap_err().field(), LimitField::RetryJitter);
    /// ```
    pub fn check(&self) -> Result<(), LimitError> {
        let invalid = |field, value: String, rule| Err(LimitError { field, value, rule });
        let counts = [
            (LimitField::MaxTurns, self.max_turns == 0),
            (
                LimitField::MaxToolCallsPerTurn,
                self.max_tool_calls_per_turn == 0,
            ),
            (LimitField::MaxParallelTools, self.max_parallel_tools == 0),
            (LimitField::RetryMaxAttempts, self.retry.max_attempts == 0),
        ];
        if let Some((field, _)) = counts.into_iter().find(|(_, zero)| *zero) {
            return invalid(field, "0".into(), "at least 1");
        }
        let timeouts = [
            (LimitField::ModelCallTimeout, self.model_call_timeout),
            (LimitField::ToolCallTimeout, self.tool_call_timeout),
            (LimitField::ApprovalTimeout, self.approval_timeout),
        ];
        if let Some((field, _)) = timeouts.into_iter().find(|(_, d)| d.is_zero()) {
            return invalid(field, "0 ms".into(), "at least 1 ms");
        }
        check_closing_deadline(self.closing_deadline)?;
        self.retry.check()?;
        match &self.context {
            Some(context) => context.check(),
            None => Ok(()),
        }
    }
}

/// Checks a closing deadline (a run's, or the time a host gives its runs
/// to end at shutdown) against [`MIN_CLOSING_DEADLINE`].
///
/// ```
/// use keel_engine::check_closing_deadline;
/// use std::time::Duration;
/// assert!(check_closing_deadline(Duration::from_millis(500)).is_ok());
/// assert!(check_closing_deadline(Duration::from_millis(499)).is_err());
/// ```
pub fn check_closing_deadline(deadline: Duration) -> Result<(), LimitError> {
    if deadline < MIN_CLOSING_DEADLINE {
        return Err(LimitError {
            field: LimitField::ClosingDeadline,
            value: format!("{} ms", deadline.as_millis()),
            rule: "at least 500 ms (MIN_CLOSING_DEADLINE)",
        });
    }
    Ok(())
}

impl RetryPolicy {
    /// The retry rules [`EngineLimits::check`] applies.
    fn check(&self) -> Result<(), LimitError> {
        let invalid = |field, value: String, rule| Err(LimitError { field, value, rule });
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return invalid(
                LimitField::RetryMultiplier,
                self.multiplier.to_string(),
                "a finite number >= 1",
            );
        }
        if !(self.jitter.is_finite() && (0.0..=1.0).contains(&self.jitter)) {
            return invalid(
                LimitField::RetryJitter,
                self.jitter.to_string(),
                "a finite number in 0..=1",
            );
        }
        if self.initial_backoff > self.max_backoff {
            return invalid(
                LimitField::RetryInitialBackoff,
                format!("{} ms", self.initial_backoff.as_millis()),
                "at most retry.max_backoff",
            );
        }
        Ok(())
    }
}
