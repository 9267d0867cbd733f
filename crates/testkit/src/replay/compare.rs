//! `compare`: a recorded log against a replayed one, event by event.

use keel_eventlog::Event;
use keel_eventlog::history::turn_message_id;
use keel_message::{Role, RunId};
use serde_json::Value;
use std::fmt;

/// The first event at which two logs differ.
///
/// `recorded` and `replayed` are the two canonical lines at
/// [`seq`](Self::seq), exactly as stored (with their `ts` and `run_id`);
/// `None` where that log has no event at `seq` (it is shorter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The first seq whose events differ.
    pub seq: u64,
    /// The recorded line at `seq`.
    pub recorded: Option<String>,
    /// The replayed line at `seq`.
    pub replayed: Option<String>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = |l: &Option<String>| l.clone().unwrap_or_else(|| "(no event)".to_owned());
        write!(
            f,
            "diverges at seq {}\nrecorded: {}\nreplayed: {}",
            self.seq,
            line(&self.recorded),
            line(&self.replayed)
        )
    }
}

/// Compares a recorded run's events with a replayed run's, in seq order,
/// and returns the first [`Divergence`].
///
/// Two events are equal when their canonical lines are equal once these
/// are set aside, and nothing else:
///
/// - the top-level `ts` of each event;
/// - the top-level `run_id` of each event;
/// - ids derived from the run id: any string member of the payload (at
///   any depth) equal to the replayed run's id is read as the recorded
///   run's id, and any beginning with the replayed run's message-id
///   prefix and `.` (the run id, or `h<hash>` for an id too long to
///   prefix one: message ids `<run>.t<T>.a`, `<run>.t<T>.t`,
///   `<run>.u<N>`, `<run>.t<T>.s`) is read with the recorded run's
///   prefix in its place.
///
/// Everything else counts: kinds, seqs, operation, call and interaction
/// ids, text, usage, finish reasons, problems and retry positions, tool
/// outputs and outcomes, decisions, `extra` members.
pub fn compare(recorded: &[Event], replayed: &[Event]) -> Result<(), Divergence> {
    let (Some(first_recorded), Some(first_replayed)) = (recorded.first(), replayed.first()) else {
        return match (recorded.first(), replayed.first()) {
            (None, None) => Ok(()),
            (r, p) => Err(Divergence {
                seq: 1,
                recorded: r.map(|e| e.line().to_owned()),
                replayed: p.map(|e| e.line().to_owned()),
            }),
        };
    };
    let ids = RunIds {
        recorded: first_recorded.run_id().as_str(),
        replayed: first_replayed.run_id().as_str(),
        recorded_prefix: message_id_prefix(first_recorded.run_id()),
        replayed_prefix: message_id_prefix(first_replayed.run_id()),
    };
    let len = recorded.len().max(replayed.len());
    for i in 0..len {
        let (r, p) = (recorded.get(i), replayed.get(i));
        let same = match (r, p) {
            (Some(r), Some(p)) => {
                normalized(r, &ids, Side::Recorded) == normalized(p, &ids, Side::Replayed)
            }
            _ => false,
        };
        if !same {
            return Err(Divergence {
                seq: i as u64 + 1,
                recorded: r.map(|e| e.line().to_owned()),
                replayed: p.map(|e| e.line().to_owned()),
            });
        }
    }
    Ok(())
}

struct RunIds<'a> {
    recorded: &'a str,
    replayed: &'a str,
    /// What a run's message ids begin with: its id, or `h<hash>` for an
    /// id too long to prefix one (`history::turn_message_id`'s rule).
    recorded_prefix: String,
    replayed_prefix: String,
}

/// The prefix before `.` of the run's derived message ids, as
/// `history::turn_message_id` makes them (the one owner of that rule).
fn message_id_prefix(run_id: &RunId) -> String {
    turn_message_id(run_id, 1, Role::Assistant)
        .ok()
        .and_then(|id| id.as_str().strip_suffix(".t1.a").map(str::to_owned))
        .unwrap_or_else(|| run_id.as_str().to_owned())
}

#[derive(Clone, Copy)]
enum Side {
    Recorded,
    Replayed,
}

/// The event's line as JSON without `ts` and `run_id`, its run-derived
/// ids rewritten to the recorded run's id. A line that is not a JSON
/// object (never, for a decoded event) compares as its text.
fn normalized(event: &Event, ids: &RunIds<'_>, side: Side) -> Value {
    let mut value: Value = match serde_json::from_str(event.line()) {
        Ok(value) => value,
        Err(_) => return Value::String(event.line().to_owned()),
    };
    if let Value::Object(map) = &mut value {
        map.remove("ts");
        map.remove("run_id");
        if let Side::Replayed = side {
            for member in map.values_mut() {
                rewrite_run_ids(member, ids);
            }
        }
    }
    value
}

/// Rewrites, in place, every string equal to the replayed run id or
/// beginning with it and `.` to the recorded run id.
fn rewrite_run_ids(value: &mut Value, ids: &RunIds<'_>) {
    match value {
        Value::String(s) => {
            if s == ids.replayed {
                *s = ids.recorded.to_owned();
            } else if let Some(rest) = s
                .strip_prefix(ids.replayed_prefix.as_str())
                .and_then(|r| r.strip_prefix('.'))
            {
                *s = format!("{}.{rest}", ids.recorded_prefix);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rewrite_run_ids(v, ids)),
        Value::Object(map) => map.values_mut().for_each(|v| rewrite_run_ids(v, ids)),
        _ => {}
    }
}
