//! Secret screening for anything a provider says that could reach an event:
//! metadata keys and values, problem messages and (through
//! `keel_eventlog::ErrorText`) failure text in events.
//!
//! This module is the workspace's one secret screen: it sits in
//! `keel-stream` because that is the lowest crate that needs it
//! (`keel-message` carries no provider text), and every crate above asks it
//! rather than keeping its own list of credential shapes.
//!
//! # Public API: who uses this and how
//!
//! | item | question | used by |
//! | --- | --- | --- |
//! | [`screen_key`] | does this JSON *member name* hold a prohibited category? | `ProviderMetadata` (this crate), for every metadata key |
//! | [`screen_value`] | does this *text* contain a credential shape? | `ProviderMetadata` (metadata values and namespace names); `keel-providers` (a wire value becomes a metadata fact only if it passes); the stream-validator fuzz target |
//! | [`redact`] | the text with every flagged span replaced by [`REDACTED`] | [`screen_and_bound`]; public for a host's text that must survive unbounded |
//! | [`screen_and_bound`] | [`redact`], then a cut to a byte bound that cannot re-expose a shape | `ProviderProblem` messages (this crate); `keel_eventlog::ErrorText`, the failure text of every event (tool, observer and MCP errors) |
//! | [`Screened`] | what [`redact`] and [`screen_and_bound`] return: the text and whether it was redacted or truncated | the callers above |
//! | [`SecretRule`] | which rule matched; errors report the rule, never the text | `MetadataError` (this crate) |
//!
//! The contract for callers: a [`Screened::text`] never matches a value
//! rule, and no function here fails or panics on any input. Checks that
//! are not about credential *shapes* stay with their owners: an adapter
//! that knows its own key scrubs that exact string (`keel-providers`), and
//! an operator's NATS URL has its user-info masked where it is printed
//! (`keel-cli`).
//!
//! Two questions are asked, and both are cheap, allocation-light scanners
//! written by hand (no regex engine):
//!
//! - [`screen_key`]: is this JSON *member name* one that holds a prohibited
//!   category of data? The prohibited categories are the spec's:
//!   credentials, HTTP headers, prompt and tool content, and raw provider
//!   payloads ([`SecretRule::CredentialKey`], [`SecretRule::HeadersKey`],
//!   [`SecretRule::ContentKey`], [`SecretRule::RawPayloadKey`]).
//! - [`screen_value`]: does this *text* contain something shaped like a
//!   credential, anywhere in it (auth header values, well-known key
//!   prefixes, AWS and Google keys, JWTs, PEM blocks, webhook URLs, URLs with
//!   a password, `password=…` assignments)?
//!
//! [`redact`] replaces every span [`screen_value`] would flag with
//! `[redacted]`, for text that must survive (a failure report is worth
//! keeping even when it quotes a key); [`screen_and_bound`] also cuts the
//! result to a byte bound without letting the cut re-expose a shape. Their
//! output never matches a value rule.
//!
//! # Key rule
//!
//! A key is split into lowercase words at separators (any character that
//! is not an ASCII letter or digit: `-`, `_`, `.`, space, …) and at
//! camel-case humps (`apiKey` → `api`, `key`; `APIKey` → `api`, `key`). The
//! *normalized* key is the words joined (`X-Api-Key`, `x_api_key` and
//! `XApiKey` all normalize to `xapikey`), so the rule is case- and
//! separator-insensitive. Then:
//!
//! - **credentials**: the normalized key contains `authorization`,
//!   `apikey`, `password`, `passwd`, `passphrase`, `secret`, `privatekey`,
//!   `accesskey`, `signingkey`, `sessionkey`, `sessionid`, `cookie`,
//!   `credential`, `signature` or `bearer`; or it *ends* with `token`
//!   (`token`, `access_token`, `id_token`, `x-amz-security-token`, …) or
//!   `jwt`; or it is exactly `auth`, `pwd`, `sig`, `otp` or `pin`. Keys that
//!   merely *mention* tokens pass: `token_count`, `tokens`, `input_tokens`,
//!   `max_tokens`, `tokenizer`, `prompt_tokens`.
//! - **headers**: the normalized key is `header` or ends with `headers`.
//! - **prompt and tool content**: the normalized key is one of `prompt`,
//!   `prompts`, `system`, `instructions`, `messages`, `content`, `contents`,
//!   `input`, `inputs`, `output`, `outputs`, `completion`, `completions`,
//!   `choices`, `transcript`, `conversation`, `history`, `arguments`,
//!   `args`, or a `tool…`/`function…` variant (`tool_arguments`,
//!   `tool_input`, `tool_output`, `tool_result(s)`, `tool_content`,
//!   `tool_calls`, `function_call`, `function_arguments`); or its last word
//!   is `prompt`, `prompts`, `messages` or `arguments` (`system_prompt`).
//! - **raw provider payloads**: the normalized key is `body`, `payload`,
//!   `request`, `response`, `chunk(s)`, `json`, `raw`, or its first word is
//!   `raw` (`raw_response`) or its last word is `body` or `payload`
//!   (`request_body`).
//!
//! # Value rule
//!
//! A value is flagged when, *anywhere* in it, one of these appears
//! ([`SecretRule`] names which). Prefixes must start a token (the byte
//! before is not an ASCII letter or digit) and be followed by a minimum run
//! of key characters, so that `sketch`, `ask-me`, a bare `sk`, `AKIA` or
//! `eyJ`, a 40-hex commit sha and a UUID all pass:
//!
//! | rule | shape |
//! | --- | --- |
//! | `auth_scheme` | `Bearer <x>` / `Basic <x>` (any case), `<x>` ≥ 8 token characters and not a plain lowercase word |
//! | `anthropic_key` | `sk-ant-` + ≥ 20 of `[A-Za-z0-9_-]` |
//! | `openai_key` | `sk-` (incl. `sk-proj-`, `sk-svcacct-`) + ≥ 20 of `[A-Za-z0-9_-]` |
//! | `stripe_key` | `sk_live_`, `sk_test_`, `rk_live_`, `rk_test_`, `pk_live_` + ≥ 16 of `[A-Za-z0-9]` |
//! | `github_token` | `ghp_`, `gho_`, `ghs_`, `ghu_`, `ghr_` + ≥ 20 of `[A-Za-z0-9]`; `github_pat_` + ≥ 20 of `[A-Za-z0-9_]` |
//! | `gitlab_token` | `glpat-` + ≥ 20 of `[A-Za-z0-9_-]` |
//! | `slack_token` | `xoxb-`, `xoxp-`, `xoxa-`, `xoxr-`, `xoxs-`, `xoxe-` + ≥ 10 of `[A-Za-z0-9-]` |
//! | `slack_webhook` | `hooks.slack.com/services/…` |
//! | `aws_access_key` | `AKIA` or `ASIA` + exactly 16 of `[A-Z0-9]`, then a token end |
//! | `google_api_key` | `AIza` + ≥ 35 of `[A-Za-z0-9_-]` |
//! | `npm_token` | `npm_` + ≥ 30 of `[A-Za-z0-9]` |
//! | `pypi_token` | `pypi-` + ≥ 32 of `[A-Za-z0-9_-]` |
//! | `hugging_face_token` | `hf_` + ≥ 30 of `[A-Za-z0-9]` |
//! | `jwt` | `eyJ…` ≥ 10 base64url characters, `.`, ≥ 2, `.`, any |
//! | `pem_block` | `-----BEGIN ` up to its `-----END …-----` (or the end) |
//! | `url_credentials` | `scheme://user:password@host` (the user-info is the span) |
//! | `credential_assignment` | a credential key (above) followed by `=` or `:` and a value: `password=hunter2`, `"api_key": "…"` |
//!
//! The rules err on the side of rejecting: a metadata key such as
//! `secret_scanning` or `next_page_token` is refused although it may be
//! harmless, because a leaked credential cannot be recalled from an event
//! log and a dropped metadata fact costs little.

use std::fmt;

/// Which screening rule matched. The rule, never the text, is what errors
/// report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SecretRule {
    /// A key naming a credential (authorization, api key, cookie, token,
    /// secret, password, …).
    CredentialKey,
    /// A key holding HTTP headers.
    HeadersKey,
    /// A key holding prompt or tool content.
    ContentKey,
    /// A key holding a raw provider request or response payload.
    RawPayloadKey,
    /// A `Bearer` or `Basic` authorization value.
    AuthScheme,
    /// An Anthropic API key (`sk-ant-…`).
    AnthropicKey,
    /// An OpenAI-style API key (`sk-…`, `sk-proj-…`).
    OpenAiKey,
    /// A Stripe key (`sk_live_…`, `rk_live_…`, `pk_live_…`, test keys).
    StripeKey,
    /// A GitHub token (`ghp_…`, `gho_…`, `ghs_…`, `github_pat_…`).
    GitHubToken,
    /// A GitLab personal access token (`glpat-…`).
    GitLabToken,
    /// A Slack token (`xoxb-…` and siblings).
    SlackToken,
    /// A Slack incoming-webhook URL.
    SlackWebhook,
    /// An AWS access key id (`AKIA…`, `ASIA…`).
    AwsAccessKey,
    /// A Google API key (`AIza…`).
    GoogleApiKey,
    /// An npm token (`npm_…`).
    NpmToken,
    /// A PyPI token (`pypi-…`).
    PyPiToken,
    /// A Hugging Face token (`hf_…`).
    HuggingFaceToken,
    /// A JSON Web Token.
    Jwt,
    /// A PEM block (private keys, certificates).
    PemBlock,
    /// A URL whose user-info carries a password.
    UrlCredentials,
    /// A credential key assigned a value inside text (`password=…`).
    CredentialAssignment,
}

impl SecretRule {
    /// The stable rule name, e.g. `"openai_key"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretRule::CredentialKey => "credential_key",
            SecretRule::HeadersKey => "headers_key",
            SecretRule::ContentKey => "content_key",
            SecretRule::RawPayloadKey => "raw_payload_key",
            SecretRule::AuthScheme => "auth_scheme",
            SecretRule::AnthropicKey => "anthropic_key",
            SecretRule::OpenAiKey => "openai_key",
            SecretRule::StripeKey => "stripe_key",
            SecretRule::GitHubToken => "github_token",
            SecretRule::GitLabToken => "gitlab_token",
            SecretRule::SlackToken => "slack_token",
            SecretRule::SlackWebhook => "slack_webhook",
            SecretRule::AwsAccessKey => "aws_access_key",
            SecretRule::GoogleApiKey => "google_api_key",
            SecretRule::NpmToken => "npm_token",
            SecretRule::PyPiToken => "pypi_token",
            SecretRule::HuggingFaceToken => "hugging_face_token",
            SecretRule::Jwt => "jwt",
            SecretRule::PemBlock => "pem_block",
            SecretRule::UrlCredentials => "url_credentials",
            SecretRule::CredentialAssignment => "credential_assignment",
        }
    }
}

impl fmt::Display for SecretRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "secrets.{}", self.as_str())
    }
}

/// The text that replaces each redacted span.
pub const REDACTED: &str = "[redacted]";

// ---------------------------------------------------------------- keys ----

/// Splits `key` into lowercase words (see the module docs) and returns them
/// with the normalized (joined) key.
fn words(key: &str) -> (Vec<String>, String) {
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        if c.is_uppercase() && !current.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            // `apiKey` -> api|Key ; `APIKey` -> API|Key ; `v2Token` -> v2|Token
            if prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower) {
                words.push(std::mem::take(&mut current));
            }
        }
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    let normalized = words.concat();
    (words, normalized)
}

const CREDENTIAL_CONTAINS: &[&str] = &[
    "authorization",
    "apikey",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "privatekey",
    "accesskey",
    "signingkey",
    "sessionkey",
    "sessionid",
    "cookie",
    "credential",
    "signature",
    "bearer",
];
const CREDENTIAL_EXACT: &[&str] = &["auth", "xauth", "pwd", "sig", "otp", "pin"];
const CREDENTIAL_SUFFIX: &[&str] = &["token", "jwt"];

const CONTENT_EXACT: &[&str] = &[
    "prompt",
    "prompts",
    "system",
    "instructions",
    "messages",
    "content",
    "contents",
    "input",
    "inputs",
    "output",
    "outputs",
    "completion",
    "completions",
    "choices",
    "transcript",
    "conversation",
    "history",
    "arguments",
    "args",
    "toolarguments",
    "toolargs",
    "toolinput",
    "toolinputs",
    "tooloutput",
    "tooloutputs",
    "toolresult",
    "toolresults",
    "toolcontent",
    "toolcall",
    "toolcalls",
    "functioncall",
    "functioncalls",
    "functionarguments",
];
const CONTENT_LAST_WORD: &[&str] = &["prompt", "prompts", "messages", "arguments"];

const RAW_EXACT: &[&str] = &[
    "body", "payload", "request", "response", "chunk", "chunks", "json", "raw",
];
const RAW_LAST_WORD: &[&str] = &["body", "payload"];

/// Screens a JSON member name: `Some(rule)` when the key names a
/// prohibited category (see the module docs for the exact rule).
///
/// ```
/// use keel_stream::secrets::{screen_key, SecretRule};
/// assert_eq!(screen_key("X-Api-Key"), Some(SecretRule::CredentialKey));
/// assert_eq!(screen_key("refresh_token"), Some(SecretRule::CredentialKey));
/// assert_eq!(screen_key("request_headers"), Some(SecretRule::HeadersKey));
/// assert_eq!(screen_key("system_prompt"), Some(SecretRule::ContentKey));
/// assert_eq!(screen_key("raw_response"), Some(SecretRule::RawPayloadKey));
/// assert_eq!(screen_key("token_count"), None);
/// assert_eq!(screen_key("max_tokens"), None);
/// ```
pub fn screen_key(key: &str) -> Option<SecretRule> {
    let (words, norm) = words(key);
    let norm = norm.as_str();
    if norm.is_empty() {
        return None;
    }
    let first = words.first().map(String::as_str).unwrap_or_default();
    let last = words.last().map(String::as_str).unwrap_or_default();
    if CREDENTIAL_CONTAINS.iter().any(|w| norm.contains(w))
        || CREDENTIAL_EXACT.contains(&norm)
        || CREDENTIAL_SUFFIX.iter().any(|w| norm.ends_with(w))
    {
        return Some(SecretRule::CredentialKey);
    }
    if norm == "header" || norm.ends_with("headers") {
        return Some(SecretRule::HeadersKey);
    }
    if CONTENT_EXACT.contains(&norm) || CONTENT_LAST_WORD.contains(&last) {
        return Some(SecretRule::ContentKey);
    }
    if RAW_EXACT.contains(&norm) || first == "raw" || RAW_LAST_WORD.contains(&last) {
        return Some(SecretRule::RawPayloadKey);
    }
    None
}

// -------------------------------------------------------------- values ----

/// One flagged span of a text: byte range (always on char boundaries: every
/// scanner starts and stops at ASCII bytes) and the rule.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    rule: SecretRule,
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Length of the run of bytes satisfying `pred` starting at `at`.
fn run(bytes: &[u8], at: usize, pred: impl Fn(u8) -> bool) -> usize {
    bytes
        .get(at..)
        .map_or(0, |rest| rest.iter().take_while(|&&b| pred(b)).count())
}

/// Whether a token may start at `at`: the previous byte is not an ASCII
/// letter or digit.
fn token_start(bytes: &[u8], at: usize) -> bool {
    at == 0 || !is_alnum(bytes[at - 1])
}

/// `prefix` at `at` followed by at least `min` bytes of `pred`: the span end.
fn prefixed(
    bytes: &[u8],
    at: usize,
    prefix: &[u8],
    min: usize,
    pred: impl Fn(u8) -> bool,
) -> Option<usize> {
    if !bytes[at..].starts_with(prefix) {
        return None;
    }
    let n = run(bytes, at + prefix.len(), pred);
    (n >= min).then_some(at + prefix.len() + n)
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

fn aws_key(bytes: &[u8], at: usize) -> Option<usize> {
    if !(bytes[at..].starts_with(b"AKIA") || bytes[at..].starts_with(b"ASIA")) {
        return None;
    }
    let n = run(bytes, at + 4, |b| {
        b.is_ascii_uppercase() || b.is_ascii_digit()
    });
    let end = at + 4 + n;
    let ends_token = bytes.get(end).is_none_or(|&b| !is_alnum(b));
    (n == 16 && ends_token).then_some(end)
}

fn jwt(bytes: &[u8], at: usize) -> Option<usize> {
    if !bytes[at..].starts_with(b"eyJ") {
        return None;
    }
    let b64 = |b: u8| is_key_char(b);
    let s1 = run(bytes, at, b64);
    if s1 < 10 || bytes.get(at + s1) != Some(&b'.') {
        return None;
    }
    let p2 = at + s1 + 1;
    let s2 = run(bytes, p2, b64);
    if s2 < 2 || bytes.get(p2 + s2) != Some(&b'.') {
        return None;
    }
    let p3 = p2 + s2 + 1;
    Some(p3 + run(bytes, p3, b64))
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn pem(bytes: &[u8], at: usize) -> Option<usize> {
    if !bytes[at..].starts_with(b"-----BEGIN ") {
        return None;
    }
    let Some(end_marker) = find(bytes, at + 11, b"-----END") else {
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

fn slack_webhook(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    const HOST: &[u8] = b"hooks.slack.com/services/";
    if !bytes[at..].starts_with(HOST) {
        return None;
    }
    let mut start = at;
    for scheme in [&b"https://"[..], &b"http://"[..]] {
        if at >= scheme.len() && &bytes[at - scheme.len()..at] == scheme {
            start = at - scheme.len();
        }
    }
    Some((
        start,
        at + HOST.len() + run(bytes, at + HOST.len(), url_char),
    ))
}

/// The rule's match ending at `end`, if there is one.
fn rule_hit(end: Option<usize>, rule: SecretRule) -> Option<(usize, SecretRule)> {
    end.map(|e| (e, rule))
}

/// Prefix rules that start a token at `at`.
fn prefix_rule(bytes: &[u8], at: usize) -> Option<(usize, SecretRule)> {
    let key = is_key_char;
    let alnum = is_alnum;
    match bytes[at] {
        b's' => first_prefix(bytes, at, &SK_KEYS),
        b'r' => rule_hit(
            prefixed(bytes, at, b"rk_live_", 16, alnum),
            SecretRule::StripeKey,
        )
        .or_else(|| {
            rule_hit(
                prefixed(bytes, at, b"rk_test_", 16, alnum),
                SecretRule::StripeKey,
            )
        }),
        b'p' => rule_hit(
            prefixed(bytes, at, b"pk_live_", 16, alnum),
            SecretRule::StripeKey,
        )
        .or_else(|| {
            rule_hit(
                prefixed(bytes, at, b"pypi-", 32, key),
                SecretRule::PyPiToken,
            )
        }),
        b'g' => first_prefix(bytes, at, &GIT_FORGE_TOKENS),
        b'x' => slack_token(bytes, at),
        b'A' => rule_hit(aws_key(bytes, at), SecretRule::AwsAccessKey).or_else(|| {
            rule_hit(
                prefixed(bytes, at, b"AIza", 35, key),
                SecretRule::GoogleApiKey,
            )
        }),
        b'e' => rule_hit(jwt(bytes, at), SecretRule::Jwt),
        b'n' => rule_hit(
            prefixed(bytes, at, b"npm_", 30, alnum),
            SecretRule::NpmToken,
        ),
        b'h' => rule_hit(
            prefixed(bytes, at, b"hf_", 30, alnum),
            SecretRule::HuggingFaceToken,
        ),
        b'B' | b'b' => rule_hit(auth_scheme(bytes, at), SecretRule::AuthScheme),
        _ => None,
    }
}

/// A token prefix, the shortest run of key characters after it, which
/// characters the run may hold, and the rule a match breaks.
struct PrefixRule {
    prefix: &'static [u8],
    min: usize,
    class: fn(u8) -> bool,
    rule: SecretRule,
}

const fn prefix(
    prefix: &'static [u8],
    min: usize,
    class: fn(u8) -> bool,
    rule: SecretRule,
) -> PrefixRule {
    PrefixRule {
        prefix,
        min,
        class,
        rule,
    }
}

/// The first of `rules`, in order, that matches at `at`.
fn first_prefix(bytes: &[u8], at: usize, rules: &[PrefixRule]) -> Option<(usize, SecretRule)> {
    rules
        .iter()
        .find_map(|r| prefixed(bytes, at, r.prefix, r.min, r.class).map(|end| (end, r.rule)))
}

fn is_alnum_or_underscore(b: u8) -> bool {
    is_alnum(b) || b == b'_'
}

/// Keys starting `sk`: Anthropic's first, since OpenAI's `sk-` is a prefix
/// of `sk-ant-`; then OpenAI, then Stripe secret keys.
const SK_KEYS: [PrefixRule; 4] = [
    prefix(b"sk-ant-", 20, is_key_char, SecretRule::AnthropicKey),
    prefix(b"sk-", 20, is_key_char, SecretRule::OpenAiKey),
    prefix(b"sk_live_", 16, is_alnum, SecretRule::StripeKey),
    prefix(b"sk_test_", 16, is_alnum, SecretRule::StripeKey),
];

/// Tokens starting `g`: GitHub's classic and fine-grained tokens, then
/// GitLab personal access tokens.
const GIT_FORGE_TOKENS: [PrefixRule; 7] = [
    prefix(b"ghp_", 20, is_alnum, SecretRule::GitHubToken),
    prefix(b"gho_", 20, is_alnum, SecretRule::GitHubToken),
    prefix(b"ghs_", 20, is_alnum, SecretRule::GitHubToken),
    prefix(b"ghu_", 20, is_alnum, SecretRule::GitHubToken),
    prefix(b"ghr_", 20, is_alnum, SecretRule::GitHubToken),
    prefix(
        b"github_pat_",
        20,
        is_alnum_or_underscore,
        SecretRule::GitHubToken,
    ),
    prefix(b"glpat-", 20, is_key_char, SecretRule::GitLabToken),
];

/// Slack tokens: `xox` and a type letter, a dash, then at least 10
/// letters, digits or dashes.
fn slack_token(bytes: &[u8], at: usize) -> Option<(usize, SecretRule)> {
    let slack = bytes.get(at..at + 5).is_some_and(|p| {
        p.starts_with(b"xox")
            && matches!(p[3], b'a' | b'b' | b'e' | b'p' | b'r' | b's')
            && p[4] == b'-'
    });
    if slack {
        let n = run(bytes, at + 5, |b| is_alnum(b) || b == b'-');
        (n >= 10).then_some((at + 5 + n, SecretRule::SlackToken))
    } else {
        None
    }
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
    if colon + 1 >= userinfo.len() || &userinfo[colon + 1..] == REDACTED.as_bytes() {
        return None;
    }
    Some((start, start + at))
}

/// `<credential key><quote?><spaces?>[=:]<spaces?><quote?><value>`: the
/// span is the value.
fn credential_assignment(
    bytes: &[u8],
    word_start: usize,
    word_end: usize,
) -> Option<(usize, usize)> {
    let mut i = word_end;
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    i += run(bytes, i, |b| b == b' ');
    if !matches!(bytes.get(i), Some(b'=' | b':')) {
        return None;
    }
    if bytes.get(i..i + 3) == Some(b"://") {
        return None;
    }
    i += 1;
    i += run(bytes, i, |b| b == b' ');
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    let n = run(bytes, i, |b| {
        b > b' '
            && !matches!(
                b,
                b'"' | b'\'' | b',' | b';' | b'&' | b'}' | b')' | b']' | b'<' | b'>'
            )
    });
    // Nothing, or a redaction marker (perhaps cut short by truncation).
    if n == 0 || REDACTED.as_bytes().starts_with(&bytes[i..i + n]) {
        return None;
    }
    // Only the ASCII word was screened; it is valid UTF-8 on its own.
    let word = std::str::from_utf8(&bytes[word_start..word_end]).ok()?;
    (screen_key(word) == Some(SecretRule::CredentialKey)).then_some((i, i + n))
}

/// Every flagged span, sorted by start, overlapping spans merged (the rule
/// of the first is kept).
fn spans(text: &str) -> Vec<Span> {
    let bytes = text.as_bytes();
    let mut out: Vec<Span> = Vec::new();
    let mut push = |start: usize, end: usize, rule: SecretRule| {
        out.push(Span { start, end, rule });
    };

    // Pass 1: prefix-shaped tokens, PEM blocks, webhooks.
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'-' {
            if let Some(end) = pem(bytes, i) {
                push(i, end, SecretRule::PemBlock);
                i = end;
                continue;
            }
        } else if bytes[i] == b'h'
            && let Some((start, end)) = slack_webhook(bytes, i)
        {
            push(start, end, SecretRule::SlackWebhook);
            i = end.max(i + 1);
            continue;
        }
        if token_start(bytes, i)
            && let Some((end, rule)) = prefix_rule(bytes, i)
        {
            push(i, end, rule);
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }

    // Pass 2: URLs with a password in their user-info.
    let mut from = 0;
    while let Some(sep) = find(bytes, from, b"://") {
        if let Some((start, end)) = url_credentials(bytes, sep) {
            push(start, end, SecretRule::UrlCredentials);
        }
        from = sep + 3;
    }

    // Pass 3: `credential_key = value` assignments.
    let word_char = |b: u8| is_alnum(b) || matches!(b, b'_' | b'-' | b'.');
    let mut i = 0;
    while i < bytes.len() {
        if word_char(bytes[i]) && (i == 0 || !word_char(bytes[i - 1])) {
            let end = i + run(bytes, i, word_char);
            if let Some((start, vend)) = credential_assignment(bytes, i, end) {
                push(start, vend, SecretRule::CredentialAssignment);
            }
            i = end;
        } else {
            i += 1;
        }
    }

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

/// Screens a text: `Some(rule)` for the leftmost span that looks like a
/// credential (see the module docs for the shapes).
///
/// ```
/// use keel_stream::secrets::{screen_value, SecretRule};
/// let key = format!("{}{}", "sk-proj-", "a1B2".repeat(8));
/// assert_eq!(screen_value(&format!("key {key} rejected")), Some(SecretRule::OpenAiKey));
/// assert_eq!(screen_value("sketch a skate park, ask-me-anything"), None);
/// assert_eq!(screen_value("0123456789abcdef0123456789abcdef01234567"), None);
/// ```
pub fn screen_value(text: &str) -> Option<SecretRule> {
    spans(text).first().map(|s| s.rule)
}

/// What [`redact`] and [`screen_and_bound`] give back: the screened text,
/// whether any span was replaced by [`REDACTED`], and whether the text was
/// cut to a bound ([`redact`] never cuts). The text never matches a value
/// rule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Screened {
    text: String,
    redacted: bool,
    truncated: bool,
}

impl Screened {
    /// The screened text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The screened text, by value.
    pub fn into_text(self) -> String {
        self.text
    }

    /// Whether some span was replaced by [`REDACTED`].
    pub fn redacted(&self) -> bool {
        self.redacted
    }

    /// Whether the text was cut to the bound of [`screen_and_bound`].
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

/// Replaces every span [`screen_value`] would flag with [`REDACTED`].
/// Redacting an already-redacted text changes nothing.
///
/// ```
/// let out = keel_stream::secrets::redact("auth failed: Authorization: Bearer abc.DEF-123_456");
/// assert_eq!(out.text(), "auth failed: Authorization: [redacted]");
/// assert!(out.redacted() && !out.truncated());
/// ```
pub fn redact(text: &str) -> Screened {
    let (text, redacted) = redact_text(text);
    Screened {
        text,
        redacted,
        truncated: false,
    }
}

/// [`redact`]'s work: the text and whether anything was replaced.
fn redact_text(text: &str) -> (String, bool) {
    let mut current = redact_once(text);
    if current.is_none() {
        return (text.to_owned(), false);
    }
    // A replacement can expose a new token start (`ghp_…sk-…`: the `sk-`
    // run starts a token only once the `ghp_` run before it is gone), so
    // repeat until nothing matches.
    for _ in 0..8 {
        let Some(text) = current.as_deref() else {
            break;
        };
        match redact_once(text) {
            Some(next) => current = Some(next),
            // No span is ever exactly `[redacted]`, so a pass that matched
            // changed the text.
            None => return (text.to_owned(), true),
        }
    }
    // Pathological input that keeps matching: keep nothing.
    (REDACTED.to_owned(), true)
}

/// One pass: `None` when nothing matched.
fn redact_once(text: &str) -> Option<String> {
    let spans = spans(text);
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for s in &spans {
        out.push_str(&text[at..s.start]);
        out.push_str(REDACTED);
        at = s.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// Cuts `text` to at most `max` bytes at a char boundary.
fn truncate_at_char(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    true
}

/// Redacts secrets in `text`, then cuts it at a char boundary to `max`
/// bytes, screening again what is left. This is the treatment a
/// [`ProviderProblem`](crate::ProviderProblem) message gets;
/// `keel_eventlog::ErrorText` gives it to failure text in events.
///
/// ```
/// let out = keel_stream::secrets::screen_and_bound("password=hunter2, try again", 20);
/// assert_eq!(out.text(), "password=[redacted],");
/// assert!(out.redacted() && out.truncated());
/// ```
pub fn screen_and_bound(text: &str, max: usize) -> Screened {
    let (mut text, mut redacted) = redact_text(text);
    let mut truncated = false;
    let done = |text: String, redacted: bool, truncated: bool| Screened {
        text,
        redacted,
        truncated,
    };
    // Truncation can only shorten; but a cut can turn a harmless run into a
    // complete shape (an `AKIA` run cut to exactly 20 bytes), and a redaction
    // marker is longer than a short secret, so repeat until stable. `redact`
    // output never matches a rule, so text that fits is clean.
    for _ in 0..4 {
        if !truncate_at_char(&mut text, max) {
            return done(text, redacted, truncated);
        }
        truncated = true;
        let (again, hit) = redact_text(&text);
        if !hit {
            return done(text, redacted, truncated);
        }
        text = again;
        redacted = true;
    }
    // Still unstable (only with absurdly small bounds): keep only the marker,
    // cut to the bound. No rule matches a prefix of the marker.
    let mut text = REDACTED.to_owned();
    truncate_at_char(&mut text, max);
    done(text, true, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_camel_and_separators() {
        assert_eq!(words("X-Api-Key").1, "xapikey");
        assert_eq!(words("apiKey").0, vec!["api", "key"]);
        assert_eq!(words("APIKey").0, vec!["api", "key"]);
        assert_eq!(words("accessToken").0, vec!["access", "token"]);
        assert_eq!(words("raw_response").0, vec!["raw", "response"]);
    }

    #[test]
    fn redact_is_idempotent() {
        let text = format!("password={} and {}{}", "hunter2", "ghp_", "A".repeat(36));
        let (once, r1) = redact_text(&text);
        let (twice, r2) = redact_text(&once);
        assert!(r1);
        assert!(!r2, "{once}");
        assert_eq!(once, twice);
    }
}
