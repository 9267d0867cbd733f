//! The reference form of `run.input`: a continued run records the history
//! it inherits as a reference to the run it continues (that run's id, its
//! last seq and a digest of its lines through that seq) instead of copying
//! it, so storage grows by what is new. See
//! `docs/rfc/implemented/2026-12-04-continuation-by-reference.md`.

use crate::event::Event;
use crate::lifecycle::LifecycleError;
use crate::payload::{Extra, Payload};
use keel_message::RunId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// The prefix of a [`HistoryDigest`]'s text form.
const DIGEST_PREFIX: &str = "sha256:";

/// Hex digits of a SHA-256 digest.
const DIGEST_HEX_LEN: usize = 64;

/// A digest of the lines of a run's log from seq 1 through a seq: the
/// SHA-256 of each canonical line followed by `\n`, in seq order (the
/// bytes a one-run JSONL file holds for those events). Written
/// `sha256:<64 lowercase hex digits>`; any other text is refused on decode.
///
/// Because the referenced run's own `run.input` reference is among the
/// lines digested, one digest covers the whole chain behind it.
///
/// ```
/// use keel_eventlog::HistoryDigest;
/// let text = format!("sha256:{}", "ab".repeat(32));
/// let digest: HistoryDigest = text.parse()?;
/// assert_eq!(digest.to_string(), text);
/// assert!("sha256:AB".parse::<HistoryDigest>().is_err());
/// # Ok::<(), keel_eventlog::DigestError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HistoryDigest([u8; 32]);

/// Why a text is not a [`HistoryDigest`]. Nothing of the text is quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a history digest is `sha256:` and 64 lowercase hex digits; this text is {len} bytes (rule payload.reference_digest)"
)]
pub struct DigestError {
    /// The length of the text refused.
    pub len: usize,
}

impl std::str::FromStr for HistoryDigest {
    type Err = DigestError;
    fn from_str(text: &str) -> Result<HistoryDigest, DigestError> {
        let refuse = || DigestError { len: text.len() };
        let hex = text.strip_prefix(DIGEST_PREFIX).ok_or_else(refuse)?;
        if hex.len() != DIGEST_HEX_LEN {
            return Err(refuse());
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or_else(refuse)?;
            let low = hex_value(pair[1]).ok_or_else(refuse)?;
            *byte = high << 4 | low;
        }
        Ok(HistoryDigest(bytes))
    }
}

/// A lowercase hex digit's value (uppercase is refused: one text per digest).
fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for HistoryDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DIGEST_PREFIX)?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for HistoryDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for HistoryDigest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HistoryDigest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Digests a run's lines in seq order, one at a time, so a history is
/// checked without holding its events (see [`HistoryDigest`]).
///
/// ```
/// use keel_eventlog::{HistoryHasher, LogConfig, Payload, RunLog, RunStarted, SystemClock};
/// use keel_message::RunId;
/// use std::sync::Arc;
/// let log = RunLog::new(RunId::parse("run_1")?, LogConfig::default(), Arc::new(SystemClock))?;
/// let started = log.commit(&Payload::RunStarted(RunStarted::default()))?;
/// let mut hasher = HistoryHasher::default();
/// hasher.update(&started);
/// assert_eq!(hasher.last_seq(), 1);
/// assert_eq!(hasher.finish(), HistoryHasher::default().finish_with([&*started]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct HistoryHasher {
    sha: Sha256,
    last_seq: u64,
}

impl fmt::Debug for HistoryHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryHasher")
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

impl HistoryHasher {
    /// Adds the next event's line.
    pub fn update(&mut self, event: &Event) {
        self.sha.update(event.line().as_bytes());
        self.sha.update(b"\n");
        self.last_seq = event.seq();
    }
    /// The seq of the last event added (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
    /// The digest of every line added.
    pub fn finish(self) -> HistoryDigest {
        let out = self.sha.finalize();
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&out);
        HistoryDigest(bytes)
    }
    /// Adds `events`, then [`finish`](Self::finish)es.
    pub fn finish_with<'a>(mut self, events: impl IntoIterator<Item = &'a Event>) -> HistoryDigest {
        events.into_iter().for_each(|e| self.update(e));
        self.finish()
    }
}

/// The history a continued run inherits: the run it continues, the seq of
/// that run's last event, and the digest of its lines 1..=`last_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryReference {
    /// The run continued.
    pub run_id: RunId,
    /// The seq of its last event (its terminal): the history it ended with.
    pub last_seq: u64,
    /// The digest of its lines 1..=`last_seq`.
    pub digest: HistoryDigest,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

impl HistoryReference {
    /// The reference to the lines `hasher` digested of run `run_id`.
    pub fn new(run_id: RunId, hasher: HistoryHasher) -> HistoryReference {
        HistoryReference {
            run_id,
            last_seq: hasher.last_seq(),
            digest: hasher.finish(),
            extra: Extra::new(),
        }
    }
}

/// `run.input` in its reference form, `{"history":{"digest":…,"last_seq":N,"run_id":…}}`:
/// the run starts from the history of the run it continues, as that run's
/// log rebuilds it ([`crate::history::rebuild_chain`]). It is the run's
/// first `run.input`, right after a `run.started` whose `continues` names
/// the same run (rule `lifecycle.input_reference`); the new messages follow
/// as ordinary `run.input` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInputReference {
    /// What is inherited.
    pub history: HistoryReference,
    /// Unknown members (never `message`: one `run.input` is one form).
    #[serde(flatten)]
    pub extra: Extra,
}

/// The seq a `run.input` reference must have: right after `run.started`.
pub(crate) const REFERENCE_SEQ: u64 = 2;

/// Checks that `payload`, committed at `seq`, is not a `run.input`
/// reference out of place (rule `lifecycle.input_reference`).
pub(crate) fn check_position(payload: &Payload, seq: u64) -> Result<(), LifecycleError> {
    match payload {
        Payload::RunInputReference(_) if seq != REFERENCE_SEQ => {
            Err(LifecycleError::InputReferenceNotFirst { seq })
        }
        _ => Ok(()),
    }
}
