//! The value rule's scanner: every span of a text shaped like a
//! credential (see the parent module's docs for the shapes).

use super::bytes::{find, is_alnum, run};
use super::{REDACTED, SecretRule, formats, keys::screen_key};

/// One flagged span of a text: byte range (always on char boundaries: every
/// scanner starts and stops at ASCII bytes) and the rule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) rule: SecretRule,
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Whether a token may start at `at`: the previous byte is not an ASCII
/// letter or digit.
fn token_start(bytes: &[u8], at: usize) -> bool {
    at == 0 || !is_alnum(bytes[at - 1])
}

fn starts_with_ignore_case(bytes: &[u8], at: usize, word: &[u8]) -> bool {
    bytes
        .get(at..at + word.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(word))
}

/// `Bearer <x>` / `Basic <x>`.
fn auth_scheme(bytes: &[u8], at: usize) -> Option<usize> {
    let word_len = if starts_with_ignore_case(bytes, at, b"bearer") {
        6
    } else if starts_with_ignore_case(bytes, at, b"basic") {
        5
    } else {
        return None;
    };
    let mut i = at + word_len;
    let spaces = run(bytes, i, |b| b == b' ' || b == b'\t');
    if spaces == 0 {
        return None;
    }
    i += spaces;
    let n = run(bytes, i, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
    });
    if n < 8 {
        return None;
    }
    let cred = &bytes[i..i + n];
    // A plain lowercase word is prose ("basic information"), not a credential.
    if cred.iter().all(|b| b.is_ascii_lowercase()) {
        return None;
    }
    Some(i + n)
}

/// A JSON Web Token: `eyJ` and three dot-separated base64url runs (the
/// last may be empty), or gitleaks' looser `ey…` form, whose second segment
/// also starts `ey`, both at least 19 bytes of base64 (`/`, `\\` too).
fn jwt(bytes: &[u8], at: usize) -> Option<usize> {
    if !bytes[at..].starts_with(b"ey") {
        return None;
    }
    let strict = bytes[at..].starts_with(b"eyJ");
    let loose_char = |b: u8| is_key_char(b) || matches!(b, b'/' | b'\\' | b'+' | b'=');
    let segment = |from: usize| {
        if strict {
            run(bytes, from, is_key_char)
        } else {
            run(bytes, from, loose_char)
        }
    };
    let s1 = segment(at);
    if s1 < if strict { 10 } else { 19 } || bytes.get(at + s1) != Some(&b'.') {
        return None;
    }
    let p2 = at + s1 + 1;
    let s2 = segment(p2);
    let second_ok = if strict {
        s2 >= 2
    } else {
        s2 >= 19 && bytes[p2..].starts_with(b"ey")
    };
    if !second_ok || bytes.get(p2 + s2) != Some(&b'.') {
        return None;
    }
    let p3 = p2 + s2 + 1;
    Some(p3 + segment(p3))
}

/// `-----BEGIN…` up to its `-----END …-----` (or the end of the text).
fn pem(bytes: &[u8], at: usize) -> Option<usize> {
    const BEGIN: &[u8] = b"-----BEGIN";
    if !bytes[at..].starts_with(BEGIN) {
        return None;
    }
    let Some(end_marker) = find(bytes, at + BEGIN.len(), b"-----END") else {
        return Some(bytes.len());
    };
    match find(bytes, end_marker + 8, b"-----") {
        Some(close) => Some(close + 5),
        None => Some(bytes.len()),
    }
}

/// A URL-ish run: stops at whitespace, quotes and brackets.
fn url_char(b: u8) -> bool {
    b > b' '
        && !matches!(
            b,
            b'"' | b'\'' | b'<' | b'>' | b'`' | b'\\' | b')' | b']' | b'}'
        )
}

/// `hooks.slack.com/services/…` (and `workflows/`, `triggers/`), with its
/// scheme if there is one.
fn slack_webhook(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    const HOST: &[u8] = b"hooks.slack.com/";
    if !bytes[at..].starts_with(HOST) {
        return None;
    }
    let path = at + HOST.len();
    // The kind is checked, not skipped: the URL run below covers it.
    [&b"services/"[..], b"workflows/", b"triggers/"]
        .into_iter()
        .find(|k| bytes[path..].starts_with(k))?;
    let mut start = at;
    for scheme in [&b"https://"[..], &b"http://"[..]] {
        if at >= scheme.len() && &bytes[at - scheme.len()..at] == scheme {
            start = at - scheme.len();
        }
    }
    Some((start, path + run(bytes, path, url_char)))
}

/// `scheme://user:password@host`: the span is the user-info.
fn url_credentials(bytes: &[u8], sep: usize) -> Option<(usize, usize)> {
    // `sep` is the index of "://"; the scheme must be letters right before it.
    if sep == 0 || !bytes[sep - 1].is_ascii_alphabetic() {
        return None;
    }
    let start = sep + 3;
    let authority_len = run(bytes, start, |b| {
        url_char(b) && !matches!(b, b'/' | b'?' | b'#')
    });
    let authority = &bytes[start..start + authority_len];
    let at = authority.iter().rposition(|&b| b == b'@')?;
    let userinfo = &authority[..at];
    let colon = userinfo.iter().position(|&b| b == b':')?;
    // No password, no credential. (A redacted one cannot reach here: the
    // marker's `]` ends the authority run.)
    if colon + 1 >= userinfo.len() {
        return None;
    }
    Some((start, start + at))
}

/// Whether `bytes[start..end]`, an ASCII word, is a credential key.
fn is_credential_word(bytes: &[u8], start: usize, end: usize) -> bool {
    // Only ASCII words are screened; they are valid UTF-8 on their own.
    std::str::from_utf8(&bytes[start..end])
        .is_ok_and(|word| screen_key(word) == Some(SecretRule::CredentialKey))
}

/// The assigned value starting at `i` (after an optional quote): its span,
/// unless it is empty or a redaction marker (perhaps cut short).
fn assigned_value(bytes: &[u8], mut i: usize) -> Option<(usize, usize)> {
    if matches!(bytes.get(i), Some(b'"' | b'\'' | b'`')) {
        i += 1;
    }
    let n = run(bytes, i, |b| {
        b > b' '
            && !matches!(
                b,
                b'"' | b'\'' | b'`' | b',' | b';' | b'&' | b'}' | b')' | b']' | b'<' | b'>'
            )
    });
    if n == 0 || REDACTED.as_bytes().starts_with(&bytes[i..i + n]) {
        return None;
    }
    Some((i, i + n))
}

/// The assignment operators a credential key may be followed by, longest
/// first: `=>` (PHP, Perl, Ruby), `:=` and `::=`, `?=` (make), `=`, `:`.
const ASSIGNMENT_OPERATORS: [&[u8]; 6] = [b"::=", b"=>", b":=", b"?=", b"=", b":"];

/// `<credential key><quote?><spaces?><operator><spaces?><quote?><value>`:
/// the span is the value (`password=hunter2`, `"api_key": "…"`,
/// `'secret' => '…'`).
fn credential_assignment(
    bytes: &[u8],
    word_start: usize,
    word_end: usize,
) -> Option<(usize, usize)> {
    let mut i = word_end;
    if matches!(bytes.get(i), Some(b'"' | b'\'' | b'`')) {
        i += 1;
    }
    i += run(bytes, i, |b| b == b' ' || b == b'\t');
    if bytes.get(i..i + 3) == Some(b"://") {
        return None;
    }
    let op = ASSIGNMENT_OPERATORS
        .iter()
        .find(|op| bytes[i.min(bytes.len())..].starts_with(op))?;
    i += op.len();
    i += run(bytes, i, |b| b == b' ' || b == b'\t');
    let span = assigned_value(bytes, i)?;
    is_credential_word(bytes, word_start, word_end).then_some(span)
}

/// curl's `-u user:password` / `--user user:password` (also `=`): the span
/// is the user-info, when it holds a colon with something after it.
fn curl_user(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let flag = [&b"--user"[..], b"-u"]
        .into_iter()
        .find(|f| bytes[at..].starts_with(f))?;
    let mut i = at + flag.len();
    let gap = run(bytes, i, |b| b == b' ' || b == b'\t' || b == b'=');
    if gap == 0 {
        return None;
    }
    i += gap;
    let (start, end) = assigned_value(bytes, i)?;
    let colon = bytes[start..end].iter().position(|&b| b == b':')?;
    (colon + 1 < end - start).then_some((start, end))
}

/// Markup that names a credential and carries its value: an attribute
/// pair `key="ApiKey" value="…"` (also `name=`), or an element
/// `<password>…</password>`. `at` is a `<` or the start of an attribute
/// name; the span is the value.
fn markup(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    if bytes[at] == b'<' {
        let name = at + 1;
        let n = run(bytes, name, |b| is_key_char(b) || b == b'.');
        if n == 0 || bytes.get(name + n) != Some(&b'>') {
            return None;
        }
        let value = name + n + 1;
        let len = run(bytes, value, |b| b != b'<');
        let span = assigned_value(&bytes[..value + len], value)?;
        return is_credential_word(bytes, name, name + n).then_some(span);
    }
    if at > 0 && is_key_char(bytes[at - 1]) {
        return None;
    }
    let attr = [&b"key=\""[..], b"name=\"", b"key='", b"name='"]
        .into_iter()
        .find(|a| bytes[at..].starts_with(a))?;
    let word = at + attr.len();
    let n = run(bytes, word, |b| is_key_char(b) || b == b'.');
    if !is_credential_word(bytes, word, word + n) {
        return None;
    }
    // From the name's end (its closing quote).
    let rest = word + n;
    let value = find(bytes, rest, b"value=")?;
    // Same tag only: no `>` between the name and the value.
    if bytes[rest..value].contains(&b'>') {
        return None;
    }
    assigned_value(bytes, value + 6)
}

/// Spans that start at a token start `i`: prefixed vendor formats,
/// Discord tokens, JWTs, auth schemes, curl's user flag and markup.
fn token_span(bytes: &[u8], i: usize) -> Option<Span> {
    let at = |end: usize, rule| Span {
        start: i,
        end,
        rule,
    };
    formats::prefixed(bytes, i)
        .map(|(end, rule)| at(end, rule))
        .or_else(|| formats::discord(bytes, i).map(|end| at(end, SecretRule::VendorToken)))
        .or_else(|| jwt(bytes, i).map(|end| at(end, SecretRule::Jwt)))
        .or_else(|| auth_scheme(bytes, i).map(|end| at(end, SecretRule::AuthScheme)))
        .or_else(|| {
            curl_user(bytes, i).map(|(start, end)| Span {
                start,
                end,
                rule: SecretRule::CredentialAssignment,
            })
        })
}

/// Pass 1: prefix-shaped tokens, PEM blocks, webhooks, markup.
fn token_spans(bytes: &[u8], push: &mut impl FnMut(Span)) {
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'-'
            && let Some(end) = pem(bytes, i)
        {
            push(Span {
                start: i,
                end,
                rule: SecretRule::PemBlock,
            });
            i = end;
            continue;
        }
        if b == b'h'
            && let Some((start, end)) = slack_webhook(bytes, i)
        {
            push(Span {
                start,
                end,
                rule: SecretRule::SlackWebhook,
            });
            i = end.max(i + 1);
            continue;
        }
        if let Some((start, end)) = markup(bytes, i) {
            push(Span {
                start,
                end,
                rule: SecretRule::CredentialAssignment,
            });
        }
        if token_start(bytes, i)
            && let Some(span) = token_span(bytes, i)
        {
            push(span);
            i = span.end.max(i + 1);
            continue;
        }
        i += 1;
    }
}

/// Pass 3: `credential_key = value` assignments.
fn assignment_spans(bytes: &[u8], push: &mut impl FnMut(Span)) {
    let word_char = |b: u8| is_alnum(b) || matches!(b, b'_' | b'-' | b'.');
    let mut i = 0;
    while i < bytes.len() {
        if word_char(bytes[i]) && (i == 0 || !word_char(bytes[i - 1])) {
            let end = i + run(bytes, i, word_char);
            if let Some((start, vend)) = credential_assignment(bytes, i, end) {
                push(Span {
                    start,
                    end: vend,
                    rule: SecretRule::CredentialAssignment,
                });
            }
            i = end;
        } else {
            i += 1;
        }
    }
}

/// Every flagged span, sorted by start, overlapping spans merged (the rule
/// of the first is kept).
pub(super) fn spans(text: &str) -> Vec<Span> {
    let bytes = text.as_bytes();
    let mut out: Vec<Span> = Vec::new();
    let mut push = |s: Span| out.push(s);
    token_spans(bytes, &mut push);
    // Pass 2: URLs with a password in their user-info; infixed formats.
    let mut from = 0;
    while let Some(sep) = find(bytes, from, b"://") {
        if let Some((start, end)) = url_credentials(bytes, sep) {
            push(Span {
                start,
                end,
                rule: SecretRule::UrlCredentials,
            });
        }
        from = sep + 3;
    }
    formats::infixed(bytes, |start, end| {
        push(Span {
            start,
            end,
            rule: SecretRule::VendorToken,
        })
    });
    assignment_spans(bytes, &mut push);

    out.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
    let mut merged: Vec<Span> = Vec::with_capacity(out.len());
    for s in out {
        match merged.last_mut() {
            Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
            _ => merged.push(s),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spans of `text` as (flagged text, rule name) pairs.
    fn check(text: &str, expected: &[(&str, &str)]) {
        let found: Vec<(&str, &str)> = spans(text)
            .iter()
            .map(|s| (&text[s.start..s.end], s.rule.as_str()))
            .collect();
        assert_eq!(found, expected, "{text:?}");
    }

    #[test]
    fn auth_schemes_need_a_space_and_eight_non_prose_bytes() {
        check("Bearer abcDEF12", &[("Bearer abcDEF12", "auth_scheme")]);
        check("x basic\tdXNlcjpw", &[("basic\tdXNlcjpw", "auth_scheme")]);
        check("Bearer abcDEF1", &[]);
        check("Bearerabcdef123456", &[]);
        check("bearer abcdefghijkl", &[]);
        check("Bearer", &[]);
    }

    #[test]
    fn jwts_strict_and_loose() {
        // At least 10 bytes in the first part, `eyJ` included.
        check("eyJabcdefg.xy.z", &[("eyJabcdefg.xy.z", "jwt")]);
        check("eyJabcdef.xy.z", &[]);
        check("eyJabcdefg.x.z", &[]);
        check("eyJabcdefg.xy", &[]);
        // base64url: `-` and `_` belong to every part.
        check("eyJab-c_efg.x-.z_y", &[("eyJab-c_efg.x-.z_y", "jwt")]);
        let a17 = "abcdefghijklmnopq";
        let loose = format!("ey{a17}.ey{a17}.sig/x");
        check(&loose, &[(loose.as_str(), "jwt")]);
        check(&format!("ey{}.ey{a17}.", &a17[..16]), &[]);
        check(&format!("ey{a17}.ex{a17}."), &[]);
        check(&format!("ey{a17}.ey{}.", &a17[..16]), &[]);
    }

    #[test]
    fn pem_blocks_run_to_their_end_marker_or_the_text_end() {
        // The end marker is looked for after the block's own start.
        check(
            "a longer prefix -----BEGIN X-----\nzz\n-----END X----- b",
            &[("-----BEGIN X-----\nzz\n-----END X-----", "pem_block")],
        );
        check(
            "a -----BEGIN X-----\nzz\n-----END X----- b",
            &[("-----BEGIN X-----\nzz\n-----END X-----", "pem_block")],
        );
        check(
            "-----BEGIN X-----\nzz",
            &[("-----BEGIN X-----\nzz", "pem_block")],
        );
        check(
            "-----BEGIN X-----\n-----END X",
            &[("-----BEGIN X-----\n-----END X", "pem_block")],
        );
        check("-----BEGI", &[]);
    }

    #[test]
    fn slack_webhooks_take_their_scheme_and_kind() {
        check(
            "see https://hooks.slack.com/services/T0/B0/xyz now",
            &[(
                "https://hooks.slack.com/services/T0/B0/xyz",
                "slack_webhook",
            )],
        );
        check(
            "http://hooks.slack.com/triggers/a",
            &[("http://hooks.slack.com/triggers/a", "slack_webhook")],
        );
        check(
            "hooks.slack.com/workflows/",
            &[("hooks.slack.com/workflows/", "slack_webhook")],
        );
        check("https://hooks.slack.com/other/x", &[]);
    }

    #[test]
    fn url_credentials_are_the_user_info() {
        check("ftp://u:p@h/x", &[("u:p", "url_credentials")]);
        check("https://u@h/x", &[]);
        check("https://u:@h/x", &[]);
        check("https://u:[redacted]@h/x", &[]);
        check("://u:p@h", &[]);
        check("1://u:p@h", &[]);
        check("https://h/x?u:p@y", &[]);
    }

    #[test]
    fn assignments_take_every_operator_and_quote() {
        for text in [
            "password=hunter22",
            "password = hunter22",
            "\"password\": \"hunter22\"",
            "'password' => 'hunter22'",
            "password := hunter22",
            "password ::= hunter22",
            "password ?= hunter22",
            "password:\thunter22",
            "`password`=`hunter22`",
        ] {
            check(text, &[("hunter22", "credential_assignment")]);
        }
        check("password=", &[]);
        check("password=[redacted]", &[]);
        check("password=[reda", &[]);
        check("password https://x", &[]);
        check("model=gpt-5", &[]);
        check("password://x", &[]);
    }

    #[test]
    fn curl_user_flags_need_a_colon_with_something_after_it() {
        check("curl -u a:b x", &[("a:b", "credential_assignment")]);
        check("curl --user=a:b", &[("a:b", "credential_assignment")]);
        check("curl -u 'a:b'", &[("a:b", "credential_assignment")]);
        check("curl -u a: x", &[]);
        check("curl -u a x", &[]);
        check("curl -ua:b", &[]);
        check("x-u a:b", &[]);
    }

    #[test]
    fn markup_names_a_credential_and_carries_its_value() {
        check(
            "<add key=\"ApiKey\" value=\"v1\"/>",
            &[("v1", "credential_assignment")],
        );
        check(
            "<p name='password' value='v1'>",
            &[("v1", "credential_assignment")],
        );
        check(
            "<password>v1</password>",
            &[("v1", "credential_assignment")],
        );
        check("<add key=\"model\" value=\"v1\"/>", &[]);
        check("<add key=\"ApiKey\">value=\"v1\"", &[]);
        check("<add mykey=\"ApiKey\" value=\"v1\"/>", &[]);
        check("<add my-name=\"ApiKey\" value=\"v1\"/>", &[]);
        check("<add my_name=\"ApiKey\" value=\"v1\"/>", &[]);
        check("<api-key>v1</api-key>", &[("v1", "credential_assignment")]);
        // A name longer than what precedes it.
        check(
            "key=\"ApiKeyOfTheService\" value=\"v1\"",
            &[("v1", "credential_assignment")],
        );
        check("<add key=\"ApiKey\"/>", &[]);
        check("<>v1</>", &[]);
        check("<password x>v1", &[]);
        check("<model>v1</model>", &[]);
    }

    #[test]
    fn prefixes_start_tokens_and_spans_merge() {
        let hex32 = "0123456789abcdef0123456789abcdef";
        check(&format!("xshpat_{hex32}"), &[]);
        check(
            &format!("-shpat_{hex32}"),
            &[(&format!("shpat_{hex32}"), "vendor_token")],
        );
        // Overlapping spans merge into one, keeping the rule of the pass
        // that found it first.
        let text = format!("password=shpat_{hex32}");
        check(&text, &[(&text[9..], "vendor_token")]);
        let text = format!("password=x{hex32} shpat_{hex32}");
        assert_eq!(spans(&text).len(), 2);
        // Adjacent spans merge too.
        let text = format!("-----BEGIN X-----\n-----END X-----shpat_{hex32}");
        check(&text, &[(text.as_str(), "pem_block")]);
    }
}
