#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `keel events`, `keel runs`, `keel verify`, `keel export`, `keel import`.

mod common;

use common::{Sandbox, example, keel, kind, text};
use keel_eventlog::{Event, Snapshot};
use keel_message::RunId;
use std::process::Stdio;
use std::sync::Arc;

fn run_json(sb: &Sandbox, name: &str) -> (String, Vec<String>) {
    let out = sb.run(&example(name), &["--json"]);
    let lines: Vec<String> = text(&out).0.lines().map(str::to_owned).collect();
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    (first["run_id"].as_str().unwrap().to_owned(), lines)
}

#[test]
fn events_prints_stored_lines_and_after_skips() {
    let sb = Sandbox::new();
    let (run_id, lines) = run_json(&sb, "weather_tools.json");
    let all = sb.ok(&["events", &run_id]);
    assert_eq!(all.lines().collect::<Vec<_>>(), lines);
    let after = sb.ok(&["events", &run_id, "--after", "5"]);
    assert_eq!(after.lines().collect::<Vec<_>>(), lines[5..].to_vec());
    assert!(after.lines().next().unwrap().contains(r#""seq":6,"#));
    let past = sb.ok(&["events", &run_id, "--after", "100000"]);
    assert!(past.is_empty());
    // --follow on a finished run prints everything and returns.
    let followed = sb.ok(&["events", &run_id, "--follow"]);
    assert_eq!(followed, all);
}

#[test]
fn events_of_an_unknown_run_is_exit_2() {
    let sb = Sandbox::new();
    run_json(&sb, "plain_answer.json");
    let out = keel()
        .args(["events", "run_nope"])
        .args(sb.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("unknown run run_nope"),
        "{}",
        text(&out).1
    );
}

#[test]
fn events_follow_tracks_a_live_run_to_its_end() {
    let sb = Sandbox::new();
    let scenario = sb.write(
        "slow.json",
        r#"{"run_id": "run_follow", "model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [[
              {"text": "a"}, {"delay_ms": 300}, {"text": "b"}, {"delay_ms": 300}, {"text": "c"},
              {"delay_ms": 300}, {"complete": {"finish": "stop"}}]]}}"#,
    );
    let mut child = std::process::Command::new(common::bin())
        .arg("run")
        .arg(&scenario)
        .args(sb.db_args())
        .arg("--json")
        .env_remove("KEEL_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the run to appear, then follow it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = keel()
            .args(["events", "run_follow"])
            .args(sb.db_args())
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let followed = sb.ok(&["events", "run_follow", "--follow"]);
    let mut live = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut live)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(followed, live);
    assert_eq!(kind(followed.lines().last().unwrap()), "run.completed");
}

#[test]
fn runs_lists_id_status_turns_events_and_duration() {
    let sb = Sandbox::new();
    let (weather, weather_lines) = run_json(&sb, "weather_tools.json");
    let (partial, partial_lines) = run_json(&sb, "partial_failure.json");
    let listing = sb.ok(&["runs"]);
    let rows: Vec<Vec<&str>> = listing
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{listing}");
    let weather_events = weather_lines.len().to_string();
    let partial_events = partial_lines.len().to_string();
    assert_eq!(
        rows[0][..6],
        [
            weather.as_str(),
            "completed",
            "3",
            "turns",
            &weather_events,
            "events"
        ]
    );
    assert_eq!(
        rows[1][..6],
        [
            partial.as_str(),
            "failed",
            "1",
            "turn",
            &partial_events,
            "events"
        ]
    );
    // A human-readable duration: ms or s.
    assert!(rows[0][6].ends_with('s'), "{listing}");
}

/// `keel runs` with the options of `GET /v1/runs`: the rows' ids.
fn listed(sb: &Sandbox, args: &[&str]) -> (Vec<String>, String) {
    let out = keel()
        .arg("runs")
        .args(args)
        .args(sb.db_args())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}: {stderr}");
    let ids = stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect();
    (ids, stderr)
}

#[test]
fn runs_filters_and_pages_as_the_run_list_does() {
    let sb = Sandbox::new();
    let (a, _) = run_json(&sb, "plain_answer.json");
    let (b, _) = run_json(&sb, "partial_failure.json");
    let (c, _) = run_json(&sb, "plain_answer.json");
    let all = listed(&sb, &[]).0;
    assert_eq!(all, [a.clone(), b.clone(), c.clone()]);
    assert_eq!(
        listed(&sb, &["--status", "failed"]).0,
        std::slice::from_ref(&b)
    );
    assert_eq!(
        listed(&sb, &["--status", "completed"]).0,
        [a.clone(), c.clone()]
    );
    assert_eq!(listed(&sb, &["--since", "1970-01-01T00:00:00Z"]).0, all);
    assert!(listed(&sb, &["--since", "99999999999999"]).0.is_empty());
    // Pages of one, resumed with the cursor printed on stderr.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["--limit", "1", "--status", "completed"];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor.as_str()]);
        }
        let (ids, stderr) = listed(&sb, &args);
        seen.extend(ids);
        match stderr.lines().find_map(|l| l.strip_prefix("next: ")) {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, [a.clone(), c]);
    // Refusals name the option and the rule, exit 2.
    let first = keel()
        .args(["runs", "--limit", "1", "--status", "completed"])
        .args(sb.db_args())
        .output()
        .unwrap();
    let cursor = text(&first)
        .1
        .trim()
        .strip_prefix("next: ")
        .unwrap()
        .to_owned();
    for (args, rule) in [
        (vec!["--status", "done"], "runs.status"),
        (vec!["--since", "yesterday"], "runs.since"),
        (vec!["--limit", "0"], "runs.limit"),
        (vec!["--after", "zz"], "runs.after"),
        (vec!["--after", cursor.as_str()], "runs.cursor_filters"),
    ] {
        let out = keel()
            .arg("runs")
            .args(&args)
            .args(sb.db_args())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out).1.contains(rule), "{args:?}: {}", text(&out).1);
    }
}

#[test]
fn verify_is_clean_after_runs_of_every_outcome() {
    let sb = Sandbox::new();
    run_json(&sb, "plain_answer.json");
    run_json(&sb, "failures.json");
    run_json(&sb, "partial_failure.json");
    let report = sb.ok(&["verify"]);
    assert!(
        report.contains("3 run(s): 3 ok, 0 incomplete, 0 violations"),
        "{report}"
    );
    assert_eq!(report.lines().filter(|l| l.starts_with("ok ")).count(), 3);
}

fn tamper(sb: &Sandbox, sql: &str) {
    let conn = rusqlite::Connection::open(sb.db()).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn verify_names_run_seq_and_rule_of_the_first_violation() {
    // A gap.
    let sb = Sandbox::new();
    let (run_id, _) = run_json(&sb, "plain_answer.json");
    tamper(&sb, "DELETE FROM events WHERE seq = 4");
    let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("run {run_id} seq 4: rule seq.contiguous")),
        "{stderr}"
    );

    // A line that is not canonical.
    let sb = Sandbox::new();
    let (run_id, _) = run_json(&sb, "plain_answer.json");
    tamper(
        &sb,
        "UPDATE events SET line = replace(line, '{\"kind\"', '{ \"kind\"') WHERE seq = 3",
    );
    let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("run {run_id} seq 3: rule event.canonical")),
        "{stderr}"
    );

    // A lifecycle violation: the run's terminal dropped, status says completed.
    let sb = Sandbox::new();
    let (run_id, lines) = run_json(&sb, "plain_answer.json");
    let last = lines.len();
    tamper(
        &sb,
        &format!(
            "DELETE FROM events WHERE seq = {last}; UPDATE runs SET last_seq = {};",
            last - 1
        ),
    );
    let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run {run_id} seq {}: rule lifecycle.closed",
            last - 1
        )),
        "{stderr}"
    );

    // An event of another run.
    let sb = Sandbox::new();
    let (run_id, _) = run_json(&sb, "plain_answer.json");
    tamper(
        &sb,
        "UPDATE events SET line = replace(line, run_id, 'run_other') WHERE seq = 2",
    );
    let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("run {run_id} seq 2: rule event.run_id")),
        "{stderr}"
    );
}

#[test]
fn export_import_export_is_byte_identical() {
    let a = Sandbox::new();
    let b = Sandbox::new();
    let (run_id, lines) = run_json(&a, "failures.json");
    let exported = a.ok(&["export", &run_id]);
    // Exactly the eventlog's snapshot format: the snapshot of the stored
    // events, its header saying where the lifecycle stands.
    let events: Vec<Arc<Event>> = lines
        .iter()
        .map(|l| Arc::new(Event::decode(l).unwrap()))
        .collect();
    let snapshot = Snapshot::from_events(RunId::parse(&run_id).unwrap(), events).unwrap();
    assert_eq!(exported, snapshot.to_jsonl());
    assert_eq!(Snapshot::from_jsonl(&exported).unwrap(), snapshot);
    let header: serde_json::Value = serde_json::from_str(exported.lines().next().unwrap()).unwrap();
    let last_ts = serde_json::from_str::<serde_json::Value>(lines.last().unwrap()).unwrap()["ts"]
        .as_u64()
        .unwrap();
    assert_eq!(
        exported.lines().next().unwrap(),
        format!(
            r#"{{"earliest_seq":1,"last_seq":{},"last_ts":{last_ts},"last_turn":{},"open_scopes":[],"run_ended":true,"run_id":"{run_id}","schema":"keel.events/1"}}"#,
            lines.len(),
            header["last_turn"]
        )
    );
    assert!(header["last_turn"].as_u64().unwrap() >= 1, "{header}");
    assert_eq!(exported.lines().skip(1).collect::<Vec<_>>(), lines);

    let file = a.path("run.jsonl");
    a.ok(&["export", &run_id, "-o", file.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
    let report = b.ok(&["import", file.to_str().unwrap()]);
    assert!(report.contains(&format!("{} new", lines.len())), "{report}");
    let again = b.ok(&["export", &run_id]);
    assert_eq!(again.as_bytes(), exported.as_bytes());
    // Importing the same file again stores nothing new.
    let report = b.ok(&["import", file.to_str().unwrap()]);
    assert!(report.contains("0 new"), "{report}");
    assert!(b.ok(&["verify"]).contains("1 ok"));
    assert_eq!(b.ok(&["runs"]).split_whitespace().nth(1), Some("completed"));
}

#[test]
fn import_refuses_gaps_duplicates_reordering_and_bad_headers_naming_the_line() {
    let a = Sandbox::new();
    let (run_id, _) = run_json(&a, "plain_answer.json");
    let exported = a.ok(&["export", &run_id]);
    let lines: Vec<&str> = exported.lines().collect();
    let header = lines[0];
    let body = &lines[1..];
    let set_last = |n: usize| {
        header.replace(
            &format!(r#""last_seq":{}"#, body.len()),
            &format!(r#""last_seq":{n}"#),
        )
    };
    let gap = {
        let mut l = vec![set_last(body.len() - 1)];
        l.extend(
            body.iter()
                .enumerate()
                .filter(|(i, _)| *i != 2)
                .map(|(_, s)| s.to_string()),
        );
        l
    };
    let duplicate = {
        let mut l = vec![set_last(body.len() + 1)];
        for (i, s) in body.iter().enumerate() {
            l.push(s.to_string());
            if i == 2 {
                l.push(s.to_string());
            }
        }
        l
    };
    let reordered = {
        let mut l = vec![header.to_owned()];
        let mut b: Vec<String> = body.iter().map(|s| s.to_string()).collect();
        b.swap(2, 3);
        l.extend(b);
        l
    };
    let b = Sandbox::new();
    for (name, file_lines, needle) in [
        ("gap", gap, ":4: seq 4 after 2: gap"),
        ("duplicate", duplicate, ":5: seq 3 after 3: duplicate"),
        ("reordered", reordered, ":4: seq 4 after 2: gap"),
    ] {
        let path = b.write(&format!("{name}.jsonl"), &(file_lines.join("\n") + "\n"));
        let out = keel()
            .arg("import")
            .arg(&path)
            .args(b.db_args())
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{name}.jsonl{needle}")),
            "{name}: {stderr}"
        );
    }
    // Headers: missing, wrong schema, last_seq that disagrees, the header
    // of exports before the snapshot format, a window, a header that does
    // not describe its events.
    let legacy = format!(
        r#"{{"last_seq":{},"run_id":"{run_id}","schema":"keel.events/1"}}"#,
        body.len()
    );
    let window = header.replace(r#""earliest_seq":1,"#, r#""earliest_seq":3,"#);
    let still_open = header.replace(r#""run_ended":true"#, r#""run_ended":false"#);
    for (name, text_, needle) in [
        (
            "noheader",
            body.join("\n"),
            ":1: snapshot header: unknown field",
        ),
        (
            "schema",
            format!(
                "{}\n{}",
                header.replace("keel.events/1", "keel.events/2"),
                body.join("\n")
            ),
            ":1: snapshot header: schema is not keel.events/1 (rule snapshot.header)",
        ),
        (
            "count",
            format!("{}\n{}", set_last(99), body.join("\n")),
            ":1: snapshot says last_seq 99",
        ),
        (
            "legacy",
            format!("{legacy}\n{}", body.join("\n")),
            ":1: the header of an older keel export (last_seq, run_id, schema)",
        ),
        (
            "window",
            format!("{window}\n{}", body[2..].join("\n")),
            ":1: the file holds seqs from 3, not the whole run",
        ),
        (
            "still_open",
            format!("{still_open}\n{}", body.join("\n")),
            ":1: the header does not describe the file's events (rule snapshot.consistent)",
        ),
    ] {
        let path = b.write(&format!("{name}.jsonl"), &text_);
        let out = keel()
            .arg("import")
            .arg(&path)
            .args(b.db_args())
            .output()
            .unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{name}.jsonl{needle}")),
            "{name}: {stderr}"
        );
    }
    let out = keel()
        .arg("import")
        .arg(b.path("missing.jsonl"))
        .args(b.db_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("missing.jsonl"));
    // Nothing was stored by any refused import: not even a database.
    assert!(!b.db().exists());
}

#[test]
fn import_refuses_a_conflict_with_stored_events() {
    let a = Sandbox::new();
    let scenario = a.write(
        "named.json",
        r#"{"run_id": "run_same", "model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [[{"text": "hello"}, {"complete": {"finish": "stop"}}]]}}"#,
    );
    let b = Sandbox::new();
    assert_eq!(a.run(&scenario, &[]).status.code(), Some(0));
    assert_eq!(b.run(&scenario, &[]).status.code(), Some(0));
    // Same run id, different timestamps: a conflict at seq 1.
    let file = a.path("same.jsonl");
    a.ok(&["export", "run_same", "-o", file.to_str().unwrap()]);
    let out = keel()
        .arg("import")
        .arg(&file)
        .args(b.db_args())
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("run run_same seq 1 is already stored with different bytes"),
        "{stderr}"
    );
}

/// The seq of the first stored line of `kind` in `lines`.
fn seq_of(lines: &[String], kind_: &str) -> usize {
    lines.iter().position(|l| kind(l) == kind_).unwrap() + 1
}

#[test]
fn verify_refuses_a_terminal_naming_another_identity_than_its_start() {
    // (what the tampering changes, in which event, the rule verify names)
    let cases = [
        (
            r#""tool":"get_weather""#,
            r#""tool":"get_time""#,
            "tool.completed",
            "lifecycle.same_identity",
        ),
        (
            r#""turn":1"#,
            r#""turn":2"#,
            "tool.completed",
            "lifecycle.terminal_without_start",
        ),
        (
            r#""operation_id":""#,
            r#""operation_id":"x"#,
            "model.completed",
            "lifecycle.terminal_without_start",
        ),
        (
            r#""turn":1"#,
            r#""turn":2"#,
            "model.completed",
            "lifecycle.terminal_without_start",
        ),
    ];
    for (from, to, kind_, rule) in cases {
        let sb = Sandbox::new();
        let (run_id, lines) = run_json(&sb, "weather_tools.json");
        let seq = seq_of(&lines, kind_);
        assert!(lines[seq - 1].contains(from), "{}", lines[seq - 1]);
        tamper(
            &sb,
            &format!("UPDATE events SET line = replace(line, '{from}', '{to}') WHERE seq = {seq}"),
        );
        let out = keel().arg("verify").args(sb.db_args()).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{kind_} {to}: {stderr}");
        assert!(
            stderr.contains(&format!("run {run_id} seq {seq}: rule {rule}: ")),
            "{kind_} {to}: {stderr}"
        );
        assert!(stderr.contains(&format!("(rule {rule})")), "{stderr}");
        if rule == "lifecycle.same_identity" {
            assert!(
                stderr.contains("started with tool get_weather, its terminal names get_time"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn import_refuses_a_terminal_naming_another_tool_than_its_start() {
    let a = Sandbox::new();
    let (run_id, lines) = run_json(&a, "weather_tools.json");
    let exported = a.ok(&["export", &run_id]);
    let seq = seq_of(&lines, "tool.completed");
    // The file's line: the header is line 1.
    let tampered: Vec<String> = exported
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == seq {
                l.replace(r#""tool":"get_weather""#, r#""tool":"get_time""#)
            } else {
                l.to_owned()
            }
        })
        .collect();
    let b = Sandbox::new();
    let path = b.write("tampered.jsonl", &(tampered.join("\n") + "\n"));
    let out = keel()
        .arg("import")
        .arg(&path)
        .args(b.db_args())
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("tampered.jsonl:{}: ", seq + 1)),
        "{stderr}"
    );
    assert!(
        stderr.contains("(rule lifecycle.same_identity)"),
        "{stderr}"
    );
    assert!(!b.db().exists(), "nothing was stored");
}

#[test]
fn import_input_is_bounded_and_utf8_and_nothing_is_stored() {
    let a = Sandbox::new();
    let (run_id, _) = run_json(&a, "failures.json");
    let file = a.path("run.jsonl");
    a.ok(&["export", &run_id, "-o", file.to_str().unwrap()]);
    let len = std::fs::metadata(&file).unwrap().len();
    let b = Sandbox::new();
    let import = |path: &std::path::Path, extra: &[&str]| {
        let out = keel()
            .arg("import")
            .arg(path)
            .args(extra)
            .args(b.db_args())
            .output()
            .unwrap();
        (out.status.code(), text(&out).1)
    };
    // One byte under the file's length: refused whole, naming the bound.
    let (code, stderr) = import(&file, &["--max-bytes", &(len - 1).to_string()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "longer than {} bytes (rule import.input_bytes",
            len - 1
        )),
        "{stderr}"
    );
    // An endless input stops at the bound instead of filling memory.
    let (code, stderr) = import(std::path::Path::new("/dev/zero"), &["--max-bytes", "4096"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("rule import.input_bytes"), "{stderr}");
    let latin1 = b.path("latin1.jsonl");
    std::fs::write(&latin1, b"{\"x\":\"caf\xe9\"}\n").unwrap();
    let (code, stderr) = import(&latin1, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("not UTF-8 at byte 9 (rule import.utf8)"),
        "{stderr}"
    );
    assert!(!b.db().exists(), "a refused import created the journal");
    // At exactly its length it is accepted.
    let (code, stderr) = import(&file, &["--max-bytes", &len.to_string()]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_db_that_is_not_sqlite_is_bad_input() {
    let sb = Sandbox::new();
    std::fs::write(sb.db(), "not a database, just text\n".repeat(400)).unwrap();
    for cmd in [&["runs"][..], &["verify"], &["events", "run_x"]] {
        let out = keel().args(cmd).args(sb.db_args()).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {stderr}");
        assert!(
            stderr.contains("is not a SQLite database (rule journal.sqlite_file)"),
            "{cmd:?}: {stderr}"
        );
    }
    let before = std::fs::read(sb.db()).unwrap();
    let scenario = sb.write(
        "s.json",
        r#"{"model": "m", "messages": [{"role": "user", "text": "hi"}],
            "provider": {"type": "scripted", "calls": [[{"text": "hello"}, {"complete": {"finish": "stop"}}]]}}"#,
    );
    let out = sb.run(&scenario, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
    assert_eq!(
        std::fs::read(sb.db()).unwrap(),
        before,
        "the file was modified"
    );
}

/// `exported` with the completion on the file's line `line + 1` holding
/// `metadata` (JSON), re-encoded as canonical JSON.
fn with_metadata(exported: &str, line: usize, metadata: &str) -> String {
    let lines: Vec<String> = exported
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i != line {
                return l.to_owned();
            }
            let mut event: serde_json::Value = serde_json::from_str(l).unwrap();
            event["payload"]["metadata"] = serde_json::from_str(metadata).unwrap();
            keel_message::CanonicalJson::from_value(&event)
                .unwrap()
                .as_str()
                .to_owned()
        })
        .collect();
    lines.join("\n") + "\n"
}

/// A tampered export: a credential placed in a completion's metadata,
/// the line kept canonical and the run lifecycle-valid. Import screens
/// it as the live stream does: refused naming the path, the value never
/// echoed, nothing stored.
#[test]
fn import_refuses_a_credential_in_metadata_and_stores_nothing() {
    let a = Sandbox::new();
    let (run_id, lines) = run_json(&a, "weather_tools.json");
    let exported = a.ok(&["export", &run_id]);
    let seq = seq_of(&lines, "model.completed");
    let secret = ["Bearer ", "abcDEF123456", "ghiJKL789"].concat();
    let metadata = format!(r#"{{"openai":{{"authorization":"{secret}"}}}}"#);
    let tampered = with_metadata(&exported, seq, &metadata);
    // Into a new journal, and into one that already holds a run.
    for existing in [false, true] {
        let b = Sandbox::new();
        let before = existing.then(|| {
            run_json(&b, "plain_answer.json");
            b.ok(&["runs"])
        });
        let path = b.write("tampered.jsonl", &tampered);
        let out = keel()
            .arg("import")
            .arg(&path)
            .args(["--allow-metadata", "openai", "--allow-metadata", "scripted"])
            .args(b.db_args())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "tampered.jsonl:{}: model.completed metadata $.openai.authorization: ",
                seq + 1
            )),
            "{stderr}"
        );
        assert!(stderr.contains("(rule metadata.no_secrets)"), "{stderr}");
        for shown in [&stdout, &stderr] {
            assert!(!shown.contains("abcDEF123456"), "echoed: {shown}");
        }
        match before {
            None => assert!(!b.db().exists(), "nothing was stored"),
            Some(before) => {
                assert_eq!(b.ok(&["runs"]), before, "nothing was stored");
                let out = keel()
                    .args(["events", &run_id])
                    .args(b.db_args())
                    .output()
                    .unwrap();
                assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
            }
        }
    }
}

/// The importing side's allowlist applies: a namespace it does not allow
/// is refused whole (the import cannot drop it and keep the bytes), one
/// it allows is imported.
#[test]
fn import_applies_the_importers_metadata_allowlist() {
    let a = Sandbox::new();
    let (run_id, lines) = run_json(&a, "weather_tools.json");
    let exported = a.ok(&["export", &run_id]);
    let seq = seq_of(&lines, "model.completed");
    let b = Sandbox::new();
    run_json(&b, "plain_answer.json");
    let before = b.ok(&["runs"]);
    let metadata = r#"{"openai":{"system_fingerprint":"fp_44709d6fcb"}}"#;
    let path = b.write("run.jsonl", &with_metadata(&exported, seq, metadata));
    let import = |allow: &[&str]| {
        let mut cmd = keel();
        // The scenario's own completions carry the `scripted` namespace.
        cmd.arg("import").arg(&path).args(b.db_args());
        cmd.args(["--allow-metadata", "scripted"]);
        for ns in allow {
            cmd.args(["--allow-metadata", ns]);
        }
        let out = cmd.output().unwrap();
        (out.status.code(), text(&out).1)
    };
    for allow in [&[][..], &["anthropic"][..]] {
        let (code, stderr) = import(allow);
        assert_eq!(code, Some(2), "{allow:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "run.jsonl:{}: seq {seq}: model.completed metadata namespace $.openai is not allowed here (rule import.metadata_allowlist",
                seq + 1
            )),
            "{stderr}"
        );
        assert_eq!(b.ok(&["runs"]), before, "nothing was stored");
    }
    let (code, stderr) = import(&["Bad-Name"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--allow-metadata: namespace name"),
        "{stderr}"
    );
    let (code, stderr) = import(&["openai"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(b.ok(&["export", &run_id]).contains("fp_44709d6fcb"));
}
