//! Decimal text of `u64`s for the line writers (event lines, text delta
//! payloads), without going through `core::fmt` on the commit path.

/// The number of decimal digits of `n` (1 for 0): `n.to_string().len()`.
pub(crate) fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends `n` in decimal, exactly as `format!("{n}")` writes it, without
/// going through `core::fmt` (on the commit path for `turn`, `seq`, `ts`).
pub(crate) fn push_u64(out: &mut String, n: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    let mut n = n;
    while n >= 100 {
        let pair = usize::try_from(n % 100).unwrap_or(0) * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = usize::try_from(n).unwrap_or(0) * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    // ASCII digits: one byte each, nothing to validate.
    out.extend(buf[i..].iter().map(|&b| char::from(b)));
}
