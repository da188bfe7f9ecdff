//! Backoff between the attempts of an operation that met a transient error (SQLite's
//! "database is locked", PostgreSQL's deadlocks and serialization failures).

use std::time::{Duration, Instant};

/// First pause after a transient error; doubles up to [`MAX_DELAY`], with ±50 % jitter.
const FIRST_DELAY: Duration = Duration::from_millis(2);
const MAX_DELAY: Duration = Duration::from_millis(250);

/// Backoff between attempts of an operation that met a transient error: exponential (from 2 ms,
/// doubling up to 250 ms) with ±50 % jitter, until `limit` has passed since the first try.
pub(crate) struct Backoff {
    deadline: Instant,
    delay: Duration,
}

impl Backoff {
    /// Starts the clock: retries are allowed for `limit` from now.
    pub(crate) fn new(limit: Duration) -> Backoff {
        Backoff {
            deadline: Instant::now() + limit,
            delay: FIRST_DELAY,
        }
    }

    /// Sleeps before the next attempt; `false` (without sleeping) once the time is up.
    pub(crate) async fn wait(&mut self) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let jittered = self.delay.mul_f64(0.5 + fastrand::f64());
        tokio::time::sleep(jittered.min(left)).await;
        self.delay = (self.delay * 2).min(MAX_DELAY);
        true
    }
}
