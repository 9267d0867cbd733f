//! Built-in tools: small, safe, and useful in demos.
//!
//! | `builtin` | tool name | arguments | result |
//! | --- | --- | --- | --- |
//! | `clock` | `clock` | `{}` (anything is ignored) | the current UTC time, RFC 3339, from the system clock |
//! | `calculator` | `calculator` | `{"expression": "2 * (3 + 4.5)"}` | the value, as a JSON number (`16`) |
//! | `read_file` | `read_file` | `{"path": "notes/todo.txt"}` | the file's text |
//!
//! Every refusal is a typed [`ToolError`] with outcome `definitive` and
//! retry `not_retryable`: nothing happened, and trying again with the same
//! arguments will not help. The model sees it as an error tool result; the
//! log records it as `tool.failed`.
//!
//! `read_file` reads only under the directory given with `--files DIR`. It
//! refuses absolute paths, `..` components, anything whose canonical path
//! leaves the directory (a symlink pointing out of it included), anything
//! that is not a regular file, files over [`READ_FILE_MAX_BYTES`], and
//! text that is not UTF-8. Without `--files` the tool is not registered.

use keel_engine::{
    Tool, ToolError, ToolFuture, ToolInvocation, ToolOutcome, ToolOutput, ToolPolicy, ToolRetry,
};
use keel_message::{CanonicalJson, ToolDefinition, ToolName};
use serde_json::Value;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The largest file `read_file` returns: 64 KiB.
pub const READ_FILE_MAX_BYTES: u64 = 64 * 1024;

/// The longest expression `calculator` parses, in bytes.
pub const CALCULATOR_MAX_BYTES: usize = 1024;

/// The deepest parenthesis nesting `calculator` accepts.
pub const CALCULATOR_MAX_DEPTH: usize = 64;

/// One of the built-in tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// The current UTC time.
    Clock,
    /// Arithmetic on f64: `+ - * /`, unary minus, parentheses.
    Calculator,
    /// A UTF-8 file under `--files DIR`.
    ReadFile,
}

impl Builtin {
    /// Every built-in tool.
    pub const ALL: [Builtin; 3] = [Builtin::Clock, Builtin::Calculator, Builtin::ReadFile];

    /// The scenario id (`"builtin": "<id>"`).
    pub fn id(self) -> &'static str {
        match self {
            Builtin::Clock => "clock",
            Builtin::Calculator => "calculator",
            Builtin::ReadFile => "read_file",
        }
    }

    /// The tool name the model calls (the same as the id).
    pub fn tool_name(self) -> &'static str {
        self.id()
    }

    /// Parses a scenario id.
    pub fn parse(id: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.id() == id)
    }

    fn description(self) -> &'static str {
        match self {
            Builtin::Clock => "The current date and time in UTC (RFC 3339).",
            Builtin::Calculator => {
                "Evaluates an arithmetic expression with + - * / and parentheses on decimal numbers."
            }
            Builtin::ReadFile => {
                "Reads a UTF-8 text file (at most 64 KiB) by its path relative to the files directory."
            }
        }
    }

    fn parameters(self) -> &'static str {
        match self {
            Builtin::Clock => r#"{"type":"object","properties":{}}"#,
            Builtin::Calculator => {
                r#"{"type":"object","properties":{"expression":{"type":"string","description":"e.g. 2 * (3 + 4.5)"}},"required":["expression"]}"#
            }
            Builtin::ReadFile => {
                r#"{"type":"object","properties":{"path":{"type":"string","description":"relative to the files directory"}},"required":["path"]}"#
            }
        }
    }

    /// The tool's definition.
    pub fn definition(self) -> Result<ToolDefinition, keel_message::MessageError> {
        ToolDefinition::new(
            ToolName::parse(self.tool_name())?,
            self.description(),
            CanonicalJson::parse(self.parameters())?,
        )
    }

    /// The tool, under `policy`. `files` is the canonical `--files`
    /// directory; `read_file` needs it.
    pub fn tool(
        self,
        policy: ToolPolicy,
        files: Option<&Path>,
    ) -> Result<Arc<dyn Tool>, BuiltinError> {
        let definition = self
            .definition()
            .map_err(|e| BuiltinError::Definition(e.to_string()))?;
        let kind = match self {
            Builtin::Clock => Kind::Clock,
            Builtin::Calculator => Kind::Calculator,
            Builtin::ReadFile => {
                Kind::ReadFile(files.ok_or(BuiltinError::NeedsFiles)?.to_path_buf())
            }
        };
        Ok(Arc::new(BuiltinTool {
            definition,
            policy,
            kind,
        }))
    }
}

/// Why a built-in tool could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    /// `read_file` without `--files DIR`.
    #[error("builtin read_file needs --files DIR (the only directory it may read)")]
    NeedsFiles,
    /// The built-in definition was refused (a bug).
    #[error("builtin definition refused: {0}")]
    Definition(String),
}

#[derive(Debug)]
enum Kind {
    Clock,
    Calculator,
    ReadFile(PathBuf),
}

#[derive(Debug)]
struct BuiltinTool {
    definition: ToolDefinition,
    policy: ToolPolicy,
    kind: Kind,
}

fn refuse(message: impl Into<String>) -> ToolError {
    ToolError::typed(message, ToolOutcome::Definitive, ToolRetry::NotRetryable)
}

/// The string member `name` of an arguments object.
fn string_arg(arguments: &CanonicalJson, name: &str) -> Result<String, ToolError> {
    match arguments.to_value() {
        Value::Object(map) => match map.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(refuse(format!("argument `{name}` must be a string"))),
            None => Err(refuse(format!("missing argument `{name}`"))),
        },
        _ => Err(refuse("arguments must be a JSON object")),
    }
}

impl Tool for BuiltinTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn policy(&self) -> ToolPolicy {
        self.policy.clone()
    }

    fn call(&self, invocation: ToolInvocation) -> ToolFuture {
        match &self.kind {
            Kind::Clock => {
                let now = crate::time::rfc3339_utc(std::time::SystemTime::now());
                let now = now.map(ToolOutput::new);
                Box::pin(std::future::ready(now.ok_or_else(|| {
                    ToolError::typed(
                        "the system clock is before 1970 or after 9999",
                        ToolOutcome::Definitive,
                        ToolRetry::NotRetryable,
                    )
                })))
            }
            Kind::Calculator => {
                let result = string_arg(&invocation.arguments, "expression").and_then(|expr| {
                    evaluate(&expr)
                        .map_err(|e| refuse(e.to_string()))
                        .and_then(|v| {
                            keel_message::canonical::format_number(v)
                                .ok_or_else(|| refuse("the result is not a finite number"))
                        })
                });
                let result = result.map(ToolOutput::new);
                Box::pin(std::future::ready(result))
            }
            Kind::ReadFile(root) => {
                let root = root.clone();
                let path = string_arg(&invocation.arguments, "path");
                Box::pin(async move {
                    let path = path?;
                    match tokio::task::spawn_blocking(move || read_under(&root, &path)).await {
                        Ok(result) => result.map(ToolOutput::new),
                        Err(_) => Err(refuse("read_file: the reading task failed")),
                    }
                })
            }
        }
    }
}

/// Reads `relative` under the canonical directory `root`, with every check
/// of the module docs.
pub fn read_under(root: &Path, relative: &str) -> Result<String, ToolError> {
    if relative.is_empty() {
        return Err(refuse("path is empty"));
    }
    let rel = Path::new(relative);
    if rel.is_absolute() || relative.starts_with('/') || relative.starts_with('\\') {
        return Err(refuse(
            "absolute paths are refused; give a path relative to the files directory",
        ));
    }
    for component in rel.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(refuse("`..` is refused in paths")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("absolute paths are refused"));
            }
        }
    }
    let joined = root.join(rel);
    let canonical = match std::fs::canonicalize(&joined) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(format!("no such file: {relative}")));
        }
        Err(e) => return Err(refuse(format!("cannot resolve {relative}: {e}"))),
    };
    if !canonical.starts_with(root) {
        return Err(refuse(format!(
            "{relative} resolves outside the files directory (a symlink?); refused"
        )));
    }
    // Checked before opening too: opening a FIFO blocks until a writer
    // comes, which would hold a thread past the tool's timeout.
    match std::fs::metadata(&canonical) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(refuse(format!("{relative} is not a regular file"))),
        Err(e) => return Err(refuse(format!("cannot stat {relative}: {e}"))),
    }
    let file = std::fs::File::open(&canonical)
        .map_err(|e| refuse(format!("cannot open {relative}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot stat {relative}: {e}")))?;
    if !meta.is_file() {
        return Err(refuse(format!("{relative} is not a regular file")));
    }
    if meta.len() > READ_FILE_MAX_BYTES {
        return Err(refuse(format!(
            "{relative} is {} bytes, over the {READ_FILE_MAX_BYTES}-byte limit",
            meta.len()
        )));
    }
    // Read at most one byte past the bound, in case the file grew.
    let mut bytes = Vec::new();
    file.take(READ_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read {relative}: {e}")))?;
    if bytes.len() as u64 > READ_FILE_MAX_BYTES {
        return Err(refuse(format!(
            "{relative} is over the {READ_FILE_MAX_BYTES}-byte limit"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        refuse(format!(
            "{relative} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at byte {offset})")]
pub struct CalcError {
    /// What is wrong.
    pub message: String,
    /// Byte offset into the expression.
    pub offset: usize,
}

/// Evaluates `expr`: decimal numbers, `+ - * /`, unary `+`/`-` and
/// parentheses, on f64, by recursive descent. Anything else, division by
/// zero and non-finite results are errors.
///
/// ```
/// use keel_cli::builtins::evaluate;
/// assert_eq!(evaluate("2 * (3 + 4.5)"), Ok(15.0));
/// assert_eq!(evaluate("-2 - -3"), Ok(1.0));
/// assert!(evaluate("1 / 0").is_err());
/// assert!(evaluate("2 ^ 3").is_err());
/// ```
pub fn evaluate(expr: &str) -> Result<f64, CalcError> {
    if expr.len() > CALCULATOR_MAX_BYTES {
        return Err(CalcError {
            message: format!("expression is over {CALCULATOR_MAX_BYTES} bytes"),
            offset: CALCULATOR_MAX_BYTES,
        });
    }
    let mut parser = Parser {
        text: expr.as_bytes(),
        pos: 0,
        depth: 0,
    };
    parser.skip_space();
    if parser.pos == parser.text.len() {
        return Err(parser.error("empty expression"));
    }
    let value = parser.expr()?;
    parser.skip_space();
    if parser.pos != parser.text.len() {
        return Err(parser.unexpected());
    }
    if !value.is_finite() {
        return Err(CalcError {
            message: "the result is not a finite number".into(),
            offset: 0,
        });
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> CalcError {
        CalcError {
            message: message.into(),
            offset: self.pos,
        }
    }

    fn unexpected(&self) -> CalcError {
        match self.text.get(self.pos) {
            None => self.error("unexpected end of expression"),
            Some(b) if b.is_ascii_graphic() => {
                self.error(format!("unexpected character '{}'", char::from(*b)))
            }
            Some(_) => self.error("unexpected character"),
        }
    }

    fn skip_space(&mut self) {
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.get(self.pos).copied()
    }

    /// expr := term (('+' | '-') term)*
    fn expr(&mut self) -> Result<f64, CalcError> {
        let mut value = self.term()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.pos += 1;
            let rhs = self.term()?;
            value = if op == b'+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    /// term := unary (('*' | '/') unary)*
    fn term(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let rhs = self.unary()?;
            if op == b'*' {
                value *= rhs;
            } else {
                if rhs == 0.0 {
                    return Err(CalcError {
                        message: "division by zero".into(),
                        offset: at,
                    });
                }
                value /= rhs;
            }
            if !value.is_finite() {
                return Err(CalcError {
                    message: "overflow: the result is not a finite number".into(),
                    offset: at,
                });
            }
        }
        Ok(value)
    }

    /// unary := ('+' | '-') unary | primary
    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some(op @ (b'+' | b'-')) => {
                self.enter()?;
                self.pos += 1;
                let v = self.unary();
                self.depth -= 1;
                let v = v?;
                Ok(if op == b'-' { -v } else { v })
            }
            _ => self.primary(),
        }
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        if self.depth >= CALCULATOR_MAX_DEPTH {
            return Err(self.error(format!("nested deeper than {CALCULATOR_MAX_DEPTH}")));
        }
        self.depth += 1;
        Ok(())
    }

    /// primary := number | '(' expr ')'
    fn primary(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some(b'(') => {
                self.enter()?;
                self.pos += 1;
                let v = self.expr();
                self.depth -= 1;
                let v = v?;
                if self.peek() != Some(b')') {
                    return Err(match self.text.get(self.pos) {
                        None => self.error("missing ')'"),
                        Some(_) => self.unexpected(),
                    });
                }
                self.pos += 1;
                Ok(v)
            }
            Some(b'0'..=b'9' | b'.') => self.number(),
            _ => Err(self.unexpected()),
        }
    }

    /// number := digits ('.' digits?)? | '.' digits
    fn number(&mut self) -> Result<f64, CalcError> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.text.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos - from
        };
        let int = digits(self);
        let mut frac = 0;
        if self.text.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            frac = digits(self);
        }
        if int == 0 && frac == 0 {
            self.pos = start;
            return Err(self.error("a number needs at least one digit"));
        }
        let text = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or("");
        text.parse::<f64>().map_err(|_| CalcError {
            message: "not a number".into(),
            offset: start,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn arithmetic() {
        for (expr, want) in [
            ("1", 1.0),
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("10 / 4", 2.5),
            ("-(2 + 3)", -5.0),
            ("--2", 2.0),
            ("+.5", 0.5),
            ("2.", 2.0),
            ("8 - 2 - 1", 5.0),
            ("64 / 4 / 2", 8.0),
            ("  3\t*\n3 ", 9.0),
        ] {
            assert_eq!(evaluate(expr), Ok(want), "{expr}");
        }
    }

    #[test]
    fn refusals() {
        for expr in [
            "",
            " ",
            "1 +",
            "(1",
            "1)",
            "2 ^ 3",
            "1e3",
            "abc",
            "1 / 0",
            "1 / (2 - 2)",
            ".",
            "1..2",
            "sqrt(4)",
            "1 2",
        ] {
            assert!(evaluate(expr).is_err(), "{expr}");
        }
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(evaluate(&deep).unwrap_err().message.contains("nested"));
        let minus = format!("{}1", "-".repeat(100));
        assert!(evaluate(&minus).is_err());
        assert!(evaluate(&"1+".repeat(600)).is_err());
        let big = format!("{}*{}", "9".repeat(300), "9".repeat(300));
        assert!(evaluate(&big).is_err());
    }

    #[test]
    fn error_names_offset() {
        let e = evaluate("1 + x").unwrap_err();
        assert_eq!(e.offset, 4);
        assert!(e.to_string().contains("'x'"));
    }

    #[test]
    fn read_file_checks() {
        let dir = std::env::temp_dir().join(format!("keel-cli-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/sub")).unwrap();
        std::fs::write(dir.join("root/sub/a.txt"), "hello").unwrap();
        std::fs::write(dir.join("secret.txt"), "nope").unwrap();
        std::fs::write(dir.join("root/big.txt"), vec![b'a'; 70_000]).unwrap();
        std::fs::write(dir.join("root/bin.dat"), [0xff, 0xfe]).unwrap();
        let root = std::fs::canonicalize(dir.join("root")).unwrap();
        assert_eq!(read_under(&root, "sub/a.txt").unwrap(), "hello");
        assert_eq!(read_under(&root, "./sub/a.txt").unwrap(), "hello");
        let msg = |p: &str| read_under(&root, p).unwrap_err().message;
        assert!(msg("../secret.txt").contains(".."));
        assert!(msg("sub/../../secret.txt").contains(".."));
        assert!(msg("/etc/passwd").contains("absolute"));
        assert!(msg("missing.txt").contains("no such file"));
        assert!(msg("big.txt").contains("limit"));
        assert!(msg("bin.dat").contains("UTF-8"));
        assert!(msg("sub").contains("not a regular file"));
        assert!(msg("").contains("empty"));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.join("secret.txt"), dir.join("root/link.txt")).unwrap();
            assert!(msg("link.txt").contains("outside"));
            // A FIFO is refused before it is opened (opening would block
            // until a writer comes).
            let made = std::process::Command::new("mkfifo")
                .arg(dir.join("root/pipe"))
                .status()
                .is_ok_and(|s| s.success());
            if made {
                let (tx, rx) = std::sync::mpsc::channel();
                let root = root.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(read_under(&root, "pipe").map_err(|e| e.message));
                });
                let got = rx
                    .recv_timeout(std::time::Duration::from_secs(10))
                    .expect("read_file blocked on a FIFO");
                assert!(got.unwrap_err().contains("not a regular file"));
            }
        }
        let e = read_under(&root, "../secret.txt").unwrap_err();
        assert_eq!(e.outcome, Some(ToolOutcome::Definitive));
        assert_eq!(e.retry, Some(ToolRetry::NotRetryable));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
