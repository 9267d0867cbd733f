#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel run --continue RUN_ID --message TEXT`: a three-run conversation
//! whose third run starts from every earlier message, text, call and
//! result, in order; `keel runs --conversation` shows the chain; runs that
//! are not completed cannot be continued.

mod common;

use common::{Sandbox, text};
use serde_json::Value;

/// A scenario whose model calls `get_weather` for `city`, then answers.
fn weather_scenario(run_id: &str, city: &str, answer: &str) -> String {
    serde_json::json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "unused when continuing"}],
        "tools": [{
            "name": "get_weather", "description": "weather", "parameters": {"type": "object"},
            "script": [{"ok": {"city": city, "temp_c": 3}}]
        }],
        "provider": {"type": "scripted", "calls": [
            [{"tool_call": {"call_id": format!("{run_id}_c1"), "name": "get_weather", "arguments": {"city": city}}},
             {"complete": {"finish": "tool_calls"}}],
            [{"text": answer}, {"complete": {"finish": "stop"}}]
        ]}
    })
    .to_string()
}

fn inputs(sb: &Sandbox, run_id: &str) -> Vec<Value> {
    sb.ok(&["events", run_id])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "run.input")
        .map(|e| e["payload"]["message"].clone())
        .collect()
}

#[test]
fn a_three_run_conversation_continues_from_the_log() {
    let sb = Sandbox::new();
    let first = sb.write(
        "one.json",
        &weather_scenario("conv_1", "Oslo", "Oslo: 3 °C."),
    );
    let out = sb.run(&first, &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    for (n, city, question) in [(2, "Bergen", "And Bergen?"), (3, "Tromsø", "And Tromsø?")] {
        let file = sb.write(
            &format!("{n}.json"),
            &weather_scenario(&format!("conv_{n}"), city, &format!("{city}: 3 °C.")),
        );
        let previous = format!("conv_{}", n - 1);
        let out = sb.run(&file, &["--continue", &previous, "--message", question]);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    }
    let third = inputs(&sb, "conv_3");
    let shape: Vec<(String, String)> = third
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap().to_owned();
            let part = &m["parts"][0];
            let what = part["text"]
                .as_str()
                .or(part["content"].as_str())
                .or(part["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            (role, what)
        })
        .collect();
    let expected: Vec<(&str, &str)> = vec![
        ("user", "unused when continuing"),
        ("assistant", "get_weather"),
        ("tool", r#"{"city":"Oslo","temp_c":3}"#),
        ("assistant", "Oslo: 3 °C."),
        ("user", "And Bergen?"),
        ("assistant", "get_weather"),
        ("tool", r#"{"city":"Bergen","temp_c":3}"#),
        ("assistant", "Bergen: 3 °C."),
        ("user", "And Tromsø?"),
    ];
    let got: Vec<(&str, &str)> = shape
        .iter()
        .map(|(r, w)| (r.as_str(), w.as_str()))
        .collect();
    assert_eq!(got, expected);
    let ids: std::collections::HashSet<&str> =
        third.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), third.len(), "message ids repeat: {ids:?}");
    let chain = sb.ok(&["runs", "--conversation", "conv_2"]);
    let order: Vec<&str> = chain
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(order, ["conv_1", "conv_2", "conv_3"], "{chain}");
    assert!(chain.contains("continues conv_2"), "{chain}");
    let verify = sb.ok(&["verify"]);
    assert!(
        verify.contains("3 ok, 0 incomplete, 0 violations"),
        "{verify}"
    );
}

#[test]
fn only_a_completed_run_can_be_continued() {
    let sb = Sandbox::new();
    let failing = serde_json::json!({
        "run_id": "conv_bad",
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "hi"}],
        "limits": {"retry": {"max_attempts": 1}},
        "provider": {"type": "scripted", "calls": [
            [{"fail": {"kind": "auth", "message": "no", "retryable": false}}]
        ]}
    });
    let file = sb.write("bad.json", &failing.to_string());
    assert_eq!(sb.run(&file, &[]).status.code(), Some(1));
    let next = sb.write("next.json", &weather_scenario("conv_next", "Oslo", "ok"));
    for (previous, needle) in [
        ("conv_bad", "rule run.continuable"),
        ("conv_missing", "rule run.known"),
    ] {
        let out = sb.run(&next, &["--continue", previous, "--message", "again"]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
    let out = sb.run(&next, &["--continue", "conv_bad"]);
    assert_eq!(out.status.code(), Some(2), "--continue needs --message");
}
