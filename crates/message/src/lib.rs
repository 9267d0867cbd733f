//! # keel-message: provider-neutral message values
//!
//! This crate is the small, stable bottom of Keel, in the way `tracing-core`
//! is for `tracing`. It owns the values every other crate agrees on:
//!
//! - validated identifiers ([`RunId`], [`MessageId`], [`OperationId`],
//!   [`CallId`]) and names ([`ToolName`], [`ModelName`]);
//! - [`Role`], content [`Part`]s (text, tool call, tool result with
//!   images, [reasoning](ReasoningPart), [image](ImagePart),
//!   [file](FilePart)) and [`Message`];
//! - [`ToolDefinition`] and [`ModelRequest`] (host-issued operation id,
//!   model, immutable shared history and tools);
//! - [`ToolSpec`], a tool definition written as a `const` item and checked
//!   at compile time (name, description bound, object schema), whose
//!   [`definition`](ToolSpec::definition) cannot fail;
//! - [`EnvVarName`], the one rule for an environment variable's name;
//! - [`Limits`], the one place every bound lives, with documented defaults;
//! - [`CanonicalJson`], validated bounded RFC 8785 canonical JSON.
//!
//! Every value is validated when it is built, is immutable afterwards, and
//! is cheap to clone (an `Arc` inside). Deserializing goes through the same
//! constructors, so serde cannot build a value the constructors would
//! reject. Errors name the rule or bound they broke and where, and never
//! echo content.
//!
//! What it is not: it does no I/O, knows nothing of streams, events or
//! providers, and has no async code. `keel-stream` builds the model stream
//! union on top of it; `keel-eventlog` and everything above use its values
//! and its canonical JSON. Its dependencies are serde, serde_json,
//! thiserror, ryu-js (ECMAScript number formatting) and base64.
//!
//! ```
//! use keel_message::*;
//! use std::sync::Arc;
//!
//! let limits = Limits::default();
//! let call = Part::tool_call(
//!     CallId::parse("c1")?,
//!     ToolName::parse("get_weather")?,
//!     CanonicalJson::parse(r#"{ "city": "Oslo" }"#)?,
//! )?;
//! let history: Arc<[Message]> = vec![
//!     Message::text(MessageId::parse("m1")?, Role::User, "Weather in Oslo?")?,
//!     Message::new(MessageId::parse("m2")?, Role::Assistant, vec![call])?,
//!     Message::new(
//!         MessageId::parse("m3")?,
//!         Role::Tool,
//!         vec![Part::tool_result(CallId::parse("c1")?, r#"{"temp_c":3}"#, false)?],
//!     )?,
//! ]
//! .into();
//! let request = ModelRequest::new_with(
//!     OperationIdIssuer::new().issue(),
//!     ModelName::parse("scripted-1")?,
//!     history,
//!     Arc::from([]),
//!     &limits,
//! )?;
//! let json = serde_json::to_string(&request)?;
//! assert!(json.contains(r#""arguments":{"city":"Oslo"}"#));
//! assert_eq!(ModelRequest::from_json_with(&json, &limits)?, request);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod canonical;
pub mod decode;
mod env_var;
mod error;
mod file;
mod file_name;
mod https_url;
pub mod ids;
mod image;
mod limits;
mod media_bytes;
mod media_type;
mod message;
mod name_rules;
mod names;
mod opaque;
mod part;
mod part_wire;
mod provider_tag;
mod reasoning;
mod request;
mod role;
mod schema_check;
pub mod strict_json;
mod string_newtype;
mod tool;
mod tool_spec;
mod tool_spec_error;

pub use canonical::{CanonicalJson, JsonError};
pub use decode::DecodeError;
pub use env_var::{ENV_VAR_NAME_MAX_BYTES, EnvVarName, EnvVarNameError};
pub use error::{Base64Problem, MessageError, MessageErrorKind, UrlProblem};
pub use file::FilePart;
pub use file_name::{FILE_NAME_MAX_BYTES, FileName};
pub use https_url::{HTTPS_URL_MAX_BYTES, HttpsUrl};
pub use ids::{
    CallId, ID_MAX_BYTES, IdError, InteractionId, MessageId, OperationId, OperationIdIssuer, RunId,
};
pub use image::{ImageData, ImagePart};
pub use limits::{Bound, LimitExceeded, Limits};
pub use media_bytes::MediaBytes;
pub use media_type::{FileMediaType, ImageMediaType};
pub use message::Message;
pub use names::{ModelName, NameProblem, TOOL_NAME_MAX_BYTES, ToolName};
pub use opaque::OpaqueValue;
pub use part::{Part, TextPart, ToolCallPart, ToolResultPart};
pub use provider_tag::{PROVIDER_TAG_MAX_BYTES, ProviderTag};
pub use reasoning::ReasoningPart;
pub use request::ModelRequest;
pub use role::Role;
pub use tool::ToolDefinition;
pub use tool_spec::ToolSpec;
pub use tool_spec_error::{SchemaProblem, ToolSpecError};

#[doc(hidden)]
pub use serde as __serde;
