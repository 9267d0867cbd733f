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

#[test]
fn the_body_and_its_ids() {
    let l = limits();
    let hi = user(json!("Hi"));
    let long = "x".repeat(129);
    for (b, want) in [
        (
            json!("not an object"),
            Want::Refused("$", "agui.input.object"),
        ),
        (
            body(hi.clone(), json!({"threadId": null})),
            Want::Refused("threadId", "agui.input.thread_id"),
        ),
        (
            body(hi.clone(), json!({"threadId": "SECRET/x"})),
            Want::Refused("threadId", "agui.input.thread_id"),
        ),
        (
            body(hi.clone(), json!({"threadId": 7})),
            Want::Refused("threadId", "agui.input.thread_id"),
        ),
        (
            body(hi.clone(), json!({"runId": null})),
            Want::Refused("runId", "agui.input.run_id"),
        ),
        (
            body(hi.clone(), json!({"runId": ""})),
            Want::Refused("runId", "agui.input.run_id"),
        ),
        (
            body(hi.clone(), json!({"runId": "SECRET\u{7}"})),
            Want::Refused("runId", "agui.input.run_id"),
        ),
        (
            body(hi.clone(), json!({"runId": long})),
            Want::Refused("runId", "agui.input.run_id"),
        ),
        (
            body(hi.clone(), json!({"runId": "x".repeat(128)})),
            Want::User(&["text:Hi"]),
        ),
        (
            body(hi.clone(), json!({"parentRunId": 3})),
            Want::Refused("parentRunId", "agui.input.client_id"),
        ),
        (
            body(hi.clone(), json!({"protocolVersion": "x".repeat(129)})),
            Want::Refused("protocolVersion", "agui.input.client_id"),
        ),
        (
            body(
                hi.clone(),
                json!({"parentRunId": "r0", "protocolVersion": "1.0"}),
            ),
            Want::User(&["text:Hi"]),
        ),
        (
            body(hi.clone(), json!({"state": {"SECRET": "x".repeat(70_000)}})),
            Want::Refused("state", "agui.input.opaque_bytes"),
        ),
        (
            body(hi.clone(), json!({"forwardedProps": ["x".repeat(70_000)]})),
            Want::Refused("forwardedProps", "agui.input.opaque_bytes"),
        ),
        (
            body(
                hi.clone(),
                json!({"state": {"a": "x".repeat(60_000)}, "forwardedProps": {}}),
            ),
            Want::User(&["text:Hi"]),
        ),
        (
            body(hi.clone(), json!({"unknownMember": [1, 2]})),
            Want::User(&["text:Hi"]),
        ),
    ] {
        check(&l, &b, want);
    }
    // Strict JSON: a repeated member is refused, naming it.
    let text = r#"{"threadId":"t","threadId":"u","runId":"r","messages":[]}"#;
    let e = RunAgentInput::parse(text, &l).expect_err("a repeated member");
    assert_eq!((e.path(), e.rule()), ("$.threadId", "agui.input.json"));
    let e = RunAgentInput::parse("{", &l).expect_err("not JSON");
    assert_eq!(e.rule(), "agui.input.json");
    let input = RunAgentInput::parse(&body(hi, json!({})).to_string(), &l).expect("parses");
    assert_eq!(
        (input.thread_id().as_str(), input.run_id().as_str()),
        ("t-1", "run-a")
    );
}

#[test]
fn frontend_tools() {
    let l = InputLimits {
        max_tools: 2,
        ..limits()
    };
    let hi = user(json!("Hi"));
    let tool = |name: &str| json!({"name": name, "description": "Does it.", "parameters": {"type": "object"}});
    for (tools, want) in [
        (json!({"a": 1}), Want::Refused("tools", "agui.input.tools")),
        (
            json!([tool("a"), tool("b"), tool("c")]),
            Want::Refused("tools", "agui.input.tools"),
        ),
        (json!(["a"]), Want::Refused("tools[0]", "agui.input.tools")),
        (
            json!([tool("SECRET name")]),
            Want::Refused("tools[0].name", "tool_name"),
        ),
        (
            json!([{"description": "x"}]),
            Want::Refused("tools[0].name", "agui.input.tools"),
        ),
        (
            json!([tool("a"), tool("a")]),
            Want::Refused("tools[1].name", "agui.input.tool_name_unique"),
        ),
        (
            json!([{"name": "a"}]),
            Want::Refused("tools[0].description", "agui.input.tools"),
        ),
        (
            json!([{"name": "a", "description": "x".repeat(9000)}]),
            Want::Refused("tools[0].description", "limits.tool_description_bytes"),
        ),
        (
            json!([{"name": "a", "description": "x", "parameters": {"type": "string"}}]),
            Want::Refused("tools[0].parameters", "tool.parameters_object"),
        ),
        (
            json!([{"name": "a", "description": "x", "parameters": {"SECRET": "x".repeat(70_000)}}]),
            Want::Refused("tools[0].parameters", "agui.input.opaque_bytes"),
        ),
        (
            json!([{"name": "a", "description": "x", "parameters": null}, tool("b")]),
            Want::User(&["text:Hi"]),
        ),
    ] {
        check(&l, &body(hi.clone(), json!({"tools": tools})), want);
    }
    let declared = json!([{"name": "a", "description": "Does a."}, tool("b")]);
    let text = body(hi, json!({"tools": declared})).to_string();
    let input = RunAgentInput::parse(&text, &l).expect("parses");
    let got: Vec<(&str, &str, &str)> = input
        .tools()
        .iter()
        .map(|t| (t.name().as_str(), t.description(), t.parameters().as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("a", "Does a.", r#"{"type":"object"}"#),
            ("b", "Does it.", r#"{"type":"object"}"#)
        ]
    );
    assert_eq!(input.tools()[0].definition().name().as_str(), "a");
}

#[test]
fn context_and_resume() {
    let l = InputLimits {
        max_context: 2,
        max_resume: 2,
        ..limits()
    };
    let hi = user(json!("Hi"));
    let asked = json!([{"id": "m1", "role": "user", "content": "Hi"},
                       {"id": "m2", "role": "assistant", "toolCalls": []}]);
    let ctx = |d: &str, v: &str| json!({"description": d, "value": v});
    let approve = |id: &str, approved: bool| json!({"interruptId": id, "status": "resolved", "payload": {"approved": approved}});
    for (b, want) in [
        (
            body(
                hi.clone(),
                json!({"context": [ctx("city", "Oslo"), ctx("unit", "C")]}),
            ),
            Want::User(&["text:Context:\n- city: Oslo\n- unit: C\n", "text:Hi"]),
        ),
        (
            body(hi.clone(), json!({"context": []})),
            Want::User(&["text:Hi"]),
        ),
        (
            body(
                hi.clone(),
                json!({"context": [ctx("a", "b"), ctx("a", "b"), ctx("a", "b")]}),
            ),
            Want::Refused("context", "agui.input.context"),
        ),
        (
            body(
                hi.clone(),
                json!({"context": [{"description": "d", "value": 1}]}),
            ),
            Want::Refused("context[0].value", "agui.input.context"),
        ),
        (
            body(hi.clone(), json!({"context": [{"value": "v"}]})),
            Want::Refused("context[0].description", "agui.input.context"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [approve("i_1", true), {"interruptId": "i_2", "status": "cancelled"}]}),
            ),
            Want::Answers(&[], &[("i_1:approved", 0), ("i_2:denied", 1)]),
        ),
        (
            body(asked.clone(), json!({"resume": [approve("i_1", false)]})),
            Want::Answers(&[], &[("i_1:denied", 0)]),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [approve("i_1", true), approve("i_2", true), approve("i_3", true)]}),
            ),
            Want::Refused("resume", "agui.input.resume"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [{"interruptId": "i_1", "status": "resolved"}]}),
            ),
            Want::Refused("resume[0].payload.approved", "agui.input.resume_payload"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [{"interruptId": "i_1", "status": "resolved", "payload": {"approved": "yes"}}]}),
            ),
            Want::Refused("resume[0].payload.approved", "agui.input.resume_payload"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [{"interruptId": "i_1", "status": "done"}]}),
            ),
            Want::Refused("resume[0].status", "agui.input.resume"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [approve("SECRET/1", true)]}),
            ),
            Want::Refused("resume[0].interruptId", "ids.charset"),
        ),
        (
            body(asked.clone(), json!({"resume": [{"status": "cancelled"}]})),
            Want::Refused("resume[0].interruptId", "agui.input.resume"),
        ),
        (
            body(
                asked.clone(),
                json!({"resume": [approve("i_1", true), approve("i_1", false)]}),
            ),
            Want::Refused("resume[1].interruptId", "agui.input.resume_unique"),
        ),
        (
            body(asked.clone(), json!({"resume": [7]})),
            Want::Refused("resume[0]", "agui.input.resume"),
        ),
        (
            body(hi.clone(), json!({"resume": [approve("i_1", true)]})),
            Want::Refused("resume", "agui.input.one_input"),
        ),
        (
            body(asked.clone(), json!({"resume": []})),
            Want::Refused("messages[1].role", "agui.input.new_input"),
        ),
    ] {
        check(&l, &b, want);
    }
}

#[test]
fn messages_and_the_new_input() {
    let l = InputLimits {
        max_messages: 3,
        max_id_bytes: 8,
        ..limits()
    };
    let m = |id: &str, role: &str| json!({"id": id, "role": role, "content": "x"});
    for (messages, want) in [
        (
            json!(null),
            Want::Refused("messages", "agui.input.messages"),
        ),
        (json!({}), Want::Refused("messages", "agui.input.messages")),
        (json!([]), Want::Refused("messages", "agui.input.new_input")),
        (
            json!([
                m("1", "user"),
                m("2", "assistant"),
                m("3", "user"),
                m("4", "user")
            ]),
            Want::Refused("messages", "agui.input.messages"),
        ),
        (
            json!([m("1", "system"), "SECRET"]),
            Want::Refused("messages[1]", "agui.input.messages"),
        ),
        (
            json!([{"role": "user", "content": "x"}]),
            Want::Refused("messages[0].id", "agui.input.messages"),
        ),
        (
            json!([m("123456789", "user")]),
            Want::Refused("messages[0].id", "agui.input.client_id"),
        ),
        (
            json!([m("1", "SECRET")]),
            Want::Refused("messages[0].role", "agui.input.messages"),
        ),
        (
            json!([m("1", "user"), m("2", "assistant")]),
            Want::Refused("messages[1].role", "agui.input.new_input"),
        ),
        (
            json!([m("1", "developer"), m("2", "reasoning"), m("3", "user")]),
            Want::User(&["text:x"]),
        ),
        (
            json!([m("1", "assistant"), {"id": "2", "role": "activity", "activityType": "a", "content": {}}, m("3", "user")]),
            Want::User(&["text:x"]),
        ),
    ] {
        check(&l, &body(messages, json!({})), want);
    }
}

#[test]
fn user_content_parts() {
    let l = InputLimits {
        message: Limits {
            media_parts_per_message: 2,
            parts_per_message: 4,
            ..Limits::default()
        },
        ..limits()
    };
    let text = |t: &str| json!({"type": "text", "text": t});
    let data = |kind: &str, mime: &str, value: &str| json!({"type": kind, "source": {"type": "data", "value": value, "mimeType": mime}});
    let url = |kind: &str, mime: &str, value: &str| json!({"type": kind, "source": {"type": "url", "value": value, "mimeType": mime}});
    let at = "messages[0].content";
    for (content, want) in [
        (
            json!([
                data("image", "image/png", PNG),
                text("What is it?"),
                text("")
            ]),
            Want::User(&["image:image/png:bytes", "text:What is it?"]),
        ),
        (
            json!([text("a"), text("b")]),
            Want::User(&["text:a", "text:b"]),
        ),
        (
            json!([data("document", "application/pdf", PDF)]),
            Want::User(&["file:application/pdf:attachment"]),
        ),
        (
            json!([{"type": "document", "source": {"type": "data", "value": HELLO, "mimeType": "text/plain"}, "metadata": {"filename": "a.txt"}}]),
            Want::User(&["file:text/plain:a.txt"]),
        ),
        (
            json!([url("image", "image/jpeg", "https://example.com/a.jpg")]),
            Want::User(&["image:image/jpeg:url"]),
        ),
        (
            json!([{"type": "binary", "mimeType": "image/png", "data": PNG}, {"type": "binary", "mimeType": "text/plain", "data": HELLO, "filename": "b.txt"}]),
            Want::User(&["image:image/png:bytes", "file:text/plain:b.txt"]),
        ),
        (
            json!([{"type": "binary", "mimeType": "image/png", "url": "https://example.com/a.png"}]),
            Want::User(&["image:image/png:url"]),
        ),
        (json!(""), Want::Refused(at, "agui.input.user_content")),
        (
            json!([text("")]),
            Want::Refused(at, "agui.input.user_content"),
        ),
        (json!(7), Want::Refused(at, "agui.input.user_content")),
        (
            json!([text("1"), text("2"), text("3"), text("4"), text("5")]),
            Want::Refused(at, "limits.parts_per_message"),
        ),
        (
            json!(["SECRET"]),
            Want::Refused("messages[0].content[0]", "agui.input.user_content"),
        ),
        (
            json!([{"type": "text"}]),
            Want::Refused("messages[0].content[0].text", "agui.input.user_content"),
        ),
        (
            json!([
                data("image", "image/png", PNG),
                data("image", "image/png", PNG),
                data("image", "image/png", PNG)
            ]),
            Want::Refused("messages[0].content[2]", "limits.media_parts_per_message"),
        ),
        (
            json!([data("audio", "audio/wav", "SECRET")]),
            Want::Refused("messages[0].content[0].type", "agui.input.part_type"),
        ),
        (
            json!([{"type": "SECRET"}]),
            Want::Refused("messages[0].content[0].type", "agui.input.part_type"),
        ),
        (
            json!([data("image", "image/svg+xml", "SECRET")]),
            Want::Refused(
                "messages[0].content[0].source.mimeType",
                "agui.input.media_type",
            ),
        ),
        (
            json!([data("document", "text/html", "SECRET")]),
            Want::Refused(
                "messages[0].content[0].source.mimeType",
                "agui.input.media_type",
            ),
        ),
        (
            json!([data("image", "application/pdf", PDF)]),
            Want::Refused(
                "messages[0].content[0].source.mimeType",
                "agui.input.part_media_type",
            ),
        ),
        (
            json!([data("document", "image/png", PNG)]),
            Want::Refused(
                "messages[0].content[0].source.mimeType",
                "agui.input.part_media_type",
            ),
        ),
        (
            json!([url(
                "document",
                "application/pdf",
                "https://example.com/SECRET.pdf"
            )]),
            Want::Refused(
                "messages[0].content[0].source.value",
                "agui.input.document_source",
            ),
        ),
        (
            json!([url("image", "image/png", "http://example.com/SECRET.png")]),
            Want::Refused("messages[0].content[0].source.value", "message.image_url"),
        ),
        (
            json!([data("image", "image/png", "SECRET!!")]),
            Want::Refused("messages[0].content[0].source.value", "message.base64"),
        ),
        (
            json!([data("image", "image/jpeg", PNG)]),
            Want::Refused(
                "messages[0].content[0].source.value",
                "message.image_signature",
            ),
        ),
        (
            json!([data("document", "application/pdf", HELLO)]),
            Want::Refused(
                "messages[0].content[0].source.value",
                "message.file_signature",
            ),
        ),
        (
            json!([{"type": "image", "source": {"type": "file", "value": "SECRET", "mimeType": "image/png"}}]),
            Want::Refused(
                "messages[0].content[0].source.type",
                "agui.input.source_type",
            ),
        ),
        (
            json!([{"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}}]),
            Want::Refused(
                "messages[0].content[0].source.mimeType",
                "agui.input.user_content",
            ),
        ),
        (
            json!([{"type": "image", "source": {"type": "data", "mimeType": "image/png"}}]),
            Want::Refused(
                "messages[0].content[0].source.value",
                "agui.input.user_content",
            ),
        ),
        (
            json!([{"type": "image"}]),
            Want::Refused("messages[0].content[0].source", "agui.input.user_content"),
        ),
        (
            json!([{"type": "document", "source": {"type": "data", "value": HELLO, "mimeType": "text/plain"}, "metadata": {"filename": ".."}}]),
            Want::Refused(
                "messages[0].content[0].metadata.filename",
                "message.file_name",
            ),
        ),
        (
            json!([{"type": "document", "source": {"type": "data", "value": HELLO, "mimeType": "text/plain"}, "metadata": {"filename": 3}}]),
            Want::Refused(
                "messages[0].content[0].metadata.filename",
                "agui.input.user_content",
            ),
        ),
        (
            json!([{"type": "binary", "mimeType": "image/png", "id": "SECRET"}]),
            Want::Refused("messages[0].content[0].data", "agui.input.user_content"),
        ),
        (
            json!([{"type": "binary", "data": PNG}]),
            Want::Refused("messages[0].content[0].mimeType", "agui.input.user_content"),
        ),
        (
            json!([{"type": "binary", "mimeType": "text/plain", "url": "https://example.com/SECRET"}]),
            Want::Refused("messages[0].content[0].url", "agui.input.document_source"),
        ),
        (
            json!([{"type": "binary", "mimeType": "text/plain", "data": HELLO, "filename": ".."}]),
            Want::Refused("messages[0].content[0].filename", "message.file_name"),
        ),
    ] {
        check(&l, &body(user(content), json!({})), want);
    }
    // The bounds of the message limits apply: an image beyond image_bytes.
    let small = InputLimits {
        message: Limits {
            image_bytes: 8,
            ..Limits::default()
        },
        ..limits()
    };
    let big = json!([data("image", "image/png", PNG)]);
    check(
        &small,
        &body(user(big), json!({})),
        Want::Refused("messages[0].content[0].source.value", "limits.image_bytes"),
    );
    let long_context = body(
        user(json!("Hi")),
        json!({"context": [{"description": "d", "value": "x".repeat(300)}]}),
    );
    let tiny = InputLimits {
        message: Limits {
            part_bytes: 256,
            ..Limits::default()
        },
        ..limits()
    };
    check(
        &tiny,
        &long_context,
        Want::Refused("context", "limits.part_bytes"),
    );
}

#[test]
fn tool_messages_answer_the_live_run() {
    let l = InputLimits {
        message: Limits {
            part_bytes: 64,
            ..Limits::default()
        },
        ..limits()
    };
    let asked = json!({"id": "m2", "role": "assistant", "toolCalls": []});
    let tool = |id: &str, call: &str, content: Value| json!({"id": id, "role": "tool", "toolCallId": call, "content": content});
    let approve =
        json!([{"interruptId": "i_1", "status": "resolved", "payload": {"approved": true}}]);
    for (messages, extra, want) in [
        (
            json!([
                asked,
                tool("t1", "c1", json!("sunny")),
                tool(
                    "t2",
                    "c2",
                    json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
                )
            ]),
            json!({}),
            Want::Answers(&[("c1:sunny", 1), ("c2:ab", 2)], &[]),
        ),
        (
            json!([asked, tool("t1", "c1", json!("x"))]),
            json!({"resume": approve}),
            Want::Answers(&[("c1:x", 1)], &[("i_1:approved", 0)]),
        ),
        (
            json!([asked, {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "", "error": "no camera"}]),
            json!({}),
            Want::Answers(&[("c1:!no camera", 1)], &[]),
        ),
        (
            json!([tool("t0", "c0", json!("old")), {"id": "u", "role": "user", "content": "x"}, asked, tool("t1", "c1", json!("new"))]),
            json!({}),
            Want::Answers(&[("c1:new", 3)], &[]),
        ),
        (
            json!([
                asked,
                tool("t1", "c1", json!("a")),
                tool("t2", "c1", json!("b"))
            ]),
            json!({}),
            Want::Refused("messages[2].toolCallId", "agui.input.tool_result_unique"),
        ),
        (
            json!([asked, tool("t1", "SECRET/1", json!("a"))]),
            json!({}),
            Want::Refused("messages[1].toolCallId", "ids.charset"),
        ),
        (
            json!([asked, {"id": "t1", "role": "tool", "content": "a"}]),
            json!({}),
            Want::Refused("messages[1].toolCallId", "agui.input.messages"),
        ),
        (
            json!([
                asked,
                tool(
                    "t1",
                    "c1",
                    json!([{"type": "image", "source": {"type": "url", "value": "https://example.com/SECRET"}}])
                )
            ]),
            json!({}),
            Want::Refused("messages[1].content[0]", "agui.input.tool_content"),
        ),
        (
            json!([asked, tool("t1", "c1", json!(3))]),
            json!({}),
            Want::Refused("messages[1].content", "agui.input.messages"),
        ),
        (
            json!([asked, tool("t1", "c1", json!("SECRET".repeat(20)))]),
            json!({}),
            Want::Refused("messages[1].content", "limits.part_bytes"),
        ),
        (
            json!([asked, {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "", "error": 5}]),
            json!({}),
            Want::Refused("messages[1].error", "agui.input.messages"),
        ),
    ] {
        check(&l, &body(messages, extra), want);
    }
}

#[test]
fn agui_run_ids_are_bounded_and_printable() {
    assert_eq!(
        AguiRunId::parse("run 1 ✓").map(|r| r.to_string()),
        Ok("run 1 ✓".to_owned())
    );
    assert!(AguiRunId::parse("").is_err());
    assert!(AguiRunId::parse(&"x".repeat(AGUI_ID_MAX_BYTES + 1)).is_err());
    assert!(AguiRunId::parse("a\nb").is_err());
    assert_eq!(InteractionDecisionWire::Approved.as_str(), "approved");
    assert_eq!(InteractionDecisionWire::Denied.as_str(), "denied");
}
