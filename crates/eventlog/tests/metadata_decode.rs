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

#[test]
fn a_credential_in_stored_metadata_is_refused_by_path() {
    let secret = ["Bearer ", "abcDEF123456", "ghiJKL789"].concat();
    let line = completed_line(&format!(r#"{{"openai":{{"authorization":"{secret}"}}}}"#));
    let err = Event::decode(&line).unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("metadata.no_secrets"), "{shown}");
    assert!(shown.contains("$.openai"), "names the path: {shown}");
    for text in [shown, format!("{err:?}")] {
        assert!(!text.contains("abcDEF123456"), "echoed the value: {text}");
    }
}

#[test]
fn stored_metadata_keeps_the_namespace_rules() {
    for (row, metadata, rule) in [
        ("not an object", r#"[1]"#, "metadata.object"),
        (
            "namespace not an object",
            r#"{"openai":1}"#,
            "metadata.namespace_object",
        ),
        (
            "bad namespace name",
            r#"{"OpenAI":{}}"#,
            "metadata.namespace_name",
        ),
    ] {
        let err = Event::decode(&completed_line(metadata)).unwrap_err();
        assert!(err.to_string().contains(rule), "row {row}: {err}");
    }
}
