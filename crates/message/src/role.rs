//! [`Role`]: who a message is from (the parts each role admits are
//! checked where messages are built, in `message`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Who a message is from.
///
/// Each role admits certain parts (rule `message.role_parts`): `system`
/// holds text; `user` holds text, images and files; `assistant` holds text,
/// tool calls and reasoning; `tool` holds tool results (which may carry
/// images).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the host.
    System,
    /// The person (or program) the agent works for.
    User,
    /// The model.
    Assistant,
    /// Results of tool calls, fed back to the model.
    Tool,
}

impl Role {
    /// The wire name: `system`, `user`, `assistant` or `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
