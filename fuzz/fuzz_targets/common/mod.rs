//! Helpers shared by the fuzz targets (not a target itself).

pub mod events;
#[allow(dead_code)]
pub mod provider;

/// Rotates the ASCII letters and digits inside JSON string *values*
/// (`a→b … z→a`, `A→B … Z→A`, `0→1 … 9→0`), leaving escape sequences
/// (`\x`, `\uXXXX`), object keys (a string followed by `:`), and everything
/// outside strings untouched.
///
/// With `only_values_of = Some(keys)`, only the string values of those
/// members are rotated: `"key": "…"`, and every string value at any depth
/// inside `"key": {…}` or `"key": […]`.
///
/// The rotation is a bijection on bytes that JSON's string grammar treats
/// alike, and keeps every byte length and offset, so it changes neither
/// whether the text parses nor where or why it fails. An error message
/// that differs between the input and its rotation therefore depends on
/// the content of a string value: it echoes input. Unlike searching the
/// message for the input, this cannot be fooled by input that happens to
/// spell the message's own template text.
///
/// The scan follows JSON's lexing of strings, which agrees with any parser
/// up to the first syntax error; bytes after that point may be classified
/// differently, but the parser's verdict does not depend on them.
#[allow(dead_code)]
pub fn rotate_string_values(input: &str, only_values_of: Option<&[&str]>) -> String {
    let bytes = input.as_bytes();
    let mut out = bytes.to_vec();
    let mut last_significant: Option<u8> = None;
    let mut last_key: Option<(usize, usize)> = None;
    // For each open container: are all string values inside it rotated?
    let mut containers: Vec<bool> = Vec::new();
    let mut i = 0;
    let selected =
        |last_significant: Option<u8>, last_key: Option<(usize, usize)>| match only_values_of {
            None => true,
            Some(keys) => {
                last_significant == Some(b':')
                    && last_key
                        .is_some_and(|(s, e)| keys.iter().any(|k| k.as_bytes() == &bytes[s..e]))
            }
        };
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'"' {
            match b {
                b'{' | b'[' => {
                    let inside = containers.last().copied().unwrap_or(false);
                    containers.push(inside || selected(last_significant, last_key));
                }
                b'}' | b']' => {
                    containers.pop();
                }
                _ => {}
            }
            if !b.is_ascii_whitespace() {
                last_significant = Some(b);
            }
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let end = end.min(bytes.len());
        let next = bytes[(end + 1).min(bytes.len())..]
            .iter()
            .find(|b| !b.is_ascii_whitespace());
        if next == Some(&b':') {
            last_key = Some((start, end));
        } else {
            let inside = containers.last().copied().unwrap_or(false);
            if inside || selected(last_significant, last_key) {
                rotate_range(&bytes[start..end], &mut out[start..end]);
            }
        }
        last_significant = Some(b'"');
        i = end + 1;
    }
    // Only ASCII bytes were replaced by ASCII bytes.
    String::from_utf8(out).unwrap_or_else(|_| unreachable!("rotation keeps UTF-8"))
}

/// Rotates every ASCII letter and digit of plain (non-JSON) text, as
/// [`rotate_string_values`] does inside strings.
#[allow(dead_code)]
pub fn rotate_all(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='y' | 'A'..='Y' | '0'..='8' => char::from(c as u8 + 1),
            'z' => 'a',
            'Z' => 'A',
            '9' => '0',
            other => other,
        })
        .collect()
}

fn rotate_range(src: &[u8], dst: &mut [u8]) {
    let mut k = 0;
    while k < src.len() {
        match src[k] {
            b'\\' => {
                let skip = if src.get(k + 1) == Some(&b'u') { 6 } else { 2 };
                k += skip;
                continue;
            }
            b @ b'a'..=b'y' | b @ b'A'..=b'Y' | b @ b'0'..=b'8' => dst[k] = b + 1,
            b'z' => dst[k] = b'a',
            b'Z' => dst[k] = b'A',
            b'9' => dst[k] = b'0',
            _ => {}
        }
        k += 1;
    }
}

/// Members whose values are content that errors must never echo (a
/// reasoning part's opaque `signature` and `redacted` values among them;
/// `base64` is not rotated, since that can change whether it decodes).
#[allow(dead_code)] // not every target uses every helper
pub const CONTENT: &[&str] = &[
    "text",
    "content",
    "description",
    "arguments",
    "signature",
    "redacted",
];

/// The properties shared by the value targets: a decoded value re-encodes,
/// decodes back equal (through `decode` and through serde), and re-encodes
/// byte for byte; a rejected input's error does not depend on content.
#[allow(dead_code)]
pub fn check_value<T, E>(
    data: &[u8],
    what: &str,
    decode: fn(&str, &keel_message::Limits) -> Result<T, E>,
) where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    E: std::fmt::Display,
{
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let limits = keel_message::Limits::default();
    let m = match decode(s, &limits) {
        Ok(m) => m,
        Err(e) => return check_no_echo(s, &e.to_string(), &limits, decode),
    };
    let json = serde_json::to_string(&m)
        .unwrap_or_else(|e| panic!("valid {what} does not encode: {e}\ninput: {s:?}"));
    let back = decode(&json, &limits).unwrap_or_else(|e| {
        panic!("encoded {what} does not decode: {e}\ninput: {s:?}\nencoded: {json}")
    });
    assert_eq!(
        back, m,
        "round trip changed the {what}\ninput: {s:?}\nencoded: {json}"
    );
    let via_serde: T = serde_json::from_str(&json).unwrap_or_else(|e| {
        panic!("serde Deserialize rejects the encoding: {e}\ninput: {s:?}\nencoded: {json}")
    });
    assert_eq!(
        via_serde, m,
        "serde Deserialize disagrees\ninput: {s:?}\nencoded: {json}"
    );
    let again = serde_json::to_string(&back)
        .unwrap_or_else(|e| panic!("decoded {what} does not encode: {e}\ninput: {s:?}"));
    assert_eq!(
        again, json,
        "re-encoding is not byte-identical\ninput: {s:?}"
    );
}

#[allow(dead_code)]
fn check_no_echo<T, E: std::fmt::Display>(
    input: &str,
    display: &str,
    limits: &keel_message::Limits,
    decode: fn(&str, &keel_message::Limits) -> Result<T, E>,
) {
    let rotated = rotate_string_values(input, Some(CONTENT));
    if rotated == input {
        return;
    }
    match decode(&rotated, limits) {
        Ok(_) => panic!(
            "rotating content made an invalid input valid\ninput: {input:?}\nrotated: {rotated:?}\nerror: {display}"
        ),
        Err(e) => assert_eq!(
            display,
            e.to_string(),
            "error message depends on content (echo)\ninput: {input:?}\nrotated: {rotated:?}"
        ),
    }
}
