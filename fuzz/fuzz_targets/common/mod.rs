//! Helpers shared by the fuzz targets (not a target itself).

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
