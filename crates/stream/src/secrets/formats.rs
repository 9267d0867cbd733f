//! Self-identifying credential formats: tokens a vendor marks with a
//! literal prefix (`glpat-`, `shpat_`, `hvs.`) or an infix (`…Q~…`,
//! `….atlasv1.…`), so that they are recognisable under any key.
//!
//! The table is derived from the self-identifying rules of gitleaks'
//! default configuration (v8.30, MIT) and from detect-secrets' plugins; a
//! rule is self-identifying when its pattern matches the bare token with no
//! keyword around it. Each entry keeps the vendor's prefix exactly and
//! widens the body to a character class and a minimum length, which is
//! enough to tell the token from prose, ids and hashes: a short prefix
//! (`SK`, `AC`, `s.`) takes an exact length and a token end instead. The
//! corpus test (`tests/secrets_corpus.rs`, data in `tests/corpus/`) holds
//! the figures.

use super::SecretRule;
use super::bytes::{is_alnum, run};

/// Which bytes may follow a prefix: a union of classes.
#[derive(Clone, Copy)]
pub(super) struct Body(u16);

impl Body {
    const UPPER: Body = Body(1);
    const LOWER: Body = Body(1 << 1);
    const DIGIT: Body = Body(1 << 2);
    const HEX: Body = Body(1 << 3);
    const DASH: Body = Body(1 << 4);
    const UNDERSCORE: Body = Body(1 << 5);
    const DOT: Body = Body(1 << 6);
    const PLUS_SLASH: Body = Body(1 << 7);
    const EQUALS: Body = Body(1 << 8);
    const TILDE: Body = Body(1 << 9);

    const ALNUM: Body = Body::UPPER.or(Body::LOWER).or(Body::DIGIT);
    /// `[A-Za-z0-9_-]`, the usual token alphabet.
    const KEY: Body = Body::ALNUM.or(Body::DASH).or(Body::UNDERSCORE);
    /// Base64 with padding.
    const B64: Body = Body::ALNUM.or(Body::PLUS_SLASH).or(Body::EQUALS);

    const fn or(self, other: Body) -> Body {
        Body(self.0 | other.0)
    }

    const fn has(self, class: Body) -> bool {
        self.0 & class.0 != 0
    }

    pub(super) fn admits(self, b: u8) -> bool {
        (self.has(Body::UPPER) && b.is_ascii_uppercase())
            || (self.has(Body::LOWER) && b.is_ascii_lowercase())
            || (self.has(Body::DIGIT) && b.is_ascii_digit())
            || (self.has(Body::HEX) && b.is_ascii_hexdigit())
            || (self.has(Body::DASH) && b == b'-')
            || (self.has(Body::UNDERSCORE) && b == b'_')
            || (self.has(Body::DOT) && b == b'.')
            || (self.has(Body::PLUS_SLASH) && matches!(b, b'+' | b'/'))
            || (self.has(Body::EQUALS) && b == b'=')
            || (self.has(Body::TILDE) && b == b'~')
    }
}

/// A vendor prefix at a token start, then at least `min` body bytes (or,
/// when `exact`, exactly `min` and then a token end).
pub(super) struct Prefixed {
    prefix: &'static [u8],
    fold_case: bool,
    body: Body,
    min: usize,
    exact: bool,
    rule: SecretRule,
}

const fn p(prefix: &'static [u8], body: Body, min: usize, rule: SecretRule) -> Prefixed {
    Prefixed {
        prefix,
        fold_case: false,
        body,
        min,
        exact: false,
        rule,
    }
}

impl Prefixed {
    /// The prefix matches in any case (the vendor's pattern is `(?i)`).
    const fn fold(mut self) -> Prefixed {
        self.fold_case = true;
        self
    }

    /// Exactly `min` body bytes, then a token end: for short prefixes.
    const fn exact(mut self) -> Prefixed {
        self.exact = true;
        self
    }

    /// The end of this format's token starting at `at`, if it is one.
    fn matches(&self, bytes: &[u8], at: usize) -> Option<usize> {
        let head = bytes.get(at..at + self.prefix.len())?;
        // Byte by byte rather than `==`: prefixes are a few bytes and most
        // differ early, where a `memcmp` call costs more than the compare.
        let same = if self.fold_case {
            head.eq_ignore_ascii_case(self.prefix)
        } else {
            head.iter().zip(self.prefix).all(|(a, b)| a == b)
        };
        if !same {
            return None;
        }
        let body_at = at + self.prefix.len();
        let n = run(bytes, body_at, |b| self.body.admits(b));
        let end = body_at + n;
        if self.exact {
            let ends_token = bytes.get(end).is_none_or(|&b| !is_alnum(b));
            (n == self.min && ends_token).then_some(end)
        } else {
            (n >= self.min).then_some(end)
        }
    }
}

use Body as B;
use SecretRule::{
    AnthropicKey, AwsAccessKey, GitHubToken, GitLabToken, GoogleApiKey, HuggingFaceToken, NpmToken,
    OpenAiKey, PyPiToken, SlackToken, StripeKey, VendorToken,
};

/// Hex digits and a dash, for segmented hex tokens.
const HEX_DASH: Body = B::HEX.or(B::DASH);
/// `[\w.-]`.
const KEY_DOT: Body = B::KEY.or(B::DOT);
/// `[\w.=-]`, PlanetScale's alphabet.
const KEY_DOT_EQ: Body = B::KEY.or(B::DOT).or(B::EQUALS);

/// Every prefixed format. Where one prefix extends another (`sk-ant-` and
/// `sk-`), the longest that matches names the rule.
pub(super) const PREFIXED: &[Prefixed] = &[
    // Model providers.
    p(b"sk-ant-", B::KEY, 20, AnthropicKey),
    p(b"sk-", B::KEY, 20, OpenAiKey),
    p(b"pplx-", B::ALNUM, 40, VendorToken),
    p(b"hf_", B::ALNUM, 30, HuggingFaceToken),
    p(b"api_org_", B::ALNUM, 30, HuggingFaceToken),
    p(b"AIza", B::KEY, 35, GoogleApiKey),
    p(b"ABSK", B::B64, 100, VendorToken),
    p(b"bedrock-api-key-", B::B64, 20, VendorToken),
    // Code hosts and registries.
    p(b"ghp_", B::ALNUM, 20, GitHubToken),
    p(b"gho_", B::ALNUM, 20, GitHubToken),
    p(b"ghs_", B::ALNUM, 20, GitHubToken),
    p(b"ghu_", B::ALNUM, 20, GitHubToken),
    p(b"ghr_", B::ALNUM, 20, GitHubToken),
    p(b"github_pat_", B::ALNUM.or(B::UNDERSCORE), 20, GitHubToken),
    p(b"glpat-", B::KEY.or(B::DOT), 20, GitLabToken),
    p(b"gldt-", B::KEY, 20, GitLabToken),
    p(b"glft-", B::KEY, 20, GitLabToken),
    p(b"glsoat-", B::KEY, 20, GitLabToken),
    p(b"glrt-", B::KEY.or(B::DOT), 20, GitLabToken),
    p(b"glcbt-", B::KEY, 20, GitLabToken),
    p(b"glffct-", B::KEY, 20, GitLabToken),
    p(b"glimt-", B::KEY, 25, GitLabToken),
    p(b"glagent-", B::KEY, 50, GitLabToken),
    p(b"gloas-", B::KEY, 64, GitLabToken),
    p(b"glptt-", B::KEY, 40, GitLabToken),
    p(b"GR1348941", B::KEY, 20, GitLabToken),
    p(b"_gitlab_session=", B::ALNUM, 32, GitLabToken),
    p(b"npm_", B::ALNUM, 30, NpmToken).fold(),
    p(b"pypi-", B::KEY, 32, PyPiToken),
    p(b"rubygems_", B::HEX, 48, VendorToken),
    p(b"CLOJARS_", B::ALNUM, 60, VendorToken).fold(),
    p(b"AKCp", B::ALNUM, 69, VendorToken),
    p(b"AKC", B::ALNUM, 10, VendorToken),
    p(b"cmVmd", B::ALNUM, 59, VendorToken),
    p(b"rdme_", B::ALNUM, 70, VendorToken),
    p(
        b"sgp_",
        HEX_DASH.or(B::UNDERSCORE).or(B::LOWER),
        40,
        VendorToken,
    ),
    // Chat and mail.
    p(b"xoxa-", B::KEY.or(B::DOT), 8, SlackToken),
    p(b"xoxb-", B::KEY, 10, SlackToken),
    p(b"xoxe-", B::KEY, 10, SlackToken),
    p(b"xoxe.xox", B::KEY, 10, SlackToken),
    p(b"xoxo-", B::KEY, 10, SlackToken),
    p(b"xoxp-", B::KEY, 10, SlackToken),
    p(b"xoxr-", B::KEY, 8, SlackToken),
    p(b"xoxs-", B::KEY, 10, SlackToken),
    p(b"xapp-", B::KEY, 10, SlackToken).fold(),
    p(b"SG.", B::KEY.or(B::DOT).or(B::EQUALS), 60, VendorToken),
    p(b"xkeysib-", HEX_DASH.or(B::ALNUM), 64, VendorToken),
    p(b"ntn_", B::ALNUM, 40, VendorToken),
    p(b"lin_api_", B::ALNUM, 40, VendorToken).fold(),
    // Payments and commerce.
    p(b"sk_live_", B::ALNUM, 10, StripeKey),
    p(b"sk_test_", B::ALNUM, 10, StripeKey),
    p(b"sk_prod_", B::ALNUM, 10, StripeKey),
    p(b"rk_live_", B::ALNUM, 10, StripeKey),
    p(b"rk_test_", B::ALNUM, 10, StripeKey),
    p(b"rk_prod_", B::ALNUM, 10, StripeKey),
    p(b"pk_live_", B::ALNUM, 16, StripeKey),
    p(b"shpat_", B::HEX, 32, VendorToken),
    p(b"shpca_", B::HEX, 32, VendorToken),
    p(b"shppa_", B::HEX, 32, VendorToken),
    p(b"shpss_", B::HEX, 32, VendorToken),
    p(b"shippo_live_", B::HEX, 40, VendorToken),
    p(b"shippo_test_", B::HEX, 40, VendorToken),
    p(b"sq0atp-", B::KEY, 22, VendorToken),
    p(b"sq0csp-", B::KEY, 40, VendorToken),
    p(b"EAAA", B::KEY, 22, VendorToken),
    p(b"EAAC", B::ALNUM, 100, VendorToken),
    p(b"EAAM", B::ALNUM, 100, VendorToken),
    p(b"FLWSECK_TEST-", B::ALNUM.or(B::DASH), 12, VendorToken),
    p(b"FLWPUBK_TEST-", B::ALNUM.or(B::DASH), 32, VendorToken),
    p(b"duffel_live_", B::KEY.or(B::EQUALS), 43, VendorToken),
    p(b"duffel_test_", B::KEY.or(B::EQUALS), 43, VendorToken),
    p(b"EZAK", B::ALNUM, 54, VendorToken),
    p(b"EZTK", B::ALNUM, 54, VendorToken),
    // Clouds and infrastructure.
    p(b"AKIA", B::UPPER.or(B::DIGIT), 16, AwsAccessKey).exact(),
    p(b"ASIA", B::UPPER.or(B::DIGIT), 16, AwsAccessKey).exact(),
    p(b"ABIA", B::UPPER.or(B::DIGIT), 16, AwsAccessKey).exact(),
    p(b"ACCA", B::UPPER.or(B::DIGIT), 16, AwsAccessKey).exact(),
    p(b"A3T", B::UPPER.or(B::DIGIT), 17, AwsAccessKey).exact(),
    p(b"LTAI", B::ALNUM, 20, VendorToken),
    p(b"AccountKey=", B::B64, 80, VendorToken),
    p(
        b"api.softlayer.com/soap/",
        B::KEY.or(B::DOT).or(B::PLUS_SLASH),
        66,
        VendorToken,
    ),
    p(b"doo_v1_", B::HEX, 64, VendorToken),
    p(b"dop_v1_", B::HEX, 64, VendorToken),
    p(b"dor_v1_", B::HEX, 64, VendorToken).fold(),
    p(b"dp.pt.", B::ALNUM, 43, VendorToken),
    p(b"dt0c01.", B::ALNUM.or(B::DOT), 80, VendorToken),
    p(b"dapi", B::HEX.or(B::DASH), 32, VendorToken),
    p(b"v1.0-", HEX_DASH, 150, VendorToken),
    p(b"4b1d", B::ALNUM, 38, VendorToken).exact(),
    p(b"fo1_", B::KEY, 43, VendorToken),
    p(b"fm1a_", B::B64, 100, VendorToken),
    p(b"fm1r_", B::B64, 100, VendorToken),
    p(b"fm2_", B::B64, 100, VendorToken),
    p(b"hvs.", B::KEY, 90, VendorToken),
    p(b"hvb.", B::KEY, 138, VendorToken),
    p(b"s.", B::ALNUM, 24, VendorToken).exact(),
    p(b"HRKU-AA", B::KEY, 58, VendorToken),
    p(b"pscale_tkn_", KEY_DOT_EQ, 32, VendorToken).fold(),
    p(b"pscale_oauth_", KEY_DOT_EQ, 32, VendorToken),
    p(b"pscale_pw_", KEY_DOT_EQ, 32, VendorToken).fold(),
    p(b"pul-", B::HEX, 40, VendorToken),
    p(b"tk-us-", B::KEY, 48, VendorToken),
    p(b"sha256~", B::KEY, 43, VendorToken),
    p(b"API-", B::UPPER.or(B::DIGIT), 26, VendorToken).exact(),
    p(b"ico-", B::ALNUM, 32, VendorToken),
    p(b"pnu_", B::ALNUM, 36, VendorToken),
    p(b"PMAK-", HEX_DASH, 59, VendorToken).fold(),
    p(b"sntryu_", B::HEX, 64, VendorToken),
    p(
        b"sntrys_eyJpYXQiO",
        B::B64.or(B::UNDERSCORE),
        20,
        VendorToken,
    ),
    p(b"eyJrIjoi", B::ALNUM, 70, VendorToken).fold(),
    p(b"glc_", B::B64, 32, VendorToken).fold(),
    p(b"glsa_", B::ALNUM.or(B::UNDERSCORE), 40, VendorToken).fold(),
    p(b"pat.", B::KEY.or(B::DOT), 66, VendorToken),
    p(b"sat.", B::KEY.or(B::DOT), 66, VendorToken),
    p(b"fio-u-", B::KEY.or(B::EQUALS), 64, VendorToken),
    // Identity, secrets managers and the rest.
    p(b"ops_eyJ", B::B64, 250, VendorToken),
    p(b"A3-", B::UPPER.or(B::DIGIT).or(B::DASH), 30, VendorToken),
    p(b"AGE-SECRET-KEY-1", B::UPPER.or(B::DIGIT), 58, VendorToken),
    p(b"p8e-", B::ALNUM, 32, VendorToken).fold(),
    p(b"pat", B::ALNUM.or(B::DOT), 79, VendorToken),
    p(b"s-s4t2ud-", B::HEX, 64, VendorToken),
    p(b"s-s4t2af-", B::HEX, 64, VendorToken),
    p(b"SK", B::HEX.or(B::LOWER).or(B::DIGIT), 32, VendorToken).exact(),
    p(b"AC", B::LOWER.or(B::DIGIT), 32, VendorToken).exact(),
    p(b"sm_aat_", B::ALNUM, 16, VendorToken),
    p(b"sm_pat_", B::ALNUM, 16, VendorToken),
    p(b"sm_sat_", B::ALNUM, 16, VendorToken),
];

/// For each lowercased byte, the [`PREFIXED`] formats whose prefix starts
/// with it (bit `i` for entry `i`), built at compile time: a token start
/// then tries only the formats it can begin, not all of them.
const BY_FIRST_BYTE: [u128; 256] = {
    assert!(PREFIXED.len() <= 128, "one bit per prefixed format");
    let mut table = [0u128; 256];
    let mut i = 0;
    while i < PREFIXED.len() {
        table[PREFIXED[i].prefix[0].to_ascii_lowercase() as usize] |= 1 << i;
        i += 1;
    }
    table
};

/// The longest prefixed format matching at `at` (a token start): its end
/// and rule. Of equally long prefixes the last listed wins.
pub(super) fn prefixed(bytes: &[u8], at: usize) -> Option<(usize, SecretRule)> {
    let first = bytes.get(at)?.to_ascii_lowercase();
    let mut candidates = BY_FIRST_BYTE[usize::from(first)];
    let mut best: Option<(usize, usize, SecretRule)> = None;
    while candidates != 0 {
        let i = candidates.trailing_zeros() as usize;
        candidates &= candidates - 1;
        let Some(f) = PREFIXED.get(i) else { break };
        if let Some(end) = f.matches(bytes, at)
            && best.is_none_or(|(len, _, _)| f.prefix.len() >= len)
        {
            best = Some((f.prefix.len(), end, f.rule));
        }
    }
    best.map(|(_, end, rule)| (end, rule))
}

/// A marker inside a token: at least `before_min` bytes of `before` ending
/// at the marker, and at least `after_min` of `after` following it.
pub(super) struct Infixed {
    marker: &'static [u8],
    before: Body,
    before_min: usize,
    after: Body,
    after_min: usize,
}

const fn infix(
    marker: &'static [u8],
    before: Body,
    before_min: usize,
    after: Body,
    after_min: usize,
) -> Infixed {
    Infixed {
        marker,
        before,
        before_min,
        after,
        after_min,
    }
}

/// Every infixed format: Azure AD client secrets (`…Q~…`), Terraform
/// Cloud tokens (`….atlasv1.…`), MaxMind licence keys (`…_mmk`), Facebook
/// app tokens (`<app id>|<secret>`), Mailchimp keys (`…-us12`) and
/// Telegram bot tokens (`<bot id>:<secret>`), Authress service keys
/// (`….acc_…`).
pub(super) const INFIXED: &[Infixed] = &[
    infix(
        b"Q~",
        B::ALNUM.or(B::UNDERSCORE).or(B::TILDE).or(B::DOT),
        4,
        B::KEY.or(B::TILDE).or(B::DOT),
        31,
    ),
    // Authress service keys: `sc_…`, `ext_…` and kin, marked by `.acc`.
    infix(
        b".acc_",
        KEY_DOT,
        12,
        KEY_DOT.or(B::PLUS_SLASH).or(B::EQUALS),
        40,
    ),
    infix(
        b".acc-",
        KEY_DOT,
        12,
        KEY_DOT.or(B::PLUS_SLASH).or(B::EQUALS),
        40,
    ),
    infix(b".atlasv1.", B::ALNUM, 14, B::KEY.or(B::EQUALS), 60),
    infix(b"_mmk", B::ALNUM.or(B::UNDERSCORE), 36, B::ALNUM, 0),
    infix(b"|", B::DIGIT, 15, B::KEY, 27),
    infix(b"%", B::DIGIT, 15, B::KEY, 27),
    infix(b"-us", B::LOWER.or(B::DIGIT), 32, B::DIGIT, 1),
    infix(b":", B::DIGIT, 8, B::KEY, 35),
];

impl Infixed {
    /// The span around the marker at `at`, if the runs are long enough.
    fn matches(&self, bytes: &[u8], at: usize) -> Option<(usize, usize)> {
        let before = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| self.before.admits(b))
            .count();
        let after_at = at + self.marker.len();
        let after = run(bytes, after_at, |b| self.after.admits(b));
        (before >= self.before_min && after >= self.after_min)
            .then_some((at - before, after_at + after))
    }
}

/// Whether a byte starts some [`INFIXED`] marker, built at compile time:
/// most bytes start none and are passed over with one look-up.
const MARKER_START: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < INFIXED.len() {
        table[INFIXED[i].marker[0] as usize] = true;
        i += 1;
    }
    table
};

/// Every infixed format's spans in `bytes`, in one pass: at each byte
/// that starts a marker, each format whose marker is there.
pub(super) fn infixed(bytes: &[u8], mut push: impl FnMut(usize, usize)) {
    for (at, &b) in bytes.iter().enumerate() {
        if !MARKER_START[usize::from(b)] {
            continue;
        }
        for format in INFIXED {
            if bytes[at..].starts_with(format.marker)
                && let Some((start, end)) = format.matches(bytes, at)
            {
                push(start, end);
            }
        }
    }
}

/// A Discord bot token: three dot-separated runs of 23–25 (after `M`, `N`
/// or `O`), 6 and at least 27 token bytes.
pub(super) fn discord(bytes: &[u8], at: usize) -> Option<usize> {
    if !matches!(bytes.get(at), Some(b'M' | b'N' | b'O')) {
        return None;
    }
    let first = run(bytes, at + 1, is_token_byte);
    let dot1 = at + 1 + first;
    if !(23..=25).contains(&first) || bytes.get(dot1) != Some(&b'.') {
        return None;
    }
    let second = run(bytes, dot1 + 1, is_token_byte);
    let dot2 = dot1 + 1 + second;
    if second != 6 || bytes.get(dot2) != Some(&b'.') {
        return None;
    }
    let third = run(bytes, dot2 + 1, is_token_byte);
    (third >= 27).then_some(dot2 + 1 + third)
}

fn is_token_byte(b: u8) -> bool {
    Body::KEY.admits(b)
}

#[cfg(test)]
mod tests {
    use super::super::bytes::find;
    use super::*;

    #[test]
    fn each_body_class_admits_its_bytes_only() {
        let check = |body: Body, admitted: &[u8]| {
            for b in 0u8..128 {
                assert_eq!(body.admits(b), admitted.contains(&b), "{:?}", b as char);
            }
        };
        check(B::UPPER, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        check(B::LOWER, b"abcdefghijklmnopqrstuvwxyz");
        check(B::DIGIT, b"0123456789");
        check(B::HEX, b"0123456789abcdefABCDEF");
        check(B::DASH, b"-");
        check(B::UNDERSCORE, b"_");
        check(B::DOT, b".");
        check(B::PLUS_SLASH, b"+/");
        check(B::EQUALS, b"=");
        check(B::TILDE, b"~");
        check(B::DASH.or(B::TILDE), b"-~");
        // A union, not a toggle: a class named twice stays in.
        check(
            B::KEY.or(B::DASH),
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        );
        check(Body(0), b"");
    }

    /// `text` is matched by the prefixed table at 0: the end and rule.
    fn check_prefixed(text: &str, expected: Option<(usize, SecretRule)>) {
        assert_eq!(prefixed(text.as_bytes(), 0), expected, "{text:?}");
    }

    #[test]
    fn prefixes_need_their_minimum_and_exact_ones_a_token_end() {
        let hex32 = "0123456789abcdef0123456789abcdef";
        // `shpat_` + at least 32 hex.
        check_prefixed(&format!("shpat_{hex32}"), Some((38, VendorToken)));
        check_prefixed(&format!("shpat_{hex32}ab!"), Some((40, VendorToken)));
        check_prefixed(&format!("shpat_{}", &hex32[..31]), None);
        check_prefixed(&format!("SHPAT_{hex32}"), None);
        // Folded prefixes match in any case.
        check_prefixed(&format!("NPM_{hex32}"), Some((36, NpmToken)));
        // `SK` + exactly 32, then a token end.
        check_prefixed(&format!("SK{hex32}"), Some((34, VendorToken)));
        check_prefixed(&format!("SK{hex32} x"), Some((34, VendorToken)));
        check_prefixed(&format!("SK{hex32}0"), None);
        check_prefixed(&format!("SK{}", &hex32[..31]), None);
        // The longest prefix names the rule.
        let body = "Ab3De5Gh7Jk9Mn2Pq4St";
        check_prefixed(&format!("sk-ant-{body}"), Some((27, AnthropicKey)));
        check_prefixed(&format!("sk-{body}"), Some((23, OpenAiKey)));
        check_prefixed("", None);
        check_prefixed("q", None);
    }

    fn check_infixed(text: &str, expected: &[(usize, usize)]) {
        let mut found = Vec::new();
        infixed(text.as_bytes(), |start, end| found.push((start, end)));
        assert_eq!(found, expected, "{text:?}");
    }

    #[test]
    fn infixes_need_both_runs() {
        let a35 = "Ab3De5Gh7Jk9Mn2Pq4St6Vw8Yz1Bc3Df5Hg";
        // Telegram: at least 8 digits, `:`, at least 35 token bytes.
        check_infixed(&format!("x 12345678:{a35} y"), &[(2, 46)]);
        check_infixed(&format!("1234567:{a35}"), &[]);
        check_infixed(&format!("12345678:{}", &a35[..34]), &[]);
        // MaxMind: 36 before `_mmk`, nothing required after.
        let before = "a".repeat(36);
        check_infixed(&format!("{before}_mmk"), &[(0, 40)]);
        check_infixed(&format!("{}_mmk", &before[..35]), &[]);
        // Two markers, two spans.
        check_infixed(
            &format!("12345678:{a35} 87654321:{a35}"),
            &[(0, 44), (45, 89)],
        );
    }

    #[test]
    fn discord_tokens_have_three_dotted_runs() {
        let t = |a: usize, b: usize, c: usize| {
            format!("M{}.{}.{}", "a".repeat(a), "b".repeat(b), "c".repeat(c))
        };
        let check = |text: String, end: Option<usize>| {
            assert_eq!(discord(text.as_bytes(), 0), end, "{text:?}");
        };
        check(t(23, 6, 27), Some(1 + 23 + 1 + 6 + 1 + 27));
        check(t(25, 6, 30), Some(1 + 25 + 1 + 6 + 1 + 30));
        check(t(22, 6, 27), None);
        check(t(26, 6, 27), None);
        check(t(23, 5, 27), None);
        check(t(23, 7, 27), None);
        check(t(23, 6, 26), None);
        check(t(23, 6, 27).replacen('M', "P", 1), None);
        check(format!("M{}", "a".repeat(23)), None);
        check(format!("M{}.{}", "a".repeat(23), "b".repeat(6)), None);
    }

    /// The indexed [`prefixed`] against a plain scan of every format (the
    /// longest prefix wins, the last listed of equal length): the same
    /// answer for each format's own token, its case-flipped, cut and
    /// one-byte-changed forms, and a generated prefix of bytes.
    #[test]
    fn prefixed_matches_a_scan_of_every_format() {
        fn scan(bytes: &[u8], at: usize) -> Option<(usize, SecretRule)> {
            let first = bytes.get(at)?.to_ascii_lowercase();
            PREFIXED
                .iter()
                .filter(|f| f.prefix[0].to_ascii_lowercase() == first)
                .filter(|f| {
                    let head = bytes.get(at..at + f.prefix.len()).unwrap_or_default();
                    head == f.prefix || (f.fold_case && head.eq_ignore_ascii_case(f.prefix))
                })
                .filter_map(|f| {
                    f.matches(bytes, at)
                        .map(|end| (f.prefix.len(), end, f.rule))
                })
                .max_by_key(|&(len, _, _)| len)
                .map(|(_, end, rule)| (end, rule))
        }
        let check = |text: Vec<u8>| {
            for at in 0..text.len().min(3) {
                assert_eq!(
                    prefixed(&text, at),
                    scan(&text, at),
                    "{:?}",
                    String::from_utf8_lossy(&text)
                );
            }
        };
        let mut matched = 0;
        for f in PREFIXED {
            for body in ["A", "a", "0", "aB3-_", "Zz9."] {
                let token = [f.prefix, body.repeat(120).as_bytes()].concat();
                matched += usize::from(prefixed(&token, 0).is_some());
                check(token.clone());
                check(token.to_ascii_uppercase());
                check(token.to_ascii_lowercase());
                for i in 0..f.prefix.len() {
                    let mut changed = token.clone();
                    changed[i] ^= 0x01;
                    check(changed);
                    check([&token[..i], &token[i + 1..]].concat());
                }
            }
        }
        assert!(
            matched >= PREFIXED.len(),
            "the tokens should match their formats"
        );
    }

    proptest::proptest! {
        /// [`find`] against a scan of every window.
        #[test]
        fn find_matches_a_window_scan(
            hay in proptest::collection::vec(proptest::sample::select(b"ab:/|Q~".to_vec()), 0..40),
            needle in proptest::collection::vec(proptest::sample::select(b"ab:/|Q~".to_vec()), 1..4),
            from in 0usize..45,
        ) {
            let windows = hay
                .get(from..)
                .and_then(|rest| rest.windows(needle.len()).position(|w| w == needle.as_slice()))
                .map(|p| p + from);
            proptest::prop_assert_eq!(find(&hay, from, &needle), windows);
        }
    }

    /// Runs long enough for every infixed format, its markers, and breaks.
    const INFIX_PIECES: &[&str] = &[
        "1234567890123456",
        "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
        "abcdefghijklmnopqrstuvwxyz0123456789",
        "Q~",
        ".acc_",
        ".acc-",
        ".atlasv1.",
        "_mmk",
        "|",
        "%",
        "-us",
        ":",
        " ",
        "7",
    ];

    proptest::proptest! {
        /// The one-pass [`infixed`] finds the spans a scan per format
        /// finds.
        #[test]
        fn infixed_matches_a_scan_per_format(
            pieces in proptest::collection::vec(proptest::sample::select(INFIX_PIECES), 0..10),
        ) {
            let text = pieces.concat().into_bytes();
            let mut scanned = Vec::new();
            for format in INFIXED {
                let mut from = 0;
                while let Some(at) = find(&text, from, format.marker) {
                    scanned.extend(format.matches(&text, at));
                    from = at + 1;
                }
            }
            let mut found = Vec::new();
            infixed(&text, |start, end| found.push((start, end)));
            scanned.sort_unstable();
            found.sort_unstable();
            proptest::prop_assert_eq!(found, scanned);
        }
    }
}
