//! The frontends' stream protocols, as views over the one run log.
//!
//! Each view is a pure mapping from Keel events (canonical lines, in seq
//! order) to another protocol's messages: no second channel, no event
//! kind that exists only for a view, and nothing a view says that the log
//! does not hold. The daemon's routes (`serve/`) frame them for HTTP.

pub mod agui;
pub mod ui_stream;
