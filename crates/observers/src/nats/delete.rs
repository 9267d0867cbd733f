//! Deletion on JetStream: [`JetStreamHandle::delete_runs`] and the
//! tombstones it leaves ([`JetStreamHandle::tombstones`], KV bucket
//! [`TOMBSTONES_BUCKET`]).
//!
//! The runs are read from the stream (each run subject's first and last
//! message and its count), planned by
//! [`deletion::plan`](crate::deletion::plan) with the same rules as every
//! store, then, for each covered run: its tombstone is put in the
//! bucket (key as the owners bucket's: `<prefix>.<run id>` escaped), each
//! of its messages is erased (`STREAM.MSG.DELETE` without `no_erase`: the
//! server overwrites the message in its store), its subject is purged, and
//! its owner record (if any) is purged. JetStream has no transaction
//! across subjects: the tombstones are written before any erase and the
//! named run is erased last, so repeating a request that failed half-way
//! finds the named run still stored and finishes the deletion.

use super::handle::JetStreamHandle;
use super::ownership::{OWNERS_BUCKET, bucket, escape, owner_key};
use crate::RunStatus;
use crate::deletion::{
    self, DeleteError, DeletionRequest, DeletionTarget, RunLinks, RunNode, Tombstone,
};
use async_nats::jetstream::kv;
use futures_util::TryStreamExt;
use keel_eventlog::Event;
use keel_message::RunId;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The KV bucket of the tombstones of runs deleted from the stream.
pub const TOMBSTONES_BUCKET: &str = "keel_tombstones";

fn failed<E: std::fmt::Display>(op: &'static str) -> impl FnOnce(E) -> DeleteError {
    move |e| DeleteError::JetStream {
        op,
        detail: e.to_string(),
    }
}

impl JetStreamHandle {
    /// Deletes the runs `request` covers from the stream and returns their
    /// tombstones (in run id order), with the rules of
    /// [`deletion`](crate::deletion): refused, with nothing deleted, for a
    /// running run ([`DeleteError::Live`]), a run another stored run
    /// continues or forks from ([`DeleteError::Dependents`]) or a run not
    /// in the stream ([`DeleteError::NotFound`]). See the module docs for
    /// the order of work.
    pub async fn delete_runs(
        &self,
        request: &DeletionRequest,
    ) -> Result<Vec<Tombstone>, DeleteError> {
        let nodes = self.run_nodes().await?;
        let planned = deletion::plan(request, &nodes)?;
        let deleted_ts = deletion::now_ms();
        let tombstones = deletion::tombstones(request, planned, deleted_ts);
        if tombstones.is_empty() {
            return Ok(tombstones);
        }
        let graves = self.tombstone_bucket().await?;
        for t in &tombstones {
            let key = owner_key(&self.config().subject_prefix, t.run_id());
            graves
                .put(key, t.to_json().to_string().into())
                .await
                .map_err(failed("record a tombstone"))?;
        }
        let owners = self.context.get_key_value(OWNERS_BUCKET).await.ok();
        for t in erase_order(request, &tombstones) {
            self.erase_run(t.run_id()).await?;
            if let Some(owners) = &owners {
                let key = owner_key(&self.config().subject_prefix, t.run_id());
                owners
                    .purge(key)
                    .await
                    .map_err(failed("purge an owner record"))?;
            }
        }
        Ok(tombstones)
    }

    /// Every tombstone of this stream's subject prefix, in run id order.
    pub async fn tombstones(&self) -> Result<Vec<Tombstone>, DeleteError> {
        let Ok(graves) = self.context.get_key_value(TOMBSTONES_BUCKET).await else {
            return Ok(Vec::new());
        };
        let keys: Vec<String> = match graves.keys().await {
            Ok(keys) => keys
                .try_collect()
                .await
                .map_err(failed("list tombstones"))?,
            Err(e) => return Err(failed("list tombstones")(e)),
        };
        let head = format!("{}.", escape(&self.config().subject_prefix));
        let mut out = Vec::new();
        for key in keys.into_iter().filter(|k| k.starts_with(&head)) {
            let Some(value) = graves.get(&key).await.map_err(failed("read a tombstone"))? else {
                continue;
            };
            let parsed = serde_json::from_slice(&value)
                .ok()
                .and_then(|v| Tombstone::from_json(&v));
            out.extend(parsed);
        }
        out.sort_by(|a, b| a.run_id().cmp(b.run_id()));
        Ok(out)
    }

    async fn tombstone_bucket(&self) -> Result<kv::Store, DeleteError> {
        bucket(
            &self.context,
            TOMBSTONES_BUCKET,
            Duration::ZERO,
            self.config().replicas,
        )
        .await
        .map_err(failed("open the tombstones bucket"))
    }

    /// Erases each message of `run_id`'s subject, then purges it.
    async fn erase_run(&self, run_id: &RunId) -> Result<(), DeleteError> {
        let mut from = 1;
        while let Some((seq, _)) = self
            .first_from(run_id.as_str(), from)
            .await
            .map_err(failed("read a run's messages"))?
        {
            self.stream
                .delete_message(seq)
                .await
                .map_err(failed("erase a message"))?;
            from = seq + 1;
        }
        self.stream
            .purge()
            .filter(self.config().subject(run_id.as_str()))
            .await
            .map_err(failed("purge a run's subject"))?;
        Ok(())
    }

    /// A [`RunNode`] for each run in the stream.
    async fn run_nodes(&self) -> Result<Vec<RunNode>, DeleteError> {
        let prefix = format!("{}.", self.config().subject_prefix);
        let mut info = self
            .stream
            .info_with_subjects(format!("{prefix}>"))
            .await
            .map_err(failed("list the stream's subjects"))?;
        let mut runs = Vec::new();
        while let Some((subject, _count)) = info
            .try_next()
            .await
            .map_err(failed("list the stream's subjects"))?
        {
            if let Some(run_id) = subject
                .strip_prefix(&prefix)
                .and_then(|r| RunId::parse(r).ok())
            {
                runs.push(run_id);
            }
        }
        let mut nodes = Vec::new();
        for run_id in runs {
            if let Some(node) = self.run_node(run_id).await? {
                nodes.push(node);
            }
        }
        with_conversations(&mut nodes);
        Ok(nodes)
    }

    /// One run's node from its first and last message (`None` when its
    /// subject emptied meanwhile or its last line does not decode).
    async fn run_node(&self, run_id: RunId) -> Result<Option<RunNode>, DeleteError> {
        let read = failed("read a run's messages");
        let Some((_, first)) = self.first_from(run_id.as_str(), 1).await.map_err(read)? else {
            return Ok(None);
        };
        let Some((_, last)) = self
            .last_of(run_id.as_str())
            .await
            .map_err(failed("read a run's messages"))?
        else {
            return Ok(None);
        };
        let Some(last) = std::str::from_utf8(&last)
            .ok()
            .and_then(|l| Event::decode(l).ok())
        else {
            return Ok(None);
        };
        let status = last
            .kind()
            .run_terminal()
            .map_or(RunStatus::Running, RunStatus::from);
        Ok(Some(RunNode {
            conversation: run_id.clone(),
            run_id,
            status,
            links: std::str::from_utf8(&first)
                .map(RunLinks::from_started_line)
                .unwrap_or_default(),
            last_event_us: last.ts(),
            events: last.seq(),
        }))
    }
}

/// Sets each node's conversation: the root of its `continues` chain (the
/// run it continues when that one is not stored), as the SQLite journal
/// records it.
fn with_conversations(nodes: &mut [RunNode]) {
    let previous: BTreeMap<RunId, Option<RunId>> = nodes
        .iter()
        .map(|n| (n.run_id.clone(), n.links.continues.clone()))
        .collect();
    for node in nodes.iter_mut() {
        let mut at = node.run_id.clone();
        let mut seen = BTreeSet::new();
        while seen.insert(at.clone()) {
            match previous.get(&at) {
                Some(Some(prev)) => at = prev.clone(),
                _ => break,
            }
        }
        node.conversation = at;
    }
}

/// The tombstones in the order their runs are erased: the run the request
/// names last.
fn erase_order<'a>(request: &DeletionRequest, tombstones: &'a [Tombstone]) -> Vec<&'a Tombstone> {
    let named = match request.target() {
        DeletionTarget::Run(id) | DeletionTarget::Conversation(id) => Some(id),
        DeletionTarget::OlderThan(_) => None,
    };
    let (last, mut order): (Vec<&Tombstone>, Vec<&Tombstone>) =
        tombstones.iter().partition(|t| Some(t.run_id()) == named);
    order.extend(last);
    order
}
