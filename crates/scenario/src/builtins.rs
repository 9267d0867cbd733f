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
//! `read_file` reads only beneath the directory given with `--files DIR`,
//! opened once when the tool is built; every read resolves beneath that
//! handle in one step, so a symlink or directory swapped in mid-read
//! cannot lead outside ([`FilesRoot`], issue #22). It refuses absolute
//! paths, `..` components, any resolution that would leave the directory
//! (a symlink out of it, or any absolute symlink), anything that is not a
//! regular file, files over [`READ_FILE_MAX_BYTES`], and text that is not
//! UTF-8, each as a [`ReadFileError`] naming its rule and the path.
//! Relative symlinks that stay inside are followed. Without `--files` the
//! tool is not registered.

use keel_engine::{
    Tool, ToolError, ToolFuture, ToolInvocation, ToolOutcome, ToolOutput, ToolPolicy, ToolRetry,
};
use keel_message::{CanonicalJson, ToolDefinition, ToolName};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

mod read_file;

pub use read_file::{FilesRoot, READ_FILE_MAX_BYTES, ReadFileError};

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
    /// directory; `read_file` needs it and opens it here, once.
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
                let files = files.ok_or(BuiltinError::NeedsFiles)?;
                Kind::ReadFile(Arc::new(FilesRoot::open(files)?))
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
    /// The `--files` directory could not be opened for `read_file`.
    #[error("builtin read_file: cannot open the --files directory: {kind}")]
    FilesDir {
        /// What the OS said, as a kind (the path is the operator's own).
        kind: std::io::ErrorKind,
    },
    /// The built-in definition was refused (a bug).
    #[error("builtin definition refused: {0}")]
    Definition(String),
}

#[derive(Debug)]
enum Kind {
    Clock,
    Calculator,
    ReadFile(Arc<FilesRoot>),
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
                let now = crate::clock::rfc3339_utc(std::time::SystemTime::now());
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
                    match tokio::task::spawn_blocking(move || root.read(&path)).await {
                        Ok(result) => result
                            .map(ToolOutput::new)
                            .map_err(|e| refuse(e.to_string())),
                        Err(_) => Err(refuse("read_file: the reading task failed")),
                    }
                })
            }
        }
    }
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
/// use keel_scenario::builtins::evaluate;
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

    #[tokio::test]
    async fn read_file_refusals_are_definitive_and_name_the_rule() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let tool = Builtin::ReadFile
            .tool(ToolPolicy::default(), Some(&root))
            .unwrap();
        let call = |path: &str| ToolInvocation {
            run_id: keel_message::RunId::generate(),
            turn: 1,
            call_id: keel_message::CallId::parse("c1").unwrap(),
            arguments: CanonicalJson::parse(&serde_json::json!({ "path": path }).to_string())
                .unwrap(),
        };
        let out = tool.call(call("a.txt")).await.unwrap();
        assert_eq!(out.content(), "hello");
        let e = tool.call(call("../a.txt")).await.unwrap_err();
        assert!(
            e.message.starts_with("read_file.no_parent:"),
            "{}",
            e.message
        );
        assert_eq!(e.outcome, Some(ToolOutcome::Definitive));
        assert_eq!(e.retry, Some(ToolRetry::NotRetryable));
        assert!(matches!(
            Builtin::ReadFile.tool(ToolPolicy::default(), None),
            Err(BuiltinError::NeedsFiles)
        ));
        assert!(matches!(
            Builtin::ReadFile.tool(ToolPolicy::default(), Some(&root.join("nowhere"))),
            Err(BuiltinError::FilesDir { .. })
        ));
    }
}
