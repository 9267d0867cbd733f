//! [`FileName`]: the name a user gave an attached file.

use crate::error::{MessageError, MessageErrorKind};
use crate::names::NameProblem;
use std::sync::Arc;

/// The longest file name, in bytes (a wire-format constant).
pub const FILE_NAME_MAX_BYTES: usize = 255;

/// A file's name: 1 to 255 bytes, no control characters, no `/` or `\`,
/// and not `.` or `..` (rule `message.file_name`), so it can never name a
/// path, only a file.
///
/// ```
/// use keel_message::FileName;
/// assert_eq!(FileName::parse("report 2026.pdf")?.as_str(), "report 2026.pdf");
/// assert!(FileName::parse("../etc/passwd").is_err());
/// # Ok::<(), keel_message::MessageError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileName(Arc<str>);

fn name_problem(text: &str) -> Option<NameProblem> {
    if text.is_empty() {
        return Some(NameProblem::Empty);
    }
    if text.len() > FILE_NAME_MAX_BYTES {
        return Some(NameProblem::TooLong {
            len: text.len(),
            max: FILE_NAME_MAX_BYTES,
        });
    }
    text.char_indices()
        .find(|&(_, c)| c.is_control() || c == '/' || c == '\\')
        .map(|(offset, _)| NameProblem::Character { offset })
}

impl FileName {
    /// Validates and copies `text`.
    pub fn parse(text: &str) -> Result<FileName, MessageError> {
        if let Some(problem) = name_problem(text) {
            return Err(MessageError::new(
                "$",
                MessageErrorKind::FileName { problem },
            ));
        }
        if matches!(text, "." | "..") {
            return Err(MessageError::new(
                "$",
                MessageErrorKind::FileNameDotSegment { len: text.len() },
            ));
        }
        Ok(FileName(Arc::from(text)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::string_newtype_impls!(FileName, MessageError);
