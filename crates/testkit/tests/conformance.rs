//! The conformance suite checked against itself: the scripted provider
//! reproduces fixture expectations, and wrong expectations or misbehaving
//! streams are reported, naming the first mismatch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use keel_stream::{FinishReason, MetadataAllowlist, ProblemKind, RetryPosition};
use keel_testkit::conformance::*;
use keel_testkit::*;
use serde_json::json;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers")
}

fn fixture(folder: &str, case: &str) -> Fixture {
    Fixture::load(&fixtures().join(folder).join(format!("{case}.json"))).unwrap()
}

#[test]
fn every_fixture_expectation_loads() {
    let mut total = 0;
    for folder in ["openai-chat", "anthropic-messages"] {
        let all = Fixture::load_dir(&fixtures().join(folder)).unwrap();
        assert!(all.len() >= 10, "{folder}: {}", all.len());
        for f in &all {
            // The schema's rules: usage is null whenever problem is set,
            // and finish is null exactly when it is.
            if f.expect.problem.is_some() {
                assert_eq!(
                    (f.expect.usage, f.expect.finish.clone()),
                    (None, None),
                    "{}",
                    f.name
                );
            } else {
                assert!(f.expect.finish.is_some(), "{}", f.name);
            }
            assert!(!f.description.is_empty());
            assert!(f.headers.contains_key("content-type"), "{}", f.name);
            // Only the expectations are copied here, not the bodies.
            assert!(f.body.is_none());
        }
        let names: Vec<&str> = all.iter().map(|f| f.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        total += all.len();
    }
    assert_eq!(total, 22);
}

#[test]
fn the_loader_is_strict() {
    let good = r#"{"status": 200, "headers": {}, "description": "d",
        "expect": {"text": "", "tool_calls": [], "finish": "stop", "usage": null, "problem": null}}"#;
    Fixture::from_json("x", good).unwrap();
    for bad in [
        good.replace(r#""finish": "stop""#, r#""finish": "done""#),
        good.replace(r#""finish": "stop", "#, ""),
        good.replace(r#""problem": null"#, r#""problem": null, "notes": 1"#),
        good.replace(r#""usage": null, "#, ""),
        good.replace(r#""status": 200"#, r#""status": "200""#),
        good.replace(
            r#""problem": null"#,
            r#""problem": {"kind": "overloaded", "retryable": true}"#,
        ),
    ] {
        assert!(Fixture::from_json("x", &bad).is_err(), "{bad}");
    }
    let dir = std::env::temp_dir().join(format!("keel-testkit-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("case.json"), good).unwrap();
    std::fs::write(dir.join("case.sse"), "data: [DONE]\n\n").unwrap();
    std::fs::write(dir.join("broken.json"), "{").unwrap();
    let loaded = Fixture::load(&dir.join("case.json")).unwrap();
    assert_eq!(loaded.body.as_deref(), Some("data: [DONE]\n\n"));
    assert!(matches!(
        Fixture::load_dir(&dir),
        Err(FixtureError::Json { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn scripted_streams_reproduce_fixture_expectations() {
    let cases: Vec<(&str, &str, Vec<ScriptItem>)> = vec![
        (
            "openai-chat",
            "single_tool_call",
            vec![
                ScriptItem::tool_call(
                    "call_ZH8e83LTEx2h46YuQar48LNU",
                    "search_notes",
                    // Same JSON, other member order: arguments compare as JSON.
                    json!({"limit": 5, "query": "Bjørn's \"Q3 plan\""}),
                ),
                ScriptItem::complete_with_usage(FinishReason::ToolCalls, 88, 24),
            ],
        ),
        (
            "openai-chat",
            "parallel_tool_calls",
            vec![
                ScriptItem::tool_call_raw(
                    "call_0ucQv4ELcxCUpS3AiPkPnOO7",
                    "get_weather",
                    r#"{"city": "Oslo", "unit": "celsius"}"#,
                ),
                ScriptItem::tool_call(
                    "call_YJlFpqYBedVFjJrCURrp2OiG",
                    "get_weather",
                    json!({"city": "São Paulo", "unit": "celsius"}),
                ),
                ScriptItem::complete_with_usage(FinishReason::ToolCalls, 131, 52),
            ],
        ),
        (
            "openai-chat",
            "content_filter",
            vec![
                ScriptItem::text("Here is a "),
                ScriptItem::text("summary of the"),
                ScriptItem::complete_with_usage(FinishReason::ContentFilter, 41, 3),
            ],
        ),
        (
            "anthropic-messages",
            "overloaded_midstream",
            vec![
                ScriptItem::text("Photosynthesis "),
                ScriptItem::DelayMs(5),
                ScriptItem::text("converts light "),
                ScriptItem::text("into chemical"),
                ScriptItem::fail(ProblemKind::Overloaded, "Overloaded", true),
            ],
        ),
        (
            "anthropic-messages",
            "disconnect_mid_stream",
            vec![
                ScriptItem::text("Let me run the tests."),
                // What a correct adapter reports for a body cut before
                // message_stop.
                ScriptItem::fail(ProblemKind::Unavailable, "stream ended early", true),
            ],
        ),
    ];
    for (folder, case, script) in cases {
        let expect = fixture(folder, case).expect;
        let provider = ScriptedProvider::new(vec![script]);
        check_stream(&provider, request(1), &expect)
            .await
            .unwrap_or_else(|e| panic!("{folder}/{case}: {e}"));
    }
}

#[tokio::test]
async fn start_failures_count_as_pristine_problems() {
    let expect = fixture("anthropic-messages", "auth_401").expect;
    let provider = ScriptedProvider::new(vec![vec![ScriptItem::fail(
        ProblemKind::Auth,
        "invalid x-api-key",
        false,
    )]])
    .with_start_failures();
    check_stream(&provider, request(1), &expect).await.unwrap();
    // Script exhausted: a start failure of kind `other`.
    let failure = check_stream(&provider, request(2), &expect)
        .await
        .unwrap_err();
    assert_eq!(
        failure,
        ConformanceFailure::Mismatch {
            field: "problem.kind".into(),
            expected: "auth".into(),
            actual: "other (script exhausted)".into(),
        }
    );
}

#[tokio::test]
async fn a_wrong_expectation_is_reported_at_its_first_mismatch() {
    let mut expect = fixture("openai-chat", "single_tool_call").expect;
    let script = vec![
        ScriptItem::tool_call(
            "call_ZH8e83LTEx2h46YuQar48LNU",
            "search_notes",
            json!({"query": "Bjørn's \"Q3 plan\"", "limit": 5}),
        ),
        ScriptItem::complete_with_usage(FinishReason::ToolCalls, 88, 24),
    ];
    let run = |expect: Expectation| {
        let provider = ScriptedProvider::new(vec![script.clone()]);
        async move { check_stream(&provider, request(1), &expect).await }
    };
    assert_eq!(run(expect.clone()).await, Ok(()));

    // Deliberately wrong: the second argument differs, and so does usage;
    // the arguments come first.
    expect.tool_calls[0].arguments = json!({"query": "Bjørn's \"Q3 plan\"", "limit": 6});
    expect.usage = Some(ExpectedUsage {
        input_tokens: 1,
        output_tokens: 1,
    });
    let failure = run(expect.clone()).await.unwrap_err();
    assert_eq!(
        failure,
        ConformanceFailure::Mismatch {
            field: "tool_calls[0].arguments".into(),
            expected: r#"{"limit":6,"query":"Bjørn's \"Q3 plan\""}"#.into(),
            actual: r#"{"limit":5,"query":"Bjørn's \"Q3 plan\""}"#.into(),
        }
    );
    expect.tool_calls[0].arguments = json!({"limit": 5, "query": "Bjørn's \"Q3 plan\""});
    let failure = run(expect.clone()).await.unwrap_err();
    assert_eq!(
        failure.to_string(),
        "usage: expected {input_tokens: 1, output_tokens: 1}, got {input_tokens: 88, output_tokens: 24}"
    );

    // Each other field in turn.
    let base = fixture("openai-chat", "single_tool_call").expect;
    type Mutation = Box<dyn Fn(&mut Expectation)>;
    let mutations: Vec<(&str, Mutation)> = vec![
        ("text", Box::new(|e| e.text = "x".into())),
        ("tool_calls.len", Box::new(|e| e.tool_calls.clear())),
        (
            "tool_calls[0].call_id",
            Box::new(|e| e.tool_calls[0].call_id = "call_other".into()),
        ),
        (
            "tool_calls[0].name",
            Box::new(|e| e.tool_calls[0].name = "other".into()),
        ),
        ("finish", Box::new(|e| e.finish = Some(FinishReason::Stop))),
        ("usage", Box::new(|e| e.usage = None)),
        (
            "problem",
            Box::new(|e| {
                e.problem = Some(ExpectedProblem {
                    kind: ProblemKind::Overloaded,
                    retryable: true,
                    position: RetryPosition::Partial,
                })
            }),
        ),
    ];
    for (field, mutate) in mutations {
        let mut expect = base.clone();
        mutate(&mut expect);
        let Err(ConformanceFailure::Mismatch { field: got, .. }) = run(expect).await else {
            panic!("{field}: no mismatch")
        };
        assert_eq!(got, field);
    }
}

#[tokio::test]
async fn a_bare_disconnect_is_not_what_an_adapter_must_report() {
    // A raw stream that just ends is a protocol failure at the host; a
    // correct adapter reports `unavailable` itself (see the fixture).
    let expect = fixture("anthropic-messages", "disconnect_mid_stream").expect;
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("Let me run the tests."),
        ScriptItem::disconnect(),
    ]]);
    let failure = check_stream(&provider, request(1), &expect)
        .await
        .unwrap_err();
    let ConformanceFailure::Mismatch {
        field,
        expected,
        actual,
    } = failure
    else {
        panic!("{failure}")
    };
    assert_eq!(
        (field.as_str(), expected.as_str()),
        ("problem.kind", "unavailable")
    );
    assert!(actual.starts_with("protocol"), "{actual}");
}

#[tokio::test]
async fn a_wrong_position_or_retryable_flag_is_named() {
    let provider = ScriptedProvider::new(vec![
        vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", true)],
        vec![ScriptItem::fail(ProblemKind::Overloaded, "busy", false)],
    ]);
    let mut expect = fixture("anthropic-messages", "overloaded_midstream").expect;
    expect.text = String::new();
    let failure = check_stream(&provider, request(1), &expect)
        .await
        .unwrap_err();
    assert_eq!(
        failure.to_string(),
        "problem.position: expected partial, got pristine"
    );
    expect.problem = Some(ExpectedProblem {
        kind: ProblemKind::Overloaded,
        retryable: true,
        position: RetryPosition::Pristine,
    });
    let failure = check_stream(&provider, request(2), &expect)
        .await
        .unwrap_err();
    assert_eq!(
        failure.to_string(),
        "problem.retryable: expected true, got false"
    );
}

#[tokio::test]
async fn nothing_may_follow_the_terminal() {
    let expect = fixture("openai-chat", "content_filter").expect;
    let provider = ScriptedProvider::new(vec![vec![
        ScriptItem::text("Here is a summary of the"),
        ScriptItem::complete_with_usage(FinishReason::ContentFilter, 41, 3),
        ScriptItem::text("leaked"),
    ]]);
    let failure = check_stream(&provider, request(1), &expect)
        .await
        .unwrap_err();
    assert_eq!(
        failure,
        ConformanceFailure::ItemAfterTerminal { item: "text" }
    );
}

#[tokio::test]
async fn observe_reports_everything_the_host_saw() {
    let provider = ScriptedProvider::from_json(
        r#"[[{"text": "a"}, {"tool_call": {"call_id": "c1", "name": "f", "arguments": {"x": 1}}},
             {"complete": {"finish": "tool_calls", "metadata": {"openai": {"system_fingerprint": "fp_1"}, "other": {"y": 2}}}}]]"#,
    )
    .unwrap();
    let options =
        CheckOptions::default().with_allowlist(MetadataAllowlist::new(["openai"]).unwrap());
    let seen = observe(&provider, request(1), &options).await;
    assert_eq!(seen.items.len(), 3);
    assert_eq!(seen.text, "a");
    assert_eq!(seen.tool_calls[0].arguments().as_str(), r#"{"x":1}"#);
    assert_eq!(seen.finish(), Some(FinishReason::ToolCalls));
    assert_eq!(seen.usage(), None);
    assert_eq!(
        seen.completion.unwrap().metadata().to_canonical_string(),
        r#"{"openai":{"system_fingerprint":"fp_1"}}"#
    );
    assert_eq!((seen.failure, seen.after_terminal), (None, None));
}

#[tokio::test(start_paused = true)]
async fn dropping_mid_stream_is_checked() {
    let provider = ScriptedProvider::new(vec![
        vec![
            ScriptItem::text("a"),
            ScriptItem::text("b"),
            ScriptItem::DelayMs(60_000),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![
            ScriptItem::text("a"),
            ScriptItem::complete(FinishReason::Stop),
        ],
        vec![ScriptItem::text("a")],
    ]);
    let handle = provider.handle();
    assert_eq!(check_drop_mid_stream(&provider, request(1), 2).await, Ok(2));
    assert_eq!(handle.dropped(), 1);
    assert_eq!(
        check_drop_mid_stream(&provider, request(2), 3).await,
        Err(ConformanceFailure::EndedBeforeDrop { read: 2 })
    );
    assert_eq!(
        check_drop_mid_stream(&provider, request(3), 3).await,
        Err(ConformanceFailure::EndedBeforeDrop { read: 1 })
    );
    // Exhausted: it does not even start.
    assert_eq!(
        check_drop_mid_stream(&provider, request(4), 1).await,
        Err(ConformanceFailure::EndedBeforeDrop { read: 0 })
    );
}
