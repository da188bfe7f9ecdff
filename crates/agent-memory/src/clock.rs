//! Where backends get the time: [`SystemClock`] normally, [`ManualClock`] in tests.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_op::Timestamp;
use chrono::{DateTime, Utc};

/// A source of the current time for stamping `created_at` and `accessed_at`.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Copy, Clone, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Utc::now()
    }
}

/// A clock that only moves when told to; clones share the time.
///
/// ```
/// use std::time::Duration;
/// use agent_memory::{Clock, ManualClock};
///
/// let clock = ManualClock::at_unix_seconds(1_700_000_000);
/// let later = clock.clone();
/// later.advance(Duration::from_secs(60));
/// assert_eq!(clock.now().timestamp(), 1_700_000_060);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock showing `at`.
    pub fn new(at: Timestamp) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(at)),
        }
    }

    /// A clock showing `seconds` after the Unix epoch (the epoch itself if out of range).
    pub fn at_unix_seconds(seconds: i64) -> ManualClock {
        ManualClock::new(DateTime::from_timestamp(seconds, 0).unwrap_or_default())
    }

    /// Moves the clock forward by `by` (saturating at the latest representable time).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let step = chrono::Duration::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
        *now = now
            .checked_add_signed(step)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
    }

    /// Sets the clock to `at` (which may be earlier).
    pub fn set(&self, at: Timestamp) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `at` truncated to whole microseconds: the precision both backends store.
pub(crate) fn to_micros(at: Timestamp) -> i64 {
    at.timestamp_micros()
}

/// The time `micros` microseconds after the epoch (the epoch if out of range, which a
/// value written by [`to_micros`] never is).
pub(crate) fn from_micros(micros: i64) -> Timestamp {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

/// `clock.now()` truncated to microseconds.
pub(crate) fn now_micros(clock: &dyn Clock) -> i64 {
    to_micros(clock.now())
}

/// The `accessed_at` cutoff of a `max_age` rule at `now`: entries accessed before it are
/// removed. `None` when the age reaches before any representable time (nothing is that old).
pub(crate) fn age_cutoff(now: i64, max_age: Duration) -> Option<i64> {
    let age = i64::try_from(max_age.as_micros()).ok()?;
    now.checked_sub(age)
}

/// `time` in µs since the epoch, rounded up: stored times are whole µs, so `stored >= t` and
/// `stored < t` give the same answers for `ceil_micros(t)` as for `t` itself.
pub(crate) fn ceil_micros(time: chrono::DateTime<chrono::Utc>) -> i64 {
    let floor = time.timestamp_micros();
    if time.timestamp_subsec_nanos() % 1_000 == 0 {
        floor
    } else {
        floor.saturating_add(1)
    }
}
