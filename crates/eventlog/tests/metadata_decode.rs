//! A stored `model.completed` carries the live metadata invariants:
//! decoding screens and bounds it exactly as the stream validator does,
//! names the path of a refusal and never the value, and valid metadata
//! round-trips byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use keel_eventlog::*;
use keel_stream::ProviderMetadata;
use serde_json::json;

/// A completion line whose metadata is `metadata`, written by hand (as a
/// tampered export would be), canonical JSON.
fn completed_line(metadata: &str) -> String {
    let head = r#"{"kind":"model.completed","payload":{"finish":"stop","metadata":"#;
    format!(
        r#"{head}{metadata},"operation_id":"op_1","turn":1}},"run_id":"run_1","seq":4,"ts":1}}"#
    )
}

#[test]
fn valid_metadata_round_trips_byte_for_byte() {
    let metadata = ProviderMetadata::from_value(&json!({
        "anthropic": {"request_id": "req_011CNvz5"},
        "openai": {"system_fingerprint": "fp_44709d6fcb"}
    }))
    .unwrap();
    let Payload::ModelCompleted(mut done) = model_completed(1, "op_1") else {
        unreachable!()
    };
    done.metadata = Some(metadata.clone());
    let line = line_of(&Payload::ModelCompleted(done), 4, 1);
    assert!(
        line.contains(r#""metadata":{"anthropic":{"request_id":"req_011CNvz5"},"openai":{"system_fingerprint":"fp_44709d6fcb"}}"#),
        "{line}"
    );
    let event = Event::decode(&line).unwrap();
    assert_eq!(event.line(), line);
    let Payload::ModelCompleted(decoded) = event.payload().unwrap() else {
        panic!("not a completion")
    };
    assert_eq!(decoded.metadata, Some(metadata));
}

/// Builds a string from parts, so that no complete secret-shaped literal
/// sits in the source (secret scanners read test files too).
fn fake(parts: &[&str]) -> String {
    parts.concat()
}

/// Decodes a completion holding `metadata` and returns the typed metadata
/// refusal, after checking that neither its `Display` nor its `Debug` (nor
/// those of the decode error around it) holds `hidden`.
fn refusal(metadata: &str, hidden: &str) -> keel_stream::MetadataError {
    let err = Event::decode(&completed_line(metadata)).unwrap_err();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(hidden), "echoed {hidden:?}: {text}");
    }
    match err {
        EventDecodeError::Payload(PayloadError::Metadata(e)) => e,
        other => panic!("not a metadata refusal: {other:?}"),
    }
}

#[test]
fn a_credential_in_stored_metadata_is_refused_by_path() {
    let token = fake(&["abcDEF123456", "ghiJKL789"]);
    let bearer = fake(&["Bearer ", &token]);
    // A credential member name, then a credential value under a plain name.
    for (metadata, path) in [
        (
            format!(r#"{{"openai":{{"authorization":"{bearer}"}}}}"#),
            "$.openai.authorization",
        ),
        (
            format!(r#"{{"openai":{{"request_id":"{bearer}"}}}}"#),
            "$.openai.request_id",
        ),
    ] {
        let err = refusal(&metadata, &token);
        assert_eq!(err.path(), path);
        let shown = PayloadError::Metadata(err).to_string();
        assert!(
            shown.starts_with(&format!("model.completed metadata {path}: ")),
            "{shown}"
        );
        assert!(shown.ends_with("(rule metadata.no_secrets)"), "{shown}");
    }
}

#[test]
fn a_secret_shaped_member_name_is_named_by_position() {
    let key = fake(&["sk-", "proj-", "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg7"]);
    let metadata = format!(r#"{{"openai":{{"{key}":1,"model":"m"}}}}"#);
    let err = refusal(&metadata, "Ab3De5Gh7Jk9");
    // Members sort: `model` is #0, the key #1.
    assert_eq!(err.path(), "$.openai[key#1]");
    assert!(matches!(
        err.kind(),
        keel_stream::MetadataErrorKind::SecretKey { .. }
    ));
}

#[test]
fn stored_metadata_keeps_the_namespace_rules_and_bounds() {
    let big = "x".repeat(5000);
    for (row, metadata, path, rule) in [
        (
            "not an object",
            r#"[1]"#.to_owned(),
            "$",
            "rule metadata.object",
        ),
        (
            "namespace not an object",
            r#"{"openai":1}"#.to_owned(),
            "$.openai",
            "rule metadata.namespace_object",
        ),
        (
            "bad namespace name",
            r#"{"OpenAI":{}}"#.to_owned(),
            "$.OpenAI",
            "rule metadata.namespace_name",
        ),
        (
            "over metadata_bytes",
            format!(r#"{{"openai":{{"note":"{big}"}}}}"#),
            "$",
            "limits.metadata_bytes",
        ),
    ] {
        let err = refusal(&metadata, "xxxxxxxx");
        assert_eq!(err.path(), path, "row {row}");
        let shown = err.to_string();
        assert!(shown.contains(rule), "row {row}: {shown}");
    }
}

#[test]
fn a_null_metadata_is_not_canonical() {
    // `null` decodes as absent; the line then re-encodes without it.
    let err = Event::decode(&completed_line("null")).unwrap_err();
    assert!(
        matches!(err, EventDecodeError::NotCanonical { .. }),
        "{err:?}"
    );
}
