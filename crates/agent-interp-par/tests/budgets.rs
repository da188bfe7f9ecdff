//! Budgets under both interpreters, against a provider that reports the most it may: the
//! guarantee of `op::limit` (spent ≤ limit − 1 + the largest single call), overflow-free
//! accounting, and the spend of race losers reported apart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_interp_seq::{Config, ErrorKind, RunError};
use agent_op::{
    BoxFuture, Budget, Exhausted, MicroUsd, Op, Prompt, Provider, ProviderError, Resource,
    Response, ResponseFormat, Trace, op,
};
use proptest::prelude::*;
use serde_json::json;

/// Reports, for every call, its worst case (the prompt's
/// [`max_input_tokens`](Prompt::max_input_tokens) in, `max_tokens` out) scaled by
/// `share_percent`, and costs `cost`, after `latency` so that concurrent calls overlap. Its
/// `max_cost` is `max_cost`.
///
/// It bills a call when the request arrives, as a real provider does: a call the client
/// abandons (its branch cancelled once the budget ran out) still used its tokens. `billed`
/// and `largest` record that, for the checks.
#[derive(Clone)]
struct Adversary {
    share_percent: u64,
    cost: Option<MicroUsd>,
    max_cost: Option<MicroUsd>,
    latency: Duration,
    billed: Arc<AtomicU64>,
    largest: Arc<AtomicU64>,
}

impl Adversary {
    fn worst() -> Adversary {
        Adversary {
            share_percent: 100,
            cost: None,
            max_cost: None,
            latency: Duration::from_millis(5),
            billed: Arc::new(AtomicU64::new(0)),
            largest: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Tokens billed and the largest single call since the last call of this.
    fn take_bill(&self) -> (u64, u64) {
        (
            self.billed.swap(0, Ordering::SeqCst),
            self.largest.swap(0, Ordering::SeqCst),
        )
    }
}

impl Provider for Adversary {
    fn chat<'a>(
        &'a self,
        _model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let scale = |n: u64| n.saturating_mul(self.share_percent) / 100;
            let input = scale(prompt.max_input_tokens());
            let output = scale(u64::from(prompt.options.max_tokens.unwrap_or(0)));
            let call = input.saturating_add(output);
            self.billed.fetch_add(call, Ordering::SeqCst);
            self.largest.fetch_max(call, Ordering::SeqCst);
            tokio::time::sleep(self.latency).await;
            let response = Response::text("ok").with_usage(input, output);
            Ok(match self.cost {
                Some(cost) => response.with_cost(cost),
                None => response,
            })
        })
    }

    fn max_cost(&self, _model: &str, _prompt: &Prompt) -> Option<MicroUsd> {
        self.max_cost
    }
}

type Run<A> = Result<(A, Trace), RunError>;

/// One run's result, with the tokens `Adversary` billed and its largest call.
struct Billed<A> {
    run: Run<A>,
    spent: u64,
    largest: u64,
}

/// Runs `program` under both interpreters (on a multi-threaded runtime) against `provider`.
fn both<A: Send + 'static>(
    provider: &Adversary,
    program: impl Fn() -> Op<(), A>,
) -> [Billed<A>; 2] {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let config = Config::new().provider(provider.clone());
    provider.take_bill();
    let seq = rt
        .block_on(agent_interp_seq::run(&config, (), program()))
        .map(|o| (o.value, o.trace));
    let (spent, largest) = provider.take_bill();
    let seq = Billed {
        run: seq,
        spent,
        largest,
    };
    let par = rt
        .block_on(agent_interp_par::run(&config, (), program()))
        .map(|o| (o.value, o.trace));
    let (spent, largest) = provider.take_bill();
    let par = Billed {
        run: par,
        spent,
        largest,
    };
    [seq, par]
}

fn ask(prompt: &Prompt) -> Op<(), ()> {
    op::infer_raw("m", prompt.clone()).map(|_| ())
}

/// `n` branches of one call each, under `budget`.
fn fan_out(budget: Budget, prompt: &Prompt, n: usize) -> Op<(), Result<Vec<()>, Exhausted>> {
    op::limit(budget, op::par((0..n).map(|_| ask(prompt)).collect()))
}

/// Ten branches of one call each under a token `limit`, against the worst-case provider: both
/// interpreters spend less than the limit plus one call.
fn ten_calls_stay_within_one_call_of(limit: u64, prompt: &Prompt) {
    let program = || fan_out(Budget::default().tokens(limit), prompt, 10);
    for Billed { spent, largest, .. } in both(&Adversary::worst(), program) {
        assert!(
            spent < limit + largest,
            "spent {spent} of {limit} (one call: {largest})"
        );
    }
}

/// A JSON schema of about 13.5 kB, as in the report of the overshoot.
fn large_schema() -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = (0..260)
        .map(|i| {
            (
                format!("field_{i:03}"),
                json!({"type": "string", "description": "part"}),
            )
        })
        .collect();
    json!({"type": "object", "properties": properties})
}

/// Ten branches, 2-byte prompts, `max_tokens(5)` and a 13.5 kB response schema under a token
/// limit of four calls: before the schema counted in the worst case, the parallel run spent
/// 33,870 tokens (all ten calls).
#[test]
fn a_response_schema_counts_in_the_worst_case_under_par() {
    let prompt =
        Prompt::new()
            .user("hi")
            .max_tokens(5)
            .response_format(ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: large_schema(),
                strict: true,
            });
    let per_call = prompt.max_total_tokens().expect("bounded");
    assert!(per_call > 13_000, "{per_call}");
    let limit = 4 * per_call;
    ten_calls_stay_within_one_call_of(limit, &prompt);
}

/// Template overhead: calls whose reported usage is larger than their text (9 in, 5 out on
/// 2-byte prompts, limit 60) spent 112 under par where the promise was one call over.
#[test]
fn template_overhead_counts_in_the_worst_case_under_par() {
    let prompt = Prompt::new().user("hi").max_tokens(5);
    let limit = 60;
    ten_calls_stay_within_one_call_of(limit, &prompt);
}

/// A worst-case cost that saturates at `u64::MAX` (what pricing reports when it cannot bound a
/// call) or sums past it must not wrap: a limit of 1,000 µ$ let 3 calls of 500 µ$ spend
/// 1,500 µ$ in release builds and panicked in debug builds.
#[test]
fn huge_worst_case_costs_never_wrap_the_budget() {
    for max_cost in [u64::MAX, 1 << 63, (1 << 63) + 1] {
        let provider = Adversary {
            cost: Some(MicroUsd(500)),
            max_cost: Some(MicroUsd(max_cost)),
            ..Adversary::worst()
        };
        let prompt = Prompt::new().user("hi").max_tokens(5);
        let limit = MicroUsd(1_000);
        for billed in both(&provider, || {
            fan_out(Budget::default().cost(limit), &prompt, 3)
        }) {
            // The budget stops the calls, not a failure (an overflow panicked here).
            let (_, trace) = billed.run.expect("run");
            // Every started call costs 500 µ$, finished or not.
            let calls = trace.spend().total().calls;
            let spent = MicroUsd(500 * calls);
            assert!(
                spent <= limit,
                "max_cost {max_cost}: spent {spent} of {limit}"
            );
        }
    }
}

/// Token limits near `u64::MAX` and worst cases that sum past it: nothing wraps, every call
/// that fits runs.
#[test]
fn token_limits_near_the_maximum_do_not_wrap() {
    let prompt = Prompt::new().user("hi").max_tokens(u32::MAX);
    let provider = Adversary {
        share_percent: 0,
        ..Adversary::worst()
    };
    for limit in [u64::MAX, 1 << 63] {
        for billed in both(&provider, || {
            fan_out(Budget::default().tokens(limit), &prompt, 4)
        }) {
            let (value, trace) = billed.run.expect("run");
            assert!(value.is_ok(), "limit {limit}: {value:?}");
            assert_eq!(trace.infer_calls(), 4);
        }
    }
}

/// `limit(calls(2), race([ask, pure then ask]).then(ask))`: sequentially the race's first
/// branch wins alone; in parallel the loser's call also happened and counted, so the last
/// call does not fit. The rule is documented on `op::race`; the loser's spend is reported
/// apart.
#[test]
fn race_losers_count_against_budgets_and_are_reported_apart() {
    let prompt = Prompt::new().user("hi").max_tokens(5);
    let program = || {
        op::limit(
            Budget::default().calls(2),
            op::race(vec![
                ask(&prompt),
                op::pure(()).and_then({
                    let prompt = prompt.clone();
                    move |_| ask(&prompt)
                }),
            ])
            .then(ask(&prompt)),
        )
    };
    let [seq, par] = both(&Adversary::worst(), program);
    let (value, trace) = seq.run.expect("sequential run");
    assert!(value.is_ok(), "{value:?}");
    let spend = trace.spend();
    assert_eq!((spend.kept.calls, spend.discarded.calls), (2, 0));

    let (value, trace) = par.run.expect("parallel run");
    assert!(
        matches!(
            value,
            Err(Exhausted {
                resource: Resource::Calls,
                ..
            })
        ),
        "{value:?}"
    );
    let spend = trace.spend();
    assert_eq!(spend.kept.calls, 1, "the race's winner");
    assert_eq!(spend.discarded.calls, 1, "the race's loser, reported apart");
    assert_eq!(spend.total().calls, 2);
}

/// A program of calls in `par`, sequences and nested limits, generated.
#[derive(Clone, Debug)]
enum Shape {
    Call { bytes: usize, max_tokens: u32 },
    Par(Vec<Shape>),
    Seq(Vec<Shape>),
}

fn shape() -> impl Strategy<Value = Shape> {
    let call =
        (0usize..400, 1u32..60).prop_map(|(bytes, max_tokens)| Shape::Call { bytes, max_tokens });
    call.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..5).prop_map(Shape::Par),
            prop::collection::vec(inner, 1..4).prop_map(Shape::Seq),
        ]
    })
}

fn build(shape: &Shape) -> Op<(), ()> {
    match shape {
        Shape::Call { bytes, max_tokens } => {
            let prompt = Prompt::new()
                .user("x".repeat(*bytes))
                .max_tokens(*max_tokens);
            ask(&prompt)
        }
        Shape::Par(branches) => op::par(branches.iter().map(build).collect()).map(|_| ()),
        Shape::Seq(steps) => op::sequence(steps.iter().map(build).collect()).map(|_| ()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// For every program and every limit, under both interpreters, with usage reported at
    /// the worst case or below: tokens spent ≤ limit − 1 + the largest single call.
    #[test]
    fn spent_never_passes_the_limit_by_more_than_one_call(
        shape in shape(),
        limit in 1u64..4_000,
        share_percent in prop_oneof![Just(100u64), 0u64..=100],
    ) {
        let provider = Adversary {
            share_percent,
            latency: Duration::from_millis(1),
            ..Adversary::worst()
        };
        let program = || op::limit(Budget::default().tokens(limit), build(&shape)).map(|_| ());
        for Billed { run, spent, largest } in both(&provider, program) {
            prop_assert!(
                spent < limit + largest,
                "spent {} of {} (largest call {})", spent, limit, largest
            );
            if let Err(e) = &run {
                prop_assert!(!matches!(e.kind, ErrorKind::Internal(_)), "{}", e);
            }
        }
    }
}
