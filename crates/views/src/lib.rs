//! # keel-views: a run's log in the frontends' stream protocols
//!
//! Each view is a pure mapping from Keel events (canonical lines, in seq
//! order) to another protocol's messages: the Vercel AI SDK's UI message
//! stream ([`ui_stream`], what `useChat` reads) and AG-UI ([`agui`]). No
//! second channel, no event kind that exists only for a view, and nothing
//! a view says that the log does not hold.
//!
//! What it is not: no HTTP, no framing, no storage. `keel-serve` frames
//! these values as SSE and reads the events from a run's log or the
//! journal; this crate only maps them. It depends on `keel-eventlog` and
//! `keel-message`, and nothing above them.
//!
//! ```
//! use keel_views::ui_stream::{Chunk, UiStream};
//! // A response opens with the message that is the run.
//! let start = UiStream::start("run_1");
//! assert_eq!(start.to_json(), r#"{"type":"start","messageId":"run_1"}"#);
//! assert!(!UiStream::new().ended());
//! # let _ = Chunk::StartStep;
//! ```
#![deny(missing_docs)]

pub mod agui;
mod media;
pub mod sub_run;
pub mod ui_stream;
pub mod user_media;
