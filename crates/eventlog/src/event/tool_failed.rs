//! The `tool.failed` fast path of [`Event::decode`].
//!
//! A canonical `tool.failed` line with no unknown members and known
//! `outcome` and `retry` values (each optional) has one shape,
//!
//! ```text
//! {"kind":"tool.failed","payload":{"call_id":"ID","error":STR[,"outcome":V][,"retry":V],"tool":"NAME","turn":N},"run_id":"ID","seq":N,"ts":N}
//! ```
//!
//! so, like the text delta's (see [`super::text_delta`]), it is checked in
//! one pass without building a JSON value. The error text is an
//! [`ErrorText`]: the line is taken only if screening the decoded text
//! (secrets, control characters, the length bound) leaves it unchanged,
//! which is exactly when the generic path's re-encoding matches the line.
//! Anything else (unknown members or values, an empty text, a text that
//! screening changes, turn 0, another escape form) is left to the other
//! paths, which accept it or refuse it with their typed error.

use super::Event;
use super::canonical_scan::{envelope_tail, safe_integer, skip_canonical_text};
use crate::kind::{EventKind, Phase, Scope, Terminal};
use crate::payload::ErrorText;
use keel_message::{CallId, ToolName};
use std::borrow::Cow;

/// Everything before the call id.
const HEAD: &str = "{\"kind\":\"tool.failed\",\"payload\":{\"call_id\":\"";

/// Decodes `line` when it is a canonical `tool.failed` event of the shape
/// above; `None` for any other line (the other paths decide).
pub(super) fn decode(line: &str) -> Option<Event> {
    let rest = line.strip_prefix(HEAD)?;
    let (call_id, rest) = rest.split_once('"')?;
    CallId::parse(call_id).ok()?;
    let rest = rest.strip_prefix(",\"error\":")?;
    let rest = screened_error_text(rest)?;
    let rest = optional_member(rest, ",\"outcome\":", &["definitive", "uncertain"])?;
    let rest = optional_member(rest, ",\"retry\":", &["retryable", "not_retryable"])?;
    let rest = rest.strip_prefix(",\"tool\":\"")?;
    let (tool, rest) = rest.split_once('"')?;
    ToolName::parse(tool).ok()?;
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
        kind: EventKind::Lifecycle(Scope::Tool, Phase::Ended(Terminal::Failed)),
        line: line.into(),
    })
}

/// Skips a canonical, non-empty JSON string that screening as an
/// [`ErrorText`] leaves unchanged; the text after it.
fn screened_error_text(rest: &str) -> Option<&str> {
    let after = skip_canonical_text(rest.strip_prefix('"')?)?;
    let quoted = rest.get(..rest.len() - after.len())?;
    let body = quoted.get(1..quoted.len() - 1)?;
    // Only escaped texts need unescaping; the string is canonical, so
    // serde_json reads exactly the text the generic path reads.
    let text: Cow<'_, str> = if body.contains('\\') {
        Cow::Owned(serde_json::from_str::<String>(quoted).ok()?)
    } else {
        Cow::Borrowed(body)
    };
    (ErrorText::new(&text).as_str() == text).then_some(after)
}

/// Skips `name` followed by one of the quoted `values`, if `rest` starts
/// with `name`; `rest` unchanged if it does not; `None` if the member is
/// there with another value (the generic path keeps unknown values).
fn optional_member<'a>(rest: &'a str, name: &str, values: &[&str]) -> Option<&'a str> {
    let Some(value) = rest.strip_prefix(name) else {
        return Some(rest);
    };
    let value = value.strip_prefix('"')?;
    let (value, after) = value.split_once('"')?;
    values.contains(&value).then_some(after)
}
