//! # keel-providers: real provider wire formats
//!
//! This crate adapts the streaming wire formats of real model providers to
//! the `keel-stream` union. It owns these
//! [`ModelProvider`](keel_stream::ModelProvider)s:
//!
//! - [`OpenAiCompatible`]: OpenAI Chat Completions streaming
//!   (`POST {base_url}/chat/completions`), the format OpenAI, vLLM,
//!   Ollama, llama.cpp and LM Studio speak;
//! - [`Anthropic`]: Anthropic Messages streaming (`POST {base_url}/messages`);
//! - [`Gemini`]: Google Gemini streaming (`POST
//!   {base_url}/models/{model}:streamGenerateContent?alt=sse`, the key in
//!   `x-goog-api-key`, never in the URL).
//! - [`OpenAiResponses`]: the OpenAI Responses API streaming
//!   (`POST {base_url}/responses`), stateless (`store: false`, the whole
//!   history as `input`), the API of OpenAI's reasoning models.
//!
//! Each builds the request from a [`ModelRequest`](keel_message::ModelRequest)
//! (history, tools, model), sends it over HTTP/1.1 (reqwest; TLS through
//! rustls with the `rustls` feature, never OpenSSL) with a connect and an
//! idle timeout, reads the Server-Sent
//! Events of the response, and yields [`RawItem`](keel_stream::RawItem)s:
//! text deltas, finalized tool calls (fragments assembled first), then one
//! terminal, a completion (finish reason, usage, metadata) or a failure (a
//! typed problem kind, `retryable`, retry-after).
//!
//! Decisions worth knowing (the RFC `2026-11-30-provider-wire-formats`
//! has the full mapping tables and the reasons):
//!
//! - **The stream ends at the wire's terminator.** OpenAI's completion is
//!   yielded at `data: [DONE]` (the usage chunk comes after
//!   `finish_reason`), Anthropic's at `message_stop`, the Responses API's
//!   at `response.completed` or `response.incomplete` (`max_output_tokens`
//!   is the `length` finish), Gemini's at the chunk carrying a
//!   `finishReason` (its stream has no terminator). A body that ends
//!   before it is an `unavailable`, retryable failure; the host computes
//!   whether it is `partial`.
//! - **A broken chunk stops the stream.** A data line that is not JSON, an
//!   SSE event over `max_chunk_bytes`, or an unknown finish reason is a
//!   `protocol` failure, not retryable; nothing after it is read.
//! - **Unknown members and event types are ignored**; so are logprobs
//!   and OpenAI's `obfuscation` padding.
//! - **Reasoning is decoded and round-tripped per provider.** Anthropic
//!   `thinking` blocks yield reasoning deltas closed by their signature,
//!   `redacted_thinking` a redacted part; OpenAI-compatible
//!   `reasoning_content` (else `reasoning`) yields reasoning deltas;
//!   Gemini `thought: true` parts yield reasoning deltas, and a
//!   `thoughtSignature` signs the thought it came on, or is a redacted
//!   part kept next to the call or text it came on. Each
//!   adapter tags its parts ([`ModelProvider::provider_tag`](keel_stream::ModelProvider::provider_tag):
//!   `anthropic`, `openai-compatible`, `gemini`) and sends back only its own:
//!   Anthropic every signed or redacted part byte for byte, in place;
//!   Gemini every thought, and each signature on the part it came on;
//!   OpenAI-compatible the text as `reasoning_content`, only when
//!   [`OpenAiOptions::send_reasoning`] is on (off by default: DeepSeek
//!   refuses it). The Responses adapter (`openai-responses`) streams a
//!   reasoning item's summary as reasoning deltas and seals the item (its
//!   `id`, summary part lengths and `encrypted_content`, asked for with
//!   `include`) into the part's signature (a redacted part when it had no
//!   summary), and sends it back as the same `reasoning` input item, byte
//!   for byte. Other reasoning is dropped without error.
//! - **Images and files go in their documented shapes**: Anthropic
//!   `image` and `document` blocks (images inside `tool_result` too);
//!   Gemini `inlineData` (and `fileData` for an image URL);
//!   OpenAI-compatible `image_url` data URLs and `file` parts, and a note
//!   naming the images a tool result could not carry (count, media types,
//!   sizes); Responses `input_image` and `input_file` (in a tool result's
//!   `output` list too).
//! - **The key stays secret.** An [`ApiKey`] prints `[redacted]`, goes only
//!   into its (sensitive) header, and is scrubbed from every problem
//!   message and metadata value; redirects are not followed.
//! - **Metadata is a handful of safe facts** under the namespaces
//!   [`OPENAI_NAMESPACE`] (both OpenAI adapters), [`ANTHROPIC_NAMESPACE`] and
//!   [`GEMINI_NAMESPACE`]: the response id, the
//!   model actually served, the service tier, OpenAI's system fingerprint
//!   and the request id. A host keeps them by allowlisting the namespace.
//! - **Dropping is cancelling.** Dropping the start future or the stream
//!   drops the HTTP response and closes its connection.
//!
//! All are one adapter shell with a different wire format plugged in:
//! they share [`ProviderConfig`] (base URL, key, timeouts, bounds; its
//! `Debug` redacts the key), whose `wire` field holds what only that format
//! has ([`OpenAiOptions`], [`AnthropicOptions`], [`ResponsesOptions`],
//! [`GeminiOptions`]); [`OpenAiConfig`], [`AnthropicConfig`],
//! [`OpenAiResponsesConfig`] and [`GeminiConfig`] name them.
//!
//! | feature | default | what it adds | what it compiles |
//! | --- | --- | --- | --- |
//! | `rustls` | on | `https://` base URLs (the public APIs' defaults) | reqwest's rustls backend: rustls, aws-lc-rs, the platform verifier |
//!
//! Without `rustls`, a provider whose base URL is `https://` is refused
//! when it is built ([`ProviderConfigError::TlsDisabled`], rule `config.tls`,
//! naming the feature), never at the first request; `http://` (a local
//! Ollama, vLLM or llama.cpp) works the same, and `cargo tree -p
//! keel-providers --no-default-features` holds no TLS crate. The `keel`
//! facade's `providers` feature takes this crate without TLS; its `tls`
//! feature turns `rustls` on.
//!
//! What it is not: it does not retry (the engine does), validate the
//! stream (the host's `StreamValidator` does, so every adapter output is
//! checked the same way), or know about scenarios and the CLI (`keel-cli`
//! builds providers from its configuration with the constructors here).
//! It names only `keel-message` and `keel-stream`.
//!
//! ```
//! use keel_message::*;
//! use keel_providers::{ApiKey, OpenAiCompatible, OpenAiConfig};
//! use keel_stream::*;
//! use futures_util::StreamExt;
//! use std::sync::Arc;
//! # use std::io::{BufRead, BufReader, Read, Write};
//! # // A one-shot local server that answers with a short stream.
//! # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! # let base_url = format!("http://{}/v1", listener.local_addr()?);
//! # std::thread::spawn(move || -> std::io::Result<()> {
//! #     let (socket, _) = listener.accept()?;
//! #     let mut reader = BufReader::new(socket);
//! #     let mut length = 0;
//! #     loop {
//! #         let mut line = String::new();
//! #         reader.read_line(&mut line)?;
//! #         if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") { length = v.trim().parse().unwrap_or(0); }
//! #         if line == "\r\n" { break; }
//! #     }
//! #     reader.read_exact(&mut vec![0; length])?;
//! #     let body = concat!(
//! #         "data: {\"id\":\"chatcmpl-1\",\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n",
//! #         "data: {\"id\":\"chatcmpl-1\",\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
//! #         "data: {\"id\":\"chatcmpl-1\",\"model\":\"m-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n",
//! #         "data: [DONE]\n\n",
//! #     );
//! #     write!(reader.get_mut(), "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}", body.len())
//! # });
//!
//! // `base_url` is a local server here; with Ollama it would be
//! // "http://127.0.0.1:11434/v1", and the key
//! // `ApiKey::from_env(&EnvVarName::parse("OPENAI_API_KEY")?)?`.
//! let provider = OpenAiCompatible::new(OpenAiConfig {
//!     base_url,
//!     api_key: Some(ApiKey::new("sk-local-example")?),
//!     ..OpenAiConfig::default()
//! })?;
//! assert!(!format!("{provider:?}").contains("sk-local-example"));
//!
//! let history: Arc<[Message]> = vec![Message::text(MessageId::parse("m1")?, Role::User, "Hi")?].into();
//! let request = ModelRequest::new(OperationIdIssuer::new().issue(), ModelName::parse("m-1")?, history, Arc::from([]))?;
//! let validator = StreamValidator::new(
//!     ValidatorConfig::default(),
//!     Limits::default(),
//!     MetadataAllowlist::new(["openai"])?,
//! );
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let items: Vec<StreamItem> = rt.block_on(async {
//!     match provider.start(request).await {
//!         Ok(stream) => validate(stream, validator).collect().await,
//!         Err(problem) => panic!("{problem:?}"),
//!     }
//! });
//! assert_eq!(items.len(), 2);
//! let StreamItem::Completion(done) = &items[1] else { panic!("{items:?}") };
//! assert_eq!(done.finish(), FinishReason::Stop);
//! assert_eq!(done.usage().map(|u| u.total()), Some(4));
//! assert_eq!(done.metadata().to_canonical_string(), r#"{"openai":{"id":"chatcmpl-1","model":"m-1"}}"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod anthropic;
mod config;
mod decode;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod gemini;
mod http;
mod key;
mod kind;
mod openai;
mod problem;
mod pump;
mod responses;
mod screen;
mod shell;
mod sse;

pub use anthropic::{
    ANTHROPIC_BASE_URL, ANTHROPIC_NAMESPACE, ANTHROPIC_VERSION, Anthropic, AnthropicConfig,
    AnthropicOptions, DEFAULT_MAX_TOKENS, MIN_THINKING_BUDGET_TOKENS,
};
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CHUNK_BYTES,
    DEFAULT_MAX_ERROR_BODY_BYTES, ProviderConfig,
};
pub use error::ProviderConfigError;
pub use gemini::{GEMINI_BASE_URL, GEMINI_NAMESPACE, Gemini, GeminiConfig, GeminiOptions};
pub use key::{API_KEY_MAX_BYTES, ApiKey, ApiKeyError};
pub use kind::{ConnectOptions, ProviderKind, UnknownProviderKind};
pub use openai::{
    OPENAI_BASE_URL, OPENAI_NAMESPACE, OpenAiCompatible, OpenAiConfig, OpenAiOptions,
};
pub use responses::{OpenAiResponses, OpenAiResponsesConfig, ReasoningEffort, ResponsesOptions};
