//! The network providers this crate adapts, by the type name a
//! configuration writes (`openai-compatible`, `anthropic`).

use crate::anthropic::{ANTHROPIC_BASE_URL, Anthropic, AnthropicConfig};
use crate::error::ProviderConfigError;
use crate::key::ApiKey;
use crate::openai::{OPENAI_BASE_URL, OpenAiCompatible, OpenAiConfig};
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
}

/// A type name that is not a [`ProviderKind`]. Does not echo the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider type (rule provider.type: expected openai-compatible or anthropic)")]
pub struct UnknownProviderKind;

impl ProviderKind {
    /// Every kind.
    pub const ALL: [ProviderKind; 2] = [ProviderKind::OpenAiCompatible, ProviderKind::Anthropic];

    /// The type name: `openai-compatible` or `anthropic`.
    pub fn type_name(self) -> &'static str {
        match self {
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::Anthropic => "anthropic",
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
        let base_url = base_url.unwrap_or(self.default_base_url()).to_owned();
        Ok(match self {
            ProviderKind::OpenAiCompatible => Arc::new(OpenAiCompatible::new(OpenAiConfig::new(
                base_url,
                Some(key),
            ))?),
            ProviderKind::Anthropic => {
                Arc::new(Anthropic::new(AnthropicConfig::new(base_url, Some(key)))?)
            }
        })
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
            ["openai-compatible", "anthropic"]
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
    }
}
