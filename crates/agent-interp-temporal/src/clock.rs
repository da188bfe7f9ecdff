//! [`WorkflowClock`]: the engine's clock inside a workflow — the workflow's deterministic
//! time, and durable timers for deadlines and waits.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agent_engine::Clock;
use agent_op::BoxFuture;
use chrono::{DateTime, Utc};
use send_wrapper::SendWrapper;
use tokio::time::Instant;

use crate::proxy::CancelOnDrop;
use crate::workflow::Ctx;

/// Reads the workflow's time (the same on every replay) and waits on server-side timers, so
/// a `timeout` or time budget survives a worker crash and fires on whichever worker holds
/// the workflow then.
///
/// Deadlines are tokio [`Instant`]s to the engine; this clock maps workflow time onto them
/// from a base taken when the workflow (re)started, so only differences of workflow time
/// matter.
pub(crate) struct WorkflowClock {
    ctx: Arc<SendWrapper<Ctx>>,
    base: Instant,
    started: SystemTime,
}

impl WorkflowClock {
    pub(crate) fn new(ctx: Ctx) -> WorkflowClock {
        let started = ctx.workflow_time().unwrap_or(SystemTime::UNIX_EPOCH);
        WorkflowClock {
            ctx: Arc::new(SendWrapper::new(ctx)),
            base: Instant::now(),
            started,
        }
    }

    fn time(&self) -> SystemTime {
        self.ctx.workflow_time().unwrap_or(self.started)
    }
}

impl Clock for WorkflowClock {
    fn now(&self) -> Instant {
        self.base
            + self
                .time()
                .duration_since(self.started)
                .unwrap_or(Duration::ZERO)
    }

    fn wall(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(self.time())
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        let wait = deadline.saturating_duration_since(self.now());
        if wait.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let ctx = self.ctx.clone();
        Box::pin(SendWrapper::new(async move {
            CancelOnDrop(Box::pin(ctx.timer(wait))).await;
        }))
    }
}
