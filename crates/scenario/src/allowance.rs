//! Which network providers a posted scenario may use.
//!
//! A scenario names a provider type, an environment variable holding the
//! key, and optionally a base URL; the adapter sends that variable's value
//! to that URL. Taken from an HTTP client as they are, this would let any
//! client read any variable of the daemon's environment (by pointing
//! `base_url` at its own server) and make the daemon send requests
//! anywhere. So `keel serve` runs a network provider only when the
//! operator listed that exact triple with `--allow-provider`; scripted
//! providers need nothing. See `docs/rfc/implemented/2026-11-30-serve-provider-allowlist.md`.

use crate::file::{ProviderSpec, Scenario, ToolEntry};
use keel_message::{EnvVarName, EnvVarNameError};
use keel_providers::{ProviderKind, UnknownProviderKind};

/// One `--allow-provider TYPE,KEY_ENV[,BASE_URL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderAllowance {
    kind: ProviderKind,
    api_key_env: EnvVarName,
    /// `None`: the adapter's own default endpoint.
    base_url: Option<String>,
}

/// Why an `--allow-provider` value was refused: which field, and the rule
/// it broke. Never echoes the value (KEY_ENV may be a pasted key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowanceError {
    /// TYPE is not a provider kind.
    #[error("--allow-provider: TYPE: {0} (expected TYPE,KEY_ENV[,BASE_URL])")]
    Type(#[from] UnknownProviderKind),
    /// KEY_ENV is missing.
    #[error("--allow-provider: KEY_ENV is missing (expected TYPE,KEY_ENV[,BASE_URL])")]
    MissingKeyEnv,
    /// KEY_ENV is not an environment variable name.
    #[error("--allow-provider: KEY_ENV: {0} (expected TYPE,KEY_ENV[,BASE_URL])")]
    KeyEnv(#[from] EnvVarNameError),
    /// BASE_URL is not an http or https URL.
    #[error(
        "--allow-provider: BASE_URL must be an http or https URL (expected TYPE,KEY_ENV[,BASE_URL])"
    )]
    BaseUrl,
}

/// Base URLs compare without trailing slashes.
fn normalized(url: &str) -> &str {
    url.trim_end_matches('/')
}

impl ProviderAllowance {
    /// Parses `TYPE,KEY_ENV[,BASE_URL]`.
    pub fn parse(text: &str) -> Result<ProviderAllowance, AllowanceError> {
        let mut fields = text.splitn(3, ',');
        let kind = ProviderKind::parse(fields.next().unwrap_or_default())?;
        let api_key_env = EnvVarName::parse(fields.next().ok_or(AllowanceError::MissingKeyEnv)?)?;
        let base_url = match fields.next() {
            None => None,
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(normalized(url).to_owned())
            }
            Some(_) => return Err(AllowanceError::BaseUrl),
        };
        Ok(ProviderAllowance {
            kind,
            api_key_env,
            base_url,
        })
    }

    fn allows(&self, kind: ProviderKind, api_key_env: &EnvVarName, base_url: Option<&str>) -> bool {
        self.kind == kind
            && self.api_key_env == *api_key_env
            && self.base_url.as_deref() == base_url.map(normalized)
    }
}

/// Whether `spec` may run under `allowed`: scripted always; a network
/// provider only when one allowance names its type, key variable and base
/// URL exactly.
pub fn permitted(spec: &ProviderSpec, allowed: &[ProviderAllowance]) -> bool {
    match spec {
        ProviderSpec::Scripted { .. } => true,
        ProviderSpec::Network {
            kind,
            base_url,
            api_key_env,
            ..
        } => allowed
            .iter()
            .any(|a| a.allows(*kind, api_key_env, base_url.as_deref())),
    }
}

/// The first provider of `scenario` that may not run under `allowed`,
/// as its JSON path (`provider`, `tools[2].agent.provider`, …), or `None`
/// when all may: the scenario's own and each agent tool's, nested agents
/// included (a child run's provider reads a key from the daemon's
/// environment as the parent's does).
pub fn unpermitted_provider(scenario: &Scenario, allowed: &[ProviderAllowance]) -> Option<String> {
    if !permitted(&scenario.provider, allowed) {
        return Some("provider".to_owned());
    }
    unpermitted_in_tools("", &scenario.tools, allowed)
}

/// [`unpermitted_provider`] over the agents among `tools` (under `prefix`).
fn unpermitted_in_tools(
    prefix: &str,
    tools: &[ToolEntry],
    allowed: &[ProviderAllowance],
) -> Option<String> {
    tools.iter().enumerate().find_map(|(i, tool)| match tool {
        ToolEntry::Agent { spec, .. } => {
            let at = format!("{prefix}tools[{i}].agent.");
            if permitted(spec.provider(), allowed) {
                unpermitted_in_tools(&at, spec.tools(), allowed)
            } else {
                Some(format!("{at}provider"))
            }
        }
        ToolEntry::Scripted { .. } | ToolEntry::Builtin { .. } => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn network(kind: &'static str, env: &str, url: Option<&str>) -> ProviderSpec {
        ProviderSpec::Network {
            kind: ProviderKind::parse(kind).unwrap(),
            base_url: url.map(str::to_owned),
            api_key_env: EnvVarName::parse(env).unwrap(),
            options: keel_providers::ConnectOptions::default(),
        }
    }

    #[test]
    fn only_the_listed_triple_is_permitted() {
        let allowed = [
            ProviderAllowance::parse("anthropic,ANTHROPIC_API_KEY").unwrap(),
            ProviderAllowance::parse("openai-compatible,LOCAL_KEY,http://127.0.0.1:8000/v1/")
                .unwrap(),
            ProviderAllowance::parse("gemini,GEMINI_API_KEY").unwrap(),
            ProviderAllowance::parse("openai-responses,OPENAI_API_KEY").unwrap(),
        ];
        let check = |spec: ProviderSpec, expected: bool| {
            assert_eq!(permitted(&spec, &allowed), expected, "{spec:?}");
        };
        check(ProviderSpec::Scripted { calls: vec![] }, true);
        check(network("anthropic", "ANTHROPIC_API_KEY", None), true);
        check(
            network(
                "openai-compatible",
                "LOCAL_KEY",
                Some("http://127.0.0.1:8000/v1"),
            ),
            true,
        );
        check(network("gemini", "GEMINI_API_KEY", None), true);
        check(network("gemini", "ANTHROPIC_API_KEY", None), false);
        check(network("anthropic", "GEMINI_API_KEY", None), false);
        check(
            network("gemini", "GEMINI_API_KEY", Some("http://127.0.0.1:8000/v1")),
            false,
        );
        check(network("openai-responses", "OPENAI_API_KEY", None), true);
        check(
            network(
                "openai-responses",
                "OPENAI_API_KEY",
                Some("http://evil.example/v1"),
            ),
            false,
        );
        check(network("openai-compatible", "OPENAI_API_KEY", None), false);
        // Another variable, another endpoint, another type: refused.
        check(network("anthropic", "HOME", None), false);
        check(
            network(
                "anthropic",
                "ANTHROPIC_API_KEY",
                Some("http://evil.example"),
            ),
            false,
        );
        check(
            network("openai-compatible", "ANTHROPIC_API_KEY", None),
            false,
        );
        check(network("openai-compatible", "LOCAL_KEY", None), false);
        check(
            network(
                "openai-compatible",
                "LOCAL_KEY",
                Some("http://127.0.0.1:8001/v1"),
            ),
            false,
        );
        assert!(!permitted(
            &network("anthropic", "ANTHROPIC_API_KEY", None),
            &[]
        ));
    }

    #[test]
    fn malformed_allowances_are_refused() {
        for bad in [
            "",
            "scripted,X",
            "anthropic",
            "anthropic,",
            "anthropic,A-B",
            "anthropic,1KEY",
            "anthropic,K,ftp://x",
        ] {
            assert!(ProviderAllowance::parse(bad).is_err(), "{bad}");
        }
        // Each refusal names the field and the rule, never the value.
        let err = ProviderAllowance::parse("anthropic,sk-live-secret").unwrap_err();
        assert!(
            matches!(err, AllowanceError::KeyEnv(ref e) if e.rule() == "env_var_name.charset"),
            "{err:?}"
        );
        assert!(!err.to_string().contains("sk-live-secret"), "{err}");
        let err = ProviderAllowance::parse("openai,KEY").unwrap_err();
        assert!(err.to_string().contains("rule provider.type"), "{err}");
    }
}
