//! The event envelope and its canonical line encoding: an [`Event`] is
//! its canonical line plus a small parsed header (kind, run, seq, ts), and
//! [`Event::decode`] accepts a line only if re-encoding it gives the same
//! bytes (unknown payload members included). `model.text_delta`, the bulk
//! of a log, has a fast path of the same rules in `event/text_delta.rs`,
//! and `tool.failed` one in `event/tool_failed.rs`.

use crate::decimal::{digits, push_u64};
use crate::kind::{EventKind, KindError};
use crate::payload::{Encoded, Payload, PayloadError};
use keel_message::{IdError, RunId};
use std::fmt;

mod canonical_scan;
#[cfg(test)]
mod line_tests;
#[cfg(test)]
mod tests;
mod text_delta;
mod tool_failed;
#[cfg(test)]
mod tool_failed_tests;

/// The schema version recorded by journals and snapshots.
pub const SCHEMA_VERSION: &str = "keel.events/1";

/// One committed event: run id, sequence, timestamp, kind, and its
/// canonical line.
///
/// The line is the event: one RFC 8785 canonical JSON object,
/// `{"kind":…,"payload":{…},"run_id":…,"seq":N,"ts":T}`, exactly the bytes
/// a journal stores and a client receives. The typed payload is decoded
/// from it on demand ([`Event::payload`]), so a retained event costs its
/// line plus a small fixed header in memory.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    run_id: RunId,
    seq: u64,
    ts: u64,
    kind: EventKind,
    line: Box<str>,
}

/// Why a line is not a valid event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventDecodeError {
    /// Not JSON, or JSON that breaks a canonical JSON rule.
    #[error("event line is not valid JSON: {0}")]
    Json(#[from] keel_message::JsonError),
    /// The envelope is missing a member, has an extra one, or one of the
    /// wrong type.
    #[error("event envelope: {detail} (rule event.envelope)")]
    Envelope {
        /// Which member and what was wrong.
        detail: &'static str,
    },
    /// The kind name is malformed or an unknown lifecycle kind.
    #[error(transparent)]
    Kind(#[from] KindError),
    /// The run id breaks the identifier rule.
    #[error(transparent)]
    RunId(#[from] IdError),
    /// `seq` is 0 or not a safe integer.
    #[error("seq {seq} is out of range (rule event.seq: 1..=2^53-1)")]
    Seq {
        /// The value found.
        seq: u64,
    },
    /// `ts` is not a safe integer (JSON readers that use doubles would
    /// round it).
    #[error("ts {ts} is out of range (rule event.ts: 0..=2^53-1)")]
    Ts {
        /// The value found.
        ts: u64,
    },
    /// The payload does not match its kind's schema.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The line decodes, but is not the canonical encoding of what it
    /// holds (re-encoding gives other bytes), so it cannot be stored or
    /// forwarded byte for byte.
    #[error(
        "event line is not in canonical form (rule event.canonical); first difference at byte {offset}"
    )]
    NotCanonical {
        /// Byte offset of the first difference.
        offset: usize,
    },
}

// The largest `seq` and `ts`: keel-message's 2^53 − 1, so lines stay I-JSON.
pub(crate) use keel_message::canonical::MAX_SAFE_INTEGER as MAX_SAFE;

/// `{"kind":"","payload":` without the kind name.
const HEAD_FIXED_BYTES: usize = 21;
/// `,"run_id":"","seq":,"ts":}` without its variable parts.
const TAIL_FIXED_BYTES: usize = 26;

/// The head of an event line, `{"kind":…,"payload":{…}`, written before
/// the log's lock into an allocation of the whole line's final size for
/// the sequence and timestamp the commit expects; [`LineHead::finish`]
/// writes the tail (run id, `seq`, `ts`) under the lock. Only when the
/// actual `seq` or `ts` has another number of digits than expected (a
/// racing commit crossed a power of ten, or the clock is behind the log's
/// last `ts`) is the line copied once more, so it is always allocated at
/// exactly its length (no spare capacity, no shrinking reallocation).
pub(crate) struct LineHead {
    line: String,
    kind: EventKind,
    seq_digits: usize,
    ts_digits: usize,
}

impl LineHead {
    /// `payload` is the checked payload of `kind`; `seq` and `ts` are the
    /// expected ones, for the capacity only.
    pub(crate) fn new(
        kind: EventKind,
        payload: &Encoded<'_>,
        run_id: &RunId,
        seq: u64,
        ts: u64,
    ) -> LineHead {
        let (seq_digits, ts_digits) = (digits(seq), digits(ts));
        let name = kind.name();
        let len = HEAD_FIXED_BYTES
            + name.len()
            + payload.len()
            + TAIL_FIXED_BYTES
            + run_id.as_str().len()
            + seq_digits
            + ts_digits;
        let mut line = String::with_capacity(len);
        // Members in RFC 8785 order: kind < payload < run_id < seq < ts.
        // Kind names and run ids are restricted to characters that need no
        // escaping, so they are written as they are.
        line.push_str("{\"kind\":\"");
        line.push_str(&name);
        line.push_str("\",\"payload\":");
        payload.write(&mut line);
        LineHead {
            line,
            kind,
            seq_digits,
            ts_digits,
        }
    }

    /// The length of the finished line with these members.
    pub(crate) fn line_len(&self, tail: &RunTail, seq: u64, ts: u64) -> usize {
        self.line.len() + tail.0.len() + TS_FIXED_BYTES + digits(seq) + digits(ts)
    }

    /// The event of `tail`'s run, with its tail written.
    pub(crate) fn finish(self, run_id: RunId, tail: &RunTail, seq: u64, ts: u64) -> Event {
        debug_assert_eq!(*tail.0, *RunTail::new(&run_id).0);
        let len = self.line_len(tail, seq, ts);
        let mut line = self.line;
        if digits(seq) != self.seq_digits || digits(ts) != self.ts_digits {
            let mut exact = String::with_capacity(len);
            exact.push_str(&line);
            line = exact;
        }
        line.push_str(&tail.0);
        push_u64(&mut line, seq);
        line.push_str(",\"ts\":");
        push_u64(&mut line, ts);
        line.push('}');
        debug_assert_eq!(line.len(), len);
        debug_assert_eq!(line.capacity(), len);
        Event {
            run_id,
            seq,
            ts,
            kind: self.kind,
            line: line.into_boxed_str(),
        }
    }
}

/// `,"ts":}`.
const TS_FIXED_BYTES: usize = 7;

/// `,"run_id":"…","seq":` of one run, written once per log: the start of
/// every line's tail.
pub(crate) struct RunTail(Box<str>);

impl RunTail {
    pub(crate) fn new(run_id: &RunId) -> RunTail {
        RunTail(format!(",\"run_id\":\"{}\",\"seq\":", run_id.as_str()).into_boxed_str())
    }
}

/// `,"run_id":"…","seq":N,"ts":T}`.
fn push_tail(line: &mut String, run_id: &RunId, seq: u64, ts: u64) {
    line.push_str(",\"run_id\":\"");
    line.push_str(run_id.as_str());
    line.push_str("\",\"seq\":");
    push_u64(line, seq);
    line.push_str(",\"ts\":");
    push_u64(line, ts);
    line.push('}');
}

impl Event {
    /// Builds the canonical line from its parts. `payload_json` must be the
    /// canonical text of a JSON object (as [`Payload::to_canonical`] gives).
    pub(crate) fn assemble(
        run_id: RunId,
        seq: u64,
        ts: u64,
        kind: EventKind,
        payload_json: &str,
    ) -> Event {
        let name = kind.name();
        // The exact length, so the line is allocated once at its final size
        // (an estimate that grows and then shrinks leaves a heap hole after
        // every retained line).
        let len = HEAD_FIXED_BYTES
            + name.len()
            + payload_json.len()
            + TAIL_FIXED_BYTES
            + run_id.as_str().len()
            + digits(seq)
            + digits(ts);
        let mut line = String::with_capacity(len);
        line.push_str("{\"kind\":\"");
        line.push_str(&name);
        line.push_str("\",\"payload\":");
        line.push_str(payload_json);
        push_tail(&mut line, &run_id, seq, ts);
        debug_assert_eq!(line.len(), len);
        Event {
            run_id,
            seq,
            ts,
            kind,
            line: line.into_boxed_str(),
        }
    }

    /// Decodes one line, checking the envelope, the kind, the payload
    /// schema, and that the line is canonical (so `decode(line).line() ==
    /// line`, byte for byte).
    ///
    /// Canonical text deltas and `tool.failed` events take one-pass paths;
    /// lines whose envelope is
    /// a plain object of the five members are read into a borrowed
    /// envelope; any other line goes through [`Event::decode_generic`].
    /// Every path gives the same result for every line (tested and
    /// fuzzed).
    pub fn decode(line: &str) -> Result<Event, EventDecodeError> {
        if let Some(event) = text_delta::decode(line).or_else(|| tool_failed::decode(line)) {
            return Ok(event);
        }
        match decode_envelope(line) {
            Some(decoded) => decoded,
            None => Event::decode_generic(line),
        }
    }

    /// Decodes like [`Event::decode`], with neither of its shortcuts: the
    /// whole line is read as a JSON value and checked member by member.
    /// The reference the shortcuts are tested and fuzzed against; the
    /// result is the same for every line.
    pub fn decode_generic(line: &str) -> Result<Event, EventDecodeError> {
        let value = parse_value(line)?;
        let serde_json::Value::Object(mut map) = value else {
            return Err(EventDecodeError::Envelope {
                detail: "not an object",
            });
        };
        let kind = match map.remove("kind") {
            Some(serde_json::Value::String(k)) => EventKind::parse(&k)?,
            _ => {
                return Err(EventDecodeError::Envelope {
                    detail: "kind must be a string",
                });
            }
        };
        let run_id = match map.remove("run_id") {
            Some(serde_json::Value::String(r)) => RunId::parse(&r)?,
            _ => {
                return Err(EventDecodeError::Envelope {
                    detail: "run_id must be a string",
                });
            }
        };
        let seq = take_u64(&mut map, "seq", "seq must be an integer")?;
        check_seq(seq)?;
        let ts = take_u64(&mut map, "ts", "ts must be a non-negative integer")?;
        check_ts(ts)?;
        let payload_value = map.remove("payload").ok_or(EventDecodeError::Envelope {
            detail: "payload is missing",
        })?;
        if !map.is_empty() {
            return Err(EventDecodeError::Envelope {
                detail: "unknown envelope member",
            });
        }
        canonical_event(line, run_id, seq, ts, kind, payload_value)
    }

    /// The run this event belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
    /// The sequence: 1 for the first event of a run, +1 per commit.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Microseconds since the Unix epoch, from the engine's clock;
    /// non-decreasing within a run, at most 2^53 − 1.
    pub fn ts(&self) -> u64 {
        self.ts
    }
    /// The kind.
    pub fn kind(&self) -> &EventKind {
        &self.kind
    }
    /// The canonical line (no trailing newline).
    pub fn line(&self) -> &str {
        &self.line
    }
    /// The canonical payload text, a slice of the line.
    pub fn payload_json(&self) -> &str {
        let head = HEAD_FIXED_BYTES + self.kind.name().len();
        let tail =
            TAIL_FIXED_BYTES + self.run_id.as_str().len() + digits(self.seq) + digits(self.ts);
        self.line
            .get(head..self.line.len().saturating_sub(tail))
            .unwrap_or("")
    }
    /// Decodes the typed payload.
    pub fn payload(&self) -> Result<Payload, EventDecodeError> {
        let value = parse_value(self.payload_json())?;
        Ok(Payload::from_json(&self.kind, value)?)
    }
    /// Bytes this event counts against a byte bound: its line plus
    /// [`ENTRY_OVERHEAD_BYTES`], so the bound tracks real memory.
    pub fn retained_bytes(&self) -> usize {
        self.line.len() + ENTRY_OVERHEAD_BYTES
    }
}

/// The fixed in-memory cost of one retained event beyond its line: the
/// `Arc<Event>` block (a 96-byte malloc chunk), rounding of the line's own
/// chunk, and the deque slot with its spare capacity — 129 bytes measured
/// on glibc, rounded up. Byte bounds count it, so a 64 MiB bound means
/// about 64 MiB of memory (see docs/PERFORMANCE.md).
pub const ENTRY_OVERHEAD_BYTES: usize = 144;

/// Parses JSON text into a value. The plain serde_json parse is enough
/// here: every decoded line is re-encoded and compared byte for byte, which
/// refuses duplicate members, unsorted keys, unsafe integers and every
/// other non-canonical form. Only a text serde_json refuses goes through
/// the validating parser, for its typed error.
fn parse_value(text: &str) -> Result<serde_json::Value, EventDecodeError> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(_) => match keel_message::CanonicalJson::parse(text) {
            Err(e) => Err(EventDecodeError::Json(e)),
            Ok(c) => Ok(c.to_value()),
        },
    }
}

/// The envelope of a line that is a JSON object with exactly the five
/// members, each of the right JSON type, strings without escapes (what a
/// canonical line holds). Any other line fails to read into it and takes
/// the generic path, which names what is wrong.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    kind: &'a str,
    payload: serde_json::Value,
    run_id: &'a str,
    seq: u64,
    ts: u64,
}

/// Decodes a line whose envelope reads as an [`Envelope`], with the
/// generic path's checks in its order (every member is present and of its
/// type, so those checks pass); `None` for any other line. Only an object
/// is tried: serde would also read the five members from an array.
fn decode_envelope(line: &str) -> Option<Result<Event, EventDecodeError>> {
    if !line.starts_with('{') {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_str(line).ok()?;
    Some(decode_members(line, envelope))
}

fn decode_members(line: &str, envelope: Envelope<'_>) -> Result<Event, EventDecodeError> {
    let kind = EventKind::parse(envelope.kind)?;
    let run_id = RunId::parse(envelope.run_id)?;
    let (seq, ts) = (envelope.seq, envelope.ts);
    check_seq(seq)?;
    check_ts(ts)?;
    canonical_event(line, run_id, seq, ts, kind, envelope.payload)
}

fn check_seq(seq: u64) -> Result<(), EventDecodeError> {
    if seq == 0 || seq > MAX_SAFE {
        return Err(EventDecodeError::Seq { seq });
    }
    Ok(())
}

fn check_ts(ts: u64) -> Result<(), EventDecodeError> {
    if ts > MAX_SAFE {
        return Err(EventDecodeError::Ts { ts });
    }
    Ok(())
}

/// Decodes the payload for `kind` and checks that `line` is exactly the
/// canonical encoding of the event, byte for byte.
fn canonical_event(
    line: &str,
    run_id: RunId,
    seq: u64,
    ts: u64,
    kind: EventKind,
    payload: serde_json::Value,
) -> Result<Event, EventDecodeError> {
    let payload = Payload::from_json(&kind, payload)?;
    let payload_json = payload.to_canonical()?;
    let event = Event::assemble(run_id, seq, ts, kind, &payload_json);
    if &*event.line != line {
        let offset = event
            .line
            .bytes()
            .zip(line.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(event.line.len().min(line.len()));
        return Err(EventDecodeError::NotCanonical { offset });
    }
    Ok(event)
}

fn take_u64(
    map: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    detail: &'static str,
) -> Result<u64, EventDecodeError> {
    map.remove(key)
        .and_then(|v| v.as_u64())
        .ok_or(EventDecodeError::Envelope { detail })
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

impl AsRef<Event> for Event {
    fn as_ref(&self) -> &Event {
        self
    }
}
