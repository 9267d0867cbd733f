//! Why a server entry was refused (`McpConfigError`): the error of the
//! configuration types, which the start errors in `error.rs` name.

/// Why a server entry was refused: the member at fault (relative to the
/// entry, `env[1]`; empty for the entry itself), the rule, and what is
/// wrong. Values are never echoed, only their sizes (a variable's *name*
/// is said for `mcp.env_secret`: it is one of Keel's own, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message} (rule {rule})", if path.is_empty() { String::new() } else { format!("at {path}: ") })]
pub struct McpConfigError {
    path: String,
    rule: &'static str,
    message: String,
}

impl McpConfigError {
    pub(crate) fn new(path: impl Into<String>, rule: &'static str, message: String) -> Self {
        McpConfigError {
            path: path.into(),
            rule,
            message,
        }
    }

    /// The member at fault, relative to the entry (`env[1]`), or empty.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule it broke (`mcp.env_name`).
    pub fn rule(&self) -> &'static str {
        self.rule
    }

    /// What is wrong, without the offending value.
    pub fn message(&self) -> &str {
        &self.message
    }
}
