//! Byte-scanning primitives the value scanner (`scan`) and the vendor
//! formats (`formats`) share: both walk a text's bytes, and neither
//! depends on the other for them.

/// Whether `b` is an ASCII letter or digit.
pub(super) fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// Length of the run of bytes satisfying `pred` starting at `at`.
pub(super) fn run(bytes: &[u8], at: usize, pred: impl Fn(u8) -> bool) -> usize {
    bytes
        .get(at..)
        .map_or(0, |rest| rest.iter().take_while(|&&b| pred(b)).count())
}

/// The first index at or after `from` where `needle` starts. Only the
/// positions holding the needle's first byte are compared in full (a
/// full comparison at every position was most of a screening's time).
pub(super) fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let hay = bytes.get(from..)?;
    hay.iter()
        .enumerate()
        .filter(|&(_, &b)| b == first)
        .map(|(i, _)| i)
        .find(|&i| hay.get(i + 1..i + needle.len()) == Some(rest))
        .map(|p| p + from)
}
