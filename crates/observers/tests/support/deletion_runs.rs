//! The runs and cases the deletion tests share (`delete.rs` for SQLite,
//! `postgres_delete.rs` for PostgreSQL): a conversation with a sub-run, a
//! lone run, a running one and a fork, and what each request deletes.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fixtures::SetClock;
use keel_eventlog::{ForkedFrom, LogConfig, ParentLink, Payload, RunLog, RunStarted};
use keel_message::{CallId, ModelName, OperationId, RunId};
use keel_observers::deletion::DeletionTarget;
use keel_stream::FinishReason;
use keel_testkit::events as testkit;
use std::sync::Arc;

/// A run to store: id, time of every event (ms), how it ends, its links,
/// and the text its model streams (a marker the byte search looks for).
#[derive(Clone, Default)]
pub struct Spec {
    pub id: &'static str,
    pub ms: u64,
    pub running: bool,
    pub continues: Option<&'static str>,
    pub forked_from: Option<&'static str>,
    pub parent: Option<&'static str>,
}

pub fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap()
}

pub fn events(s: &Spec, text: String) -> Vec<Arc<keel_eventlog::Event>> {
    let log = RunLog::new(
        id(s.id),
        LogConfig::default(),
        Arc::new(SetClock(s.ms * 1000)),
    )
    .unwrap();
    let started = Payload::RunStarted(RunStarted {
        continues: s.continues.map(id),
        forked_from: s.forked_from.map(|f| ForkedFrom::new(id(f), 1)),
        parent: s
            .parent
            .map(|p| ParentLink::new(id(p), CallId::parse("call_1").unwrap())),
        ..RunStarted::default()
    });
    let model = testkit::ModelAttempt::new(1, OperationId::parse("op_1").unwrap());
    let mut payloads = vec![
        started,
        testkit::turn_started(1),
        model.started(ModelName::parse("m").unwrap()),
        model.text(text),
    ];
    if !s.running {
        payloads.extend([
            model.completed(FinishReason::Stop, None),
            testkit::turn_completed(1),
            testkit::run_completed(),
        ]);
    }
    testkit::commit_all(&log, &payloads).unwrap()
}

pub fn fixture() -> Vec<Spec> {
    let s = |id, ms| Spec {
        id,
        ms,
        ..Spec::default()
    };
    vec![
        // A conversation a <- b, with a sub-run of b.
        s("run_a", 1_000),
        Spec {
            continues: Some("run_a"),
            ..s("run_b", 2_000)
        },
        Spec {
            parent: Some("run_b"),
            ..s("run_bs", 2_000)
        },
        // A lone run, a running one, and a fork of a lone run.
        s("run_c", 3_000),
        Spec {
            running: true,
            ..s("run_live", 500)
        },
        s("run_d", 4_000),
        Spec {
            forked_from: Some("run_d"),
            ..s("run_df", 9_000)
        },
    ]
}

/// One case: what is deleted, and which runs are gone after.
pub struct Case {
    pub name: &'static str,
    pub target: DeletionTarget,
    pub expected: Result<&'static [&'static str], &'static str>,
}

pub fn cases() -> Vec<Case> {
    use DeletionTarget::{Conversation, OlderThan, Run};
    vec![
        Case {
            name: "a lone run",
            target: Run(id("run_c")),
            expected: Ok(&["run_c"]),
        },
        Case {
            name: "a run with its sub-run",
            target: Run(id("run_b")),
            expected: Ok(&["run_b", "run_bs"]),
        },
        Case {
            name: "a conversation from its last run",
            target: Conversation(id("run_b")),
            expected: Ok(&["run_a", "run_b", "run_bs"]),
        },
        Case {
            name: "a continued run alone",
            target: Run(id("run_a")),
            expected: Err("deletion.dependents"),
        },
        Case {
            name: "a forked run alone",
            target: Run(id("run_d")),
            expected: Err("deletion.dependents"),
        },
        Case {
            name: "a running run",
            target: Run(id("run_live")),
            expected: Err("deletion.live"),
        },
        Case {
            name: "a run not stored",
            target: Run(id("run_zz")),
            expected: Err("deletion.not_found"),
        },
        Case {
            name: "prune: closed trees older than 3.5 s, not the running one",
            target: OlderThan(3_500),
            expected: Ok(&["run_a", "run_b", "run_bs", "run_c"]),
        },
        Case {
            name: "prune keeps a forked run whose fork is recent",
            target: OlderThan(5_000),
            expected: Ok(&["run_a", "run_b", "run_bs", "run_c"]),
        },
        Case {
            name: "prune covering nothing",
            target: OlderThan(900),
            expected: Ok(&[]),
        },
    ]
}
