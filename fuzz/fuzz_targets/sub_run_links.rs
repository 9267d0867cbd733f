//! Fuzzes the sub-run wire and the cross-run link check (#37), the first
//! byte picking the mode:
//!
//! - **tree** (0): a tree of up to six runs built from the tape through
//!   `RunLog`s (each child linked by its parent's `tool.sub_run`, its
//!   `run.started` naming the parent and call; each child completed,
//!   failed with a cause, cancelled or still open; each parent call's
//!   terminal the child's outcome, or `host_lost`, or still open), then at
//!   most one damage (the child dropped, its `parent` removed or naming
//!   another call, the link removed, the call's terminal another kind or
//!   without its `sub_run`). `LinkCheck` fed the runs forward and in
//!   reverse must give the model's verdict: clean with the model's counts,
//!   or the damage's rule naming the parent, the child and the call.
//!   `recovery::children_first` of the tree puts every run before its
//!   parent.
//! - **lines** (1): the rest as lines; the decodable ones fed to a
//!   `LinkCheck` twice: never panics, the same verdict both times, a
//!   violation's text ends with its rule and names its run and call ids.
//! - **payloads** (2): the rest as a JSON value decoded as a `tool.sub_run`
//!   payload, a `run.started` payload and a `sub_run` member: an accepted
//!   payload re-encodes to a value that decodes equal; an accepted
//!   `SubRunRef` inserted into an empty `extra` reads back equal.
#![no_main]

use keel_eventlog::links::LinkCheck;
use keel_eventlog::recovery::{HOST_LOST, children_first};
use keel_eventlog::*;
use keel_message::{CallId, RunId, ToolName};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => tree(rest),
        1 => lines(rest),
        _ => payloads(rest),
    }
});

/// The tape: bytes read in order, zeros once it runs out.
struct Tape<'a>(std::slice::Iter<'a, u8>);

impl Tape<'_> {
    fn next(&mut self, n: u8) -> u8 {
        self.0.next().copied().unwrap_or(0) % n
    }
}

/// How a run ends (`None`: still open).
#[derive(Clone, Copy, PartialEq)]
enum End {
    Completed,
    Failed,
    Cancelled,
}

/// How a parent's call of a child ends.
#[derive(Clone, Copy, PartialEq)]
enum CallEnd {
    Open,
    HostLost,
    Mapped,
}

struct Node {
    parent: Option<usize>,
    end: Option<End>,
    call_end: CallEnd,
}

/// At most one damage, to child `victim`.
#[derive(Clone, Copy, PartialEq)]
enum Damage {
    None,
    DropChild,
    NoParent,
    OtherCall,
    NoLink,
    OtherTerminal,
    Unnamed,
}

fn id(i: usize) -> RunId {
    RunId::parse(&format!("run_{i}")).unwrap()
}
fn call(i: usize) -> CallId {
    CallId::parse(&format!("c{i}")).unwrap()
}
fn tool() -> ToolName {
    ToolName::parse("agent").unwrap()
}
fn child_cause(i: usize) -> Cause {
    Cause {
        call_id: Some(CallId::parse(&format!("k{i}")).unwrap()),
        ..Cause::default()
    }
}

fn tree(data: &[u8]) {
    let mut tape = Tape(data.iter());
    let n = 1 + usize::from(tape.next(6));
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        let parent = (i > 0).then(|| usize::from(tape.next(u8::try_from(i).unwrap())));
        let end = match tape.next(4) {
            0 => Some(End::Completed),
            1 => Some(End::Failed),
            2 => Some(End::Cancelled),
            _ => None,
        };
        let call_end = match tape.next(3) {
            0 => CallEnd::Open,
            1 => CallEnd::HostLost,
            _ => CallEnd::Mapped,
        };
        nodes.push(Node {
            parent,
            end,
            call_end,
        });
    }
    settle(&mut nodes);
    let damage = [
        Damage::None,
        Damage::DropChild,
        Damage::NoParent,
        Damage::OtherCall,
        Damage::NoLink,
        Damage::OtherTerminal,
        Damage::Unnamed,
    ][usize::from(tape.next(7))];
    let victim = 1 + usize::from(tape.next(6)) % n.max(2).saturating_sub(1).max(1);
    let damage = if victim < n { damage } else { Damage::None };
    let runs: Vec<(usize, Vec<Payload>)> = (0..n)
        .filter(|&i| !(damage == Damage::DropChild && i == victim))
        .map(|i| (i, payloads_of(&nodes, i, damage, victim)))
        .collect();
    let events: Vec<Vec<Arc<Event>>> = runs
        .iter()
        .map(|(i, payloads)| {
            let log = RunLog::new(id(*i), LogConfig::default(), Arc::new(SystemClock)).unwrap();
            for p in payloads {
                log.commit(p)
                    .unwrap_or_else(|e| panic!("run {i}: a generated event is refused: {e}"));
            }
            log.retained_after(0)
        })
        .collect();
    let want = model(&nodes, damage, victim);
    for reverse in [false, true] {
        let mut check = LinkCheck::new();
        let mut order: Vec<&Vec<Arc<Event>>> = events.iter().collect();
        if reverse {
            order.reverse();
        }
        for event in order.into_iter().flatten() {
            check.push(event);
        }
        match (check.finish(), &want) {
            (
                Ok(report),
                Verdict::Clean {
                    sub_runs,
                    unstarted,
                },
            ) => {
                assert_eq!(report.runs(), runs.len());
                assert_eq!(
                    (report.sub_runs(), report.unstarted()),
                    (*sub_runs, *unstarted)
                );
            }
            (
                Err(v),
                Verdict::Broken {
                    rule,
                    parent,
                    child,
                },
            ) => {
                let seen = (v.rule(), v.parent().clone(), v.child().clone());
                assert_eq!(seen, (*rule, id(*parent), id(*child)), "{v}");
                assert!(v.to_string().ends_with(&format!("(rule {rule})")));
            }
            (Ok(_), Verdict::Broken { rule, .. }) => panic!("clean, the model says {rule}"),
            (Err(v), Verdict::Clean { .. }) => panic!("the model says clean: {v}"),
        }
    }
    let order_of: Vec<Ordered> = (0..n)
        .map(|i| Ordered {
            index: i,
            id: id(i),
            parent: nodes[i].parent.map(id),
        })
        .collect();
    let ordered = children_first(order_of, |r| &r.id, |r| r.parent.as_ref());
    let at = |i: usize| ordered.iter().position(|r| r.index == i).unwrap();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(p) = node.parent {
            assert!(at(i) < at(p), "run_{i} is not before its parent run_{p}");
        }
    }
}

/// A run as recovery orders it.
struct Ordered {
    index: usize,
    id: RunId,
    parent: Option<RunId>,
}

/// Makes the tree one a live engine (or recovery) could leave: a call ends
/// mapped only when its child ended; a run ends only when its calls did.
fn settle(nodes: &mut [Node]) {
    // Children have larger indices: settle from the leaves up.
    for i in (0..nodes.len()).rev() {
        if nodes[i].end.is_none() && nodes[i].call_end == CallEnd::Mapped {
            nodes[i].call_end = CallEnd::Open;
        }
        let open_call = (i + 1..nodes.len())
            .any(|c| nodes[c].parent == Some(i) && nodes[c].call_end == CallEnd::Open);
        if open_call {
            nodes[i].end = None;
            if nodes[i].call_end == CallEnd::Mapped {
                nodes[i].call_end = CallEnd::Open;
            }
        }
    }
}

/// Run `i`'s events, with `damage` done to child `victim`.
fn payloads_of(nodes: &[Node], i: usize, damage: Damage, victim: usize) -> Vec<Payload> {
    let parent = nodes[i].parent.map(|p| {
        let named = if damage == Damage::OtherCall && i == victim {
            CallId::parse("zz").unwrap()
        } else {
            call(i)
        };
        ParentLink::new(id(p), named)
    });
    let parent = if damage == Damage::NoParent && i == victim {
        None
    } else {
        parent
    };
    let mut out = vec![
        Payload::RunStarted(RunStarted {
            parent,
            ..RunStarted::default()
        }),
        Payload::TurnStarted(TurnRef {
            turn: 1,
            extra: Extra::new(),
        }),
    ];
    let children: Vec<usize> = (0..nodes.len())
        .filter(|&c| nodes[c].parent == Some(i))
        .collect();
    for &c in &children {
        out.push(Payload::ToolStarted(ToolRef {
            turn: 1,
            call_id: call(c),
            tool: tool(),
            extra: Extra::new(),
        }));
        if !(damage == Damage::NoLink && c == victim) {
            out.push(Payload::ToolSubRun(SubRunStarted {
                turn: 1,
                call_id: call(c),
                run_id: id(c),
                extra: Extra::new(),
            }));
        }
    }
    for &c in &children {
        if let Some(terminal) = call_terminal(nodes, c, damage, victim) {
            out.push(terminal);
        }
    }
    let (turn_end, run_end) = match nodes[i].end {
        None => return out,
        Some(End::Completed) => (
            Payload::TurnCompleted(TurnRef {
                turn: 1,
                extra: Extra::new(),
            }),
            Payload::RunCompleted(RunCompleted::default()),
        ),
        Some(End::Failed) => (
            Payload::TurnCancelled(TurnRef {
                turn: 1,
                extra: Extra::new(),
            }),
            Payload::RunFailed(RunFailed {
                error: ErrorText::new("failed"),
                cause: Some(child_cause(i)),
                extra: Extra::new(),
            }),
        ),
        Some(End::Cancelled) => (
            Payload::TurnCancelled(TurnRef {
                turn: 1,
                extra: Extra::new(),
            }),
            Payload::RunCancelled(RunCancelled::default()),
        ),
    };
    out.push(turn_end);
    out.push(run_end);
    out
}

/// The terminal of the call that started child `c` (`None`: open).
fn call_terminal(nodes: &[Node], c: usize, damage: Damage, victim: usize) -> Option<Payload> {
    let damaged = c == victim;
    // A host_lost terminal always names its child (recovery writes it so).
    let unnamed = damage == Damage::Unnamed && damaged && nodes[c].call_end == CallEnd::Mapped;
    let named = |cause: Option<Cause>| {
        let mut extra = Extra::new();
        if !unnamed {
            SubRunRef {
                run_id: id(c),
                cause,
            }
            .insert_into(&mut extra);
        }
        extra
    };
    let failed = |cause: Option<Cause>| {
        Payload::ToolFailed(ToolFailed {
            turn: 1,
            call_id: call(c),
            tool: tool(),
            error: ErrorText::new("failed"),
            outcome: Some(ToolOutcome::Uncertain),
            retry: Some(ToolRetry::NotRetryable),
            extra: named(cause),
        })
    };
    let end = match nodes[c].call_end {
        CallEnd::Open => return None,
        CallEnd::HostLost => {
            let lost = Cause {
                kind: Some(HOST_LOST.to_owned()),
                ..Cause::default()
            };
            return Some(failed(Some(lost)));
        }
        CallEnd::Mapped => nodes[c].end?,
    };
    let end = match (damage == Damage::OtherTerminal && damaged, end) {
        (true, End::Completed) => End::Cancelled,
        (true, _) => End::Completed,
        (false, end) => end,
    };
    Some(match end {
        End::Completed => Payload::ToolCompleted(ToolCompleted {
            turn: 1,
            call_id: call(c),
            tool: tool(),
            output: "done".to_owned(),
            images: Vec::new(),
            extra: named(None),
        }),
        End::Failed => failed(Some(child_cause(c))),
        End::Cancelled => Payload::ToolCancelled(ToolRef {
            turn: 1,
            call_id: call(c),
            tool: tool(),
            extra: named(None),
        }),
    })
}

enum Verdict {
    Clean {
        sub_runs: usize,
        unstarted: usize,
    },
    Broken {
        rule: &'static str,
        parent: usize,
        child: usize,
    },
}

/// What the link check must say of the tree with `damage` done.
fn model(nodes: &[Node], damage: Damage, victim: usize) -> Verdict {
    let links = nodes.iter().filter(|n| n.parent.is_some()).count();
    let clean = Verdict::Clean {
        sub_runs: links,
        unstarted: 0,
    };
    let Some(parent) = nodes.get(victim).and_then(|n| n.parent) else {
        return clean;
    };
    let broken = |rule| Verdict::Broken {
        rule,
        parent,
        child: victim,
    };
    let v = &nodes[victim];
    // A call that ended neither open nor host_lost must agree.
    let judged = v.call_end == CallEnd::Mapped;
    // Dropped, the victim's own children name a parent that is not
    // stored: the parent rule is judged first, the first such child (by
    // id) named.
    let orphan = (victim + 1..nodes.len()).find(|&c| nodes[c].parent == Some(victim));
    match damage {
        Damage::None => clean,
        Damage::DropChild if orphan.is_some() => Verdict::Broken {
            rule: "links.parent_known",
            parent: victim,
            child: orphan.unwrap_or(victim),
        },
        Damage::DropChild if judged => broken("links.child_known"),
        Damage::DropChild => Verdict::Clean {
            sub_runs: links - 1,
            unstarted: 1,
        },
        Damage::NoParent => broken("links.child_known"),
        Damage::OtherCall | Damage::NoLink => broken("links.parent_known"),
        Damage::OtherTerminal | Damage::Unnamed if judged => broken("links.terminal_agrees"),
        Damage::OtherTerminal | Damage::Unnamed => clean,
    }
}

fn lines(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let events: Vec<Event> = text.lines().filter_map(|l| Event::decode(l).ok()).collect();
    let verdict = |events: &[Event]| {
        let mut check = LinkCheck::new();
        for e in events {
            check.push(e);
        }
        check.finish()
    };
    let first = verdict(&events);
    assert_eq!(first, verdict(&events), "not deterministic");
    if let Err(v) = first {
        let shown = v.to_string();
        assert!(shown.ends_with(&format!("(rule {})", v.rule())), "{shown}");
        for named in [
            v.parent().as_str(),
            v.child().as_str(),
            v.call_id().as_str(),
        ] {
            assert!(shown.contains(named), "{shown} lacks {named}");
        }
    }
}

fn payloads(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for kind in [
        "tool.sub_run",
        "run.started",
        "tool.completed",
        "tool.cancelled",
    ] {
        let kind = EventKind::parse(kind).unwrap();
        // A payload that decodes and is I-JSON re-encodes to a canonical
        // text that decodes and re-encodes to itself.
        if let Ok(text) = Payload::from_json(&kind, value.clone()).and_then(|p| p.to_canonical()) {
            let again: serde_json::Value = serde_json::from_str(&text).unwrap();
            let decoded = Payload::from_json(&kind, again).unwrap();
            assert_eq!(decoded.to_canonical().unwrap(), text);
        }
    }
    if let Some(members) = value.as_object() {
        let extra: Extra = members.clone().into_iter().collect();
        match SubRunRef::parse_extra(&extra) {
            Ok(Some(reference)) => {
                let mut fresh = Extra::new();
                reference.insert_into(&mut fresh);
                assert_eq!(SubRunRef::from_extra(&fresh), Some(reference));
            }
            Ok(None) => assert!(!extra.contains_key(SUB_RUN)),
            Err(e) => assert!(e.to_string().ends_with("(rule payload.sub_run)")),
        }
    }
}
