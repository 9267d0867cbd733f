//! Fuzzes the pure parts of `keel-mcp`: result flattening and its cut,
//! server-entry checking, and qualified tool names. The first byte picks
//! the mode (`% 3`; the seeds use `0`, `1`, `2`):
//!
//! - **0, `flatten`**: the second byte picks the bound
//!   (`1024 + b * 64512 / 255`, so 1024 to 65536); the rest, up to 64 KiB,
//!   is a `tools/call` result as JSON. Properties: no panic; the text is
//!   within the bound; the images kept are within `FlattenBounds::new`'s
//!   count, per-image and total bounds, each a valid part (its bytes carry
//!   its type's signature), and a cut says what it kept, which is what was
//!   kept; the same result flattened with the text unbounded keeps the
//!   same images and cut, its text is never cut and it agrees on
//!   `isError`; an image cut ends the text with `[images cut: kept K of N
//!   images, B of T bytes]`, and the text before that line keeps room for
//!   it; apart from that line: uncut, the text is that whole flattening;
//!   cut, `original_bytes` is its size and over the bound, and the text is
//!   a prefix of it plus `\n[output cut: kept K of N bytes]` with `K` the
//!   prefix's length, at most 3 bytes (a character boundary) short of
//!   filling the bound; a refusal only for a non-object or a `content`
//!   that is neither absent, `null` nor an array. Two exact models: text
//!   items only (no `structuredContent`) flatten to the texts joined with
//!   `\n`; without text items, one line per item that is not an image
//!   kept or cut, each a `[…]` placeholder of at most 600 bytes, plus a
//!   line for `structuredContent`.
//! - **1, `ServerConfig::from_entry`** on the rest as a `ServerEntry`
//!   (serde_json), withholding `SOME_KEY`. On `Err`: the rule starts with
//!   `mcp.`; the Display text is unchanged when the letters and digits of
//!   the name, every `command` string, the `url` after its scheme and
//!   every `env` name are rotated (no echo; the README says why rotation);
//!   and it contains no such value of more than 8 bytes that rotation
//!   leaves as it is. Withheld names (`KEEL_TOKEN`, …, `SOME_KEY`) are not
//!   rotated: rule `mcp.env_secret` names them by design (a fixed list of
//!   variable names, never a variable's value). On `Ok`: the config
//!   mirrors the entry (name, transport, env, bound, per-tool timeouts),
//!   names no withheld variable, and `qualified_name(config.name(), s)`
//!   is a valid `ToolName` for every string `s` in the entry.
//! - **2, `qualified_name`**: the second byte picks one of three fixed
//!   server names (1, 5 and 32 bytes); the rest, as UTF-8, is up to 8 tool
//!   names separated by NUL. Each gives a valid `ToolName` of at most 64
//!   bytes, deterministically; a qualified name that fits is kept as it
//!   is; one that does not is the sanitized name (every character other
//!   than `[A-Za-z0-9_-]` made `_`) cut to 53 bytes, `_` and 10 lowercase
//!   hex digits. Two different tool names give different names when both
//!   fit or both do not. (A name that fits can equal another's hashed
//!   form: `a_b_7d352ed4bb` and `a.b` on server `s`; the source's `mount`
//!   leaves the second of a list's equal names out, so that pair is not
//!   checked.)
#![no_main]

use keel_mcp::{
    FlattenBounds, Flattened, ServerConfig, ServerEntry, ServerName, Transport, WITHHELD_ENV,
    flatten, flatten_with,
};
use keel_message::{TOOL_NAME_MAX_BYTES, ToolName};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::time::Duration;

mod common;

const JSON_MAX_BYTES: usize = 64 * 1024;
const WITHHELD: [&str; 1] = ["SOME_KEY"];
const SERVERS: [&str; 3] = ["s", "files", "a-server-name-of-32-bytes-012345"];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => result(rest),
        1 => entry(rest),
        _ => names(rest),
    }
});

fn result(rest: &[u8]) {
    let Some((&b, json)) = rest.split_first() else {
        return;
    };
    if json.len() > JSON_MAX_BYTES {
        return;
    }
    let Ok(value) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let max = 1024 + usize::from(b) * (65536 - 1024) / 255;
    let bounds = FlattenBounds::new(max);
    let text_unbounded = FlattenBounds {
        text_bytes: usize::MAX,
        ..bounds
    };
    let shape_ok = value.as_object().is_some_and(|o| {
        matches!(
            o.get("content"),
            None | Some(Value::Null) | Some(Value::Array(_))
        )
    });
    let (flat, full) = match (flatten(&value, max), flatten_with(&value, &text_unbounded)) {
        (Ok(flat), Ok(full)) => (flat, full),
        (Err(_), Err(_)) => {
            assert!(!shape_ok, "a well-shaped result refused\ninput: {value}");
            return;
        }
        (a, b) => panic!("the verdict depends on the bound: {a:?} / {b:?}\ninput: {value}"),
    };
    assert!(shape_ok, "an ill-shaped result accepted\ninput: {value}");
    assert!(
        flat.text().len() <= max,
        "{} bytes over the bound {max}\ninput: {value}",
        flat.text().len()
    );
    images(&flat, &bounds);
    assert_eq!(flat.images(), full.images(), "the images depend on the text bound");
    assert_eq!(flat.image_cut(), full.image_cut(), "the image cut depends on the text bound");
    let is_error = value.get("isError") == Some(&Value::Bool(true));
    assert_eq!(flat.is_error(), is_error, "isError");
    assert_eq!(full.is_error(), is_error, "isError (unbounded)");
    assert_eq!(full.original_bytes(), None, "cut without a bound");
    let (text, room) = without_image_line(&flat);
    let (whole, _) = without_image_line(&full);
    let max = max - room;
    match flat.original_bytes() {
        None => assert_eq!(text, whole, "uncut but not the whole flattening"),
        Some(n) => {
            assert!(n > max as u64, "cut at {n} bytes under the bound {max}");
            assert_eq!(n, whole.len() as u64, "original_bytes is not the size");
            let suffix = format!(" of {n} bytes]");
            let (kept, k) = text
                .strip_suffix(suffix.as_str())
                .and_then(|t| t.rsplit_once("\n[output cut: kept "))
                .unwrap_or_else(|| panic!("no cut marker at the end: {text:?}"));
            assert_eq!(
                k.parse::<usize>().ok(),
                Some(kept.len()),
                "K is not the kept size"
            );
            assert!(whole.starts_with(kept), "the kept text is not a prefix");
            let marker_room = format!("\n[output cut: kept {n} of {n} bytes]").len();
            assert!(
                kept.len() + marker_room + 3 >= max,
                "kept {} bytes of a {max}-byte bound (marker room {marker_room})",
                kept.len()
            );
        }
    }
    model(&value, whole, &full);
}

/// The images kept obey the bounds, and the cut says what was kept.
fn images(flat: &Flattened, bounds: &FlattenBounds) {
    let kept = flat.images();
    assert!(kept.len() <= bounds.images, "{} images kept", kept.len());
    let mut total = 0u64;
    for image in kept {
        let media_type = image.media_type().expect("an inline image has a type");
        let bytes = image.bytes().expect("an MCP image is inline");
        assert!(bytes.len() <= bounds.image_bytes, "an image over its bound");
        assert!(
            media_type.signature_matches(bytes.as_bytes()),
            "an image kept without its signature"
        );
        total += bytes.len() as u64;
    }
    assert!(total <= bounds.images_bytes as u64, "images over their bound");
    if let Some(cut) = flat.image_cut() {
        assert_eq!(cut.kept_images(), kept.len(), "kept images");
        assert_eq!(cut.kept_bytes(), total, "kept image bytes");
        assert!(cut.kept_images() < cut.images(), "a cut that cut nothing");
        assert!(cut.kept_bytes() <= cut.bytes(), "kept more bytes than there were");
    }
}

/// The text without its image-cut line, and the room that line took.
fn without_image_line(flat: &Flattened) -> (&str, usize) {
    let Some(cut) = flat.image_cut() else {
        return (flat.text(), 0);
    };
    let line = format!(
        "[images cut: kept {} of {} images, {} of {} bytes]",
        cut.kept_images(),
        cut.images(),
        cut.kept_bytes(),
        cut.bytes()
    );
    let text = flat
        .text()
        .strip_suffix(line.as_str())
        .unwrap_or_else(|| panic!("no image cut line: {:?}", flat.text()));
    (text.strip_suffix('\n').unwrap_or(text), line.len() + 1)
}

/// The two shapes whose flattening is exactly predictable.
fn model(value: &Value, whole: &str, full: &Flattened) {
    let items: &[Value] = match value.get("content") {
        Some(Value::Array(items)) => items,
        _ => &[],
    };
    let structured = value.get("structuredContent").is_some();
    let texts: Option<Vec<&str>> = items
        .iter()
        .map(|item| {
            (item.get("type").and_then(Value::as_str) == Some("text"))
                .then(|| item.get("text").and_then(Value::as_str).unwrap_or_default())
        })
        .collect();
    if let Some(texts) = texts.filter(|_| !structured) {
        assert_eq!(whole, texts.join("\n"), "text items are not joined");
    }
    let any_text = items
        .iter()
        .any(|item| item.get("type").and_then(Value::as_str) == Some("text"));
    if !any_text {
        // Images kept or cut leave no line.
        let images = full.image_cut().map_or(full.images().len(), |c| c.images());
        let item_lines = items.len() - images;
        let expected = item_lines + usize::from(structured);
        if expected == 0 {
            assert_eq!(whole, "", "nothing to flatten");
            return;
        }
        let lines: Vec<&str> = whole.split('\n').collect();
        assert_eq!(lines.len(), expected, "one line per item\n{whole:?}");
        for line in &lines[..item_lines] {
            assert!(
                line.starts_with('[') && line.ends_with(']') && line.len() <= 600,
                "placeholder {line:?}"
            );
            assert!(!line.chars().any(char::is_control), "control in {line:?}");
        }
    }
}

fn entry(rest: &[u8]) {
    let Ok(entry) = serde_json::from_slice::<ServerEntry>(rest) else {
        return;
    };
    let withheld = |name: &str| WITHHELD_ENV.contains(&name) || WITHHELD.contains(&name);
    let config = match ServerConfig::from_entry(&entry, &WITHHELD) {
        Ok(config) => config,
        Err(e) => {
            assert!(e.rule().starts_with("mcp."), "rule {:?}", e.rule());
            let shown = e.to_string();
            assert!(shown.contains(e.rule()), "{shown:?} does not name its rule");
            let twin = rotated(&entry, withheld);
            if let Some(twin) = &twin {
                match ServerConfig::from_entry(twin, &WITHHELD) {
                    Ok(_) => panic!("rotation made an entry valid\n{entry:?}\n{twin:?}"),
                    Err(e2) => assert_eq!(
                        shown,
                        e2.to_string(),
                        "the error depends on a value (echo)\n{entry:?}\n{twin:?}"
                    ),
                }
            }
            for v in values(&entry) {
                let exempt = withheld(v) && e.rule() == "mcp.env_secret";
                let rotation_checks = twin.is_some() && common::rotate_all(v) != v;
                if v.len() > 8 && !exempt && !rotation_checks {
                    assert!(!shown.contains(v), "the error echoes {v:?}: {shown:?}");
                }
            }
            return;
        }
    };
    assert_eq!(config.name().as_str(), entry.name);
    match (config.transport(), &entry.command, &entry.url) {
        (Transport::Stdio { program, args }, Some(command), None) => {
            assert_eq!(Some(program), command.first());
            assert_eq!(args.as_slice(), &command[1..]);
        }
        (Transport::Http { url }, None, Some(u)) => assert_eq!(url, u),
        (t, c, u) => panic!("transport {t:?} from command {c:?} and url {u:?}"),
    }
    let names: Vec<&str> = config.env().iter().map(|n| n.as_str()).collect();
    let asked: Vec<&str> = entry
        .env
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(names, asked);
    assert!(!names.iter().any(|n| withheld(n)), "a withheld name passed");
    let bound = config.max_output_bytes();
    assert!(
        (1024..=1 << 20).contains(&bound),
        "max_output_bytes {bound}"
    );
    let ms = |ms: Option<u64>| ms.map(Duration::from_millis);
    assert_eq!(config.call_timeout(), ms(entry.timeout_ms));
    for (tool, policy) in entry.tools.iter().flatten() {
        let expected = ms(policy.timeout_ms).or(config.call_timeout());
        assert_eq!(
            config.policy_for(tool).timeout,
            expected,
            "timeout of {tool:?}"
        );
    }
    let mut all = values(&entry);
    all.extend(entry.tools.iter().flatten().flat_map(|(tool, policy)| {
        std::iter::once(tool.as_str()).chain(policy.on_failure.as_deref())
    }));
    for s in all {
        check_name(config.name(), s);
    }
}

/// The name, `command`, `url` and `env` strings of an entry.
fn values(entry: &ServerEntry) -> Vec<&str> {
    let mut out = vec![entry.name.as_str()];
    out.extend(entry.command.iter().flatten().map(String::as_str));
    out.extend(entry.url.as_deref());
    out.extend(entry.env.iter().flatten().map(String::as_str));
    out
}

/// The entry with the letters and digits of its values rotated, where that
/// keeps every check's verdict: `None` when it would not (a rotated `url`
/// gaining or losing `http(s)://`, a rotated `env` name becoming withheld).
fn rotated(entry: &ServerEntry, withheld: impl Fn(&str) -> bool) -> Option<ServerEntry> {
    let rot = common::rotate_all;
    let is_http = |u: &str| u.starts_with("http://") || u.starts_with("https://");
    let url = match &entry.url {
        None => None,
        Some(u) => {
            let (scheme, rest) = u
                .find("://")
                .map_or(("", u.as_str()), |i| u.split_at(i + 3));
            let r = format!("{scheme}{}", rot(rest));
            if is_http(&r) != is_http(u) {
                return None;
            }
            Some(r)
        }
    };
    let mut env = None;
    if let Some(names) = &entry.env {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            if withheld(n) {
                out.push(n.clone());
            } else {
                let r = rot(n);
                if withheld(&r) {
                    return None;
                }
                out.push(r);
            }
        }
        env = Some(out);
    }
    Some(ServerEntry {
        name: rot(&entry.name),
        command: entry
            .command
            .as_ref()
            .map(|c| c.iter().map(|s| rot(s)).collect()),
        url,
        env,
        ..entry.clone()
    })
}

fn names(rest: &[u8]) {
    let Some((&pick, tail)) = rest.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(tail) else {
        return;
    };
    let server = ServerName::parse(SERVERS[usize::from(pick) % SERVERS.len()])
        .unwrap_or_else(|e| panic!("fixed server name: {e}"));
    let tools: Vec<&str> = text.split('\0').take(8).collect();
    let got: Vec<(ToolName, bool)> = tools.iter().map(|t| check_name(&server, t)).collect();
    for (i, (a, a_fits)) in got.iter().enumerate() {
        for (j, (b, b_fits)) in got.iter().enumerate().skip(i + 1) {
            if tools[i] != tools[j] && a_fits == b_fits {
                assert_ne!(a, b, "{:?} and {:?} share a name", tools[i], tools[j]);
            }
        }
    }
}

/// Checks `qualified_name(server, tool)` against the naming rule and
/// returns it with whether the raw qualified name fitted.
fn check_name(server: &ServerName, tool: &str) -> (ToolName, bool) {
    let name = keel_mcp::qualified_name(server, tool);
    let s = name.as_str();
    assert!(ToolName::parse(s).is_ok(), "invalid tool name {s:?}");
    assert!(s.len() <= TOOL_NAME_MAX_BYTES, "{s:?} is too long");
    assert_eq!(
        keel_mcp::qualified_name(server, tool),
        name,
        "not deterministic"
    );
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let raw = format!("mcp__{server}__{tool}");
    let fits = raw.len() <= TOOL_NAME_MAX_BYTES && raw.chars().all(allowed);
    if fits {
        assert_eq!(s, raw, "a name that fits was changed");
    } else {
        let sanitized: String = raw
            .chars()
            .map(|c| if allowed(c) { c } else { '_' })
            .take(TOOL_NAME_MAX_BYTES - 11)
            .collect();
        let (prefix, hash) = s
            .rsplit_once('_')
            .unwrap_or_else(|| panic!("no hash suffix in {s:?} for {raw:?}"));
        assert_eq!(prefix, sanitized, "sanitized prefix of {raw:?}");
        assert!(
            hash.len() == 10 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "hash suffix {hash:?} of {raw:?}"
        );
    }
    (name, fits)
}
