use super::{UsageBase, compaction_range, estimate, message_bytes, tokens_of};
use keel_eventlog::EstimatorKind;
use keel_eventlog::history::tool_result_part;
use keel_message::{
    CallId, CanonicalJson, Limits, Message, MessageId, Part, Role, ToolCallPart, ToolDefinition,
    ToolName,
};

/// A history from a compact notation: `s` system, `u` user, `a` assistant
/// without calls, `aN` assistant calling N tools (ids `c<index>.<k>`),
/// `t` the tool message answering the previous assistant's calls.
fn history(shape: &[&str]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut pending: Vec<CallId> = Vec::new();
    for (i, code) in shape.iter().enumerate() {
        let id = MessageId::parse(&format!("m{i}")).unwrap();
        let message = match *code {
            "s" => Message::text(id, Role::System, "be brief").unwrap(),
            "u" => Message::text(id, Role::User, "hello there").unwrap(),
            "t" => {
                let parts = pending
                    .drain(..)
                    .map(|c| tool_result_part(&c, "42", false, &Limits::default()).unwrap())
                    .collect();
                Message::new(id, Role::Tool, parts).unwrap()
            }
            a => {
                let n: usize = a[1..].parse().unwrap_or(0);
                let mut parts = vec![Part::text("thinking aloud").unwrap()];
                for k in 0..n {
                    let call = CallId::parse(&format!("c{i}.{k}")).unwrap();
                    pending.push(call.clone());
                    parts.push(Part::ToolCall(
                        ToolCallPart::new_with(
                            call,
                            ToolName::parse("f").unwrap(),
                            CanonicalJson::parse("{}").unwrap(),
                            &Limits::default(),
                        )
                        .unwrap(),
                    ));
                }
                Message::new(id, Role::Assistant, parts).unwrap()
            }
        };
        out.push(message);
    }
    out
}

fn check(name: &str, shape: &[&str], keep_turns: usize, want: Option<std::ops::Range<usize>>) {
    let got = compaction_range(&history(shape), keep_turns);
    assert_eq!(got, want, "{name}: {shape:?} keep {keep_turns}");
}

#[test]
fn the_range_keeps_system_messages_the_tail_and_every_call_with_its_result() {
    check("plain", &["s", "u", "a", "u", "a", "u"], 2, Some(1..4));
    check("keep nothing", &["s", "u", "a"], 0, Some(1..3));
    check("all kept", &["s", "u", "a"], 2, None);
    check("only system", &["s"], 0, None);
    // A tool loop: the tail (last 2 turns) is a1+t and a1+t.
    check(
        "tool loop",
        &["s", "u", "a1", "t", "a1", "t", "a1", "t"],
        2,
        Some(1..4),
    );
    // The range stops after the last system message before the tail.
    check(
        "late system",
        &["u", "a", "s", "u", "a", "u"],
        1,
        Some(3..5),
    );
    // A pending call (no result yet) stays, and so does all after it.
    check("pending call", &["s", "u", "a1", "u", "a"], 0, Some(1..2));
    check("no system", &["u", "a", "u"], 1, Some(0..2));
}

#[test]
fn a_result_before_the_range_start_moves_the_start_past_it() {
    // The result at 3 answers the call at 1, which a system message at 2
    // separates from it: the range may not start between them.
    let mut h = history(&["u", "a1", "u", "t", "u", "a", "u"]);
    h[2] = Message::text(MessageId::parse("sys").unwrap(), Role::System, "x").unwrap();
    assert_eq!(compaction_range(&h, 1), Some(4..6));
}

#[test]
fn the_estimator_uses_usage_when_it_describes_a_prefix_else_bytes() {
    let h = history(&["s", "u", "a", "u"]);
    let bytes = message_bytes(&h);
    let by_bytes = estimate(&h, &[], None, 4);
    assert_eq!(by_bytes.kind, EstimatorKind::Bytes);
    assert_eq!(by_bytes.tokens, bytes.div_ceil(4));
    let base = UsageBase {
        tokens: 1000,
        messages: 3,
    };
    let by_usage = estimate(&h, &[], Some(base), 4);
    assert_eq!(by_usage.kind, EstimatorKind::Usage);
    assert_eq!(by_usage.tokens, 1000 + message_bytes(&h[3..]).div_ceil(4));
    // A base past the history (it was compacted since) is not used.
    let stale = UsageBase {
        tokens: 1000,
        messages: 9,
    };
    assert_eq!(estimate(&h, &[], Some(stale), 4).kind, EstimatorKind::Bytes);
    // The bytes measure counts the tool definitions the request lists; a
    // usage base already does (the provider counted them).
    let tool = ToolDefinition::new(
        ToolName::parse("lookup").unwrap(),
        "finds things",
        CanonicalJson::parse(r#"{"type":"object"}"#).unwrap(),
    )
    .unwrap();
    let tool_bytes = serde_json::to_vec(&tool).unwrap().len() as u64;
    let tools = [tool];
    assert_eq!(
        estimate(&h, &tools, None, 4).tokens,
        (bytes + tool_bytes).div_ceil(4)
    );
    assert_eq!(estimate(&h, &tools, Some(base), 4), by_usage);
    assert_eq!(tokens_of(9, 4), 3);
    assert_eq!(tokens_of(8, 4), 2);
    assert_eq!(tokens_of(0, 4), 0);
}
