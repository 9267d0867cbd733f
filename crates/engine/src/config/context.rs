//! `ContextPolicy`: when the model context is compacted (a threshold of
//! the window), what is kept verbatim, how tokens are estimated, and the
//! instruction the compaction call is given; with its rules.

use super::{LimitError, LimitField};

/// The instruction a compaction call gets when the policy names none.
pub const DEFAULT_COMPACTION_INSTRUCTION: &str = "Summarize the conversation above so it can \
replace it in your context. Keep every fact, decision, open question, file name, identifier \
and tool result still needed to continue the task; drop repetition and pleasantries. Answer \
with the summary only, as plain text, without calling any tool.";

/// The longest instruction a policy may carry, in bytes: it is sent with
/// every compaction call.
pub const MAX_COMPACTION_INSTRUCTION_BYTES: usize = 16 * 1024;

/// When and how a run compacts its model context (`limits.context` in a
/// scenario). Before every answer model call, inside tool loops too, the
/// engine estimates the request in tokens; at `compact_at × window_tokens`
/// or more it replaces the oldest messages (all but the system messages
/// and the last `keep_turns` turns) by a summary the model writes.
///
/// ```
/// use keel_engine::{ContextPolicy, EngineLimits, LimitField};
/// let policy = ContextPolicy::new(8_000);
/// assert_eq!(policy.threshold_tokens(), 6_400);
/// let limits = EngineLimits { context: Some(ContextPolicy { compact_at: 0.0, ..policy }), ..EngineLimits::default() };
/// assert_eq!(limits.check().unwrap_err().field(), LimitField::ContextCompactAt);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ContextPolicy {
    /// The model's context window, in tokens (at least 1). A request
    /// estimated at this or more is never sent.
    pub window_tokens: u64,
    /// The fraction of the window at which compaction starts (0 < x ≤ 1).
    /// Default 0.8.
    pub compact_at: f64,
    /// How many of the last turns are kept verbatim (a turn: a user
    /// input, or an assistant message with its tool results). Default 2.
    pub keep_turns: usize,
    /// Bytes per token for what provider usage does not cover (1 to 16).
    /// Default 4.
    pub bytes_per_token: u32,
    /// The instruction sent after the messages to summarize (not empty, at
    /// most [`MAX_COMPACTION_INSTRUCTION_BYTES`]). Default
    /// [`DEFAULT_COMPACTION_INSTRUCTION`].
    pub instruction: String,
}

impl ContextPolicy {
    /// The default policy for a window of `window_tokens`.
    pub fn new(window_tokens: u64) -> ContextPolicy {
        ContextPolicy {
            window_tokens,
            compact_at: 0.8,
            keep_turns: 2,
            bytes_per_token: 4,
            instruction: DEFAULT_COMPACTION_INSTRUCTION.to_owned(),
        }
    }

    /// The estimate at which compaction starts: `compact_at ×
    /// window_tokens`, rounded down, at least 1.
    pub fn threshold_tokens(&self) -> u64 {
        // Exact below 2^53; a larger window is far beyond any model's.
        let threshold = (self.window_tokens as f64 * self.compact_at).floor() as u64;
        threshold.clamp(1, self.window_tokens.max(1))
    }

    /// The rules [`EngineLimits::check`](super::EngineLimits::check)
    /// applies to `limits.context`.
    pub(super) fn check(&self) -> Result<(), LimitError> {
        let invalid = |field, value: String, rule| Err(LimitError { field, value, rule });
        if self.window_tokens == 0 {
            return invalid(LimitField::ContextWindowTokens, "0".into(), "at least 1");
        }
        if !(self.compact_at.is_finite() && self.compact_at > 0.0 && self.compact_at <= 1.0) {
            return invalid(
                LimitField::ContextCompactAt,
                self.compact_at.to_string(),
                "a finite number with 0 < x <= 1",
            );
        }
        if !(1..=16).contains(&self.bytes_per_token) {
            return invalid(
                LimitField::ContextBytesPerToken,
                self.bytes_per_token.to_string(),
                "in 1..=16",
            );
        }
        let instruction = self.instruction.trim();
        if instruction.is_empty() || self.instruction.len() > MAX_COMPACTION_INSTRUCTION_BYTES {
            return invalid(
                LimitField::ContextInstruction,
                format!("{} bytes", self.instruction.len()),
                "not empty, at most 16384 bytes",
            );
        }
        Ok(())
    }
}
