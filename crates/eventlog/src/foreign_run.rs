//! A whole run from outside (a file another host exported) into a
//! [`RunLog`]: its events replayed with every check a commit makes, its
//! header held to what they give, and its metadata held to the importing
//! side's allowlist.

use crate::clock::Clock;
use crate::config::LogConfig;
use crate::event::Event;
use crate::kind::{EventKind, Phase, Scope, Terminal};
use crate::log::RunLog;
use crate::payload::Payload;
use crate::snapshot::{ImportError, Snapshot};
use keel_stream::MetadataAllowlist;
use std::sync::Arc;

impl Snapshot {
    /// Imports this snapshot of a whole run from outside: its events are
    /// replayed by [`RunLog::import`] (numbered from 1 in errors), the
    /// header must be the one they give ([`ImportError::HeaderMismatch`],
    /// rule `snapshot.consistent`), and no `model.completed` may carry
    /// metadata in a namespace `allowlist` does not hold
    /// ([`ImportError::MetadataNotAllowed`], rule
    /// `import.metadata_allowlist`): the live path would have dropped it,
    /// and an import keeps every event's bytes, so it cannot drop it
    /// either.
    ///
    /// ```
    /// use keel_eventlog::*;
    /// use keel_stream::MetadataAllowlist;
    /// use std::sync::Arc;
    /// let text = concat!(
    ///     r#"{"earliest_seq":1,"last_seq":1,"last_ts":5,"open_scopes":[{"scope":"run"}],"run_ended":false,"run_id":"run_1","schema":"keel.events/1"}"#, "\n",
    ///     r#"{"kind":"run.started","payload":{},"run_id":"run_1","seq":1,"ts":5}"#, "\n",
    /// );
    /// let snapshot = Snapshot::from_jsonl(text)?;
    /// let log = snapshot.import_run(LogConfig::default(), Arc::new(SystemClock), &MetadataAllowlist::empty())?;
    /// assert_eq!(log.stats().last_seq, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn import_run(
        &self,
        config: LogConfig,
        clock: Arc<dyn Clock>,
        allowlist: &MetadataAllowlist,
    ) -> Result<RunLog, ImportError> {
        let events = self.events();
        let log = RunLog::import(
            self.run_id().clone(),
            events.iter().map(|e| e.line()),
            config,
            clock,
        )?;
        let replayed = log.snapshot();
        if replayed != *self {
            return Err(ImportError::HeaderMismatch {
                replayed: replayed.header_line(),
            });
        }
        for (i, event) in events.iter().enumerate() {
            check_metadata_allowed(event, i + 1, allowlist)?;
        }
        Ok(log)
    }
}

/// Refuses event `n` when it is a `model.completed` whose metadata has a
/// namespace `allowlist` does not hold.
fn check_metadata_allowed(
    event: &Event,
    n: usize,
    allowlist: &MetadataAllowlist,
) -> Result<(), ImportError> {
    if *event.kind() != EventKind::Lifecycle(Scope::Model, Phase::Ended(Terminal::Completed)) {
        return Ok(());
    }
    let Payload::ModelCompleted(done) = event
        .payload()
        .map_err(|source| ImportError::Event { line: n, source })?
    else {
        return Ok(());
    };
    let namespaces = done.metadata.iter().flat_map(|m| m.namespaces());
    match namespaces
        .into_iter()
        .find(|(name, _)| !allowlist.contains(name))
    {
        Some((namespace, _)) => Err(ImportError::MetadataNotAllowed {
            line: n,
            seq: event.seq(),
            namespace: namespace.to_owned(),
        }),
        None => Ok(()),
    }
}
