//! The key rule: which JSON member names hold a prohibited category of
//! data (see the parent module's docs).

use super::SecretRule;

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
    "clientid",
    "accessid",
    "apiid",
    "webhook",
    "oauth",
    "jwt",
];
const CREDENTIAL_EXACT: &[&str] = &["xauth", "pwd", "sig", "otp", "pin"];
/// A word that makes any key a credential key wherever it stands
/// (`curl_auth_user`, `auth-header`).
const CREDENTIAL_WORD: &[&str] = &["auth"];
/// A last word that makes a vendor-named key a credential key
/// (`adafruit_key`, `gitlab-pat`), unless the word before it says what
/// else the key is ([`KEY_NOT_CREDENTIAL`]).
const CREDENTIAL_LAST_WORD: &[&str] = &["key", "keys", "pat"];
/// Kinds of key that are not credentials: `cache_key`, `idempotency_key`,
/// `partition_key`, `prompt_cache_key`, …
const KEY_NOT_CREDENTIAL: &[&str] = &[
    "cache",
    "idempotency",
    "partition",
    "sort",
    "primary",
    "foreign",
    "routing",
    "dedup",
    "dedupe",
    "deduplication",
    "object",
    "lookup",
    "group",
    "grouping",
    "shard",
    "sharding",
    "row",
    "index",
    "hash",
    "composite",
    "unique",
    "cursor",
    "ordering",
    "message",
    "event",
    "trace",
    "span",
];
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
        || words.iter().any(|w| CREDENTIAL_WORD.contains(&w.as_str()))
        || vendor_key(&words)
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

/// `<something>_key`, `<vendor>-pat`: a last word of
/// [`CREDENTIAL_LAST_WORD`] after a word that is not one of
/// [`KEY_NOT_CREDENTIAL`]. A bare `key` passes: it names nothing.
fn vendor_key(words: &[String]) -> bool {
    match words {
        [.., before, last] => {
            CREDENTIAL_LAST_WORD.contains(&last.as_str())
                && !KEY_NOT_CREDENTIAL.contains(&before.as_str())
        }
        _ => false,
    }
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
        // An upper-case run after a lower-case letter or a digit starts a
        // word even when no lower-case letter follows it.
        assert_eq!(words("githubPAT").0, vec!["github", "pat"]);
        assert_eq!(words("v2TOKEN").0, vec!["v2", "token"]);
    }
}
