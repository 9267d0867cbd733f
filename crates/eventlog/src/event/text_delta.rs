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

use super::{Event, MAX_SAFE};
use crate::kind::EventKind;
use keel_message::{OperationId, RunId};

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
    let rest = rest.strip_prefix("},\"run_id\":\"")?;
    let (run_id, rest) = rest.split_once('"')?;
    let run_id = RunId::parse(run_id).ok()?;
    let rest = rest.strip_prefix(",\"seq\":")?;
    let (seq, rest) = safe_integer(rest)?;
    let rest = rest.strip_prefix(",\"ts\":")?;
    let (ts, rest) = safe_integer(rest)?;
    if turn == 0 || seq == 0 || rest != "}" {
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

/// Skips the body of a non-empty canonical JSON string and its closing
/// quote. `None` if it is empty, unterminated, holds a raw control
/// character, or an escape other than the one the canonical encoder
/// writes for that character.
fn skip_canonical_text(s: &str) -> Option<&str> {
    let bytes = s.as_bytes();
    let mut i = 0;
    loop {
        match *bytes.get(i)? {
            b'"' => break,
            b'\\' => i += 1 + escape_len(bytes.get(i + 1..)?)?,
            0..0x20 => return None,
            _ => i += 1,
        }
    }
    if i == 0 {
        return None;
    }
    // `i` is at an ASCII quote, so `i + 1` is a char boundary.
    s.get(i + 1..)
}

/// The length of a canonical escape after its backslash: `\"`, `\\`, the
/// five short forms, or `\u00xx` (lowercase hex) for the other control
/// characters. `None` for any other escape.
fn escape_len(after: &[u8]) -> Option<usize> {
    match after {
        [b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't', ..] => Some(1),
        [b'u', b'0', b'0', hi @ (b'0' | b'1'), lo, ..] => {
            let low = match lo {
                b'0'..=b'9' => lo - b'0',
                b'a'..=b'f' => lo - b'a' + 10,
                _ => return None,
            };
            let c = ((hi - b'0') << 4) | low;
            // These have short forms, which are the canonical ones.
            (!matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)).then_some(5)
        }
        _ => None,
    }
}

/// A non-negative integer in shortest decimal form (no sign, no leading
/// zero, no fraction or exponent follows: the caller checks what comes
/// next), at most 2^53 − 1, and the text after it.
fn safe_integer(s: &str) -> Option<(u64, &str)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, rest) = s.split_at_checked(len)?;
    if len == 0 || len > 16 || (len > 1 && digits.starts_with('0')) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n <= MAX_SAFE).then_some((n, rest))
}
