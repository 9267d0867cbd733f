//! The network providers this crate adapts, by the type name a
//! configuration writes (`openai-compatible`, `anthropic`,
//! `openai-responses`, `gemini`).

use crate::anthropic::{ANTHROPIC_BASE_URL, Anthropic, AnthropicConfig, AnthropicOptions};
use crate::error::ProviderConfigError;
use crate::gemini::{GEMINI_BASE_URL, Gemini, GeminiConfig, GeminiOptions};
use crate::key::ApiKey;
use crate::openai::{OPENAI_BASE_URL, OpenAiCompatible, OpenAiConfig, OpenAiOptions};
use crate::responses::{OpenAiResponses, OpenAiResponsesConfig};
use crate::shell::Wire;
use keel_stream::ModelProvider;
use std::fmt;
use std::sync::Arc;

/// A wire format this crate speaks. Exhaustive on purpose: code that
/// matches on it (a configuration loader, an allowlist) is told by the
/// compiler when a kind is added, instead of falling through to one.
///
/// ```
/// use keel_providers::ProviderKind;
/// assert_eq!(ProviderKind::parse("anthropic")?, ProviderKind::Anthropic);
/// assert_eq!(ProviderKind::OpenAiCompatible.type_name(), "openai-compatible");
/// assert!(ProviderKind::parse("openai").is_err());
/// # Ok::<(), keel_providers::UnknownProviderKind>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderKind {
    /// OpenAI Chat Completions streaming ([`OpenAiCompatible`]).
    OpenAiCompatible,
    /// Anthropic Messages streaming ([`Anthropic`]).
    Anthropic,
    /// OpenAI Responses API streaming, stateless ([`OpenAiResponses`]).
    OpenAiResponses,
    /// Google Gemini `streamGenerateContent` streaming ([`Gemini`]).
    Gemini,
}

/// What a configuration file may set on a network provider besides its
/// base URL and key, each for the one kind that has it (see
/// [`ProviderKind::check_options`]).
///
/// ```
/// use keel_providers::{ConnectOptions, ProviderKind};
/// let options = ConnectOptions { send_reasoning: true, ..ConnectOptions::default() };
/// assert!(ProviderKind::OpenAiCompatible.check_options(&options).is_ok());
/// assert!(ProviderKind::Anthropic.check_options(&options).is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// `openai-compatible` only: its
    /// [`send_reasoning`](crate::OpenAiOptions::send_reasoning). Default
    /// `false`.
    pub send_reasoning: bool,
    /// `anthropic`: its
    /// [`thinking_budget_tokens`](crate::AnthropicOptions::thinking_budget_tokens)
    /// (with the default `max_tokens`); `gemini`: its
    /// [`thinking_budget_tokens`](crate::GeminiOptions::thinking_budget_tokens),
    /// with [`include_thoughts`](crate::GeminiOptions::include_thoughts)
    /// on. Default `None`.
    pub thinking_budget_tokens: Option<u32>,
}

/// A type name that is not a [`ProviderKind`]. Does not echo the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown provider type (rule provider.type: expected openai-compatible, anthropic, openai-responses or gemini)"
)]
pub struct UnknownProviderKind;

impl ProviderKind {
    /// Every kind.
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::OpenAiCompatible,
        ProviderKind::Anthropic,
        ProviderKind::OpenAiResponses,
        ProviderKind::Gemini,
    ];

    /// The type name: `openai-compatible`, `anthropic`,
    /// `openai-responses` or `gemini`.
    pub fn type_name(self) -> &'static str {
        match self {
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::OpenAiResponses => "openai-responses",
        }
    }

    /// The kind whose [`type_name`](ProviderKind::type_name) is `name`.
    pub fn parse(name: &str) -> Result<ProviderKind, UnknownProviderKind> {
        ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.type_name() == name)
            .ok_or(UnknownProviderKind)
    }

    /// The adapter's own endpoint, used when a configuration names none.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAiCompatible => OPENAI_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_BASE_URL,
            ProviderKind::Gemini => GEMINI_BASE_URL,
            ProviderKind::OpenAiResponses => OPENAI_BASE_URL,
        }
    }

    /// This kind's adapter for `base_url` (`None`: its
    /// [`default_base_url`](ProviderKind::default_base_url)) with `key`, on
    /// the adapter's default bounds and timeouts.
    pub fn connect(
        self,
        base_url: Option<&str>,
        key: ApiKey,
    ) -> Result<Arc<dyn ModelProvider>, ProviderConfigError> {
        self.connect_with(base_url, key, &ConnectOptions::default())
    }

    /// [`connect`](ProviderKind::connect), with `options` (checked by
    /// [`check_options`](ProviderKind::check_options)).
    pub fn connect_with(
        self,
        base_url: Option<&str>,
        key: ApiKey,
        options: &ConnectOptions,
    ) -> Result<Arc<dyn ModelProvider>, ProviderConfigError> {
        self.check_options(options)?;
        let base_url = base_url.unwrap_or(self.default_base_url()).to_owned();
        Ok(match self {
            ProviderKind::OpenAiCompatible => Arc::new(OpenAiCompatible::new(OpenAiConfig {
                wire: openai_options(options),
                ..OpenAiConfig::new(base_url, Some(key))
            })?),
            ProviderKind::Anthropic => Arc::new(Anthropic::new(AnthropicConfig {
                wire: anthropic_options(options),
                ..AnthropicConfig::new(base_url, Some(key))
            })?),
            ProviderKind::Gemini => Arc::new(Gemini::new(GeminiConfig {
                wire: gemini_options(options),
                ..GeminiConfig::new(base_url, Some(key))
            })?),
            ProviderKind::OpenAiResponses => Arc::new(OpenAiResponses::new(
                OpenAiResponsesConfig::new(base_url, Some(key)),
            )?),
        })
    }

    /// Refuses an option this kind does not have (rule
    /// `config.option_kind`) and a thinking budget out of its range (rule
    /// `config.thinking_budget_tokens`), as building the adapter would;
    /// for a configuration loader, before any key is read.
    pub fn check_options(self, options: &ConnectOptions) -> Result<(), ProviderConfigError> {
        let send_reasoning = options.send_reasoning.then_some("send_reasoning");
        let budget = options
            .thinking_budget_tokens
            .map(|_| "thinking_budget_tokens");
        let foreign = match self {
            ProviderKind::OpenAiCompatible => budget,
            ProviderKind::Anthropic | ProviderKind::Gemini => send_reasoning,
            ProviderKind::OpenAiResponses => send_reasoning.or(budget),
        };
        if let Some(field) = foreign {
            return Err(ProviderConfigError::NotForKind {
                field,
                kind: self.type_name(),
            });
        }
        match self {
            ProviderKind::OpenAiCompatible => openai_options(options).check(),
            ProviderKind::Anthropic => anthropic_options(options).check(),
            ProviderKind::Gemini => gemini_options(options).check(),
            ProviderKind::OpenAiResponses => Ok(()),
        }
    }
}

/// The OpenAI wire options `options` set.
fn openai_options(options: &ConnectOptions) -> OpenAiOptions {
    OpenAiOptions {
        send_reasoning: options.send_reasoning,
        ..OpenAiOptions::default()
    }
}

/// The Anthropic wire options `options` set.
fn anthropic_options(options: &ConnectOptions) -> AnthropicOptions {
    AnthropicOptions {
        thinking_budget_tokens: options.thinking_budget_tokens,
        ..AnthropicOptions::default()
    }
}

/// The Gemini wire options `options` set: a thinking budget also asks
/// for the thoughts, so that they become reasoning.
fn gemini_options(options: &ConnectOptions) -> GeminiOptions {
    GeminiOptions {
        thinking_budget_tokens: options.thinking_budget_tokens,
        include_thoughts: options.thinking_budget_tokens.is_some(),
        ..GeminiOptions::default()
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = UnknownProviderKind;
    fn from_str(name: &str) -> Result<ProviderKind, UnknownProviderKind> {
        ProviderKind::parse(name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_kind_parses_from_its_type_name_and_nothing_else_does() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(kind.type_name()), Ok(kind));
            assert_eq!(kind.to_string(), kind.type_name());
        }
        assert_eq!(
            ProviderKind::ALL.map(ProviderKind::type_name),
            [
                "openai-compatible",
                "anthropic",
                "openai-responses",
                "gemini"
            ]
        );
        for name in ["", "openai", "Anthropic", "scripted", "anthropic "] {
            let err = ProviderKind::parse(name).unwrap_err();
            assert!(err.to_string().contains("rule provider.type"), "{err}");
        }
    }

    #[test]
    fn connect_builds_the_kinds_adapter_at_its_endpoint() {
        let key = || ApiKey::new("sk-test-0123456789").unwrap();
        let local = "http://127.0.0.1:9/v1";
        for kind in ProviderKind::ALL {
            assert!(kind.connect(Some(local), key()).is_ok(), "{kind}");
            assert!(kind.connect(Some("ftp://x"), key()).is_err(), "{kind}");
        }
        assert_eq!(
            ProviderKind::Anthropic.default_base_url(),
            ANTHROPIC_BASE_URL
        );
        assert_eq!(
            ProviderKind::OpenAiCompatible.default_base_url(),
            OPENAI_BASE_URL
        );
        assert_eq!(ProviderKind::Gemini.default_base_url(), GEMINI_BASE_URL);
        assert_eq!(
            ProviderKind::OpenAiResponses.default_base_url(),
            OPENAI_BASE_URL
        );
    }

    fn check(kind: ProviderKind, options: ConnectOptions, refused: Option<&str>) {
        let result = kind.check_options(&options);
        let connected = kind
            .connect_with(
                Some("http://127.0.0.1:9/v1"),
                ApiKey::new("sk-test-0123456789").unwrap(),
                &options,
            )
            .map(|_| ());
        assert_eq!(connected, result, "{kind} {options:?}");
        match refused {
            None => assert_eq!(result, Ok(()), "{kind} {options:?}"),
            Some(rule) => {
                let shown = result.unwrap_err().to_string();
                assert!(shown.contains(rule), "{kind} {options:?}: {shown}");
            }
        }
    }

    #[test]
    fn each_option_belongs_to_one_kind() {
        let reasoning = ConnectOptions {
            send_reasoning: true,
            ..ConnectOptions::default()
        };
        let budget = |n| ConnectOptions {
            thinking_budget_tokens: Some(n),
            ..ConnectOptions::default()
        };
        for (kind, options, refused) in [
            (
                ProviderKind::OpenAiCompatible,
                ConnectOptions::default(),
                None,
            ),
            (ProviderKind::Anthropic, ConnectOptions::default(), None),
            (ProviderKind::OpenAiCompatible, reasoning, None),
            (ProviderKind::Anthropic, budget(1024), None),
            (
                ProviderKind::OpenAiResponses,
                ConnectOptions::default(),
                None,
            ),
            (
                ProviderKind::OpenAiResponses,
                reasoning,
                Some("send_reasoning is not an option of an openai-responses provider"),
            ),
            (
                ProviderKind::OpenAiResponses,
                budget(2048),
                Some("thinking_budget_tokens is not an option of an openai-responses provider"),
            ),
            (ProviderKind::Anthropic, budget(4095), None),
            (ProviderKind::Gemini, ConnectOptions::default(), None),
            (ProviderKind::Gemini, budget(0), None),
            (ProviderKind::Gemini, budget(24576), None),
            (
                ProviderKind::Gemini,
                reasoning,
                Some("send_reasoning is not an option of an gemini provider"),
            ),
            (
                ProviderKind::Anthropic,
                reasoning,
                Some("send_reasoning is not an option of an anthropic provider"),
            ),
            (
                ProviderKind::OpenAiCompatible,
                budget(2048),
                Some("thinking_budget_tokens is not an option of an openai-compatible provider"),
            ),
            (
                ProviderKind::Anthropic,
                budget(1023),
                Some("rule config.thinking_budget_tokens"),
            ),
            // The default max_tokens is 4096.
            (
                ProviderKind::Anthropic,
                budget(4096),
                Some("rule config.thinking_budget_tokens"),
            ),
        ] {
            check(kind, options, refused);
        }
    }
}
