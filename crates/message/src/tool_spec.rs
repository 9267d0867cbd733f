//! [`ToolSpec`]: a tool definition written as a `const` item and checked
//! at compile time.
//!
//! A [`ToolDefinition`] is built at run time from validated parts, so a
//! typo in a hand-written schema only shows when the host starts.
//! `ToolSpec::new` applies the same rules in a `const fn`: used in a
//! `const` item, a bad name, an over-long description or a parameters text
//! that is not a JSON object schema is a compile error, and
//! [`ToolSpec::definition`] cannot fail.
//!
//! The parameters check is a small JSON parser written as `const fn`. It
//! accepts a subset of what [`CanonicalJson::parse`] and
//! [`ToolDefinition::new`] accept (the tests check every text it accepts
//! against both), so it is at least as strict:
//!
//! - RFC 8259 syntax (whitespace, escapes, no raw control characters, no
//!   trailing commas or characters), no lone UTF-16 surrogate escapes, no
//!   duplicate member names (compared after unescaping);
//! - nesting at most [`Limits::json_depth`](crate::Limits::json_depth)
//!   (default 64) and a canonical form that fits
//!   [`Limits::json_bytes`](crate::Limits::json_bytes) (default 1 MiB);
//! - every number of magnitude below 10^15 and with an exponent within
//!   ±400 (stricter than canonical JSON, which allows any double but
//!   integers beyond ±(2^53−1); a schema has no use for such numbers);
//! - an object at the top level whose `"type"`, if present, is `"object"`.
//!
//! The description is held to
//! [`Limits::tool_description_bytes`](crate::Limits::tool_description_bytes)
//! (default 8 KiB) and the name to the [`ToolName`] rule, which this module shares
//! with [`ToolName::parse`].

use crate::canonical::CanonicalJson;
use crate::limits::{Bound, LimitExceeded};
use crate::names::{CheckedToolName, ToolName};
use crate::schema_check::check_schema;
use crate::tool::ToolDefinition;
use crate::tool_spec_error::ToolSpecError;

/// `Limits::default().tool_description_bytes`, as a constant the compiler
/// can read (a test keeps the two equal).
const DESCRIPTION_MAX_BYTES: usize = 8 << 10;

/// A tool definition as static text, checked when it is built.
///
/// ```
/// use keel_message::ToolSpec;
///
/// const WEATHER: ToolSpec = ToolSpec::new(
///     "get_weather",
///     "Current weather for a city",
///     r#"{
///         "type": "object",
///         "properties": { "city": { "type": "string" } },
///         "required": ["city"]
///     }"#,
/// );
///
/// let tool = WEATHER.definition();
/// assert_eq!(tool.name().as_str(), "get_weather");
/// assert_eq!(
///     tool.parameters().as_str(),
///     r#"{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}"#
/// );
/// ```
///
/// In a `const` item a spec that breaks a rule does not compile:
///
/// ```compile_fail,E0080
/// const BAD: keel_message::ToolSpec =
///     keel_message::ToolSpec::new("get weather", "space in the name", "{}");
/// ```
///
/// ```compile_fail,E0080
/// const BAD: keel_message::ToolSpec =
///     keel_message::ToolSpec::new("get_weather", "an array schema", r#"{"type":"array"}"#);
/// ```
///
/// A `ToolSpec` can only be built by [`new`](ToolSpec::new) or
/// [`try_new`](ToolSpec::try_new), both of which check every rule, so a
/// spec that exists is valid. Called outside a `const` context with bad
/// input, `new` panics (there is no compiler to stop it); text known only
/// at run time goes through [`try_new`](ToolSpec::try_new), which returns
/// the typed [`ToolSpecError`], or through [`ToolDefinition::new`] for
/// owned strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    name: CheckedToolName,
    description: &'static str,
    parameters: &'static str,
}

impl ToolSpec {
    /// A checked spec. Meant for `const` items, where a broken rule is a
    /// compile error naming it.
    ///
    /// # Panics
    ///
    /// Outside a `const` context, when a rule is broken (the message names
    /// it); use [`try_new`](ToolSpec::try_new) for input known only at run
    /// time.
    #[allow(
        clippy::panic,
        reason = "in a const item this panic is the compile error that rejects a bad spec; try_new is the non-panicking form"
    )]
    pub const fn new(
        name: &'static str,
        description: &'static str,
        parameters: &'static str,
    ) -> ToolSpec {
        match ToolSpec::try_new(name, description, parameters) {
            Ok(spec) => spec,
            Err(error) => panic!("{}", error.const_message()),
        }
    }

    /// A checked spec, or the rule it breaks (with the byte offset in the
    /// parameters text, for a schema problem).
    ///
    /// ```
    /// use keel_message::{SchemaProblem, ToolSpec, ToolSpecError};
    /// let error = ToolSpec::try_new("t", "", r#"{"a":1,"a":2}"#).unwrap_err();
    /// assert_eq!(
    ///     error,
    ///     ToolSpecError::Parameters { problem: SchemaProblem::DuplicateKey, offset: 7 }
    /// );
    /// ```
    pub const fn try_new(
        name: &'static str,
        description: &'static str,
        parameters: &'static str,
    ) -> Result<ToolSpec, ToolSpecError> {
        let name = match CheckedToolName::check(name) {
            Ok(name) => name,
            Err(problem) => return Err(ToolSpecError::Name { problem }),
        };
        if description.len() > DESCRIPTION_MAX_BYTES {
            return Err(ToolSpecError::Description {
                limit: LimitExceeded {
                    bound: Bound::ToolDescriptionBytes,
                    actual: description.len(),
                    max: DESCRIPTION_MAX_BYTES,
                },
            });
        }
        if let Err(error) = check_schema(parameters.as_bytes()) {
            return Err(error);
        }
        Ok(ToolSpec {
            name,
            description,
            parameters,
        })
    }

    /// The tool name (valid under the [`ToolName`] rule).
    pub const fn name(&self) -> &'static str {
        self.name.as_str()
    }

    /// The description shown to the model.
    pub const fn description(&self) -> &'static str {
        self.description
    }

    /// The parameters schema as written (not canonicalized).
    pub const fn parameters(&self) -> &'static str {
        self.parameters
    }

    /// The [`ToolDefinition`] this spec describes, under the default
    /// limits. Never fails: the spec was checked when it was built.
    pub fn definition(&self) -> ToolDefinition {
        // The checker accepts only text that CanonicalJson::parse accepts
        // (see the tests), so the empty object is never used; it is here
        // because the parser's type is a Result and library code does not
        // panic.
        let parameters =
            CanonicalJson::parse(self.parameters).unwrap_or_else(|_| CanonicalJson::empty_object());
        ToolDefinition::from_checked_parts(ToolName::from(self.name), self.description, parameters)
    }
}
