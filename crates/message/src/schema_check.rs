//! The compile-time check behind [`ToolSpec::new`](crate::ToolSpec::new):
//! a `const fn` scan of a parameters schema that accepts exactly what
//! `ToolDefinition::new` accepts under the default limits (RFC 8259
//! syntax, no lone surrogates, no duplicate member names, depth, size and
//! number range, a top-level object whose `"type"` is `"object"`). It is
//! its own module because it is a JSON scanner, not a tool definition;
//! `const fn` rules it out of serde_json and closures.

use crate::tool_spec_error::{SchemaProblem, ToolSpecError};

/// `{` and `}` by name: the scanner matches them often, and named they
/// keep brace-counting tools (and readers) from miscounting blocks.
const OBJECT_OPEN: u8 = 0x7b;
const OBJECT_CLOSE: u8 = 0x7d;

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
pub(crate) const fn check_schema(bytes: &[u8]) -> Result<(), ToolSpecError> {
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
    if at(bytes, start) != OBJECT_OPEN || !type_is_object(bytes, start) {
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
            OBJECT_OPEN => self.object(depth + 1),
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
        if self.peek() == OBJECT_CLOSE {
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
                OBJECT_CLOSE => {
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
        OBJECT_OPEN | b'[' => {
            let mut depth = 0usize;
            while i < bytes.len() {
                match bytes[i] {
                    b'"' => {
                        i = skip_string(bytes, i);
                        continue;
                    }
                    OBJECT_OPEN | b'[' => depth += 1,
                    OBJECT_CLOSE | b']' => {
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
            while i < bytes.len()
                && !matches!(bytes[i], b',' | OBJECT_CLOSE | b']')
                && !is_ws(bytes[i])
            {
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
