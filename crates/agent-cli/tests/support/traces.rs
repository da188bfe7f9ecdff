//! Real traces for the viewer: programs run by the concurrent interpreter against a scripted
//! provider, a tool and a small context pipeline, so every event is one the interpreter
//! recorded (forks, joins, cancelled race losers, context reports, failures).

// Shared by the tests and the benchmark, which each use part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use agent_interp_par::run;
use agent_interp_seq::Config;
use agent_op::context::{
    CompileReport, ContextError, ContextInput, ContextPipeline, ContextReport, ContextRequest,
    DropReason, Outcome, PreparedContext, Priority, SectionReport, SectionSource, SourceOutcome,
    SourceReport, TokenBudget, ToolReport,
};
use agent_op::op;
use agent_op::{
    BoxFuture, EventKind, FnTool, MicroUsd, Op, Prompt, Provider, ProviderError, Response,
    ToolError, Trace,
};
use serde_json::{Value, json};

/// The id of every run made here.
pub const RUN_ID: &str = "calm-owl-0001";

/// Text that would end the page's data element, or hide the rest of the page, were it not
/// escaped; its script would set `data-injected` on the body.
pub const HOSTILE: &str =
    "</script><script>document.body.dataset.injected='1'</script><!--<script> </SCRIPT >";

/// A provider whose reply takes the milliseconds on the first line of the last message
/// ("40\nsummarize ..."); a message starting with `fail` fails the call.
#[derive(Clone, Default)]
struct Lab;

impl Provider for Lab {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let text = prompt
                .messages
                .last()
                .map(|m| m.content().to_owned())
                .unwrap_or_default();
            let (ms, rest) = text.split_once('\n').unwrap_or(("0", &text));
            let ms: u64 = ms.parse().unwrap_or(0);
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if rest.starts_with("fail") {
                return Err(ProviderError::other(format!("{model} is down: {rest}")));
            }
            let input = 12 + rest.split_whitespace().count() as u64 * 2;
            let output = 7 + (rest.len() as u64 % 11);
            Ok(Response::text(format!("Done: {rest}"))
                .with_usage(input, output)
                .with_cost(MicroUsd(input * 2 + output * 8)))
        })
    }
}

fn ask<S: 'static>(model: &str, ms: u64, text: &str) -> Op<S, Response> {
    op::infer_raw(model, Prompt::new().user(format!("{ms}\n{text}")))
}

/// A context pipeline that fits a system text, the observation, the goal and the program's
/// notes into the request's budget, most important first, and reports what it did: the kind
/// of report `agent-prompt` writes, without its tokenizer (tokens are words here).
struct Fitting;

const SYSTEM: &str = "You are a careful research assistant. Answer briefly and cite the tool \
     outputs you used. Never invent numbers.";

fn words(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

impl ContextPipeline for Fitting {
    fn prepare(
        &self,
        input: ContextInput<'_>,
    ) -> BoxFuture<'static, Result<PreparedContext, ContextError>> {
        let started = Instant::now();
        let request = input.request;
        let notes = format!("notes: {}", "earlier findings about the survey ".repeat(24));
        let goal = request.goal.clone().unwrap_or_default();
        let memory = format!(
            "memory: {}",
            "a finding recalled from an earlier run ".repeat(9)
        );
        let candidates: Vec<(&str, SectionSource, Priority, &str)> = vec![
            (
                "system",
                SectionSource::Static {
                    origin: "code".into(),
                },
                Priority::Critical,
                SYSTEM,
            ),
            (
                "observation",
                SectionSource::Temporal,
                Priority::High,
                &request.observation,
            ),
            (
                "goal",
                SectionSource::Conditional {
                    condition: "has_goal".into(),
                },
                Priority::Medium,
                &goal,
            ),
            (
                "memory",
                SectionSource::Semantic { score: 0.82 },
                Priority::Medium,
                &memory,
            ),
            (
                "notes",
                SectionSource::State {
                    key: "notes".into(),
                },
                Priority::Low,
                &notes,
            ),
            (
                "notes-again",
                SectionSource::State {
                    key: "notes".into(),
                },
                Priority::Low,
                &notes,
            ),
        ];
        let total = request.budget.total;
        let reserve = (total as f32 * request.budget.reserve_ratio.clamp(0.0, 1.0)) as u32;
        let available = total.saturating_sub(reserve);
        let mut left = available;
        let mut sections = Vec::new();
        let mut seen_notes = false;
        for (id, source, priority, text) in candidates {
            let before = words(text);
            let outcome = if before == 0 {
                Outcome::Dropped {
                    reason: DropReason::Empty,
                }
            } else if id == "notes-again" && seen_notes {
                Outcome::Dropped {
                    reason: DropReason::Duplicate,
                }
            } else if before <= left || priority == Priority::Critical {
                Outcome::Kept
            } else if priority == Priority::Low && left >= 16 {
                Outcome::Shrunk
            } else {
                Outcome::Dropped {
                    reason: DropReason::OverBudget,
                }
            };
            seen_notes |= id == "notes";
            let after = match outcome {
                Outcome::Kept => before,
                Outcome::Shrunk => left,
                _ => 0,
            };
            left = left.saturating_sub(after);
            sections.push(SectionReport {
                id: id.into(),
                source,
                priority,
                tokens_before: before,
                tokens_after: after,
                outcome,
            });
        }
        let tools: Vec<ToolReport> = input
            .tools
            .iter()
            .map(|tool| ToolReport {
                name: tool.name.clone(),
                priority: Priority::High,
                tokens: 24,
                outcome: Outcome::Kept,
            })
            .collect();
        let tokens_before: u32 = sections.iter().map(|s| s.tokens_before).sum();
        let tokens_after: u32 = sections.iter().map(|s| s.tokens_after).sum();
        let mut user = request.observation.clone();
        if !goal.is_empty() {
            user = format!("{user}\nGoal: {goal}");
        }
        let prompt = Prompt::new().system(SYSTEM).user(user);
        let elapsed = started.elapsed().as_micros() as u64;
        let report = ContextReport {
            model: input.model.to_owned(),
            encoding: "approximate".into(),
            sources: vec![SourceReport {
                name: "fitting".into(),
                sections: sections.len() as u32,
                elapsed_us: elapsed,
                outcome: SourceOutcome::Hydrated,
            }],
            hydrate_us: elapsed,
            compile_us: 1,
            compile: CompileReport {
                sections,
                tools,
                tokens_before,
                tokens_after,
                budget: total,
                reserve,
                available,
                compression_ratio: if tokens_before == 0 {
                    1.0
                } else {
                    tokens_after as f32 / tokens_before as f32
                },
            },
        };
        Box::pin(async move { Ok(PreparedContext::new(prompt, report)) })
    }
}

fn lookup() -> impl agent_op::Tool + 'static {
    FnTool::new(
        "lookup",
        "looks a city up",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        |args: Value| async move {
            match args["city"].as_str() {
                Some(city) if !city.is_empty() => {
                    Ok(json!({"city": city, "population": city.len() * 100_000}))
                }
                _ => Err(ToolError::invalid_arguments(
                    "city must be a non-empty string",
                )),
            }
        },
    )
}

fn config() -> Config {
    Config::new()
        .provider(Lab)
        .tool(lookup())
        .context_pipeline(Fitting)
        .trace_id(RUN_ID)
}

/// Drives `future` to its end on a runtime of its own.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

fn execute(program: Op<(), ()>) -> Trace {
    block_on(run(&config(), (), program))
        .expect("the program runs")
        .trace
}

fn plan<S: 'static>(observation: &str, budget: u32) -> Op<S, Response> {
    op::infer(
        "planner-large",
        ContextRequest::new(format!("0\n{observation}"))
            .with_goal("survey every city, then pick the best answer")
            .with_budget(TokenBudget::new(budget)),
    )
}

/// A run that plans (a context report with kept, shrunk and dropped sections), looks a city
/// up, surveys `branches` cities in a `par` (branch 13 gets a failing tool call), then races a
/// failing model (an `error` event), a fast one (the winner) and a slow one (cancelled when
/// the fast one wins), takes a checkpoint, and emits a custom event holding [`HOSTILE`].
pub fn par_and_race(branches: usize) -> Trace {
    let survey = (0..branches)
        .map(|k| {
            let city = if k == 13 {
                String::new()
            } else {
                format!("city-{k}")
            };
            ask(
                "small-model",
                (k % 7) as u64 + 1,
                &format!("summarize the survey of city {k}"),
            )
            .then(op::tool("lookup", json!({ "city": city })))
            .map(|_| ())
        })
        .collect();
    let program: Op<(), ()> = plan("plan the survey of every city", 90)
        .then(op::tool("lookup", json!({"city": "Oslo"})))
        .then(op::par(survey))
        // Branches after the winner are cancelled, so the failing one comes first, and fails
        // at once (no latency): it has ended, with an `error` event, before the fast one
        // wins, however loaded the machine, and is not cancelled.
        .then(op::race(vec![
            ask("flaky-model", 0, "fail: no capacity").map(|_| ()),
            ask("fast-model", 40, "pick the best answer").map(|_| ()),
            ask("slow-model", 3_000, "pick the best answer, slowly").map(|_| ()),
        ]))
        .then(op::checkpoint("answered"))
        .then(op::emit(EventKind::custom(
            "hostile-text",
            json!({ "text": HOSTILE }),
        )));
    execute(program)
}

/// A run of at least `min_events` events: 100 branches in a `par`, each planning (a context
/// report), calling a model and a tool, over and over.
pub fn large(min_events: usize) -> Trace {
    const BRANCHES: usize = 100;
    const PER_ROUND: usize = 5; // context, infer_start, infer_end, tool_call, tool_result
    // Two events (the fork and its join) belong to the run itself.
    let rounds = min_events
        .saturating_sub(2)
        .div_ceil(BRANCHES * PER_ROUND)
        .max(1) as u64;
    let branches = (0..BRANCHES)
        .map(|k| {
            op::repeat(rounds, move |round| {
                plan(
                    &format!("step {round} of branch {k}"),
                    if round % 3 == 0 { 60 } else { 400 },
                )
                .then(op::tool(
                    "lookup",
                    json!({ "city": format!("city-{k}-{round}") }),
                ))
            })
        })
        .collect();
    execute(op::par(branches).map(|_| ()))
}

/// A run of 10 events: a planned model call, two questions in a `par`, a checkpoint.
pub fn tiny() -> Trace {
    let program: Op<(), ()> = plan("say hello", 200)
        .then(op::par(vec![
            ask("small-model", 0, "hello").map(|_| ()),
            ask("small-model", 0, "bonjour").map(|_| ()),
        ]))
        .then(op::checkpoint("greeted"));
    execute(program)
}

/// A run that asks a model, then fails itself (`op::fail`) with [`FAILURE`].
pub fn failed() -> Trace {
    let program: Op<(), ()> = ask("small-model", 0, "hello").then(op::fail::<(), ()>(FAILURE));
    block_on(run(&config(), (), program))
        .expect_err("the program fails")
        .trace
}

/// The error [`failed`] fails with.
pub const FAILURE: &str = "the answer does not satisfy the schema: \"city\" is required";

/// A run that fans out `branches` branches in one `par`: each looks a city up (a tool call),
/// and every tenth also asks a model first; about 11,000 events for 5,000 branches.
pub fn wide(branches: usize) -> Trace {
    let fan = (0..branches)
        .map(|k| {
            let lookup = op::tool("lookup", json!({ "city": format!("city-{k}") })).map(|_| ());
            if k % 10 == 0 {
                ask("small-model", 0, &format!("which city is {k}"))
                    .then(lookup)
                    .map(|_| ())
            } else {
                lookup
            }
        })
        .collect();
    execute(op::par(fan).map(|_| ()))
}

/// A one-pixel PNG.
pub const PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A run whose one model call is shown a small image (kept whole in traces) and a large one
/// (kept as its hash and size).
pub fn with_images() -> Trace {
    let small = agent_op::Image::from_base64("image/png", PIXEL_PNG).expect("a PNG");
    let large = agent_op::Image::new("image/jpeg", vec![0xffu8; 100_000]);
    let prompt = Prompt::from_messages(vec![
        agent_op::Message::user("0\ncompare these")
            .with_attachment(agent_op::Attachment::Image(small))
            .with_attachment(agent_op::Attachment::Image(large)),
    ]);
    execute(op::infer_raw("vision-model", prompt).map(|_| ()))
}
