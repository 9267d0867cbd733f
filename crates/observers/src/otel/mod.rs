//! OpenTelemetry export: a best-effort observer that turns a run's events
//! into spans with the GenAI semantic conventions and posts them over
//! OTLP/HTTP (protobuf) to a receiver or collector.
//!
//! - A run is an `invoke_agent` span; a sub-run's is a child of its
//!   parent's `execute_tool` span, in the parent's trace. A model call
//!   attempt is a `chat {model}` span, a tool call an `execute_tool
//!   {tool}` span, both children of the run's span. The span tree is in
//!   `spans.rs`; attribute names in [`crate::genai`].
//! - Usage (`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`),
//!   `gen_ai.request.model`, `gen_ai.tool.name`, `gen_ai.tool.call.id`;
//!   a failure sets `error.type` and the span status to error; a retry is
//!   a `keel.retry` event and an approval `keel.interaction.*` events on
//!   the run's span.
//! - **No content by default**: no message text, tool arguments or
//!   results, interaction requests or decisions are buffered or sent.
//!   [`OtelConfig::record_content`] opts in to the conventions' content
//!   attributes ([`names::CONTENT_ATTRIBUTES`]), every text screened for
//!   secrets (`keel_stream::secrets`) and bounded.
//! - **Never blocks a run**: the pipeline gives this observer its own
//!   thread and bounded queue (drops counted in `PipelineStats`); finished
//!   spans then wait in a second bounded queue for the export thread
//!   (drops counted in [`OtelStats::dropped`]), so a slow or absent
//!   receiver costs spans, not run time.
//!
//! Transport: OTLP/HTTP protobuf with reqwest's blocking client (the
//! reqwest the workspace already builds; no gRPC stack, no async runtime
//! on the export thread). `https://` endpoints need reqwest's TLS, which
//! the `keel` binary enables.

mod content;
mod endpoint;
mod export;
mod spans;

pub use crate::genai as names;

pub use content::{MAX_CONTENT_BYTES, MAX_CONTENT_ITEMS};
pub use endpoint::{MAX_ENDPOINT_BYTES, OtelError, OtlpEndpoint};
pub use export::MAX_BATCH_SPANS;
pub use spans::{MAX_OPEN_SPANS, MAX_SPAN_EVENTS};

use crate::observer::BestEffortObserver;
use export::{Counters, ExportQueue};
use keel_eventlog::Event;
use spans::SpanTree;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How spans are exported.
#[derive(Debug, Clone)]
pub struct OtelConfig {
    endpoint: OtlpEndpoint,
    record_content: bool,
    queue_spans: usize,
    timeout: Duration,
}

impl OtelConfig {
    /// Spans to `endpoint`, with no content, a queue of 4096 spans and a
    /// 10 s timeout per request.
    pub fn new(endpoint: OtlpEndpoint) -> OtelConfig {
        OtelConfig {
            endpoint,
            record_content: false,
            queue_spans: 4096,
            timeout: Duration::from_secs(10),
        }
    }

    /// Opts in (or out) of the content attributes. Off by default.
    #[must_use]
    pub fn record_content(mut self, on: bool) -> OtelConfig {
        self.record_content = on;
        self
    }

    /// How many finished spans may wait for the export thread (at least 1).
    #[must_use]
    pub fn queue_spans(mut self, spans: usize) -> OtelConfig {
        self.queue_spans = spans.max(1);
        self
    }

    /// The longest one OTLP request may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> OtelConfig {
        self.timeout = timeout;
        self
    }

    /// Where spans go.
    pub fn endpoint(&self) -> &OtlpEndpoint {
        &self.endpoint
    }

    /// Whether content attributes are recorded.
    pub fn records_content(&self) -> bool {
        self.record_content
    }
}

/// What the exporter did, in spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtelStats {
    /// Spans the receiver accepted.
    pub exported: u64,
    /// Spans dropped: the export queue was full, or [`MAX_OPEN_SPANS`]
    /// were open.
    pub dropped: u64,
    /// Spans in requests that failed (the receiver refused or was
    /// unreachable); they are not retried.
    pub failed: u64,
}

/// A handle on a running exporter's counters (the observer itself moves
/// to the pipeline's thread).
#[derive(Debug, Clone)]
pub struct OtelStatsHandle(Arc<Counters>);

impl OtelStatsHandle {
    /// The counters now.
    pub fn get(&self) -> OtelStats {
        OtelStats {
            exported: self.0.exported.load(Ordering::Relaxed),
            dropped: self.0.dropped.load(Ordering::Relaxed),
            failed: self.0.failed.load(Ordering::Relaxed),
        }
    }
}

/// Events as OTLP spans. Register it as a best-effort observer; its
/// `flush` (the pipeline's shutdown) posts what is queued and stops.
#[derive(Debug)]
pub struct OtelObserver {
    tree: SpanTree,
    queue: ExportQueue,
    counters: Arc<Counters>,
    unopened_counted: u64,
}

impl OtelObserver {
    /// Builds the exporter and starts its thread.
    pub fn new(config: &OtelConfig) -> Result<OtelObserver, OtelError> {
        let counters = Arc::new(Counters::default());
        let queue = ExportQueue::start(
            &config.endpoint,
            config.queue_spans,
            config.timeout,
            counters.clone(),
        )?;
        Ok(OtelObserver {
            tree: SpanTree::new(config.record_content),
            queue,
            counters,
            unopened_counted: 0,
        })
    }

    /// A handle on the counters that stays valid after the observer moves.
    pub fn stats_handle(&self) -> OtelStatsHandle {
        OtelStatsHandle(self.counters.clone())
    }

    /// Spans open now (started, not yet ended).
    pub fn open_spans(&self) -> usize {
        self.tree.open_count()
    }
}

impl BestEffortObserver for OtelObserver {
    fn name(&self) -> &str {
        "otel"
    }

    fn observe(&mut self, event: &Arc<Event>) {
        let Ok(payload) = event.payload() else {
            return;
        };
        let finished = self
            .tree
            .apply(event.run_id().as_str(), event.ts(), &payload);
        for span in finished {
            self.queue.send(span);
        }
        let unopened = self.tree.unopened();
        if unopened > self.unopened_counted {
            let new = unopened - self.unopened_counted;
            self.counters.dropped.fetch_add(new, Ordering::Relaxed);
            self.unopened_counted = unopened;
        }
    }

    fn flush(&mut self) {
        self.queue.close();
    }
}
#[cfg(test)]
mod tests;
