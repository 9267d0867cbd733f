//! Qualified tool names: `mcp__<server>__<tool>`, made to fit the
//! [`ToolName`] rule without losing uniqueness.
//!
//! The name is kept as it is when it already fits (ASCII letters, digits,
//! `_`, `-`; at most 64 bytes). Otherwise every other character becomes
//! `_`, the result is cut to leave room, and `_` plus 10 hex digits of a
//! hash of the *original* qualified name is appended. So two tools whose
//! names differ only in characters the rule forbids, or only past byte 53,
//! still get different names, and a name that fits never changes.

use crate::config::ServerName;
use keel_message::{TOOL_NAME_MAX_BYTES, ToolName};

/// The hex digits of the hash suffix.
const HASH_DIGITS: usize = 10;

/// The name the model calls for `server`'s tool `tool`.
pub fn qualified_name(server: &ServerName, tool: &str) -> ToolName {
    let raw = format!("mcp__{server}__{tool}");
    let fits = raw.len() <= TOOL_NAME_MAX_BYTES && raw.bytes().all(allowed);
    let name = if fits {
        raw.clone()
    } else {
        let mut sanitized: String = raw
            .chars()
            .map(|c| {
                if c.is_ascii() && allowed(c as u8) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // All ASCII now, so any byte index is a char boundary.
        sanitized.truncate(TOOL_NAME_MAX_BYTES - HASH_DIGITS - 1);
        let hash = fnv1a(raw.as_bytes()) & ((1u64 << (4 * HASH_DIGITS)) - 1);
        format!("{sanitized}_{hash:0width$x}", width = HASH_DIGITS)
    };
    match ToolName::parse(&name) {
        Ok(name) => name,
        // Unreachable by construction (every byte allowed, at most 64);
        // a fixed fallback keeps this total without a panic path.
        Err(_) => fallback(&raw),
    }
}

fn fallback(raw: &str) -> ToolName {
    let name = format!("mcp_{:016x}", fnv1a(raw.as_bytes()));
    ToolName::parse(&name).unwrap_or_else(|_| fallback("mcp"))
}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// FNV-1a, 64 bits: stable across builds and platforms, which is all a
/// disambiguating suffix needs (names are not secrets).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str) -> ServerName {
        ServerName::parse(name).unwrap_or_else(|e| panic!("{e}"))
    }

    fn check(server_name: &str, tool: &str, expected: &str) {
        let got = qualified_name(&server(server_name), tool);
        assert_eq!(got.as_str(), expected, "{server_name} / {tool:?}");
    }

    #[test]
    fn names_that_fit_are_kept() {
        check("files", "read_text_file", "mcp__files__read_text_file");
        check("everything", "get-sum", "mcp__everything__get-sum");
    }

    #[test]
    fn unfit_names_are_sanitized_with_a_hash() {
        let dotted = qualified_name(&server("s"), "a.b");
        let underscored = qualified_name(&server("s"), "a_b");
        assert_eq!(underscored.as_str(), "mcp__s__a_b");
        assert!(dotted.as_str().starts_with("mcp__s__a_b_"), "{dotted:?}");
        assert_ne!(dotted, underscored);
        let unicode = qualified_name(&server("s"), "wetter_für_morgen");
        assert!(unicode.as_str().starts_with("mcp__s__wetter_f_r_morgen_"));
    }

    #[test]
    fn long_names_are_cut_and_stay_unique() {
        let base = "x".repeat(70);
        let a = qualified_name(&server("long-server"), &format!("{base}a"));
        let b = qualified_name(&server("long-server"), &format!("{base}b"));
        assert_eq!(a.as_str().len(), TOOL_NAME_MAX_BYTES);
        assert_ne!(a, b);
        // Stable: the same input always gives the same name.
        assert_eq!(
            a,
            qualified_name(&server("long-server"), &format!("{base}a"))
        );
    }

    #[test]
    fn a_name_of_exactly_64_bytes_is_kept() {
        let tool = "t".repeat(TOOL_NAME_MAX_BYTES - "mcp__s__".len());
        check("s", &tool, &format!("mcp__s__{tool}"));
    }

    proptest::proptest! {
        #[test]
        fn every_tool_name_becomes_a_valid_distinct_name(a in ".{0,100}", b in ".{0,100}") {
            let s = server("srv");
            let (na, nb) = (qualified_name(&s, &a), qualified_name(&s, &b));
            proptest::prop_assert!(ToolName::parse(na.as_str()).is_ok());
            if a != b {
                proptest::prop_assert_ne!(na, nb);
            }
        }
    }
}
