//! [`Clock`]: where the engine reads time and waits for it.

use std::sync::Arc;

use agent_op::BoxFuture;
use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Where a run reads the time and waits for it: the deadlines of `timeout` and time budgets,
/// `op::wait_steering`'s wait, `op::now`, the moment a checkpoint is taken and the durations
/// traced for model and tool calls.
///
/// Without one ([`Config::clock`](crate::Config::clock)), the engine reads tokio's clock
/// directly (so a runtime built with `start_paused` runs it on virtual time). An interpreter
/// whose time is not the machine's plugs in its own: a Temporal workflow reads the
/// workflow's deterministic time and waits on durable timers.
///
/// ```
/// use std::sync::Arc;
/// use agent_engine::{Clock, Config, TokioClock};
///
/// let config = Config::new().clock(Arc::new(TokioClock));
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Now, on the monotonic clock deadlines are measured against.
    fn now(&self) -> Instant;

    /// Now, as a date: what `op::now` returns and when checkpoints are taken.
    fn wall(&self) -> DateTime<Utc>;

    /// A future that completes once `deadline` has passed (at once if it has).
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()>;
}

/// Tokio's clock and timers: what runs use without a [`Clock`] of their own.
#[derive(Copy, Clone, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> DateTime<Utc> {
        agent_op::trace::now()
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// The clock of one run: tokio's, read directly (no dynamic call on the hot path), unless the
/// config brought its own.
#[derive(Clone, Default)]
pub(crate) struct RunClock(Option<Arc<dyn Clock>>);

impl RunClock {
    pub(crate) fn new(clock: Option<Arc<dyn Clock>>) -> RunClock {
        RunClock(clock)
    }

    #[inline]
    pub(crate) fn now(&self) -> Instant {
        match &self.0 {
            None => Instant::now(),
            Some(clock) => clock.now(),
        }
    }

    #[inline]
    pub(crate) fn wall(&self) -> DateTime<Utc> {
        match &self.0 {
            None => agent_op::trace::now(),
            Some(clock) => clock.wall(),
        }
    }

    /// Boxed either way: most awaits have no deadline, and a timer is large to carry in
    /// every effect's future.
    pub(crate) fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        match &self.0 {
            None => Box::pin(tokio::time::sleep_until(deadline)),
            Some(clock) => clock.sleep_until(deadline),
        }
    }
}
