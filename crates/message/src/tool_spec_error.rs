//! Why a `ToolSpec` is refused: `ToolSpecError`, and `SchemaProblem` for
//! its parameters. Apart from `tool_spec.rs` so that the schema scanner
//! (`schema_check.rs`) and the spec both name them without a module cycle.

use crate::limits::LimitExceeded;
use crate::names::NameProblem;
use std::fmt;

/// Why [`ToolSpec::try_new`](crate::ToolSpec::try_new) refused a spec. Nothing from the spec is
/// echoed: only the rule, a size or a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSpecError {
    /// The name breaks the tool-name rule.
    #[error(
        "tool spec name {problem} (rule tool_name: 1..=64 bytes of ASCII letters, digits, '_', '-')"
    )]
    Name {
        /// What is wrong with it.
        problem: NameProblem,
    },
    /// The description is longer than the default
    /// `limits.tool_description_bytes`.
    #[error("tool spec description too long: {limit}")]
    Description {
        /// The bound, the length and the maximum.
        limit: LimitExceeded,
    },
    /// The parameters text is not an accepted JSON object schema.
    #[error("tool spec parameters at byte {offset}: {problem}")]
    Parameters {
        /// Which rule.
        problem: SchemaProblem,
        /// Byte offset in the parameters text where it was found.
        offset: usize,
    },
}

impl ToolSpecError {
    /// A fixed message per rule, for the compile-time panic (a `const`
    /// panic can only print a `&str`).
    pub(crate) const fn const_message(&self) -> &'static str {
        match self {
            ToolSpecError::Name { .. } => {
                "ToolSpec: the name breaks rule tool_name (1..=64 bytes of ASCII letters, digits, '_', '-')"
            }
            ToolSpecError::Description { .. } => {
                "ToolSpec: the description breaks limits.tool_description_bytes (8 KiB)"
            }
            ToolSpecError::Parameters { problem, .. } => problem.const_message(),
        }
    }
}

/// What is wrong with a [`ToolSpec`](crate::ToolSpec)'s parameters text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaProblem {
    /// Not JSON: a malformed token, escape, raw control character,
    /// trailing comma or trailing text.
    Syntax,
    /// A `\u` escape of a UTF-16 surrogate that is not part of a pair.
    LoneSurrogate,
    /// An object has two members with the same (unescaped) name.
    DuplicateKey,
    /// A number of magnitude 10^15 or more, or with an exponent beyond ±400.
    NumberRange,
    /// Nested deeper than the default `limits.json_depth` (64).
    TooDeep,
    /// The canonical form could exceed the default `limits.json_bytes`
    /// (1 MiB).
    TooLarge,
    /// The top level is not an object whose `"type"`, if present, is
    /// `"object"`.
    NotObjectSchema,
}

impl SchemaProblem {
    /// The stable rule name.
    pub const fn rule(self) -> &'static str {
        match self {
            SchemaProblem::Syntax => "json.syntax",
            SchemaProblem::LoneSurrogate => "json.lone_surrogate",
            SchemaProblem::DuplicateKey => "json.duplicate_key",
            SchemaProblem::NumberRange => "tool_spec.number_range",
            SchemaProblem::TooDeep => "limits.json_depth",
            SchemaProblem::TooLarge => "limits.json_bytes",
            SchemaProblem::NotObjectSchema => "tool.parameters_object",
        }
    }

    const fn const_message(self) -> &'static str {
        match self {
            SchemaProblem::Syntax => "ToolSpec: the parameters are not JSON (rule json.syntax)",
            SchemaProblem::LoneSurrogate => {
                "ToolSpec: the parameters hold a lone UTF-16 surrogate escape (rule json.lone_surrogate)"
            }
            SchemaProblem::DuplicateKey => {
                "ToolSpec: the parameters have a duplicate member name (rule json.duplicate_key)"
            }
            SchemaProblem::NumberRange => {
                "ToolSpec: a number in the parameters is 10^15 or more, or its exponent is beyond 400 (rule tool_spec.number_range)"
            }
            SchemaProblem::TooDeep => {
                "ToolSpec: the parameters nest deeper than 64 (rule limits.json_depth)"
            }
            SchemaProblem::TooLarge => {
                "ToolSpec: the parameters could exceed 1 MiB canonical (rule limits.json_bytes)"
            }
            SchemaProblem::NotObjectSchema => {
                "ToolSpec: the parameters are not an object schema (rule tool.parameters_object)"
            }
        }
    }
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            SchemaProblem::Syntax => "not JSON",
            SchemaProblem::LoneSurrogate => "lone UTF-16 surrogate in a string escape",
            SchemaProblem::DuplicateKey => "duplicate object member name",
            SchemaProblem::NumberRange => {
                "number of magnitude 10^15 or more, or exponent beyond ±400"
            }
            SchemaProblem::TooDeep => "nested deeper than 64",
            SchemaProblem::TooLarge => "canonical form could exceed 1 MiB",
            SchemaProblem::NotObjectSchema => {
                "not an object whose \"type\", if present, is \"object\""
            }
        };
        write!(f, "{what} (rule {})", self.rule())
    }
}
