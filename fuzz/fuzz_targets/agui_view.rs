//! Arbitrary event sequences (decodable lines from the shared vocabulary of
//! `common/events.rs`: every lifecycle kind, deltas, tool calls, inputs and
//! interactions, with a few turns, operation ids and call ids, in any order) through the AG-UI view: the
//! mapper from the start, and a prelude at a cut followed by the tail.
//! Never a panic; every emitted event passes the view's own schema check
//! (`check_event`: type, required members, rawEvent); START/END pairing,
//! RUN_STARTED first and nothing after the run's end hold for the whole
//! stream (`check_stream`); each accepted Keel event maps to at least one
//! AG-UI event carrying its line.
#![no_main]

mod common;

use common::events::{events, started};
use keel_eventlog::Event;
use keel_views::agui::{AguiMapper, Stamped, check_stream, prelude};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Maps `tail` after `mapper` into `out` until the first refusal.
fn map_all(mut mapper: AguiMapper, tail: &[Event], out: &mut Vec<Value>) {
    for event in tail {
        match mapper.map(event) {
            Ok(mapped) => {
                assert!(!mapped.is_empty(), "seq {} maps to nothing", event.seq());
                let raw: Value =
                    serde_json::from_str(event.line()).expect("a decoded line is JSON");
                assert!(mapped.iter().all(|e| e.raw_event() == &raw));
                out.extend(mapped.iter().map(Stamped::to_value));
            }
            Err(e) => {
                assert!(e.to_string().contains("(rule agui."), "{e}");
                return;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut events = events(rest);
    // Half of the inputs start like a run does.
    if cut % 2 == 0 {
        events = started(events);
    }
    let mut whole = Vec::new();
    map_all(AguiMapper::new(), &events, &mut whole);
    if let Err(e) = check_stream(&whole) {
        panic!("the stream breaks a rule: {e}");
    }
    let at = usize::from(cut / 2) % (events.len() + 1);
    if at == 0 {
        return;
    }
    if let Ok((mapper, head)) = prelude(&events[..at], Vec::new(), keel_message::Limits::default())
    {
        let mut joined: Vec<Value> = head.iter().map(Stamped::to_value).collect();
        map_all(mapper, &events[at..], &mut joined);
        if let Err(e) = check_stream(&joined) {
            panic!("the joined stream at {at} breaks a rule: {e}");
        }
    }
});
