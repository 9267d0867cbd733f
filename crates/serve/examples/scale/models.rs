//! The scripted models and the tool the scale runs use.

use keel_engine::{Tool, ToolFuture, ToolInvocation, ToolOutput};
use keel_message::{Message, ModelRequest, Role, ToolDefinition, ToolSpec};
use keel_stream::{FinishReason, ModelProvider, RawItem, RawStream, StartFuture};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// The tool an idle run waits in.
pub const PARK: ToolSpec = ToolSpec::new(
    "park",
    "Waits until the host releases every parked run",
    r#"{"type":"object"}"#,
);

/// A gate many tasks wait on and the host opens once.
#[derive(Clone)]
pub struct Gate(watch::Receiver<bool>);

impl Gate {
    /// A closed gate and the sender that opens it.
    pub fn closed() -> (watch::Sender<bool>, Gate) {
        let (open, gate) = watch::channel(false);
        (open, Gate(gate))
    }

    async fn passed(&self) {
        let mut gate = self.0.clone();
        let _ = gate.wait_for(|open| *open).await;
    }
}

/// Counts the runs that reached a point and wakes the host at a target.
#[derive(Default)]
pub struct Arrivals {
    count: AtomicUsize,
    changed: Notify,
}

impl Arrivals {
    fn arrive(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Waits until `target` runs arrived.
    pub async fn reached(&self, target: usize) {
        loop {
            let changed = self.changed.notified();
            if self.count.load(Ordering::Acquire) >= target {
                return;
            }
            // A bounded wait: a notification between the load and the
            // await is not lost for more than the tick.
            let _ = tokio::time::timeout(Duration::from_millis(50), changed).await;
        }
    }
}

/// `park`: counts its caller in, then waits for the gate.
pub struct ParkTool {
    definition: ToolDefinition,
    gate: Gate,
    parked: Arc<Arrivals>,
}

impl ParkTool {
    pub fn new(gate: Gate, parked: Arc<Arrivals>) -> ParkTool {
        ParkTool {
            definition: PARK.definition(),
            gate,
            parked,
        }
    }
}

impl Tool for ParkTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call(&self, _invocation: ToolInvocation) -> ToolFuture {
        let (gate, parked) = (self.gate.clone(), Arc::clone(&self.parked));
        Box::pin(async move {
            parked.arrive();
            gate.passed().await;
            Ok(ToolOutput::new("released"))
        })
    }
}

/// Calls `park` after the user's message, answers "done" after its result.
pub struct ParkingModel;

impl ModelProvider for ParkingModel {
    fn start(&self, request: ModelRequest) -> StartFuture {
        let after_tool = request.history().last().map(Message::role) == Some(Role::Tool);
        let items = match after_tool {
            true => vec![RawItem::text("done"), RawItem::complete(FinishReason::Stop)],
            false => vec![
                RawItem::tool_call("park-1", PARK.definition().name().as_str(), "{}"),
                RawItem::complete(FinishReason::ToolCalls),
            ],
        };
        let stream: RawStream = Box::pin(futures_util::stream::iter(items));
        Box::pin(std::future::ready(Ok(stream)))
    }
}

/// `deltas` text deltas of ~11 bytes after the gate opens, `pace` apart
/// (none when zero), then a completion.
pub struct GatedDeltas {
    pub deltas: usize,
    pub pace: Duration,
    pub gate: Gate,
}

impl ModelProvider for GatedDeltas {
    fn start(&self, _request: ModelRequest) -> StartFuture {
        let (deltas, pace, gate) = (self.deltas, self.pace, self.gate.clone());
        let stream: RawStream = Box::pin(async_stream::stream! {
            gate.passed().await;
            for i in 0..deltas {
                if !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
                yield RawItem::text(format!("token {i:>4} "));
            }
            yield RawItem::complete(FinishReason::Stop);
        });
        Box::pin(std::future::ready(Ok(stream)))
    }
}
