//! The query of `GET /v1/runs` (and `keel runs`): `limit`, `after`, and the
//! filters `status`, `conversation` and `since`, checked into the journal's
//! [`RunsQuery`]; and the opaque `next` cursor, which carries a fingerprint
//! of the filters it was made with so that it is never used with others
//! (rule `runs.cursor_filters`). Every refusal is a 400 `invalid-page`
//! problem naming the parameter and the rule.

use super::problem::Problem;
use axum::http::StatusCode;
use keel_message::RunId;
use keel_observers::{RunStatus, RunsCursor, RunsQuery};

/// The `limit` of `GET /v1/runs` when none is given.
pub const DEFAULT_PAGE_RUNS: usize = 500;
/// The largest `limit` of `GET /v1/runs`.
pub const MAX_PAGE_RUNS: usize = 1000;
/// The statuses `status` takes.
pub const STATUSES: [&str; 4] = ["running", "completed", "failed", "cancelled"];
/// The longest `after` cursor taken, in bytes (hex of a run id, which is at
/// most 128 bytes, plus its start time and the filters' fingerprint).
pub const MAX_CURSOR_BYTES: usize = 512;

/// The query of `GET /v1/runs`, as sent (checked by [`ListQuery::parse`]).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct ListQuery {
    /// Most runs on the page: 1 to [`MAX_PAGE_RUNS`].
    pub limit: Option<String>,
    /// The `next` cursor of the page before.
    pub after: Option<String>,
    /// One of [`STATUSES`].
    pub status: Option<String>,
    /// A run id: the runs of its conversation (its `continues` chain).
    pub conversation: Option<String>,
    /// Runs started at or after: unix milliseconds, or an RFC 3339 UTC time
    /// (`2026-12-05T12:00:00Z`, optional fraction).
    pub since: Option<String>,
}

/// A checked [`ListQuery`]: the journal's query and the filters'
/// fingerprint (what a `next` cursor of this page carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    query: RunsQuery,
    filters: u64,
}

impl ListPage {
    /// The journal's query of this page.
    pub fn query(&self) -> &RunsQuery {
        &self.query
    }

    /// Whether a filter is set (the live runs not journaled yet are only
    /// listed, on the last page, when none but `status=running` is).
    pub fn lists_unjournaled_live_runs(&self) -> bool {
        self.query.conversation.is_none()
            && self.query.since_ts.is_none()
            && self.query.status.is_none_or(|s| s == RunStatus::Running)
    }

    /// `next` on the wire for a page that ends at `cursor`.
    pub fn next(&self, cursor: &RunsCursor) -> String {
        encode(cursor, self.filters)
    }
}

fn bad(parameter: &str, rule: &'static str, detail: String) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-page",
        "Invalid page of the run list",
        detail,
    )
    .with("parameter", parameter)
    .with("rule", rule)
}

impl ListQuery {
    /// Checks every parameter; the first refused one is the problem.
    pub fn parse(&self) -> Result<ListPage, Problem> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE_RUNS,
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_RUNS).contains(n))
                .ok_or_else(|| {
                    bad(
                        "limit",
                        "runs.limit",
                        format!("limit must be an integer from 1 to {MAX_PAGE_RUNS}"),
                    )
                    .with("max_limit", MAX_PAGE_RUNS)
                })?,
        };
        let status = match self.status.as_deref() {
            None => None,
            Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
                bad(
                    "status",
                    "runs.status",
                    format!("status must be one of {}", STATUSES.join(", ")),
                )
                .with("allowed", STATUSES)
            })?),
        };
        let conversation = match self.conversation.as_deref() {
            None => None,
            Some(text) => Some(
                RunId::parse(text)
                    .map_err(|e| {
                        bad(
                            "conversation",
                            "runs.conversation",
                            format!("conversation must be a run id: {e}"),
                        )
                    })?
                    .to_string(),
            ),
        };
        let since_ts = match self.since.as_deref() {
            None => None,
            Some(text) => Some(since_micros(text).ok_or_else(|| {
                bad(
                    "since",
                    "runs.since",
                    format!(
                        "since must be unix milliseconds or an RFC 3339 UTC time \
                         (YYYY-MM-DDTHH:MM:SS[.fraction]Z), {} bytes at most",
                        MAX_SINCE_BYTES
                    ),
                )
            })?),
        };
        let filters = fingerprint(status, conversation.as_deref(), since_ts);
        let after = match self.after.as_deref() {
            None => None,
            Some(text) => Some(cursor(text, filters)?),
        };
        Ok(ListPage {
            query: RunsQuery {
                limit,
                after,
                status,
                conversation,
                since_ts,
            },
            filters,
        })
    }
}

/// `after` checked: a cursor of this list, made with these filters.
fn cursor(text: &str, filters: u64) -> Result<RunsCursor, Problem> {
    let refused = || {
        bad(
            "after",
            "runs.after",
            "after must be the `next` cursor of an earlier page".to_owned(),
        )
    };
    if text.len() > MAX_CURSOR_BYTES {
        return Err(refused().with("max_bytes", MAX_CURSOR_BYTES));
    }
    let (cursor, made_with) = decode(text).ok_or_else(refused)?;
    if made_with != filters {
        return Err(bad(
            "after",
            "runs.cursor_filters",
            "after is the cursor of a page with other filters (status, conversation, since); \
             page with the filters it was made with, or start again without after"
                .to_owned(),
        ));
    }
    Ok(cursor)
}

/// FNV-1a over the checked filters: the same filters (however `since` was
/// written) give the same fingerprint, in every build.
fn fingerprint(
    status: Option<RunStatus>,
    conversation: Option<&str>,
    since_ts: Option<u64>,
) -> u64 {
    // Without filters the fingerprint is 0: what a cursor of the earlier
    // format (no fingerprint) was made with.
    if status.is_none() && conversation.is_none() && since_ts.is_none() {
        return 0;
    }
    let text = format!(
        "status={}\nconversation={}\nsince={}",
        status.map_or("", RunStatus::as_str),
        conversation.unwrap_or(""),
        since_ts.map(|t| t.to_string()).unwrap_or_default(),
    );
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

/// The hex of `f{FILTERS:016x}:{STARTED_TS}:{RUN_ID}`.
fn encode(cursor: &RunsCursor, filters: u64) -> String {
    format!("f{filters:016x}:{}:{}", cursor.started_ts, cursor.run_id)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A cursor and the fingerprint it was made with; the earlier format
/// (`STARTED_TS:RUN_ID`, no filters) still reads, as made without filters.
fn decode(text: &str) -> Option<(RunsCursor, u64)> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let plain = String::from_utf8(bytes).ok()?;
    let (filters, rest) = match plain.strip_prefix('f') {
        Some(rest) => {
            let (hex, rest) = rest.split_once(':')?;
            if hex.len() != 16 {
                return None;
            }
            (u64::from_str_radix(hex, 16).ok()?, rest)
        }
        None => (0, plain.as_str()),
    };
    let (ts, run_id) = rest.split_once(':')?;
    if !ts.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((
        RunsCursor {
            started_ts: ts.parse().ok()?,
            run_id: RunId::parse(run_id).ok()?.to_string(),
        },
        filters,
    ))
}

/// The longest `since` taken, in bytes.
pub const MAX_SINCE_BYTES: usize = 40;

/// `since` in unix microseconds (the journal's `ts`): all digits are unix
/// milliseconds; otherwise `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, UTC only
/// (an offset is refused rather than guessed), years 1970 to 9999.
fn since_micros(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > MAX_SINCE_BYTES {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().ok()?.checked_mul(1000);
    }
    let body = text.strip_suffix('Z').or_else(|| text.strip_suffix('z'))?;
    let (date, time) = body.split_once(['T', 't'])?;
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => (clock, f),
        Some(_) => return None,
        None => (time, ""),
    };
    let field = |s: &str, len: usize| -> Option<u64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let mut d = date.split('-');
    let (year, month, day) = (
        field(d.next()?, 4)?,
        field(d.next()?, 2)?,
        field(d.next()?, 2)?,
    );
    let mut c = clock.split(':');
    let (hour, minute, second) = (
        field(c.next()?, 2)?,
        field(c.next()?, 2)?,
        field(c.next()?, 2)?,
    );
    if d.next().is_some() || c.next().is_some() || year < 1970 || hour > 23 || minute > 59 {
        return None;
    }
    // A leap second (`:60`) is the second after `:59`.
    if second > 60 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    let micros: u64 = format!("{fraction:0<6}").get(..6)?.parse().ok()?;
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date on or after it (Howard Hinnant's
/// `days_from_civil`, for years from 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    /// The query's `(name, value)` pairs.
    type Pairs<'a> = Vec<(&'a str, &'a str)>;
    /// The `(parameter, rule)` a case is refused with; `None` when taken.
    type Refused = Option<(&'static str, &'static str)>;

    fn query(pairs: &[(&str, &str)]) -> ListQuery {
        let mut q = ListQuery::default();
        for (k, v) in pairs {
            let v = Some((*v).to_owned());
            match *k {
                "limit" => q.limit = v,
                "after" => q.after = v,
                "status" => q.status = v,
                "conversation" => q.conversation = v,
                "since" => q.since = v,
                other => panic!("{other}"),
            }
        }
        q
    }

    /// One case: the query is refused naming `parameter` and `rule`, or
    /// (for `None`) taken.
    fn check(pairs: &[(&str, &str)], refused: Refused) {
        match (query(pairs).parse(), refused) {
            (Ok(_), None) => {}
            (Err(p), Some((parameter, rule))) => {
                assert_eq!(p.status(), StatusCode::BAD_REQUEST, "{pairs:?}");
                let json = p.to_json();
                assert_eq!(json["parameter"], parameter, "{pairs:?}: {json}");
                assert_eq!(json["rule"], rule, "{pairs:?}: {json}");
            }
            (got, want) => panic!("{pairs:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn every_parameter_is_checked_and_refusals_name_it_and_the_rule() {
        let first = ListQuery::default().parse().unwrap();
        let cursor = RunsCursor {
            started_ts: 5,
            run_id: "run_a".to_owned(),
        };
        let plain_next = first.next(&cursor);
        let done = query(&[("status", "completed")]).parse().unwrap();
        let done_next = done.next(&cursor);
        let long = "a".repeat(MAX_CURSOR_BYTES + 2);
        let cases: Vec<(Pairs<'_>, Refused)> = vec![
            (vec![], None),
            (vec![("limit", "1")], None),
            (vec![("limit", "1000")], None),
            (vec![("limit", "0")], Some(("limit", "runs.limit"))),
            (vec![("limit", "1001")], Some(("limit", "runs.limit"))),
            (vec![("limit", "-1")], Some(("limit", "runs.limit"))),
            (vec![("status", "running")], None),
            (vec![("status", "cancelled")], None),
            (vec![("status", "done")], Some(("status", "runs.status"))),
            (vec![("status", "")], Some(("status", "runs.status"))),
            (vec![("status", "Running")], Some(("status", "runs.status"))),
            (vec![("conversation", "run_a")], None),
            (
                vec![("conversation", "")],
                Some(("conversation", "runs.conversation")),
            ),
            (
                vec![("conversation", "a b")],
                Some(("conversation", "runs.conversation")),
            ),
            (vec![("since", "0")], None),
            (vec![("since", "1764936000000")], None),
            (vec![("since", "2026-12-05T12:00:00Z")], None),
            (vec![("since", "2026-12-05T12:00:00.5Z")], None),
            (vec![("since", "2024-02-29T00:00:00Z")], None),
            (
                vec![("since", "2025-02-29T00:00:00Z")],
                Some(("since", "runs.since")),
            ),
            (
                vec![("since", "2026-12-05T12:00:00+01:00")],
                Some(("since", "runs.since")),
            ),
            (vec![("since", "2026-12-05")], Some(("since", "runs.since"))),
            (
                vec![("since", "1969-12-31T23:59:59Z")],
                Some(("since", "runs.since")),
            ),
            (
                vec![("since", "2026-13-01T00:00:00Z")],
                Some(("since", "runs.since")),
            ),
            (
                vec![("since", "2026-12-05T24:00:00Z")],
                Some(("since", "runs.since")),
            ),
            (
                vec![("since", "2026-12-05T12:00:00.Z")],
                Some(("since", "runs.since")),
            ),
            (vec![("since", "")], Some(("since", "runs.since"))),
            (
                vec![("since", "99999999999999999999")],
                Some(("since", "runs.since")),
            ),
            (vec![("after", &plain_next)], None),
            (vec![("after", &done_next), ("status", "completed")], None),
            (
                vec![("after", &done_next)],
                Some(("after", "runs.cursor_filters")),
            ),
            (
                vec![("after", &done_next), ("status", "failed")],
                Some(("after", "runs.cursor_filters")),
            ),
            (
                vec![("after", &plain_next), ("since", "0")],
                Some(("after", "runs.cursor_filters")),
            ),
            (vec![("after", "zz")], Some(("after", "runs.after"))),
            (vec![("after", &long)], Some(("after", "runs.after"))),
        ];
        for (pairs, refused) in cases {
            check(&pairs, refused);
        }
    }

    #[test]
    fn since_is_the_journal_unit_and_both_forms_agree() {
        assert_eq!(since_micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(since_micros("1764936000000"), Some(1_764_936_000_000_000));
        assert_eq!(
            since_micros("2025-12-05T12:00:00Z"),
            since_micros("1764936000000")
        );
        assert_eq!(
            since_micros("2025-12-05T12:00:00.123456789Z"),
            Some(1_764_936_000_123_456)
        );
        assert_eq!(
            since_micros("2000-03-01T00:00:00Z"),
            Some(951_868_800_000_000)
        );
        // The same filters however `since` is written: one fingerprint.
        let a = query(&[("since", "1764936000000")]).parse().unwrap();
        let b = query(&[("since", "2025-12-05T12:00:00Z")]).parse().unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn a_cursor_round_trips_and_garbage_is_refused() {
        let c = RunsCursor {
            started_ts: 1_700_000_000_123,
            run_id: "run:with:colons".to_owned(),
        };
        let text = encode(&c, 42);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert_eq!(decode(&text), Some((c.clone(), 42)));
        // The earlier format: no fingerprint, read as made without filters.
        let old: String = "1700000000123:run:with:colons"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(decode(&old), Some((c, 0)));
        for bad in ["", "a", "zz", "6162", "3a61", "78787878"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
