//! The error that refuses a provider's configuration, below both the
//! configuration and the transport that check it.

/// Why a provider could not be built from its configuration. Never echoes
/// the base URL (it could carry a credential) or the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderConfigError {
    /// The base URL is not an absolute `http` or `https` URL without
    /// credentials, query or fragment.
    #[error("base_url {problem} (rule config.base_url)")]
    InvalidBaseUrl {
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The base URL is `https` but the crate was built without a TLS
    /// backend (its `rustls` feature, on by default, is off). Only
    /// returned by such a build; `http://` base URLs still work.
    #[error(
        "base_url is https, but keel-providers was built without TLS: enable its `rustls` feature (the `tls` feature of keel) (rule config.tls)"
    )]
    TlsDisabled,
    /// A bound or timeout that must be positive is zero.
    #[error("{field} must be greater than zero (rule config.positive)")]
    Zero {
        /// The configuration field.
        field: &'static str,
    },
    /// Anthropic's `thinking_budget_tokens` is below the API's minimum
    /// (1024) or not below `max_tokens`.
    #[error(
        "thinking_budget_tokens is {budget}; it must be at least 1024 and less than max_tokens ({max_tokens}) (rule config.thinking_budget_tokens)"
    )]
    ThinkingBudget {
        /// The configured budget.
        budget: u32,
        /// The configured `max_tokens`.
        max_tokens: u32,
    },
    /// A configuration sets an option its provider kind does not have.
    #[error("{field} is not an option of an {kind} provider (rule config.option_kind)")]
    NotForKind {
        /// The option.
        field: &'static str,
        /// The provider's type name.
        kind: &'static str,
    },
    /// The HTTP client could not be built (TLS initialisation).
    #[error("the HTTP client could not be built: {reason}")]
    Client {
        /// Why, as the HTTP library put it.
        reason: String,
    },
}
