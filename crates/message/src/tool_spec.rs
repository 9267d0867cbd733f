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
use crate::error::NameProblem;
use crate::limits::{Bound, LimitExceeded};
use crate::names::{CheckedToolName, ToolName};
use crate::tool::ToolDefinition;
use std::fmt;

/// `Limits::default().tool_description_bytes`, as a constant the compiler
/// can read (a test keeps the two equal).
const DESCRIPTION_MAX_BYTES: usize = 8 << 10;
/// `Limits::default().json_bytes`.
const JSON_MAX_BYTES: usize = 1 << 20;
/// `Limits::default().json_depth` (below `canonical::MAX_DEPTH`).
const JSON_MAX_DEPTH: usize = 64;
/// The longest canonical (ECMAScript) spelling of a double, e.g.
/// `-0.0000012345678901234567`: a number never grows by more than this.
const NUMBER_MAX_CANONICAL_BYTES: usize = 25;
/// Numbers must be below 10^15 in magnitude (so below 2^53).
const NUMBER_MAX_DIGITS: i64 = 15;
/// Exponents beyond this are refused (far below overflow of the count).
const EXPONENT_MAX: i64 = 400;

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

/// Why [`ToolSpec::try_new`] refused a spec. Nothing from the spec is
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
    const fn const_message(&self) -> &'static str {
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

/// What is wrong with a [`ToolSpec`]'s parameters text.
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

/// `Err` early from a `const fn` (`?` is not available there).
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(error) => return Err(error),
        }
    };
}

/// The whole parameters check: syntax and the JSON rules, then size, then
/// the object-schema rule.
const fn check_schema(bytes: &[u8]) -> Result<(), ToolSpecError> {
    let mut scanner = Scanner {
        bytes,
        pos: 0,
        numbers: 0,
    };
    scanner.skip_ws();
    let start = scanner.pos;
    tri!(scanner.value(0));
    scanner.skip_ws();
    if scanner.pos != bytes.len() {
        return scanner.fail(SchemaProblem::Syntax);
    }
    // Strings and literals never grow when canonicalized; numbers grow to
    // at most NUMBER_MAX_CANONICAL_BYTES each.
    let bound = bytes
        .len()
        .saturating_add(scanner.numbers.saturating_mul(NUMBER_MAX_CANONICAL_BYTES));
    if bound > JSON_MAX_BYTES {
        return Err(ToolSpecError::Parameters {
            problem: SchemaProblem::TooLarge,
            offset: 0,
        });
    }
    if at(bytes, start) != b'{' || !type_is_object(bytes, start) {
        return Err(ToolSpecError::Parameters {
            problem: SchemaProblem::NotObjectSchema,
            offset: start,
        });
    }
    Ok(())
}

/// The byte at `i`, or 0 past the end (0 is never valid JSON outside a
/// string, and inside one it is a raw control character).
const fn at(bytes: &[u8], i: usize) -> u8 {
    if i < bytes.len() { bytes[i] } else { 0 }
}

const fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

const fn skip_ws_from(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && is_ws(bytes[i]) {
        i += 1;
    }
    i
}

/// A validating recursive-descent scan of JSON text.
struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    numbers: usize,
}

impl Scanner<'_> {
    const fn peek(&self) -> u8 {
        at(self.bytes, self.pos)
    }

    const fn skip_ws(&mut self) {
        self.pos = skip_ws_from(self.bytes, self.pos);
    }

    const fn fail<T>(&self, problem: SchemaProblem) -> Result<T, ToolSpecError> {
        Err(ToolSpecError::Parameters {
            problem,
            offset: self.pos,
        })
    }

    /// One value; `depth` is the number of containers around it.
    const fn value(&mut self, depth: usize) -> Result<(), ToolSpecError> {
        match self.peek() {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.fail(SchemaProblem::Syntax),
        }
    }

    const fn literal(&mut self, word: &[u8]) -> Result<(), ToolSpecError> {
        let mut i = 0;
        while i < word.len() {
            if at(self.bytes, self.pos + i) != word[i] {
                return self.fail(SchemaProblem::Syntax);
            }
            i += 1;
        }
        self.pos += word.len();
        Ok(())
    }

    const fn object(&mut self, depth: usize) -> Result<(), ToolSpecError> {
        if depth > JSON_MAX_DEPTH {
            return self.fail(SchemaProblem::TooDeep);
        }
        let open = self.pos;
        self.pos += 1;
        self.skip_ws();
        if self.peek() == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            if self.peek() != b'"' {
                return self.fail(SchemaProblem::Syntax);
            }
            let key = self.pos;
            tri!(self.string());
            if key_seen_before(self.bytes, open, key) {
                return Err(ToolSpecError::Parameters {
                    problem: SchemaProblem::DuplicateKey,
                    offset: key,
                });
            }
            self.skip_ws();
            if self.peek() != b':' {
                return self.fail(SchemaProblem::Syntax);
            }
            self.pos += 1;
            self.skip_ws();
            tri!(self.value(depth));
            self.skip_ws();
            match self.peek() {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return self.fail(SchemaProblem::Syntax),
            }
        }
    }

    const fn array(&mut self, depth: usize) -> Result<(), ToolSpecError> {
        if depth > JSON_MAX_DEPTH {
            return self.fail(SchemaProblem::TooDeep);
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek() == b']' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            tri!(self.value(depth));
            self.skip_ws();
            match self.peek() {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b']' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return self.fail(SchemaProblem::Syntax),
            }
        }
    }

    /// A string literal, the cursor on its opening quote.
    const fn string(&mut self) -> Result<(), ToolSpecError> {
        self.pos += 1;
        loop {
            if self.pos >= self.bytes.len() {
                return self.fail(SchemaProblem::Syntax);
            }
            match self.peek() {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => tri!(self.escape()),
                0..=0x1f => return self.fail(SchemaProblem::Syntax),
                _ => self.pos += 1,
            }
        }
    }

    /// One escape, the cursor on its backslash.
    const fn escape(&mut self) -> Result<(), ToolSpecError> {
        match at(self.bytes, self.pos + 1) {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                self.pos += 2;
                Ok(())
            }
            b'u' => {
                let Some(unit) = hex4(self.bytes, self.pos + 2) else {
                    return self.fail(SchemaProblem::Syntax);
                };
                match unit {
                    0xD800..=0xDBFF => {
                        let low = if at(self.bytes, self.pos + 6) == b'\\'
                            && at(self.bytes, self.pos + 7) == b'u'
                        {
                            hex4(self.bytes, self.pos + 8)
                        } else {
                            None
                        };
                        match low {
                            Some(0xDC00..=0xDFFF) => {
                                self.pos += 12;
                                Ok(())
                            }
                            _ => self.fail(SchemaProblem::LoneSurrogate),
                        }
                    }
                    0xDC00..=0xDFFF => self.fail(SchemaProblem::LoneSurrogate),
                    _ => {
                        self.pos += 6;
                        Ok(())
                    }
                }
            }
            _ => self.fail(SchemaProblem::Syntax),
        }
    }

    /// A number, held to magnitude below 10^NUMBER_MAX_DIGITS.
    const fn number(&mut self) -> Result<(), ToolSpecError> {
        let start = self.pos;
        if self.peek() == b'-' {
            self.pos += 1;
        }
        // Value = 0.DDD… × 10^scale once leading zeros are dropped.
        let mut scale: i64 = 0;
        let mut nonzero = false;
        match self.peek() {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                nonzero = true;
                while self.peek().is_ascii_digit() {
                    scale += 1;
                    self.pos += 1;
                }
            }
            _ => return self.fail(SchemaProblem::Syntax),
        }
        if self.peek() == b'.' {
            self.pos += 1;
            if !self.peek().is_ascii_digit() {
                return self.fail(SchemaProblem::Syntax);
            }
            while self.peek().is_ascii_digit() {
                if !nonzero {
                    if self.peek() == b'0' {
                        scale -= 1;
                    } else {
                        nonzero = true;
                    }
                }
                self.pos += 1;
            }
        }
        let exponent = tri!(self.exponent());
        self.numbers += 1;
        if exponent.abs() > EXPONENT_MAX || (nonzero && scale + exponent > NUMBER_MAX_DIGITS) {
            return Err(ToolSpecError::Parameters {
                problem: SchemaProblem::NumberRange,
                offset: start,
            });
        }
        Ok(())
    }

    /// The exponent part of a number (0 when there is none), saturating
    /// past EXPONENT_MAX so that any refused exponent stays refused.
    const fn exponent(&mut self) -> Result<i64, ToolSpecError> {
        if !matches!(self.peek(), b'e' | b'E') {
            return Ok(0);
        }
        self.pos += 1;
        let negative = match self.peek() {
            b'-' => {
                self.pos += 1;
                true
            }
            b'+' => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        if !self.peek().is_ascii_digit() {
            return self.fail(SchemaProblem::Syntax);
        }
        let mut value: i64 = 0;
        while self.peek().is_ascii_digit() {
            if value <= EXPONENT_MAX {
                value = value * 10 + (self.peek() - b'0') as i64;
            }
            self.pos += 1;
        }
        Ok(if negative { -value } else { value })
    }
}

/// Four hex digits at `i` as a UTF-16 code unit.
const fn hex4(bytes: &[u8], i: usize) -> Option<u32> {
    let mut value = 0u32;
    let mut k = 0;
    while k < 4 {
        let digit = match at(bytes, i + k) {
            b @ b'0'..=b'9' => b - b'0',
            b @ b'a'..=b'f' => b - b'a' + 10,
            b @ b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        value = value * 16 + digit as u32;
        k += 1;
    }
    Some(value)
}

// ---------------------------------------------------------------------------
// Walking text the scanner has already accepted
// ---------------------------------------------------------------------------

/// The index just past the string literal whose opening quote is at `i`.
const fn skip_string(bytes: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index just past the value starting at `i`.
const fn skip_value(bytes: &[u8], mut i: usize) -> usize {
    match at(bytes, i) {
        b'"' => skip_string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = skip_string(bytes, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            i
        }
        _ => {
            while i < bytes.len() && !matches!(bytes[i], b',' | b'}' | b']') && !is_ws(bytes[i]) {
                i += 1;
            }
            i
        }
    }
}

/// One member of an accepted object: where its name and value start, and
/// where the next member (or the closing brace) starts.
struct Member {
    key: usize,
    value: usize,
    next: usize,
}

/// The member whose name starts at or after whitespace from `i`, or `None`
/// at the closing brace.
const fn member_at(bytes: &[u8], i: usize) -> Option<Member> {
    let key = skip_ws_from(bytes, i);
    if at(bytes, key) != b'"' {
        return None;
    }
    let colon = skip_ws_from(bytes, skip_string(bytes, key));
    let value = skip_ws_from(bytes, colon + 1);
    let mut next = skip_ws_from(bytes, skip_value(bytes, value));
    if at(bytes, next) == b',' {
        next += 1;
    }
    Some(Member { key, value, next })
}

/// Whether a member of the object opened at `open`, before the one whose
/// name starts at `key`, has the same name.
const fn key_seen_before(bytes: &[u8], open: usize, key: usize) -> bool {
    let mut i = open + 1;
    while let Some(member) = member_at(bytes, i) {
        if member.key >= key {
            return false;
        }
        if strings_equal(bytes, member.key, bytes, key) {
            return true;
        }
        i = member.next;
    }
    false
}

/// Whether the top-level object at `open` has no `"type"` or has
/// `"type": "object"`.
const fn type_is_object(bytes: &[u8], open: usize) -> bool {
    let mut i = open + 1;
    while let Some(member) = member_at(bytes, i) {
        if strings_equal(bytes, member.key, b"\"type\"", 0) {
            return at(bytes, member.value) == b'"'
                && strings_equal(bytes, member.value, b"\"object\"", 0);
        }
        i = member.next;
    }
    true
}

/// One code point of a string literal and where the next one starts.
struct Point {
    code: u32,
    next: usize,
}

/// The code point at `i` inside an accepted string literal, or `None` at
/// its closing quote.
const fn point_at(bytes: &[u8], i: usize) -> Option<Point> {
    let b = at(bytes, i);
    match b {
        b'"' | 0 => None,
        b'\\' => Some(escaped_point(bytes, i)),
        0x00..=0x7f => Some(Point {
            code: b as u32,
            next: i + 1,
        }),
        _ => Some(utf8_point(bytes, i)),
    }
}

const fn escaped_point(bytes: &[u8], i: usize) -> Point {
    let code = match at(bytes, i + 1) {
        b'b' => 0x08,
        b't' => 0x09,
        b'n' => 0x0a,
        b'f' => 0x0c,
        b'r' => 0x0d,
        b'u' => {
            let high = match hex4(bytes, i + 2) {
                Some(unit) => unit,
                None => 0,
            };
            if let 0xD800..=0xDBFF = high {
                let low = match hex4(bytes, i + 8) {
                    Some(unit) => unit,
                    None => 0xDC00,
                };
                return Point {
                    code: 0x10000 + ((high - 0xD800) << 10) + (low.saturating_sub(0xDC00)),
                    next: i + 12,
                };
            }
            high
        }
        other => other as u32,
    };
    let next = if at(bytes, i + 1) == b'u' {
        i + 6
    } else {
        i + 2
    };
    Point { code, next }
}

/// A multi-byte UTF-8 character (the text is a `&str`, so it is well
/// formed).
const fn utf8_point(bytes: &[u8], i: usize) -> Point {
    let lead = at(bytes, i);
    let (len, mut code) = if lead >= 0xF0 {
        (4, (lead & 0x07) as u32)
    } else if lead >= 0xE0 {
        (3, (lead & 0x0F) as u32)
    } else {
        (2, (lead & 0x1F) as u32)
    };
    let mut k = 1;
    while k < len {
        code = (code << 6) | (at(bytes, i + k) & 0x3F) as u32;
        k += 1;
    }
    Point {
        code,
        next: i + len,
    }
}

/// Whether the string literal at `a` in `left` and the one at `b` in
/// `right` (both on their opening quote) hold the same text.
const fn strings_equal(left: &[u8], a: usize, right: &[u8], b: usize) -> bool {
    let (mut i, mut j) = (a + 1, b + 1);
    loop {
        match (point_at(left, i), point_at(right, j)) {
            (None, None) => return true,
            (Some(x), Some(y)) if x.code == y.code => {
                i = x.next;
                j = y.next;
            }
            _ => return false,
        }
    }
}
