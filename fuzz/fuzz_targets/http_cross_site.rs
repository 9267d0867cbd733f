//! Fuzzes the cross-site and rebinding defences of `keel serve`
//! (`CrossSitePolicy::check`, the first thing every request meets) with
//! arbitrary `Host`, `Origin` and `Content-Type` bytes and methods.
//!
//! Properties, against an independent reading (the `http` crate's
//! `Authority` parser for hosts):
//! - an accepted request's `Host` parses as an authority without user
//!   info whose host, lowercased, is `localhost`, `127.0.0.1`, `[::1]` or
//!   the listed public host (with its port);
//! - a well-formed `Host` (plain name characters or a bracketed literal,
//!   a port up to 65535) naming one of those is never refused for its host;
//! - a request with an `Origin` is accepted only when that origin,
//!   lowercased, is the listed one or `http(s)://` plus the request's host;
//! - a state-changing method is accepted only with a media type of
//!   exactly `application/json`;
//! - an absolute-form target or a repeated `Host` or `Origin` is always
//!   refused as such (rule `http.unambiguous_head`);
//! - the verdict is deterministic, and a refusal's problem is one of the
//!   fixed texts (it never carries the request's bytes).
#![no_main]

use http::Method;
use http::uri::Authority;
use keel_serve::cross_site::{
    AllowedOrigin, CrossSitePolicy, CrossSiteRefusal, RequestHead, parse_public_host,
};
use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::str::FromStr;

const LISTED_ORIGIN: &str = "http://127.0.0.1:5555";
const PUBLIC_HOST: &str = "keel.internal";
const PUBLIC_PORT: u16 = 8443;

/// Header bytes drawn from a vocabulary of near misses, or raw.
fn header(u: &mut Unstructured<'_>, vocabulary: &[&str]) -> Result<Option<Vec<u8>>> {
    Ok(match u.int_in_range(0..=3)? {
        0 => None,
        1 => Some(Vec::<u8>::arbitrary(u)?),
        2 => Some(u.choose(vocabulary)?.as_bytes().to_vec()),
        _ => {
            let mut v = u.choose(vocabulary)?.as_bytes().to_vec();
            let tail: String = u.arbitrary()?;
            v.extend_from_slice(tail.as_bytes());
            Some(v)
        }
    })
}

fn served_host(authority: &Authority) -> bool {
    let host = authority.host().to_ascii_lowercase();
    matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
        || (host == PUBLIC_HOST && authority.port_u16() == Some(PUBLIC_PORT))
}

/// Whether `bytes` is a `Host` the defences must serve: well-formed by
/// the plain rule and naming a served host.
fn clearly_served(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => (h, Some(p)),
        _ => (text, None),
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    let host = host.to_ascii_lowercase();
    let name = matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
        || (host == PUBLIC_HOST
            && port.and_then(|p| p.parse::<u16>().ok()) == Some(PUBLIC_PORT));
    port_ok && name
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let hosts = [
        "127.0.0.1:7878",
        "localhost",
        "LocalHost:1",
        "[::1]:7878",
        "keel.internal:8443",
        "keel.internal",
        "attacker.example",
        "127.0.0.1.nip.io",
        "localhost.",
        "[::1",
        "user@localhost",
    ];
    let origins = [
        LISTED_ORIGIN,
        "http://127.0.0.1:7878",
        "https://localhost",
        "null",
        "http://evil.example",
    ];
    let types = ["application/json", "text/plain", "application/json;x", " APPLICATION/JSON "];
    let method = u
        .choose(&[Method::GET, Method::HEAD, Method::OPTIONS, Method::POST, Method::DELETE])?
        .clone();
    let host = header(u, &hosts)?;
    let origin = header(u, &origins)?;
    let content_type = header(u, &types)?;
    let (Ok(listed), Ok(public)) = (
        AllowedOrigin::parse(LISTED_ORIGIN),
        parse_public_host(&format!("{PUBLIC_HOST}:{PUBLIC_PORT}")),
    ) else {
        panic!("the fixed flag values parse");
    };
    let policy = CrossSitePolicy::new(true, vec![public], vec![listed]);
    // Mostly one of each header present; sometimes a repeat, sometimes an
    // absolute-form target.
    let repeats = |present: bool, u: &mut Unstructured<'_>| -> Result<usize> {
        Ok(usize::from(present) + usize::from(present && u.ratio(1, 8)?))
    };
    let head = RequestHead {
        method: &method,
        host: host.as_deref(),
        origin: origin.as_deref(),
        content_type: content_type.as_deref(),
        absolute_target: u.ratio(1, 8)?,
        host_headers: repeats(host.is_some(), u)?,
        origin_headers: repeats(origin.is_some(), u)?,
    };
    let verdict = policy.check(&head);
    assert_eq!(verdict, policy.check(&head), "deterministic");
    if head.absolute_target || head.host_headers > 1 || head.origin_headers > 1 {
        assert!(
            matches!(
                verdict,
                Err(CrossSiteRefusal::AbsoluteTarget
                    | CrossSiteRefusal::RepeatedHost
                    | CrossSiteRefusal::RepeatedOrigin)
            ),
            "an ambiguous head was judged by its first reading: {verdict:?}"
        );
        return Ok(());
    }
    let authority = host
        .as_deref()
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| Authority::from_str(h).ok());
    if verdict.is_ok() {
        let a = authority.as_ref().expect("an accepted Host parses as an authority");
        assert!(!a.as_str().contains('@'), "user info accepted: {a}");
        assert!(served_host(a), "served a foreign host: {a}");
        if let Some(o) = origin.as_deref() {
            let o = String::from_utf8_lossy(o).to_ascii_lowercase();
            let own = a.as_str().to_ascii_lowercase();
            assert!(
                o == LISTED_ORIGIN || o == format!("http://{own}") || o == format!("https://{own}"),
                "accepted Origin {o:?} for Host {own:?}"
            );
        }
        if !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) {
            let t = content_type.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let media = t.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
            assert_eq!(media, "application/json", "state change with {t:?}");
        }
    }
    if let Err(refusal) = verdict {
        if host.as_deref().is_some_and(clearly_served) {
            assert!(
                !matches!(
                    refusal,
                    CrossSiteRefusal::HostMissing | CrossSiteRefusal::HostNotAllowed
                ),
                "refused a served Host {:?}",
                host.as_deref().map(String::from_utf8_lossy)
            );
        }
        let problem = refusal.problem().to_json().to_string();
        assert!(problem.contains(&refusal.to_string().replace('"', "\\\"")));
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
