//! `RunAgentInput` bodies through one `check` helper: a body in, what
//! it reads as (or the path and rule of its refusal) out.

use super::*;
use serde_json::json;

/// A PNG's signature and four bytes.
const PNG: &str = "iVBORw0KGgowMDAw";
/// `%PDF-1.4 x`.
const PDF: &str = "JVBERi0xLjQgeA==";
/// `hello`.
const HELLO: &str = "aGVsbG8=";
/// Content no refusal may echo.
const SECRET: &str = "SECRET";

/// What a body should read as.
#[derive(Debug)]
enum Want<'a> {
    /// A user message: its parts, summarised (see [`summary`]).
    User(&'a [&'a str]),
    /// Answers: tool results `call:content` (`!` marks an error) and
    /// resume entries `interrupt:decision`, with their indexes.
    Answers(&'a [(&'a str, usize)], &'a [(&'a str, usize)]),
    /// Refused at a path, under a rule.
    Refused(&'a str, &'a str),
}

/// A part as `text:…`, `image:<type>:bytes|url` or `file:<type>:<name>`.
fn summary(part: &Part) -> String {
    match part {
        Part::Text(t) => format!("text:{}", t.text()),
        Part::Image(i) => {
            let from = match i.data() {
                keel_message::ImageData::Bytes(_) => "bytes",
                keel_message::ImageData::Url(_) => "url",
            };
            format!(
                "image:{}:{from}",
                i.media_type().map_or("?", |t| t.as_str())
            )
        }
        Part::File(f) => format!("file:{}:{}", f.media_type().as_str(), f.name().as_str()),
        other => format!("{other:?}"),
    }
}

/// A body with the required members and `messages`, then `extra`
/// members set (a `null` removes one).
fn body(messages: Value, extra: Value) -> Value {
    let mut body = json!({"threadId": "t-1", "runId": "run-a", "messages": messages});
    if let (Some(members), Value::Object(extra)) = (body.as_object_mut(), extra) {
        for (name, value) in extra {
            match value {
                Value::Null => members.remove(&name),
                value => members.insert(name, value),
            };
        }
    }
    body
}

fn user(content: Value) -> Value {
    json!([{"id": "m1", "role": "user", "content": content}])
}

/// Parses `body` under `limits` and compares with `want`; a refusal
/// never echoes [`SECRET`].
fn check(limits: &InputLimits, body: &Value, want: Want<'_>) {
    let text = body.to_string();
    let got = RunAgentInput::parse(&text, limits);
    match (&got, &want) {
        (Ok(input), Want::User(parts)) => {
            let NewInput::User { parts: got } = input.new_input() else {
                panic!("{text}: {:?}, wanted a user message", input.new_input());
            };
            let got: Vec<String> = got.iter().map(summary).collect();
            assert_eq!(got, *parts, "{text}");
        }
        (Ok(input), Want::Answers(results, resume)) => {
            let NewInput::Answers {
                tool_results,
                resume: answers,
            } = input.new_input()
            else {
                panic!("{text}: {:?}, wanted answers", input.new_input());
            };
            let mark = |r: &ClientToolResult| if r.is_error() { "!" } else { "" };
            let got: Vec<(String, usize)> = tool_results
                .iter()
                .map(|r| {
                    (
                        format!("{}:{}{}", r.call_id(), mark(r), r.content()),
                        r.index(),
                    )
                })
                .collect();
            let want: Vec<(String, usize)> =
                results.iter().map(|(s, i)| ((*s).to_owned(), *i)).collect();
            assert_eq!(got, want, "{text}");
            let got: Vec<(String, usize)> = answers
                .iter()
                .map(|a| {
                    (
                        format!("{}:{}", a.interrupt_id(), a.decision().as_str()),
                        a.index(),
                    )
                })
                .collect();
            let want: Vec<(String, usize)> =
                resume.iter().map(|(s, i)| ((*s).to_owned(), *i)).collect();
            assert_eq!(got, want, "{text}");
        }
        (Err(e), Want::Refused(path, rule)) => {
            assert_eq!((e.path(), e.rule()), (*path, *rule), "{text}: {e}");
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(SECRET), "{shown} echoes the content");
            assert!(shown.contains(&format!("(rule {rule})")), "{shown}");
        }
        (got, want) => panic!("{text}: got {got:?}, wanted {want:?}"),
    }
}

fn limits() -> InputLimits {
    InputLimits::default()
}

/// Checks each case under `l`.
fn cases(l: &InputLimits, cases: Vec<(Value, Want<'_>)>) {
    for (b, want) in cases {
        check(l, &b, want);
    }
}

fn refused<'a>(b: Value, path: &'a str, rule: &'a str) -> (Value, Want<'a>) {
    (b, Want::Refused(path, rule))
}

fn hi(extra: Value) -> Value {
    body(user(json!("Hi")), extra)
}

const HI: Want<'static> = Want::User(&["text:Hi"]);

#[test]
fn the_body_and_its_ids() {
    let (thread, run) = ("agui.input.thread_id", "agui.input.run_id");
    cases(
        &limits(),
        vec![
            refused(json!("not an object"), "$", "agui.input.object"),
            refused(hi(json!({"threadId": null})), "threadId", thread),
            refused(hi(json!({"threadId": "SECRET/x"})), "threadId", thread),
            refused(hi(json!({"threadId": 7})), "threadId", thread),
            refused(hi(json!({"runId": null})), "runId", run),
            refused(hi(json!({"runId": ""})), "runId", run),
            refused(hi(json!({"runId": "SECRET\u{7}"})), "runId", run),
            refused(hi(json!({"runId": "x".repeat(129)})), "runId", run),
            (hi(json!({"runId": "x".repeat(128)})), HI),
        ],
    );
    // Strict JSON: a repeated member is refused, naming it.
    let l = limits();
    let text = r#"{"threadId":"t","threadId":"u","runId":"r","messages":[]}"#;
    let e = RunAgentInput::parse(text, &l).expect_err("a repeated member");
    assert_eq!((e.path(), e.rule()), ("$.threadId", "agui.input.json"));
    let e = RunAgentInput::parse("{", &l).expect_err("not JSON");
    assert_eq!(e.rule(), "agui.input.json");
    let input = RunAgentInput::parse(&hi(json!({})).to_string(), &l).expect("parses");
    let ids = (input.thread_id().as_str(), input.run_id().as_str());
    assert_eq!(ids, ("t-1", "run-a"));
}

#[test]
fn members_accepted_and_not_used_are_bounded() {
    let (id, opaque) = ("agui.input.client_id", "agui.input.opaque_bytes");
    let big = "x".repeat(70_000);
    cases(
        &limits(),
        vec![
            refused(hi(json!({"parentRunId": 3})), "parentRunId", id),
            refused(
                hi(json!({"protocolVersion": "x".repeat(129)})),
                "protocolVersion",
                id,
            ),
            (
                hi(json!({"parentRunId": "r0", "protocolVersion": "1.0"})),
                HI,
            ),
            refused(hi(json!({"state": {"SECRET": big}})), "state", opaque),
            refused(
                hi(json!({"forwardedProps": [big]})),
                "forwardedProps",
                opaque,
            ),
            (
                hi(json!({"state": {"a": "x".repeat(60_000)}, "forwardedProps": {}})),
                HI,
            ),
            (hi(json!({"unknownMember": [1, 2]})), HI),
        ],
    );
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "Does it.", "parameters": {"type": "object"}})
}

#[test]
fn frontend_tools_are_checked_as_keel_tools() {
    let l = InputLimits {
        max_tools: 2,
        ..limits()
    };
    let tools = |tools: Value| hi(json!({ "tools": tools }));
    let rule = "agui.input.tools";
    let big = json!({"SECRET": "x".repeat(70_000)});
    cases(
        &l,
        vec![
            refused(tools(json!({"a": 1})), "tools", rule),
            refused(
                tools(json!([tool("a"), tool("b"), tool("c")])),
                "tools",
                rule,
            ),
            refused(tools(json!(["a"])), "tools[0]", rule),
            refused(
                tools(json!([tool("SECRET name")])),
                "tools[0].name",
                "tool_name",
            ),
            refused(tools(json!([{"description": "x"}])), "tools[0].name", rule),
            refused(
                tools(json!([tool("a"), tool("a")])),
                "tools[1].name",
                "agui.input.tool_name_unique",
            ),
            refused(tools(json!([{"name": "a"}])), "tools[0].description", rule),
            refused(
                tools(json!([{"name": "a", "description": "x".repeat(9000)}])),
                "tools[0].description",
                "limits.tool_description_bytes",
            ),
            refused(
                tools(json!([{"name": "a", "description": "x", "parameters": {"type": "string"}}])),
                "tools[0].parameters",
                "tool.parameters_object",
            ),
            refused(
                tools(json!([{"name": "a", "description": "x", "parameters": big}])),
                "tools[0].parameters",
                "agui.input.opaque_bytes",
            ),
        ],
    );
}

#[test]
fn frontend_tools_read_as_declared() {
    let declared = json!([{"name": "a", "description": "Does a.", "parameters": null}, tool("b")]);
    let text = hi(json!({ "tools": declared })).to_string();
    let input = RunAgentInput::parse(&text, &limits()).expect("parses");
    let got: Vec<(&str, &str, &str)> = input
        .tools()
        .iter()
        .map(|t| (t.name().as_str(), t.description(), t.parameters().as_str()))
        .collect();
    let any = r#"{"type":"object"}"#;
    assert_eq!(got, [("a", "Does a.", any), ("b", "Does it.", any)]);
    assert_eq!(input.tools()[1].definition().name().as_str(), "b");
}

fn ctx(description: &str, value: &str) -> Value {
    json!({"description": description, "value": value})
}

#[test]
fn context_is_the_first_text_part() {
    let l = InputLimits {
        max_context: 2,
        ..limits()
    };
    let rule = "agui.input.context";
    let context = |entries: Value| hi(json!({ "context": entries }));
    let three = json!([ctx("a", "b"), ctx("a", "b"), ctx("a", "b")]);
    cases(
        &l,
        vec![
            (
                context(json!([ctx("city", "Oslo"), ctx("unit", "C")])),
                Want::User(&["text:Context:\n- city: Oslo\n- unit: C\n", "text:Hi"]),
            ),
            (context(json!([])), HI),
            refused(context(three), "context", rule),
            refused(
                context(json!([{"description": "d", "value": 1}])),
                "context[0].value",
                rule,
            ),
            refused(
                context(json!([{"value": "v"}])),
                "context[0].description",
                rule,
            ),
            refused(context(json!(["SECRET"])), "context[0]", rule),
        ],
    );
    let tiny = InputLimits {
        message: Limits {
            part_bytes: 256,
            ..Limits::default()
        },
        ..limits()
    };
    let long = context(json!([ctx("d", &"x".repeat(300))]));
    check(&tiny, &long, Want::Refused("context", "limits.part_bytes"));
}

fn approve(id: &str, approved: bool) -> Value {
    json!({"interruptId": id, "status": "resolved", "payload": {"approved": approved}})
}

/// A body whose messages end with an assistant's tool call.
fn asked(extra: Value) -> Value {
    let messages = json!([{"id": "m1", "role": "user", "content": "Hi"},
                          {"id": "m2", "role": "assistant", "toolCalls": []}]);
    body(messages, extra)
}

#[test]
fn resume_entries_answer_approvals() {
    let l = InputLimits {
        max_resume: 2,
        ..limits()
    };
    let cancel = |id: &str| json!({"interruptId": id, "status": "cancelled"});
    let resume = |entries: Value| asked(json!({ "resume": entries }));
    cases(
        &l,
        vec![
            (
                resume(json!([approve("i_1", true), cancel("i_2")])),
                Want::Answers(&[], &[("i_1:approved", 0), ("i_2:denied", 1)]),
            ),
            (
                resume(json!([approve("i_1", false)])),
                Want::Answers(&[], &[("i_1:denied", 0)]),
            ),
            refused(
                resume(json!([])),
                "messages[1].role",
                "agui.input.new_input",
            ),
            refused(
                hi(json!({"resume": [approve("i_1", true)]})),
                "resume",
                "agui.input.one_input",
            ),
        ],
    );
}

#[test]
fn resume_entries_are_checked() {
    let l = InputLimits {
        max_resume: 2,
        ..limits()
    };
    let (rule, payload) = ("agui.input.resume", "agui.input.resume_payload");
    let resume = |entries: Value| asked(json!({ "resume": entries }));
    let no_payload = json!([{"interruptId": "i_1", "status": "resolved"}]);
    let yes = json!([{"interruptId": "i_1", "status": "resolved", "payload": {"approved": "yes"}}]);
    let three = json!([
        approve("i_1", true),
        approve("i_2", true),
        approve("i_3", true)
    ]);
    cases(
        &l,
        vec![
            refused(resume(three), "resume", rule),
            refused(resume(json!({})), "resume", rule),
            refused(resume(json!([7])), "resume[0]", rule),
            refused(resume(no_payload), "resume[0].payload.approved", payload),
            refused(resume(yes), "resume[0].payload.approved", payload),
            refused(
                resume(json!([{"interruptId": "i_1", "status": "done"}])),
                "resume[0].status",
                rule,
            ),
            refused(
                resume(json!([approve("SECRET/1", true)])),
                "resume[0].interruptId",
                "ids.charset",
            ),
            refused(
                resume(json!([{"status": "cancelled"}])),
                "resume[0].interruptId",
                rule,
            ),
            refused(
                resume(json!([approve("i_1", true), approve("i_1", false)])),
                "resume[1].interruptId",
                "agui.input.resume_unique",
            ),
        ],
    );
}

#[test]
fn messages_and_the_new_input() {
    let l = InputLimits {
        max_messages: 3,
        max_id_bytes: 8,
        ..limits()
    };
    let m = |id: &str, role: &str| json!({"id": id, "role": role, "content": "x"});
    let activity = json!({"id": "2", "role": "activity", "activityType": "a", "content": {}});
    let rule = "agui.input.messages";
    let messages = |messages: Value| body(messages, json!({}));
    let four = json!([
        m("1", "user"),
        m("2", "assistant"),
        m("3", "user"),
        m("4", "user")
    ]);
    cases(
        &l,
        vec![
            refused(messages(json!(null)), "messages", rule),
            refused(messages(json!({})), "messages", rule),
            refused(messages(json!([])), "messages", "agui.input.new_input"),
            refused(messages(four), "messages", rule),
            refused(
                messages(json!([m("1", "system"), "SECRET"])),
                "messages[1]",
                rule,
            ),
            refused(messages(json!([{"role": "user"}])), "messages[0].id", rule),
            refused(
                messages(json!([m("123456789", "user")])),
                "messages[0].id",
                "agui.input.client_id",
            ),
            refused(
                messages(json!([m("1", "SECRET")])),
                "messages[0].role",
                rule,
            ),
            refused(
                messages(json!([m("1", "user"), m("2", "assistant")])),
                "messages[1].role",
                "agui.input.new_input",
            ),
            (
                messages(json!([
                    m("1", "developer"),
                    m("2", "reasoning"),
                    m("3", "user")
                ])),
                Want::User(&["text:x"]),
            ),
            (
                messages(json!([m("1", "assistant"), activity, m("3", "user")])),
                Want::User(&["text:x"]),
            ),
        ],
    );
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn data(kind: &str, mime: &str, value: &str) -> Value {
    json!({"type": kind, "source": {"type": "data", "value": value, "mimeType": mime}})
}

fn url(kind: &str, mime: &str, value: &str) -> Value {
    json!({"type": kind, "source": {"type": "url", "value": value, "mimeType": mime}})
}

fn document(value: &str, filename: Value) -> Value {
    json!({"type": "document", "source": {"type": "data", "value": value, "mimeType": "text/plain"},
           "metadata": {"filename": filename}})
}

/// A body whose user message has `content`.
fn said(content: Value) -> Value {
    body(user(content), json!({}))
}

fn part_limits() -> InputLimits {
    InputLimits {
        message: Limits {
            media_parts_per_message: 2,
            parts_per_message: 4,
            ..Limits::default()
        },
        ..limits()
    }
}

#[test]
fn user_content_parts_become_keel_parts() {
    let png = data("image", "image/png", PNG);
    let binary_png = json!({"type": "binary", "mimeType": "image/png", "data": PNG});
    let binary_text =
        json!({"type": "binary", "mimeType": "text/plain", "data": HELLO, "filename": "b.txt"});
    let binary_url =
        json!({"type": "binary", "mimeType": "image/png", "url": "https://example.com/a.png"});
    cases(
        &part_limits(),
        vec![
            (
                said(json!([png, text("What is it?"), text("")])),
                Want::User(&["image:image/png:bytes", "text:What is it?"]),
            ),
            (
                said(json!([text("a"), text("b")])),
                Want::User(&["text:a", "text:b"]),
            ),
            (
                said(json!([data("document", "application/pdf", PDF)])),
                Want::User(&["file:application/pdf:attachment"]),
            ),
            (
                said(json!([document(HELLO, json!("a.txt"))])),
                Want::User(&["file:text/plain:a.txt"]),
            ),
            (
                said(json!([url(
                    "image",
                    "image/jpeg",
                    "https://example.com/a.jpg"
                )])),
                Want::User(&["image:image/jpeg:url"]),
            ),
            (
                said(json!([binary_png, binary_text])),
                Want::User(&["image:image/png:bytes", "file:text/plain:b.txt"]),
            ),
            (
                said(json!([binary_url])),
                Want::User(&["image:image/png:url"]),
            ),
        ],
    );
}

#[test]
fn user_content_shapes_are_checked() {
    let (at, rule) = ("messages[0].content", "agui.input.user_content");
    let five = json!([text("1"), text("2"), text("3"), text("4"), text("5")]);
    let png = data("image", "image/png", PNG);
    let no_type =
        json!([{"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}]);
    let no_value = json!([{"type": "image", "source": {"type": "data", "mimeType": "image/png"}}]);
    cases(
        &part_limits(),
        vec![
            refused(said(json!("")), at, rule),
            refused(said(json!([text("")])), at, rule),
            refused(said(json!(7)), at, rule),
            refused(said(five), at, "limits.parts_per_message"),
            refused(said(json!(["SECRET"])), "messages[0].content[0]", rule),
            refused(
                said(json!([{"type": "text"}])),
                "messages[0].content[0].text",
                rule,
            ),
            refused(
                said(json!([png, png, png])),
                "messages[0].content[2]",
                "limits.media_parts_per_message",
            ),
            refused(
                said(no_type),
                "messages[0].content[0].source.mimeType",
                rule,
            ),
            refused(said(no_value), "messages[0].content[0].source.value", rule),
            refused(
                said(json!([{"type": "image"}])),
                "messages[0].content[0].source",
                rule,
            ),
            refused(
                said(json!([document(HELLO, json!(3))])),
                "messages[0].content[0].metadata.filename",
                rule,
            ),
        ],
    );
}

#[test]
fn audio_video_and_unknown_parts_are_refused() {
    cases(
        &part_limits(),
        vec![
            refused(
                said(json!([data("audio", "audio/wav", "SECRET")])),
                "messages[0].content[0].type",
                "agui.input.part_type",
            ),
            refused(
                said(json!([{"type": "SECRET"}])),
                "messages[0].content[0].type",
                "agui.input.part_type",
            ),
        ],
    );
}

#[test]
fn user_media_follows_the_chat_file_rules() {
    let (at, value) = (
        "messages[0].content[0].source.mimeType",
        "messages[0].content[0].source.value",
    );
    let file = json!({"type": "image", "source": {"type": "file", "value": "SECRET", "mimeType": "image/png"}});
    let doc_url = url(
        "document",
        "application/pdf",
        "https://example.com/SECRET.pdf",
    );
    cases(
        &part_limits(),
        vec![
            refused(
                said(json!([data("image", "image/svg+xml", "SECRET")])),
                at,
                "agui.input.media_type",
            ),
            refused(
                said(json!([data("document", "text/html", "SECRET")])),
                at,
                "agui.input.media_type",
            ),
            refused(
                said(json!([data("image", "application/pdf", PDF)])),
                at,
                "agui.input.part_media_type",
            ),
            refused(
                said(json!([data("document", "image/png", PNG)])),
                at,
                "agui.input.part_media_type",
            ),
            refused(said(json!([doc_url])), value, "agui.input.document_source"),
            refused(
                said(json!([url(
                    "image",
                    "image/png",
                    "http://example.com/SECRET.png"
                )])),
                value,
                "message.image_url",
            ),
            refused(
                said(json!([data("image", "image/png", "SECRET!!")])),
                value,
                "message.base64",
            ),
            refused(
                said(json!([data("image", "image/jpeg", PNG)])),
                value,
                "message.image_signature",
            ),
            refused(
                said(json!([data("document", "application/pdf", HELLO)])),
                value,
                "message.file_signature",
            ),
            refused(
                said(json!([file])),
                "messages[0].content[0].source.type",
                "agui.input.source_type",
            ),
            refused(
                said(json!([document(HELLO, json!(".."))])),
                "messages[0].content[0].metadata.filename",
                "message.file_name",
            ),
        ],
    );
}

#[test]
fn user_media_is_bounded_by_the_message_limits() {
    let value = "messages[0].content[0].source.value";
    let small = InputLimits {
        message: Limits {
            image_bytes: 8,
            ..Limits::default()
        },
        ..limits()
    };
    let big = said(json!([data("image", "image/png", PNG)]));
    check(&small, &big, Want::Refused(value, "limits.image_bytes"));
}

#[test]
fn legacy_binary_parts_follow_the_same_rules() {
    let rule = "agui.input.user_content";
    let only_id = json!({"type": "binary", "mimeType": "image/png", "id": "SECRET"});
    let no_type = json!({"type": "binary", "data": PNG});
    let doc_url =
        json!({"type": "binary", "mimeType": "text/plain", "url": "https://example.com/SECRET"});
    let bad_name =
        json!({"type": "binary", "mimeType": "text/plain", "data": HELLO, "filename": ".."});
    let svg = json!({"type": "binary", "mimeType": "image/svg+xml", "data": "SECRET"});
    cases(
        &part_limits(),
        vec![
            refused(said(json!([only_id])), "messages[0].content[0].data", rule),
            refused(
                said(json!([no_type])),
                "messages[0].content[0].mimeType",
                rule,
            ),
            refused(
                said(json!([doc_url])),
                "messages[0].content[0].url",
                "agui.input.document_source",
            ),
            refused(
                said(json!([bad_name])),
                "messages[0].content[0].filename",
                "message.file_name",
            ),
            refused(
                said(json!([svg])),
                "messages[0].content[0].mimeType",
                "agui.input.media_type",
            ),
        ],
    );
}

fn tool_message(id: &str, call: &str, content: Value) -> Value {
    json!({"id": id, "role": "tool", "toolCallId": call, "content": content})
}

fn tool_limits() -> InputLimits {
    InputLimits {
        message: Limits {
            part_bytes: 64,
            ..Limits::default()
        },
        ..limits()
    }
}

const ASSISTANT: &str = r#"{"id": "m2", "role": "assistant", "toolCalls": []}"#;

fn assistant() -> Value {
    serde_json::from_str(ASSISTANT).unwrap_or_default()
}

#[test]
fn tool_messages_answer_the_live_run() {
    let parts = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
    let failed = json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "", "error": "no camera"});
    let approve = json!({"resume": [approve("i_1", true)]});
    let user = json!({"id": "u", "role": "user", "content": "x"});
    cases(
        &tool_limits(),
        vec![
            (
                body(
                    json!([
                        assistant(),
                        tool_message("t1", "c1", json!("sunny")),
                        tool_message("t2", "c2", parts)
                    ]),
                    json!({}),
                ),
                Want::Answers(&[("c1:sunny", 1), ("c2:ab", 2)], &[]),
            ),
            (
                body(
                    json!([assistant(), tool_message("t1", "c1", json!("x"))]),
                    approve,
                ),
                Want::Answers(&[("c1:x", 1)], &[("i_1:approved", 0)]),
            ),
            (
                body(json!([assistant(), failed]), json!({})),
                Want::Answers(&[("c1:!no camera", 1)], &[]),
            ),
            (
                body(
                    json!([
                        tool_message("t0", "c0", json!("old")),
                        user,
                        assistant(),
                        tool_message("t1", "c1", json!("new"))
                    ]),
                    json!({}),
                ),
                Want::Answers(&[("c1:new", 3)], &[]),
            ),
        ],
    );
}

#[test]
fn tool_messages_are_checked() {
    let rule = "agui.input.messages";
    let answers = |tools: Vec<Value>| {
        let mut messages = vec![assistant()];
        messages.extend(tools);
        body(Value::Array(messages), json!({}))
    };
    let image = json!([{"type": "image", "source": {"type": "url", "value": "https://example.com/SECRET"}}]);
    let bad_error =
        json!({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "", "error": 5});
    let no_call = json!({"id": "t1", "role": "tool", "content": "a"});
    cases(
        &tool_limits(),
        vec![
            refused(
                answers(vec![
                    tool_message("t1", "c1", json!("a")),
                    tool_message("t2", "c1", json!("b")),
                ]),
                "messages[2].toolCallId",
                "agui.input.tool_result_unique",
            ),
            refused(
                answers(vec![tool_message("t1", "SECRET/1", json!("a"))]),
                "messages[1].toolCallId",
                "ids.charset",
            ),
            refused(answers(vec![no_call]), "messages[1].toolCallId", rule),
            refused(
                answers(vec![tool_message("t1", "c1", image)]),
                "messages[1].content[0]",
                "agui.input.tool_content",
            ),
            refused(
                answers(vec![tool_message("t1", "c1", json!(3))]),
                "messages[1].content",
                rule,
            ),
            refused(
                answers(vec![tool_message("t1", "c1", json!("SECRET".repeat(20)))]),
                "messages[1].content",
                "limits.part_bytes",
            ),
            refused(answers(vec![bad_error]), "messages[1].error", rule),
        ],
    );
}

#[test]
fn agui_run_ids_are_bounded_and_printable() {
    let id = AguiRunId::parse("run 1 ✓").map(|r| r.to_string());
    assert_eq!(id, Ok("run 1 ✓".to_owned()));
    assert!(AguiRunId::parse("").is_err());
    assert!(AguiRunId::parse(&"x".repeat(AGUI_ID_MAX_BYTES + 1)).is_err());
    assert!(AguiRunId::parse("a\nb").is_err());
    assert_eq!(InteractionDecisionWire::Approved.as_str(), "approved");
    assert_eq!(InteractionDecisionWire::Denied.as_str(), "denied");
}
