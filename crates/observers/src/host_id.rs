//! The host-id rule, for every store that names a host: the SQLite
//! journal (a host's lock file is `<id>.lock`) and JetStream (a heartbeat
//! is the KV key `host.<id>`). An id read back from a database, a
//! directory or a bucket is used only if it passes this rule, so it can
//! never be a path with a separator or a dot, nor a KV key with another
//! token.

/// The most bytes a host id has.
pub const MAX_HOST_ID_BYTES: usize = 64;

/// Whether `id` can be a host id: 1 to [`MAX_HOST_ID_BYTES`] of
/// `[A-Za-z0-9_-]` (rule `recovery.host_id`). Every id this crate mints
/// (the journal's `h` and 32 lowercase hex digits, JetStream's `h` and a
/// NUID) is one.
pub fn valid_host_id(id: &str) -> bool {
    (1..=MAX_HOST_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_id_is_1_to_64_letters_digits_underscores_or_hyphens() {
        for good in [
            "h",
            "hABC_1-x",
            "h0123456789abcdef0123456789abcdef",
            &"h".repeat(MAX_HOST_ID_BYTES),
        ] {
            assert!(valid_host_id(good), "{good}");
        }
        for bad in [
            "",
            "a.b",
            "../etc/passwd",
            "a/b",
            "a\\b",
            "host 1",
            "h:1",
            "hé",
            &"h".repeat(MAX_HOST_ID_BYTES + 1),
        ] {
            assert!(!valid_host_id(bad), "{bad}");
        }
    }
}
