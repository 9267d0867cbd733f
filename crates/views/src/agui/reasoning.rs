//! Reasoning in AG-UI: each Keel reasoning part is one span of reasoning
//! holding one reasoning message, both named by the message's id
//! `<run>.<operation>.reasoning.<n>` (`n` from 1 within the model call):
//!
//! | Keel event | AG-UI events |
//! | --- | --- |
//! | `model.reasoning_delta` (first of a part) | `REASONING_START`, `REASONING_MESSAGE_START`, `REASONING_MESSAGE_CONTENT` |
//! | `model.reasoning_delta` (later) | `REASONING_MESSAGE_CONTENT` |
//! | `model.reasoning_end` | `REASONING_ENCRYPTED_VALUE` (the signature, when there is one), `REASONING_MESSAGE_END`, `REASONING_END` |
//! | `model.reasoning_end` with `redacted` | the whole part: `REASONING_START`, `REASONING_MESSAGE_START`, `REASONING_ENCRYPTED_VALUE` (the redacted value), `REASONING_MESSAGE_END`, `REASONING_END` |
//!
//! A text delta, a tool call or the model call's end closes an open part
//! (`REASONING_MESSAGE_END`, `REASONING_END`), as the engine's
//! `model.reasoning_end` does. A join inside a part re-opens it with the
//! text so far (bounded as a text message's is).

use super::{AguiEvent, AguiMapper, EncryptedSubtype, OpenText, ReasoningRole};
use keel_eventlog::ReasoningEnd;

impl AguiMapper {
    pub(super) fn reasoning_delta(
        &mut self,
        operation_id: &str,
        text: &str,
        line: &str,
        out: &mut Vec<AguiEvent>,
    ) {
        self.close_text(out);
        if self
            .reasoning
            .as_ref()
            .is_some_and(|r| r.operation_id != operation_id)
        {
            self.close_reasoning(None, out);
        }
        if self.reasoning.is_none() {
            self.open_reasoning(operation_id, line, out);
        }
        if let Some(open) = &mut self.reasoning {
            open.keep(text);
            out.push(AguiEvent::ReasoningMessageContent {
                message_id: open.message_id.clone(),
                delta: text.to_owned(),
            });
        }
    }

    /// Opens a reasoning part: its span and its message.
    fn open_reasoning(&mut self, operation_id: &str, line: &str, out: &mut Vec<AguiEvent>) {
        let n = self.attempt_reasoning.len() + 1;
        let message_id = format!("{}.{operation_id}.reasoning.{n}", self.run_id);
        self.attempt_reasoning.push(message_id.clone());
        let open = OpenText {
            message_id,
            operation_id: operation_id.to_owned(),
            line: line.to_owned(),
            text: String::new(),
            elided: 0,
        };
        out.extend(open.reasoning_starts());
        self.reasoning = Some(open);
    }

    pub(super) fn reasoning_end(&mut self, p: &ReasoningEnd, line: &str, out: &mut Vec<AguiEvent>) {
        match &p.redacted {
            Some(value) => {
                self.close_text(out);
                self.close_reasoning(None, out);
                self.open_reasoning(p.operation_id.as_str(), line, out);
                self.close_reasoning(Some(value.as_str()), out);
            }
            None => self.close_reasoning(p.signature.as_ref().map(|s| s.as_str()), out),
        }
    }

    /// Closes the open reasoning part, attaching `encrypted` (a signature
    /// or redacted value) to its message first.
    pub(super) fn close_reasoning(&mut self, encrypted: Option<&str>, out: &mut Vec<AguiEvent>) {
        let Some(open) = self.reasoning.take() else {
            return;
        };
        if let Some(value) = encrypted {
            out.push(AguiEvent::ReasoningEncryptedValue {
                subtype: EncryptedSubtype::Message,
                entity_id: open.message_id.clone(),
                encrypted_value: value.to_owned(),
            });
        }
        out.push(AguiEvent::ReasoningMessageEnd {
            message_id: open.message_id.clone(),
        });
        out.push(AguiEvent::ReasoningEnd {
            message_id: open.message_id,
        });
    }
}

impl OpenText {
    /// `REASONING_START` and `REASONING_MESSAGE_START` of this part.
    pub(super) fn reasoning_starts(&self) -> [AguiEvent; 2] {
        [
            AguiEvent::ReasoningStart {
                message_id: self.message_id.clone(),
            },
            AguiEvent::ReasoningMessageStart {
                message_id: self.message_id.clone(),
                role: ReasoningRole::Reasoning,
            },
        ]
    }

    /// A join's re-opened reasoning part: its starts, its text so far
    /// and, when part of it was not kept, `keel.text_elided`.
    pub(super) fn reopen_reasoning(&self) -> impl Iterator<Item = AguiEvent> {
        let content = AguiEvent::ReasoningMessageContent {
            message_id: self.message_id.clone(),
            delta: self.text.clone(),
        };
        self.reasoning_starts()
            .into_iter()
            .chain(std::iter::once(content))
            .chain(self.elided_event())
    }
}
