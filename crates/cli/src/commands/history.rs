//! The read side: `keel events`, `keel runs`, `keel verify`.

use crate::args::{DbArgs, EventsArgs, RunsArgs};
use crate::error::{CliError, EXIT_FAILED, EXIT_OK, write_error};
use keel_eventlog::Event;
use keel_eventlog::links::{LinkCheck, LinkReport};
use keel_observers::conversation::{self, Origin};
use keel_observers::{
    ListedRun, RunStatus, RunSummary, RunsQuery, StoreReader, StoredRun, is_last_page,
};
use keel_serve::run_list::{ListQuery, MAX_PAGE_RUNS};
use keel_testkit::{Verdict, verify_run};
use std::io::{BufWriter, Write};
use std::time::Duration;

/// Lines read from the journal per query (a page also ends at
/// `keel_observers::PAGE_BYTES`).
pub const PAGE: usize = 1024;

/// How often `keel events --follow` polls the journal.
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Every stored line of `run_id` after `after`, in order.
pub fn all_lines(reader: &StoreReader, run_id: &str, after: u64) -> Result<Vec<String>, CliError> {
    Ok(reader.all_lines_after(run_id, after)?)
}

fn known_run(reader: &StoreReader, run_id: &str) -> Result<RunSummary, CliError> {
    reader.run_status(run_id)?.ok_or_else(|| {
        CliError::bad_input(format!(
            "unknown run {run_id} in {} (see `keel runs`)",
            reader.location()
        ))
    })
}

/// `keel events RUN_ID [--after N] [--follow]`.
pub fn events(args: EventsArgs) -> Result<i32, CliError> {
    let reader = StoreReader::open(&args.db.db)?;
    let mut status = known_run(&reader, &args.run_id)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut cursor = args.after;
    loop {
        // `status` was read before these pages, so once the run is over
        // and the cursor reaches its last_seq, everything was printed.
        loop {
            let page = reader.events_after(&args.run_id, cursor, PAGE)?;
            for line in &page {
                out.write_all(line.as_bytes()).map_err(write_error)?;
                out.write_all(b"\n").map_err(write_error)?;
            }
            cursor = keel_observers::journal::page_end(cursor, &page);
            if is_last_page(&page, PAGE) {
                break;
            }
        }
        out.flush().map_err(write_error)?;
        let done = status.status != RunStatus::Running && cursor >= status.last_seq;
        if !args.follow || done {
            return Ok(EXIT_OK);
        }
        std::thread::sleep(FOLLOW_POLL);
        status = known_run(&reader, &args.run_id)?;
    }
}

/// `keel runs`: the stored runs in the list's order, read a page at a
/// time from the journal's index (`StoreReader::runs_page`, as
/// `GET /v1/runs`: the same filters, limits and cursors), or with
/// `--conversation` one conversation's chain, first to last.
pub fn runs(args: RunsArgs) -> Result<i32, CliError> {
    let reader = StoreReader::open(&args.db.db)?;
    if let Some(id) = &args.tree {
        return super::tree::print(&reader, id);
    }
    if let Some(id) = &args.conversation {
        return conversation_chain(&reader, id);
    }
    let limited = args.limit.is_some();
    let page = ListQuery {
        limit: args.limit.clone(),
        after: args.after,
        status: args.status,
        conversation: None,
        since: args.since,
    }
    .parse()
    .map_err(|p| CliError::bad_input(problem_text(&p)))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut query = page.query().clone();
    if !limited {
        query.limit = MAX_PAGE_RUNS;
    }
    loop {
        let listed = reader.runs_page(&query)?;
        let width = listed
            .runs
            .iter()
            .map(|r| r.summary.run_id.as_str().len())
            .max()
            .unwrap_or(0);
        for run in &listed.runs {
            let origin = conversation::origin(&reader, run.summary.run_id.as_str())?;
            print_run(&mut out, &run.summary, run.totals.turns, &origin, width)?;
        }
        match listed.next {
            Some(next) if limited => {
                out.flush().map_err(write_error)?;
                eprintln!("next: {}", page.next(&next));
                break;
            }
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}

/// A refused `keel runs` parameter, as the problem's detail naming the
/// option and the rule.
fn problem_text(p: &keel_serve::problem::Problem) -> String {
    let json = p.to_json();
    format!(
        "--{}: {} (rule {})",
        json["parameter"].as_str().unwrap_or_default(),
        json["detail"].as_str().unwrap_or_default(),
        json["rule"].as_str().unwrap_or_default()
    )
}

/// `keel runs --conversation RUN_ID`: the chain of `id`'s conversation,
/// from the conversation's runs alone (the store's conversation index, a
/// page at a time: `RunsQuery::conversation`), never every stored run.
fn conversation_chain(reader: &StoreReader, id: &str) -> Result<i32, CliError> {
    known_run(reader, id)?;
    let members = conversation_runs(reader, id)?;
    let mut continues: Vec<Option<String>> = Vec::with_capacity(members.len());
    let mut origins: Vec<Origin> = Vec::with_capacity(members.len());
    for run in &members {
        let origin = conversation::origin(reader, run.summary.run_id.as_str())?;
        continues.push(match &origin {
            Origin::Continues(p) => Some(p.as_str().to_owned()),
            _ => None,
        });
        origins.push(origin);
    }
    let summaries: Vec<&RunSummary> = members.iter().map(|r| &r.summary).collect();
    let shown = chain(&summaries, &continues, id);
    let width = shown
        .iter()
        .map(|&i| summaries[i].run_id.as_str().len())
        .max()
        .unwrap_or(0);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for i in shown {
        let run = &members[i];
        print_run(&mut out, &run.summary, run.totals.turns, &origins[i], width)?;
    }
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}

/// Every run of `id`'s conversation (the runs whose `continues` chain has
/// its root), in the list's order, read a page at a time.
fn conversation_runs(reader: &StoreReader, id: &str) -> Result<Vec<ListedRun>, CliError> {
    let mut query = RunsQuery::first(MAX_PAGE_RUNS);
    query.conversation = Some(id.to_owned());
    let mut members = Vec::new();
    loop {
        let page = reader.runs_page(&query)?;
        members.extend(page.runs);
        match page.next {
            Some(next) => query.after = Some(next),
            None => return Ok(members),
        }
    }
}

/// One line of `keel runs`.
fn print_run(
    out: &mut impl Write,
    run: &RunSummary,
    turns: u64,
    origin: &Origin,
    width: usize,
) -> Result<(), CliError> {
    let duration = Duration::from_micros(run.updated_ts.saturating_sub(run.started_ts));
    let follows = match origin {
        Origin::Continues(p) => format!("  continues {p}"),
        Origin::Fork(f) => format!("  forked from {} at {}", f.run_id, f.seq),
        Origin::SubRun(l) => format!("  sub-run of {} (call {})", l.run_id, l.call_id),
        Origin::Root => String::new(),
    };
    writeln!(
        out,
        "{:<width$}  {:<9}  {:>3} {}  {:>5} {}  {}{follows}",
        run.run_id,
        run.status.as_str(),
        turns,
        if turns == 1 { "turn " } else { "turns" },
        run.last_seq,
        if run.last_seq == 1 {
            "event "
        } else {
            "events"
        },
        crate::time::human(duration),
    )
    .map_err(write_error)
}

/// The indices of `id`'s conversation, first to last: back through the
/// runs it continues, then forward through the runs continuing it (the
/// first follow-up, when a run was continued more than once).
fn chain(all: &[&RunSummary], continues: &[Option<String>], id: &str) -> Vec<usize> {
    let index = |id: &str| all.iter().position(|r| r.run_id.as_str() == id);
    let mut back = Vec::new();
    let mut at = index(id);
    while let Some(i) = at {
        if back.contains(&i) {
            break;
        }
        back.push(i);
        at = continues[i].as_deref().and_then(index);
    }
    back.reverse();
    let mut last = back.last().copied();
    while let Some(l) = last {
        let next =
            (0..all.len()).find(|&j| continues[j].as_deref() == Some(all[l].run_id.as_str()));
        match next {
            Some(j) if !back.contains(&j) => {
                back.push(j);
                last = Some(j);
            }
            _ => break,
        }
    }
    back
}

/// `keel verify`: each run's own rules, then the links between runs
/// (`keel_eventlog::links`): a violation of either exits 1 naming it.
pub fn verify(args: DbArgs) -> Result<i32, CliError> {
    let reader = StoreReader::open(&args.db)?;
    let runs = reader.runs()?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (mut ok, mut incomplete) = (0usize, 0usize);
    let mut links = LinkCheck::new();
    for run in &runs {
        let lines = all_lines(&reader, run.run_id.as_str(), 0)?;
        let stored = StoredRun::new(run.last_seq, run.status);
        match verify_run(&run.run_id, stored, &lines) {
            Ok(Verdict::Ok) => {
                ok += 1;
                writeln!(
                    out,
                    "ok          {}  {} events  {}",
                    run.run_id, run.last_seq, run.status
                )
                .map_err(write_error)?;
            }
            Ok(Verdict::Incomplete { open }) => {
                incomplete += 1;
                writeln!(
                    out,
                    "incomplete  {}  {} events  running, {open} scope(s) open (still being written, or its writer stopped)",
                    run.run_id, run.last_seq
                )
                .map_err(write_error)?;
            }
            Err(v) => {
                out.flush().map_err(write_error)?;
                eprintln!("keel verify: {v}");
                return Ok(EXIT_FAILED);
            }
        }
        push_links(&mut links, &lines);
    }
    // A link to a deleted run is accepted when its tombstone names it.
    let tombstones = reader.tombstones()?;
    for t in &tombstones {
        links.tombstone(t.run_id().clone());
    }
    let report = match links.finish() {
        Ok(report) => report,
        Err(v) => {
            out.flush().map_err(write_error)?;
            eprintln!("keel verify: {v}");
            return Ok(EXIT_FAILED);
        }
    };
    writeln!(
        out,
        "verify: {} run(s): {ok} ok, {incomplete} incomplete, 0 violations{}{} ({})",
        runs.len(),
        link_summary(&report),
        deleted_summary(tombstones.len(), &report),
        args.db
    )
    .map_err(write_error)?;
    out.flush().map_err(write_error)?;
    Ok(EXIT_OK)
}

/// Feeds a verified run's lines to the link check (they decode: the
/// per-run check just read them).
fn push_links(links: &mut LinkCheck, lines: &[String]) {
    for line in lines {
        if let Ok(event) = Event::decode(line) {
            links.push(&event);
        }
    }
}

/// `, N tombstone(s) (M link(s) to deleted runs)`, or nothing for a store
/// where nothing was deleted (its summary stays as it was).
fn deleted_summary(tombstones: usize, report: &LinkReport) -> String {
    match (tombstones, report.to_deleted()) {
        (0, 0) => String::new(),
        (t, 0) => format!(", {t} tombstone(s)"),
        (t, links) => format!(", {t} tombstone(s) ({links} link(s) to deleted runs)"),
    }
}

/// `, N sub-run link(s)` (and the links whose child never started), or
/// nothing for a store without sub-runs (its summary stays as it was).
fn link_summary(report: &LinkReport) -> String {
    match (report.sub_runs(), report.unstarted()) {
        (0, 0) => String::new(),
        (linked, 0) => format!(", {linked} sub-run link(s)"),
        (linked, unstarted) => format!(
            ", {linked} sub-run link(s), {unstarted} without a child (host lost or still starting)"
        ),
    }
}
