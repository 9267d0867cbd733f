//! `--approve all|none|ask`: the interaction handler for tools marked
//! `requires_approval`.
//!
//! - `all` approves every call, `none` denies every call.
//! - `ask` prompts on stderr, `Allow tool NAME with {args}? [y/N] `, and
//!   reads one line from stdin when stdin is a terminal; `y` or `yes`
//!   approves, anything else (an empty line, end of input) denies. When
//!   stdin is not a terminal it denies and says so on stderr. Prompts are
//!   asked one at a time, on a thread of their own, so a blocked read never
//!   holds up the runtime; a cancelled run abandons its question.

use crate::screen::Screen;
use keel_engine::{
    InteractionDecision, InteractionFuture, InteractionHandler, InteractionKind, InteractionRequest,
};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// How approvals are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalMode {
    /// Approve every call.
    All,
    /// Deny every call.
    None,
    /// Ask on the terminal (deny when stdin is not a terminal).
    Ask,
}

struct Question {
    prompt: String,
    answer: oneshot::Sender<bool>,
}

/// The handler behind `--approve`.
pub struct Approver {
    mode: ApprovalMode,
    screen: Screen,
    asker: Mutex<Option<mpsc::Sender<Question>>>,
}

impl std::fmt::Debug for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approver")
            .field("mode", &self.mode)
            .finish()
    }
}

impl Approver {
    /// A handler for `mode`; prompts go through `screen` (which pauses the
    /// spinner).
    pub fn new(mode: ApprovalMode, screen: Screen) -> Arc<Approver> {
        Arc::new(Approver {
            mode,
            screen,
            asker: Mutex::new(None),
        })
    }

    /// The prompt thread's queue, started on first use.
    fn asker(&self) -> Option<mpsc::Sender<Question>> {
        let mut slot = self.asker.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = slot.as_ref() {
            return Some(tx.clone());
        }
        let (tx, rx) = mpsc::channel::<Question>();
        let screen = self.screen.clone();
        std::thread::Builder::new()
            .name("keel-approval".into())
            .spawn(move || {
                let stdin = std::io::stdin();
                for question in rx {
                    if question.answer.is_closed() {
                        continue; // abandoned (the run was cancelled)
                    }
                    screen.pause(true);
                    {
                        let mut err = std::io::stderr().lock();
                        let _ = write!(err, "{}", question.prompt);
                        let _ = err.flush();
                    }
                    let mut line = String::new();
                    let yes = match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => false,
                        Ok(_) => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
                    };
                    screen.pause(false);
                    let _ = question.answer.send(yes);
                }
            })
            .ok()?;
        *slot = Some(tx.clone());
        Some(tx)
    }
}

impl InteractionHandler for Approver {
    fn handle(&self, request: InteractionRequest) -> InteractionFuture {
        let decision = |yes: bool| {
            if yes {
                InteractionDecision::Approved
            } else {
                InteractionDecision::Denied
            }
        };
        match self.mode {
            ApprovalMode::All => Box::pin(std::future::ready(Ok(InteractionDecision::Approved))),
            ApprovalMode::None => Box::pin(std::future::ready(Ok(InteractionDecision::Denied))),
            ApprovalMode::Ask => {
                let InteractionKind::Approval {
                    tool, arguments, ..
                } = &request.kind
                else {
                    return Box::pin(std::future::ready(Ok(InteractionDecision::Denied)));
                };
                if !std::io::stdin().is_terminal() {
                    self.screen.note(&format!(
                        "keel: stdin is not a terminal, so tool {tool} is denied (use --approve all or --approve none)"
                    ));
                    return Box::pin(std::future::ready(Ok(InteractionDecision::Denied)));
                }
                let prompt = format!(
                    "Allow tool {tool} with {}? [y/N] ",
                    crate::render::shorten(arguments.as_str())
                );
                let (answer, reply) = oneshot::channel();
                let sent = self
                    .asker()
                    .is_some_and(|tx| tx.send(Question { prompt, answer }).is_ok());
                Box::pin(async move {
                    if !sent {
                        return Ok(InteractionDecision::Denied);
                    }
                    Ok(decision(reply.await.unwrap_or(false)))
                })
            }
        }
    }
}
