use super::*;

/// Parses `json` as an entry and checks it; `Ok` is the config, `Err` the
/// rule and path it broke.
fn check(json: &str) -> Result<ServerConfig, (String, String)> {
    let entry: ServerEntry =
        serde_json::from_str(json).map_err(|e| ("serde".to_owned(), e.to_string()))?;
    ServerConfig::from_entry(&entry, &["MY_PROVIDER_KEY"])
        .map_err(|e| (e.rule().to_owned(), e.path().to_owned()))
}

fn refused(json: &str, rule: &str, path: &str) {
    match check(json) {
        Ok(config) => panic!("{json} was accepted: {config:?}"),
        Err((got_rule, got_path)) => {
            assert_eq!(got_rule, rule, "{json}: {got_path}");
            if rule != "serde" {
                assert_eq!(got_path, path, "{json}");
            }
        }
    }
}

#[test]
fn a_stdio_entry_is_read_in_full() {
    let config = check(r#"{"name": "files", "command": ["mcp-server-filesystem", "/data"], "env": ["HOME", "GITHUB_TOKEN"], "timeout_ms": 20000, "startup_timeout_ms": 5000, "max_output_bytes": 4096, "tools": {"write_file": {"requires_approval": true, "timeout_ms": 100, "on_failure": "end_run"}}}"#)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(config.name().as_str(), "files");
    assert_eq!(
        config.transport(),
        &Transport::Stdio {
            program: "mcp-server-filesystem".to_owned(),
            args: vec!["/data".to_owned()]
        }
    );
    let env: Vec<&str> = config.env().iter().map(|n| n.as_str()).collect();
    assert_eq!(env, ["HOME", "GITHUB_TOKEN"]);
    assert_eq!(config.startup_timeout(), Duration::from_millis(5000));
    assert_eq!(config.max_output_bytes(), 4096);
    let write = config.policy_for("write_file");
    assert!(write.requires_approval);
    assert_eq!(write.timeout, Some(Duration::from_millis(100)));
    assert_eq!(write.on_failure, OnToolFailure::EndRun);
    let read = config.policy_for("read_file");
    assert!(!read.requires_approval);
    assert_eq!(read.timeout, Some(Duration::from_millis(20000)));
}

#[test]
fn defaults_where_the_entry_is_silent() {
    let config = check(r#"{"name": "remote", "url": "http://127.0.0.1:9000/mcp"}"#)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        config.transport(),
        &Transport::Http {
            url: "http://127.0.0.1:9000/mcp".to_owned()
        }
    );
    assert_eq!(config.call_timeout(), None);
    assert_eq!(config.policy_for("any").timeout, None);
    assert_eq!(config.startup_timeout(), DEFAULT_STARTUP_TIMEOUT);
    assert_eq!(config.max_output_bytes(), DEFAULT_OUTPUT_BYTES);
}

/// Entries each breaking one rule: the JSON, the rule, the member.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        r#"{"name": "", "command": ["x"]}"#,
        "mcp.server_name",
        "name",
    ),
    (
        r#"{"name": "Files", "command": ["x"]}"#,
        "mcp.server_name",
        "name",
    ),
    (
        r#"{"name": "a__b", "command": ["x"]}"#,
        "mcp.server_name",
        "name",
    ),
    (
        r#"{"name": "-a", "command": ["x"]}"#,
        "mcp.server_name",
        "name",
    ),
    (r#"{"name": "a"}"#, "mcp.transport", ""),
    (
        r#"{"name": "a", "command": ["x"], "url": "http://h/"}"#,
        "mcp.transport",
        "",
    ),
    (r#"{"name": "a", "command": []}"#, "mcp.command", "command"),
    (
        r#"{"name": "a", "command": [""]}"#,
        "mcp.command",
        "command[0]",
    ),
    (
        r#"{"name": "a", "command": ["x", "a\u0000b"]}"#,
        "mcp.command",
        "command[1]",
    ),
    (r#"{"name": "a", "url": "ftp://h/"}"#, "mcp.url", "url"),
    (r#"{"name": "a", "url": "http://"}"#, "mcp.url", "url"),
    (r#"{"name": "a", "url": "http://h/ x"}"#, "mcp.url", "url"),
    (
        r#"{"name": "a", "url": "http://h/", "env": ["HOME"]}"#,
        "mcp.env_name",
        "env",
    ),
    (
        r#"{"name": "a", "command": ["x"], "env": ["1X"]}"#,
        "mcp.env_name",
        "env[0]",
    ),
    (
        r#"{"name": "a", "command": ["x"], "env": ["A-B"]}"#,
        "mcp.env_name",
        "env[0]",
    ),
    (
        r#"{"name": "a", "command": ["x"], "env": ["HOME", "KEEL_TOKEN"]}"#,
        "mcp.env_secret",
        "env[1]",
    ),
    (
        r#"{"name": "a", "command": ["x"], "env": ["ANTHROPIC_API_KEY"]}"#,
        "mcp.env_secret",
        "env[0]",
    ),
    (
        r#"{"name": "a", "command": ["x"], "env": ["MY_PROVIDER_KEY"]}"#,
        "mcp.env_secret",
        "env[0]",
    ),
    (
        r#"{"name": "a", "command": ["x"], "timeout_ms": 0}"#,
        "mcp.timeout",
        "timeout_ms",
    ),
    (
        r#"{"name": "a", "command": ["x"], "timeout_ms": 3600001}"#,
        "mcp.timeout",
        "timeout_ms",
    ),
    (
        r#"{"name": "a", "command": ["x"], "startup_timeout_ms": 0}"#,
        "mcp.startup_timeout",
        "startup_timeout_ms",
    ),
    (
        r#"{"name": "a", "command": ["x"], "max_output_bytes": 1023}"#,
        "mcp.max_output_bytes",
        "max_output_bytes",
    ),
    (
        r#"{"name": "a", "command": ["x"], "max_output_bytes": 1048577}"#,
        "mcp.max_output_bytes",
        "max_output_bytes",
    ),
    (
        r#"{"name": "a", "command": ["x"], "tools": {"t": {"on_failure": "explode"}}}"#,
        "mcp.tool_policy",
        "tools.t.on_failure",
    ),
    (
        r#"{"name": "a", "command": ["x"], "tools": {"t": {"timeout_ms": 0}}}"#,
        "mcp.timeout",
        "tools.t.timeout_ms",
    ),
    (
        r#"{"name": "a", "command": ["x"], "surprise": 1}"#,
        "serde",
        "",
    ),
    (
        r#"{"name": "a", "command": ["x"], "tools": {"t": {"surprise": 1}}}"#,
        "serde",
        "",
    ),
];

#[test]
fn every_rule_names_itself_and_the_member() {
    for (json, rule, path) in REFUSED {
        refused(json, rule, path);
    }
    // The bounds on sizes and counts.
    let long_name = "a".repeat(SERVER_NAME_MAX_BYTES + 1);
    refused(
        &format!(r#"{{"name": "{long_name}", "command": ["x"]}}"#),
        "mcp.server_name",
        "name",
    );
    let long_arg = "a".repeat(COMMAND_ITEM_MAX_BYTES + 1);
    refused(
        &format!(r#"{{"name": "a", "command": ["x", "{long_arg}"]}}"#),
        "mcp.command",
        "command[1]",
    );
    let many_env: Vec<String> = (0..=ENV_MAX_NAMES).map(|i| format!("\"V{i}\"")).collect();
    let many_env = format!(
        r#"{{"name": "a", "command": ["x"], "env": [{}]}}"#,
        many_env.join(",")
    );
    refused(&many_env, "mcp.env_name", "env");
}

#[test]
fn errors_never_echo_the_offending_value() {
    let secret = "sk-live-abcdefghijklmnopqrstuvwxyz0123456789";
    let entry = ServerEntry {
        name: "a".into(),
        url: Some(format!("ftp://{secret}")),
        ..ServerEntry::default()
    };
    let error = ServerConfig::from_entry(&entry, &[])
        .map(|_| ())
        .unwrap_err();
    assert!(!error.to_string().contains(secret), "{error}");
}
