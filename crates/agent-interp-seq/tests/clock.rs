//! A run reads time only through its [`Clock`] and draws `op::random` from its seed.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use agent_interp_seq::{Clock, Config, run};
use agent_op::{BoxFuture, Op, op};
use chrono::{DateTime, TimeZone, Utc};
use tokio::time::Instant;

/// A clock that jumps to any deadline it is asked to wait for, at once: an hour-long
/// timeout passes in no real time, and the dates it gives are its own.
struct JumpingClock {
    start: Instant,
    epoch: DateTime<Utc>,
    offset: Mutex<Duration>,
}

impl JumpingClock {
    fn new() -> Arc<JumpingClock> {
        Arc::new(JumpingClock {
            start: Instant::now(),
            epoch: Utc.with_ymd_and_hms(2001, 2, 3, 4, 5, 6).unwrap(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    fn offset(&self) -> Duration {
        *self.offset.lock().unwrap()
    }
}

impl Clock for JumpingClock {
    fn now(&self) -> Instant {
        self.start + self.offset()
    }

    fn wall(&self) -> DateTime<Utc> {
        self.epoch + self.offset()
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        let mut offset = self.offset.lock().unwrap();
        *offset = (*offset).max(deadline.saturating_duration_since(self.start));
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn deadlines_and_dates_come_from_the_configured_clock() {
    let clock = JumpingClock::new();
    let config = Config::new().clock(clock.clone());
    // On tokio's clock this waits ten minutes; on the jumping clock the deadline passes at
    // once, before the hour-long wait inside it.
    let program: Op<(), (bool, DateTime<Utc>)> = op::timeout(
        Duration::from_secs(600),
        op::wait_steering(Duration::from_secs(3600)),
    )
    .and_then(|waited| op::now().map(move |now| (waited.is_err(), now)));
    let outcome = tokio::time::timeout(Duration::from_secs(60), run(&config, (), program))
        .await
        .expect("the run does not wait on tokio's clock")
        .unwrap();
    let (timed_out, now) = outcome.value;
    assert!(timed_out, "the 10-minute timeout cut the hour-long wait");
    assert_eq!(now, clock.epoch + Duration::from_secs(600));
    assert_eq!(clock.offset(), Duration::from_secs(600));
}

#[tokio::test]
async fn a_steering_wait_ends_on_the_configured_clock() {
    let clock = JumpingClock::new();
    let config = Config::new().clock(clock.clone());
    let program: Op<(), (bool, DateTime<Utc>)> = op::wait_steering(Duration::from_secs(5))
        .and_then(|message| op::now().map(move |now| (message.is_none(), now)));
    let outcome = tokio::time::timeout(Duration::from_secs(60), run(&config, (), program))
        .await
        .expect("the run does not wait on tokio's clock")
        .unwrap();
    assert_eq!(outcome.value, (true, clock.epoch + Duration::from_secs(5)));
}

#[tokio::test]
async fn a_seeded_run_draws_the_same_numbers() {
    let draw =
        || -> Op<(), Vec<u64>> { op::random().and_then(|a| op::random().map(move |b| vec![a, b])) };
    let seeded = Config::new().random_seed(7);
    let first = run(&seeded, (), draw()).await.unwrap().value;
    let second = run(&seeded, (), draw()).await.unwrap().value;
    assert_eq!(first, second, "each run starts the seeded sequence afresh");
    assert_ne!(first[0], first[1]);
    let other = run(&Config::new().random_seed(8), (), draw())
        .await
        .unwrap()
        .value;
    assert_ne!(first, other);
}
