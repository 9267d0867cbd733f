//! Rust source to a token stream with comments, doc comments, string and
//! character literals removed, so that `crate::x` written in prose or in a
//! literal is never taken for a reference.
//!
//! This is not a full Rust lexer: it knows exactly as much as it takes to
//! find where comments and literals start and end (nested block comments,
//! escapes, raw strings with any number of `#`, byte and C strings, char
//! literals versus lifetimes). Everything else is identifiers and single
//! punctuation characters, with `::` as one token.

/// One token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) kind: Kind,
    pub(crate) line: usize,
}

/// What a token is; literals and comments produce none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An identifier or keyword (`crate`, `super`, `mod`, `use`, names).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character (`{`, `}`, `,`, `;`, `*`, `$`, …).
    Punct(char),
}

impl Token {
    /// Whether this token is the identifier `word`.
    pub(crate) fn is_ident(&self, word: &str) -> bool {
        matches!(&self.kind, Kind::Ident(w) if w == word)
    }

    /// Whether this token is the punctuation `c`.
    pub(crate) fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }

    /// The identifier, if this token is one.
    pub(crate) fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(w) => Some(w),
            _ => None,
        }
    }
}

/// A cursor over the source's characters that counts lines.
struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl Cursor<'_> {
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    /// The character after the next one, without consuming anything.
    fn peek2(&self) -> Option<char> {
        let mut ahead = self.chars.clone();
        ahead.next();
        ahead.next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }
}

/// The tokens of `source`, without comments and literals. An unterminated
/// comment or literal simply runs to the end of the file.
pub(crate) fn tokens(source: &str) -> Vec<Token> {
    let mut cur = Cursor {
        chars: source.chars().peekable(),
        line: 1,
    };
    let mut out = Vec::new();
    while let Some(c) = cur.peek() {
        let line = cur.line;
        if c == '/' && cur.peek2() == Some('/') {
            skip_line(&mut cur);
        } else if c == '/' && cur.peek2() == Some('*') {
            skip_block_comment(&mut cur);
        } else if c == '"' {
            cur.bump();
            skip_quoted(&mut cur, '"');
        } else if c == '\'' {
            cur.bump();
            skip_char_or_lifetime(&mut cur);
        } else if c == '_' || c.is_alphabetic() {
            let word = ident(&mut cur);
            if !skip_prefixed_literal(&mut cur, &word) {
                out.push(Token {
                    kind: Kind::Ident(word),
                    line,
                });
            }
        } else if c.is_ascii_digit() {
            // Numbers (with suffixes such as `1u8`) are not identifiers.
            while cur.peek().is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                cur.bump();
            }
        } else if c.is_whitespace() {
            cur.bump();
        } else {
            cur.bump();
            let kind = if c == ':' && cur.eat(':') {
                Kind::PathSep
            } else {
                Kind::Punct(c)
            };
            out.push(Token { kind, line });
        }
    }
    out
}

fn ident(cur: &mut Cursor<'_>) -> String {
    let mut word = String::new();
    while let Some(c) = cur.peek().filter(|&c| c == '_' || c.is_alphanumeric()) {
        word.push(c);
        cur.bump();
    }
    word
}

fn skip_line(cur: &mut Cursor<'_>) {
    while cur.peek().is_some_and(|c| c != '\n') {
        cur.bump();
    }
}

/// `/* … */`, nested as Rust nests them.
fn skip_block_comment(cur: &mut Cursor<'_>) {
    cur.bump();
    cur.bump();
    let mut depth = 1usize;
    while let Some(c) = cur.bump() {
        if c == '/' && cur.eat('*') {
            depth += 1;
        } else if c == '*' && cur.eat('/') {
            depth -= 1;
            if depth == 0 {
                return;
            }
        }
    }
}

/// The rest of a literal opened by `close`, honouring backslash escapes.
fn skip_quoted(cur: &mut Cursor<'_>, close: char) {
    while let Some(c) = cur.bump() {
        if c == '\\' {
            cur.bump();
        } else if c == close {
            return;
        }
    }
}

/// After a `'`: a char literal (`'a'`, `'\''`, `'"'`) is skipped; a
/// lifetime or label (`'a`, `'static`) leaves its name, which is harmless.
fn skip_char_or_lifetime(cur: &mut Cursor<'_>) {
    match (cur.peek(), cur.peek2()) {
        (Some('\\'), _) => skip_quoted(cur, '\''),
        (Some(_), Some('\'')) => {
            cur.bump();
            cur.bump();
        }
        _ => {}
    }
}

/// After an identifier: if it was a literal prefix (`b"…"`, `b'x'`,
/// `r"…"`, `r#"…"#`, `br`, `c`, `cr`) immediately followed by its literal,
/// skips the literal and says so.
fn skip_prefixed_literal(cur: &mut Cursor<'_>, word: &str) -> bool {
    match (word, cur.peek()) {
        ("b" | "c", Some('"')) => {
            cur.bump();
            skip_quoted(cur, '"');
            true
        }
        ("b", Some('\'')) => {
            cur.bump();
            skip_quoted(cur, '\'');
            true
        }
        ("r" | "br" | "cr", Some('"' | '#')) => skip_raw_string(cur),
        _ => false,
    }
}

/// `#…#"…"#…#` after its `r`; a `r#ident` raw identifier is not a string
/// and is left to the main loop.
fn skip_raw_string(cur: &mut Cursor<'_>) -> bool {
    let mut hashes = 0usize;
    let mut ahead = cur.chars.clone();
    while ahead.peek() == Some(&'#') {
        ahead.next();
        hashes += 1;
    }
    if ahead.peek() != Some(&'"') {
        // `r#type`: drop the `#`, the name follows as an identifier.
        return false;
    }
    for _ in 0..=hashes {
        cur.bump();
    }
    while let Some(c) = cur.bump() {
        if c == '"' {
            let mut closing = 0usize;
            while closing < hashes && cur.eat('#') {
                closing += 1;
            }
            if closing == hashes {
                return true;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokens(source)
            .into_iter()
            .filter_map(|t| t.ident().map(str::to_owned))
            .collect()
    }

    #[test]
    fn comments_and_literals_are_dropped() {
        let src = "a // crate::x\n/* crate::y /* nested */ crate::z */ b \
                   \"crate::s \\\" crate::t\" c r#\"crate::\"u\"# d b\"crate::v\" \
                   '\"' e 'x' f '\\'' g";
        assert_eq!(idents(src), ["a", "b", "c", "d", "e", "f", "g"]);
    }

    #[test]
    fn lifetimes_are_not_char_literals() {
        assert_eq!(
            idents("fn f<'a>(x: &'a str) -> crate"),
            ["fn", "f", "a", "x", "a", "str", "crate"]
        );
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let toks = tokens("/*\n\n*/ \"\n\" x");
        assert_eq!(toks.len(), 1);
        assert_eq!(toks[0].line, 4);
    }

    #[test]
    fn raw_identifiers_stay_identifiers() {
        assert_eq!(idents("r#type x"), ["r", "type", "x"]);
    }
}
