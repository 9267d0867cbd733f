//! The compaction wire: `model.started`'s `purpose`, `context.compacted`
//! (a range of the history replaced by a summary) and
//! `context.compaction_failed` (a compaction that changed nothing).

use super::{ErrorText, Extra};
use keel_message::{Message, MessageId, OperationId};
use serde::{Deserialize, Serialize};

keel_stream::wire_enum! {
    /// What a model call is for: `model.started`'s `purpose` member.
    /// Absent, the call is its turn's answer call; present, it is not, and
    /// the history fold never makes its text an assistant message.
    /// Extensible: a value this version does not know decodes as
    /// [`ModelPurpose::Unknown`] and, like every purpose, is not the answer.
    pub enum ModelPurpose ("model purpose") {
        /// A compaction call: its text is the summary a
        /// `context.compacted` records.
        Compaction => "compaction",
    }
}

keel_stream::wire_enum! {
    /// How the token estimates of a compaction were made. Extensible.
    pub enum EstimatorKind ("estimator kind") {
        /// The last answer call's reported usage, plus the bytes of the
        /// messages added since divided by `bytes_per_token`.
        Usage => "usage",
        /// The canonical JSON bytes of the request divided by
        /// `bytes_per_token`.
        Bytes => "bytes",
    }
}

/// `context.compacted`'s `estimator`: how `tokens_before` and
/// `tokens_after` were estimated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEstimator {
    /// The method.
    pub kind: EstimatorKind,
    /// The byte ratio used for what usage did not cover (at least 1).
    pub bytes_per_token: u32,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `context.compacted`'s `replaces`: a contiguous range of the history as
/// it stood before the compaction, `first..=last`, `count` messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedRange {
    /// The id of the range's first message.
    pub first: MessageId,
    /// The id of the range's last message.
    pub last: MessageId,
    /// How many messages the range holds (at least 1; with 1, `first`
    /// and `last` are the same id).
    pub count: u64,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `context.compacted`: inside a turn, right after the compaction call's
/// `model.completed`. From here on the history holds `summary` in place of
/// the `replaces` range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextCompacted {
    /// The enclosing turn.
    pub turn: u64,
    /// The compaction call that produced the summary.
    pub operation_id: OperationId,
    /// The range of the history the summary replaces.
    pub replaces: CompactedRange,
    /// The summary: a user message whose id is
    /// [`compaction_message_id`](crate::history::compaction_message_id).
    pub summary: Message,
    /// The estimate of the model context before the compaction, in tokens.
    pub tokens_before: u64,
    /// The estimate after it.
    pub tokens_after: u64,
    /// How both were estimated.
    pub estimator: TokenEstimator,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

keel_stream::wire_enum! {
    /// Why a compaction changed nothing: `context.compaction_failed`'s
    /// `rule`, written on the wire as `compaction.<value>`
    /// ([`CompactionRule::rule_name`]). Extensible.
    pub enum CompactionRule ("compaction rule") {
        /// The compaction call failed after the retry policy.
        ModelFailed => "model_failed",
        /// The summary's estimate is not below the range's.
        NotSmaller => "not_smaller",
        /// The compaction answer called a tool.
        ToolCall => "tool_call",
        /// The compaction answer held no text.
        Empty => "empty",
    }
}

/// The namespace every [`CompactionRule`] is written in.
const RULE_PREFIX: &str = "compaction.";

impl CompactionRule {
    /// The rule's full name, as written: `compaction.not_smaller`, …
    pub fn rule_name(&self) -> String {
        format!("{RULE_PREFIX}{}", self.as_str())
    }
}

/// `compaction.<value>` on the wire: anything outside the namespace is a
/// schema error (the message names the rule, never the value).
mod rule_wire {
    use super::{CompactionRule, RULE_PREFIX};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(rule: &CompactionRule, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rule.rule_name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CompactionRule, D::Error> {
        let name = String::deserialize(d)?;
        let value = name.strip_prefix(RULE_PREFIX).ok_or_else(|| {
            serde::de::Error::custom(
                "rule is not in the compaction. namespace (rule compaction.rule_name)",
            )
        })?;
        CompactionRule::from_wire(value).map_err(serde::de::Error::custom)
    }
}

/// `context.compaction_failed`: inside a turn, after the compaction call's
/// terminal or after a refused summary. The history is unchanged by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextCompactionFailed {
    /// The enclosing turn.
    pub turn: u64,
    /// The compaction call (its last attempt).
    pub operation_id: OperationId,
    /// Why nothing was compacted.
    #[serde(with = "rule_wire")]
    pub rule: CompactionRule,
    /// What happened, screened and bounded.
    pub detail: ErrorText,
    /// The estimate of the model context before the attempt, in tokens.
    pub tokens_before: u64,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}
