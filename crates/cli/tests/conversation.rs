#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel run --continue RUN_ID --message TEXT`: a three-run conversation
//! whose third run starts from every earlier message, text, call and
//! result, in order; `keel runs --conversation` shows the chain; runs that
//! are not completed cannot be continued.

mod common;

use common::{Sandbox, text};
use serde_json::Value;

/// A scenario whose model calls `get_weather` for `city`, then answers.
fn weather_scenario(run_id: &str, city: &str, answer: &str) -> String {
    common::weather_scenario(run_id, city, "unused when continuing", answer)
}

/// The history `run_id` starts from: its own `run.input` messages after
/// the history it inherits by reference, rebuilt from the journal.
fn inputs(sb: &Sandbox, run_id: &str) -> Vec<Value> {
    let own = common::stored_inputs(&sb.db(), run_id);
    let Some(inherited) = own.first().and_then(|p| p["history"]["run_id"].as_str()) else {
        return own.iter().map(|p| p["message"].clone()).collect();
    };
    let mut history = common::rebuilt_history(&sb.db(), inherited);
    history.extend(own[1..].iter().map(|p| p["message"].clone()));
    history
}

#[test]
fn a_three_run_conversation_continues_from_the_log() {
    let sb = Sandbox::new();
    let first = sb.write(
        "one.json",
        &weather_scenario("conv_1", "Oslo", "Oslo: 3 °C."),
    );
    let out = sb.run(&first, &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    for (n, city, question) in [(2, "Bergen", "And Bergen?"), (3, "Tromsø", "And Tromsø?")] {
        let file = sb.write(
            &format!("{n}.json"),
            &weather_scenario(&format!("conv_{n}"), city, &format!("{city}: 3 °C.")),
        );
        let previous = format!("conv_{}", n - 1);
        let out = sb.run(&file, &["--continue", &previous, "--message", question]);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    }
    let third = inputs(&sb, "conv_3");
    // The third run stores the second's history by reference and its own
    // message in full.
    let own = common::stored_inputs(&sb.db(), "conv_3");
    assert_eq!(own.len(), 2, "{own:?}");
    assert_eq!(own[0]["history"]["run_id"], "conv_2");
    assert_eq!(own[1]["message"]["parts"][0]["text"], "And Tromsø?");
    assert_eq!(
        common::rebuilt_history(&sb.db(), "conv_3")[..third.len()],
        third[..]
    );
    let shape: Vec<(String, String)> = third
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap().to_owned();
            let part = &m["parts"][0];
            let what = part["text"]
                .as_str()
                .or(part["content"].as_str())
                .or(part["name"].as_str())
                .unwrap_or_default()
                .to_owned();
            (role, what)
        })
        .collect();
    let expected: Vec<(&str, &str)> = vec![
        ("user", "unused when continuing"),
        ("assistant", "get_weather"),
        ("tool", r#"{"city":"Oslo","temp_c":3}"#),
        ("assistant", "Oslo: 3 °C."),
        ("user", "And Bergen?"),
        ("assistant", "get_weather"),
        ("tool", r#"{"city":"Bergen","temp_c":3}"#),
        ("assistant", "Bergen: 3 °C."),
        ("user", "And Tromsø?"),
    ];
    let got: Vec<(&str, &str)> = shape
        .iter()
        .map(|(r, w)| (r.as_str(), w.as_str()))
        .collect();
    assert_eq!(got, expected);
    let ids: std::collections::HashSet<&str> =
        third.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), third.len(), "message ids repeat: {ids:?}");
    let chain = sb.ok(&["runs", "--conversation", "conv_2"]);
    let order: Vec<&str> = chain
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(order, ["conv_1", "conv_2", "conv_3"], "{chain}");
    assert!(chain.contains("continues conv_2"), "{chain}");
    let verify = sb.ok(&["verify"]);
    assert!(
        verify.contains("3 ok, 0 incomplete, 0 violations"),
        "{verify}"
    );
}

#[test]
fn only_a_completed_run_can_be_continued() {
    let sb = Sandbox::new();
    let failing = serde_json::json!({
        "run_id": "conv_bad",
        "model": "scripted-1",
        "messages": [{"role": "user", "text": "hi"}],
        "limits": {"retry": {"max_attempts": 1}},
        "provider": {"type": "scripted", "calls": [
            [{"fail": {"kind": "auth", "message": "no", "retryable": false}}]
        ]}
    });
    let file = sb.write("bad.json", &failing.to_string());
    assert_eq!(sb.run(&file, &[]).status.code(), Some(1));
    let next = sb.write("next.json", &weather_scenario("conv_next", "Oslo", "ok"));
    for (previous, needle) in [
        ("conv_bad", "rule run.continuable"),
        ("conv_missing", "rule run.known"),
    ] {
        let out = sb.run(&next, &["--continue", previous, "--message", "again"]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
    let out = sb.run(&next, &["--continue", "conv_bad"]);
    assert_eq!(out.status.code(), Some(2), "--continue needs --message");
}

/// A scenario that answers `ok`, with `messages` as given.
fn answering(run_id: &str, messages: Value) -> String {
    serde_json::json!({
        "run_id": run_id,
        "model": "scripted-1",
        "messages": messages,
        "provider": {"type": "scripted", "calls": [[{"text": "ok"}, {"complete": {"finish": "stop"}}]]}
    })
    .to_string()
}

/// Bytes of the lines stored for `run_id` in `db`.
fn stored_bytes(db: &std::path::Path, run_id: &str) -> usize {
    let reader = keel_observers::JournalReader::open(db).unwrap();
    let mut bytes = 0;
    let mut after = 0;
    loop {
        let page = reader.events_after(run_id, after, 64).unwrap();
        if page.is_empty() {
            return bytes;
        }
        after += page.len() as u64;
        bytes += page.iter().map(String::len).sum::<usize>();
    }
}

/// Issue #32, R2, on a real `keel serve`: a history of about 7 MB built
/// by 900 KB POSTs, then forked by a POST of a few hundred bytes: each run
/// stores about what its POST carried (the old form copied the whole
/// history into every continuation: the fork stored 7 MB). The fork's
/// history still rebuilds whole from the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_big_history_stores_about_what_its_post_carried() {
    use common::daemon::{Serve, client, post, wait_status};
    let d = Serve::new().start();
    let c = client();
    let big = |n: usize| serde_json::json!([{"role": "user", "text": format!("{n} {}", "x".repeat(900_000))}]);
    let body = answering("big_0", big(0));
    assert_eq!(post(&c, &d, "/v1/runs", body).await.status(), 201);
    wait_status(&c, &d, "big_0", "completed").await;
    for n in 1..8 {
        let body = answering(&format!("big_{n}"), big(n));
        let posted = body.len();
        let r = post(&c, &d, &format!("/v1/runs/big_{}/messages", n - 1), body).await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
        wait_status(&c, &d, &format!("big_{n}"), "completed").await;
        let stored = stored_bytes(&d.db, &format!("big_{n}"));
        assert!(
            stored < posted + 4096,
            "big_{n}: posted {posted}, stored {stored}"
        );
    }
    let fork = answering(
        "fork",
        serde_json::json!([{"role": "user", "text": "And now?"}]),
    );
    let posted = fork.len();
    let r = post(&c, &d, "/v1/runs/big_7/messages", fork).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    wait_status(&c, &d, "fork", "completed").await;
    let stored = stored_bytes(&d.db, "fork");
    assert!(stored < 4096, "a POST of {posted} bytes stored {stored}");
    let history = common::rebuilt_history(&d.db, "fork");
    let bytes: usize = history.iter().map(|m| m.to_string().len()).sum();
    assert_eq!(
        history.len(),
        8 * 2 + 2,
        "eight questions and answers, then the fork's"
    );
    assert!(bytes > 7 * 900_000, "the fork's history is {bytes} bytes");
}

/// The bytes a POST may cause to be stored are bounded: 4,000 small
/// messages whose ids are re-minted under a long run id store more than
/// `MAX_STORED_INPUT_BYTES` from a body of half a MiB; refused with a
/// typed 413 naming the bound and the size, and no run is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_would_store_more_than_the_bound_is_refused() {
    use common::daemon::{Serve, client, get, post, wait_status};
    let d = Serve::new().start();
    let c = client();
    let first = answering(
        "bound_0",
        serde_json::json!([{"role": "user", "text": "hi"}]),
    );
    assert_eq!(post(&c, &d, "/v1/runs", first).await.status(), 201);
    wait_status(&c, &d, "bound_0", "completed").await;
    let long_id = format!("r{}", "x".repeat(120));
    let small: Vec<Value> = (0..4000)
        .map(|_| serde_json::json!({"role": "user", "text": "y".repeat(100)}))
        .collect();
    let body = answering(&long_id, Value::Array(small));
    assert!(body.len() < 1 << 20, "under the body bound: {}", body.len());
    let r = post(&c, &d, "/v1/runs/bound_0/messages", body).await;
    assert_eq!(r.status(), 413);
    let problem: Value = r.json().await.unwrap();
    assert_eq!(
        problem["type"], "urn:keel:problem:input-too-large",
        "{problem}"
    );
    assert_eq!(
        problem["max_bytes"],
        keel_observers::conversation::MAX_STORED_INPUT_BYTES
    );
    assert!(problem["bytes"].as_u64().unwrap() > 1 << 20, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("rule limits.stored_input_bytes")
    );
    let r = get(&c, &d, &format!("/v1/runs/{long_id}")).await;
    assert_eq!(r.status(), 404, "nothing was started");
}

/// `keel export` of a continued run carries the runs it references, so
/// the file is self-contained: it imports into an empty journal and
/// exports again byte for byte. A file whose reference dangles (the
/// referenced runs cut off) or whose referenced run was altered is
/// refused whole, naming the rule, and nothing is stored.
#[test]
fn export_of_a_continued_run_is_self_contained_and_import_checks_it() {
    let sb = Sandbox::new();
    let first = sb.write(
        "one.json",
        &weather_scenario("exp_1", "Oslo", "Oslo: 3 °C."),
    );
    assert_eq!(sb.run(&first, &[]).status.code(), Some(0));
    for n in [2, 3] {
        let file = sb.write(
            &format!("{n}.json"),
            &weather_scenario(&format!("exp_{n}"), "Bergen", "ok"),
        );
        let previous = format!("exp_{}", n - 1);
        let out = sb.run(&file, &["--continue", &previous, "--message", "again?"]);
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    }
    let exported = sb.ok(&["export", "exp_3"]);
    assert_eq!(
        exported
            .lines()
            .filter(|l| l.contains(r#""schema":"keel.events/1""#))
            .count(),
        3
    );
    let file = sb.write("exp_3.jsonl", &exported);
    let other = Sandbox::new();
    let out = common::keel()
        .args(["import", file.to_str().unwrap()])
        .args(other.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(
        other.ok(&["export", "exp_3"]),
        exported,
        "byte-identical round trip"
    );
    assert_eq!(
        common::rebuilt_history(&other.db(), "exp_3"),
        common::rebuilt_history(&sb.db(), "exp_3")
    );

    let refused = |name: &str, text_of_file: &str, rule: &str| {
        let file = sb.write(name, text_of_file);
        let empty = Sandbox::new();
        let out = common::keel()
            .args(["import", file.to_str().unwrap()])
            .args(empty.db_args())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stdout}\n{stderr}");
        assert!(stderr.contains(rule), "{name}: {stderr}");
        let runs = common::keel()
            .args(["runs"])
            .args(empty.db_args())
            .output()
            .unwrap();
        assert!(
            !text(&runs).0.contains("exp_"),
            "{name}: something was imported"
        );
    };
    // Only the last run: its reference dangles.
    let starts: Vec<usize> = exported
        .match_indices(r#"{"earliest_seq""#)
        .map(|(i, _)| i)
        .collect();
    refused(
        "dangling.jsonl",
        &exported[starts[2]..],
        "rule history.reference_known",
    );
    // The first run's answer altered: its digest no longer matches.
    let altered = exported.replacen("Oslo: 3 °C.", "Oslo: 9 °C.", 1);
    assert_ne!(altered, exported);
    refused("altered.jsonl", &altered, "rule history.reference_digest");
}

/// Runs stored before references (each continuation repeating its whole
/// input: the fixture is what keel wrote then) import, rebuild, and can
/// be continued; the continuation references the old run.
#[test]
fn old_logs_that_repeat_their_input_still_rebuild_and_continue() {
    let sb = Sandbox::new();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../eventlog/tests/fixtures/old_form");
    for run in ["old_1", "old_2"] {
        let out = common::keel()
            .arg("import")
            .arg(fixtures.join(format!("{run}.jsonl")))
            .args(sb.db_args())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    }
    let old = common::rebuilt_history(&sb.db(), "old_2");
    assert_eq!(
        common::stored_inputs(&sb.db(), "old_2").len(),
        old.len() - 3,
        "the old form repeats its input"
    );
    let next = sb.write("3.json", &weather_scenario("new_3", "Tromsø", "ok"));
    let out = sb.run(&next, &["--continue", "old_2", "--message", "And Tromsø?"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let own = common::stored_inputs(&sb.db(), "new_3");
    assert_eq!(own[0]["history"]["run_id"], "old_2");
    assert_eq!(own.len(), 2);
    let rebuilt = common::rebuilt_history(&sb.db(), "new_3");
    assert_eq!(rebuilt[..old.len()], old[..]);
}
