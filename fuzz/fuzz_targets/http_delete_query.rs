//! Fuzzes what `keel serve` reads from an untrusted client on the deletion
//! routes: `DELETE /v1/runs/{id}` (`id`, `conversation`, `who`) through
//! `DeleteQuery::parse` and `POST /v1/prune` (`older_than`, `who`) through
//! `PruneQuery::parse` (the functions the handlers call).
//!
//! Properties:
//! - never panics; a refusal is a 400 `invalid-deletion` problem naming
//!   one of the parameters and a `deletion.*` or `prune.*` rule;
//! - the verdict matches an independent reading: a run id; `conversation`
//!   absent, `true` or `false`; `who` absent or 1 to 256 bytes without a
//!   control character (a credential-shaped one may be refused too);
//!   `older_than` 1 to 12 digits and one unit `s`/`m`/`h`/`d`, from 1 s to
//!   36500 d; an accepted prune's cutoff is `now - age` (saturating);
//! - a refused `who` is never echoed in the problem.
#![no_main]

use keel_message::RunId;
use keel_observers::deletion::DeletionTarget;
use keel_serve::delete::{DEFAULT_WHO, DeleteQuery, PruneQuery};
use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const PARAMETERS: &[&str] = &["id", "conversation", "who", "older_than"];

/// The independent reading of `older_than`, in ms.
fn age_ms(text: &str) -> Option<u64> {
    let unit = match text.as_bytes().last()? {
        b's' => 1_000,
        b'm' => 60_000,
        b'h' => 3_600_000,
        b'd' => 86_400_000,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || digits.len() > 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = digits.parse::<u64>().ok()?.checked_mul(unit)?;
    (1_000..=36_500 * 86_400_000).contains(&ms).then_some(ms)
}

/// Whether `who` may be accepted (a credential-shaped text is refused too).
fn who_plausible(who: Option<&str>) -> bool {
    who.is_none_or(|w| !w.is_empty() && w.len() <= 256 && !w.chars().any(char::is_control))
}

fn check_problem(problem: &keel_serve::Problem, who: Option<&str>) {
    assert_eq!(problem.status().as_u16(), 400);
    let json = problem.to_json();
    assert_eq!(json["type"], "urn:keel:problem:invalid-deletion", "{json}");
    let parameter = json["parameter"].as_str().unwrap();
    assert!(PARAMETERS.contains(&parameter), "{json}");
    let rule = json["rule"].as_str().unwrap();
    assert!(rule.starts_with("deletion.") || rule.starts_with("prune."), "{json}");
    if parameter == "who"
        && let Some(who) = who.filter(|w| w.len() >= 8)
    {
        assert!(!json.to_string().contains(who), "{json}");
    }
}

fn check_delete(u: &mut Unstructured<'_>) -> Result<()> {
    let id = String::arbitrary(u)?;
    let query = DeleteQuery {
        conversation: Option::<String>::arbitrary(u)?,
        who: Option::<String>::arbitrary(u)?,
    };
    let conversation = match query.conversation.as_deref() {
        None | Some("false") => Some(false),
        Some("true") => Some(true),
        Some(_) => None,
    };
    match query.parse(&id) {
        Ok(request) => {
            let run_id = RunId::parse(&id).expect("accepted a bad run id");
            let want = if conversation == Some(true) {
                DeletionTarget::Conversation(run_id)
            } else {
                assert_eq!(conversation, Some(false), "{query:?}");
                DeletionTarget::Run(run_id)
            };
            assert_eq!(request.target(), &want);
            assert!(who_plausible(query.who.as_deref()), "{query:?}");
            let who = query.who.as_deref().unwrap_or(DEFAULT_WHO);
            assert_eq!(request.who().as_str(), who);
        }
        Err(problem) => {
            check_problem(&problem, query.who.as_deref());
            let plausible = RunId::parse(&id).is_ok()
                && conversation.is_some()
                && who_plausible(query.who.as_deref());
            if plausible {
                assert_eq!(problem.to_json()["parameter"], "who", "{query:?}");
            }
        }
    }
    Ok(())
}

fn check_prune(u: &mut Unstructured<'_>) -> Result<()> {
    let query = PruneQuery {
        older_than: Option::<String>::arbitrary(u)?,
        who: Option::<String>::arbitrary(u)?,
    };
    let now = u64::arbitrary(u)?;
    let age = query.older_than.as_deref().and_then(age_ms);
    match query.parse(now) {
        Ok(request) => {
            let age = age.expect("accepted a bad older_than");
            assert_eq!(request.target(), &DeletionTarget::OlderThan(now.saturating_sub(age)));
            assert!(who_plausible(query.who.as_deref()), "{query:?}");
        }
        Err(problem) => {
            check_problem(&problem, query.who.as_deref());
            if age.is_some() {
                assert_eq!(problem.to_json()["parameter"], "who", "{query:?}");
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = if bool::arbitrary(&mut u).unwrap_or(false) {
        check_prune(&mut u)
    } else {
        check_delete(&mut u)
    };
});
