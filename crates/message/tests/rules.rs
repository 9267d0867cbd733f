//! One table per area, each row through that area's `check` helper: every
//! rule of keel-message has a row that fails when the rule is removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_message::*;
use std::sync::Arc;

/// What a row expects: `Ok(())`, or the rule name and path of the error.
type Expect = Result<(), (&'static str, &'static str)>;
const OK: Expect = Ok(());

fn check<T: std::fmt::Debug>(row: &str, got: Result<T, MessageError>, want: Expect) {
    match (got, want) {
        (Ok(_), Ok(())) => {}
        (Err(e), Err((rule, path))) => {
            assert_eq!(e.kind().rule(), rule, "row {row}: wrong rule in {e}");
            assert_eq!(e.path(), path, "row {row}: wrong path in {e}");
            // Every rejection names its rule in the message.
            let shown = e.to_string();
            assert!(shown.contains(path), "row {row}: {shown}");
        }
        (Ok(v), Err(w)) => panic!("row {row}: accepted {v:?}, wanted {w:?}"),
        (Err(e), Ok(())) => panic!("row {row}: rejected with {e}"),
    }
}

fn id_check(row: &str, got: Result<impl std::fmt::Debug, IdError>, want: Expect) {
    check(row, got.map_err(MessageError::from), want);
}

fn small() -> Limits {
    Limits {
        parts_per_message: 3,
        part_bytes: 16,
        message_bytes: 24,
        history_messages: 4,
        history_bytes: 40,
        tools_per_request: 2,
        tool_description_bytes: 10,
        model_name_bytes: 12,
        json_bytes: 64,
        ..Limits::default()
    }
}

fn cid(s: &str) -> CallId {
    CallId::parse(s).unwrap()
}
fn mid(s: &str) -> MessageId {
    MessageId::parse(s).unwrap()
}
fn json(s: &str) -> CanonicalJson {
    CanonicalJson::parse(s).unwrap()
}
fn text(s: &str) -> Part {
    Part::text(s).unwrap()
}
fn call(id: &str, name: &str) -> Part {
    Part::tool_call(cid(id), ToolName::parse(name).unwrap(), json("{}")).unwrap()
}
fn result(id: &str) -> Part {
    Part::tool_result(cid(id), "ok", false).unwrap()
}
fn msg(id: &str, role: Role, parts: Vec<Part>) -> Message {
    Message::new(mid(id), role, parts).unwrap()
}

#[test]
fn ids() {
    let long = "a".repeat(ID_MAX_BYTES);
    let too_long = "a".repeat(ID_MAX_BYTES + 1);
    let rows: &[(&str, Expect)] = &[
        ("run_01", OK),
        ("call_9bX:v1.2-3", OK),
        (&long, OK),
        ("", Err(("ids.length", "$"))),
        (&too_long, Err(("ids.length", "$"))),
        ("has space", Err(("ids.charset", "$"))),
        ("a/b", Err(("ids.charset", "$"))),
        ("quote\"", Err(("ids.charset", "$"))),
        ("ünï", Err(("ids.charset", "$"))),
        ("tab\t", Err(("ids.charset", "$"))),
        (".", Err(("ids.dot_segment", "$"))),
        ("..", Err(("ids.dot_segment", "$"))),
        ("...", OK),
        (".a", OK),
        ("a..", OK),
    ];
    for (input, want) in rows {
        id_check(input, RunId::parse(input), *want);
        id_check(input, MessageId::parse(input), *want);
        id_check(input, OperationId::parse(input), *want);
        id_check(input, CallId::parse(input), *want);
        id_check(input, InteractionId::parse(input), *want);
    }
}

#[test]
fn id_errors_do_not_echo_input() {
    let err = CallId::parse("sk-live secret value").unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
    assert!(!format!("{err:?}").contains("secret"));
    assert_eq!(
        err,
        IdError::Character {
            kind: "call id",
            offset: 7
        }
    );
}

#[test]
fn names() {
    let n64 = "t".repeat(64);
    let n65 = "t".repeat(65);
    let rows: &[(&str, Expect)] = &[
        ("get_weather", OK),
        ("Get-Weather2", OK),
        (&n64, OK),
        ("", Err(("tool_name", "$"))),
        (&n65, Err(("tool_name", "$"))),
        ("get.weather", Err(("tool_name", "$"))),
        ("get weather", Err(("tool_name", "$"))),
        ("get:weather", Err(("tool_name", "$"))),
    ];
    for (input, want) in rows {
        check(input, ToolName::parse(input), *want);
    }
    let rows: &[(&str, Expect)] = &[
        ("gpt-5", OK),
        ("llama3.1:8b", OK),
        ("accounts/x/m", OK),
        ("", Err(("model_name", "$"))),
        ("thirteen-byte", Err(("model_name", "$"))),
        ("gpt 5", Err(("model_name", "$"))),
        ("gpt\u{7}", Err(("model_name", "$"))),
    ];
    for (input, want) in rows {
        check(input, ModelName::parse_with(input, &small()), *want);
    }
}

#[test]
fn parts() {
    let l = small();
    let rows: Vec<(&str, Result<Part, MessageError>, Expect)> = vec![
        ("text", Part::text_with("hello", &l), OK),
        ("text at bound", Part::text_with(&"x".repeat(16), &l), OK),
        (
            "empty text",
            Part::text_with("", &l),
            Err(("part.text_nonempty", "$.text")),
        ),
        (
            "text over bound",
            Part::text_with(&"x".repeat(17), &l),
            Err(("limits.part_bytes", "$.text")),
        ),
        (
            "args object",
            Part::tool_call_with(
                cid("c1"),
                ToolName::parse("t").unwrap(),
                json(r#"{"a":1}"#),
                &l,
            ),
            OK,
        ),
        (
            "args array",
            Part::tool_call_with(cid("c1"), ToolName::parse("t").unwrap(), json("[1]"), &l),
            Err(("tool_call.arguments_object", "$.arguments")),
        ),
        (
            "args string",
            Part::tool_call_with(
                cid("c1"),
                ToolName::parse("t").unwrap(),
                json(r#""{}""#),
                &l,
            ),
            Err(("tool_call.arguments_object", "$.arguments")),
        ),
        (
            "args over bound",
            Part::tool_call_with(
                cid("c1"),
                ToolName::parse("t").unwrap(),
                json(r#"{"a":"0123456789abc"}"#),
                &l,
            ),
            Err(("limits.part_bytes", "$.arguments")),
        ),
        (
            "empty result",
            Part::tool_result_with(cid("c1"), "", false, &l),
            OK,
        ),
        (
            "result over bound",
            Part::tool_result_with(cid("c1"), &"r".repeat(17), true, &l),
            Err(("limits.part_bytes", "$.content")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
}

#[test]
fn messages() {
    let l = small();
    let m = |role, parts| Message::new_with(mid("m1"), role, parts, &l);
    let rows: Vec<(&str, Result<Message, MessageError>, Expect)> = vec![
        ("user text", m(Role::User, vec![text("hi")]), OK),
        ("system text", m(Role::System, vec![text("be brief")]), OK),
        (
            "assistant text+call",
            m(Role::Assistant, vec![text("ok"), call("c1", "t")]),
            OK,
        ),
        (
            "tool results",
            m(Role::Tool, vec![result("c1"), result("c2")]),
            OK,
        ),
        (
            "no parts",
            m(Role::User, vec![]),
            Err(("message.nonempty", "$.parts")),
        ),
        (
            "too many parts",
            m(Role::User, vec![text("a"), text("b"), text("c"), text("d")]),
            Err(("limits.parts_per_message", "$.parts")),
        ),
        (
            "user tool call",
            m(Role::User, vec![text("a"), call("c1", "t")]),
            Err(("message.role_parts", "$.parts[1]")),
        ),
        (
            "system tool result",
            m(Role::System, vec![result("c1")]),
            Err(("message.role_parts", "$.parts[0]")),
        ),
        (
            "assistant tool result",
            m(Role::Assistant, vec![result("c1")]),
            Err(("message.role_parts", "$.parts[0]")),
        ),
        (
            "tool text",
            m(Role::Tool, vec![text("x")]),
            Err(("message.role_parts", "$.parts[0]")),
        ),
        (
            "duplicate call id",
            m(Role::Assistant, vec![call("c1", "t"), call("c1", "u")]),
            Err(("call_id.unique", "$.parts[1].call_id")),
        ),
        (
            "duplicate result id",
            m(Role::Tool, vec![result("c1"), result("c1")]),
            Err(("call_id.unique", "$.parts[1].call_id")),
        ),
        (
            "message bytes",
            m(
                Role::User,
                vec![text(&"a".repeat(16)), text(&"b".repeat(9))],
            ),
            Err(("limits.message_bytes", "$.parts")),
        ),
        (
            // Built under the defaults, re-checked under smaller limits.
            "part built under larger limits",
            m(Role::User, vec![text(&"a".repeat(17))]),
            Err(("limits.part_bytes", "$.parts[0].text")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
}

#[test]
fn tools() {
    let l = small();
    let t = |desc: &str, params: &str| {
        ToolDefinition::new_with(ToolName::parse("t").unwrap(), desc, json(params), &l)
    };
    let rows: Vec<(&str, Result<ToolDefinition, MessageError>, Expect)> = vec![
        ("object schema", t("weather", r#"{"type":"object"}"#), OK),
        ("schema without type", t("", r#"{"properties":{}}"#), OK),
        (
            "description over bound",
            t("0123456789a", "{}"),
            Err(("limits.tool_description_bytes", "$.description")),
        ),
        (
            "string schema",
            t("", r#"{"type":"string"}"#),
            Err(("tool.parameters_object", "$.parameters")),
        ),
        (
            "array schema",
            t("", "[]"),
            Err(("tool.parameters_object", "$.parameters")),
        ),
        (
            "schema over bound",
            t("", &format!(r#"{{"description":"{}"}}"#, "d".repeat(60))),
            Err(("limits.json_bytes", "$.parameters")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
}

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition::new(ToolName::parse(name).unwrap(), "", json("{}")).unwrap()
}

#[test]
fn requests() {
    let l = small();
    let req = |history: Vec<Message>, tools: Vec<ToolDefinition>| {
        ModelRequest::new_with(
            OperationId::parse("op_1").unwrap(),
            ModelName::parse("m").unwrap(),
            history.into(),
            tools.into(),
            &l,
        )
    };
    let user = || msg("u", Role::User, vec![text("hi")]);
    let rows: Vec<(&str, Result<ModelRequest, MessageError>, Expect)> = vec![
        ("one message", req(vec![user()], vec![]), OK),
        (
            "call then result",
            req(
                vec![
                    user(),
                    msg("a", Role::Assistant, vec![call("c1", "t")]),
                    msg("r", Role::Tool, vec![result("c1")]),
                ],
                vec![tool("t")],
            ),
            OK,
        ),
        (
            "empty history",
            req(vec![], vec![]),
            Err(("request.history_nonempty", "$.history")),
        ),
        (
            "too many messages",
            req(vec![user(), user(), user(), user(), user()], vec![]),
            Err(("limits.history_messages", "$.history")),
        ),
        (
            "history bytes",
            req(
                vec![
                    msg("a", Role::User, vec![text(&"a".repeat(16))]),
                    msg("b", Role::User, vec![text(&"b".repeat(16))]),
                    msg("c", Role::User, vec![text(&"c".repeat(16))]),
                ],
                vec![],
            ),
            Err(("limits.history_bytes", "$.history")),
        ),
        (
            "message over bound inside history",
            req(
                vec![msg("a", Role::User, vec![text(&"a".repeat(20))])],
                vec![],
            ),
            Err(("limits.part_bytes", "$.history[0].parts[0].text")),
        ),
        (
            "too many tools",
            req(vec![user()], vec![tool("a"), tool("b"), tool("c")]),
            Err(("limits.tools_per_request", "$.tools")),
        ),
        (
            "duplicate tool names",
            req(vec![user()], vec![tool("a"), tool("a")]),
            Err(("tools.unique_names", "$.tools[1].name")),
        ),
        (
            "orphan tool result",
            req(
                vec![user(), msg("r", Role::Tool, vec![result("c9")])],
                vec![],
            ),
            Err(("tool_result.answers_call", "$.history[1].parts[0].call_id")),
        ),
        (
            "result before its call",
            req(
                vec![
                    msg("r", Role::Tool, vec![result("c1")]),
                    msg("a", Role::Assistant, vec![call("c1", "t")]),
                ],
                vec![],
            ),
            Err(("tool_result.answers_call", "$.history[0].parts[0].call_id")),
        ),
        (
            "call id reused across messages",
            req(
                vec![
                    msg("a", Role::Assistant, vec![call("c1", "t")]),
                    msg("b", Role::Assistant, vec![call("c1", "t")]),
                ],
                vec![],
            ),
            Err(("call_id.unique", "$.history[1].parts[0].call_id")),
        ),
        (
            "call answered twice",
            req(
                vec![
                    msg("a", Role::Assistant, vec![call("c1", "t")]),
                    msg("r", Role::Tool, vec![result("c1")]),
                    msg("s", Role::Tool, vec![result("c1")]),
                ],
                vec![],
            ),
            Err(("call_id.unique", "$.history[2].parts[0].call_id")),
        ),
    ];
    for (row, got, want) in rows {
        check(row, got, want);
    }
    let long_model = ModelName::parse("a-model-name-of-20b").unwrap();
    check(
        "model name over bound",
        ModelRequest::new_with(
            OperationId::parse("op").unwrap(),
            long_model,
            vec![user()].into(),
            Arc::from([]),
            &l,
        ),
        Err(("limits.model_name_bytes", "$.model")),
    );
}

/// Deserializing runs the same rules: one row per rule, through JSON.
#[test]
fn serde_enforces_every_rule() {
    let rows: &[(&str, &str, Option<&str>)] = &[
        (
            "valid",
            r#"{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}"#,
            None,
        ),
        (
            "bad id",
            r#"{"id":"m 1","role":"user","parts":[{"type":"text","text":"hi"}]}"#,
            Some("ids.charset"),
        ),
        (
            "empty text",
            r#"{"id":"m1","role":"user","parts":[{"type":"text","text":""}]}"#,
            Some("part.text_nonempty"),
        ),
        (
            "no parts",
            r#"{"id":"m1","role":"user","parts":[]}"#,
            Some("message.nonempty"),
        ),
        (
            "role parts",
            r#"{"id":"m1","role":"user","parts":[{"type":"tool_result","call_id":"c","content":"x"}]}"#,
            Some("message.role_parts"),
        ),
        (
            "args not object",
            r#"{"id":"m1","role":"assistant","parts":[{"type":"tool_call","call_id":"c","name":"t","arguments":[]}]}"#,
            Some("tool_call.arguments_object"),
        ),
        (
            "bad tool name",
            r#"{"id":"m1","role":"assistant","parts":[{"type":"tool_call","call_id":"c","name":"a.b","arguments":{}}]}"#,
            Some("tool_name"),
        ),
        (
            "unknown member",
            r#"{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}],"x":1}"#,
            Some("shape"),
        ),
        (
            "unknown part type",
            r#"{"id":"m1","role":"user","parts":[{"type":"audio"}]}"#,
            Some("shape"),
        ),
        (
            "unknown role",
            r#"{"id":"m1","role":"developer","parts":[{"type":"text","text":"hi"}]}"#,
            Some("shape"),
        ),
    ];
    for (row, input, want) in rows {
        let got = Message::from_json_with(input, &Limits::default());
        // The plain serde path agrees with the explicit one.
        let plain: Result<Message, _> = serde_json::from_str(input);
        assert_eq!(got.is_ok(), plain.is_ok(), "row {row}");
        match (got, want) {
            (Ok(m), None) => {
                let again = serde_json::to_string(&m).unwrap();
                assert_eq!(&again, input, "row {row}: round trip");
            }
            (Err(DecodeError::Invalid(e)), Some(rule)) => {
                assert_eq!(e.kind().rule(), *rule, "row {row}: {e}")
            }
            (Err(DecodeError::Json { .. }), Some(rule)) if *rule == "shape" => {}
            // serde nests our validation error in its own: the rule name
            // still leads the text.
            (Err(DecodeError::Json { message, .. }), Some(rule)) => {
                assert!(message.contains(rule), "row {row}: {message}")
            }
            (got, want) => panic!("row {row}: got {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn decode_errors_do_not_echo_values() {
    let secret = "sk-proj-AbCdEf0123456789AbCdEf0123456789";
    let inputs = [
        format!(r#"{{"id":"m1","role":"{secret}","parts":[]}}"#),
        format!(r#"{{"id":{{"x":"{secret}"}},"role":"user","parts":[]}}"#),
        format!(
            r#"{{"id":"m1","role":"user","parts":[{{"type":"text","text":"{secret}"}}],"extra":"{secret}"}}"#
        ),
        format!(r#"{{"id":"{secret} x","role":"user","parts":[]}}"#),
    ];
    for input in &inputs {
        let err = Message::from_json_with(input, &Limits::default()).unwrap_err();
        assert!(!err.to_string().contains("AbCdEf"), "echoed: {err}");
        assert!(!format!("{err:?}").contains("AbCdEf"), "echoed: {err:?}");
    }
}

#[test]
fn values_are_immutable_and_cheap_to_clone() {
    // Inputs are copied: changing the caller's JSON afterwards changes nothing.
    let mut args = serde_json::json!({"city": "Oslo"});
    let canonical = CanonicalJson::from_value(&args).unwrap();
    let part = Part::tool_call(cid("c1"), ToolName::parse("w").unwrap(), canonical).unwrap();
    args["city"] = serde_json::json!("Bergen");
    let Part::ToolCall(c) = &part else { panic!() };
    assert_eq!(c.arguments().as_str(), r#"{"city":"Oslo"}"#);

    let mut source = String::from("hello");
    let m = Message::text(mid("m1"), Role::User, &source).unwrap();
    source.push_str(" world");
    assert_eq!(m.joined_text(), "hello");

    // Clones share one allocation; the request holds the very same messages.
    let m2 = m.clone();
    assert!(Message::ptr_eq(&m, &m2));
    let history: Arc<[Message]> = vec![m.clone()].into();
    let req = ModelRequest::new(
        OperationIdIssuer::new().issue(),
        ModelName::parse("m").unwrap(),
        Arc::clone(&history),
        Arc::from([]),
    )
    .unwrap();
    assert!(Arc::ptr_eq(&req.shared_history(), &history));
    assert!(Message::ptr_eq(&req.history()[0], &m));
    let req2 = req.clone();
    assert_eq!(req, req2);
}

#[test]
fn request_round_trips_through_json() {
    let req = ModelRequest::new(
        OperationId::parse("op_7").unwrap(),
        ModelName::parse("scripted-1").unwrap(),
        vec![
            msg("u", Role::User, vec![text("Weather in Oslo?")]),
            msg(
                "a",
                Role::Assistant,
                vec![text("Checking."), call("c1", "get_weather")],
            ),
            msg("t", Role::Tool, vec![result("c1")]),
        ]
        .into(),
        vec![tool("get_weather")].into(),
    )
    .unwrap();
    let json = serde_json::to_string(&req).unwrap();
    let back = ModelRequest::from_json_with(&json, &Limits::default()).unwrap();
    assert_eq!(back, req);
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    // An invalid request in JSON is rejected with the full path.
    let bad = json.replace(r#""call_id":"c1","content""#, r#""call_id":"c2","content""#);
    let err = ModelRequest::from_json_with(&bad, &Limits::default()).unwrap_err();
    let DecodeError::Invalid(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.kind().rule(), "tool_result.answers_call");
    assert_eq!(e.path(), "$.history[2].parts[0].call_id");
}

#[test]
fn operation_ids_are_issued_fresh() {
    let mut ops = OperationIdIssuer::new();
    let a = ops.issue();
    let b = ops.issue();
    assert_ne!(a, b);
    assert_eq!(ops.issued(), 2);
}

#[test]
fn env_var_names_follow_the_posix_shell_rule() {
    let long = "A".repeat(ENV_VAR_NAME_MAX_BYTES);
    for ok in [
        "A",
        "_",
        "_1",
        "OPENAI_API_KEY",
        "lower_case9",
        long.as_str(),
    ] {
        assert_eq!(EnvVarName::parse(ok).unwrap().as_str(), ok);
    }
    let too_long = "A".repeat(ENV_VAR_NAME_MAX_BYTES + 1);
    let rows: [(&str, &str); 7] = [
        ("", "env_var_name.length"),
        (&too_long, "env_var_name.length"),
        ("1KEY", "env_var_name.leading_digit"),
        ("9", "env_var_name.leading_digit"),
        ("sk-secret", "env_var_name.charset"),
        ("A=B", "env_var_name.charset"),
        ("KEY\0", "env_var_name.charset"),
    ];
    for (text, rule) in rows {
        let err = EnvVarName::parse(text).unwrap_err();
        assert_eq!(err.rule(), rule, "{text:?}");
        let shown = err.to_string();
        assert!(shown.contains(rule), "{shown}");
        // The text may be the secret itself: never echoed.
        assert!(text.is_empty() || !shown.contains(text), "{shown}");
    }
    let err = serde_json::from_str::<EnvVarName>(r#""sk-secret""#).unwrap_err();
    assert!(!err.to_string().contains("sk-secret"), "{err}");
    assert_eq!(
        serde_json::from_str::<EnvVarName>(r#""HOME""#)
            .unwrap()
            .as_str(),
        "HOME"
    );
}

#[test]
fn the_json_safe_integer_bound_is_two_to_the_53_minus_one() {
    use keel_message::canonical::MAX_SAFE_INTEGER;
    assert_eq!(MAX_SAFE_INTEGER, 9_007_199_254_740_991);
    assert!(CanonicalJson::parse("9007199254740991").is_ok());
    assert!(CanonicalJson::parse("9007199254740992").is_err());
}
