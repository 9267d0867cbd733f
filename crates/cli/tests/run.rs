#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel run`: the examples, exit codes, transcript, `--json`, approvals
//! and built-in tools.

mod common;

use common::{Sandbox, example, keel, kind, text};

#[test]
fn plain_answer_completes_with_exit_0_and_a_transcript() {
    let sb = Sandbox::new();
    let out = sb.run(&example("plain_answer.json"), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("user › In one sentence"), "{stdout}");
    assert!(
        stdout.contains("One ordered, gap-free log of canonical JSON events"),
        "{stdout}"
    );
    assert!(stdout.contains("✓ completed in"), "{stdout}");
    assert!(stdout.contains("tokens 31 in / 29 out"), "{stdout}");
    // No spinner and no colour when not on a terminal.
    assert!(!stdout.contains('\x1b') && !stderr.contains('\x1b'));
    let runs = sb.ok(&["runs"]);
    assert!(runs.contains("completed"), "{runs}");
}

#[test]
fn weather_example_shows_tool_calls_results_and_the_retry() {
    let sb = Sandbox::new();
    let out = sb.run(&example("weather_tools.json"), &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for needle in [
        r#"→ get_weather {"city":"Oslo"}"#,
        r#"→ get_weather {"city":"Bergen"}"#,
        r#"← get_weather (c1) {"city":"Oslo","sky":"overcast","temp_c":3}"#,
        "✗ model call failed: busy, try again (overloaded, pristine, retryable)",
        "↻ retrying the model call (attempt 2)",
        r#"→ calculator {"expression":"7 - 3"}"#,
        "← 4",
        "Bergen is 4 °C warmer than Oslo today",
        "✓ completed",
        "3 turns · 4 model calls (1 retry) · 3 tool calls · tokens 275 in / 69 out",
        "/keel events run_",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
}

#[test]
fn run_json_equals_keel_events_byte_for_byte() {
    let sb = Sandbox::new();
    for (i, name) in [
        "weather_tools.json",
        "failures.json",
        "partial_failure.json",
    ]
    .into_iter()
    .enumerate()
    {
        let out = sb.run(&example(name), &["--json"]);
        let (stdout, stderr) = text(&out);
        let expected = if name == "partial_failure.json" { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(expected), "{name}: {stderr}");
        // Nothing but canonical lines on stdout.
        let first: serde_json::Value =
            serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
        let run_id = first["run_id"].as_str().unwrap().to_owned();
        let events = sb.ok(&["events", &run_id]);
        assert_eq!(stdout.as_bytes(), events.as_bytes(), "{name}");
        assert_eq!(sb.run_ids().len(), i + 1);
        for line in stdout.lines() {
            let event = keel_eventlog::Event::decode(line).unwrap();
            assert_eq!(event.line(), line);
        }
    }
}

#[test]
fn failures_example_records_retries_and_uncertain_tool_failures() {
    let sb = Sandbox::new();
    let out = sb.run(&example("failures.json"), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let lines: Vec<String> = text(&out).0.lines().map(str::to_owned).collect();
    let failed: Vec<&String> = lines.iter().filter(|l| kind(l) == "model.failed").collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed[0].contains(r#""position":"pristine""#),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].contains(r#""position":"partial""#),
        "{}",
        failed[1]
    );
    let tool_failed: Vec<&String> = lines.iter().filter(|l| kind(l) == "tool.failed").collect();
    assert_eq!(tool_failed.len(), 2);
    for line in tool_failed {
        assert!(line.contains(r#""outcome":"uncertain""#), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("timed out after 300 ms")));
    assert_eq!(kind(lines.last().unwrap()), "run.completed");
}

#[test]
fn partial_failure_is_not_retried_and_exits_1() {
    let sb = Sandbox::new();
    let out = sb.run(&example("partial_failure.json"), &[]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("(unavailable, partial, retryable)"),
        "{stdout}"
    );
    assert!(stdout.contains("✗ run failed"), "{stdout}");
    assert!(!stdout.contains("never sent"), "{stdout}");
    assert!(sb.ok(&["runs"]).contains("failed"));
}

#[test]
fn builtins_with_files_and_approve_all() {
    let sb = Sandbox::new();
    let files = example("");
    let out = sb.run(
        &example("builtins.json"),
        &[
            "--files",
            files.to_str().unwrap(),
            "--approve",
            "all",
            "--json",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let completed: Vec<&str> = stdout
        .lines()
        .filter(|l| kind(l) == "tool.completed")
        .collect();
    // clock (an RFC 3339 UTC time), calculator (29), read_file (the file).
    assert_eq!(completed.len(), 3, "{stdout}");
    let clock: serde_json::Value = serde_json::from_str(completed[0]).unwrap();
    let now = clock["payload"]["output"].as_str().unwrap();
    assert_eq!(now.len(), 20, "{now}");
    assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    assert!(
        completed[1].contains(r#""output":"29""#),
        "{}",
        completed[1]
    );
    assert!(completed[2].contains("scripted-1"), "{}", completed[2]);
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| kind(l) == "tool.failed")
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(failed[0].contains("division by zero"));
    assert!(failed[0].contains(r#""outcome":"definitive""#));
    assert!(failed[1].contains("`..` is refused"));
    let approvals: Vec<&str> = stdout
        .lines()
        .filter(|l| kind(l) == "interaction.completed")
        .collect();
    assert_eq!(approvals.len(), 2);
    assert!(
        approvals
            .iter()
            .all(|l| l.contains(r#""decision":"approved""#))
    );
}

#[test]
fn approve_none_denies_and_ask_without_a_terminal_denies_with_a_note() {
    let sb = Sandbox::new();
    let files = example("");
    for (mode, note) in [("none", false), ("ask", true)] {
        let out = keel()
            .arg("run")
            .arg(example("builtins.json"))
            .args(sb.db_args())
            .args([
                "--files",
                files.to_str().unwrap(),
                "--json",
                "--approve",
                mode,
            ])
            .write_stdin("y\ny\n") // not a terminal: never read
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let decisions: Vec<&str> = stdout
            .lines()
            .filter(|l| kind(l) == "interaction.completed")
            .collect();
        assert_eq!(decisions.len(), 2, "{stdout}");
        assert!(
            decisions
                .iter()
                .all(|l| l.contains(r#""decision":"denied""#))
        );
        // A denied call never starts: only clock and calculator ran.
        let read_file_started = stdout
            .lines()
            .filter(|l| kind(l) == "tool.started" && l.contains("read_file"))
            .count();
        assert_eq!(read_file_started, 0);
        assert_eq!(stderr.contains("stdin is not a terminal"), note, "{stderr}");
    }
}

#[test]
fn default_approval_is_ask() {
    let sb = Sandbox::new();
    let files = example("");
    let out = sb.run(
        &example("builtins.json"),
        &["--files", files.to_str().unwrap()],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("read_file is denied"), "{stderr}");
    assert!(stdout.contains("✗ denied"), "{stdout}");
}

#[test]
fn read_file_without_files_is_exit_2_naming_the_tool() {
    let sb = Sandbox::new();
    let out = sb.run(&example("builtins.json"), &["--approve", "all"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("builtins.json: at tools[2]"), "{stderr}");
    assert!(stderr.contains("--files"), "{stderr}");
    assert!(!sb.db().exists(), "nothing is written on bad input");
}

#[test]
fn a_call_to_an_unknown_tool_is_a_tool_failure_not_a_loader_error() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "unknown_tool.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [
              [{"tool_call": {"call_id": "c1", "name": "no_such_tool", "arguments": {}}},
               {"complete": {"finish": "tool_calls"}}],
              [{"text": "ok"}, {"complete": {"finish": "stop"}}]]}}"#,
    );
    let out = sb.run(&scenario, &["--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| kind(l) == "tool.failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].contains("unknown tool no_such_tool"),
        "{}",
        failed[0]
    );
}

#[test]
fn a_malformed_stream_is_a_protocol_failure_and_exit_1() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "bad_stream.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [
              [{"text": "a"}, {"complete": {"finish": "stop"}}, {"text": "after the end"}]]}}"#,
    );
    let out = sb.run(&scenario, &["--json"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(r#""kind":"protocol""#), "{stdout}");
}

#[test]
fn tool_failure_that_ends_the_run_is_exit_1_and_exhausted_script_is_a_failure() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "end_run.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "tools": [{"name": "deploy", "script": [], "on_failure": "end_run"}],
            "provider": {"type": "scripted", "calls": [
              [{"tool_call": {"call_id": "c1", "name": "deploy", "arguments": {}}},
               {"complete": {"finish": "tool_calls"}}]]}}"#,
    );
    let out = sb.run(&scenario, &[]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("✗ deploy failed: script exhausted"),
        "{stdout}"
    );
    assert!(
        stdout.contains("✗ run failed: tool deploy (call c1) failed"),
        "{stdout}"
    );
}

#[test]
fn max_turns_limit_fails_the_run() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "loop.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "limits": {"max_turns": 1},
            "tools": [{"builtin": "clock"}],
            "provider": {"type": "scripted", "calls": [
              [{"tool_call": {"call_id": "c1", "name": "clock", "arguments": {}}},
               {"complete": {"finish": "tool_calls"}}]]}}"#,
    );
    let out = sb.run(&scenario, &[]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("limits.max_turns"), "{stdout}");
}

#[test]
fn keel_db_env_is_the_default_database_and_run_id_is_kept() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "named.json",
        r#"{"run_id": "run_named_1", "model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [[{"text": "hello"}, {"complete": {"finish": "stop"}}]]}}"#,
    );
    let out = keel()
        .arg("run")
        .arg(&scenario)
        .env("KEEL_DB", sb.db())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert_eq!(sb.run_ids(), ["run_named_1"]);
    // The same run id again is refused before anything is written.
    let again = sb.run(&scenario, &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again).1.contains("run_named_1 is already stored"),
        "{}",
        text(&again).1
    );
}
