//! A reasoning item's opaque value: what the adapter needs to send the
//! item back exactly as it came, packed into the one printable-ASCII
//! value a Keel reasoning part carries (its signature, or its redacted
//! value when the item had no summary text).
//!
//! Format: `{id}:{lengths}:{encrypted_content}`. `id` is the item's id
//! (`rs_…`, a token of `[A-Za-z0-9_.-]`); `lengths` the byte lengths of
//! its summary parts, comma-separated (empty when it had none), so that
//! the part's text (the summaries joined by [`SUMMARY_SEPARATOR`]) splits
//! back into the same parts; `encrypted_content` the API's value as sent
//! (any printable ASCII; last, so it may hold `:`).

/// Between two summary parts in a reasoning part's text.
pub(super) const SUMMARY_SEPARATOR: &str = "\n\n";

/// The longest item id packed.
const MAX_ID_BYTES: usize = 256;

/// Whether `id` can be packed: 1 to 256 bytes of `[A-Za-z0-9_.-]`.
pub(super) fn is_packable_id(id: &str) -> bool {
    (1..=MAX_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The packed value of a reasoning item (see the module docs).
pub(super) fn pack(id: &str, summary_lengths: &[usize], encrypted: &str) -> String {
    let lengths: Vec<String> = summary_lengths.iter().map(usize::to_string).collect();
    format!("{id}:{}:{encrypted}", lengths.join(","))
}

/// A packed value read back: the item's id, its summary texts (cut from
/// the part's text), its encrypted content.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SealedItem<'a> {
    pub(super) id: &'a str,
    pub(super) summary: Vec<&'a str>,
    pub(super) encrypted: &'a str,
}

/// Reads a packed value against the reasoning part's `text`. `None` when
/// the value is not this adapter's packing (the part is then not sent).
/// When the lengths do not cut `text` into parts joined by the separator
/// (text edited since), the whole text is one summary part: the
/// encrypted content, which is what the model reads, still goes back as
/// it came.
pub(super) fn unpack<'a>(value: &'a str, text: &'a str) -> Option<SealedItem<'a>> {
    let (id, rest) = value.split_once(':')?;
    let (lengths, encrypted) = rest.split_once(':')?;
    if !is_packable_id(id) || encrypted.is_empty() {
        return None;
    }
    let lengths: Option<Vec<usize>> = if lengths.is_empty() {
        Some(Vec::new())
    } else {
        lengths.split(',').map(|n| n.parse().ok()).collect()
    };
    let summary = split_summary(text, &lengths?).unwrap_or_else(|| {
        if text.is_empty() {
            Vec::new()
        } else {
            vec![text]
        }
    });
    Some(SealedItem {
        id,
        summary,
        encrypted,
    })
}

/// `text` cut into parts of `lengths` bytes with the separator between
/// them, when it is exactly that.
fn split_summary<'a>(text: &'a str, lengths: &[usize]) -> Option<Vec<&'a str>> {
    let mut parts = Vec::with_capacity(lengths.len());
    let mut rest = text;
    for (i, &len) in lengths.iter().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix(SUMMARY_SEPARATOR)?;
        }
        let part = rest.get(..len)?;
        parts.push(part);
        rest = &rest[len..];
    }
    rest.is_empty().then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str, text: &str, expected: Option<(&str, &[&str], &str)>) {
        let got = unpack(value, text);
        let expected = expected.map(|(id, summary, encrypted)| SealedItem {
            id,
            summary: summary.to_vec(),
            encrypted,
        });
        assert_eq!(got, expected, "{value:?} {text:?}");
    }

    #[test]
    fn packed_items_read_back_exactly() {
        assert_eq!(pack("rs_1", &[3, 5], "gAA:=="), "rs_1:3,5:gAA:==");
        assert_eq!(pack("rs_1", &[], "gAA"), "rs_1::gAA");
        for (value, text, expected) in [
            (
                "rs_1:3,5:gAA:==",
                "Abc\n\nDefgh",
                Some(("rs_1", &["Abc", "Defgh"][..], "gAA:==")),
            ),
            ("rs_1::gAA", "", Some(("rs_1", &[][..], "gAA"))),
            ("rs_1:4:e", "Tänk", Some(("rs_1", &["Tänk"][..], "e"))),
            // Lengths that do not fit the text: one part, the whole text.
            (
                "rs_1:3,5:e",
                "Abc Defgh",
                Some(("rs_1", &["Abc Defgh"][..], "e")),
            ),
            ("rs_1:9:e", "Abc", Some(("rs_1", &["Abc"][..], "e"))),
            ("rs_1:2:e", "Abc", Some(("rs_1", &["Abc"][..], "e"))),
            // Inside a char: not a cut.
            ("rs_1:2:e", "Tä", Some(("rs_1", &["Tä"][..], "e"))),
            ("rs_1:1,x:e", "", None),
            // Not this adapter's packing.
            ("opaque", "", None),
            ("rs_1:3", "Abc", None),
            ("rs_1:3:", "Abc", None),
            (":3:e", "Abc", None),
            ("r$:3:e", "Abc", None),
        ] {
            check(value, text, expected);
        }
    }

    #[test]
    fn only_token_ids_are_packable() {
        assert!(is_packable_id("rs_68af2f8c0e8c8193a1b2"));
        assert!(is_packable_id(&"a".repeat(256)));
        assert!(!is_packable_id(&"a".repeat(257)));
        assert!(!is_packable_id(""));
        assert!(!is_packable_id("rs:1"));
        assert!(!is_packable_id("rs 1"));
    }
}
