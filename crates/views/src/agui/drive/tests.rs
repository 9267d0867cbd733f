//! The agent stream, event by event, through one `check` helper.
