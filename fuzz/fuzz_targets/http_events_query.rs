//! Fuzzes what `keel serve` reads from an untrusted client on
//! `GET /v1/runs/{id}/events`: the query string, `Last-Event-ID`, and the
//! `Authorization` header, through `EventsRequest::parse` and
//! `bearer_matches` (the functions the handler and the token layer call).
//!
//! Properties:
//! - the verdict matches an independent reading of the query with
//!   `form_urlencoded`: accepted exactly when every key is one of `after`,
//!   `format`, `limit`, `max_events`, `max_bytes`, `named`, `children`,
//!   none repeats, the numbers parse, `format` is `sse` or `jsonl`, `named`
//!   and `children` are `true` or `false`, `after` and `Last-Event-ID` (if
//!   sent) are sequence numbers, or with `children=true` tree cursors
//!   (`TreeCursor::parse`; the cursor is then the root seq), and
//!   `children=true` is not asked as `jsonl`; an accepted request has the cursor of the
//!   header, else of `after`, else 0, unnamed frames exactly for
//!   `named=false`, and bounds clamped to
//!   [1, 4096] events and [4 KiB, 8 MiB] bytes;
//! - a refusal is a 400 whose problem JSON does not change when the
//!   letters of the query's values are rotated: it names parameters,
//!   never their values;
//! - the token check accepts exactly `Bearer <token>`.
#![no_main]

use http::{HeaderMap, HeaderValue, Uri};
use keel_engine::TreeCursor;
use keel_serve::auth::bearer_matches;
use keel_serve::events::{EventsFormat, EventsRequest, Naming};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

const KNOWN: &[&str] = &[
    "after",
    "format",
    "limit",
    "max_events",
    "max_bytes",
    "named",
    "children",
];

/// An accepted request, as the independent reading sees it.
#[derive(Debug)]
struct Expected {
    cursor: u64,
    format: EventsFormat,
    naming: Naming,
    max_events: usize,
    max_bytes: usize,
}

fn headers(last_event_id: Option<&[u8]>, authorization: Option<&[u8]>) -> Option<HeaderMap> {
    let mut map = HeaderMap::new();
    if let Some(v) = last_event_id {
        map.insert("last-event-id", HeaderValue::from_bytes(v).ok()?);
    }
    if let Some(v) = authorization {
        map.insert("authorization", HeaderValue::from_bytes(v).ok()?);
    }
    Some(map)
}

/// What the request must be, read independently.
fn expected(query: &str, last_event_id: Option<&[u8]>) -> Option<Expected> {
    let mut seen = HashSet::new();
    let (mut after, mut format, mut max_events, mut max_bytes) =
        (None, EventsFormat::Sse, None, None);
    let mut naming = Naming::Kind;
    let mut children = false;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if !KNOWN.contains(&key.as_ref()) || !seen.insert(key.clone().into_owned()) {
            return None;
        }
        match key.as_ref() {
            "after" => after = Some(value.into_owned()),
            "children" => {
                children = match value.as_ref() {
                    "true" => true,
                    "false" => false,
                    _ => return None,
                }
            }
            "limit" => drop(value.parse::<usize>().ok()?),
            "max_events" => max_events = Some(value.parse::<usize>().ok()?),
            "max_bytes" => max_bytes = Some(value.parse::<usize>().ok()?),
            "named" => {
                naming = match value.as_ref() {
                    "true" => Naming::Kind,
                    "false" => Naming::Unnamed,
                    _ => return None,
                }
            }
            _ => {
                format = match value.as_ref() {
                    "sse" => EventsFormat::Sse,
                    "jsonl" => EventsFormat::Jsonl,
                    _ => return None,
                }
            }
        }
    }
    // A seq, or with `children=true` a tree cursor (its root seq); both
    // are checked when both are sent.
    let cursor = |text: &str| -> Option<u64> {
        if children {
            TreeCursor::parse(text).ok().map(|c| c.root_seq())
        } else {
            text.parse::<u64>().ok()
        }
    };
    let after = match after {
        None => None,
        Some(text) => Some(cursor(&text)?),
    };
    let header = match last_event_id {
        None => None,
        Some(v) => Some(cursor(std::str::from_utf8(v).ok()?.trim())?),
    };
    if children && format == EventsFormat::Jsonl {
        return None;
    }
    Some(Expected {
        cursor: header.or(after).unwrap_or(0),
        format,
        naming,
        max_events: max_events.unwrap_or(4096).clamp(1, 4096),
        max_bytes: max_bytes.unwrap_or(8 << 20).clamp(4096, 8 << 20),
    })
}

fn rotate_letters(c: char) -> char {
    match c {
        'a'..='y' | 'A'..='Y' => char::from(c as u8 + 1),
        'z' => 'a',
        'Z' => 'A',
        other => other,
    }
}

/// Keys whose values are words of a fixed vocabulary (`sse`, `jsonl`,
/// `true`, `false`), not free text: rotating them turns a valid value into
/// an invalid one, which changes which parameter a refusal names first.
const ENUM_KEYS: &[&str] = &["format", "named", "children"];

/// The query with the letters of every free-text value (after `=`, up to
/// `&`; not those of [`ENUM_KEYS`]) rotated: keys, separators, digits and
/// percent escapes stay (rotating a
/// hex digit of `%2A` would change the decoded character, and with it the
/// verdict). As in `form_urlencoded`, only `%` and two hex digits is an
/// escape; `&` always separates pairs.
fn rotate_values(query: &str) -> String {
    let chars: Vec<char> = query.chars().collect();
    let mut out = String::with_capacity(query.len());
    let mut in_value = false;
    let mut rotating = false;
    let mut key = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let escape = c == '%'
            && chars.get(i + 1).is_some_and(char::is_ascii_hexdigit)
            && chars.get(i + 2).is_some_and(char::is_ascii_hexdigit);
        if escape {
            if !in_value {
                key.extend(&chars[i..i + 3]);
            }
            out.extend(&chars[i..i + 3]);
            i += 3;
            continue;
        }
        out.push(match c {
            '&' => {
                in_value = false;
                key.clear();
                c
            }
            '=' if !in_value => {
                in_value = true;
                rotating = !ENUM_KEYS.contains(&key.as_str());
                c
            }
            c if in_value && rotating => rotate_letters(c),
            c => {
                if !in_value {
                    key.push(c);
                }
                c
            }
        });
        i += 1;
    }
    out
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let query: String = u.arbitrary()?;
    let last_event_id: Option<Vec<u8>> = u.arbitrary()?;
    let authorization: Option<Vec<u8>> = u.arbitrary()?;
    let token: Vec<u8> = u.arbitrary()?;
    let Ok(uri) = format!("/v1/runs/run_1/events?{query}").parse::<Uri>() else {
        return Ok(());
    };
    let Some(map) = headers(last_event_id.as_deref(), authorization.as_deref()) else {
        return Ok(());
    };
    // The query as the server sees it (the URI parser may normalise nothing
    // here, but read it back to be sure).
    let query = uri.query().unwrap_or("").to_owned();

    let parsed = EventsRequest::parse(&uri, &map);
    match (&parsed, expected(&query, last_event_id.as_deref())) {
        (Ok(request), Some(e)) => {
            assert_eq!(request.cursor(), e.cursor, "cursor\nquery: {query:?}");
            assert_eq!(request.format(), e.format, "format\nquery: {query:?}");
            assert_eq!(request.naming(), e.naming, "naming\nquery: {query:?}");
            assert_eq!(
                (request.bounds().max_events, request.bounds().max_bytes),
                (e.max_events, e.max_bytes),
                "bounds\nquery: {query:?}"
            );
        }
        (Err(problem), None) => {
            assert_eq!(problem.status().as_u16(), 400);
            let rotated = rotate_values(&query);
            if let Ok(twin_uri) = format!("/v1/runs/run_1/events?{rotated}").parse::<Uri>()
                && let Err(twin) = EventsRequest::parse(&twin_uri, &map)
            {
                assert_eq!(
                    problem.to_json(),
                    twin.to_json(),
                    "the problem depends on a value (echo)\nquery: {query:?}\nrotated: {rotated:?}"
                );
            }
        }
        (Ok(request), None) => {
            panic!("accepted, expected a refusal: {request:?}\nquery: {query:?}")
        }
        (Err(problem), Some(e)) => {
            panic!(
                "refused ({}), expected {e:?}\nquery: {query:?}",
                problem.to_json()
            )
        }
    }

    let mut wanted = b"Bearer ".to_vec();
    wanted.extend_from_slice(&token);
    assert_eq!(
        bearer_matches(&map, &token),
        authorization.as_deref() == Some(wanted.as_slice()),
        "token check"
    );
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
