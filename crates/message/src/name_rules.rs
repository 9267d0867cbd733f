//! The name rules applied to text: [`ToolName::parse`] and
//! [`ModelName::parse`] / [`ModelName::parse_with`], refusing with a
//! [`MessageError`] that names the rule. The types and the problems live
//! in `names`; this module is where they meet the crate's error, so that
//! `names` stays below `error`.

use crate::error::{MessageError, MessageErrorKind};
use crate::limits::Limits;
use crate::names::{ModelName, NameProblem, ToolName, tool_name_problem};
use std::sync::Arc;

impl ToolName {
    /// Validates and copies `text`.
    pub fn parse(text: &str) -> Result<Self, MessageError> {
        match tool_name_problem(text) {
            Some(problem) => Err(MessageError::new(
                "$",
                MessageErrorKind::ToolName { problem },
            )),
            None => Ok(ToolName::from_checked_text(Arc::from(text))),
        }
    }
}

impl ModelName {
    /// Validates and copies `text` under the default limits.
    pub fn parse(text: &str) -> Result<Self, MessageError> {
        Self::parse_with(text, Limits::default_ref())
    }

    /// Validates and copies `text` under `limits`.
    pub fn parse_with(text: &str, limits: &Limits) -> Result<Self, MessageError> {
        let max = limits.model_name_bytes;
        let problem = if text.is_empty() {
            Some(NameProblem::Empty)
        } else if text.len() > max {
            Some(NameProblem::TooLong {
                len: text.len(),
                max,
            })
        } else {
            text.char_indices()
                .find(|(_, c)| c.is_whitespace() || c.is_control())
                .map(|(offset, _)| NameProblem::Character { offset })
        };
        match problem {
            Some(problem) => Err(MessageError::new(
                "$",
                MessageErrorKind::ModelName { problem },
            )),
            None => Ok(ModelName::from_checked_text(Arc::from(text))),
        }
    }
}
