//! [`TreeCursor`]: where a reader of a run tree's merged stream is, one
//! sequence number per run that still has events to give.
//!
//! Text form (the SSE `id` of `GET /v1/runs/{id}/events?children=true`):
//! `<root_seq>` then, for every discovered run whose terminal has not been
//! delivered, `,<run_id>:<seq>` (seq 0: nothing of it delivered yet), in
//! the order the runs were discovered. A discovered run absent from the
//! list is fully delivered; a run not yet discovered is found again from
//! its parent's `tool.sub_run`, which lies after its parent's cursor. A
//! seq is decimal digits without a leading zero (so the text form is
//! canonical: `parse` then `Display` gives the same bytes), and a run id
//! may contain `:`, so an entry splits at its last `:`.

use keel_message::{ID_MAX_BYTES, IdError, RunId};
use std::fmt;

/// The most runs a [`TreeFollower`](crate::TreeFollower) follows at once:
/// the root and 63 descendants whose terminals are not delivered.
pub const MAX_TREE_RUNS: usize = 64;

/// The most `,<run_id>:<seq>` entries a cursor has: every run followed at
/// once but the root.
pub const MAX_CURSOR_ENTRIES: usize = MAX_TREE_RUNS - 1;

/// Digits of the largest seq (`u64::MAX`).
const SEQ_DIGITS: usize = 20;

/// The longest cursor text: the root seq and [`MAX_CURSOR_ENTRIES`]
/// entries of the longest run id and seq (9,470 bytes).
pub const MAX_CURSOR_BYTES: usize =
    SEQ_DIGITS + MAX_CURSOR_ENTRIES * (1 + ID_MAX_BYTES + 1 + SEQ_DIGITS);

/// Which part of a cursor an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorPart {
    /// The leading root seq.
    Root,
    /// The entry at this 1-based position after the root seq.
    Entry(usize),
}

impl fmt::Display for CursorPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorPart::Root => f.write_str("the root seq"),
            CursorPart::Entry(index) => write!(f, "entry {index}"),
        }
    }
}

/// Why a text is not a [`TreeCursor`], or an entry can't be added. Names
/// the part, the rule and sizes, never the text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeCursorError {
    /// The text is longer than [`MAX_CURSOR_BYTES`].
    #[error("the cursor is {len} bytes, over {MAX_CURSOR_BYTES} (rule tree_cursor.max_bytes)")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// More than [`MAX_CURSOR_ENTRIES`] run entries.
    #[error(
        "the cursor has {count} run entries, over {MAX_CURSOR_ENTRIES} (rule tree_cursor.max_entries)"
    )]
    TooManyEntries {
        /// How many it has (or would have).
        count: usize,
    },
    /// A seq that is not decimal digits without a leading zero within u64.
    #[error(
        "{part}: the seq is not a sequence number (decimal digits without a leading zero, at most {max}) (rule tree_cursor.seq)",
        max = u64::MAX
    )]
    Seq {
        /// Where.
        part: CursorPart,
    },
    /// An entry without a `:` before its seq.
    #[error("{part} is not <run_id>:<seq> (rule tree_cursor.entry)")]
    Entry {
        /// Where.
        part: CursorPart,
    },
    /// An entry's run id is not a run id.
    #[error("{part}: {source} (rule tree_cursor.run_id)")]
    RunId {
        /// Where.
        part: CursorPart,
        /// Why (names the rule of ids, never the text).
        source: IdError,
    },
    /// A run listed twice.
    #[error("{part} names the run of entry {first} again (rule tree_cursor.duplicate)")]
    Duplicate {
        /// The second listing.
        part: CursorPart,
        /// The 1-based position of the first.
        first: usize,
    },
}

impl TreeCursorError {
    /// The rule broken, e.g. `tree_cursor.seq`.
    pub fn rule(&self) -> &'static str {
        match self {
            TreeCursorError::TooLong { .. } => "tree_cursor.max_bytes",
            TreeCursorError::TooManyEntries { .. } => "tree_cursor.max_entries",
            TreeCursorError::Seq { .. } => "tree_cursor.seq",
            TreeCursorError::Entry { .. } => "tree_cursor.entry",
            TreeCursorError::RunId { .. } => "tree_cursor.run_id",
            TreeCursorError::Duplicate { .. } => "tree_cursor.duplicate",
        }
    }
}

/// One run of a [`TreeCursor`] other than the root: the last seq of it
/// delivered (0: none yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorEntry {
    run_id: RunId,
    seq: u64,
}

impl CursorEntry {
    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The last seq of it delivered; 0 when none was.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// Where a reader of a run tree's merged stream is: the root's last
/// delivered seq, and each discovered run whose terminal is not delivered
/// with its own, at most [`MAX_CURSOR_ENTRIES`] of them, each run once.
///
/// Text form (`Display` and [`parse`](Self::parse) round trip byte for
/// byte): `<root_seq>` then `,<run_id>:<seq>` per listed run (seq 0:
/// nothing of it delivered yet), in discovery order. A discovered run
/// absent from the list is fully delivered; a run not yet discovered is
/// found again from its parent's `tool.sub_run`, after the parent's seq.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeCursor {
    root: u64,
    entries: Vec<CursorEntry>,
}

impl TreeCursor {
    /// A cursor after `root_seq` of the root, with no other run listed:
    /// `TreeCursor::new(0)` is the start of the tree.
    pub fn new(root_seq: u64) -> TreeCursor {
        TreeCursor {
            root: root_seq,
            entries: Vec::new(),
        }
    }

    /// Reads the text form, `<root_seq>` then `,<run_id>:<seq>` per listed
    /// run (seqs in canonical decimal, each run once, within
    /// [`MAX_CURSOR_BYTES`] and [`MAX_CURSOR_ENTRIES`]); refused with the
    /// part and the rule.
    pub fn parse(text: &str) -> Result<TreeCursor, TreeCursorError> {
        if text.len() > MAX_CURSOR_BYTES {
            return Err(TreeCursorError::TooLong { len: text.len() });
        }
        let mut parts = text.split(',');
        let root = parts.next().unwrap_or_default();
        let mut cursor = TreeCursor::new(parse_seq(root, CursorPart::Root)?);
        for (i, entry) in parts.enumerate() {
            let part = CursorPart::Entry(i + 1);
            let (id, seq) = entry
                .rsplit_once(':')
                .ok_or(TreeCursorError::Entry { part })?;
            let run_id =
                RunId::parse(id).map_err(|source| TreeCursorError::RunId { part, source })?;
            cursor.push(run_id, parse_seq(seq, part)?)?;
        }
        Ok(cursor)
    }

    /// The cursor with `run_id` listed after `seq`, added last; refused
    /// when it is listed already or the list is full.
    pub fn with_entry(mut self, run_id: RunId, seq: u64) -> Result<TreeCursor, TreeCursorError> {
        self.push(run_id, seq)?;
        Ok(self)
    }

    fn push(&mut self, run_id: RunId, seq: u64) -> Result<(), TreeCursorError> {
        let part = CursorPart::Entry(self.entries.len() + 1);
        if let Some(first) = self.entries.iter().position(|e| e.run_id == run_id) {
            return Err(TreeCursorError::Duplicate {
                part,
                first: first + 1,
            });
        }
        if self.entries.len() >= MAX_CURSOR_ENTRIES {
            return Err(TreeCursorError::TooManyEntries {
                count: self.entries.len() + 1,
            });
        }
        self.entries.push(CursorEntry { run_id, seq });
        Ok(())
    }

    /// The root's last delivered seq.
    pub fn root_seq(&self) -> u64 {
        self.root
    }

    /// The runs listed, in discovery order.
    pub fn entries(&self) -> &[CursorEntry] {
        &self.entries
    }

    /// The listed seq of `run_id`, if it is listed.
    pub fn seq_of(&self, run_id: &RunId) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| &e.run_id == run_id)
            .map(|e| e.seq)
    }

    /// Moves the root to `seq`.
    pub(crate) fn set_root(&mut self, seq: u64) {
        self.root = seq;
    }

    /// Moves listed `run_id` to `seq`; false when it is not listed.
    pub(crate) fn advance(&mut self, run_id: &RunId, seq: u64) -> bool {
        match self.entries.iter_mut().find(|e| &e.run_id == run_id) {
            Some(entry) => {
                entry.seq = seq;
                true
            }
            None => false,
        }
    }

    /// Adds a run just discovered, at seq 0.
    pub(crate) fn discover(&mut self, run_id: RunId) -> Result<(), TreeCursorError> {
        self.push(run_id, 0)
    }

    /// Takes `run_id` off the list: its terminal is delivered (or it never
    /// started).
    pub(crate) fn remove(&mut self, run_id: &RunId) {
        self.entries.retain(|e| &e.run_id != run_id);
    }
}

impl fmt::Display for TreeCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root)?;
        for entry in &self.entries {
            write!(f, ",{}:{}", entry.run_id, entry.seq)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for TreeCursor {
    type Err = TreeCursorError;

    fn from_str(text: &str) -> Result<TreeCursor, TreeCursorError> {
        TreeCursor::parse(text)
    }
}

/// A seq in canonical decimal: `0`, or digits not starting with `0`,
/// within u64 (`u64::from_str` alone would take `+5` and `007`).
fn parse_seq(text: &str, part: CursorPart) -> Result<u64, TreeCursorError> {
    let canonical = !text.is_empty()
        && text.len() <= SEQ_DIGITS
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return Err(TreeCursorError::Seq { part });
    }
    text.parse().map_err(|_| TreeCursorError::Seq { part })
}

#[cfg(test)]
mod tests;
