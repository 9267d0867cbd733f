#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::*;
use serde_json::json;

fn specs(entries: Value) -> Result<Vec<McpServerSpec>, EntryError> {
    let Value::Array(entries) = entries else {
        panic!("not an array")
    };
    check_entries(&entries, &["PROVIDER_KEY"])
}

fn refused(entries: Value, path: &str, rule: &str) {
    let e = specs(entries.clone()).map(|_| ()).unwrap_err();
    assert_eq!(e.path, path, "{entries}: {}", e.message);
    assert!(e.message.contains(rule), "{entries}: {}", e.message);
}

#[test]
fn entries_are_full_or_bare_names() {
    let got = specs(json!([
        {"name": "files", "command": ["mcp-server-filesystem", "/data"]},
        {"name": "remote"}
    ]))
    .unwrap();
    assert!(matches!(&got[0], McpServerSpec::Configured(c) if c.name().as_str() == "files"));
    assert!(matches!(&got[1], McpServerSpec::Named(n) if n.as_str() == "remote"));
}

#[test]
fn entry_rules_name_the_path() {
    refused(
        json!([{"name": "a", "command": ["x"]}, {"name": "a", "url": "http://h/"}]),
        "mcp_servers[1].name",
        "mcp.server_name_unique",
    );
    refused(
        json!([{"name": "a", "command": ["x"], "env": ["PROVIDER_KEY"]}]),
        "mcp_servers[0].env[0]",
        "mcp.env_secret",
    );
    refused(
        json!([{"name": "A"}]),
        "mcp_servers[0].name",
        "mcp.server_name",
    );
    refused(
        json!([{"name": "a", "command": ["x"], "bogus": true}]),
        "mcp_servers[0]",
        "bogus",
    );
    refused(
        json!([{"name": "a", "command": "x"}]),
        "mcp_servers[0]",
        "not a server entry",
    );
    let many: Vec<Value> = (0..=MCP_SERVERS_MAX)
        .map(|i| json!({"name": format!("s{i}")}))
        .collect();
    refused(Value::Array(many), "mcp_servers", "mcp.servers_max");
}

#[test]
fn shape_errors_do_not_echo_values() {
    let e = specs(json!([{"name": "a", "command": "sk-secret-value-1234567890"}])).unwrap_err();
    assert!(!e.message.contains("sk-secret"), "{}", e.message);
}

fn config(flag: &str) -> ServerConfig {
    parse_flag(flag).unwrap_or_else(|e| panic!("{flag}: {e}"))
}

#[test]
fn flags_take_three_forms() {
    let stdio = config("files=mcp-server-filesystem  /data /tmp");
    assert_eq!(
        stdio.transport(),
        &keel_mcp::Transport::Stdio {
            program: "mcp-server-filesystem".into(),
            args: vec!["/data".into(), "/tmp".into()]
        }
    );
    let http = config("remote=http://127.0.0.1:9000/mcp");
    assert_eq!(
        http.transport(),
        &keel_mcp::Transport::Http {
            url: "http://127.0.0.1:9000/mcp".into()
        }
    );
    let json = config(
        r#"{"name": "gh", "command": ["gh-mcp"], "env": ["GITHUB_TOKEN"], "timeout_ms": 500}"#,
    );
    assert_eq!(
        json.env().iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["GITHUB_TOKEN"]
    );
    for bad in [
        "files",
        "=x",
        "Files=x",
        "a=",
        r#"{"name": "a"}"#,
        r#"{"name": "a", "command": ["x"], "env": ["KEEL_TOKEN"]}"#,
    ] {
        assert!(parse_flag(bad).is_err(), "{bad}");
    }
    assert!(parse_flags(&["a=x".into(), "a=y".into()]).is_err());
}

#[test]
fn clients_get_only_the_operators_servers() {
    let host = vec![
        config("files=mcp-server-filesystem /data"),
        config("time=mcp-server-time"),
    ];
    let named = |n: &str| McpServerSpec::Named(ServerName::parse(n).unwrap());
    let full = |flag: &str| McpServerSpec::Configured(config(flag));
    let check = |spec: McpServerSpec, trust: Trust, expected: Result<&str, &str>| {
        let got = resolve(std::slice::from_ref(&spec), &host, trust);
        match (got, expected) {
            (Ok(configs), Ok(command)) => match configs[0].transport() {
                keel_mcp::Transport::Stdio { program, .. } => {
                    assert_eq!(program, command, "{spec:?}")
                }
                other => panic!("{other:?}"),
            },
            (Err(e), Err(rule_text)) => assert!(e.to_string().contains(rule_text), "{e}"),
            (got, expected) => panic!("{spec:?} {trust:?}: {got:?}, expected {expected:?}"),
        }
    };
    check(named("files"), Trust::Client, Ok("mcp-server-filesystem"));
    check(
        full("files=mcp-server-filesystem /data"),
        Trust::Client,
        Ok("mcp-server-filesystem"),
    );
    // Another directory, another program, more variables, an unlisted name: refused.
    check(
        full("files=mcp-server-filesystem /"),
        Trust::Client,
        Err("is not one this daemon allows"),
    );
    check(
        full("files=sh -c evil"),
        Trust::Client,
        Err("is not one this daemon allows"),
    );
    check(
        McpServerSpec::Configured(config(
            r#"{"name": "time", "command": ["mcp-server-time"], "env": ["AWS_SECRET"]}"#,
        )),
        Trust::Client,
        Err("is not one this daemon allows"),
    );
    check(named("other"), Trust::Client, Err("is not provided here"));
    check(
        full("other=anything"),
        Trust::Client,
        Err("is not one this daemon allows"),
    );
    // The operator's own file starts what it says.
    check(full("other=anything"), Trust::Operator, Ok("anything"));
    check(named("other"), Trust::Operator, Err("is not provided here"));
}
