//! The resilience layers on test providers, with tokio's clock paused so waits are exact and
//! instant.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_op::{BoxFuture, Cause, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use agent_provider::layers::{ConcurrencyLimit, Fallback, ProviderExt, RateLimit, Retry, Timeout};
use agent_provider::{HttpError, ScriptedProvider};
use tokio::time::Instant;

fn prompt() -> Prompt {
    Prompt::new().user("hi")
}

fn transport() -> ProviderError {
    ProviderError::transport("connection reset")
}

/// What a server answering `status` becomes.
fn refused(status: u16, body: &str, headers: Vec<(String, String)>) -> ProviderError {
    ProviderError::Refused {
        message: body.to_owned(),
        retryable: status >= 500,
        cause: Some(Cause::new(HttpError::new(status, headers, body))),
    }
}

fn rate_limited(after: Option<Duration>) -> ProviderError {
    ProviderError::RateLimited {
        retry_after: after,
        message: "slow down".into(),
        cause: None,
    }
}

/// A provider that answers each call from a list of outcomes, streams `Delta::Text` pieces
/// before failing when told to, and records when each call started.
struct Flaky {
    outcomes: Mutex<Vec<Step>>,
    starts: Mutex<Vec<Instant>>,
    latency: Duration,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    cost: Option<MicroUsd>,
}

#[derive(Clone)]
enum Step {
    Ok(&'static str),
    Fail(ProviderError),
    /// Delivers a delta, then fails.
    FailAfterDelta(ProviderError),
}

impl Flaky {
    fn new(outcomes: Vec<Step>) -> Flaky {
        Flaky {
            outcomes: Mutex::new(outcomes.into_iter().rev().collect()),
            starts: Mutex::new(Vec::new()),
            latency: Duration::ZERO,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            cost: None,
        }
    }

    fn latency(mut self, latency: Duration) -> Flaky {
        self.latency = latency;
        self
    }

    fn calls(&self) -> usize {
        self.starts.lock().unwrap().len()
    }

    fn starts(&self) -> Vec<Instant> {
        self.starts.lock().unwrap().clone()
    }

    async fn run(
        &self,
        on_delta: Option<&mut (dyn FnMut(Delta) + Send)>,
    ) -> Result<Response, ProviderError> {
        self.starts.lock().unwrap().push(Instant::now());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let step =
            self.outcomes
                .lock()
                .unwrap()
                .pop()
                .unwrap_or(Step::Fail(ProviderError::Unexpected {
                    message: "no more steps".into(),
                }));
        match step {
            Step::Ok(text) => {
                if let Some(on_delta) = on_delta {
                    on_delta(Delta::Text(text.into()));
                }
                Ok(Response::text(text))
            }
            Step::Fail(err) => Err(err),
            Step::FailAfterDelta(err) => {
                if let Some(on_delta) = on_delta {
                    on_delta(Delta::Text("partial".into()));
                }
                Err(err)
            }
        }
    }
}

impl Provider for Flaky {
    fn chat<'a>(
        &'a self,
        _: &'a str,
        _: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.run(None))
    }

    fn chat_stream<'a>(
        &'a self,
        _: &'a str,
        _: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.run(Some(on_delta)))
    }

    fn max_cost(&self, _: &str, _: &Prompt) -> Option<MicroUsd> {
        self.cost
    }
}

fn retry<P>(inner: P) -> Retry<P> {
    Retry::new(inner)
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(1))
        .jitter_seed(1)
}

#[tokio::test(start_paused = true)]
async fn retry_backs_off_with_capped_jitter_until_success() {
    let flaky = Arc::new(Flaky::new(vec![
        Step::Fail(transport()),
        Step::Fail(ProviderError::Timeout {
            after: Duration::from_secs(1),
        }),
        Step::Fail(refused(503, "", vec![])),
        Step::Ok("done"),
    ]));
    let provider = retry(flaky.clone()).max_attempts(4);
    let reply = provider.chat("m", &prompt()).await.unwrap();
    assert_eq!(reply.content, "done");
    let starts = flaky.starts();
    assert_eq!(starts.len(), 4);
    // Waits before retries 1, 2, 3 are at most 100, 200, 400 ms (full jitter).
    for (i, cap) in [100u64, 200, 400].into_iter().enumerate() {
        let wait = starts[i + 1] - starts[i];
        assert!(wait <= Duration::from_millis(cap), "wait {i}: {wait:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn retry_honours_retry_after_exactly() {
    let flaky = Arc::new(Flaky::new(vec![
        Step::Fail(rate_limited(Some(Duration::from_secs(7)))),
        Step::Fail(refused(503, "", vec![("retry-after".into(), "3".into())])),
        Step::Ok("ok"),
    ]));
    let started = Instant::now();
    retry(flaky.clone()).chat("m", &prompt()).await.unwrap();
    let starts = flaky.starts();
    assert_eq!(
        starts[1] - starts[0],
        Duration::from_secs(7),
        "above max_delay, still honoured"
    );
    assert_eq!(
        starts[2] - starts[1],
        Duration::from_secs(3),
        "Retry-After on a 503"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn retry_gives_up_on_waits_beyond_its_limits() {
    // The server asks for more than max_retry_after.
    let flaky = Arc::new(Flaky::new(vec![
        Step::Fail(rate_limited(Some(Duration::from_secs(120)))),
        Step::Ok("never"),
    ]));
    let started = Instant::now();
    let err = retry(flaky.clone()).chat("m", &prompt()).await.unwrap_err();
    assert_eq!(err, rate_limited(Some(Duration::from_secs(120))));
    assert_eq!(flaky.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO, "no pointless wait");

    // The deadline: each attempt takes 1 s; no retry starts after 2.5 s, and the attempt
    // running at 2.5 s is cut there.
    let flaky =
        Arc::new(Flaky::new(vec![Step::Fail(transport()); 10]).latency(Duration::from_secs(1)));
    let started = Instant::now();
    let err = retry(flaky.clone())
        .max_attempts(10)
        .deadline(Duration::from_millis(2500))
        .chat("m", &prompt())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::Timeout {
            after: Duration::from_millis(2500)
        }
    );
    assert_eq!(started.elapsed(), Duration::from_millis(2500));
    // Attempt 3 starts before 2.5 s (at most 2 s of calls and 300 ms of backoff); a fourth
    // would start after 3 s.
    let starts = flaky.starts();
    assert_eq!(starts.len(), 3);
    assert!(starts[2].duration_since(starts[0]) <= Duration::from_millis(2500));

    // max_attempts.
    let flaky = Arc::new(Flaky::new(vec![Step::Fail(transport()); 10]));
    retry(flaky.clone())
        .max_attempts(5)
        .chat("m", &prompt())
        .await
        .unwrap_err();
    assert_eq!(flaky.calls(), 5);
}

#[tokio::test(start_paused = true)]
async fn retry_deadline_cuts_an_attempt_in_flight() {
    // One attempt would take the full 10 min of a request timeout; the deadline is 5 s.
    let slow = Arc::new(Flaky::new(vec![Step::Ok("late")]).latency(Duration::from_secs(600)));
    let started = Instant::now();
    let err = retry(slow.clone())
        .deadline(Duration::from_secs(5))
        .chat("m", &prompt())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::Timeout {
            after: Duration::from_secs(5)
        }
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(slow.calls(), 1, "no attempt after the deadline");

    // Streams too; and an attempt that ends in time is unaffected.
    let slow = Arc::new(Flaky::new(vec![Step::Ok("late")]).latency(Duration::from_secs(600)));
    let started = Instant::now();
    let err = retry(slow)
        .deadline(Duration::from_secs(5))
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let quick = Arc::new(
        Flaky::new(vec![Step::Fail(transport()), Step::Ok("in time")])
            .latency(Duration::from_secs(1)),
    );
    let reply = retry(quick.clone())
        .deadline(Duration::from_secs(5))
        .chat("m", &prompt())
        .await
        .unwrap();
    assert_eq!(reply.content, "in time");
    assert_eq!(quick.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_never_retries_what_cannot_succeed() {
    for err in [
        ProviderError::Authentication {
            message: "bad key".into(),
            cause: None,
        },
        ProviderError::QuotaExhausted {
            message: "no credit".into(),
            cause: None,
        },
        ProviderError::ContextLengthExceeded {
            message: "too long".into(),
            cause: None,
        },
        ProviderError::decode("bad json", "{"),
        refused(400, "bad request", vec![]),
    ] {
        let flaky = Arc::new(Flaky::new(vec![Step::Fail(err.clone()), Step::Ok("no")]));
        let got = retry(flaky.clone()).chat("m", &prompt()).await.unwrap_err();
        assert_eq!(got, err);
        assert_eq!(flaky.calls(), 1, "{err:?} was retried");
    }
}

#[tokio::test(start_paused = true)]
async fn retry_of_a_stream_only_before_the_first_delta() {
    // Failed before any delta: retried, and the caller sees only the successful attempt.
    let flaky = Arc::new(Flaky::new(vec![Step::Fail(transport()), Step::Ok("whole")]));
    let mut deltas = Vec::new();
    let reply = retry(flaky.clone())
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(reply.content, "whole");
    assert_eq!(deltas, [Delta::Text("whole".into())]);
    assert_eq!(flaky.calls(), 2);

    // Failed after a delta: a retry would repeat the start of the reply, so the error returns.
    let flaky = Arc::new(Flaky::new(vec![
        Step::FailAfterDelta(transport()),
        Step::Ok("whole"),
    ]));
    let mut deltas = Vec::new();
    let err = retry(flaky.clone())
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap_err();
    assert_eq!(err, transport());
    assert_eq!(deltas, [Delta::Text("partial".into())]);
    assert_eq!(flaky.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn timeout_bounds_calls() {
    let slow =
        ScriptedProvider::new([Response::text("late")]).with_latency(Duration::from_secs(10));
    let provider = Timeout::new(slow.clone(), Duration::from_secs(1));
    let started = Instant::now();
    let err = provider.chat("m", &prompt()).await.unwrap_err();
    assert_eq!(
        err,
        ProviderError::Timeout {
            after: Duration::from_secs(1)
        }
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1));

    let quick =
        ScriptedProvider::new([Response::text("fine")]).with_latency(Duration::from_millis(10));
    let provider = Timeout::new(quick, Duration::from_secs(1));
    let mut deltas = Vec::new();
    let reply = provider
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(reply.content, "fine");
    assert_eq!(deltas, [Delta::Text("fine".into())]);
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_caps_calls_in_flight() {
    let flaky = Arc::new(Flaky::new(vec![Step::Ok("ok"); 10]).latency(Duration::from_millis(100)));
    let provider = Arc::new(ConcurrencyLimit::new(flaky.clone(), 3));
    let started = Instant::now();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.chat("m", &prompt()).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(flaky.max_in_flight.load(Ordering::SeqCst), 3);
    // 10 calls, 3 at a time, 100 ms each: four rounds.
    assert_eq!(started.elapsed(), Duration::from_millis(400));
    assert_eq!(provider.available(), 3);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_spaces_calls_and_allows_bursts() {
    let flaky = Arc::new(Flaky::new(vec![Step::Ok("ok"); 10]));
    let provider = RateLimit::new(flaky.clone(), 2, Duration::from_secs(1));
    for _ in 0..5 {
        provider.chat("m", &prompt()).await.unwrap();
    }
    let starts = flaky.starts();
    let offsets: Vec<Duration> = starts.iter().map(|s| *s - starts[0]).collect();
    assert_eq!(
        offsets,
        [0, 500, 1000, 1500, 2000].map(Duration::from_millis)
    );

    let flaky = Arc::new(Flaky::new(vec![Step::Ok("ok"); 10]));
    let provider = RateLimit::new(flaky.clone(), 2, Duration::from_secs(1)).burst(3);
    for _ in 0..5 {
        provider.chat("m", &prompt()).await.unwrap();
    }
    let starts = flaky.starts();
    let offsets: Vec<Duration> = starts.iter().map(|s| *s - starts[0]).collect();
    assert_eq!(offsets, [0, 0, 0, 500, 1000].map(Duration::from_millis));
}

#[tokio::test(start_paused = true)]
async fn rate_limit_spaces_concurrent_callers() {
    let flaky = Arc::new(Flaky::new(vec![Step::Ok("ok"); 10]));
    let provider = Arc::new(RateLimit::new(flaky.clone(), 2, Duration::from_secs(1)));
    let started = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.chat("m", &prompt()).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let mut offsets: Vec<Duration> = flaky.starts().iter().map(|s| *s - started).collect();
    offsets.sort();
    assert_eq!(
        offsets,
        [0, 500, 1000, 1500, 2000].map(Duration::from_millis),
        "five callers at once start one slot apart"
    );

    // Clones share the rate: callers through different clones are spaced too.
    let flaky = Arc::new(Flaky::new(vec![Step::Ok("ok"); 10]));
    let limit = RateLimit::new(flaky.clone(), 4, Duration::from_secs(1));
    let started = Instant::now();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let provider = limit.clone();
            tokio::spawn(async move { provider.chat("m", &prompt()).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let mut offsets: Vec<Duration> = flaky.starts().iter().map(|s| *s - started).collect();
    offsets.sort();
    assert_eq!(offsets, [0, 250, 500, 750, 1000].map(Duration::from_millis));
}

#[tokio::test(start_paused = true)]
async fn fallback_uses_the_secondary_when_the_primary_fails() {
    let primary = ScriptedProvider::from_results([Err(transport())]);
    let secondary = ScriptedProvider::new([Response::text("from secondary")]);
    let provider = Fallback::new(primary.clone(), secondary.clone()).secondary_model("llama3.2");
    let reply = provider.chat("gpt-4o", &prompt()).await.unwrap();
    assert_eq!(reply.content, "from secondary");
    assert_eq!(primary.calls()[0].model, "gpt-4o");
    assert_eq!(secondary.calls()[0].model, "llama3.2");

    // Narrowed to retryable errors: an auth failure is returned as is.
    let auth = ProviderError::Authentication {
        message: "bad key".into(),
        cause: None,
    };
    let secondary = ScriptedProvider::new([Response::text("unused")]);
    let provider = Fallback::new(
        ScriptedProvider::from_results([Err(auth.clone())]),
        secondary.clone(),
    )
    .when(ProviderError::is_retryable);
    assert_eq!(provider.chat("m", &prompt()).await.unwrap_err(), auth);
    assert!(secondary.calls().is_empty());

    // Both fail: every error, typed, in the order tried; retryable as the last one is.
    let provider = Fallback::new(
        ScriptedProvider::from_results([Err(transport())]),
        ScriptedProvider::from_results([Err(rate_limited(None))]),
    );
    let err = provider.chat("m", &prompt()).await.unwrap_err();
    let ProviderError::AllFailed { errors } = &err else {
        panic!("expected AllFailed, got {err:?}");
    };
    assert_eq!(errors, &[transport(), rate_limited(None)]);
    assert!(err.is_retryable());
    assert!(
        err.to_string().starts_with(
            "all 2 providers failed; (1) transport error: connection reset; (2) rate limited"
        ),
        "{err}"
    );

    // A streamed call through a chain of chains: one flat list of three.
    let auth = ProviderError::Authentication {
        message: "bad key".into(),
        cause: None,
    };
    let bad_gateway = refused(502, "bad gateway", vec![]);
    let provider = Fallback::new(
        Fallback::new(
            Flaky::new(vec![Step::Fail(auth.clone())]),
            Flaky::new(vec![Step::Fail(transport())]),
        ),
        Flaky::new(vec![Step::Fail(bad_gateway.clone())]),
    );
    let err = provider
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ProviderError::AllFailed {
            errors: vec![auth, transport(), bad_gateway]
        }
    );
}

#[tokio::test(start_paused = true)]
async fn fallback_of_a_stream_only_before_the_first_delta() {
    let secondary = ScriptedProvider::new([Response::text("second"), Response::text("second")]);
    let provider = Fallback::new(
        Flaky::new(vec![
            Step::Fail(transport()),
            Step::FailAfterDelta(transport()),
        ]),
        secondary.clone(),
    );
    let mut deltas = Vec::new();
    let reply = provider
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(reply.content, "second");
    assert_eq!(deltas, [Delta::Text("second".into())]);

    let mut deltas = Vec::new();
    let err = provider
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap_err();
    assert_eq!(err, transport());
    assert_eq!(deltas, [Delta::Text("partial".into())]);
    assert_eq!(secondary.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn layers_compose_and_forward_max_cost() {
    let mut priced = Flaky::new(vec![Step::Fail(transport()), Step::Ok("ok")]);
    priced.cost = Some(MicroUsd(42));
    let provider = priced
        .with_timeout(Duration::from_secs(5))
        .with_rate_limit(10, Duration::from_secs(1))
        .with_retry()
        .with_concurrency_limit(2)
        .with_timeout(Duration::from_secs(60));
    // Every attempt may be billed: three attempts by default.
    assert_eq!(provider.max_cost("m", &prompt()), Some(MicroUsd(3 * 42)));
    let reply = provider.chat("m", &prompt()).await.unwrap();
    assert_eq!(reply.content, "ok");
    let mut one = Flaky::new(vec![]);
    one.cost = Some(MicroUsd(42));
    assert_eq!(
        one.with_retry().max_attempts(5).max_cost("m", &prompt()),
        Some(MicroUsd(5 * 42))
    );
    let mut huge = Flaky::new(vec![]);
    huge.cost = Some(MicroUsd(u64::MAX / 2));
    assert_eq!(
        huge.with_retry().max_cost("m", &prompt()),
        Some(MicroUsd(u64::MAX)),
        "saturates"
    );

    let mut cheap = Flaky::new(vec![]);
    cheap.cost = Some(MicroUsd(5));
    let mut dear = Flaky::new(vec![]);
    dear.cost = Some(MicroUsd(9));
    // The primary may bill for a failed attempt before the secondary runs: both count.
    assert_eq!(
        cheap.with_fallback(dear).max_cost("m", &prompt()),
        Some(MicroUsd(5 + 9))
    );
    let mut known = Flaky::new(vec![]);
    known.cost = Some(MicroUsd(5));
    assert_eq!(
        known
            .with_fallback(Flaky::new(vec![]))
            .max_cost("m", &prompt()),
        None,
        "one bound unknown: the worst case is unknown"
    );
}
