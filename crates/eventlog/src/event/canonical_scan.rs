//! Scanning the parts of a canonical event line, for the decode fast
//! paths ([`super::text_delta`], [`super::tool_failed`]): each helper
//! accepts only what the canonical encoder writes and returns `None` for
//! anything else, so a fast path steps aside rather than refusing a line.

use super::MAX_SAFE;
use keel_message::RunId;

/// The envelope after a payload object: `},"run_id":"ID","seq":N,"ts":N}`
/// to the end of the line, with the run id by its rule, `seq` at least 1
/// and both integers safe and in shortest form.
pub(super) fn envelope_tail(rest: &str) -> Option<(RunId, u64, u64)> {
    let rest = rest.strip_prefix("},\"run_id\":\"")?;
    let (run_id, rest) = rest.split_once('"')?;
    let run_id = RunId::parse(run_id).ok()?;
    let rest = rest.strip_prefix(",\"seq\":")?;
    let (seq, rest) = safe_integer(rest)?;
    let rest = rest.strip_prefix(",\"ts\":")?;
    let (ts, rest) = safe_integer(rest)?;
    (seq != 0 && rest == "}").then_some((run_id, seq, ts))
}

/// Skips the body of a non-empty canonical JSON string and its closing
/// quote. `None` if it is empty, unterminated, holds a raw control
/// character, or an escape other than the one the canonical encoder
/// writes for that character.
pub(super) fn skip_canonical_text(s: &str) -> Option<&str> {
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
pub(super) fn safe_integer(s: &str) -> Option<(u64, &str)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, rest) = s.split_at_checked(len)?;
    if len == 0 || len > 16 || (len > 1 && digits.starts_with('0')) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n <= MAX_SAFE).then_some((n, rest))
}
