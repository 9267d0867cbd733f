//! The text-delta fast path of [`Event::decode`].
//!
//! Text deltas are the bulk of a log. A canonical `model.text_delta` line
//! with no unknown members has exactly one shape,
//!
//! ```text
//! {"kind":"model.text_delta","payload":{"operation_id":"ID","text":STR,"turn":N},"run_id":"ID","seq":N,"ts":N}
//! ```
//!
//! so it is checked in one pass over the line, without building a JSON
//! value: each part is checked to be what the canonical encoder writes
//! (identifiers by their rule, which admits no character JSON escapes; the
//! text as an RFC 8785 string, escapes included; integers in shortest
//! decimal form, in range). A line that passes is therefore its own
//! canonical encoding, and the generic decoder would return the same event.
//! Anything else (unknown members, another escape form, an empty text,
//! turn or seq 0, an unsafe integer, whitespace) is left to the generic
//! path, which accepts it or refuses it with its typed error: this path
//! never refuses a line itself, so errors are the generic path's.
//!
//! Text deltas are content, not failure text: like the generic path, no
//! secret screening applies to their text (screening is for
//! [`ErrorText`](crate::ErrorText) members).

use super::Event;
use super::canonical_scan::{envelope_tail, safe_integer, skip_canonical_text};
use crate::kind::EventKind;
use keel_message::OperationId;

/// Everything before the operation id.
const HEAD: &str = "{\"kind\":\"model.text_delta\",\"payload\":{\"operation_id\":\"";

/// Decodes `line` when it is a canonical `model.text_delta` event without
/// unknown members; `None` for any other line (the generic path decides).
pub(super) fn decode(line: &str) -> Option<Event> {
    let rest = line.strip_prefix(HEAD)?;
    let (operation_id, rest) = rest.split_once('"')?;
    // Checked by its owner's rule; the id itself is not kept (the event
    // holds its line, the payload is decoded on demand).
    OperationId::parse(operation_id).ok()?;
    let rest = rest.strip_prefix(",\"text\":\"")?;
    let rest = skip_canonical_text(rest)?;
    let rest = rest.strip_prefix(",\"turn\":")?;
    let (turn, rest) = safe_integer(rest)?;
    let (run_id, seq, ts) = envelope_tail(rest)?;
    if turn == 0 {
        return None;
    }
    Some(Event {
        run_id,
        seq,
        ts,
        kind: EventKind::TextDelta,
        line: line.into(),
    })
}
