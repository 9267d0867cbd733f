//! Token usage counts that JSON carries exactly.

use keel_message::canonical::MAX_SAFE_INTEGER;
use serde::{Deserialize, Serialize};

/// Token counts that JSON carries exactly: each count and their sum is at
/// most 2^53 − 1, so [`total`](Self::total) never overflows either.
/// `Usage::default()` is zero tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
pub struct Usage {
    input_tokens: u64,
    output_tokens: u64,
}

/// A usage count over 2^53 − 1 (names the field, `input_tokens`,
/// `output_tokens` or `total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("usage {field} exceeds 2^53-1 (rule usage.json_safe)")]
pub struct UsageOverflow {
    /// Which count overflowed.
    pub field: &'static str,
}

impl Usage {
    /// Validates the counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Result<Usage, UsageOverflow> {
        if input_tokens > MAX_SAFE_INTEGER {
            return Err(UsageOverflow {
                field: "input_tokens",
            });
        }
        if output_tokens > MAX_SAFE_INTEGER {
            return Err(UsageOverflow {
                field: "output_tokens",
            });
        }
        if input_tokens + output_tokens > MAX_SAFE_INTEGER {
            return Err(UsageOverflow { field: "total" });
        }
        Ok(Usage {
            input_tokens,
            output_tokens,
        })
    }

    /// Tokens read.
    pub fn input_tokens(&self) -> u64 {
        self.input_tokens
    }
    /// Tokens generated.
    pub fn output_tokens(&self) -> u64 {
        self.output_tokens
    }
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageWire {
    input_tokens: u64,
    output_tokens: u64,
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = UsageWire::deserialize(d)?;
        Usage::new(w.input_tokens, w.output_tokens).map_err(serde::de::Error::custom)
    }
}
