#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Agent tools (`{"name", "agent": {...}}`) through the loader: what an
//! accepted one becomes, and each refusal naming the whole JSON path
//! (into nested agents too) and the rule.
use keel_message::Role;
use keel_scenario::file::{AgentScenario, ScenarioError, ToolEntry, parse};
use std::path::Path;
use std::time::Duration;

/// Shaped like a key: never echoed.
const SECRET: &str = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";

/// A scripted provider answering once.
const PROVIDER: &str =
    r#"{"type":"scripted","calls":[[{"text":"a"},{"complete":{"finish":"stop"}}]]}"#;

/// A scenario whose `tools` are `tools` (JSON).
fn scenario(tools: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","text":"hi"}}],"tools":{tools},"provider":{PROVIDER}}}"#
    )
}

/// `{"name": name, "agent": agent}` plus `extra` members.
fn agent_tool(name: &str, agent: &str, extra: &str) -> String {
    format!(r#"{{"name":"{name}","description":"does {name}",{extra}"agent":{agent}}}"#)
}

/// An agent with `members` after its model and provider.
fn agent(members: &str) -> String {
    format!(r#"{{"model":"child-1","provider":{PROVIDER}{members}}}"#)
}

/// What loading a scenario's tools gives.
enum Expect<'a> {
    /// Accepted: the agent tool at this index, checked by the closure.
    Agent(usize, &'a dyn Fn(&AgentScenario)),
    /// Refused at this JSON path, naming this rule (or message part).
    Refused { path: &'a str, rule: &'a str },
}

/// Loads a scenario with `tools` and compares.
fn check(tools: &str, expect: Expect<'_>) {
    let text = scenario(tools);
    let got = parse(Path::new("s.json"), &text);
    match (got, expect) {
        (Ok(s), Expect::Agent(index, inspect)) => match &s.tools[index] {
            ToolEntry::Agent { spec, .. } => inspect(spec),
            other => panic!("{tools}: tools[{index}] is {other:?}"),
        },
        (
            Err(
                ScenarioError::Invalid { path, message, .. }
                | ScenarioError::Shape { path, message, .. },
            ),
            Expect::Refused { path: p, rule },
        ) => {
            assert_eq!(path, p, "{tools}: {message}");
            assert!(message.contains(rule), "{tools}: {message} lacks {rule}");
            assert!(!message.contains("sk-proj"), "{message}");
        }
        (got, _) => panic!("{tools}: {got:?}"),
    }
}

fn refused<'a>(path: &'a str, rule: &'a str) -> Expect<'a> {
    Expect::Refused { path, rule }
}

#[test]
fn an_agent_tool_becomes_a_definition_with_the_task_schema_and_a_child_spec() {
    let tools = format!(
        "[{}]",
        agent_tool(
            "researcher",
            &agent(
                r#","messages":[{"role":"system","text":"Be brief."},{"role":"system","parts":[{"text":"Cite."}]}],
                "tools":[{"builtin":"clock"},{"name":"lookup","script":[{"ok":"x"}]}],
                "limits":{"max_turns":2,"approval_timeout_ms":900}"#
            ),
            r#""timeout_ms":1500,"on_failure":"end_run","requires_approval":true,"#
        )
    );
    let text = scenario(&tools);
    let s = parse(Path::new("s.json"), &text).unwrap();
    let ToolEntry::Agent {
        definition,
        spec,
        policy,
    } = &s.tools[0]
    else {
        panic!("{:?}", s.tools[0]);
    };
    assert_eq!(s.tools[0].name(), "researcher");
    assert_eq!(definition.description(), "does researcher");
    assert_eq!(
        definition.parameters().as_str(),
        r#"{"additionalProperties":false,"properties":{"task":{"type":"string"}},"required":["task"],"type":"object"}"#
    );
    assert_eq!(policy.timeout, Some(Duration::from_millis(1500)));
    assert!(policy.requires_approval);
    assert!(!policy.idempotent);
    assert_eq!(spec.model().as_str(), "child-1");
    assert_eq!(spec.provider().type_name(), "scripted");
    let roles: Vec<Role> = spec.instructions().iter().map(|m| m.role()).collect();
    assert_eq!(roles, [Role::System, Role::System]);
    let names: Vec<&str> = spec.tools().iter().map(ToolEntry::name).collect();
    assert_eq!(names, ["clock", "lookup"]);
    assert_eq!(spec.limits().max_turns, 2);
    assert_eq!(spec.limits().approval_timeout, Duration::from_millis(900));
    assert!(spec.approval_timeout_set());
}

#[test]
fn an_agent_needs_only_model_and_provider_and_may_hold_agents() {
    check(
        &format!("[{}]", agent_tool("a", &agent(""), "")),
        Expect::Agent(0, &|spec| {
            assert!(spec.instructions().is_empty());
            assert!(spec.tools().is_empty());
            assert_eq!(*spec.limits(), keel_engine::EngineLimits::default());
            assert!(!spec.approval_timeout_set());
        }),
    );
    let inner = agent_tool("reviewer", &agent(""), "");
    let middle = agent_tool("coder", &agent(&format!(r#","tools":[{inner}]"#)), "");
    let tools = format!(r#"[{{"builtin":"clock"}},{middle}]"#);
    check(
        &tools,
        Expect::Agent(1, &|spec| {
            let [ToolEntry::Agent { spec: inner, .. }] = spec.tools() else {
                panic!("{:?}", spec.tools());
            };
            assert!(inner.tools().is_empty());
        }),
    );
}

#[test]
fn each_broken_agent_rule_names_its_path() {
    let scripted = r#"{"name":"t","script":[]}"#;
    let nested = |inner: &str| {
        format!(
            "[{scripted},{}]",
            agent_tool("outer", &agent(&format!(r#","tools":[{inner}]"#)), "")
        )
    };
    let rows: Vec<(String, &str, &str)> = vec![
        // The tool's own members.
        (
            format!(r#"[{{"name":"t","script":[],"agent":{}}}]"#, agent("")),
            "tools[0]",
            "rule scenario.tool_kind",
        ),
        (
            format!(r#"[{{"builtin":"clock","agent":{}}}]"#, agent("")),
            "tools[0]",
            "rule scenario.tool_kind",
        ),
        (
            format!(r#"[{{"agent":{}}}]"#, agent("")),
            "tools[0]",
            "`agent` (a sub-agent)",
        ),
        (
            format!("[{}]", agent_tool("a b", &agent(""), "")),
            "tools[0].name",
            "tool_name",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", &agent(""), r#""parameters":{"type":"object"},"#)
            ),
            "tools[0].parameters",
            "rule scenario.agent_parameters",
        ),
        (
            format!("[{}]", agent_tool("a", &agent(""), r#""idempotent":true,"#)),
            "tools[0].idempotent",
            "rule scenario.agent_idempotent",
        ),
        (
            format!("[{}]", agent_tool("a", &agent(""), r#""timeout_ms":0,"#)),
            "tools[0].timeout_ms",
            "at least 1",
        ),
        (
            format!("[{scripted},{}]", agent_tool("t", &agent(""), "")),
            "tools[1]",
            "a second tool named t",
        ),
        // The agent's members.
        (
            format!(
                "[{}]",
                agent_tool(
                    "a",
                    &agent(
                        r#","messages":[{"role":"system","text":"x"},{"role":"user","text":"do it"}]"#
                    ),
                    ""
                )
            ),
            "tools[0].agent.messages[1]",
            "rule scenario.agent_instructions",
        ),
        (
            format!(
                "[{}]",
                agent_tool(
                    "a",
                    &agent(r#","messages":[{"role":"assistant","text":"x"}]"#),
                    ""
                )
            ),
            "tools[0].agent.messages[0]",
            "rule scenario.agent_instructions",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", &agent(r#","messages":[{"role":"system"}]"#), "")
            ),
            "tools[0].agent.messages[0]",
            "rule scenario.message_form",
        ),
        (
            format!(
                "[{}]",
                agent_tool(
                    "a",
                    &agent(r#","messages":[{"role":"system","parts":[{"text":"x","file":{}}]}]"#),
                    ""
                )
            ),
            "tools[0].agent.messages[0].parts[0].file",
            "missing field",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", &format!(r#"{{"model":"","provider":{PROVIDER}}}"#), "")
            ),
            "tools[0].agent.model",
            "model",
        ),
        (
            format!("[{}]", agent_tool("a", r#"{"model":"m"}"#, "")),
            "tools[0].agent",
            "missing field `provider`",
        ),
        (
            format!("[{}]", agent_tool("a", &agent(r#","run_id":"r1""#), "")),
            "tools[0].agent.run_id",
            "unknown field",
        ),
        (
            format!("[{}]", agent_tool("a", &agent(r#","mcp_servers":[]"#), "")),
            "tools[0].agent.mcp_servers",
            "unknown field",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", &agent(r#","limits":{"max_turns":0}"#), "")
            ),
            "tools[0].agent.limits.max_turns",
            "rule engine.limits",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", &agent(r#","limits":{"retry":{"jitter":2}}"#), "")
            ),
            "tools[0].agent.limits.retry.jitter",
            "rule engine.limits",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", r#"{"model":"m","provider":{"type":"ollama"}}"#, "")
            ),
            "tools[0].agent.provider.type",
            "unknown provider type",
        ),
        (
            format!(
                "[{}]",
                agent_tool(
                    "a",
                    &format!(
                        r#"{{"model":"m","provider":{{"type":"anthropic","api_key_env":"{SECRET}"}}}}"#
                    ),
                    ""
                )
            ),
            "tools[0].agent.provider.api_key_env",
            "env_var_name.charset",
        ),
        (
            format!(
                "[{}]",
                agent_tool("a", r#"{"model":"m","provider":{"type":"scripted"}}"#, "")
            ),
            "tools[0].agent.provider",
            "needs `calls`",
        ),
        // Inside a nested agent: the whole path.
        (
            nested(r#"{"name":"x","script":[{"ok":1},{"delay_ms":5}]}"#),
            "tools[1].agent.tools[0].script[1]",
            "",
        ),
        (
            nested(&format!("{scripted},{scripted}")),
            "tools[1].agent.tools[1]",
            "a second tool named t",
        ),
        (
            nested(r#"{"builtin":"shell"}"#),
            "tools[1].agent.tools[0].builtin",
            "unknown builtin",
        ),
        (
            nested(&agent_tool(
                "inner",
                &agent(r#","messages":[{"role":"user","text":"x"}]"#),
                "",
            )),
            "tools[1].agent.tools[0].agent.messages[0]",
            "rule scenario.agent_instructions",
        ),
        (
            nested(&agent_tool(
                "inner",
                &agent(r#","limits":{"max_parallel_tools":0}"#),
                "",
            )),
            "tools[1].agent.tools[0].agent.limits.max_parallel_tools",
            "rule engine.limits",
        ),
    ];
    for (tools, path, rule) in &rows {
        check(tools, refused(path, rule));
    }
}

/// A daemon allows a scenario only when every provider in it is allowed:
/// an agent's, however deep, reads a key from the daemon's environment as
/// the top level's does. The first one refused is named by its path.
#[test]
fn every_nested_provider_must_be_allowed() {
    use keel_scenario::allowance::{ProviderAllowance, unpermitted_provider};
    let network = r#"{"model":"m","provider":{"type":"anthropic","api_key_env":"TEAM_KEY"}}"#;
    let deep = agent_tool(
        "outer",
        &agent(&format!(
            r#","tools":[{{"builtin":"clock"}},{}]"#,
            agent_tool("inner", network, "")
        )),
        "",
    );
    let allowed = [ProviderAllowance::parse("anthropic,TEAM_KEY").unwrap()];
    let other = [ProviderAllowance::parse("anthropic,OTHER_KEY").unwrap()];
    for (tools, refused_at) in [
        (format!("[{}]", agent_tool("a", &agent(""), "")), None),
        (
            format!(
                r#"[{{"name":"t","script":[]}},{}]"#,
                agent_tool("a", network, "")
            ),
            Some("tools[1].agent.provider"),
        ),
        (
            format!("[{deep}]"),
            Some("tools[0].agent.tools[1].agent.provider"),
        ),
    ] {
        let s = parse(Path::new("s.json"), &scenario(&tools)).unwrap();
        assert_eq!(unpermitted_provider(&s, &allowed), None, "{tools}");
        for refusing in [&other[..], &[]] {
            assert_eq!(
                unpermitted_provider(&s, refusing).as_deref(),
                refused_at,
                "{tools}"
            );
        }
    }
    let top = r#"{"model":"m","messages":[{"role":"user","text":"hi"}],
        "provider":{"type":"anthropic","api_key_env":"TEAM_KEY"}}"#;
    let s = parse(Path::new("s.json"), top).unwrap();
    assert_eq!(
        unpermitted_provider(&s, &other).as_deref(),
        Some("provider")
    );
    assert_eq!(unpermitted_provider(&s, &allowed), None);
}

/// `limits.max_sub_run_depth` and `limits.max_sub_runs` reach the engine's
/// limits, at the top and in an agent; absent, the engine's defaults; 0 is
/// a bound (no sub-runs), a negative or fractional one is refused at its
/// member.
#[test]
fn sub_run_bounds_are_limits() {
    let with_limits = |top: &str, child: &str| {
        let tools = format!(
            "[{}]",
            agent_tool("a", &agent(&format!(r#","limits":{child}"#)), "")
        );
        scenario(&tools).replacen(r#""tools":"#, &format!(r#""limits":{top},"tools":"#), 1)
    };
    let load = |text: &str| parse(Path::new("s.json"), text);
    let defaults = keel_engine::EngineLimits::default();
    for (top, child, want_top, want_child) in [
        (
            "{}",
            "{}",
            (defaults.max_sub_run_depth, defaults.max_sub_runs),
            (3, 16),
        ),
        (
            r#"{"max_sub_run_depth":1,"max_sub_runs":2}"#,
            r#"{"max_sub_run_depth":0,"max_sub_runs":5}"#,
            (1, 2),
            (0, 5),
        ),
        (
            r#"{"max_sub_runs":0}"#,
            r#"{"max_sub_run_depth":7}"#,
            (3, 0),
            (7, 16),
        ),
    ] {
        let s = load(&with_limits(top, child)).unwrap();
        assert_eq!(
            (s.limits.max_sub_run_depth, s.limits.max_sub_runs),
            want_top,
            "{top}"
        );
        let ToolEntry::Agent { spec, .. } = &s.tools[0] else {
            panic!("{:?}", s.tools[0]);
        };
        let l = spec.limits();
        assert_eq!((l.max_sub_run_depth, l.max_sub_runs), want_child, "{child}");
    }
    for (top, child, path) in [
        (
            r#"{"max_sub_run_depth":-1}"#,
            "{}",
            "limits.max_sub_run_depth",
        ),
        (r#"{"max_sub_runs":1.5}"#, "{}", "limits.max_sub_runs"),
        (
            "{}",
            r#"{"max_sub_runs":"2"}"#,
            "tools[0].agent.limits.max_sub_runs",
        ),
        (
            "{}",
            r#"{"max_sub_run_depth":4294967296}"#,
            "tools[0].agent.limits.max_sub_run_depth",
        ),
    ] {
        match load(&with_limits(top, child)) {
            Err(ScenarioError::Shape { path: p, .. }) => assert_eq!(p, path, "{top} {child}"),
            other => panic!("{top} {child}: {other:?}"),
        }
    }
}

/// An agent becomes an `AgentTool` when the run is built; a provider of a
/// nested agent that cannot be built (its key variable unset) is named by
/// its whole path, never by its key.
#[test]
fn a_nested_agent_that_cannot_be_built_is_named_by_its_path() {
    use keel_scenario::launch::{self, Launch};
    use keel_testkit::{InteractionStep, ScriptedInteractions};
    let launch = Launch {
        files: None,
        approvals: std::sync::Arc::new(ScriptedInteractions::always(InteractionStep::deny())),
        default_approval_timeout: Some(Duration::from_millis(1234)),
    };
    let network =
        r#"{"model":"m","provider":{"type":"anthropic","api_key_env":"KEEL_TEST_UNSET_KEY_37"}}"#;
    let tools = |inner: &str| {
        format!(
            "[{}]",
            agent_tool(
                "outer",
                &agent(&format!(
                    r#","tools":[{{"builtin":"clock"}},{}]"#,
                    agent_tool("inner", inner, "")
                )),
                ""
            )
        )
    };
    let run_id = keel_message::RunId::parse("r1").unwrap();
    let built = parse(Path::new("s.json"), &scenario(&tools(&agent("")))).unwrap();
    let request = launch::run_request(&built, run_id.clone(), &launch).unwrap();
    assert_eq!(request.run_id(), &run_id);
    let broken = parse(Path::new("s.json"), &scenario(&tools(network))).unwrap();
    let e = launch::run_request(&broken, run_id, &launch).unwrap_err();
    assert_eq!(e.path(), "tools[0].agent.tools[1].agent.provider", "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("at tools[0].agent.tools[1].agent.provider: "),
        "{text}"
    );
    assert!(text.contains("KEEL_TEST_UNSET_KEY_37"), "{text}");
}
