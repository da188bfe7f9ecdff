//! `limit` and `timeout` scopes: deadlines and shared budgets.
//!
//! Budgets follow the reserve/settle rules documented on [`agent_op::op::limit`]: a call
//! reserves its worst case on every enclosing budget before it starts and settles with its real
//! usage after, so concurrent branches share one budget exactly.
//!
//! All accounting saturates: worst cases of `u64::MAX` (what pricing reports for a bound it
//! cannot compute) and sums near it must never wrap, or a full budget would look empty.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_op::{Budget, Exhausted, MicroUsd, Resource, TimedOut, Usage};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Identifies one entered `limit` or `timeout`, unique within a run.
pub(crate) type ScopeId = u64;

/// How a scope ended early.
#[derive(Clone, Debug)]
pub(crate) enum ScopeExit {
    Exhausted(Exhausted),
    TimedOut(TimedOut),
}

/// A scope in force: what branches inherit from their parent so that limits and deadlines
/// around a fork apply inside it.
#[derive(Clone)]
pub(crate) struct ActiveScope {
    pub(crate) id: ScopeId,
    pub(crate) started: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) budget: Option<Arc<BudgetCell>>,
    pub(crate) is_timeout: bool,
    /// For a `with_tools` scope, the tools (and capabilities) it allows.
    pub(crate) tools: Option<Arc<agent_op::ToolScope>>,
    /// The scope's `tracing` span, closed when the scope (and every branch inheriting it)
    /// is left.
    pub(crate) span: tracing::Span,
    /// For a sub-agent answering a tool call, the `execute_tool` span around `span`.
    pub(crate) outer_span: Option<tracing::Span>,
    /// The span new spans inside the scope nest under: `span` when a subscriber records
    /// it, else the nearest recorded span around it (see [`spans::nest`]).
    ///
    /// [`spans::nest`]: crate::engine::spans::nest
    pub(crate) nest: tracing::Span,
}

impl ActiveScope {
    /// How this scope ends when its deadline passes.
    pub(crate) fn deadline_exit(&self, now: Instant) -> ScopeExit {
        let limit = self
            .deadline
            .map(|d| d.saturating_duration_since(self.started))
            .unwrap_or_default();
        if self.is_timeout {
            ScopeExit::TimedOut(TimedOut { limit })
        } else {
            ScopeExit::Exhausted(Exhausted {
                resource: Resource::Time,
                spent: millis(now.saturating_duration_since(self.started)),
                limit: millis(limit),
            })
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A budget's counters, shared by every branch inside its `limit`.
pub(crate) struct BudgetCell {
    budget: Budget,
    spent: Mutex<Spent>,
    settled: Notify,
}

#[derive(Default)]
struct Spent {
    calls: u64,
    tokens: u64,
    cost: MicroUsd,
    in_flight: u64,
    reserved_tokens: u64,
    reserved_cost: MicroUsd,
    /// In-flight calls whose worst case is unknown (they reserve everything).
    unbounded_tokens: u64,
    unbounded_cost: u64,
}

impl Spent {
    /// Takes one call's reservation back out of the in-flight counters.
    fn unreserve(&mut self, worst: WorstCase) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match worst.tokens {
            Some(t) => self.reserved_tokens = self.reserved_tokens.saturating_sub(t),
            None => self.unbounded_tokens = self.unbounded_tokens.saturating_sub(1),
        }
        match worst.cost {
            Some(c) => self.reserved_cost = MicroUsd(self.reserved_cost.0.saturating_sub(c.0)),
            None => self.unbounded_cost = self.unbounded_cost.saturating_sub(1),
        }
    }
}

/// The most a call can use, when known.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct WorstCase {
    pub(crate) tokens: Option<u64>,
    pub(crate) cost: Option<MicroUsd>,
}

pub(crate) enum Admission {
    Admitted,
    Exhausted(Exhausted),
    /// Other calls in flight may leave room; wait for one to settle.
    Wait,
}

impl BudgetCell {
    pub(crate) fn new(budget: Budget) -> Option<Arc<BudgetCell>> {
        let limits_calls =
            budget.calls.is_some() || budget.tokens.is_some() || budget.cost.is_some();
        limits_calls.then(|| {
            Arc::new(BudgetCell {
                budget,
                spent: Mutex::new(Spent::default()),
                settled: Notify::new(),
            })
        })
    }

    fn lock(&self) -> MutexGuard<'_, Spent> {
        // Counters are updated in single statements; a panic cannot leave them torn.
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tries to admit one call with the given worst case.
    pub(crate) fn try_reserve(&self, worst: WorstCase) -> Admission {
        let mut s = self.lock();
        if let Some(limit) = self.budget.calls {
            if s.calls.saturating_add(s.in_flight) >= limit {
                return Admission::Exhausted(Exhausted {
                    resource: Resource::Calls,
                    spent: s.calls.saturating_add(s.in_flight),
                    limit,
                });
            }
        }
        if let Some(limit) = self.budget.tokens {
            if s.tokens >= limit {
                return Admission::Exhausted(Exhausted {
                    resource: Resource::Tokens,
                    spent: s.tokens,
                    limit,
                });
            }
            let crowded = s.unbounded_tokens > 0
                || (s.in_flight > 0
                    && (worst.tokens.is_none()
                        || s.tokens
                            .saturating_add(s.reserved_tokens)
                            .saturating_add(worst.tokens.unwrap_or(0))
                            > limit));
            if crowded {
                return Admission::Wait;
            }
        }
        if let Some(limit) = self.budget.cost {
            if s.cost >= limit {
                return Admission::Exhausted(Exhausted {
                    resource: Resource::Cost,
                    spent: s.cost.0,
                    limit: limit.0,
                });
            }
            let crowded = s.unbounded_cost > 0
                || (s.in_flight > 0
                    && (worst.cost.is_none()
                        || s.cost
                            .saturating_add(s.reserved_cost)
                            .saturating_add(worst.cost.unwrap_or_default())
                            > limit));
            if crowded {
                return Admission::Wait;
            }
        }
        s.in_flight = s.in_flight.saturating_add(1);
        match worst.tokens {
            Some(t) => s.reserved_tokens = s.reserved_tokens.saturating_add(t),
            None => s.unbounded_tokens = s.unbounded_tokens.saturating_add(1),
        }
        match worst.cost {
            Some(c) => s.reserved_cost = s.reserved_cost.saturating_add(c),
            None => s.unbounded_cost = s.unbounded_cost.saturating_add(1),
        }
        Admission::Admitted
    }

    /// Gives back a reservation and records what the call really used. Returns the exceeded
    /// limit, if the call went over one.
    pub(crate) fn settle(
        &self,
        worst: WorstCase,
        usage: Option<Usage>,
        cost: Option<MicroUsd>,
    ) -> Option<Exhausted> {
        let exceeded = {
            let mut s = self.lock();
            s.unreserve(worst);
            s.calls = s.calls.saturating_add(1);
            if let Some(usage) = usage {
                s.tokens = s.tokens.saturating_add(usage.total());
            }
            if let Some(cost) = cost {
                s.cost = s.cost.saturating_add(cost);
            }
            self.exceeded(&s)
        };
        self.settled.notify_waiters();
        exceeded
    }

    fn exceeded(&self, s: &Spent) -> Option<Exhausted> {
        if let Some(limit) = self.budget.tokens {
            if s.tokens > limit {
                return Some(Exhausted {
                    resource: Resource::Tokens,
                    spent: s.tokens,
                    limit,
                });
            }
        }
        if let Some(limit) = self.budget.cost {
            if s.cost > limit {
                return Some(Exhausted {
                    resource: Resource::Cost,
                    spent: s.cost.0,
                    limit: limit.0,
                });
            }
        }
        None
    }

    /// Gives back a reservation for a call that never started.
    pub(crate) fn release(&self, worst: WorstCase) {
        self.lock().unreserve(worst);
        self.settled.notify_waiters();
    }

    /// Resolves after the next settlement. Create it *before* checking admission so a
    /// settlement in between is not missed.
    pub(crate) fn settled(&self) -> tokio::sync::futures::Notified<'_> {
        self.settled.notified()
    }
}

/// An admitted call's reservations on every enclosing budget. Dropping it unsettled (the call
/// was cancelled) counts the call, with unknown usage, and frees its reservation.
pub(crate) struct Reservation {
    cells: Vec<(ScopeId, Arc<BudgetCell>)>,
    worst: WorstCase,
}

impl Reservation {
    pub(crate) fn new(worst: WorstCase) -> Reservation {
        Reservation {
            cells: Vec::new(),
            worst,
        }
    }

    pub(crate) fn push(&mut self, scope: ScopeId, cell: Arc<BudgetCell>) {
        self.cells.push((scope, cell));
    }

    /// Gives the reservations back without counting a call (the call never started).
    pub(crate) fn release(mut self) {
        for (_, cell) in self.cells.drain(..) {
            cell.release(self.worst);
        }
    }

    /// Records the call's real usage; returns the outermost exceeded limit, if any.
    pub(crate) fn settle(
        mut self,
        usage: Option<Usage>,
        cost: Option<MicroUsd>,
    ) -> Option<(ScopeId, Exhausted)> {
        let mut outermost = None;
        for (scope, cell) in self.cells.drain(..) {
            if let Some(exhausted) = cell.settle(self.worst, usage, cost) {
                outermost.get_or_insert((scope, exhausted));
            }
        }
        outermost
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        for (_, cell) in self.cells.drain(..) {
            cell.settle(self.worst, None, None);
        }
    }
}
