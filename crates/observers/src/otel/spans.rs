//! The mapping from a run's events to finished spans (no I/O).
//!
//! | events | span | parent |
//! | --- | --- | --- |
//! | `run.started` … `run.completed`/`failed`/`cancelled` | `invoke_agent` | a sub-run: its parent's `execute_tool` span; else none (a new trace) |
//! | `model.started` … its terminal | `chat {model}` (one per attempt) | the run's span |
//! | `tool.started` … its terminal | `execute_tool {tool}` | the run's span |
//!
//! Span times are the events' timestamps. A model attempt after the first
//! adds a `keel.retry` event to the run's span; an interaction (an
//! approval) adds `keel.interaction.*` events to it. Turns are not spans
//! (the conventions have none): `keel.turn` is an attribute.

use super::content::{InputContent, OutputContent, ToolCallContent, screened};
use super::names;
use keel_eventlog::{Payload, RunStarted, ScopeKey};
use opentelemetry::trace::{
    Event as SpanEvent, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most spans open at once (across runs); a span that would exceed
/// it is not opened, and counted as dropped.
pub const MAX_OPEN_SPANS: usize = 65_536;

/// The most span events kept on one span.
pub const MAX_SPAN_EVENTS: usize = 128;

/// The GenAI operation a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    /// A run.
    InvokeAgent,
    /// A model call attempt.
    Chat,
    /// A tool call.
    ExecuteTool,
}

impl Operation {
    /// `gen_ai.operation.name`.
    fn as_str(self) -> &'static str {
        match self {
            Operation::InvokeAgent => "invoke_agent",
            Operation::Chat => "chat",
            Operation::ExecuteTool => "execute_tool",
        }
    }

    /// The conventions' span kind: a model call is a client call.
    fn kind(self) -> SpanKind {
        match self {
            Operation::Chat => SpanKind::Client,
            Operation::InvokeAgent | Operation::ExecuteTool => SpanKind::Internal,
        }
    }
}

/// What a span starts with.
#[derive(Debug)]
struct SpanStart {
    operation: Operation,
    name: String,
    at: SystemTime,
    attributes: Vec<KeyValue>,
}

impl SpanStart {
    /// The conventions' name: `{operation} {target}` (the model, the tool).
    fn new(
        operation: Operation,
        target: &str,
        at: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> SpanStart {
        SpanStart {
            operation,
            name: format!("{} {target}", operation.as_str()),
            at,
            attributes,
        }
    }
}

/// How a span ended.
#[derive(Debug, Clone, Copy)]
enum Ended<'a> {
    Completed,
    Cancelled,
    /// Failed, with its `error.type`.
    Failed(&'a str),
}

/// A span between its start and end event.
#[derive(Debug)]
struct OpenSpan {
    context: SpanContext,
    parent: SpanId,
    name: String,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<SpanEvent>,
    output: Option<OutputContent>,
    input: Option<InputContent>,
}

/// Open spans by run and scope, and the settings that shape them.
#[derive(Debug)]
pub(super) struct SpanTree {
    open: HashMap<(String, ScopeKey), OpenSpan>,
    /// Tool arguments (content on) seen in `model.tool_call`, waiting for
    /// their `tool.started`.
    arguments: HashMap<(String, String), String>,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
    record_content: bool,
    unopened: u64,
}

/// Microseconds since the epoch (an event's `ts`) as a time.
fn time_of(ts_micros: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(ts_micros)
}

impl SpanTree {
    pub(super) fn new(record_content: bool) -> SpanTree {
        SpanTree {
            open: HashMap::new(),
            arguments: HashMap::new(),
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("keel").build(),
            record_content,
            unopened: 0,
        }
    }

    /// Spans not opened because [`MAX_OPEN_SPANS`] were open.
    pub(super) fn unopened(&self) -> u64 {
        self.unopened
    }

    /// Spans open now.
    pub(super) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Applies one event; gives the spans it finished.
    pub(super) fn apply(&mut self, run: &str, ts: u64, payload: &Payload) -> Vec<SpanData> {
        let at = time_of(ts);
        match payload {
            Payload::RunStarted(p) => self.open_run(run, at, p),
            Payload::ModelStarted(p) => {
                if p.attempt > 1 {
                    let attributes = vec![
                        KeyValue::new(names::OPERATION_NAME, "chat"),
                        KeyValue::new(names::TURN, count(p.turn)),
                        KeyValue::new(names::ATTEMPT, i64::from(p.attempt)),
                    ];
                    self.run_event(run, names::RETRY_EVENT, at, attributes);
                }
                let key = ScopeKey::Model {
                    turn: p.turn,
                    operation_id: p.operation_id.clone(),
                };
                let attributes = vec![
                    KeyValue::new(names::REQUEST_MODEL, p.model.as_str().to_owned()),
                    KeyValue::new(names::TURN, count(p.turn)),
                    KeyValue::new(names::ATTEMPT, i64::from(p.attempt)),
                    KeyValue::new(names::OPERATION_ID, p.operation_id.as_str().to_owned()),
                ];
                let start = SpanStart::new(Operation::Chat, p.model.as_str(), at, attributes);
                self.open_child(run, key, start);
            }
            Payload::ToolStarted(p) => {
                let key = ScopeKey::Tool {
                    turn: p.turn,
                    call_id: p.call_id.clone(),
                };
                let mut attributes = vec![
                    KeyValue::new(names::TOOL_NAME, p.tool.as_str().to_owned()),
                    KeyValue::new(names::TOOL_CALL_ID, p.call_id.as_str().to_owned()),
                    KeyValue::new(names::TURN, count(p.turn)),
                ];
                let pending = (run.to_owned(), p.call_id.as_str().to_owned());
                if let Some(arguments) = self.arguments.remove(&pending) {
                    attributes.push(KeyValue::new(names::TOOL_CALL_ARGUMENTS, arguments));
                }
                let start = SpanStart::new(Operation::ExecuteTool, p.tool.as_str(), at, attributes);
                self.open_child(run, key, start);
            }
            _ => return self.apply_other(run, at, payload),
        }
        Vec::new()
    }

    /// Content, interactions and terminals.
    fn apply_other(&mut self, run: &str, at: SystemTime, payload: &Payload) -> Vec<SpanData> {
        match payload {
            Payload::TextDelta(p) if self.record_content => {
                let key = model_key(p.turn, &p.operation_id);
                if let Some(out) = self.span_mut(run, &key).and_then(|s| s.output.as_mut()) {
                    out.push_text(&p.text);
                }
            }
            Payload::ToolCall(p) if self.record_content => self.record_tool_call(run, p),
            Payload::RunInput(p) if self.record_content => {
                if let Some(input) = self
                    .span_mut(run, &ScopeKey::Run)
                    .and_then(|s| s.input.as_mut())
                {
                    input.push(&p.message);
                }
            }
            Payload::InteractionStarted(_)
            | Payload::InteractionCompleted(_)
            | Payload::InteractionFailed(_)
            | Payload::InteractionCancelled(_) => self.interaction_event(run, at, payload),
            _ => return self.apply_terminal(run, at, payload),
        }
        Vec::new()
    }

    /// A model call's, tool call's or run's end.
    fn apply_terminal(&mut self, run: &str, at: SystemTime, payload: &Payload) -> Vec<SpanData> {
        let ended = match payload {
            Payload::ModelCompleted(p) => {
                let key = model_key(p.turn, &p.operation_id);
                let Some(mut span) = self.take(run, &key) else {
                    return Vec::new();
                };
                if let Some(usage) = &p.usage {
                    span.set(names::USAGE_INPUT_TOKENS, count(usage.input_tokens()));
                    span.set(names::USAGE_OUTPUT_TOKENS, count(usage.output_tokens()));
                }
                let finish = p.finish.as_str().to_owned();
                if let Some(out) = span.output.take() {
                    span.set(names::OUTPUT_MESSAGES, out.to_attribute(&finish));
                }
                let reasons = Value::Array(vec![opentelemetry::StringValue::from(finish)].into());
                span.set(names::RESPONSE_FINISH_REASONS, reasons);
                self.finish(span, at, "completed", None)
            }
            Payload::ModelFailed(p) => self.end(
                run,
                model_key(p.turn, &p.operation_id),
                at,
                Ended::Failed(p.problem.kind.as_str()),
            ),
            Payload::ModelCancelled(p) => self.end(
                run,
                model_key(p.turn, &p.operation_id),
                at,
                Ended::Cancelled,
            ),
            Payload::ToolCompleted(p) => {
                let Some(mut span) = self.take(run, &tool_key(p.turn, &p.call_id)) else {
                    return Vec::new();
                };
                if self.record_content {
                    span.set(names::TOOL_CALL_RESULT, screened(&p.output));
                }
                self.finish(span, at, "completed", None)
            }
            Payload::ToolFailed(p) => {
                let kind = p.outcome.as_ref().map_or("tool_error", |o| o.as_str());
                self.end(run, tool_key(p.turn, &p.call_id), at, Ended::Failed(kind))
            }
            Payload::ToolCancelled(p) => {
                self.end(run, tool_key(p.turn, &p.call_id), at, Ended::Cancelled)
            }
            Payload::RunCompleted(_) => self.end(run, ScopeKey::Run, at, Ended::Completed),
            Payload::RunFailed(_) => self.end(run, ScopeKey::Run, at, Ended::Failed("run_failed")),
            Payload::RunCancelled(_) => self.end(run, ScopeKey::Run, at, Ended::Cancelled),
            _ => return Vec::new(),
        };
        if matches!(
            payload,
            Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_)
        ) {
            // A span left open in an ended run never closes: drop it.
            self.open.retain(|(r, _), _| r != run);
            self.arguments.retain(|(r, _), _| r != run);
        }
        ended.into_iter().collect()
    }

    fn open_run(&mut self, run: &str, at: SystemTime, started: &RunStarted) {
        // A sub-run's span hangs under the parent's `execute_tool` span.
        let parent = started.parent.as_ref().and_then(|link| {
            self.open.iter().find_map(|((r, key), span)| match key {
                ScopeKey::Tool { call_id, .. }
                    if r == link.run_id.as_str() && *call_id == link.call_id =>
                {
                    Some(span.context.clone())
                }
                _ => None,
            })
        });
        let trace_id = parent
            .as_ref()
            .map_or_else(|| self.ids.new_trace_id(), SpanContext::trace_id);
        let parent_id = parent
            .as_ref()
            .map_or(SpanId::INVALID, SpanContext::span_id);
        let mut attributes = vec![KeyValue::new(names::RUN_ID, run.to_owned())];
        if let Some(model) = &started.model {
            attributes.push(KeyValue::new(
                names::REQUEST_MODEL,
                model.as_str().to_owned(),
            ));
        }
        let start = SpanStart {
            operation: Operation::InvokeAgent,
            name: Operation::InvokeAgent.as_str().to_owned(),
            at,
            attributes,
        };
        let span = self.new_span(trace_id, parent_id, start);
        self.insert(run, ScopeKey::Run, span);
    }

    /// Opens a model or tool span under the run's span.
    fn open_child(&mut self, run: &str, key: ScopeKey, start: SpanStart) {
        let Some(run_span) = self.open.get(&(run.to_owned(), ScopeKey::Run)) else {
            return;
        };
        let (trace_id, parent) = (run_span.context.trace_id(), run_span.context.span_id());
        let span = self.new_span(trace_id, parent, start);
        self.insert(run, key, span);
    }

    fn new_span(&self, trace_id: TraceId, parent: SpanId, start: SpanStart) -> OpenSpan {
        let context = SpanContext::new(
            trace_id,
            self.ids.new_span_id(),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        let operation = start.operation;
        let mut attributes = Vec::with_capacity(start.attributes.len() + 4);
        attributes.push(KeyValue::new(names::OPERATION_NAME, operation.as_str()));
        attributes.extend(start.attributes);
        let content = self.record_content;
        OpenSpan {
            context,
            parent,
            name: start.name,
            kind: operation.kind(),
            start: start.at,
            attributes,
            events: Vec::new(),
            output: (content && operation == Operation::Chat).then(OutputContent::default),
            input: (content && operation == Operation::InvokeAgent).then(InputContent::default),
        }
    }

    fn insert(&mut self, run: &str, key: ScopeKey, span: OpenSpan) {
        if self.open.len() >= MAX_OPEN_SPANS {
            self.unopened += 1;
            return;
        }
        self.open.insert((run.to_owned(), key), span);
    }

    fn span_mut(&mut self, run: &str, key: &ScopeKey) -> Option<&mut OpenSpan> {
        self.open.get_mut(&(run.to_owned(), key.clone()))
    }

    fn take(&mut self, run: &str, key: &ScopeKey) -> Option<OpenSpan> {
        self.open.remove(&(run.to_owned(), key.clone()))
    }

    /// Ends a span with no attributes of its own: `completed` or
    /// `cancelled`, or `failed` when `error` (the `error.type`) is given.
    fn end(
        &mut self,
        run: &str,
        key: ScopeKey,
        at: SystemTime,
        ended: Ended<'_>,
    ) -> Option<SpanData> {
        let span = self.take(run, &key)?;
        match ended {
            Ended::Completed => self.finish(span, at, "completed", None),
            Ended::Cancelled => self.finish(span, at, "cancelled", None),
            Ended::Failed(kind) => self.finish(span, at, "failed", Some(kind)),
        }
    }

    fn finish(
        &self,
        mut span: OpenSpan,
        at: SystemTime,
        outcome: &str,
        error: Option<&str>,
    ) -> Option<SpanData> {
        if let Some(input) = span.input.take().filter(|i| !i.is_empty()) {
            span.set(names::INPUT_MESSAGES, input.to_attribute());
        }
        span.set(names::OUTCOME, outcome.to_owned());
        let status = match error {
            Some(kind) => {
                span.set(names::ERROR_TYPE, kind.to_owned());
                Status::error(kind.to_owned())
            }
            None => Status::Unset,
        };
        let mut events = SpanEvents::default();
        events.events = span.events;
        Some(SpanData {
            span_context: span.context,
            parent_span_id: span.parent,
            parent_span_is_remote: false,
            span_kind: span.kind,
            name: Cow::Owned(span.name),
            start_time: span.start,
            end_time: at.max(span.start),
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        })
    }

    /// Adds an event to the run's span.
    fn run_event(
        &mut self,
        run: &str,
        name: &'static str,
        at: SystemTime,
        attributes: Vec<KeyValue>,
    ) {
        if let Some(span) = self.span_mut(run, &ScopeKey::Run)
            && span.events.len() < MAX_SPAN_EVENTS
        {
            span.events.push(SpanEvent::new(name, at, attributes, 0));
        }
    }

    /// An interaction (an approval) as events on the run's span; what it
    /// asked and was answered only with content on.
    fn interaction_event(&mut self, run: &str, at: SystemTime, payload: &Payload) {
        let content = self.record_content;
        let (name, id, mut attributes) = match payload {
            Payload::InteractionStarted(p) => {
                let mut attributes = Vec::new();
                if let Some(call) = &p.call_id {
                    attributes.push(KeyValue::new(names::TOOL_CALL_ID, call.as_str().to_owned()));
                }
                if content {
                    attributes.push(KeyValue::new(
                        names::INTERACTION_REQUEST,
                        screened(&p.request),
                    ));
                }
                (
                    names::INTERACTION_STARTED_EVENT,
                    &p.interaction_id,
                    attributes,
                )
            }
            Payload::InteractionCompleted(p) => {
                let mut attributes = Vec::new();
                if content {
                    attributes.push(KeyValue::new(
                        names::INTERACTION_DECISION,
                        screened(&p.decision),
                    ));
                }
                (
                    names::INTERACTION_COMPLETED_EVENT,
                    &p.interaction_id,
                    attributes,
                )
            }
            Payload::InteractionFailed(p) => {
                let attributes = vec![KeyValue::new(names::ERROR_TYPE, "interaction_error")];
                (
                    names::INTERACTION_FAILED_EVENT,
                    &p.interaction_id,
                    attributes,
                )
            }
            Payload::InteractionCancelled(p) => (
                names::INTERACTION_CANCELLED_EVENT,
                &p.interaction_id,
                Vec::new(),
            ),
            _ => return,
        };
        attributes.push(KeyValue::new(names::INTERACTION_ID, id.as_str().to_owned()));
        self.run_event(run, name, at, attributes);
    }

    /// A tool call the model asked for (content on): part of the model
    /// span's output, and the arguments of the tool span to come.
    fn record_tool_call(&mut self, run: &str, call: &keel_eventlog::ToolCall) {
        let arguments = screened(call.arguments.as_str());
        if self.arguments.len() < MAX_OPEN_SPANS {
            let key = (run.to_owned(), call.call_id.as_str().to_owned());
            self.arguments.insert(key, arguments.clone());
        }
        let key = model_key(call.turn, &call.operation_id);
        if let Some(out) = self.span_mut(run, &key).and_then(|s| s.output.as_mut()) {
            out.push_tool_call(ToolCallContent {
                id: call.call_id.as_str().to_owned(),
                name: call.name.as_str().to_owned(),
                arguments,
            });
        }
    }
}

impl OpenSpan {
    fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push(KeyValue::new(key, value));
    }
}

fn model_key(turn: u64, operation_id: &keel_message::OperationId) -> ScopeKey {
    ScopeKey::Model {
        turn,
        operation_id: operation_id.clone(),
    }
}

fn tool_key(turn: u64, call_id: &keel_message::CallId) -> ScopeKey {
    ScopeKey::Tool {
        turn,
        call_id: call_id.clone(),
    }
}

/// A count as an OTLP int (saturating: counts never reach 2^63).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
