#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The secret corpus: credential-shaped keys and values are rejected in
//! metadata at several paths, with the path named and the value never
//! echoed; benign look-alikes are accepted; problem messages are redacted.
//!
//! Secret-shaped strings are assembled from parts with [`fake`] so that no
//! complete one appears in the source.

mod common;

use common::fake;
use keel_message::Limits;
use keel_stream::secrets::{self, SecretRule};
use keel_stream::*;
use serde_json::{Value, json};

/// The part of a corpus value that is the secret itself: the user-info of
/// a URL (its host is kept when redacting), else the whole value.
fn core(secret: &str, rule: SecretRule) -> &str {
    match rule {
        SecretRule::UrlCredentials => {
            let start = secret.find("://").unwrap() + 3;
            &secret[start..secret.find('@').unwrap()]
        }
        _ => secret,
    }
}

/// Secret-shaped values, with the rule each must hit.
fn secret_values() -> Vec<(String, SecretRule)> {
    use SecretRule::*;
    let a20 = "Ab3De5Gh7Jk9Mn2Pq4St";
    let a36 = "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg7";
    vec![
        (fake(&["Bearer ", "abcDEF123456ghiJKL"]), AuthScheme),
        (fake(&["bearer ", "0a1b2c3d4e5f.g6h7"]), AuthScheme),
        (fake(&["Basic ", "dXNlcjpwYXNzd29yZA=="]), AuthScheme),
        (fake(&["sk-", a36, a20]), OpenAiKey),
        (fake(&["sk-", "proj-", a36, a36]), OpenAiKey),
        (fake(&["sk-", "svcacct-", a36]), OpenAiKey),
        (fake(&["sk-", "ant-", "api03-", a36, a36]), AnthropicKey),
        (fake(&["gh", "p_", a36]), GitHubToken),
        (fake(&["gh", "o_", a36]), GitHubToken),
        (fake(&["gh", "s_", a36]), GitHubToken),
        (
            fake(&["github", "_pat_", "11ABCDEFG0", "_", a36]),
            GitHubToken,
        ),
        (
            fake(&["xo", "xb-", "123456789012-", "1234567890123-", a20]),
            SlackToken,
        ),
        (fake(&["xo", "xp-", "123456789012-", a20]), SlackToken),
        (fake(&["xo", "xa-", "2-", a20]), SlackToken),
        (fake(&["xo", "xr-", a20]), SlackToken),
        (fake(&["xo", "xs-", a20]), SlackToken),
        (fake(&["AK", "IA", "IOSFODNN7EXAMPLE"]), AwsAccessKey),
        (fake(&["AS", "IA", "Z2X3C4V5B6N7M8Q9"]), AwsAccessKey),
        (
            fake(&["AI", "za", "SyD", a20, "0123456789AB"]),
            GoogleApiKey,
        ),
        (
            fake(&[
                "ey",
                "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
                ".",
                "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
                ".",
                "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
            ]),
            Jwt,
        ),
        (
            fake(&[
                "-----BEGIN RSA ",
                "PRIVATE KEY-----\nMIIEow",
                a36,
                "\n-----END RSA PRIVATE KEY-----",
            ]),
            PemBlock,
        ),
        (
            fake(&[
                "-----BEGIN OPENSSH ",
                "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
                a20,
            ]),
            PemBlock,
        ),
        (
            fake(&[
                "-----BEGIN ",
                "CERTIFICATE-----\nMIIC",
                a36,
                "\n-----END CERTIFICATE-----",
            ]),
            PemBlock,
        ),
        (fake(&["gl", "pat-", a20]), GitLabToken),
        (fake(&["np", "m_", a36]), NpmToken),
        (fake(&["py", "pi-", "AgEIcHlwaS5vcmc", a36]), PyPiToken),
        (fake(&["h", "f_", a36]), HuggingFaceToken),
        (fake(&["sk", "_live_", a20, "xyz"]), StripeKey),
        (fake(&["rk", "_live_", a20]), StripeKey),
        (fake(&["pk", "_live_", a20]), StripeKey),
        (fake(&["sk", "_test_", a20]), StripeKey),
        (
            fake(&[
                "https://hooks.",
                "slack.com/services/",
                "T00000000/B00000000/",
                a20,
            ]),
            SlackWebhook,
        ),
        (
            fake(&["https://deploy", ":hunter2", "@git.example.com/repo.git"]),
            UrlCredentials,
        ),
        (
            fake(&["postgres://admin", ":s3cr3t-pw", "@db.internal/app"]),
            UrlCredentials,
        ),
        (fake(&["pass", "word=", "hunter2-pw"]), CredentialAssignment),
        (
            fake(&["api_key", ": ", "abcd1234efgh"]),
            CredentialAssignment,
        ),
        (
            fake(&["{\"author", "ization\": \"", "opaque-credential-xyz\"}"]),
            CredentialAssignment,
        ),
        (
            fake(&["client_secret", "=", "zz-9f8e7d6c"]),
            CredentialAssignment,
        ),
        (
            fake(&["see key ", "sk-", "ant-", a36, " in the log"]),
            AnthropicKey,
        ),
        (
            fake(&["X-Amz-Security-", "Token=", "FwoGZXIvYXdzE"]),
            CredentialAssignment,
        ),
        // The assignment syntaxes of other languages and tools.
        (
            fake(&["curl -u ", "deploy:", "hunter2-pw https://x.example"]),
            CredentialAssignment,
        ),
        (
            fake(&["curl --user=", "deploy:", "hunter2-pw"]),
            CredentialAssignment,
        ),
        (
            fake(&["'secret'", " => ", "'s3cr3t-value'"]),
            CredentialAssignment,
        ),
        (
            fake(&["$password ", ":= ", "\"hunter2-pw\""]),
            CredentialAssignment,
        ),
        (
            fake(&[
                "<add key=\"ApiKey\" ",
                "value=\"",
                "opaque-credential-xyz\"/>",
            ]),
            CredentialAssignment,
        ),
        (
            fake(&["<setting name='db.password' ", "value='", "hunter2-pw'>"]),
            CredentialAssignment,
        ),
        (
            fake(&["<password>", "hunter2-pw", "</password>"]),
            CredentialAssignment,
        ),
        (
            fake(&["adafruit_key", "=", "opaque-credential-xyz"]),
            CredentialAssignment,
        ),
        // Formats recognised by their vendor prefix alone.
        (fake(&["glp", "tt-", a20, a20]), GitLabToken),
        (fake(&["xa", "pp-1-", "A0B1C2D3E4-", a20]), SlackToken),
        (fake(&["api", "_org_", a36]), HuggingFaceToken),
        (fake(&["AB", "IA", "IOSFODNN7EXAMPLE"]), AwsAccessKey),
        (fake(&["A3", "TX", "IOSFODNN7EXAMPLE"]), AwsAccessKey),
        (
            fake(&["shp", "at_", "0123456789abcdef0123456789abcdef"]),
            VendorToken,
        ),
        (fake(&["SG", ".", a20, a20, a20]), VendorToken),
        (fake(&["hv", "s.", a36, a36, a20]), VendorToken),
        (
            fake(&["doo", "_v1_", "0123456789abcdef".repeat(4).as_str()]),
            VendorToken,
        ),
        (
            fake(&["SK", "0123456789abcdef0123456789abcdef"]),
            VendorToken,
        ),
        (fake(&["a1b2", "Q~", a20, "Zy.x_w~V-u12"]), VendorToken),
        (
            fake(&["123456789", ":", a20, "Ab3De5Gh7Jk9Mn2Pq4S"]),
            VendorToken,
        ),
    ]
}

/// Keys in a prohibited category, with the category.
fn secret_keys() -> Vec<(&'static str, SecretRule)> {
    use SecretRule::*;
    vec![
        ("authorization", CredentialKey),
        ("Authorization", CredentialKey),
        ("adafruit_key", CredentialKey),
        ("ADAFRUIT_KEY", CredentialKey),
        ("flutterwave-encryption-key", CredentialKey),
        ("gitlab-pat", CredentialKey),
        ("curl-auth-user", CredentialKey),
        ("adobe-client-id", CredentialKey),
        ("sendbird-access-id", CredentialKey),
        ("new-relic-user-api-id", CredentialKey),
        ("microsoft-teams-webhook", CredentialKey),
        ("github-oauth", CredentialKey),
        ("jwt-base64", CredentialKey),
        ("proxy-authorization", CredentialKey),
        ("Proxy Authorization", CredentialKey),
        ("x-api-key", CredentialKey),
        ("X-API-KEY", CredentialKey),
        ("api_key", CredentialKey),
        ("apiKey", CredentialKey),
        ("apikey", CredentialKey),
        ("api.key", CredentialKey),
        ("x-goog-api-key", CredentialKey),
        ("cookie", CredentialKey),
        ("set-cookie", CredentialKey),
        ("Set-Cookie", CredentialKey),
        ("token", CredentialKey),
        ("TOKEN", CredentialKey),
        ("access_token", CredentialKey),
        ("accessToken", CredentialKey),
        ("refresh_token", CredentialKey),
        ("id_token", CredentialKey),
        ("auth_token", CredentialKey),
        ("session_token", CredentialKey),
        ("x-amz-security-token", CredentialKey),
        ("bearer", CredentialKey),
        ("secret", CredentialKey),
        ("client_secret", CredentialKey),
        ("clientSecret", CredentialKey),
        ("password", CredentialKey),
        ("passwd", CredentialKey),
        ("private_key", CredentialKey),
        ("credentials", CredentialKey),
        ("credential", CredentialKey),
        ("signature", CredentialKey),
        ("session_id", CredentialKey),
        ("sessionId", CredentialKey),
        ("auth", CredentialKey),
        ("headers", HeadersKey),
        ("request_headers", HeadersKey),
        ("responseHeaders", HeadersKey),
        ("prompt", ContentKey),
        ("system_prompt", ContentKey),
        ("messages", ContentKey),
        ("content", ContentKey),
        ("input", ContentKey),
        ("arguments", ContentKey),
        ("tool_arguments", ContentKey),
        ("tool_results", ContentKey),
        ("tool_output", ContentKey),
        ("body", RawPayloadKey),
        ("raw_response", RawPayloadKey),
        ("rawRequest", RawPayloadKey),
        ("request_body", RawPayloadKey),
        ("response_body", RawPayloadKey),
        ("payload", RawPayloadKey),
        ("response", RawPayloadKey),
    ]
}

fn allow() -> MetadataAllowlist {
    MetadataAllowlist::new(["openai", "anthropic", "scripted"]).unwrap()
}

fn reject(meta: Value) -> MetadataError {
    let mut v = StreamValidator::new(ValidatorConfig::default(), Limits::default(), allow());
    let raw = RawItem::Completion(RawCompletion {
        finish: FinishReason::Stop,
        usage: None,
        metadata: Some(meta.clone()),
    });
    let direct =
        ProviderMetadata::from_value(&meta).expect_err("direct validation must reject too");
    match v.accept(raw) {
        Err(StreamViolation::Metadata(e)) => {
            assert_eq!(e, direct);
            e
        }
        other => panic!("expected a metadata violation, got {other:?}"),
    }
}

fn assert_not_echoed(secret: &str, shown: &str) {
    assert!(!shown.contains(secret), "echoed: {shown}");
    // Nor any distinctive 10-byte window of it.
    let b = secret.as_bytes();
    for w in b.windows(10) {
        if let Ok(w) = std::str::from_utf8(w)
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars().any(|c| c.is_ascii_alphabetic())
        {
            assert!(!shown.contains(w), "window {w:?} echoed: {shown}");
        }
    }
}

#[test]
fn corpus_is_large_enough() {
    let n = secret_values().len() + secret_keys().len();
    assert!(n >= 40, "{n}");
    assert!(benign_values().len() + benign_keys().len() >= 20);
}

#[test]
fn secret_values_are_rejected_at_every_path() {
    for (secret, rule) in secret_values() {
        assert_eq!(secrets::screen_value(&secret), Some(rule), "{secret:?}");
        let placements = [
            (json!({"openai": {"v": secret}}), "$.openai.v"),
            (json!({"openai": {"a": {"b": secret}}}), "$.openai.a.b"),
            (
                json!({"anthropic": {"list": ["ok", secret]}}),
                "$.anthropic.list[1]",
            ),
            (
                json!({"openai": {"id": "req_1"}, "scripted": {"note": format!("failed with {secret} today")}}),
                "$.scripted.note",
            ),
        ];
        for (meta, path) in placements {
            let e = reject(meta);
            assert_eq!(e.path(), path, "{secret:?}");
            assert!(
                matches!(e.kind(), MetadataErrorKind::SecretValue { .. }),
                "{secret:?}: {e:?}"
            );
            assert_not_echoed(&secret, &format!("{e} {e:?}"));
            let violation = StreamViolation::Metadata(e);
            let failure = violation.clone().into_failure(RetryPosition::Partial);
            assert_not_echoed(&secret, &format!("{violation} {violation:?} {failure:?}"));
        }
    }
}

#[test]
fn secret_keys_are_rejected_at_every_path() {
    for (key, rule) in secret_keys() {
        assert_eq!(secrets::screen_key(key), Some(rule), "{key:?}");
        let plain = key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let seg = if plain {
            format!(".{key}")
        } else {
            "[key#0]".to_owned()
        };
        let placements = [
            (json!({"openai": {key: "x"}}), format!("$.openai{seg}")),
            (
                json!({"openai": {"a": {key: 1}}}),
                format!("$.openai.a{seg}"),
            ),
            (
                json!({"anthropic": {"list": [{key: null}]}}),
                format!("$.anthropic.list[0]{seg}"),
            ),
        ];
        for (meta, path) in placements {
            let e = reject(meta);
            assert_eq!(e.path(), path, "{key:?}");
            assert_eq!(*e.kind(), MetadataErrorKind::SecretKey { rule }, "{key:?}");
        }
    }
    // Valid namespace names are screened too.
    for ns in ["authorization", "headers", "prompt", "raw"] {
        let e = ProviderMetadata::from_value(&json!({ns: {"a": 1}})).unwrap_err();
        assert_eq!(e.path(), format!("$.{ns}"));
        assert!(matches!(e.kind(), MetadataErrorKind::SecretKey { .. }));
    }
    let e = ProviderMetadata::from_value_with(&json!({"secret": {}}), Limits::default_ref())
        .unwrap_err();
    assert!(matches!(e.kind(), MetadataErrorKind::SecretKey { .. }));
}

#[test]
fn secret_shaped_keys_are_rejected_and_not_echoed() {
    for (secret, _) in secret_values() {
        let e = reject(json!({"openai": {"ids": {"z": 1, secret.clone(): 2}}}));
        assert!(e.path().starts_with("$.openai.ids[key#"), "{}", e.path());
        assert!(
            matches!(e.kind(), MetadataErrorKind::SecretKey { .. }),
            "{e:?}"
        );
        assert_not_echoed(&secret, &format!("{e} {e:?}"));
    }
}

fn benign_values() -> Vec<&'static str> {
    vec![
        "sketch",
        "skate",
        "ask-me",
        "ask-me-anything-about-the-weather-today",
        "sk",
        "sk-short",
        "AKIA",
        "AKIA1234",
        "eyJ",
        "eyJhbGciOiJIUzI1NiJ9",
        "0123456789abcdef0123456789abcdef01234567",
        "3f2504e0-4f89-41d3-9a0c-0305e82c3301",
        "req_abc123",
        "req_011CkUijLYU8kjcL5tPQMk7p",
        "chatcmpl-9B3MuxOZVAtIz0B6KG5JHEpwVXpD3",
        "msg_01XFDUDYJgAACzvnptvVoYEL",
        "toolu_01A09q90qw90lq917835lq9",
        "fp_44709d6fcb",
        "gpt-5-mini-2025-08-07",
        "claude-sonnet-4-5-20250929",
        "llama3.1:8b",
        "default",
        "Basic usage",
        "bearer of bad news",
        "missing bearer token",
        "token budget exceeded",
        "https://api.openai.com/v1/chat/completions",
        "https://user@example.com/path",
        "2026-11-30T12:00:17Z",
        "hf_hub",
        "npm_config_cache",
        "ghp",
        "password reset required",
        "-----",
        "ls -u 5",
        "curl -u deploy https://x.example",
        "'model' => 'gpt-5'",
        "<add key=\"model\" value=\"gpt-5\"/>",
        "<model>gpt-5</model>",
        "<password></password>",
        "invalid key: model",
        "s.short",
        "llama3.1:8b at 12:00:17",
        "expected 0123456789abcdef0123456789abcdef|fffffffffffff",
    ]
}

fn benign_keys() -> Vec<&'static str> {
    vec![
        "token_count",
        "tokens",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "tokenizer",
        "prompt_tokens",
        "completion_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "reasoning_tokens",
        "token_type",
        "request_id",
        "x-request-id",
        "system_fingerprint",
        "model",
        "service_tier",
        "stop_reason",
        "openai-processing-ms",
        "anthropic-ratelimit-input-tokens-remaining",
        "region",
        "id",
        "key",
        "cache_key",
        "prompt_cache_key",
        "idempotency-key",
        "partitionKey",
        "monkey",
        "turkey_count",
        "keys_total",
    ]
}

#[test]
fn benign_look_alikes_are_accepted() {
    for value in benign_values() {
        assert_eq!(secrets::screen_value(value), None, "{value:?}");
        let meta = json!({"openai": {"v": value, "nested": {"list": [value]}}});
        ProviderMetadata::from_value(&meta).unwrap_or_else(|e| panic!("{value:?}: {e}"));
        let out = secrets::redact(value);
        assert!(!out.redacted() && out.text() == value, "{value:?}");
    }
    for key in benign_keys() {
        assert_eq!(secrets::screen_key(key), None, "{key:?}");
        assert_eq!(secrets::screen_value(key), None, "{key:?}");
        let meta = json!({"openai": {key: 1, "nested": {key: "x"}}});
        ProviderMetadata::from_value(&meta).unwrap_or_else(|e| panic!("{key:?}: {e}"));
    }
    // All at once, through the validator.
    let mut ns = serde_json::Map::new();
    for (i, v) in benign_values().into_iter().enumerate().take(30) {
        ns.insert(format!("v{i}"), json!(v));
    }
    let mut v = StreamValidator::new(ValidatorConfig::default(), Limits::default(), allow());
    let done = v
        .accept(RawItem::Completion(RawCompletion {
            finish: FinishReason::Stop,
            usage: None,
            metadata: Some(json!({"openai": ns, "anthropic": {"request_id": "req_1"}})),
        }))
        .unwrap();
    let StreamItem::Completion(c) = done else {
        panic!()
    };
    assert_eq!(c.metadata().len(), 2);
}

#[test]
fn problem_messages_are_redacted_not_rejected() {
    for (secret, rule) in secret_values() {
        let message = format!("upstream said: {secret} (request req_1)");
        let p = ProviderProblem::new(ProblemKind::Auth, &message, false);
        assert!(p.redacted(), "{secret:?}");
        assert!(!p.truncated());
        assert_not_echoed(
            core(&secret, rule),
            &format!("{p} {p:?} {}", serde_json::to_string(&p).unwrap()),
        );
        assert!(
            p.message().starts_with("upstream said: "),
            "{}",
            p.message()
        );
        assert!(p.message().contains("[redacted]"));
        assert!(p.message().ends_with(" (request req_1)") || p.message().ends_with("[redacted]"));
    }
}

#[test]
fn problem_message_examples() {
    let key = fake(&["sk-", "proj-", "Zx9Yw8Xv7Wu6Vt5Us4Tr3Sq2"]);
    let p = ProviderProblem::new(
        ProblemKind::Auth,
        &format!(
            "Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."
        ),
        false,
    );
    assert_eq!(
        p.message(),
        "Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."
    );

    let p = ProviderProblem::new(
        ProblemKind::InvalidRequest,
        "request failed: Authorization: Bearer abc.DEF-123_456, retry later",
        false,
    );
    assert_eq!(
        p.message(),
        "request failed: Authorization: [redacted], retry later"
    );

    let p = ProviderProblem::new(ProblemKind::Overloaded, "Overloaded", true);
    assert_eq!(p.message(), "Overloaded");
    assert!(!p.redacted() && !p.truncated());

    let p = ProviderProblem::new(ProblemKind::Other, "", false);
    assert_eq!(p.message(), "");
}

#[test]
fn problem_messages_are_truncated_at_char_boundaries() {
    let limits = Limits {
        problem_message_bytes: 10,
        ..Limits::default()
    };
    // 'é' is two bytes: cutting at 10 would split the 6th 'é'.
    let p = ProviderProblem::new_with(ProblemKind::Other, "aéééééééé", false, &limits);
    assert_eq!(p.message(), "aéééé");
    assert!(p.truncated() && !p.redacted());
    assert!(p.message().len() <= 10);

    // A long message is bounded by the default limit.
    let big = "x".repeat(1 << 20);
    let p = ProviderProblem::new(ProblemKind::Other, &big, false);
    assert_eq!(p.message().len(), Limits::default().problem_message_bytes);
    assert!(p.truncated());

    // A cut that completes an AWS key shape is screened again.
    let limits = Limits {
        problem_message_bytes: 24,
        ..Limits::default()
    };
    let text = fake(&["id: ", "AK", "IA", "ABCDEFGHIJKLMNOPQRST"]);
    assert_eq!(
        secrets::screen_value(&text),
        None,
        "21 characters is not a key"
    );
    let p = ProviderProblem::new_with(ProblemKind::Auth, &text, false, &limits);
    assert_eq!(p.message(), "id: [redacted]");
    assert!(p.truncated() && p.redacted());

    // A redaction marker may itself be cut; nothing else leaks.
    let limits = Limits {
        problem_message_bytes: 12,
        ..Limits::default()
    };
    let text = fake(&["k=", "gh", "p_", "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg7"]);
    let p = ProviderProblem::new_with(ProblemKind::Auth, &text, false, &limits);
    assert_eq!(p.message(), "k=[redacted]");
    let limits = Limits {
        problem_message_bytes: 6,
        ..Limits::default()
    };
    let p = ProviderProblem::new_with(ProblemKind::Auth, &text, false, &limits);
    assert_eq!(p.message(), "k=[red");
    assert!(p.redacted() && p.truncated());
}

#[test]
fn redaction_edge_cases() {
    // Adjacent shapes: whatever one run swallows, nothing survives.
    let text = fake(&[
        "gh",
        "p_",
        "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg7",
        "sk-",
        "Ab3De5Gh7Jk9Mn2Pq4St6Vw8",
    ]);
    let screened = secrets::redact(&text);
    assert!(screened.redacted() && !screened.truncated());
    let out = screened.into_text();
    assert_eq!(secrets::screen_value(&out), None, "{out}");
    assert!(!out.contains("Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1"));

    // A marker cut by truncation is not a new secret; a cut that leaves an
    // assignment's first byte is screened again.
    let text = fake(&["\"api_key\": \"", "sk-[redacted]"]);
    for max in 0..text.len() + 4 {
        let screened = secrets::screen_and_bound(&text, max);
        // Cut exactly when the redacted text does not fit.
        let whole = secrets::redact(&text);
        assert_eq!(screened.truncated(), whole.text().len() > max, "{max}");
        assert!(screened.redacted(), "{max}");
        let out = screened.into_text();
        assert!(out.len() <= max, "{max}: {out:?}");
        assert_eq!(secrets::screen_value(&out), None, "{max}: {out:?}");
    }
}

#[test]
fn raw_problems_keep_kind_flag_and_retry_after() {
    let raw = RawProblem {
        kind: ProblemKind::RateLimited,
        message: fake(&["rate limited for key ", "sk-", "Zx9Yw8Xv7Wu6Vt5Us4Tr3Sq2"]),
        retryable: true,
        retry_after: Some(std::time::Duration::from_secs(17)),
    };
    let p = ProviderProblem::from_raw(raw, Limits::default_ref());
    assert_eq!(p.kind(), ProblemKind::RateLimited);
    assert!(p.retryable());
    assert_eq!(p.retry_after(), Some(std::time::Duration::from_secs(17)));
    assert_eq!(p.message(), "rate limited for key [redacted]");
    assert_eq!(
        serde_json::to_string(&p).unwrap(),
        r#"{"kind":"rate_limited","message":"rate limited for key [redacted]","retryable":true,"retry_after_ms":17000}"#
    );
}

#[test]
fn redaction_keeps_surroundings_and_is_idempotent() {
    let text = fake(&[
        "a ",
        "gh",
        "p_",
        "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg7",
        " b ",
        "https://u",
        ":pw@h.example/x",
        " c password=",
        "hunter22",
        " d",
    ]);
    let screened = secrets::redact(&text);
    assert!(screened.redacted());
    let once = screened.into_text();
    assert_eq!(
        once,
        "a [redacted] b https://[redacted]@h.example/x c password=[redacted] d"
    );
    let again = secrets::redact(&once);
    assert_eq!((again.text(), again.redacted()), (once.as_str(), false));
    assert_eq!(secrets::screen_value(&once), None);
}

mod redaction_props {
    use super::*;
    use proptest::prelude::*;

    /// Text built from fragments that sit near the rules' edges.
    fn fragments() -> impl Strategy<Value = String> {
        let frag = prop_oneof![
            Just("sk-".to_owned()),
            Just("sk-ant-".to_owned()),
            Just(["gh", "p_"].concat()),
            Just("AK".to_owned() + "IA"),
            Just("eyJ".to_owned()),
            Just(".".to_owned()),
            Just("Bearer ".to_owned()),
            Just("basic ".to_owned()),
            Just("password=".to_owned()),
            Just("\"api_key\": \"".to_owned()),
            Just("https://".to_owned()),
            Just("u:p@".to_owned()),
            Just("-----BEGIN ".to_owned()),
            Just("-----END X-----".to_owned()),
            Just("hooks.slack.com/services/".to_owned()),
            Just("[redacted]".to_owned()),
            Just(" ".to_owned()),
            Just("é😀".to_owned()),
            "[A-Za-z0-9_-]{1,40}",
            "[A-Z0-9]{16}",
            ".{0,6}",
        ];
        prop::collection::vec(frag, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

        #[test]
        fn redaction_is_total_clean_and_idempotent(text in fragments(), max in 0usize..80) {
            let screened = secrets::redact(&text);
            let hit = screened.redacted();
            let out = screened.into_text();
            prop_assert_eq!(hit, out != text);
            prop_assert_eq!(secrets::screen_value(&out), None, "{:?} -> {:?}", text, out);
            let again = secrets::redact(&out);
            prop_assert_eq!((again.text(), again.redacted()), (out.as_str(), false));

            let p = ProviderProblem::new_with(
                ProblemKind::Other,
                &text,
                false,
                &Limits { problem_message_bytes: max, ..Limits::default() },
            );
            prop_assert!(p.message().len() <= max);
            prop_assert_eq!(secrets::screen_value(p.message()), None);
            prop_assert_eq!(p.redacted(), secrets::screen_value(&text).is_some() || p.redacted());
        }
    }
}
