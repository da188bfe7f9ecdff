//! [`Driven`]: polls the engine inside a workflow without ever waking the workflow itself.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use agent_engine::CancellationToken;

use crate::rollover::Rollover;

/// The engine's future, polled with a waker of its own.
///
/// The SDK fails a workflow task when the workflow's waker is woken by anything but the SDK
/// (`[TMPRL1100] Nondeterministic future detected`), and after an activation it polls the
/// workflow again only if an SDK command resolved. The engine wakes itself in ways that are
/// deterministic but not the SDK's: a budget settling wakes the branches waiting on it, a
/// steering message pushed by a signal wakes the program waiting for it. So the engine never
/// sees the workflow's waker: its wakes only raise a flag, and this future polls it again,
/// in the same poll, for as long as the flag is raised. The SDK futures inside the engine
/// (activities, timers) raise the same flag when they resolve, and the SDK polls the
/// workflow after each activation that resolved one.
///
/// It also ends the run early when the run is due to continue as new ([`Rollover::due`])
/// and the engine has nothing left to do in this activation.
///
/// And it turns the workflow's cancellation (an SDK future, polled with the workflow's own
/// waker) into the run's abort token.
pub(crate) struct Driven<F> {
    engine: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
    rollover: Arc<Rollover>,
    /// Until it resolved.
    cancelled: Option<Pin<Box<dyn Future<Output = ()>>>>,
    abort: CancellationToken,
}

/// How a driven run ended.
pub(crate) enum Step<T> {
    /// The engine finished.
    Done(T),
    /// The run is handing over to its next run: the engine is idle, no effect in flight.
    ContinueAsNew,
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

impl<F: Future> Driven<F> {
    /// Drives `engine`; `cancelled` resolves when the workflow is cancelled, which cancels
    /// `abort` (the engine's abort token).
    pub(crate) fn new(
        engine: F,
        rollover: Arc<Rollover>,
        cancelled: impl Future<Output = ()> + 'static,
        abort: CancellationToken,
    ) -> Driven<F> {
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        Driven {
            engine: Box::pin(engine),
            waker: Waker::from(flag.clone()),
            flag,
            rollover,
            cancelled: Some(Box::pin(cancelled)),
            abort,
        }
    }
}

impl<F: Future> Future for Driven<F> {
    type Output = Step<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Step<F::Output>> {
        let this = &mut *self;
        // Cancelling the token wakes the engine through its own waker (raising the flag).
        if let Some(cancelled) = &mut this.cancelled
            && cancelled.as_mut().poll(cx).is_ready()
        {
            this.cancelled = None;
            this.abort.cancel();
        }
        // Poll at least once per activation: a resolved SDK future has raised the flag, but
        // polling without it costs one pass and never misses one.
        this.flag.0.store(true, Ordering::Release);
        while this.flag.0.swap(false, Ordering::AcqRel) {
            let mut cx = Context::from_waker(&this.waker);
            if let Poll::Ready(out) = this.engine.as_mut().poll(&mut cx) {
                return Poll::Ready(Step::Done(out));
            }
        }
        if this.rollover.due() {
            return Poll::Ready(Step::ContinueAsNew);
        }
        Poll::Pending
    }
}
