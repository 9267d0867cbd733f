//! `LogConfig`: a run log's retention and size bounds, and the terminal
//! reserve rule they must keep.

use crate::event::ENTRY_OVERHEAD_BYTES;

/// The smallest allowed `max_terminal_bytes`: the worst-case line of a
/// `failed`/`cancelled` terminal built without `extra` members (2 KiB of
/// error text, escaped at most 2x, plus ids and the envelope).
pub const MIN_TERMINAL_BYTES: usize = 6 << 10;

/// Retention and size bounds for one run's log.
///
/// **The terminal reserve.** Retention evicts oldest-first, so a commit
/// never waits for space. What must never happen is that a run cannot be
/// closed: every open scope must be able to take its terminal. The rule:
///
/// - a `failed` or `cancelled` terminal must encode to at most
///   `max_terminal_bytes`, and one built without `extra` members always
///   does: its payload is ids, a turn number, a short observer name and an
///   [`ErrorText`](crate::ErrorText) of at most 2 KiB, which is why
///   `max_terminal_bytes` may not be set below [`MIN_TERMINAL_BYTES`];
/// - every other event encodes to at most `max_event_bytes`, or the commit
///   is refused with [`CommitError::EventTooLarge`](crate::CommitError::EventTooLarge) and no sequence is used;
/// - at most `max_open_scopes` scopes are open at once (the run counts);
/// - [`LogConfig::validate`] requires
///   `max_bytes >= max_event_bytes + max_open_scopes * max_terminal_bytes`
///   and `max_events >= 1 + max_open_scopes`, counting each event's
///   retained bytes (line plus [`ENTRY_OVERHEAD_BYTES`]).
///
/// Together: whatever was committed last, the terminals that close every
/// scope still open fit in the window beside it, so a subscriber that was
/// current before a cancellation always finds the whole closing tail
/// retained, and neither bound is ever exceeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Most events retained. Default 100,000.
    pub max_events: usize,
    /// Most retained bytes (lines plus per-entry overhead). Default 64 MiB.
    pub max_bytes: usize,
    /// Largest event line, except reserved terminals. Default 2 MiB.
    pub max_event_bytes: usize,
    /// Largest `failed`/`cancelled` terminal line. Default 8 KiB.
    pub max_terminal_bytes: usize,
    /// Most scopes open at once, the run included. Default 64.
    pub max_open_scopes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_events: 100_000,
            max_bytes: 64 << 20,
            max_event_bytes: 2 << 20,
            max_terminal_bytes: 8 << 10,
            max_open_scopes: 64,
        }
    }
}

/// A `LogConfig` that breaks the reserve rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_bytes` cannot hold the largest event plus every reserved
    /// terminal.
    #[error(
        "log.max_bytes {max_bytes} < max_event_bytes {max_event_bytes} + max_open_scopes {max_open_scopes} * (max_terminal_bytes {max_terminal_bytes} + {ENTRY_OVERHEAD_BYTES}) (rule log.terminal_reserve)"
    )]
    BytesBelowReserve {
        /// Configured.
        max_bytes: usize,
        /// Configured.
        max_event_bytes: usize,
        /// Configured.
        max_open_scopes: usize,
        /// Configured.
        max_terminal_bytes: usize,
    },
    /// `max_events` cannot hold one event plus every reserved terminal.
    #[error(
        "log.max_events {max_events} < 1 + max_open_scopes {max_open_scopes} (rule log.terminal_reserve)"
    )]
    EventsBelowReserve {
        /// Configured.
        max_events: usize,
        /// Configured.
        max_open_scopes: usize,
    },
    /// `max_terminal_bytes` below [`MIN_TERMINAL_BYTES`].
    #[error(
        "log.max_terminal_bytes {max_terminal_bytes} < {MIN_TERMINAL_BYTES}, the largest minimal terminal (rule log.terminal_reserve)"
    )]
    TerminalBelowMinimum {
        /// Configured.
        max_terminal_bytes: usize,
    },
    /// A bound of zero.
    #[error("log.{field} is 0 (rule log.nonzero)")]
    Zero {
        /// The field.
        field: &'static str,
    },
}

impl LogConfig {
    /// Checks the reserve rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("max_events", self.max_events),
            ("max_bytes", self.max_bytes),
            ("max_event_bytes", self.max_event_bytes),
            ("max_terminal_bytes", self.max_terminal_bytes),
            ("max_open_scopes", self.max_open_scopes),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        if self.max_terminal_bytes < MIN_TERMINAL_BYTES {
            return Err(ConfigError::TerminalBelowMinimum {
                max_terminal_bytes: self.max_terminal_bytes,
            });
        }
        let reserve = self
            .max_open_scopes
            .saturating_mul(self.max_terminal_bytes.saturating_add(ENTRY_OVERHEAD_BYTES));
        if self.max_bytes
            < self
                .max_event_bytes
                .saturating_add(ENTRY_OVERHEAD_BYTES)
                .saturating_add(reserve)
        {
            return Err(ConfigError::BytesBelowReserve {
                max_bytes: self.max_bytes,
                max_event_bytes: self.max_event_bytes,
                max_open_scopes: self.max_open_scopes,
                max_terminal_bytes: self.max_terminal_bytes,
            });
        }
        if self.max_events < self.max_open_scopes.saturating_add(1) {
            return Err(ConfigError::EventsBelowReserve {
                max_events: self.max_events,
                max_open_scopes: self.max_open_scopes,
            });
        }
        Ok(())
    }
}
