//! The export thread: finished spans wait in a bounded queue (a full
//! queue drops the span and counts it), and one thread posts them in
//! batches over OTLP/HTTP protobuf. Nothing here ever waits on a run, and
//! a run never waits on it.

use super::endpoint::{OtelError, OtlpEndpoint};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most spans sent in one OTLP request.
pub const MAX_BATCH_SPANS: usize = 512;

/// Counters shared by the observer and its export thread.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) exported: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) failed: AtomicU64,
}

/// The sending half and the thread.
#[derive(Debug)]
pub(super) struct ExportQueue {
    sender: Option<Sender<SpanData>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl ExportQueue {
    /// Builds the exporter and starts its thread.
    pub(super) fn start(
        endpoint: &OtlpEndpoint,
        capacity: usize,
        timeout: Duration,
        counters: Arc<Counters>,
    ) -> Result<ExportQueue, OtelError> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.traces_url())
            .with_timeout(timeout)
            .build()
            .map_err(|e| OtelError::Exporter {
                detail: e.to_string(),
            })?;
        exporter.set_resource(&Resource::builder_empty().with_service_name("keel").build());
        let (sender, receiver) = bounded(capacity.max(1));
        let thread_counters = counters.clone();
        let thread = std::thread::Builder::new()
            .name("keel-otlp-export".into())
            .spawn(move || export_loop(&exporter, &receiver, &thread_counters))
            .map_err(|e| OtelError::Thread {
                detail: e.to_string(),
            })?;
        Ok(ExportQueue {
            sender: Some(sender),
            thread: Some(thread),
            counters,
        })
    }

    /// Queues a finished span; a full (or closed) queue drops it.
    pub(super) fn send(&self, span: SpanData) {
        let sent = match &self.sender {
            Some(sender) => match sender.try_send(span) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes the queue and waits for the thread to post what is queued
    /// (each request bounded by the exporter's timeout).
    pub(super) fn close(&mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            // A panicked export thread has nothing left to post.
            let _ = thread.join();
        }
    }
}

impl Drop for ExportQueue {
    fn drop(&mut self) {
        self.close();
    }
}

/// Posts batches until the queue closes and is empty.
fn export_loop(
    exporter: &opentelemetry_otlp::SpanExporter,
    receiver: &Receiver<SpanData>,
    counters: &Counters,
) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_SPANS {
            match receiver.try_recv() {
                Ok(span) => batch.push(span),
                Err(_) => break,
            }
        }
        let spans = batch.len() as u64;
        match futures_executor::block_on(exporter.export(batch)) {
            Ok(()) => counters.exported.fetch_add(spans, Ordering::Relaxed),
            Err(_) => counters.failed.fetch_add(spans, Ordering::Relaxed),
        };
    }
    // Nothing is buffered in the exporter itself; shutting it down only
    // releases the client.
    let _ = exporter.shutdown();
}
