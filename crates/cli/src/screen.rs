//! The terminal that `keel run` writes to: the transcript on stdout, notes
//! and the spinner on stderr, kept from overwriting each other.
//!
//! The spinner draws only when enabled (stderr is a terminal and the
//! output is not `--json`), only while the run is waiting on something,
//! and only when the transcript is at the start of a line; every write
//! first erases it. Write errors on stdout (a closed pipe) are ignored: a
//! reader going away does not stop the run or its journal.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

/// A handle on the shared terminal state; clone it freely.
#[derive(Debug, Clone)]
pub struct Screen(Arc<Mutex<State>>);

#[derive(Debug)]
struct State {
    spinner: bool,
    drawn: bool,
    label: Option<String>,
    at_line_start: bool,
    paused: bool,
    /// Transcript text that arrived while a prompt was waiting.
    held: String,
    held_at_line_start: Option<bool>,
    frame: usize,
}

impl Screen {
    /// A screen; `spinner` enables the spinner.
    pub fn new(spinner: bool) -> Screen {
        Screen(Arc::new(Mutex::new(State {
            spinner,
            drawn: false,
            label: None,
            at_line_start: true,
            paused: false,
            held: String::new(),
            held_at_line_start: None,
            frame: 0,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn erase(state: &mut State) {
        if state.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            state.drawn = false;
        }
    }

    /// Writes transcript text to stdout; `waiting` is what the run now
    /// waits on and `at_line_start` whether the text ended a line.
    /// While a prompt waits for an answer the text is held back, and
    /// written once the prompt is answered, so the two never interleave.
    pub fn print(&self, text: &str, waiting: Option<&str>, at_line_start: bool) {
        let mut state = self.lock();
        if state.paused {
            state.held.push_str(text);
            state.held_at_line_start = Some(at_line_start);
            state.label = waiting.map(str::to_owned);
            return;
        }
        Self::erase(&mut state);
        if !text.is_empty() {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        state.label = waiting.map(str::to_owned);
        state.at_line_start = at_line_start;
    }

    /// Writes one line to stderr (ending a partial stdout line first).
    pub fn note(&self, text: &str) {
        let mut state = self.lock();
        Self::erase(&mut state);
        Self::end_line(&mut state);
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{text}");
        let _ = err.flush();
    }

    fn end_line(state: &mut State) {
        if !state.at_line_start {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            state.at_line_start = true;
        }
    }

    /// Pauses the spinner and holds transcript text back (while a prompt
    /// waits for an answer), or resumes both, writing what was held.
    pub fn pause(&self, paused: bool) {
        let mut state = self.lock();
        Self::erase(&mut state);
        if paused {
            Self::end_line(&mut state);
        } else if !state.held.is_empty() {
            let held = std::mem::take(&mut state.held);
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(held.as_bytes());
            let _ = out.flush();
        }
        if let Some(at) = state.held_at_line_start.take() {
            state.at_line_start = at;
        }
        state.paused = paused;
    }

    /// Draws the next spinner frame, if the spinner should show.
    pub fn tick(&self) {
        let mut state = self.lock();
        if !state.spinner || state.paused || !state.at_line_start {
            return;
        }
        let Some(label) = state.label.clone() else {
            return;
        };
        let frame = crate::render::SPINNER[state.frame % crate::render::SPINNER.len()];
        state.frame = state.frame.wrapping_add(1);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K\x1b[2m{frame} {label}…\x1b[0m");
        let _ = err.flush();
        state.drawn = true;
    }

    /// Erases the spinner and stops it for good; writes anything held
    /// back by a prompt that was never answered (a cancelled run).
    pub fn finish(&self) {
        let mut state = self.lock();
        Self::erase(&mut state);
        state.spinner = false;
        state.paused = false;
        if !state.held.is_empty() {
            let held = std::mem::take(&mut state.held);
            let mut out = std::io::stdout().lock();
            if !state.at_line_start {
                let _ = out.write_all(b"\n");
            }
            let _ = out.write_all(held.as_bytes());
            let _ = out.flush();
        }
        if let Some(at) = state.held_at_line_start.take() {
            state.at_line_start = at;
        }
    }
}
