//! The assistant message of a model call, built from its items in stream
//! order: the engine feeds it the validated stream, [`super::rebuild`]
//! the recorded events, so both build the same message.

use super::turn_message_id;
use keel_message::{
    Limits, Message, MessageError, OpaqueValue, Part, ProviderTag, Role, RunId, ToolCallPart,
};

/// The assistant message of one model call, as its items arrive.
///
/// The message is a sequence of segments. A reasoning part starts a new
/// segment at the place it closed; within a segment, its text (the deltas
/// joined) comes before its tool calls, as in a message without reasoning.
/// So a stream without reasoning gives the message it always gave (its
/// text, then its tool calls), and a stream with reasoning keeps each
/// reasoning part in its place relative to the text and the tool calls
/// around it: `reasoning, text, call, reasoning, call` stays in that order.
///
/// ```
/// use keel_eventlog::history::AssistantDraft;
/// use keel_message::{CallId, CanonicalJson, Limits, Part, ProviderTag, RunId, ToolCallPart, ToolName};
/// let mut draft = AssistantDraft::default();
/// draft.push_reasoning_delta("The user wants ");
/// draft.push_reasoning_delta("the weather.");
/// draft.end_reasoning(ProviderTag::scripted(), None);
/// draft.push_text("Checking.");
/// let call = ToolCallPart::new_with(
///     CallId::parse("c1")?,
///     ToolName::parse("get_weather")?,
///     CanonicalJson::parse("{}")?,
///     &Limits::default(),
/// )?;
/// draft.push_call(call);
/// let message = draft.to_message(&RunId::parse("run_1")?, 1, &Limits::default())?;
/// let kinds: Vec<_> = message.parts().iter().map(Part::kind).collect();
/// assert_eq!(kinds, ["reasoning", "text", "tool_call"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantDraft {
    /// The segments a reasoning part followed.
    closed: Vec<Segment>,
    /// The segment text and tool calls go to.
    current: Segment,
    /// The open reasoning part's text: the deltas since the call started
    /// or the last reasoning part closed.
    open_reasoning: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Segment {
    reasoning: Option<Reasoning>,
    text: String,
    calls: Vec<ToolCallPart>,
}

/// A closed reasoning part, built into its [`Part`] with the message (so a
/// part over a bound fails the message, as text over a bound does).
#[derive(Debug, Clone, PartialEq)]
enum Reasoning {
    Text {
        provider: ProviderTag,
        text: String,
        signature: Option<OpaqueValue>,
    },
    Redacted {
        provider: ProviderTag,
        value: OpaqueValue,
    },
}

impl AssistantDraft {
    /// Appends visible text.
    pub fn push_text(&mut self, text: &str) {
        self.current.text.push_str(text);
    }

    /// Appends a piece of reasoning text to the open reasoning part
    /// (opening one if none is open).
    pub fn push_reasoning_delta(&mut self, text: &str) {
        self.open_reasoning.push_str(text);
    }

    /// Whether a reasoning part is open: deltas came since the last part
    /// closed.
    pub fn has_open_reasoning(&self) -> bool {
        !self.open_reasoning.is_empty()
    }

    /// Closes the open reasoning part, from `provider`, with its
    /// `signature` if it has one. With no part open, a part with empty text
    /// is closed (valid only when signed; otherwise the message fails on
    /// the reasoning rule when it is built).
    pub fn end_reasoning(&mut self, provider: ProviderTag, signature: Option<OpaqueValue>) {
        let text = std::mem::take(&mut self.open_reasoning);
        self.start_segment(Reasoning::Text {
            provider,
            text,
            signature,
        });
    }

    /// Adds a redacted reasoning part, whole. An open part is closed
    /// first, unsigned.
    pub fn push_redacted(&mut self, provider: ProviderTag, value: OpaqueValue) {
        if self.has_open_reasoning() {
            self.end_reasoning(provider.clone(), None);
        }
        self.start_segment(Reasoning::Redacted { provider, value });
    }

    /// Appends a tool call.
    pub fn push_call(&mut self, call: ToolCallPart) {
        self.current.calls.push(call);
    }

    /// The tool calls, in call order.
    pub fn calls(&self) -> impl Iterator<Item = &ToolCallPart> {
        self.segments().flat_map(|s| s.calls.iter())
    }

    /// Whether the model answered: some text or a tool call. Reasoning
    /// alone is not an answer (rule `model.nonempty_completion`).
    pub fn has_answer(&self) -> bool {
        self.segments()
            .any(|s| !s.text.is_empty() || !s.calls.is_empty())
    }

    /// The assistant message of `turn`: each segment's reasoning part, text
    /// (if any) and tool calls, in order. Reasoning deltas no part closed
    /// are left out (the engine always closes a part before the call ends).
    pub fn to_message(
        &self,
        run_id: &RunId,
        turn: u64,
        limits: &Limits,
    ) -> Result<Message, MessageError> {
        let mut parts = Vec::new();
        for segment in self.segments() {
            if let Some(reasoning) = &segment.reasoning {
                parts.push(reasoning.to_part(limits)?);
            }
            if !segment.text.is_empty() {
                parts.push(Part::text_with(&segment.text, limits)?);
            }
            parts.extend(segment.calls.iter().cloned().map(Part::ToolCall));
        }
        let id = turn_message_id(run_id, turn, Role::Assistant)?;
        Message::new_with(id, Role::Assistant, parts, limits)
    }

    /// A new current segment, opened by a closed reasoning part.
    fn start_segment(&mut self, reasoning: Reasoning) {
        let next = Segment {
            reasoning: Some(reasoning),
            ..Segment::default()
        };
        self.closed.push(std::mem::replace(&mut self.current, next));
    }

    fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.closed.iter().chain(std::iter::once(&self.current))
    }
}

impl Reasoning {
    fn to_part(&self, limits: &Limits) -> Result<Part, MessageError> {
        match self {
            Reasoning::Text {
                provider,
                text,
                signature,
            } => Part::reasoning_with(provider.clone(), text, signature.clone(), limits),
            Reasoning::Redacted { provider, value } => {
                Ok(Part::redacted_reasoning(provider.clone(), value.clone()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use keel_message::{CallId, CanonicalJson, ToolName};

    fn call() -> ToolCallPart {
        ToolCallPart::new_with(
            CallId::parse("c1").unwrap(),
            ToolName::parse("f").unwrap(),
            CanonicalJson::parse("{}").unwrap(),
            &Limits::default(),
        )
        .unwrap()
    }

    /// Text or a call is an answer; reasoning alone is not.
    #[test]
    fn an_answer_is_text_or_a_call() {
        let check = |name: &str, build: &dyn Fn(&mut AssistantDraft), answer: bool| {
            let mut draft = AssistantDraft::default();
            build(&mut draft);
            assert_eq!(draft.has_answer(), answer, "[{name}]");
        };
        check("nothing", &|_| {}, false);
        check("text", &|d| d.push_text("a"), true);
        check("a call", &|d| d.push_call(call()), true);
        check(
            "reasoning only",
            &|d| {
                d.push_reasoning_delta("hm");
                d.end_reasoning(ProviderTag::scripted(), None);
            },
            false,
        );
        check(
            "text after reasoning",
            &|d| {
                d.push_reasoning_delta("hm");
                d.end_reasoning(ProviderTag::scripted(), None);
                d.push_text("a");
            },
            true,
        );
    }

    /// A part is open from its first delta until it is closed; a redacted
    /// part closes it first, unsigned.
    #[test]
    fn a_redacted_part_closes_the_open_one() {
        let mut draft = AssistantDraft::default();
        assert!(!draft.has_open_reasoning());
        draft.push_reasoning_delta("hm");
        assert!(draft.has_open_reasoning());
        let value = OpaqueValue::new("opaque").unwrap();
        draft.push_redacted(ProviderTag::anthropic(), value.clone());
        assert!(!draft.has_open_reasoning());
        let run = RunId::parse("run_1").unwrap();
        let message = draft.to_message(&run, 1, &Limits::default()).unwrap();
        let expected = [
            Part::reasoning(ProviderTag::anthropic(), "hm", None).unwrap(),
            Part::redacted_reasoning(ProviderTag::anthropic(), value),
        ];
        assert_eq!(message.parts(), expected);
    }
}
