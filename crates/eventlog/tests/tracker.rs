//! `LifecycleTracker` used directly, as a host replaying its own records
//! does: `check` never applies, the accessors report what was applied,
//! the open-scope bound names its count, and a resumed tracker knows its
//! run started.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use keel_eventlog::*;

fn start(key: ScopeKey) -> Transition {
    Transition::Lifecycle(key, Phase::Started)
}

fn end(key: ScopeKey) -> Transition {
    Transition::Lifecycle(key, Phase::Ended(Terminal::Completed))
}

#[test]
fn check_judges_without_applying() {
    let t = LifecycleTracker::new(4);
    assert_eq!(t.check(&start(ScopeKey::Run)), Ok(()));
    let refused = t.check(&start(ScopeKey::Turn(1))).unwrap_err();
    assert_eq!(refused.rule(), "lifecycle.run_first", "{refused}");
    assert!(!t.run_started(), "check applied nothing");

    let mut t = LifecycleTracker::new(4);
    t.apply(&start(ScopeKey::Run)).unwrap();
    let refused = t.check(&start(ScopeKey::Run)).unwrap_err();
    assert_eq!(refused.rule(), "lifecycle.unique_start", "{refused}");
    assert_eq!(t.check(&end(ScopeKey::Run)), Ok(()));
    assert!(!t.run_ended(), "check applied nothing");
}

#[test]
fn accessors_report_what_was_applied() {
    let mut t = LifecycleTracker::new(3);
    assert_eq!(t.max_open(), 3);
    assert!(!t.run_started());
    assert_eq!(t.last_turn(), None);
    t.apply(&start(ScopeKey::Run)).unwrap();
    assert!(t.run_started());
    t.apply(&start(ScopeKey::Turn(1))).unwrap();
    t.apply(&end(ScopeKey::Turn(1))).unwrap();
    t.apply(&start(ScopeKey::Turn(7))).unwrap();
    assert_eq!(t.last_turn(), Some(7));
    assert_eq!(
        t.open_outermost_first(),
        &[ScopeKey::Run, ScopeKey::Turn(7)]
    );
    assert_eq!(
        t.open_innermost_first(),
        vec![ScopeKey::Turn(7), ScopeKey::Run]
    );
}

#[test]
fn the_open_scope_bound_counts_the_new_scope() {
    let mut t = LifecycleTracker::new(2);
    t.apply(&start(ScopeKey::Run)).unwrap();
    t.apply(&start(ScopeKey::Turn(1))).unwrap();
    let model = ScopeKey::Model {
        turn: 1,
        operation_id: keel_message::OperationId::parse("op_1").unwrap(),
    };
    let refused = t.check(&start(model)).unwrap_err();
    assert_eq!(
        refused,
        LifecycleError::TooManyOpen { open: 3, max: 2 },
        "{refused}"
    );
    assert_eq!(
        refused.to_string(),
        "3 scopes open, the bound is 2 (rule limits.open_scopes)"
    );
}

/// A tracker resumed with no open scopes knows its run started: ending
/// the run again is a second terminal, not a terminal without a start.
#[test]
fn a_resumed_tracker_knows_its_run_started() {
    let t = LifecycleTracker::resume(Vec::new(), Some(2), false, 4).unwrap();
    assert!(t.run_started());
    assert_eq!(t.last_turn(), Some(2));
    let refused = t.check(&end(ScopeKey::Run)).unwrap_err();
    assert_eq!(refused.rule(), "lifecycle.one_terminal", "{refused}");
    let refused = t.check(&start(ScopeKey::Turn(2))).unwrap_err();
    assert_eq!(refused.rule(), "lifecycle.unique_start", "{refused}");
}
