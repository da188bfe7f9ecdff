//! The current time as traces stamp it.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};

use crate::trace::Timestamp;

const SECS_PER_DAY: u64 = 86_400;

thread_local! {
    /// The last day this thread stamped (days since the epoch) and its calendar date.
    static DAY: Cell<Option<(u64, NaiveDate)>> = const { Cell::new(None) };
}

/// The current time in UTC, as [`Utc::now`] reads it.
///
/// A run stamps every event and branch, and working out the calendar date is most of what
/// [`Utc::now`] costs beyond reading the clock; this works it out once per day per thread.
pub fn now() -> Timestamp {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => DAY.with(|day| stamp(since, day)),
        // A clock set before 1970: rare enough to take chrono's own path.
        Err(_) => Utc::now(),
    }
}

/// `since` the epoch as a timestamp, taking the date from `day` when it is the same day.
fn stamp(since: Duration, day: &Cell<Option<(u64, NaiveDate)>>) -> Timestamp {
    let secs = since.as_secs();
    let days = secs / SECS_PER_DAY;
    let date = match day.get() {
        Some((cached, date)) if cached == days => date,
        _ => {
            let Some(midnight) = i64::try_from(secs - secs % SECS_PER_DAY)
                .ok()
                .and_then(|s| DateTime::from_timestamp(s, 0))
            else {
                return DateTime::<Utc>::MAX_UTC;
            };
            let date = midnight.date_naive();
            day.set(Some((days, date)));
            date
        }
    };
    // Both in range: the remainder is under a day and sub-second nanos under 10^9.
    let time = NaiveTime::from_num_seconds_from_midnight_opt(
        (secs % SECS_PER_DAY) as u32,
        since.subsec_nanos(),
    )
    .unwrap_or(NaiveTime::MIN);
    NaiveDateTime::new(date, time).and_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_agree_with_chrono_across_days_and_with_a_stale_cache() {
        let day = Cell::new(None);
        // Midnight, a second before and after it, leap days, and a jump back in time (the
        // cache holds a later day than the one stamped).
        let cases = [
            (1_764_633_599, 999_999_999),
            (1_764_633_600, 0),
            (1_764_633_601, 123_456_789),
            (951_782_400, 5),
            (951_868_799, 7),
            (0, 0),
            (4_102_444_800, 1),
            (1_764_633_600, 42),
        ];
        for (secs, nanos) in cases {
            let got = stamp(Duration::new(secs, nanos), &day);
            let want = DateTime::from_timestamp(secs as i64, nanos).unwrap();
            assert_eq!(got, want, "{secs}.{nanos:09}");
        }
    }

    #[test]
    fn now_is_the_wall_clock() {
        let before = Utc::now();
        let stamped = now();
        let after = Utc::now();
        assert!(
            before <= stamped && stamped <= after,
            "{before} {stamped} {after}"
        );
    }
}
