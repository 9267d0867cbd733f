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
//! # Key rule (`keys.rs`)
//!
//! A key is split into lowercase words at separators (any character that
//! is not an ASCII letter or digit: `-`, `_`, `.`, space, …) and at
//! camel-case humps (`apiKey` → `api`, `key`; `APIKey` → `api`, `key`). The
//! *normalized* key is the words joined (`X-Api-Key`, `x_api_key` and
//! `XApiKey` all normalize to `xapikey`), so the rule is case- and
//! separator-insensitive. Then:
//!
//! - **credentials**: the normalized key contains a credential word
//!   (`authorization`, `apikey`, `password`, `secret`, `cookie`,
//!   `clientid`, `webhook`, `oauth`, …), or ends with `token` or `jwt`, or
//!   has the word `auth`, or is a *vendor-named key*: a last word `key`,
//!   `keys` or `pat` after a word that is not a known non-credential kind
//!   (`adafruit_key` and `gitlab-pat` are refused; `cache_key`,
//!   `idempotency_key` and a bare `key` pass). Keys that merely *mention*
//!   tokens pass: `token_count`, `input_tokens`, `max_tokens`.
//! - **headers**: the normalized key is `header` or ends with `headers`.
//! - **prompt and tool content**: `prompt`, `system`, `messages`,
//!   `content`, `input`, `output`, `arguments`, `tool_result`, … or a last
//!   word `prompt`, `prompts`, `messages` or `arguments`.
//! - **raw provider payloads**: `body`, `payload`, `request`, `response`,
//!   `chunk(s)`, `json`, `raw`, a first word `raw` or a last word `body` or
//!   `payload`.
//!
//! # Value rule (`scan.rs`, `formats.rs`)
//!
//! A value is flagged when, *anywhere* in it, a credential shape appears
//! ([`SecretRule`] names which). Prefixes must start a token (the byte
//! before is not an ASCII letter or digit) and be followed by a minimum run
//! of the format's body characters, so that `sketch`, `ask-me`, a bare
//! `sk`, `AKIA` or `eyJ`, a 40-hex commit sha, a UUID and a provider
//! request id all pass. The shapes:
//!
//! - auth schemes (`Bearer <x>`, `Basic <x>`), JWTs, PEM blocks, Slack
//!   webhooks, URLs with a password in their user-info;
//! - the self-identifying vendor formats of `formats.rs`: about 130 vendor
//!   prefixes and infixes, derived from gitleaks' and detect-secrets'
//!   public rules (`sk-ant-`, `glpat-`, `shpat_`, `hvs.`, `…Q~…`);
//! - a credential key assigned a value: `password=…`, `"api_key": "…"`,
//!   `'secret' => '…'`, `token := …`, curl's `-u user:pass`, markup
//!   `key="ApiKey" value="…"` and `<password>…</password>`.
//!
//! `docs/SECURITY.md` §3.2 has the full table and the figures measured
//! against the public rule sets (`tests/secrets_rule_sets.rs`).
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
    /// Another vendor's self-identifying token format (`glpat-`-style
    /// prefixes and infixes; see `docs/SECURITY.md` §3.2 for the families).
    VendorToken,
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
            SecretRule::VendorToken => "vendor_token",
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

mod bytes;
mod formats;
mod keys;
mod scan;

pub use keys::screen_key;
use scan::spans;

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

    /// Errors name rules by these strings: they are part of the contract.
    #[test]
    fn rule_names_are_stable_and_distinct() {
        use SecretRule::*;
        let all = [
            (CredentialKey, "credential_key"),
            (HeadersKey, "headers_key"),
            (ContentKey, "content_key"),
            (RawPayloadKey, "raw_payload_key"),
            (AuthScheme, "auth_scheme"),
            (AnthropicKey, "anthropic_key"),
            (OpenAiKey, "openai_key"),
            (StripeKey, "stripe_key"),
            (GitHubToken, "github_token"),
            (GitLabToken, "gitlab_token"),
            (SlackToken, "slack_token"),
            (SlackWebhook, "slack_webhook"),
            (AwsAccessKey, "aws_access_key"),
            (GoogleApiKey, "google_api_key"),
            (NpmToken, "npm_token"),
            (PyPiToken, "pypi_token"),
            (HuggingFaceToken, "hugging_face_token"),
            (Jwt, "jwt"),
            (PemBlock, "pem_block"),
            (UrlCredentials, "url_credentials"),
            (CredentialAssignment, "credential_assignment"),
            (VendorToken, "vendor_token"),
        ];
        for (rule, name) in all {
            assert_eq!(rule.as_str(), name);
            assert_eq!(rule.to_string(), format!("secrets.{name}"));
        }
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
