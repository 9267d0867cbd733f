//! The agent stream, event by event, through one `check` helper: the
//! events the client had (skipped) and the events fed, the response's
//! AG-UI types out, checked as a stream.

use super::*;
use crate::agui::check_stream;
use serde_json::json;

const KEEL_RUN: &str = "chat-t-1-1";
const THREAD: &str = "t-1";
const CLIENT_RUN: &str = "client-run-1";

fn ev(seq: u64, kind: &str, payload: &Value) -> Event {
    let line =
        json!({"kind": kind, "payload": payload, "run_id": KEEL_RUN, "seq": seq, "ts": 1000 * seq});
    Event::decode(&line.to_string()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

/// A run's events from a script of `(kind, payload)`, seq from 1.
fn run(script: &[(&str, Value)]) -> Vec<Event> {
    let seqs = 1u64..;
    seqs.zip(script)
        .map(|(seq, (kind, payload))| ev(seq, kind, payload))
        .collect()
}

fn stream(frontend: &[&str]) -> AgentStream {
    let thread = ChatId::parse(THREAD).unwrap_or_else(|e| panic!("{e}"));
    let run = AguiRunId::parse(CLIENT_RUN).unwrap_or_else(|e| panic!("{e}"));
    let tools = frontend
        .iter()
        .map(|t| ToolName::parse(t).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    AgentStream::new(thread, run, tools)
}

fn types(events: &[Value]) -> Vec<String> {
    let name = |e: &Value| match e["type"].as_str() {
        Some("CUSTOM") => format!("CUSTOM {}", e["name"].as_str().unwrap_or_default()),
        Some(t) => t.to_owned(),
        None => "?".to_owned(),
    };
    events.iter().map(name).collect()
}

/// One response: skips `events[..cut]`, opens, feeds the rest, and ends
/// at the pause if there is one. Checks the types, that the response
/// checks out as a stream, that every `RUN_*` event has the client's ids
/// and that every event past the opening carries a Keel line of the run.
fn check(
    events: &[Event],
    cut: usize,
    frontend: &[&str],
    expected: &[&str],
) -> (Vec<Value>, AgentStream) {
    let mut agent = stream(frontend);
    for event in &events[..cut] {
        agent.skip(event).unwrap_or_else(|e| panic!("skip: {e}"));
    }
    let keel = RunId::parse(KEEL_RUN).unwrap_or_else(|e| panic!("{e}"));
    let mut out: Vec<Value> = agent.started(&keel).iter().map(Stamped::to_value).collect();
    for event in &events[cut..] {
        let mapped = agent.feed(event).unwrap_or_else(|e| panic!("feed: {e}"));
        assert!(!mapped.is_empty(), "seq {} maps to nothing", event.seq());
        out.extend(mapped.iter().map(Stamped::to_value));
    }
    out.extend(
        agent
            .paused()
            .unwrap_or_default()
            .iter()
            .map(Stamped::to_value),
    );
    assert_eq!(types(&out), expected);
    check_stream(&out).unwrap_or_else(|e| panic!("{e}: {out:#?}"));
    for e in out.iter().filter(|e| {
        e["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("RUN_") && t != "RUN_ERROR")
    }) {
        assert_eq!(
            (e["threadId"].as_str(), e["runId"].as_str()),
            (Some(THREAD), Some(CLIENT_RUN))
        );
    }
    assert_eq!(out[1]["value"], json!({"run_id": KEEL_RUN}));
    for e in &out[2..] {
        assert_eq!(e["rawEvent"]["run_id"], KEEL_RUN, "{e}");
    }
    (out, agent)
}

fn turn(kind: &'static str) -> (&'static str, Value) {
    (kind, json!({"turn": 1}))
}
fn model(kind: &'static str, op: &str) -> (&'static str, Value) {
    let mut p = json!({"turn": 1, "operation_id": op});
    match kind {
        "model.started" => {
            p["model"] = json!("m");
            p["attempt"] = json!(1);
        }
        "model.completed" => p["finish"] = json!("tool_calls"),
        _ => {
            p["position"] = json!("partial");
            p["problem"] = json!({"kind": "unavailable", "message": "dropped", "retryable": true});
        }
    }
    (kind, p)
}
fn call(op: &str, call: &str, name: &str) -> (&'static str, Value) {
    let p = json!({"turn": 1, "operation_id": op, "call_id": call, "name": name, "arguments": {}});
    ("model.tool_call", p)
}
fn tool(kind: &'static str, call: &str, name: &str) -> (&'static str, Value) {
    let mut p = json!({"turn": 1, "call_id": call, "tool": name});
    match kind {
        "tool.completed" => p["output"] = json!("done"),
        "tool.failed" => p["error"] = json!("timed out"),
        _ => {}
    }
    (kind, p)
}
fn asked(interaction: &str, call: &str) -> (&'static str, Value) {
    let p =
        json!({"turn": 1, "interaction_id": interaction, "request": "approval", "call_id": call});
    ("interaction.started", p)
}
fn answered(interaction: &str, decision: &str) -> (&'static str, Value) {
    let p = json!({"turn": 1, "interaction_id": interaction, "decision": decision});
    ("interaction.completed", p)
}
fn opening() -> Vec<(&'static str, Value)> {
    vec![
        ("run.started", json!({"model": "m"})),
        turn("turn.started"),
        model("model.started", "op_1"),
    ]
}
fn text(op: &str, text: &str) -> (&'static str, Value) {
    (
        "model.text_delta",
        json!({"turn": 1, "operation_id": op, "text": text}),
    )
}

#[test]
fn a_new_run_opens_with_the_client_ids_and_the_keel_run() {
    let mut script = opening();
    script.extend([
        text("op_1", "Hi."),
        (
            "model.completed",
            json!({"turn": 1, "operation_id": "op_1", "finish": "stop"}),
        ),
        turn("turn.completed"),
        ("run.completed", json!({})),
    ]);
    let (out, agent) = check(
        &run(&script),
        0,
        &[],
        &[
            "RUN_STARTED",
            "CUSTOM keel.run",
            "CUSTOM keel.run.started",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    assert!(
        out[0].get("rawEvent").is_none(),
        "no Keel event stands for the opening"
    );
    assert_eq!(out[2]["value"], json!({"model": "m"}));
    assert_eq!(out[10]["outcome"], json!({"type": "success"}));
    assert!(agent.ended());
    assert_eq!((agent.paused(), agent.waits()), (None, vec![]));
}

/// A turn whose model asked for `delete` (an approval) and, when
/// `frontend`, `pick_color` (the client's).
fn asking(frontend: bool) -> Vec<(&'static str, Value)> {
    let mut script = opening();
    script.push(call("op_1", "c1", "delete"));
    if frontend {
        script.push(call("op_1", "c2", "pick_color"));
    }
    script.push(model("model.completed", "op_1"));
    script.push(asked("i_1", "c1"));
    if frontend {
        script.push(tool("tool.started", "c2", "pick_color"));
    }
    script
}

const ASKING: [&str; 11] = [
    "RUN_STARTED",
    "CUSTOM keel.run",
    "CUSTOM keel.run.started",
    "STEP_STARTED",
    "CUSTOM keel.model.started",
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "CUSTOM keel.model.completed",
    "CUSTOM keel.interaction.started",
    "STEP_FINISHED",
];

#[test]
fn an_approval_ends_the_response_with_an_interrupt() {
    let mut expected = ASKING.to_vec();
    expected.push("RUN_FINISHED");
    let (out, agent) = check(&run(&asking(false)), 0, &["pick_color"], &expected);
    let interrupt = json!({"type": "interrupt", "interrupts": [{"id": "i_1", "reason": "tool_approval",
        "toolCallId": "c1", "message": "Approve delete?"}]});
    assert_eq!(out[11]["outcome"], interrupt);
    assert_eq!(out[11]["rawEvent"]["kind"], "interaction.started");
    let approval = Wait::Approval {
        interrupt_id: InteractionId::parse("i_1").unwrap_or_else(|e| panic!("{e}")),
        call_id: CallId::parse("c1").unwrap_or_else(|e| panic!("{e}")),
        tool: ToolName::parse("delete").unwrap_or_else(|e| panic!("{e}")),
    };
    assert_eq!(agent.waits(), vec![approval]);
    assert!(!agent.ended());
}

#[test]
fn approvals_and_frontend_calls_pause_together() {
    let mut script = asking(true);
    let events = run(&script);
    let mut agent = stream(&["pick_color"]);
    for event in &events {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    let waits: Vec<String> = agent.waits().iter().map(|w| format!("{w:?}")).collect();
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(waits[1].starts_with("ClientTool"), "{waits:?}");
    let paused = agent.paused().unwrap_or_default();
    let outcome = paused.last().map(|e| e.to_value()["outcome"].clone());
    assert_eq!(
        outcome.and_then(|o| o["interrupts"].as_array().map(Vec::len)),
        Some(1)
    );
    // Before the frontend call starts, the run is not paused: c2 has no
    // result and nothing waits for it yet.
    script.pop();
    let mut agent = stream(&["pick_color"]);
    for event in &run(&script) {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(agent.paused(), None);
}

fn frontend_call() -> Vec<(&'static str, Value)> {
    let mut script = opening();
    script.extend([
        call("op_1", "c2", "pick_color"),
        model("model.completed", "op_1"),
        tool("tool.started", "c2", "pick_color"),
    ]);
    script
}

#[test]
fn a_frontend_call_ends_the_response_with_a_pending_success() {
    let (out, agent) = check(
        &run(&frontend_call()),
        0,
        &["pick_color"],
        &[
            "RUN_STARTED",
            "CUSTOM keel.run",
            "CUSTOM keel.run.started",
            "STEP_STARTED",
            "CUSTOM keel.model.started",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.tool.started",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    let pending = json!({"type": "success", "pendingToolCallIds": ["c2"]});
    assert_eq!(out[11]["outcome"], pending);
    assert_eq!(agent.waits().len(), 1);
    // The same call to an agent tool is not the client's: no pause.
    let mut agent = stream(&[]);
    for event in &run(&frontend_call()) {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!((agent.paused(), agent.waits()), (None, vec![]));
}

#[test]
fn the_next_response_continues_the_run_after_the_pause() {
    let mut script = frontend_call();
    let cut = script.len();
    script.extend([
        tool("tool.completed", "c2", "pick_color"),
        model("model.started", "op_2"),
        call("op_2", "c3", "pick_color"),
        model("model.completed", "op_2"),
        tool("tool.started", "c3", "pick_color"),
        tool("tool.failed", "c3", "pick_color"),
        turn("turn.completed"),
        ("run.completed", json!({})),
    ]);
    let (out, _) = check(
        &run(&script),
        cut,
        &["pick_color"],
        &[
            "RUN_STARTED",
            "CUSTOM keel.run",
            "STEP_STARTED",
            "CUSTOM keel.tool.completed",
            "CUSTOM keel.model.started",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "CUSTOM keel.model.completed",
            "CUSTOM keel.tool.started",
            "TOOL_CALL_RESULT",
            "CUSTOM keel.tool.failed",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ],
    );
    // The client's own result is not echoed; a failure (a timeout) is.
    assert_eq!(out[3]["value"]["output"], "done");
    assert_eq!(out[10]["error"], "timed out");
}

#[test]
fn an_agent_tool_result_is_a_tool_call_result() {
    let mut script = asking(false);
    let cut = script.len();
    script.extend([
        answered("i_1", "approved"),
        tool("tool.started", "c1", "delete"),
        tool("tool.completed", "c1", "delete"),
        turn("turn.completed"),
        ("run.cancelled", json!({})),
    ]);
    let (out, _) = check(
        &run(&script),
        cut,
        &["pick_color"],
        &[
            "RUN_STARTED",
            "CUSTOM keel.run",
            "STEP_STARTED",
            "CUSTOM keel.interaction.completed",
            "CUSTOM keel.tool.started",
            "TOOL_CALL_RESULT",
            "STEP_FINISHED",
            "CUSTOM keel.run.cancelled",
            "RUN_FINISHED",
        ],
    );
    assert_eq!(out[8]["outcome"], json!({"type": "cancelled"}));
}

#[test]
fn a_denied_or_failed_approval_waits_no_more() {
    for end in [
        answered("i_1", "denied"),
        (
            "interaction.failed",
            json!({"turn": 1, "interaction_id": "i_1", "error": "timed out"}),
        ),
    ] {
        let mut script = asking(false);
        script.push(end);
        let mut agent = stream(&[]);
        for event in &run(&script) {
            agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!((agent.paused(), agent.waits()), (None, vec![]));
    }
    let mut script = asking(false);
    script.push((
        "interaction.cancelled",
        json!({"turn": 1, "interaction_id": "i_1"}),
    ));
    let mut agent = stream(&[]);
    for event in &run(&script) {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(agent.waits(), vec![]);
}

#[test]
fn a_failed_model_call_leaves_no_call_to_wait_for() {
    let mut script = opening();
    script.extend([
        call("op_1", "c2", "pick_color"),
        model("model.failed", "op_1"),
        model("model.started", "op_2"),
        call("op_2", "c3", "pick_color"),
        model("model.completed", "op_2"),
        tool("tool.started", "c3", "pick_color"),
    ]);
    let mut agent = stream(&["pick_color"]);
    for event in &run(&script) {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    let calls: Vec<String> = agent.waits().iter().map(|w| format!("{w:?}")).collect();
    assert!(calls.len() == 1 && calls[0].contains("c3"), "{calls:?}");
    assert!(agent.paused().is_some());
}

#[test]
fn a_resume_after_a_cut_reopens_the_scopes_without_their_content() {
    let mut script = opening();
    script.extend([
        text("op_1", "Hel"),
        text("op_1", "lo."),
        (
            "model.completed",
            json!({"turn": 1, "operation_id": "op_1", "finish": "stop"}),
        ),
        turn("turn.completed"),
        ("run.failed", json!({"error": "gave up"})),
    ]);
    let (out, agent) = check(
        &run(&script),
        4,
        &[],
        &[
            "RUN_STARTED",
            "CUSTOM keel.run",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM keel.model.completed",
            "STEP_FINISHED",
            "CUSTOM keel.run.failed",
            "RUN_ERROR",
        ],
    );
    assert_eq!(
        out[4]["delta"], "lo.",
        "what the client had is not repeated"
    );
    assert!(agent.ended());
}

#[test]
fn refusals() {
    // An approval about a call the turn did not make.
    let mut script = opening();
    script.push(asked("i_1", "c9"));
    let mut agent = stream(&[]);
    let events = run(&script);
    let got: Vec<_> = events.iter().map(|e| agent.feed(e).map(drop)).collect();
    assert_eq!(got.last(), Some(&Err(AguiError::UnknownCall { seq: 4 })));
    // The mapper's refusals hold when skipping too.
    let mut agent = stream(&[]);
    assert_eq!(
        agent.skip(&events[1]),
        Err(AguiError::NotStarted { seq: 2 })
    );
}

#[test]
fn the_turn_s_calls_without_a_result_are_bounded() {
    let mut script = opening();
    for i in 0..MAX_OPEN_CALLS {
        if i == MAX_OPEN_CALLS / 2 {
            script.push(model("model.completed", "op_1"));
            script.push(model("model.started", "op_2"));
        }
        let op = if i < MAX_OPEN_CALLS / 2 {
            "op_1"
        } else {
            "op_2"
        };
        script.push(call(op, &format!("c{i}"), "t"));
    }
    let mut agent = stream(&[]);
    let events = run(&script);
    for event in &events {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    let one_more = ev(
        events.len() as u64 + 1,
        "model.tool_call",
        &call("op_2", "c_last", "t").1,
    );
    let seq = one_more.seq();
    assert_eq!(
        agent.feed(&one_more).map(drop),
        Err(AguiError::TooManyOpenCalls {
            seq,
            max: MAX_OPEN_CALLS
        })
    );
}

/// Whether the run is paused after `script`, with `frontend` tools.
fn pauses(script: &[(&str, Value)], frontend: &[&str]) -> bool {
    let mut agent = stream(frontend);
    for event in &run(script) {
        agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
    }
    agent.paused().is_some()
}

#[test]
fn a_pause_needs_the_model_closed_and_the_run_live() {
    let with = |extra: &[(&'static str, Value)]| {
        let mut script = frontend_call();
        script.extend(extra.iter().cloned());
        script
    };
    assert!(pauses(&with(&[]), &["pick_color"]));
    assert!(!pauses(
        &with(&[model("model.started", "op_2")]),
        &["pick_color"]
    ));
    assert!(!pauses(
        &with(&[("run.cancelled", json!({}))]),
        &["pick_color"]
    ));
}

#[test]
fn a_frontend_call_with_a_result_waits_no_more() {
    for end in ["tool.completed", "tool.failed", "tool.cancelled"] {
        let mut script = frontend_call();
        script.push(tool(end, "c2", "pick_color"));
        let mut agent = stream(&["pick_color"]);
        for event in &run(&script) {
            agent.feed(event).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!((agent.paused(), agent.waits()), (None, vec![]), "{end}");
    }
}

#[test]
fn an_approved_call_is_about_to_run_a_denied_one_is_not() {
    // c1 is approved (it runs next) or denied (it never runs) while the
    // client's c2 is started.
    let script = |decision: &str| {
        let mut script = asking(true);
        script.insert(script.len() - 1, answered("i_1", decision));
        script
    };
    assert!(!pauses(&script("approved"), &["pick_color"]));
    assert!(pauses(&script("denied"), &["pick_color"]));
}

#[test]
fn each_turn_has_its_own_calls() {
    // Turn 1's call c1 got no result; turn 2 waits only for the client.
    let mut script = opening();
    script.extend([
        call("op_1", "c1", "lookup"),
        model("model.completed", "op_1"),
        turn("turn.completed"),
        ("turn.started", json!({"turn": 2})),
        ("model.started", json!({"turn": 2, "operation_id": "op_2", "model": "m", "attempt": 1})),
        ("model.tool_call", json!({"turn": 2, "operation_id": "op_2", "call_id": "c2", "name": "pick_color", "arguments": {}})),
        ("model.completed", json!({"turn": 2, "operation_id": "op_2", "finish": "tool_calls"})),
        ("tool.started", json!({"turn": 2, "call_id": "c2", "tool": "pick_color"})),
    ]);
    assert!(pauses(&script, &["pick_color"]));
}

/// A run tree through the agent stream: the sub-runs are subagents of
/// the client's run; the client's ids stay on `RUN_*`; a response that
/// skips what the client had says the same tail.
#[test]
fn a_tree_streams_its_sub_runs_as_subagents() {
    let events = crate::sub_run::fixture::three_levels();
    let keel = RunId::parse("run_r").unwrap_or_else(|e| panic!("{e}"));
    let respond = |cut: usize| {
        let mut agent = stream(&[]);
        for event in &events[..cut] {
            agent
                .skip_tree(event)
                .unwrap_or_else(|e| panic!("skip: {e}"));
        }
        let mut out: Vec<Value> = agent.started(&keel).iter().map(Stamped::to_value).collect();
        for event in &events[cut..] {
            let mapped = agent
                .feed_tree(event)
                .unwrap_or_else(|e| panic!("feed: {e}"));
            out.extend(mapped.iter().map(Stamped::to_value));
        }
        assert!(agent.ended());
        out
    };
    let whole = respond(0);
    check_stream(&whole).unwrap_or_else(|e| panic!("{e}"));
    let all = types(&whole);
    let subagent: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("SUBAGENT_"))
        .collect();
    assert_eq!(
        subagent,
        [
            "SUBAGENT_STARTED",
            "SUBAGENT_STARTED",
            "SUBAGENT_STARTED",
            "SUBAGENT_FINISHED",
            "SUBAGENT_ERROR",
            "SUBAGENT_ERROR"
        ]
    );
    for e in whole.iter().filter(|e| e["type"] == "RUN_FINISHED") {
        assert_eq!(
            (&e["threadId"], &e["runId"]),
            (&json!(THREAD), &json!(CLIENT_RUN))
        );
    }
    // The client had everything up to run_g's text: the rest is the same
    // tail, after the opening.
    let cut = 21;
    let tail = respond(cut);
    check_stream(&tail).unwrap_or_else(|e| panic!("the resumed response: {e}"));
    // The opening: RUN_STARTED, keel.run, the root's step, then run_c's
    // and run_g's SUBAGENT_STARTED, each with its open step, and run_g's
    // open text message.
    let opening = 8;
    assert_eq!(
        types(&tail[..opening]),
        [
            "RUN_STARTED",
            "CUSTOM keel.run",
            "STEP_STARTED",
            "SUBAGENT_STARTED",
            "STEP_STARTED",
            "SUBAGENT_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START"
        ]
    );
    let fed: usize = events[..cut]
        .iter()
        .scan(stream(&[]), |agent, e| {
            Some(agent.feed_tree(e).map(|m| m.len()).unwrap_or(0))
        })
        .sum();
    assert_eq!(tail[opening..], whole[2 + fed..], "the tail after a skip");
}
