//! The readable transcript of `keel run`, rendered from the run's events.
//!
//! [`Transcript::render`] turns one event into the text to print: model
//! text as it streams, `→` tool calls, `←` results, `✗` failures, `↻`
//! retries, `?` approvals, and a final summary with usage and the outcome.
//! Reasoning streams on lines of its own marked `thinking:` (dimmed when
//! colour is on); images and files are one-line summaries
//! (`[image image/png 1.2 KiB]`), never their bytes.
//! It is fed from the run's subscription, so everything it shows is in
//! the log: there is no second channel. It also says what the run is
//! waiting on ([`Transcript::waiting`]), for the spinner.

use keel_eventlog::{Event, Payload, ToolRetry};
use keel_message::{ImageData, ImagePart, Message, Part};
use keel_stream::FinishReason;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The longest tool result or argument text shown on one line; longer
/// ones are cut and their size is shown.
pub const SHOWN_BYTES: usize = 240;

/// Renders a run's events as a transcript.
#[derive(Debug)]
pub struct Transcript {
    color: bool,
    at_line_start: bool,
    in_text: bool,
    in_reasoning: bool,
    waiting: Option<String>,
    open_tools: HashMap<String, String>,
    call_names: HashMap<String, String>,
    interactions: HashMap<String, String>,
    calls_this_turn: usize,
    first_ts: Option<u64>,
    last_ts: u64,
    stats: Stats,
    partial_restart: bool,
    last_failure_partial_retryable: bool,
}

/// What the run did, counted from its events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// `turn.started` events.
    pub turns: u64,
    /// `model.started` events.
    pub model_calls: u64,
    /// Model attempts after the first of their turn.
    pub retries: u64,
    /// `model.failed` events.
    pub model_failures: u64,
    /// `tool.started` events.
    pub tool_calls: u64,
    /// `tool.failed` events.
    pub tool_failures: u64,
    /// Input tokens over every completed model call.
    pub input_tokens: u64,
    /// Output tokens over every completed model call.
    pub output_tokens: u64,
    /// Whether any call reported usage.
    pub usage_reported: bool,
    /// Events seen.
    pub events: u64,
}

impl Transcript {
    /// A transcript; `color` adds ANSI colours (for a terminal).
    pub fn new(color: bool) -> Transcript {
        Transcript {
            color,
            at_line_start: true,
            in_text: false,
            in_reasoning: false,
            waiting: None,
            open_tools: HashMap::new(),
            call_names: HashMap::new(),
            interactions: HashMap::new(),
            calls_this_turn: 0,
            first_ts: None,
            last_ts: 0,
            stats: Stats::default(),
            partial_restart: false,
            last_failure_partial_retryable: false,
        }
    }

    /// Tells the transcript whether the retry policy restarts partial
    /// failures (`limits.retry.partial`), so a run that fails on one can
    /// say why it was not retried.
    pub fn partial_restart(mut self, restart: bool) -> Transcript {
        self.partial_restart = restart;
        self
    }

    /// Whether the output so far ends at the start of a line.
    pub fn at_line_start(&self) -> bool {
        self.at_line_start
    }

    /// What the run is waiting on, if anything (for a spinner).
    pub fn waiting(&self) -> Option<&str> {
        self.waiting.as_deref()
    }

    /// The counts so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Appends a whole line, first ending any partial one.
    fn line(&mut self, out: &mut String, text: &str) {
        if !self.at_line_start {
            out.push('\n');
        }
        out.push_str(text);
        out.push('\n');
        self.at_line_start = true;
        self.in_text = false;
        self.in_reasoning = false;
    }

    /// Text to print before the events: the scenario's messages.
    pub fn prelude<'a>(
        &mut self,
        messages: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> String {
        let mut out = String::new();
        for (role, text) in messages {
            let label = self.paint("1", &format!("{role} ›"));
            let text = text.replace('\n', "\n  ");
            self.line(&mut out, &format!("{label} {text}"));
        }
        out
    }

    /// The text to print for `event`.
    pub fn render(&mut self, event: &Event) -> String {
        let mut out = String::new();
        self.stats.events += 1;
        self.first_ts.get_or_insert(event.ts());
        self.last_ts = event.ts();
        let payload = match event.payload() {
            Ok(p) => p,
            Err(e) => {
                let text = self.paint(
                    "2",
                    &format!("· seq {}: undecodable payload: {e}", event.seq()),
                );
                self.line(&mut out, &text);
                return out;
            }
        };
        match &payload {
            Payload::RunStarted(_)
            | Payload::TurnStarted(_)
            | Payload::TurnCompleted(_)
            | Payload::TurnFailed(_)
            | Payload::TurnCancelled(_)
            | Payload::RunCompleted(_)
            | Payload::RunFailed(_)
            | Payload::RunCancelled(_) => self.render_run(&mut out, event, payload),
            Payload::ModelStarted(_)
            | Payload::TextDelta(_)
            | Payload::ToolCall(_)
            | Payload::ModelCompleted(_)
            | Payload::ModelFailed(_)
            | Payload::ModelCancelled(_) => self.render_model(&mut out, payload),
            Payload::ToolStarted(_)
            | Payload::ToolCompleted(_)
            | Payload::ToolFailed(_)
            | Payload::ToolCancelled(_) => self.render_tool(&mut out, payload),
            Payload::InteractionStarted(_)
            | Payload::InteractionCompleted(_)
            | Payload::InteractionFailed(_)
            | Payload::InteractionCancelled(_) => self.render_interaction(&mut out, payload),
            // The prelude already showed the input history.
            Payload::RunInput(_) | Payload::RunInputReference(_) => {}
            Payload::ReasoningDelta(p) => self.reasoning_text(&mut out, &p.text),
            Payload::ReasoningEnd(p) => {
                if p.redacted.is_some() {
                    let text = self.paint("2", "thinking: [redacted]");
                    self.line(&mut out, &text);
                } else {
                    self.end_reasoning(&mut out);
                }
            }
            Payload::ContextCompacted(p) => {
                let text = format!(
                    "· context compacted: {} messages into a summary, ~{} → ~{} tokens",
                    p.replaces.count, p.tokens_before, p.tokens_after
                );
                let text = self.paint("2", &text);
                self.line(&mut out, &text);
            }
            Payload::ContextCompactionFailed(p) => {
                let text = format!("· compaction failed ({}): {}", p.rule.rule_name(), p.detail);
                let text = self.paint("33", &text);
                self.line(&mut out, &text);
            }
            Payload::ToolSubRun(p) => {
                let text = format!("· call {} started sub-run {}", p.call_id, p.run_id);
                let text = self.paint("2", &text);
                self.line(&mut out, &text);
            }
            Payload::Extension { kind, .. } => {
                let text = self.paint("2", &format!("· {kind}"));
                self.line(&mut out, &text);
            }
        }
        out
    }

    /// Run and turn events.
    fn render_run(&mut self, out: &mut String, event: &Event, payload: Payload) {
        match payload {
            Payload::RunStarted(p) => {
                let model = p.model.map(|m| format!(" · model {m}")).unwrap_or_default();
                let text = self.paint("2", &format!("● run {}{model}", event.run_id()));
                self.line(out, &text);
            }
            Payload::TurnStarted(p) => {
                self.stats.turns += 1;
                self.calls_this_turn = 0;
                if p.turn > 1 {
                    let text = self.paint("2", &format!("── turn {}", p.turn));
                    self.line(out, &text);
                }
            }
            Payload::TurnCompleted(_) | Payload::TurnFailed(_) | Payload::TurnCancelled(_) => {}
            Payload::RunCompleted(p) => {
                self.waiting = None;
                if let Some(u) = p.usage {
                    // The run's own total is the authority.
                    self.stats.input_tokens = u.input_tokens();
                    self.stats.output_tokens = u.output_tokens();
                    self.stats.usage_reported = true;
                }
                let summary = self.summary();
                let text = self.paint("1;32", &format!("✓ completed{summary}"));
                self.line(out, &text);
            }
            Payload::RunFailed(p) => {
                self.waiting = None;
                let text = self.paint("1;31", &format!("✗ run failed: {}", p.error));
                self.line(out, &text);
                if self.last_failure_partial_retryable && !self.partial_restart {
                    let text = self.paint(
                    "2",
                    "  (a partial failure is not retried: the output already streamed would be replaced; set limits.retry.partial to \"restart\" to retry it)",
                );
                    self.line(out, &text);
                }
                let summary = self.summary();
                let text = self.paint(
                    "2",
                    &format!("  took {}", summary.trim_start_matches(" in ")),
                );
                self.line(out, &text);
            }
            Payload::RunCancelled(_) => {
                self.waiting = None;
                let summary = self.summary();
                let text = self.paint("1;33", &format!("■ cancelled{summary}"));
                self.line(out, &text);
            }
            _ => {}
        }
    }

    /// A model call: its start, text, tool calls and terminal.
    fn render_model(&mut self, out: &mut String, payload: Payload) {
        match payload {
            Payload::ModelStarted(p) => {
                self.stats.model_calls += 1;
                if p.attempt > 1 {
                    self.stats.retries += 1;
                    let text = self.paint(
                        "33",
                        &format!("↻ retrying the model call (attempt {})", p.attempt),
                    );
                    self.line(out, &text);
                }
                self.waiting = Some("waiting for the model".to_owned());
            }
            Payload::TextDelta(p) => self.model_text(out, &p.text),
            Payload::ToolCall(p) => {
                self.calls_this_turn += 1;
                self.call_names
                    .insert(p.call_id.as_str().to_owned(), p.name.as_str().to_owned());
                let args = shorten(p.arguments.as_str());
                let text = self.paint("36", &format!("→ {} {args}", p.name));
                self.line(out, &text);
            }
            Payload::ModelCompleted(p) => {
                self.waiting = None;
                if let Some(u) = p.usage {
                    self.stats.input_tokens += u.input_tokens();
                    self.stats.output_tokens += u.output_tokens();
                    self.stats.usage_reported = true;
                }
                self.end_reasoning(out);
                if self.in_text && !self.at_line_start {
                    out.push('\n');
                    self.at_line_start = true;
                }
                self.in_text = false;
                // An unknown finish reason (from a newer version's log) is
                // shown like the unusual known ones, verbatim.
                if !matches!(p.finish, FinishReason::Stop | FinishReason::ToolCalls) {
                    let text = self.paint("33", &format!("(the model stopped: {})", p.finish));
                    self.line(out, &text);
                }
            }
            Payload::ModelFailed(p) => {
                self.waiting = None;
                self.stats.model_failures += 1;
                self.last_failure_partial_retryable =
                    p.problem.retryable && p.position.may_have_output();
                let retryable = if p.problem.retryable {
                    ", retryable"
                } else {
                    ""
                };
                let mut text = format!(
                    "✗ model call failed: {} ({}, {}{retryable})",
                    p.problem.message, p.problem.kind, p.position
                );
                if p.position.may_have_output() {
                    text.push_str(" — the partial output above is discarded");
                }
                let text = self.paint("31", &text);
                self.line(out, &text);
            }
            Payload::ModelCancelled(_) => {
                self.waiting = None;
                let text = self.paint("33", "■ model call cancelled");
                self.line(out, &text);
            }
            _ => {}
        }
    }

    /// A text delta, as it streams in.
    fn model_text(&mut self, out: &mut String, text: &str) {
        self.waiting = None;
        self.end_reasoning(out);
        if !self.in_text && !self.at_line_start {
            out.push('\n');
        }
        out.push_str(&terminal_safe(text));
        self.in_text = true;
        self.at_line_start = text.ends_with('\n');
    }

    /// A reasoning delta: on lines of its own, the first marked
    /// `thinking:`, later lines indented, all dimmed when colour is on.
    fn reasoning_text(&mut self, out: &mut String, text: &str) {
        self.waiting = None;
        if !self.in_reasoning {
            if !self.at_line_start {
                out.push('\n');
            }
            out.push_str(&self.paint("2", "thinking: "));
            self.in_reasoning = true;
            self.in_text = false;
        }
        let text = terminal_safe(text).replace('\n', "\n  ");
        out.push_str(&self.paint("2", &text));
        self.at_line_start = false;
    }

    /// Ends the reasoning being streamed, if any, with its line.
    fn end_reasoning(&mut self, out: &mut String) {
        if self.in_reasoning {
            out.push('\n');
            self.at_line_start = true;
            self.in_reasoning = false;
        }
    }

    /// A tool call's scope.
    fn render_tool(&mut self, out: &mut String, payload: Payload) {
        match payload {
            Payload::ToolStarted(p) => {
                self.stats.tool_calls += 1;
                self.open_tools
                    .insert(p.call_id.as_str().to_owned(), p.tool.as_str().to_owned());
                self.update_tool_wait();
            }
            Payload::ToolCompleted(p) => {
                self.open_tools.remove(p.call_id.as_str());
                self.update_tool_wait();
                let label = self.result_label(p.tool.as_str(), p.call_id.as_str());
                let text = self.paint("32", &format!("← {label}{}", shorten(&p.output)));
                self.line(out, &text);
                for image in &p.images {
                    let text = self.paint("2", &format!("  {}", image_summary(image)));
                    self.line(out, &text);
                }
            }
            Payload::ToolFailed(p) => {
                self.stats.tool_failures += 1;
                self.open_tools.remove(p.call_id.as_str());
                self.update_tool_wait();
                let mut typed = Vec::new();
                if let Some(o) = p.outcome {
                    typed.push(format!("outcome {o}"));
                }
                if let Some(r) = p.retry {
                    typed.push(match r {
                        ToolRetry::Retryable => "retryable".to_owned(),
                        ToolRetry::NotRetryable => "not retryable".to_owned(),
                        // A newer version's value, shown verbatim.
                        other => format!("retry {other}"),
                    });
                }
                let typed = if typed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", typed.join(", "))
                };
                let text = self.paint(
                    "31",
                    &format!("✗ {} failed: {}{typed}", p.tool, shorten(p.error.as_str())),
                );
                self.line(out, &text);
            }
            Payload::ToolCancelled(p) => {
                self.open_tools.remove(p.call_id.as_str());
                self.update_tool_wait();
                let text = self.paint("33", &format!("■ {} cancelled", p.tool));
                self.line(out, &text);
            }
            _ => {}
        }
    }

    /// An interaction (an approval).
    fn render_interaction(&mut self, out: &mut String, payload: Payload) {
        match payload {
            Payload::InteractionStarted(p) => {
                self.waiting = None;
                let call = match &p.call_id {
                    Some(c) => match self.call_names.get(c.as_str()) {
                        Some(name) => format!(" for {name} ({c})"),
                        None => format!(" for call {c}"),
                    },
                    None => String::new(),
                };
                self.interactions
                    .insert(p.interaction_id.as_str().to_owned(), call.clone());
                let text = self.paint("33", &format!("? {} requested{call}", p.request));
                self.line(out, &text);
            }
            Payload::InteractionCompleted(p) => {
                let (code, mark) = if p.decision == "approved" {
                    ("32", "✓")
                } else {
                    ("31", "✗")
                };
                let call = self
                    .interactions
                    .get(p.interaction_id.as_str())
                    .cloned()
                    .unwrap_or_default();
                let text = self.paint(code, &format!("{mark} {}{call}", p.decision));
                self.line(out, &text);
            }
            Payload::InteractionFailed(p) => {
                let text = self.paint("31", &format!("✗ approval failed: {}", p.error));
                self.line(out, &text);
            }
            Payload::InteractionCancelled(_) => {
                let text = self.paint("33", "■ approval cancelled");
                self.line(out, &text);
            }
            _ => {}
        }
    }

    fn update_tool_wait(&mut self) {
        let mut names: Vec<&str> = self.open_tools.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        self.waiting = if names.is_empty() {
            None
        } else {
            Some(format!("running {}", names.join(", ")))
        };
    }

    fn result_label(&self, tool: &str, call_id: &str) -> String {
        if self.calls_this_turn > 1 {
            format!("{tool} ({call_id}) ")
        } else {
            String::new()
        }
    }

    /// ` in 1.25s · 3 turns · 4 model calls (1 retry) · 2 tool calls · tokens 40 in / 21 out`
    fn summary(&self) -> String {
        let s = &self.stats;
        let micros = self
            .last_ts
            .saturating_sub(self.first_ts.unwrap_or(self.last_ts));
        let mut out = format!(" in {}", crate::time::human(Duration::from_micros(micros)));
        let plural = |n: u64, one: &str| {
            if n == 1 {
                format!("{n} {one}")
            } else {
                format!("{n} {one}s")
            }
        };
        let _ = write!(out, " · {}", plural(s.turns, "turn"));
        let _ = write!(out, " · {}", plural(s.model_calls, "model call"));
        if s.retries > 0 {
            let _ = write!(
                out,
                " ({})",
                plural(s.retries, "retry").replace("retrys", "retries")
            );
        }
        let _ = write!(out, " · {}", plural(s.tool_calls, "tool call"));
        if s.tool_failures > 0 {
            let _ = write!(out, " ({} failed)", s.tool_failures);
        }
        if s.usage_reported {
            let _ = write!(
                out,
                " · tokens {} in / {} out",
                s.input_tokens, s.output_tokens
            );
        }
        out
    }
}

/// One line, at most [`SHOWN_BYTES`]: newlines shown as `⏎`, longer text
/// cut at a char boundary with its size appended.
pub fn shorten(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| match c {
            '\n' => '⏎',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if flat.len() <= SHOWN_BYTES {
        return flat;
    }
    let mut cut = SHOWN_BYTES;
    while !flat.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes)", &flat[..cut], text.len())
}

/// Model or tool text made safe for a terminal: an escape sequence or
/// carriage return could rewrite the terminal, so control characters
/// other than newline and tab are shown as U+FFFD.
fn terminal_safe(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => '\u{FFFD}',
            c => c,
        })
        .collect()
}

/// A size for people: `68 B`, `1.2 KiB`, `3.0 MiB`.
pub fn human_size(bytes: usize) -> String {
    const KIB: f64 = 1024.0;
    // Display only: the precision of a float is plenty for one decimal.
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / (KIB * KIB))
    }
}

/// One line for an image: `[image image/png 1.2 KiB]`, or its URL (cut
/// like any shown text) with its type when it names one.
pub fn image_summary(image: &ImagePart) -> String {
    let media = image.media_type().map(|t| t.as_str());
    match image.data() {
        ImageData::Bytes(bytes) => format!(
            "[image {} {}]",
            media.unwrap_or("image/*"),
            human_size(bytes.len())
        ),
        ImageData::Url(url) => match media {
            Some(t) => format!("[image {t} {}]", shorten(url.as_str())),
            None => format!("[image {}]", shorten(url.as_str())),
        },
    }
}

/// What the transcript shows of a message before the run: its text, then
/// a summary line per image or file (`[file application/pdf a.pdf 2 KiB]`).
pub fn message_text(message: &Message) -> String {
    let mut text = message.joined_text();
    for part in message.parts() {
        let line = match part {
            Part::Image(image) => image_summary(image),
            Part::File(file) => format!(
                "[file {} {} {}]",
                file.media_type().as_str(),
                shorten(file.name().as_str()),
                human_size(file.bytes().len())
            ),
            _ => continue,
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&line);
    }
    text
}

/// Spinner frames.
pub const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn ev(seq: u64, kind: &str, payload: &str) -> Event {
        let line = format!(
            r#"{{"kind":"{kind}","payload":{payload},"run_id":"run_1","seq":{seq},"ts":{}}}"#,
            1_000_000 * seq
        );
        Event::decode(&line).unwrap()
    }

    #[test]
    fn model_text_cannot_drive_the_terminal() {
        let hostile = keel_message::CanonicalJson::from_value(&serde_json::json!({
            "operation_id": "op_1",
            "text": "a\u{1b}]0;pwned\u{7}b\rc\u{9b}d\te\n",
            "turn": 1
        }))
        .unwrap();
        let mut t = Transcript::new(false);
        let mut out = String::new();
        for e in [
            ev(1, "run.started", r#"{"model":"m"}"#),
            ev(2, "turn.started", r#"{"turn":1}"#),
            ev(3, "model.text_delta", hostile.as_str()),
        ] {
            out.push_str(&t.render(&e));
        }
        assert!(
            !out.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{out:?}"
        );
        assert!(
            out.contains("a\u{FFFD}]0;pwned\u{FFFD}b\u{FFFD}c\u{FFFD}d\te\n"),
            "{out:?}"
        );
    }

    #[test]
    fn renders_a_tool_run() {
        let mut t = Transcript::new(false);
        let mut out = String::new();
        for e in [
            ev(1, "run.started", r#"{"model":"m"}"#),
            ev(2, "turn.started", r#"{"turn":1}"#),
            ev(
                3,
                "model.started",
                r#"{"attempt":1,"model":"m","operation_id":"op_1","turn":1}"#,
            ),
            ev(
                4,
                "model.text_delta",
                r#"{"operation_id":"op_1","text":"Checking.","turn":1}"#,
            ),
            ev(
                5,
                "model.tool_call",
                r#"{"arguments":{"city":"Oslo"},"call_id":"c1","name":"get_weather","operation_id":"op_1","turn":1}"#,
            ),
            ev(
                6,
                "model.completed",
                r#"{"finish":"tool_calls","operation_id":"op_1","turn":1,"usage":{"input_tokens":12,"output_tokens":7}}"#,
            ),
            ev(
                7,
                "tool.started",
                r#"{"call_id":"c1","tool":"get_weather","turn":1}"#,
            ),
        ] {
            out.push_str(&t.render(&e));
        }
        assert_eq!(t.waiting(), Some("running get_weather"));
        out.push_str(&t.render(&ev(
            8,
            "tool.completed",
            r#"{"call_id":"c1","output":"{\"temp_c\":3}","tool":"get_weather","turn":1}"#,
        )));
        assert_eq!(t.waiting(), None);
        out.push_str(&t.render(&ev(9, "turn.completed", r#"{"turn":1}"#)));
        out.push_str(&t.render(&ev(
            10,
            "run.completed",
            r#"{"usage":{"input_tokens":12,"output_tokens":7}}"#,
        )));
        assert_eq!(
            out,
            "● run run_1 · model m\nChecking.\n→ get_weather {\"city\":\"Oslo\"}\n← {\"temp_c\":3}\n\
             ✓ completed in 9.00s · 1 turn · 1 model call · 1 tool call · tokens 12 in / 7 out\n"
        );
    }

    /// Values a newer version added are shown verbatim: an unknown finish
    /// reason like the unusual known ones, an unknown position as partial,
    /// an unknown tool outcome and retry by their words.
    #[test]
    fn renders_unknown_wire_values_verbatim() {
        let mut t = Transcript::new(false);
        let mut out = String::new();
        for e in [
            ev(1, "run.started", r#"{"model":"m"}"#),
            ev(2, "turn.started", r#"{"turn":1}"#),
            ev(
                3,
                "model.failed",
                r#"{"operation_id":"op_1","position":"after_tool_calls","problem":{"kind":"quota","message":"x","retryable":true},"turn":1}"#,
            ),
            ev(
                4,
                "model.completed",
                r#"{"finish":"paused_for_moderation","operation_id":"op_2","turn":1}"#,
            ),
            ev(
                5,
                "tool.failed",
                r#"{"call_id":"c1","error":"odd","outcome":"maybe","retry":"later","tool":"t","turn":1}"#,
            ),
        ] {
            out.push_str(&t.render(&e));
        }
        for shown in [
            "✗ model call failed: x (quota, after_tool_calls, retryable) — the partial output above is discarded",
            "(the model stopped: paused_for_moderation)",
            "✗ t failed: odd (outcome maybe, retry later)",
        ] {
            assert!(out.contains(shown), "{shown:?} not in {out:?}");
        }
    }

    /// A one-pixel PNG, base64 (70 bytes).
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    /// The transcript of `events` (kind, payload) from seq 1, with or
    /// without colour.
    fn transcript(color: bool, events: &[(&str, &str)]) -> String {
        let mut t = Transcript::new(color);
        let mut out = String::new();
        for (i, (kind, payload)) in events.iter().enumerate() {
            out.push_str(&t.render(&ev(i as u64 + 1, kind, payload)));
        }
        out
    }

    fn reasoning_events(images: &str) -> Vec<(&'static str, String)> {
        vec![
            ("run.started", r#"{"model":"m"}"#.to_owned()),
            ("turn.started", r#"{"turn":1}"#.to_owned()),
            (
                "model.reasoning_delta",
                r#"{"operation_id":"op_1","text":"Let me\nthink.\u001b[2J","turn":1}"#.to_owned(),
            ),
            (
                "model.reasoning_delta",
                r#"{"operation_id":"op_1","text":" Done.","turn":1}"#.to_owned(),
            ),
            (
                "model.reasoning_end",
                r#"{"operation_id":"op_1","provider":"anthropic","signature":"c2ln","turn":1}"#
                    .to_owned(),
            ),
            (
                "model.reasoning_end",
                r#"{"operation_id":"op_1","provider":"anthropic","redacted":"b3BhcXVl","turn":1}"#
                    .to_owned(),
            ),
            (
                "model.text_delta",
                r#"{"operation_id":"op_1","text":"Answer.","turn":1}"#.to_owned(),
            ),
            (
                "model.tool_call",
                r#"{"arguments":{},"call_id":"c1","name":"snap","operation_id":"op_1","turn":1}"#
                    .to_owned(),
            ),
            (
                "tool.completed",
                format!(r#"{{"call_id":"c1",{images}"output":"ok","tool":"snap","turn":1}}"#),
            ),
            (
                "model.reasoning_delta",
                r#"{"operation_id":"op_2","text":"Hm","turn":1}"#.to_owned(),
            ),
            (
                "model.completed",
                r#"{"finish":"stop","operation_id":"op_2","turn":1}"#.to_owned(),
            ),
        ]
    }

    /// Reasoning is on lines of its own, marked `thinking:`, control
    /// characters blanked, dimmed only with colour; a redacted part is a
    /// marked line; the signature and redacted value are never shown; a
    /// tool's images are one-line summaries, never their bytes.
    #[test]
    fn reasoning_is_marked_and_images_are_summaries() {
        let images = format!(
            r#""images":[{{"base64":"{PNG}","media_type":"image/png"}},{{"url":"https://example.com/a.gif"}}],"#
        );
        let events = reasoning_events(&images);
        let events: Vec<(&str, &str)> = events.iter().map(|(k, p)| (*k, p.as_str())).collect();
        let plain = transcript(false, &events);
        assert_eq!(
            plain,
            "● run run_1 · model m\n\
             thinking: Let me\n  think.\u{FFFD}[2J Done.\n\
             thinking: [redacted]\n\
             Answer.\n\
             → snap {}\n\
             ← ok\n\
             \x20 [image image/png 70 B]\n\
             \x20 [image https://example.com/a.gif]\n\
             thinking: Hm\n"
        );
        let colored = transcript(true, &events);
        assert!(
            colored.contains("\x1b[2mthinking: \x1b[0m\x1b[2mLet me"),
            "{colored:?}"
        );
        assert!(
            colored.contains("\x1b[2mthinking: [redacted]\x1b[0m"),
            "{colored:?}"
        );
        for secret in ["c2ln", "b3BhcXVl", PNG] {
            assert!(
                !plain.contains(secret) && !colored.contains(secret),
                "{secret}"
            );
        }
    }

    #[test]
    fn sizes_and_messages_are_summarised() {
        for (bytes, shown) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1229, "1.2 KiB"),
            (1024 * 1024, "1.0 MiB"),
            (3 * 1024 * 1024 + 1, "3.0 MiB"),
        ] {
            assert_eq!(human_size(bytes), shown, "{bytes}");
        }
        let message = Message::from_json_with(&format!(
            r#"{{"id":"m1","role":"user","parts":[{{"type":"text","text":"See"}},{{"type":"image","media_type":"image/png","base64":"{PNG}"}},{{"type":"file","media_type":"application/pdf","name":"a<script>.pdf","base64":"JVBERi0xLjQK"}}]}}"#
        ), &keel_message::Limits::default())
        .unwrap();
        assert_eq!(
            message_text(&message),
            "See\n[image image/png 70 B]\n[file application/pdf a<script>.pdf 9 B]"
        );
    }

    #[test]
    fn shortens_long_text() {
        let long = "é".repeat(300);
        let s = shorten(&long);
        assert!(s.ends_with("… (600 bytes)"), "{s}");
        assert_eq!(shorten("a\nb"), "a⏎b");
    }
}
