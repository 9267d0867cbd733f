//! `RunAgentInput` bodies through one `check` helper.
