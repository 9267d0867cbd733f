//! The prelude of an AG-UI join at a cursor, built a page at a time.
//!
//! A join at cursor `c` needs what events `1..=c` add up to: the mapper's
//! state at `c` (the open step, text message and tool calls) and a
//! `MESSAGES_SNAPSHOT` of the history so far. A run can be far larger
//! than what a stream may hold (its history is bounded by the run's
//! `limits.history_bytes`, 32 MiB by default, and a continued run repeats
//! its parent's), so neither is built from the run held at once:
//!
//! 1. [`PreludeFold`] takes events `1..=c` one at a time (the caller reads
//!    them a page at a time) and keeps only the mapper's state, so it
//!    finds every refusal before a byte is sent.
//! 2. [`SnapshotWriter`] takes the same events again and writes the
//!    snapshot as text, a message at a time: the messages array is written
//!    as its elements complete ([`HistoryFold`]), each on its own line.
//!    Newlines between JSON tokens are whitespace, so the `data:` lines of
//!    one SSE message, joined with `\n` as the SSE standard joins them,
//!    are the snapshot's JSON.
//!
//! What either holds at once: the mapper's state (bounded as
//! [`AguiMapper`] says), the turn being rebuilt and one message (at most
//! `limits.message_bytes`), besides the page the caller reads.

use super::{AguiError, AguiEvent, AguiMapper, AguiMessage, Stamp, Stamped};
use keel_eventlog::history::HistoryFold;
use keel_eventlog::{Event, Payload};
use keel_message::{Limits, Message, RunId};

/// Events `1..=cursor` folded into what a join at the cursor starts from.
#[derive(Debug, Default)]
pub struct PreludeFold {
    mapper: AguiMapper,
    /// The line of the last event folded in (the snapshot's `rawEvent`).
    last_line: String,
    /// Whether a `run.input` was folded in (without one the snapshot is
    /// empty, as [`keel_eventlog::history::rebuild`] yields no history).
    has_input: bool,
    /// The run a continued run's `run.input` reference names: its history
    /// starts the snapshot.
    inherits: Option<RunId>,
    /// For a fork, the parent's seq its history runs through.
    forked_at: Option<u64>,
}

impl PreludeFold {
    /// A fold from seq 1.
    pub fn new() -> PreludeFold {
        PreludeFold::default()
    }

    /// Folds in the next event (in seq order, from seq 1): the refusals of
    /// [`AguiMapper::map`].
    pub fn push(&mut self, event: &Event) -> Result<(), AguiError> {
        self.mapper.advance(event)?;
        if event.seq() == 1
            && let Ok(Payload::RunStarted(started)) = event.payload()
        {
            self.forked_at = started.forked_from.map(|fork| fork.seq);
        }
        if event.kind().name() == "run.input" {
            self.has_input = true;
            if let Ok(Payload::RunInputReference(r)) = event.payload() {
                self.inherits = Some(r.history.run_id);
            }
        }
        self.last_line.clear();
        self.last_line.push_str(event.line());
        Ok(())
    }

    /// The prelude's parts; [`AguiError::Ended`] when the run's terminal
    /// was folded in (nothing follows the cursor).
    pub fn finish(self) -> Result<Prelude, AguiError> {
        if self.mapper.ended {
            return Err(AguiError::Ended);
        }
        Ok(Prelude {
            at: Stamp::of_line(&self.last_line),
            mapper: self.mapper,
            has_input: self.has_input,
            inherits: self.inherits,
            forked_at: self.forked_at,
        })
    }
}

/// What a join at a cursor is sent before the tail, in this order:
/// [`Prelude::run_started`], the snapshot ([`Prelude::snapshot`]), then
/// [`Prelude::reopened`]; the tail maps with [`Prelude::into_mapper`].
#[derive(Debug)]
pub struct Prelude {
    mapper: AguiMapper,
    /// The stamp of the cursor's event (the snapshot's and the re-opened
    /// step's).
    at: Stamp,
    has_input: bool,
    inherits: Option<RunId>,
    forked_at: Option<u64>,
}

impl Prelude {
    /// The run whose history this run inherits (its `run.input`
    /// reference), if any: the caller rebuilds that history for
    /// [`Prelude::snapshot`].
    pub fn inherits(&self) -> Option<&RunId> {
        self.inherits.as_ref()
    }

    /// For a fork (`run.started`'s `forked_from`), the seq of
    /// [`inherits`](Self::inherits)' run its history runs through: the
    /// caller rebuilds that run only through it
    /// (`keel_eventlog::history::rebuild_fork_point`).
    pub fn forked_at(&self) -> Option<u64> {
        self.forked_at
    }

    /// `RUN_STARTED`, with the `run.started` line as `rawEvent`.
    pub fn run_started(&self) -> Stamped {
        let stamp = Stamp::of_line(self.mapper.started.as_deref().unwrap_or_default());
        Stamped::new(self.mapper.run_started(), stamp)
    }

    /// A writer of the `MESSAGES_SNAPSHOT`, to be given events
    /// `1..=cursor` again; `inherited` is the history of the run
    /// [`Prelude::inherits`] names (empty when none), written first;
    /// `limits` are the engine's message limits the history is rebuilt under.
    pub fn snapshot(&self, inherited: Vec<Message>, limits: Limits) -> SnapshotWriter {
        SnapshotWriter {
            fold: HistoryFold::after(inherited, limits),
            written: 0,
            enabled: self.has_input,
        }
    }

    /// The `MESSAGES_SNAPSHOT`'s members after its messages, as a JSON
    /// object's text without its braces' opening: `],"rawEvent":…}`.
    pub fn snapshot_close(&self) -> String {
        // `{"rawEvent":…}` (never empty) minus its `{`.
        let members = self.at.to_value().to_string();
        format!("],{}", members.get(1..).unwrap_or("}"))
    }

    /// The whole `MESSAGES_SNAPSHOT` of `messages` (what [`SNAPSHOT_OPEN`],
    /// the lines of a [`SnapshotWriter`] and [`Prelude::snapshot_close`]
    /// write as text).
    pub fn snapshot_event(&self, messages: Vec<AguiMessage>) -> Stamped {
        Stamped::new(AguiEvent::MessagesSnapshot { messages }, self.at.clone())
    }

    /// The re-opened starts of the scopes open at the cursor.
    pub fn reopened(&self) -> Vec<Stamped> {
        self.mapper.reopen(&self.at)
    }

    /// The mapper to map the tail with.
    pub fn into_mapper(self) -> AguiMapper {
        self.mapper
    }
}

/// The opening of the `MESSAGES_SNAPSHOT`'s text, up to its messages.
pub const SNAPSHOT_OPEN: &str = r#"{"type":"MESSAGES_SNAPSHOT","messages":["#;

/// The messages of a `MESSAGES_SNAPSHOT`, as text, a message at a time.
#[derive(Debug)]
pub struct SnapshotWriter {
    fold: HistoryFold,
    written: usize,
    /// False when the run recorded no input: no history, no messages.
    enabled: bool,
}

impl SnapshotWriter {
    /// Folds in the next event; the array elements (AG-UI messages) it
    /// completed, each a line of JSON text (with the `,` that separates
    /// it from the one before). The same refusals as
    /// [`PreludeFold::push`] (which saw the same events first).
    pub fn push(&mut self, event: &Event) -> Result<Vec<String>, AguiError> {
        let messages = self.push_messages(event)?;
        let mut lines = Vec::with_capacity(messages.len());
        for message in &messages {
            let sep = if self.written == 0 { "" } else { "," };
            self.written += 1;
            lines.push(format!("{sep}{}", message.to_json()));
        }
        Ok(lines)
    }

    /// Folds in the next event; the AG-UI messages it completed, typed
    /// (not counted in [`SnapshotWriter::written`]). The refusals of
    /// [`SnapshotWriter::push`].
    pub fn push_messages(&mut self, event: &Event) -> Result<Vec<AguiMessage>, AguiError> {
        self.fold.push(event).map_err(|e| AguiError::Undecodable {
            seq: event.seq(),
            detail: e.to_string(),
        })?;
        let completed = self.fold.take_completed();
        if !self.enabled {
            return Ok(Vec::new());
        }
        Ok(completed.iter().flat_map(AguiMessage::of).collect())
    }

    /// How many AG-UI messages were written.
    pub fn written(&self) -> usize {
        self.written
    }
}

/// The prelude of a join after the last of `events` (the run's events
/// from seq 1 up to the cursor, in order), and the mapper to map the
/// tail with; the snapshot holds the messages [`SnapshotWriter`] writes.
/// [`AguiError::Ended`] when the run's terminal is among them.
/// `inherited` is the history a continued run's `run.input` reference
/// names (empty for a run that inherits nothing); the snapshot starts
/// with it. `limits` are the engine's message limits.
pub fn prelude<E: AsRef<Event>>(
    events: &[E],
    inherited: Vec<Message>,
    limits: Limits,
) -> Result<(AguiMapper, Vec<Stamped>), AguiError> {
    let mut fold = PreludeFold::new();
    for event in events {
        fold.push(event.as_ref())?;
    }
    let prelude = fold.finish()?;
    let mut writer = prelude.snapshot(inherited, limits);
    let mut messages = Vec::new();
    for event in events {
        messages.extend(writer.push_messages(event.as_ref())?);
    }
    let mut out = vec![prelude.run_started(), prelude.snapshot_event(messages)];
    out.extend(prelude.reopened());
    Ok((prelude.into_mapper(), out))
}
