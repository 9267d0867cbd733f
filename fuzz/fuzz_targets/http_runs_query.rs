//! Fuzzes what `keel serve` reads from an untrusted client on
//! `GET /v1/runs` (and `keel runs` from its options): `limit`, `after`,
//! `status`, `conversation` and `since`, through `ListQuery::parse` (the
//! function the handler calls).
//!
//! Properties:
//! - never panics; a refusal is a 400 `invalid-page` problem naming one of
//!   the five parameters and a `runs.*` rule;
//! - the verdict on `limit`, `status`, `conversation` and a digits-only
//!   `since` matches an independent reading (1..=1000; one of the four
//!   statuses; a run id; unix milliseconds that fit in microseconds);
//! - a `next` cursor made for a page is accepted with the same filters
//!   (and gives back the cursor it was made from) and refused with
//!   `runs.cursor_filters` with other ones.
#![no_main]

use keel_message::RunId;
use keel_observers::RunsCursor;
use keel_serve::run_list::{ListQuery, MAX_PAGE_RUNS};
use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const PARAMETERS: &[&str] = &["limit", "after", "status", "conversation", "since"];

fn text(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    Option::<String>::arbitrary(u)
}

fn check(u: &mut Unstructured<'_>) -> Result<()> {
    let query = ListQuery {
        limit: text(u)?,
        after: text(u)?,
        status: text(u)?,
        conversation: text(u)?,
        since: text(u)?,
    };
    let verdict = query.parse();
    let limit_ok = query
        .limit
        .as_deref()
        .is_none_or(|l| l.parse::<usize>().is_ok_and(|n| (1..=MAX_PAGE_RUNS).contains(&n)));
    let status_ok = query.status.as_deref().is_none_or(|s| {
        ["running", "completed", "failed", "cancelled"].contains(&s)
    });
    let conversation_ok = query
        .conversation
        .as_deref()
        .is_none_or(|c| RunId::parse(c).is_ok());
    match &verdict {
        Ok(page) => {
            assert!(limit_ok && status_ok && conversation_ok, "{query:?}");
            if let Some(since) = query.since.as_deref()
                && since.bytes().all(|b| b.is_ascii_digit())
            {
                let ms: u64 = since.parse().unwrap();
                assert_eq!(page.query().since_ts, Some(ms * 1000), "{query:?}");
            }
            // The page's own cursor is taken back with the same filters.
            let run_id = String::arbitrary(u)?;
            if RunId::parse(&run_id).is_ok() {
                let cursor = RunsCursor {
                    started_ts: u64::arbitrary(u)?,
                    run_id,
                };
                let next = page.next(&cursor);
                let again = ListQuery {
                    after: Some(next.clone()),
                    ..query.clone()
                };
                let resumed = again.parse().unwrap();
                assert_eq!(resumed.query().after.as_ref(), Some(&cursor));
                let other = ListQuery {
                    after: Some(next),
                    status: Some(if query.status.as_deref() == Some("failed") {
                        "completed".to_owned()
                    } else {
                        "failed".to_owned()
                    }),
                    ..query.clone()
                };
                let refused = other.parse().unwrap_err().to_json();
                assert_eq!(refused["rule"], "runs.cursor_filters");
            }
        }
        Err(problem) => {
            assert_eq!(problem.status().as_u16(), 400);
            let json = problem.to_json();
            assert_eq!(json["type"], "urn:keel:problem:invalid-page");
            let parameter = json["parameter"].as_str().unwrap();
            assert!(PARAMETERS.contains(&parameter), "{json}");
            assert!(json["rule"].as_str().unwrap().starts_with("runs."), "{json}");
            if !(limit_ok && status_ok && conversation_ok) {
                assert!(["limit", "status", "conversation"].contains(&parameter), "{json}");
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(&mut Unstructured::new(data));
});
