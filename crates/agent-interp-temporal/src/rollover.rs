//! Continue-as-new: a long run hands its journal to a fresh workflow run before its history
//! grows past what Temporal keeps.
//!
//! A workflow's history holds every activity it ran; Temporal warns at 10,240 events and
//! fails the run at 51,200. A program's continuation is a closure and cannot be serialized,
//! so what the next run carries is the run's *journal*: every workflow runs the engine
//! durably into a [`MemoryJournal`](agent_journal::MemoryJournal), and the next run resumes
//! from it (answered from the journal, no activity runs again) and goes on live. To the
//! program this is invisible: same result, state and trace as one long run.
//!
//! The hand-over happens at a quiet moment, so nothing is lost or run twice: once the run
//! has started [`Rollover::after`] effects (or the server suggests continuing as new), new
//! effects are held back instead of started; when no activity is in flight any more and the
//! engine can make no progress of its own, the driver ends the run with continue-as-new.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use agent_op::Steering;
use agent_op::journal::Entry;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// What a run that continues as new hands to the next one.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Carried {
    /// The journal so far (request summaries dropped: they only explain divergences, and a
    /// model call's summary lists every message, so keeping them would grow the carried
    /// journal with the square of the conversation).
    pub entries: Vec<Entry>,
    /// Steering messages that arrived but were not taken yet.
    pub steering: Vec<Steering>,
    /// The first run's random seed.
    pub seed: u64,
}

impl Carried {
    /// The journal `entries`, made compact for carrying.
    pub(crate) fn compact(entries: Vec<Entry>) -> Vec<Entry> {
        entries
            .into_iter()
            .map(|mut entry| {
                entry.request = Box::<RawValue>::default();
                entry
            })
            .collect()
    }
}

/// When a run continues as new, and whether it is time.
pub(crate) struct Rollover {
    /// Effects a run starts before it continues as new, or sooner on the server's
    /// suggestion (`None`: never).
    after: Option<usize>,
    started: AtomicUsize,
    in_flight: AtomicUsize,
    draining: AtomicBool,
    /// The hand-over was given up (the journal is too large to carry): held effects go on
    /// and the run never tries again.
    abandoned: AtomicBool,
    /// The wakers of held effects.
    held: Mutex<Vec<Waker>>,
}

impl Rollover {
    pub(crate) fn new(after: Option<usize>) -> Rollover {
        Rollover {
            after,
            started: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
        }
    }

    /// Asks to start an effect. `None` once the run is handing over: the caller holds the
    /// effect back (the next run makes it). Otherwise the effect counts as in flight until
    /// the returned guard is dropped. `suggested` is the server's continue-as-new hint.
    pub(crate) fn admit(self: &Arc<Self>, suggested: bool) -> Option<InFlight> {
        if self.draining.load(Ordering::Acquire) {
            return None;
        }
        let started = self.started.fetch_add(1, Ordering::AcqRel) + 1;
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let due = self
            .after
            .is_some_and(|after| suggested || started >= after);
        if due && !self.abandoned.load(Ordering::Acquire) {
            // This effect still runs; the ones after it wait for the next run.
            self.draining.store(true, Ordering::Release);
        }
        Some(InFlight(self.clone()))
    }

    /// Starts an effect: at once, or once the hand-over is given up. While the run hands
    /// over, the future stays pending (the next run makes the effect).
    pub(crate) async fn start(self: &Arc<Self>, suggested: bool) -> InFlight {
        loop {
            if let Some(in_flight) = self.admit(suggested) {
                return in_flight;
            }
            std::future::poll_fn(|cx| {
                if self.abandoned.load(Ordering::Acquire) {
                    return Poll::Ready(());
                }
                let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                held.push(cx.waker().clone());
                Poll::Pending
            })
            .await;
        }
    }

    /// Gives the hand-over up: held effects start, and the run goes on in this workflow run
    /// (its history keeps growing).
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
        self.draining.store(false, Ordering::Release);
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for waker in held {
            waker.wake();
        }
    }

    /// Whether the run should continue as new now: it is handing over and no effect is in
    /// flight (the driver asks only when the engine has nothing else to do).
    pub(crate) fn due(&self) -> bool {
        self.draining.load(Ordering::Acquire) && self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// An effect in flight (see [`Rollover::admit`]).
pub(crate) struct InFlight(Arc<Rollover>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_over_after_the_last_admitted_effect_ends() {
        let rollover = Arc::new(Rollover::new(Some(2)));
        let first = rollover.admit(false).expect("first effect starts");
        assert!(!rollover.due());
        let second = rollover.admit(false).expect("second effect starts");
        assert!(
            rollover.admit(false).is_none(),
            "the third waits for the next run"
        );
        drop(first);
        assert!(!rollover.due(), "one effect is still in flight");
        drop(second);
        assert!(rollover.due());
    }

    #[test]
    fn the_servers_suggestion_starts_the_hand_over_unless_it_is_off() {
        let rollover = Arc::new(Rollover::new(Some(100)));
        drop(rollover.admit(false));
        assert!(!rollover.due());
        drop(rollover.admit(true));
        assert!(rollover.due());
        assert!(rollover.admit(false).is_none());

        let off = Arc::new(Rollover::new(None));
        for _ in 0..1000 {
            drop(off.admit(true));
        }
        assert!(!off.due());
    }

    #[test]
    fn giving_the_hand_over_up_releases_held_effects_for_good() {
        let rollover = Arc::new(Rollover::new(Some(1)));
        drop(rollover.admit(false));
        let mut held = Box::pin(rollover.start(false));
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(held.as_mut().poll(&mut cx).is_pending());
        assert!(rollover.due());
        rollover.abandon();
        assert!(held.as_mut().poll(&mut cx).is_ready());
        assert!(!rollover.due());
        drop(held);
        drop(rollover.admit(true));
        assert!(!rollover.due(), "never again once given up");
    }
}
