//! The CLI's error: a message for stderr and the exit code it maps to.

use keel_observers::JournalError;

/// Exit code of a completed run and of every other success.
pub const EXIT_OK: i32 = 0;
/// Exit code of a failed run, a `verify` violation, or an I/O failure.
pub const EXIT_FAILED: i32 = 1;
/// Exit code of bad input: arguments, scenario, database, import file.
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code of a run cancelled with Ctrl-C (128 + SIGINT).
pub const EXIT_CANCELLED: i32 = 130;

/// A failure of a subcommand: what to print, and the exit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// The exit code ([`EXIT_BAD_INPUT`] or [`EXIT_FAILED`]).
    pub code: i32,
    /// The message, printed after `keel: `.
    pub message: String,
}

impl CliError {
    /// Bad input: exit 2.
    pub fn bad_input(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_BAD_INPUT,
            message: message.into(),
        }
    }

    /// A failure that is not the input's fault: exit 1.
    pub fn failure(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

/// A write to stdout failed: a closed pipe ends the command quietly (what
/// the command did is done), any other failure is exit 1.
pub(crate) fn write_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError {
            code: EXIT_OK,
            message: String::new(),
        }
    } else {
        CliError::failure(format!("writing to stdout: {e}"))
    }
}

impl From<JournalError> for CliError {
    /// A database that is missing, of a newer schema, not a journal or
    /// damaged is bad input (exit 2); an I/O, SQLite or PostgreSQL failure
    /// (a server that cannot be reached, a refused password) is exit 1.
    fn from(e: JournalError) -> CliError {
        let bad = matches!(
            e,
            JournalError::NewerSchema { .. }
                | JournalError::PostgresNewerSchema { .. }
                | JournalError::PostgresSchema { .. }
                | JournalError::NotFound { .. }
                | JournalError::NotAJournal { .. }
                | JournalError::NotSqlite { .. }
                | JournalError::InvalidSchema { .. }
                | JournalError::Config { .. }
                | JournalError::WalUnavailable { .. }
        );
        let message = e.to_string();
        if bad {
            CliError::bad_input(message)
        } else {
            CliError::failure(message)
        }
    }
}
