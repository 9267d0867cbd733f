//! What goes on an SSE `data:` line. Every frame's data is JSON text, in
//! which U+2028 and U+2029 may stand raw inside strings; some line
//! splitters (JavaScript's before ES2019, line readers that follow
//! Unicode) break a line there and hand a client half an event. So they
//! are written as the escapes `\u2028` and `\u2029`, the same JSON value.
//! Every stream (Keel events, AG-UI, the chat UI stream) passes its data
//! through [`escape_separators`] where its frames are made.

use std::borrow::Cow;

/// `json` with every U+2028 and U+2029 written as its `\u` escape (only
/// JSON strings can hold them, where the escape is the same character).
pub fn escape_separators(json: &str) -> Cow<'_, str> {
    if !json.contains(['\u{2028}', '\u{2029}']) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        match c {
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_escaped_and_the_value_is_unchanged() {
        let text = "{\"t\":\"a\u{2028}b\u{2029}c\"}";
        let escaped = escape_separators(text);
        assert_eq!(escaped, "{\"t\":\"a\\u2028b\\u2029c\"}");
        let before: serde_json::Value = serde_json::from_str(text).unwrap();
        let after: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(before, after);
        assert!(matches!(escape_separators("{}"), Cow::Borrowed(_)));
    }
}
