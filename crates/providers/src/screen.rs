//! Screening wire text before it leaves the adapter: a metadata value is
//! kept only if it is short, visible ASCII, passes the secret screen and
//! does not hold the key; an identifier shown in a problem message (an
//! error `type` or `code`, a finish reason) only if it is a short token.

use crate::key::ApiKey;
use serde_json::Value;

/// The longest metadata string value kept.
const METADATA_VALUE_MAX_BYTES: usize = 256;

/// `value` if it is a safe metadata fact: a short string of visible ASCII
/// (no quotes or backslashes) that the secret screen does not flag and
/// that does not contain the key. Anything else is dropped, so that an odd
/// value never fails the stream.
pub(crate) fn safe_value(value: &str, key: Option<&ApiKey>) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= METADATA_VALUE_MAX_BYTES
        && value
            .bytes()
            .all(|b| (b.is_ascii_graphic() || b == b' ') && b != b'"' && b != b'\\')
        && keel_stream::secrets::screen_value(value).is_none()
        && key.is_none_or(|k| !value.contains(k.expose()));
    ok.then(|| value.to_owned())
}

/// A JSON member as a safe metadata fact: a string that passes
/// [`safe_value`]; any other value is dropped.
pub(crate) fn safe_fact(value: &Option<Value>, key: Option<&ApiKey>) -> Option<String> {
    match value {
        Some(Value::String(s)) => safe_value(s, key),
        _ => None,
    }
}

/// Puts each value that is a safe fact ([`safe_fact`]) in its slot; a
/// slot whose value is not keeps what it had (facts repeat across
/// chunks and events, and a later safe value replaces an earlier one).
pub(crate) fn keep_facts<const N: usize>(
    facts: [(&mut Option<String>, &Option<Value>); N],
    key: Option<&ApiKey>,
) {
    for (slot, value) in facts {
        if let Some(v) = safe_fact(value, key) {
            *slot = Some(v);
        }
    }
}

/// A short, safe identifier from a provider's error body (an error `type`
/// or `code`): `^[A-Za-z0-9_.:-]{1,64}$`.
pub(crate) fn safe_code(value: &str) -> Option<&str> {
    ((1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')))
    .then_some(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_values_are_screened() {
        let key = ApiKey::new("local-secret-123").unwrap();
        assert_eq!(
            safe_value("gpt-4.1-mini", None).as_deref(),
            Some("gpt-4.1-mini")
        );
        assert_eq!(safe_value("", None), None);
        assert_eq!(safe_value("a\"b", None), None);
        assert_eq!(safe_value(&"x".repeat(300), None), None);
        let openai_shaped = format!("sk-{}", "a1".repeat(15));
        assert_eq!(safe_value(&openai_shaped, None), None);
        assert_eq!(safe_value("id-local-secret-123", Some(&key)), None);
        assert_eq!(
            safe_code("rate_limit_exceeded"),
            Some("rate_limit_exceeded")
        );
        assert_eq!(safe_code("no spaces"), None);
    }

    #[test]
    fn only_string_members_are_facts() {
        assert_eq!(safe_fact(&Some(json!("m-1")), None).as_deref(), Some("m-1"));
        assert_eq!(safe_fact(&Some(json!(7)), None), None);
        assert_eq!(safe_fact(&None, None), None);
        let key = ApiKey::new("local-secret-123").unwrap();
        assert_eq!(
            safe_fact(&Some(json!("local-secret-123")), Some(&key)),
            None
        );
    }
}
