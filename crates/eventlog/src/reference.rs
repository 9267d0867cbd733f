//! The reference form of `run.input`: a continued run records the history
//! it inherits as a reference to the run it continues (that run's id, its
//! last seq and a digest of its lines through that seq) instead of copying
//! it, so storage grows by what is new. See
//! `docs/rfc/implemented/2026-12-04-continuation-by-reference.md`.

use keel_message::RunId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Unknown members (the type of [`crate::Extra`], named here so this
/// module of plain data depends on no other).
type Extra = BTreeMap<String, serde_json::Value>;

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
pub struct HistoryDigest(pub(crate) [u8; 32]);

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

/// The history a continued run inherits: the run it continues, the seq of
/// that run's last event, and the digest of its lines 1..=`last_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryReference {
    /// The run continued (or forked).
    pub run_id: RunId,
    /// The seq of its last event (its terminal): the history it ended
    /// with; for a fork, the fork point: the history through that seq.
    pub last_seq: u64,
    /// The digest of its lines 1..=`last_seq`.
    pub digest: HistoryDigest,
    /// Unknown members.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `run.input` in its reference form, `{"history":{"digest":…,"last_seq":N,"run_id":…}}`:
/// the run starts from the history of the run it continues, as that run's
/// log rebuilds it ([`crate::history::rebuild_chain`]). It is the run's
/// first `run.input`, right after a `run.started` whose `continues` names
/// the same run, or whose `forked_from` names the same run and seq (a
/// fork: `last_seq` is then the fork point, not the run's last event)
/// (rule `lifecycle.input_reference`); the new messages follow as ordinary
/// `run.input` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInputReference {
    /// What is inherited.
    pub history: HistoryReference,
    /// Unknown members (never `message`: one `run.input` is one form).
    #[serde(flatten)]
    pub extra: Extra,
}
