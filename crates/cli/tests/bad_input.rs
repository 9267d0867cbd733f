#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad input: exit 2 with a message naming the file and the line and
//! column, the JSON path, or the database.

mod common;

use common::{Sandbox, example, keel, text};

fn refused(sb: &Sandbox, scenario: &std::path::Path) -> String {
    let out = sb.run(scenario, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with("keel: "), "{stderr}");
    stderr
}

#[test]
fn missing_scenario_names_the_file() {
    let sb = Sandbox::new();
    let missing = sb.path("nope.json");
    let stderr = refused(&sb, &missing);
    assert!(stderr.contains("nope.json"), "{stderr}");
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert!(!sb.db().exists());
}

#[test]
fn malformed_json_names_line_and_column() {
    let sb = Sandbox::new();
    let file = sb.write(
        "broken.json",
        "{\n  \"model\": \"m\",\n  \"messages\": [}\n}\n",
    );
    let stderr = refused(&sb, &file);
    assert!(stderr.contains("broken.json:3:"), "{stderr}");
    assert!(stderr.contains("invalid JSON"), "{stderr}");
}

#[test]
fn unknown_member_names_the_json_path() {
    let sb = Sandbox::new();
    let file = sb.write(
        "unknown.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
  "provider": {"type": "scripted", "calls": [
    [{"text": "a"}, {"complete": {"finish": "stop", "usage": {"input_tokens": 1, "output_tokenz": 2}}}]]}}"#,
    );
    let stderr = refused(&sb, &file);
    assert!(stderr.contains("unknown.json:3:"), "{stderr}");
    assert!(
        stderr.contains("at provider.calls[0][1].complete.usage"),
        "{stderr}"
    );
    assert!(stderr.contains("output_tokenz"), "{stderr}");

    for (text, path) in [
        (r#"{"model": "m", "mesages": []}"#, "mesages"),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi", "name": "x"}], "provider": {"type": "scripted", "calls": []}}"#,
            "at messages[0]",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "limits": {"max_turn": 3}, "provider": {"type": "scripted", "calls": []}}"#,
            "at limits",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "provider": {"type": "scripted", "calls": [], "seed": 1}}"#,
            "at provider",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "tools": [{"name": "t", "script": [], "approval": true}], "provider": {"type": "scripted", "calls": []}}"#,
            "at tools[0]",
        ),
    ] {
        let file = sb.write("u.json", text);
        let stderr = refused(&sb, &file);
        assert!(stderr.contains(path), "{path}: {stderr}");
        assert!(stderr.contains("u.json"), "{stderr}");
    }
}

#[test]
fn malformed_tool_script_is_refused_with_its_path() {
    let sb = Sandbox::new();
    let file = sb.write(
        "script.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
  "tools": [{"name": "t", "script": [{"ok": 1}, {"ok": 2, "error": {"message": "x"}}]}],
  "provider": {"type": "scripted", "calls": []}}"#,
    );
    let stderr = refused(&sb, &file);
    assert!(stderr.contains("at tools[0].script[1]"), "{stderr}");
    assert!(stderr.contains("only one of"), "{stderr}");
    let file = sb.write(
        "script2.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
  "tools": [{"name": "t", "script": [{"error": {"message": "x", "outcome": "maybe"}}]}],
  "provider": {"type": "scripted", "calls": []}}"#,
    );
    let stderr = refused(&sb, &file);
    assert!(
        stderr.contains("at tools[0].script[0].error.outcome"),
        "{stderr}"
    );
}

#[test]
fn rule_violations_name_the_json_path() {
    let sb = Sandbox::new();
    for (text, path) in [
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "limits": {"max_turns": 0}, "provider": {"type": "scripted", "calls": []}}"#,
            "at limits.max_turns",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "allow_metadata": ["ok", "Bad Name"], "provider": {"type": "scripted", "calls": []}}"#,
            "at allow_metadata[1]",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "tools": [{"name": "bad name", "script": []}], "provider": {"type": "scripted", "calls": []}}"#,
            "at tools[0].name",
        ),
        (
            r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "tools": [{"builtin": "shell"}], "provider": {"type": "scripted", "calls": []}}"#,
            "at tools[0].builtin",
        ),
        (
            r#"{"model": "m", "messages": [], "provider": {"type": "scripted", "calls": []}}"#,
            "at messages",
        ),
    ] {
        let file = sb.write("r.json", text);
        let stderr = refused(&sb, &file);
        assert!(stderr.contains(path), "{path}: {stderr}");
    }
}

#[test]
fn unknown_provider_type_is_refused() {
    let sb = Sandbox::new();
    let file = sb.write(
        "provider.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}], "provider": {"type": "ollama"}}"#,
    );
    let stderr = refused(&sb, &file);
    assert!(stderr.contains("at provider.type"), "{stderr}");
    assert!(stderr.contains("unknown provider type"), "{stderr}");
}

#[test]
fn network_provider_errors_never_echo_the_key() {
    let sb = Sandbox::new();
    let secret = "sk-test-0123456789abcdefghijklmnop";
    // A base URL the adapter refuses (credentials in it): exit 2, key unread in output.
    for (kind, extra) in [
        (
            "openai-compatible",
            r#", "base_url": "http://user:pw@127.0.0.1:11434/v1""#,
        ),
        ("anthropic", r#", "base_url": "ftp://example.invalid/v1""#),
    ] {
        let file = sb.write(
            "net.json",
            &format!(
                r#"{{"model": "llama3", "messages": [{{"role": "user", "text": "hi"}}],
                    "provider": {{"type": "{kind}"{extra}, "api_key_env": "KEEL_TEST_API_KEY"}}}}"#
            ),
        );
        let out = keel()
            .arg("run")
            .arg(&file)
            .args(sb.db_args())
            .env("KEEL_TEST_API_KEY", secret)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{kind}: {stderr}");
        assert!(stderr.contains("provider"), "{stderr}");
        assert!(!stderr.contains(secret) && !stdout.contains(secret));
    }
    assert!(!sb.db().exists());
}

#[test]
fn newer_schema_database_is_refused_naming_the_path() {
    let sb = Sandbox::new();
    // Make a journal, then pretend a newer keel wrote it.
    let out = sb.run(&example("plain_answer.json"), &[]);
    assert_eq!(out.status.code(), Some(0));
    {
        let conn = rusqlite::Connection::open(sb.db()).unwrap();
        conn.execute("UPDATE keel_schema SET version = 99", [])
            .unwrap();
    }
    let db = sb.db().display().to_string();
    let out = sb.run(&example("plain_answer.json"), &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&db), "{stderr}");
    assert!(stderr.contains("schema version 99"), "{stderr}");
    for cmd in [
        &["runs"][..],
        &["verify"],
        &["events", "x"],
        &["export", "x"],
    ] {
        let out = keel().args(cmd).args(sb.db_args()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        assert!(text(&out).1.contains(&db), "{cmd:?}: {}", text(&out).1);
    }
}

#[test]
fn files_must_be_a_directory() {
    let sb = Sandbox::new();
    let out = sb.run(
        &example("plain_answer.json"),
        &["--files", sb.path("missing-dir").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--files"), "{}", text(&out).1);
}

#[test]
fn bad_arguments_are_exit_2() {
    for args in [
        &["run"][..],
        &["run", "x.json", "--approve", "maybe"],
        &["events"],
        &["frobnicate"],
    ] {
        let out = keel().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_missing_database_is_exit_2_for_the_read_commands() {
    let sb = Sandbox::new();
    for cmd in [
        &["runs"][..],
        &["verify"],
        &["events", "run_1"],
        &["export", "run_1"],
    ] {
        let out = keel().args(cmd).args(sb.db_args()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        assert!(text(&out).1.contains("no Keel journal"), "{}", text(&out).1);
    }
    assert!(!sb.db().exists(), "reading never creates a database");
}
