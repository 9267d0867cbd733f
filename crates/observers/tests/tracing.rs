//! The tracing bridge: GenAI attribute names, nesting, and no content.
#![cfg(feature = "tracing")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;
use keel_message::{CallId, CanonicalJson, ModelName, OperationId, RunId, ToolName};
use keel_observers::{BestEffortObserver, TracingObserver};
use keel_testkit::events::{self, ModelAttempt, ToolUse};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone, Default)]
struct SpanRecord {
    name: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
    closed: bool,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<SpanRecord>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);
impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut rec = SpanRecord {
            name: attrs.metadata().name().to_owned(),
            ..Default::default()
        };
        attrs.record(&mut Fields(&mut rec.fields));
        rec.parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.name().to_owned());
        let idx = {
            let mut all = self.0.lock().unwrap();
            all.push(rec);
            all.len() - 1
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(idx);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(idx) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<usize>().copied())
        {
            values.record(&mut Fields(&mut self.0.lock().unwrap()[idx].fields));
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(idx) = ctx
            .span(&id)
            .and_then(|s| s.extensions().get::<usize>().copied())
        {
            self.0.lock().unwrap()[idx].closed = true;
        }
    }
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut rec = SpanRecord {
            name: format!("event:{}", event.metadata().name()),
            ..Default::default()
        };
        event.record(&mut Fields(&mut rec.fields));
        self.0.lock().unwrap().push(rec);
    }
}

const SECRET_TEXT: &str = "Oslo-weather-content-7f3a";

fn run_events() -> Vec<Arc<Event>> {
    let log = RunLog::new(
        RunId::parse("run_t").unwrap(),
        LogConfig::default(),
        Arc::new(SystemClock),
    )
    .unwrap();
    let model = ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let tool = ToolUse::new(
        1,
        CallId::parse("call_1").unwrap(),
        ToolName::parse("get_weather").unwrap(),
    );
    let arguments = CanonicalJson::parse(&format!(r#"{{"city":"{SECRET_TEXT}"}}"#)).unwrap();
    let payloads = vec![
        events::run_started(),
        events::turn_started(1),
        model.started(ModelName::parse("gpt-5").unwrap()),
        model.text(SECRET_TEXT),
        model.tool_call(&tool, arguments),
        model.completed(
            keel_stream::FinishReason::ToolCalls,
            Some(keel_stream::Usage::new(12, 7).unwrap()),
        ),
        tool.started(),
        tool.failed(
            SECRET_TEXT,
            Some(ToolOutcome::Uncertain),
            Some(ToolRetry::Retryable),
        ),
        events::turn_failed(1, SECRET_TEXT),
        events::run_failed(SECRET_TEXT),
    ];
    payloads.iter().map(|p| log.commit(p).unwrap()).collect()
}

#[test]
fn lifecycle_becomes_genai_spans_without_content() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let mut bridge = TracingObserver::new();
        for e in run_events() {
            bridge.observe(&e);
        }
    });
    let spans = capture.0.lock().unwrap().clone();
    let by_name = |n: &str| {
        spans
            .iter()
            .find(|s| s.name == n)
            .cloned()
            .unwrap_or_else(|| panic!("no span {n}: {spans:?}"))
    };

    let run = by_name("keel.run");
    assert_eq!(run.fields["keel.run_id"], "run_t");
    assert_eq!(run.fields["keel.outcome"], "failed");
    let turn = by_name("keel.turn");
    assert_eq!(turn.parent.as_deref(), Some("keel.run"));
    let chat = by_name("gen_ai.chat");
    assert_eq!(chat.parent.as_deref(), Some("keel.turn"));
    assert_eq!(chat.fields["gen_ai.operation.name"], "chat");
    assert_eq!(chat.fields["gen_ai.request.model"], "gpt-5");
    assert_eq!(chat.fields["gen_ai.usage.input_tokens"], "12");
    assert_eq!(chat.fields["gen_ai.usage.output_tokens"], "7");
    assert_eq!(chat.fields["gen_ai.response.finish_reasons"], "tool_calls");
    assert_eq!(chat.fields["keel.outcome"], "completed");
    let tool = by_name("gen_ai.execute_tool");
    assert_eq!(tool.parent.as_deref(), Some("keel.turn"));
    assert_eq!(tool.fields["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.fields["gen_ai.tool.name"], "get_weather");
    assert_eq!(tool.fields["gen_ai.tool.call.id"], "call_1");
    assert_eq!(tool.fields["error.type"], "uncertain");
    assert!(
        spans
            .iter()
            .filter(|s| !s.name.starts_with("event:"))
            .all(|s| s.closed),
        "every span closes: {spans:?}"
    );

    // No content anywhere: not the delta, not the arguments, not the error text.
    let all = format!("{spans:?}");
    assert!(
        !all.contains(SECRET_TEXT),
        "content leaked into tracing: {all}"
    );
}
