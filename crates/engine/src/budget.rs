//! Budgets: what a run and every run it starts may spend together. A
//! [`Budget`] sets any of input tokens, output tokens, tool calls and wall
//! time; each run under one has a [`BudgetAccount`] linked to its parent's,
//! charges go to every account up the chain, and a boundary check fails
//! when any account of the chain is spent, so a child's effective limit is
//! the least over its chain: its own budget can never widen or reset an
//! ancestor's. While a token limit is in force, the tree's model calls are
//! admitted one at a time ([`BudgetAccount::admit_model_call`]), which
//! bounds a token overrun to one in-flight call.

use keel_eventlog::{Cause, Extra};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

/// The largest budget member (2^53 − 1): what a breach records must be an
/// I-JSON integer, and an account's spending stops counting there.
pub(crate) const MAX_BUDGET: u64 = (1 << 53) - 1;

/// The `cause.kind` of a run that failed on its budget.
pub(crate) const BUDGET_KIND: &str = "budget";

/// What a run and all its descendants may spend together. Each member is
/// a limit when set; [`Default`] sets none. A member of 0 is refused by
/// [`EngineLimits::check`](crate::EngineLimits::check).
///
/// ```
/// use keel_engine::{Budget, BudgetMember};
/// let budget = Budget { output_tokens: Some(2_000), tool_calls: Some(10), ..Budget::default() };
/// assert_eq!(budget.limit(BudgetMember::ToolCalls), Some(10));
/// assert_eq!(budget.limit(BudgetMember::WallMs), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// Input tokens the model calls may report, summed.
    pub input_tokens: Option<u64>,
    /// Output tokens the model calls may report, summed.
    pub output_tokens: Option<u64>,
    /// Tool calls that may start, counted before each `tool.started`.
    pub tool_calls: Option<u64>,
    /// Milliseconds from the start of the run the budget belongs to.
    pub wall_ms: Option<u64>,
}

impl Budget {
    /// The limit `member` sets, if any.
    pub fn limit(&self, member: BudgetMember) -> Option<u64> {
        match member {
            BudgetMember::InputTokens => self.input_tokens,
            BudgetMember::OutputTokens => self.output_tokens,
            BudgetMember::ToolCalls => self.tool_calls,
            BudgetMember::WallMs => self.wall_ms,
        }
    }

    /// Whether no member is set (a budget that limits nothing).
    pub fn is_unlimited(&self) -> bool {
        BudgetMember::ALL.iter().all(|m| self.limit(*m).is_none())
    }

    fn limits_tokens(&self) -> bool {
        self.input_tokens.is_some() || self.output_tokens.is_some()
    }
}

/// One member of a [`Budget`]: what a breach names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetMember {
    /// [`Budget::input_tokens`].
    InputTokens,
    /// [`Budget::output_tokens`].
    OutputTokens,
    /// [`Budget::tool_calls`].
    ToolCalls,
    /// [`Budget::wall_ms`].
    WallMs,
}

impl BudgetMember {
    /// Every member, in the order checks report them.
    pub const ALL: [BudgetMember; 4] = [
        BudgetMember::InputTokens,
        BudgetMember::OutputTokens,
        BudgetMember::ToolCalls,
        BudgetMember::WallMs,
    ];

    /// The member's name, e.g. `input_tokens`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetMember::InputTokens => "input_tokens",
            BudgetMember::OutputTokens => "output_tokens",
            BudgetMember::ToolCalls => "tool_calls",
            BudgetMember::WallMs => "wall_ms",
        }
    }

    /// The rule a breach of it names, e.g. `budget.input_tokens`.
    pub fn rule(self) -> &'static str {
        match self {
            BudgetMember::InputTokens => "budget.input_tokens",
            BudgetMember::OutputTokens => "budget.output_tokens",
            BudgetMember::ToolCalls => "budget.tool_calls",
            BudgetMember::WallMs => "budget.wall_ms",
        }
    }
}

impl std::fmt::Display for BudgetMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A spent budget member: which, what its account has spent, its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Breach {
    pub(crate) member: BudgetMember,
    pub(crate) spent: u64,
    pub(crate) limit: u64,
}

impl Breach {
    /// What `turn.failed` and `run.failed` record:
    /// `{"kind": "budget", "rule": "budget.<member>", "spent": S, "limit": L}`.
    pub(crate) fn event_cause(&self) -> Cause {
        let mut extra = Extra::new();
        extra.insert("rule".to_owned(), self.member.rule().into());
        extra.insert("spent".to_owned(), self.spent.into());
        extra.insert("limit".to_owned(), self.limit.into());
        Cause {
            kind: Some(BUDGET_KIND.to_owned()),
            extra,
            ..Cause::default()
        }
    }
}

/// The boundary a check runs at: what it may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// Before a model call: tokens and wall time must be left.
    ModelCall,
    /// Before a tool call: as a model call, and one tool call is taken.
    ToolCall,
}

/// What one account has spent (wall time is read from its start).
#[derive(Debug, Default)]
struct Spent {
    input_tokens: u64,
    output_tokens: u64,
    tool_calls: u64,
}

/// One run's account in a budget tree.
#[derive(Debug)]
pub(crate) struct BudgetAccount {
    parent: Option<Arc<BudgetAccount>>,
    limits: Budget,
    started: Instant,
    spent: Mutex<Spent>,
    /// Shared by every account under the topmost one with a token limit.
    gate: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl BudgetAccount {
    /// The account of a run starting now with `own` limits under `parent`'s
    /// account; `None` when neither limits anything (no account, no cost).
    pub(crate) fn open(
        parent: Option<Arc<BudgetAccount>>,
        own: Option<&Budget>,
    ) -> Option<Arc<BudgetAccount>> {
        let limits = own.copied().unwrap_or_default();
        if parent.is_none() && limits.is_unlimited() {
            return None;
        }
        let gate = match &parent {
            Some(p) if p.gate.is_some() => p.gate.clone(),
            _ => limits
                .limits_tokens()
                .then(|| Arc::new(tokio::sync::Mutex::new(()))),
        };
        Some(Arc::new(BudgetAccount {
            parent,
            limits,
            started: Instant::now(),
            spent: Mutex::new(Spent::default()),
            gate,
        }))
    }

    /// Waits for the tree's model gate when a token limit is in force (the
    /// guard admits one model call; hold it to the call's terminal), and
    /// returns at once with `None` otherwise. The gate is fair (FIFO).
    pub(crate) async fn admit_model_call(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.gate {
            Some(gate) => Some(Arc::clone(gate).lock_owned().await),
            None => None,
        }
    }

    /// Checks every account of the chain at `boundary`, at `now`. At a tool
    /// call, a call is counted on every account in the same step (the chain
    /// stays locked), so parallel calls cannot pass the limit together.
    pub(crate) fn check(&self, boundary: Boundary, now: Instant) -> Result<(), Breach> {
        let mut chain = self.lock_chain();
        for (account, spent) in chain.iter() {
            account.breach(spent, boundary, now)?;
        }
        if boundary == Boundary::ToolCall {
            for (_, spent) in chain.iter_mut() {
                spent.tool_calls = spent.tool_calls.saturating_add(1);
            }
        }
        Ok(())
    }

    /// Charges a model call's reported usage to every account of the chain.
    pub(crate) fn charge_tokens(&self, input: u64, output: u64) {
        for (_, spent) in self.lock_chain().iter_mut() {
            spent.input_tokens = spent.input_tokens.saturating_add(input).min(MAX_BUDGET);
            spent.output_tokens = spent.output_tokens.saturating_add(output).min(MAX_BUDGET);
        }
    }

    /// This account's first spent member at `boundary`, in member order.
    fn breach(&self, spent: &Spent, boundary: Boundary, now: Instant) -> Result<(), Breach> {
        for member in BudgetMember::ALL {
            let Some(limit) = self.limits.limit(member) else {
                continue;
            };
            let (used, over) = match member {
                BudgetMember::InputTokens => (spent.input_tokens, spent.input_tokens >= limit),
                BudgetMember::OutputTokens => (spent.output_tokens, spent.output_tokens >= limit),
                // A model call spends no tool call; a tool call needs one left.
                BudgetMember::ToolCalls => (
                    spent.tool_calls,
                    boundary == Boundary::ToolCall && spent.tool_calls >= limit,
                ),
                BudgetMember::WallMs => {
                    let ms = now.saturating_duration_since(self.started).as_millis();
                    let ms = u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_BUDGET);
                    (ms, ms >= limit)
                }
            };
            if over {
                return Err(Breach {
                    member,
                    spent: used,
                    limit,
                });
            }
        }
        Ok(())
    }

    /// Every account from the root down to this one, each locked. Root
    /// first: every locker takes an ancestor before its descendants, and
    /// one locker holds a single chain, so two lockers never wait on each
    /// other in opposite orders.
    fn lock_chain(&self) -> Vec<(&BudgetAccount, MutexGuard<'_, Spent>)> {
        let mut chain: Vec<&BudgetAccount> =
            std::iter::successors(Some(self), |a| a.parent.as_deref()).collect();
        chain.reverse();
        chain
            .into_iter()
            .map(|a| {
                let spent = a
                    .spent
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                (a, spent)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::time::Duration;

    fn budget(
        input: Option<u64>,
        output: Option<u64>,
        tools: Option<u64>,
        wall: Option<u64>,
    ) -> Budget {
        Budget {
            input_tokens: input,
            output_tokens: output,
            tool_calls: tools,
            wall_ms: wall,
        }
    }

    #[test]
    fn names_and_rules() {
        let rows = [
            (BudgetMember::InputTokens, "input_tokens"),
            (BudgetMember::OutputTokens, "output_tokens"),
            (BudgetMember::ToolCalls, "tool_calls"),
            (BudgetMember::WallMs, "wall_ms"),
        ];
        for (member, name) in rows {
            assert_eq!(member.as_str(), name);
            assert_eq!(member.to_string(), name);
            assert_eq!(member.rule(), format!("budget.{name}"));
        }
        let b = budget(Some(1), Some(2), Some(3), Some(4));
        let limits: Vec<_> = BudgetMember::ALL.iter().map(|m| b.limit(*m)).collect();
        assert_eq!(limits, [Some(1), Some(2), Some(3), Some(4)]);
        assert!(Budget::default().is_unlimited());
        for member in BudgetMember::ALL {
            let mut one = Budget::default();
            match member {
                BudgetMember::InputTokens => one.input_tokens = Some(1),
                BudgetMember::OutputTokens => one.output_tokens = Some(1),
                BudgetMember::ToolCalls => one.tool_calls = Some(1),
                BudgetMember::WallMs => one.wall_ms = Some(1),
            }
            assert!(!one.is_unlimited(), "{member}");
        }
    }

    #[test]
    fn a_breach_records_kind_rule_spent_and_limit() {
        let breach = Breach {
            member: BudgetMember::WallMs,
            spent: 1_500,
            limit: 1_000,
        };
        let cause = serde_json::to_value(breach.event_cause()).unwrap();
        let expected = serde_json::json!({
            "kind": "budget", "rule": "budget.wall_ms", "spent": 1_500, "limit": 1_000
        });
        assert_eq!(cause, expected);
    }

    #[test]
    fn no_account_and_no_gate_without_limits() {
        assert!(BudgetAccount::open(None, None).is_none());
        assert!(BudgetAccount::open(None, Some(&Budget::default())).is_none());
        let tools = BudgetAccount::open(None, Some(&budget(None, None, Some(2), None))).unwrap();
        assert!(tools.gate.is_none());
        let child = BudgetAccount::open(Some(Arc::clone(&tools)), None).unwrap();
        assert!(child.gate.is_none());
        for tokens in [
            budget(Some(5), None, None, None),
            budget(None, Some(5), None, None),
        ] {
            assert!(
                BudgetAccount::open(None, Some(&tokens))
                    .unwrap()
                    .gate
                    .is_some()
            );
        }
    }

    #[test]
    fn the_topmost_token_budget_gates_the_whole_subtree() {
        let tokens = budget(Some(100), None, None, None);
        let root = BudgetAccount::open(None, Some(&tokens)).unwrap();
        let child = BudgetAccount::open(Some(Arc::clone(&root)), Some(&tokens)).unwrap();
        let grandchild = BudgetAccount::open(Some(Arc::clone(&child)), None).unwrap();
        let (r, g) = (
            root.gate.as_ref().unwrap(),
            grandchild.gate.as_ref().unwrap(),
        );
        assert!(Arc::ptr_eq(r, g));
        assert!(Arc::ptr_eq(r, child.gate.as_ref().unwrap()));
    }

    #[tokio::test]
    async fn the_gate_admits_one_model_call_at_a_time() {
        let root = BudgetAccount::open(None, Some(&budget(None, Some(9), None, None))).unwrap();
        let child = BudgetAccount::open(Some(Arc::clone(&root)), None).unwrap();
        let held = root.admit_model_call().await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(20), child.admit_model_call());
        assert!(waiting.await.is_err(), "a second call passed the gate");
        drop(held);
        assert!(child.admit_model_call().await.is_some());
        let free = BudgetAccount::open(None, Some(&budget(None, None, Some(1), None))).unwrap();
        assert!(free.admit_model_call().await.is_none());
    }

    /// One row: limits, what was spent before the check, the boundary,
    /// the breach expected.
    struct Row {
        limits: Budget,
        tokens: (u64, u64),
        tool_calls: u64,
        elapsed_ms: u64,
        boundary: Boundary,
        expect: Option<(BudgetMember, u64, u64)>,
    }

    fn check(row: Row) {
        let account = BudgetAccount::open(None, Some(&row.limits)).unwrap();
        account.charge_tokens(row.tokens.0, row.tokens.1);
        account.spent.lock().unwrap().tool_calls = row.tool_calls;
        let now = account.started + Duration::from_millis(row.elapsed_ms);
        let got = account.check(row.boundary, now).err();
        let expect = row.expect.map(|(member, spent, limit)| Breach {
            member,
            spent,
            limit,
        });
        assert_eq!(got, expect, "{:?} at {:?}", row.limits, row.boundary);
    }

    #[test]
    fn each_member_breaches_at_its_limit_naming_spent_and_limit() {
        use Boundary::{ModelCall, ToolCall};
        use BudgetMember::*;
        let b = budget;
        let rows = [
            // Tokens: a call may start while anything is left.
            (b(Some(10), None, None, None), (9, 0), 0, 0, ModelCall, None),
            (
                b(Some(10), None, None, None),
                (10, 0),
                0,
                0,
                ModelCall,
                Some((InputTokens, 10, 10)),
            ),
            (
                b(Some(10), None, None, None),
                (14, 0),
                0,
                0,
                ToolCall,
                Some((InputTokens, 14, 10)),
            ),
            (b(None, Some(3), None, None), (50, 2), 0, 0, ModelCall, None),
            (
                b(None, Some(3), None, None),
                (0, 7),
                0,
                0,
                ModelCall,
                Some((OutputTokens, 7, 3)),
            ),
            // Tool calls: spent only by tool calls, never past the limit.
            (b(None, None, Some(2), None), (0, 0), 1, 0, ToolCall, None),
            (
                b(None, None, Some(2), None),
                (0, 0),
                2,
                0,
                ToolCall,
                Some((ToolCalls, 2, 2)),
            ),
            (b(None, None, Some(2), None), (0, 0), 2, 0, ModelCall, None),
            // Wall time from the account's start.
            (
                b(None, None, None, Some(100)),
                (0, 0),
                0,
                99,
                ModelCall,
                None,
            ),
            (
                b(None, None, None, Some(100)),
                (0, 0),
                0,
                100,
                ModelCall,
                Some((WallMs, 100, 100)),
            ),
            (
                b(None, None, None, Some(100)),
                (0, 0),
                0,
                250,
                ToolCall,
                Some((WallMs, 250, 100)),
            ),
            // Several spent: reported in member order.
            (
                b(Some(1), Some(1), None, Some(1)),
                (1, 1),
                0,
                5,
                ModelCall,
                Some((InputTokens, 1, 1)),
            ),
            (
                b(Some(5), Some(1), None, Some(1)),
                (1, 1),
                0,
                5,
                ModelCall,
                Some((OutputTokens, 1, 1)),
            ),
        ];
        for (limits, tokens, tool_calls, elapsed_ms, boundary, expect) in rows {
            check(Row {
                limits,
                tokens,
                tool_calls,
                elapsed_ms,
                boundary,
                expect,
            });
        }
    }

    #[test]
    fn a_tool_call_is_counted_only_when_it_passes() {
        let account = BudgetAccount::open(None, Some(&budget(None, None, Some(2), None))).unwrap();
        let now = account.started;
        assert!(account.check(Boundary::ToolCall, now).is_ok());
        assert!(account.check(Boundary::ModelCall, now).is_ok());
        assert!(account.check(Boundary::ToolCall, now).is_ok());
        for _ in 0..3 {
            let breach = account.check(Boundary::ToolCall, now).unwrap_err();
            assert_eq!((breach.spent, breach.limit), (2, 2));
        }
    }

    #[test]
    fn charges_go_up_the_chain_and_a_bigger_child_budget_never_widens() {
        let root =
            BudgetAccount::open(None, Some(&budget(Some(100), None, Some(3), None))).unwrap();
        let wide = budget(Some(1_000), None, Some(50), None);
        let child = BudgetAccount::open(Some(Arc::clone(&root)), Some(&wide)).unwrap();
        let grandchild = BudgetAccount::open(Some(Arc::clone(&child)), Some(&wide)).unwrap();
        let now = root.started;
        grandchild.charge_tokens(60, 1);
        child.charge_tokens(40, 1);
        let breach = grandchild.check(Boundary::ModelCall, now).unwrap_err();
        assert_eq!(
            breach,
            Breach {
                member: BudgetMember::InputTokens,
                spent: 100,
                limit: 100
            }
        );
        assert_eq!(root.spent.lock().unwrap().output_tokens, 2);
        assert_eq!(child.spent.lock().unwrap().input_tokens, 100);
        assert_eq!(grandchild.spent.lock().unwrap().input_tokens, 60);
        // Tool calls: the siblings share the root's three.
        let tools = BudgetAccount::open(None, Some(&budget(None, None, Some(3), None))).unwrap();
        let a = BudgetAccount::open(Some(Arc::clone(&tools)), Some(&wide)).unwrap();
        let b = BudgetAccount::open(Some(Arc::clone(&tools)), None).unwrap();
        assert!(a.check(Boundary::ToolCall, now).is_ok());
        assert!(b.check(Boundary::ToolCall, now).is_ok());
        assert!(a.check(Boundary::ToolCall, now).is_ok());
        assert_eq!(
            b.check(Boundary::ToolCall, now).unwrap_err().member,
            BudgetMember::ToolCalls
        );
        // A child's own smaller limit binds it, not its parent.
        let narrow = BudgetAccount::open(
            Some(Arc::clone(&tools)),
            Some(&budget(Some(5), None, None, None)),
        )
        .unwrap();
        narrow.charge_tokens(5, 0);
        assert_eq!(narrow.check(Boundary::ModelCall, now).unwrap_err().limit, 5);
        assert!(tools.check(Boundary::ModelCall, now).is_ok());
    }

    #[test]
    fn a_childs_wall_time_counts_from_its_ancestors_start() {
        let root = BudgetAccount::open(None, Some(&budget(None, None, None, Some(100)))).unwrap();
        let child = BudgetAccount::open(
            Some(Arc::clone(&root)),
            Some(&budget(None, None, None, Some(1_000))),
        )
        .unwrap();
        let now = root.started + Duration::from_millis(150);
        let breach = child.check(Boundary::ModelCall, now).unwrap_err();
        assert_eq!((breach.member, breach.limit), (BudgetMember::WallMs, 100));
        assert!(breach.spent >= 150);
    }

    /// Many threads reserve tool calls from sibling accounts at once: the
    /// shared limit is met exactly, never passed.
    #[test]
    fn parallel_reservations_never_pass_the_limit() {
        for _ in 0..20 {
            let root =
                BudgetAccount::open(None, Some(&budget(None, None, Some(50), None))).unwrap();
            let children: Vec<_> = (0..4)
                .map(|_| BudgetAccount::open(Some(Arc::clone(&root)), None).unwrap())
                .collect();
            let passed = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for child in &children {
                    for _ in 0..4 {
                        s.spawn(|| {
                            let now = child.started;
                            for _ in 0..20 {
                                if child.check(Boundary::ToolCall, now).is_ok() {
                                    passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                        });
                    }
                }
            });
            assert_eq!(passed.into_inner(), 50);
            assert_eq!(root.spent.lock().unwrap().tool_calls, 50);
        }
    }
}
