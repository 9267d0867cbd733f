//! The turn's tool set: the run's fixed tools, then each tool source's
//! (read at the start of the turn, guarded and within
//! `tool_call_timeout`; a name already taken is skipped), the
//! `keel.tools_changed` record of what each source changed, and closing
//! the sources when the run task ends.

use super::turn::TurnFailure;
use super::{Interrupt, Runner, Step, truncate};
use crate::guard::guarded;
use crate::tool::Tool;
use crate::tool_set::ToolSet;
use futures_util::future::join_all;
use keel_eventlog::{CommitError, EventKind, Payload};
use keel_message::{CanonicalJson, MessageError, ToolDefinition, ToolName};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The extension event kind a source's change is recorded as.
pub(crate) const TOOLS_CHANGED: &str = "keel.tools_changed";

/// At most this many names in each array of a change record.
pub(crate) const CHANGE_NAMES_MAX: usize = 128;

/// A source's name in the change record is cut to this many bytes.
const SOURCE_NAME_MAX: usize = 64;

/// The tools of one turn: the model request lists `definitions`, and the
/// turn's tool calls are resolved against `set` (the same tools).
pub(crate) struct TurnTools {
    pub(crate) set: Arc<ToolSet>,
    pub(crate) definitions: Arc<[ToolDefinition]>,
}

/// What one source contributed to a turn, kept to compare the next turn
/// with: its definitions by name (the first of a repeated name), and the
/// names an earlier tool took.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SourceSeen {
    definitions: BTreeMap<ToolName, ToolDefinition>,
    skipped: BTreeSet<ToolName>,
}

/// A tool with its definition, read once (inside the guard).
type Listed = (Arc<dyn Tool>, ToolDefinition);

/// What changed for one source between two turns, names in name order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Change {
    added: Vec<ToolName>,
    removed: Vec<ToolName>,
    changed: Vec<ToolName>,
    skipped: Vec<ToolName>,
}

impl Change {
    /// `None` when the source contributed the same as before.
    pub(crate) fn between(previous: &SourceSeen, current: &SourceSeen) -> Option<Change> {
        if previous == current {
            return None;
        }
        let (before, now) = (&previous.definitions, &current.definitions);
        let added = now.keys().filter(|n| !before.contains_key(*n));
        let removed = before.keys().filter(|n| !now.contains_key(*n));
        let changed = now
            .iter()
            .filter(|(n, d)| before.get(*n).is_some_and(|old| old != *d));
        Some(Change {
            added: added.cloned().collect(),
            removed: removed.cloned().collect(),
            changed: changed.map(|(n, _)| n.clone()).collect(),
            skipped: current.skipped.iter().cloned().collect(),
        })
    }

    fn arrays(&self) -> [(&'static str, &[ToolName]); 4] {
        [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
            ("skipped", &self.skipped),
        ]
    }

    /// The record's payload. Each array keeps its first `keep` names
    /// (at most [`CHANGE_NAMES_MAX`]); `omitted` counts, for each array
    /// that was cut, the names left out.
    pub(crate) fn payload(
        &self,
        turn: u64,
        source: &str,
        keep: usize,
    ) -> Result<Payload, MessageError> {
        let keep = keep.min(CHANGE_NAMES_MAX);
        let mut object = Map::new();
        object.insert("turn".into(), Value::from(turn));
        object.insert(
            "source".into(),
            Value::from(truncate(source, SOURCE_NAME_MAX)),
        );
        let mut omitted = Map::new();
        for (key, names) in self.arrays() {
            let kept = names.iter().take(keep).map(|n| Value::from(n.as_str()));
            object.insert(key.into(), Value::Array(kept.collect()));
            if names.len() > keep {
                omitted.insert(key.into(), Value::from(names.len() - keep));
            }
        }
        if !omitted.is_empty() {
            object.insert("omitted".into(), Value::Object(omitted));
        }
        Ok(Payload::Extension {
            kind: EventKind::Extension(Arc::from(TOOLS_CHANGED)),
            payload: CanonicalJson::from_value(&Value::Object(object))?,
        })
    }
}

impl Runner {
    /// The turn's tool set, recording each source's change inside the
    /// turn. `Err` fails the turn: a change record the log cannot hold
    /// even with its names left out.
    pub(super) async fn turn_tools(&self, turn: u64) -> Step<Result<TurnTools, TurnFailure>> {
        if self.ctx.sources.is_empty() {
            return Ok(Ok(TurnTools {
                set: Arc::clone(&self.ctx.tools),
                definitions: Arc::clone(&self.ctx.definitions),
            }));
        }
        let lists = self.source_lists().await;
        let mut set = ToolSet::clone(&self.ctx.tools);
        for (i, (source, list)) in self.ctx.sources.iter().zip(lists).enumerate() {
            let mut seen = SourceSeen::default();
            for (tool, definition) in list {
                let name = definition.name().clone();
                seen.definitions
                    .entry(name.clone())
                    .or_insert_with(|| definition.clone());
                if !set.insert_as(tool, definition) {
                    seen.skipped.insert(name);
                }
            }
            let previous = {
                let mut st = self.state();
                st.sources_seen
                    .get_mut(i)
                    .map(|slot| std::mem::replace(slot, seen.clone()))
                    .unwrap_or_default()
            };
            if let Some(change) = Change::between(&previous, &seen)
                && let Some(failure) = self.record_change(turn, source.name(), &change).await?
            {
                return Ok(Err(failure));
            }
        }
        let definitions = set.definitions();
        Ok(Ok(TurnTools {
            set: Arc::new(set),
            definitions,
        }))
    }

    /// Every source's list, read at once, each guarded and within
    /// `tool_call_timeout`: a source that panics (in `tools`, its future,
    /// or a tool's `definition`) or takes longer contributes nothing.
    async fn source_lists(&self) -> Vec<Vec<Listed>> {
        let timeout = self.ctx.limits.tool_call_timeout;
        let reads = self.ctx.sources.iter().map(|source| {
            let source = Arc::clone(source);
            let listed = guarded(move || {
                let tools = source.tools();
                async move {
                    let tools = tools.await;
                    let read = |tool: Arc<dyn Tool>| {
                        let definition = tool.definition().clone();
                        (tool, definition)
                    };
                    tools.into_iter().map(read).collect::<Vec<Listed>>()
                }
            });
            async move {
                match tokio::time::timeout(timeout, listed).await {
                    Ok(Ok(list)) => list,
                    Ok(Err(_)) | Err(_) => Vec::new(),
                }
            }
        });
        join_all(reads).await
    }

    /// Commits the change record. One the log refuses as too large is
    /// recorded again with every name left out (counted in `omitted`);
    /// `Some` fails the turn when even that does not fit.
    async fn record_change(
        &self,
        turn: u64,
        source: &str,
        change: &Change,
    ) -> Step<Option<TurnFailure>> {
        for keep in [CHANGE_NAMES_MAX, 0] {
            let payload = change
                .payload(turn, source, keep)
                .map_err(Interrupt::Message)?;
            match self.rec.record(payload).await {
                Ok(_) => return Ok(None),
                Err(Interrupt::Log(CommitError::EventTooLarge { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(TurnFailure::limit(
            "log.max_event_bytes",
            format!("the {TOOLS_CHANGED} record of turn {turn} cannot be recorded"),
        )))
    }

    /// Closes every source once, at once, each guarded, all within
    /// `closing_deadline`. Called when the run task ends, after the run's
    /// terminal is committed.
    pub(super) async fn close_sources(&self) {
        if self.ctx.sources.is_empty() {
            return;
        }
        let closes = self.ctx.sources.iter().map(|source| {
            let source = Arc::clone(source);
            guarded(move || source.close())
        });
        let deadline = self.ctx.limits.closing_deadline;
        // A source that panics or overruns is abandoned: the run is over.
        let _ = tokio::time::timeout(deadline, join_all(closes)).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn definition(name: &str, description: &str) -> ToolDefinition {
        let parameters = CanonicalJson::parse(r#"{"type":"object"}"#).unwrap();
        ToolDefinition::new(ToolName::parse(name).unwrap(), description, parameters).unwrap()
    }

    fn seen(tools: &[(&str, &str)], skipped: &[&str]) -> SourceSeen {
        SourceSeen {
            definitions: tools
                .iter()
                .map(|(n, d)| (ToolName::parse(n).unwrap(), definition(n, d)))
                .collect(),
            skipped: skipped
                .iter()
                .map(|n| ToolName::parse(n).unwrap())
                .collect(),
        }
    }

    #[test]
    fn the_kind_is_an_extension_kind() {
        assert_eq!(
            EventKind::parse(TOOLS_CHANGED).unwrap(),
            EventKind::Extension(Arc::from(TOOLS_CHANGED))
        );
    }

    #[test]
    fn changes_are_named_in_name_order() {
        let before = seen(&[("b", "x"), ("c", "x"), ("d", "x")], &[]);
        let now = seen(&[("a", "x"), ("c", "y"), ("d", "x")], &["d"]);
        let change = Change::between(&before, &now).unwrap();
        let names = |v: &[ToolName]| v.iter().map(|n| n.as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&change.added), ["a"]);
        assert_eq!(names(&change.removed), ["b"]);
        assert_eq!(names(&change.changed), ["c"]);
        assert_eq!(names(&change.skipped), ["d"]);
        assert_eq!(Change::between(&now, &now.clone()), None);
    }

    #[test]
    fn a_long_source_name_is_cut() {
        let change = Change::default();
        let Payload::Extension { payload, .. } = change.payload(1, &"s".repeat(100), 128).unwrap()
        else {
            unreachable!()
        };
        let value = payload.to_value();
        assert_eq!(value["source"].as_str().unwrap().len(), SOURCE_NAME_MAX);
        assert!(value.get("omitted").is_none());
    }
}
