//! Compaction in history rebuild, against a reference model.
//!
//! The input is a byte tape that writes an engine-shaped run `run_1`
//! (inputs, then turns: a plain answer, an answer with one or two tool
//! calls and their results, a compaction call with its `context.compacted`
//! over a range the tape picks, or a compaction that failed), committed
//! through a `RunLog` (so every line obeys the lifecycle and the
//! compaction order rule), and optionally a run `run_2` continuing it by
//! reference that compacts too (its range may reach into what it
//! inherited). The model keeps the context (ids, roles, tool-call links)
//! and the transcript independently of the fold.
//!
//! Checked: `rebuild`, `rebuild_after` and `rebuild_chain` never panic and
//! agree with the model: the context's ids and roles (each summary where
//! its range was) when every range fits, else `compaction.range` at the
//! seq of the first range that does not fit, with the fault the model
//! finds (not contiguous, covering a system message, or splitting a call
//! from its result, naming a call that is split); `take_completed` is the
//! transcript (every message, never a summary) and `take_items` holds one
//! compaction item per `context.compacted`.
//!
//! Fork references (`run.started` `forked_from` and a seq 2 reference
//! read through the fork's seq) are not generated here: the seam is
//! `continued_run`, which a fork variant mirrors with the parent read
//! only up to a fork point.
#![no_main]

use keel_eventlog::history::{self, HistoryError, HistoryFold, HistoryItem, HistoryStore, RangeFault};
use keel_eventlog::*;
use keel_message::{CallId, CanonicalJson, Limits, Message, MessageId, ModelName, OperationId, Role, RunId, ToolName};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most turns one run writes.
const MAX_TURNS: usize = 48;

/// One message of the model's context: no content, as the rule needs.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    id: String,
    role: Role,
    calls: Vec<String>,
    results: Vec<String>,
}

/// The model: the context and the transcript, and the first range that
/// did not fit (its seq and fault).
#[derive(Debug, Default, Clone)]
struct Model {
    context: Vec<Entry>,
    transcript: Vec<String>,
    refused: Option<(u64, RangeFault)>,
    compactions: usize,
}

impl Model {
    fn add(&mut self, entry: Entry) {
        self.transcript.push(entry.id.clone());
        self.context.push(entry);
    }

    /// Applies a range over the context as the rule says, or records why
    /// it does not fit.
    fn compact(&mut self, seq: u64, start: usize, count: usize, first: &str, last: &str, summary: Entry) {
        self.compactions += 1;
        if self.refused.is_some() {
            return;
        }
        let fits = self.context.get(start).is_some_and(|e| e.id == first)
            && count >= 1
            && self.context.get(start + count - 1).is_some_and(|e| e.id == last);
        if !fits {
            self.refused = Some((seq, RangeFault::NotContiguous));
            return;
        }
        let span = start..start + count;
        if let Some(system) = self.context[span.clone()].iter().find(|e| e.role == Role::System) {
            let id = MessageId::parse(&system.id).expect("a generated id");
            self.refused = Some((seq, RangeFault::CoversSystem { id }));
            return;
        }
        if let Some(call) = split_call(&self.context, span.clone()) {
            self.refused = Some((seq, RangeFault::SplitsToolCall { call_id: CallId::parse(&call).expect("a generated id") }));
            return;
        }
        self.context.splice(span, [summary]);
    }
}

/// A call whose call is on one side of `span` and its result on the
/// other, if any.
fn split_call(context: &[Entry], span: std::ops::Range<usize>) -> Option<String> {
    for (i, entry) in context.iter().enumerate() {
        for call in &entry.calls {
            for (j, other) in context.iter().enumerate() {
                if other.results.contains(call) && span.contains(&i) != span.contains(&j) {
                    return Some(call.clone());
                }
            }
        }
    }
    None
}

/// Reads the tape a byte at a time (0 when it runs out).
struct Tape<'a>(&'a [u8]);

impl Tape<'_> {
    fn byte(&mut self) -> u8 {
        let Some((first, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        *first
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// A run being written: its log, the model, the next turn.
struct Writer {
    log: RunLog,
    run: RunId,
    model: Model,
    turn: u64,
    next_call: u32,
}

fn extra() -> Extra {
    Extra::new()
}

fn message(id: &str, role: Role, text: &str) -> Message {
    Message::text(MessageId::parse(id).expect("a generated id"), role, text).expect("a small message")
}

fn entry_of(message: &Message) -> Entry {
    Entry {
        id: message.id().as_str().to_owned(),
        role: message.role(),
        calls: message.tool_calls().map(|c| c.call_id().as_str().to_owned()).collect(),
        results: message
            .parts()
            .iter()
            .filter_map(|p| match p {
                keel_message::Part::ToolResult(r) => Some(r.call_id().as_str().to_owned()),
                _ => None,
            })
            .collect(),
    }
}

impl Writer {
    fn new(run: &str) -> Writer {
        let run = RunId::parse(run).expect("a run id");
        let log = RunLog::new(run.clone(), LogConfig::default(), Arc::new(SystemClock)).expect("a log");
        Writer { log, run, model: Model::default(), turn: 0, next_call: 0 }
    }

    fn commit(&self, payload: Payload) -> u64 {
        match self.log.commit(&payload) {
            Ok(event) => event.seq(),
            Err(e) => panic!("an engine-shaped {} is refused: {e}", payload.kind()),
        }
    }

    fn input(&mut self, message: Message) {
        self.model.add(entry_of(&message));
        self.commit(Payload::RunInput(RunInput { message, extra: extra() }));
    }

    fn op(&self, name: &str) -> OperationId {
        OperationId::parse(&format!("{name}{}", self.turn)).expect("an operation id")
    }

    fn model_started(&self, op: &OperationId, purpose: Option<ModelPurpose>) {
        self.commit(Payload::ModelStarted(ModelStarted {
            turn: self.turn,
            operation_id: op.clone(),
            model: ModelName::parse("m").expect("a model"),
            attempt: 1,
            purpose,
            extra: extra(),
        }));
    }

    fn text(&self, op: &OperationId, text: &str) {
        self.commit(Payload::TextDelta(TextDelta { turn: self.turn, operation_id: op.clone(), text: text.to_owned(), extra: extra() }));
    }

    fn completed(&self, op: &OperationId) -> u64 {
        self.commit(Payload::ModelCompleted(ModelCompleted {
            turn: self.turn,
            operation_id: op.clone(),
            finish: keel_stream::FinishReason::Stop,
            usage: None,
            metadata: None,
            extra: extra(),
        }))
    }

    /// An answer with `calls` tool calls and their results.
    fn answer(&mut self, calls: usize) {
        let op = self.op("a");
        self.model_started(&op, None);
        self.text(&op, "ok");
        let ids: Vec<String> = (0..calls)
            .map(|_| {
                self.next_call += 1;
                format!("c{}", self.next_call)
            })
            .collect();
        for id in &ids {
            self.commit(Payload::ToolCall(ToolCall {
                turn: self.turn,
                operation_id: op.clone(),
                call_id: CallId::parse(id).expect("a call id"),
                name: ToolName::parse("t").expect("a tool"),
                arguments: CanonicalJson::parse("{}").expect("json"),
                extra: extra(),
            }));
        }
        self.completed(&op);
        let answer = history::turn_message_id(&self.run, self.turn, Role::Assistant).expect("an id");
        self.model.add(Entry { id: answer.as_str().to_owned(), role: Role::Assistant, calls: ids.clone(), results: Vec::new() });
        for id in &ids {
            let tool = ToolRef { turn: self.turn, call_id: CallId::parse(id).expect("a call id"), tool: ToolName::parse("t").expect("a tool"), extra: extra() };
            self.commit(Payload::ToolStarted(tool.clone()));
            self.commit(Payload::ToolCompleted(ToolCompleted {
                turn: tool.turn,
                call_id: tool.call_id,
                tool: tool.tool,
                output: "r".into(),
                images: Vec::new(),
                extra: extra(),
            }));
        }
        if !ids.is_empty() {
            let results = history::turn_message_id(&self.run, self.turn, Role::Tool).expect("an id");
            self.model.add(Entry { id: results.as_str().to_owned(), role: Role::Tool, calls: Vec::new(), results: ids });
        }
    }

    /// A compaction call over the range the tape picks (in the model's
    /// context; a pick past it names an id the history does not hold).
    fn compaction(&mut self, tape: &mut Tape<'_>) {
        let op = self.op("k");
        self.model_started(&op, Some(ModelPurpose::Compaction));
        self.text(&op, "summary");
        self.completed(&op);
        let len = self.model.context.len();
        let start = usize::from(tape.byte()) % (len + 1);
        let count = usize::from(tape.byte() % 8);
        let shift = tape.byte() % 4;
        let id_at = |i: usize| self.model.context.get(i).map_or_else(|| "m_gone".to_owned(), |e| e.id.clone());
        let first = id_at(start);
        // Mostly the id `count` apart; sometimes a neighbour (not contiguous).
        let last_at = (start + count.max(1) - 1 + usize::from(shift == 3)).min(len.saturating_sub(1));
        // One message: `first` is `last` (the payload rule).
        let last = if count <= 1 { first.clone() } else { id_at(last_at) };
        let summary = message(history::compaction_message_id(&self.run, self.turn).expect("an id").as_str(), Role::User, "summary");
        let seq = self.commit(Payload::ContextCompacted(ContextCompacted {
            turn: self.turn,
            operation_id: op,
            replaces: CompactedRange {
                first: MessageId::parse(&first).expect("an id"),
                last: MessageId::parse(&last).expect("an id"),
                count: count.max(1) as u64,
                extra: extra(),
            },
            summary: summary.clone(),
            tokens_before: 100,
            tokens_after: 10,
            estimator: TokenEstimator { kind: EstimatorKind::Bytes, bytes_per_token: 4, extra: extra() },
            extra: extra(),
        }));
        // The model locates by position from the first occurrence, as ids
        // here are unique.
        let start = self.model.context.iter().position(|e| e.id == first).unwrap_or(usize::MAX);
        self.model.compact(seq, start, count.max(1), &first, &last, entry_of(&summary));
    }

    /// A compaction call that failed, or whose summary was refused.
    fn failed_compaction(&mut self, tape: &mut Tape<'_>) {
        let op = self.op("k");
        self.model_started(&op, Some(ModelPurpose::Compaction));
        let rule = if tape.byte() % 2 == 0 {
            self.commit(Payload::ModelCancelled(ModelRef { turn: self.turn, operation_id: op.clone(), extra: extra() }));
            CompactionRule::ModelFailed
        } else {
            self.text(&op, "a long summary");
            self.completed(&op);
            CompactionRule::NotSmaller
        };
        self.commit(Payload::ContextCompactionFailed(ContextCompactionFailed {
            turn: self.turn,
            operation_id: op,
            rule,
            detail: ErrorText::new("no"),
            tokens_before: 100,
            extra: extra(),
        }));
    }

    /// The turns the tape writes.
    fn turns(&mut self, tape: &mut Tape<'_>) {
        for _ in 0..MAX_TURNS {
            if tape.done() {
                break;
            }
            self.turn += 1;
            self.commit(Payload::TurnStarted(TurnRef { turn: self.turn, extra: extra() }));
            match tape.byte() % 5 {
                0 => self.answer(0),
                1 | 2 => self.answer(1 + usize::from(tape.byte() % 2)),
                3 => {
                    self.compaction(tape);
                    self.answer(0);
                }
                _ => {
                    self.failed_compaction(tape);
                    self.answer(0);
                }
            }
            self.commit(Payload::TurnCompleted(TurnRef { turn: self.turn, extra: extra() }));
        }
        self.commit(Payload::RunCompleted(RunCompleted::default()));
    }

    fn events(&self) -> Vec<Event> {
        self.log.retained_after(0).iter().map(|e| (**e).clone()).collect()
    }
}

/// Every run's events, served two at a time.
struct Runs(BTreeMap<RunId, Vec<Event>>);

impl HistoryStore for Runs {
    type Error = std::convert::Infallible;
    fn events_after(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<Event>, Self::Error> {
        let events = self.0.get(run).map(Vec::as_slice).unwrap_or_default();
        Ok(events.iter().filter(|e| e.seq() > after).take(limit.min(2)).cloned().collect())
    }
}

fn shape(messages: &[Message]) -> Vec<Entry> {
    messages.iter().map(entry_of).collect()
}

/// `result` against the model: its context, or the refusal it predicts.
fn agree(what: &str, result: Result<Vec<Message>, HistoryError>, model: &Model) {
    match (&model.refused, result) {
        (None, Ok(messages)) => assert_eq!(shape(&messages), model.context, "{what}: the context"),
        (Some((seq, fault)), Err(HistoryError::CompactionRange { seq: at, fault: found, .. })) => {
            assert_eq!(at, *seq, "{what}: the seq refused");
            match (fault, &found) {
                // Which split call is named is the fold's choice; it must
                // be a call the range splits.
                (RangeFault::SplitsToolCall { .. }, RangeFault::SplitsToolCall { call_id }) => {
                    assert!(model.context.iter().any(|e| e.calls.iter().any(|c| c == call_id.as_str())), "{what}: {call_id}");
                }
                _ => assert_eq!(&found, fault, "{what}: the fault"),
            }
        }
        (want, got) => panic!("{what}: the model says {want:?}, the fold {got:?}"),
    }
}

/// The transcript and the items of a fold that hands everything out,
/// taken after each event by `take_completed` or `take_items` in turn.
fn check_streaming(events: &[Event], model: &Model) {
    let mut fold = HistoryFold::new(Limits::default());
    let mut transcript = Vec::new();
    let mut compactions = 0;
    for (i, event) in events.iter().enumerate() {
        if fold.push(event).is_err() {
            assert!(model.refused.is_some(), "the streaming fold refused a range the model fits");
            return;
        }
        if i % 2 == 0 {
            transcript.extend(fold.take_completed().iter().map(|m| m.id().as_str().to_owned()));
            continue;
        }
        for item in fold.take_items() {
            match item {
                HistoryItem::Message(m) => transcript.push(m.id().as_str().to_owned()),
                HistoryItem::Compaction { compacted, .. } => {
                    assert_eq!(compacted.summary.role(), Role::User);
                    compactions += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(transcript, model.transcript, "the transcript");
    assert!(compactions <= model.compactions, "one item per context.compacted at most");
    assert_eq!(fold.finish().map(|rest| rest.len()).ok(), Some(0), "everything was taken");
}

/// A chain's history as a history result (its refusals of one run's log).
fn chain_history(store: &Runs, run: &RunId) -> Result<Vec<Message>, HistoryError> {
    match history::rebuild_chain(store, run, &Limits::default()) {
        Ok(chain) => Ok(chain.history),
        Err(history::ChainError::History { source, .. }) => Err(source),
        Err(e) => panic!("the chain of generated runs does not rebuild: {e}"),
    }
}

/// `run_2`, continuing `run_1` by reference: a new message, then its own
/// turns from the rest of the tape. The seam for fork references.
fn continued_run(parent: &Writer, store: &mut Runs, tape: &mut Tape<'_>) -> Option<Writer> {
    let chain = history::rebuild_chain(store, &parent.run, &Limits::default()).ok()?;
    let mut child = Writer::new("run_2");
    child.model.context = shape(&chain.history);
    child.model.transcript = Vec::new();
    child.commit(Payload::RunStarted(RunStarted { continues: Some(parent.run.clone()), ..RunStarted::default() }));
    child.commit(Payload::RunInputReference(RunInputReference { history: chain.reference, extra: extra() }));
    child.input(message("run_2.u1", Role::User, "more"));
    child.turns(tape);
    store.0.insert(child.run.clone(), child.events());
    Some(child)
}

fuzz_target!(|data: &[u8]| {
    let mut tape = Tape(data);
    let mut run = Writer::new("run_1");
    run.commit(Payload::RunStarted(RunStarted::default()));
    let head = tape.byte();
    if head % 2 == 0 {
        run.input(message("m0", Role::System, "be brief"));
    }
    run.input(message("m1", Role::User, "hi"));
    if head % 3 == 0 {
        run.input(message("m2", Role::User, "and"));
    }
    let split = usize::from(tape.byte());
    let (mine, rest) = tape.0.split_at(split.min(tape.0.len()));
    run.turns(&mut Tape(mine));
    let events = run.events();
    let limits = Limits::default();
    agree("rebuild", history::rebuild(&events, &limits), &run.model);
    agree("rebuild_after", history::rebuild_after(Vec::new(), &events, &limits), &run.model);
    check_streaming(&events, &run.model);
    let mut store = Runs(BTreeMap::from([(run.run.clone(), events)]));
    agree("rebuild_chain", chain_history(&store, &run.run), &run.model);
    if run.model.refused.is_some() || rest.is_empty() {
        return;
    }
    let mut tape = Tape(rest);
    let Some(child) = continued_run(&run, &mut store, &mut tape) else {
        panic!("a run that rebuilds is continued");
    };
    agree("rebuild_chain of the continuation", chain_history(&store, &child.run), &child.model);
});
