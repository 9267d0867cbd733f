//! A best-effort observer that turns lifecycle events into `tracing` spans,
//! with OpenTelemetry GenAI attribute names.
//!
//! | event | span | fields |
//! | --- | --- | --- |
//! | `run.started` | `keel.run` | `keel.run_id` |
//! | `turn.started` | `keel.turn` (child of the run) | `keel.turn` |
//! | `model.started` | `gen_ai.chat` (child of the turn) | `gen_ai.operation.name` = `chat`, `gen_ai.request.model`, `keel.operation_id`, `keel.attempt`; at the end `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons` |
//! | `tool.started` | `gen_ai.execute_tool` (child of the turn) | `gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id` |
//! | `interaction.started` | `keel.interaction` | `keel.interaction_id` |
//!
//! Every terminal records `keel.outcome` (`completed`, `failed`,
//! `cancelled`) and, on failure, `error.type` (the problem kind for model
//! calls, the typed outcome or `tool_error` for tools) before the span
//! closes. **No content ever enters a span or event**: text deltas, tool
//! arguments and outputs, and failure messages are not recorded, because a
//! trace backend is not where users expect prompts or tool data to go.

use crate::genai;
use crate::observer::BestEffortObserver;
use keel_eventlog::{Event, Payload, ScopeKey, Terminal, Transition};
use std::collections::HashMap;
use std::sync::Arc;
use tracing::Span;
use tracing::field::Empty;

/// Lifecycle events as spans. Register it as a best-effort observer.
#[derive(Debug, Default)]
pub struct TracingObserver {
    spans: HashMap<(String, ScopeKey), Span>,
}

impl TracingObserver {
    /// A bridge with no open spans.
    pub fn new() -> Self {
        Self::default()
    }

    fn parent(&self, run: &str, key: &ScopeKey) -> Option<&Span> {
        key.parent()
            .and_then(|p| self.spans.get(&(run.to_owned(), p)))
    }

    fn open(&mut self, run: &str, key: ScopeKey, payload: &Payload) {
        let parent = self.parent(run, &key).cloned().unwrap_or_else(Span::none);
        let span = match payload {
            Payload::RunStarted(_) => tracing::info_span!(
                parent: None,
                "keel.run",
                keel.run_id = run,
                keel.outcome = Empty
            ),
            Payload::TurnStarted(p) => tracing::info_span!(
                parent: &parent,
                "keel.turn",
                keel.turn = p.turn,
                keel.outcome = Empty
            ),
            Payload::ModelStarted(p) => tracing::info_span!(
                parent: &parent,
                "gen_ai.chat",
                gen_ai.operation.name = "chat",
                gen_ai.request.model = p.model.as_str(),
                keel.operation_id = p.operation_id.as_str(),
                keel.attempt = p.attempt,
                gen_ai.usage.input_tokens = Empty,
                gen_ai.usage.output_tokens = Empty,
                gen_ai.response.finish_reasons = Empty,
                keel.outcome = Empty,
                error.type = Empty,
                keel.retry_position = Empty
            ),
            Payload::ToolStarted(p) => tracing::info_span!(
                parent: &parent,
                "gen_ai.execute_tool",
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = p.tool.as_str(),
                gen_ai.tool.call.id = p.call_id.as_str(),
                keel.outcome = Empty,
                error.type = Empty
            ),
            Payload::InteractionStarted(p) => tracing::info_span!(
                parent: &parent,
                "keel.interaction",
                keel.interaction_id = p.interaction_id.as_str(),
                keel.outcome = Empty,
                error.type = Empty
            ),
            _ => return,
        };
        self.spans.insert((run.to_owned(), key), span);
    }

    fn close(&mut self, run: &str, key: ScopeKey, terminal: Terminal, payload: &Payload) {
        let Some(span) = self.spans.remove(&(run.to_owned(), key)) else {
            return;
        };
        span.record(genai::OUTCOME, terminal.as_str());
        match payload {
            Payload::ModelCompleted(p) => {
                if let Some(u) = &p.usage {
                    span.record(genai::USAGE_INPUT_TOKENS, u.input_tokens());
                    span.record(genai::USAGE_OUTPUT_TOKENS, u.output_tokens());
                }
                // An unknown value is recorded verbatim: it obeys the value
                // grammar (at most 64 bytes of `[a-z0-9_]`).
                span.record(genai::RESPONSE_FINISH_REASONS, p.finish.as_str());
            }
            Payload::ModelFailed(p) => {
                span.record(genai::ERROR_TYPE, p.problem.kind.as_str());
                span.record("keel.retry_position", p.position.as_str());
            }
            Payload::ToolFailed(p) => {
                let kind = p.outcome.as_ref().map(keel_eventlog::ToolOutcome::as_str);
                span.record(genai::ERROR_TYPE, kind.unwrap_or("tool_error"));
            }
            Payload::InteractionFailed(_) => {
                span.record(genai::ERROR_TYPE, "interaction_error");
            }
            _ => {}
        }
        drop(span);
    }
}

impl BestEffortObserver for TracingObserver {
    fn name(&self) -> &str {
        "tracing"
    }

    fn observe(&mut self, event: &Arc<Event>) {
        // Only lifecycle events matter; deltas and tool calls are content.
        if event.kind().lifecycle_parts().is_none() {
            return;
        }
        let Ok(payload) = event.payload() else {
            return;
        };
        let run = event.run_id().as_str();
        match payload.transition() {
            Transition::Lifecycle(key, keel_eventlog::Phase::Started) => {
                self.open(run, key, &payload)
            }
            Transition::Lifecycle(key, keel_eventlog::Phase::Ended(t)) => {
                let run_ended = key == ScopeKey::Run;
                self.close(run, key, t, &payload);
                if run_ended {
                    // Drop anything left of this run (a log imported mid-run).
                    self.spans.retain(|(r, _), _| r != run);
                }
            }
            _ => {}
        }
    }

    fn flush(&mut self) {
        self.spans.clear();
    }
}
