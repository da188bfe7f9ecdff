//! `op::infer` end to end: sources hydrated by the pipeline, compiled under the budget,
//! sent to a scripted model, and traced — under both interpreters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_interp_seq::{Config, ErrorKind};
use agent_memory::InMemoryBackend;
use agent_op::context::{
    ContextInput, ContextReport, ContextRequest, ContextStrategy, DropReason, Outcome, Priority,
    SectionSource, SourceOutcome, TokenBudget,
};
use agent_op::op::{self, Op};
use agent_op::{
    EventKind, EventType, FnTool, MemoryBackend, Message, NewMemory, Response, ToolErrorKind, Trace,
};
use agent_prompt::{
    Conditional, ContextSource, Conversation, FromState, Hydrated, Knowledge, Pipeline,
    PromptError, Semantic, SourceError, SourceFuture, Static,
};
use agent_provider::ScriptedProvider;
use serde_json::json;

#[derive(Clone, Debug, Default)]
struct Chat {
    user: Option<String>,
    admin: bool,
    history: Vec<Message>,
}

/// Branches only read the chat; the first branch's copy is kept.
impl agent_op::Merge for Chat {
    fn merge(&mut self, _other: Chat) {}
}

fn chat() -> Chat {
    Chat {
        user: Some("Ana".into()),
        admin: false,
        history: vec![
            Message::user("We should launch on Tuesday."),
            Message::assistant("Agreed: Tuesday it is."),
        ],
    }
}

async fn memory() -> Arc<dyn MemoryBackend> {
    let memory = InMemoryBackend::new();
    let facts = [
        ("The launch is planned for Tuesday at 10:00.", vec!["event"]),
        ("Ana prefers short answers.", vec!["profile"]),
        ("The build server is ci-3.", vec!["infra"]),
        ("Ana works in Lisbon.", vec!["profile"]),
    ];
    for (content, tags) in facts {
        memory
            .store(NewMemory {
                content: content.into(),
                context: "chat".into(),
                tags: tags.into_iter().map(Into::into).collect(),
            })
            .await
            .unwrap();
    }
    Arc::new(memory)
}

fn pipeline() -> Pipeline {
    Pipeline::new()
        .source(Static::text(
            "rules",
            "## Rules",
            "Answer in one sentence, from what you know.",
        ))
        .source(FromState::new("user", "## Current user", |s: &Chat| {
            s.user.as_ref().map(|u| format!("You are talking to {u}."))
        }))
        .source(Conditional::new(
            "admin",
            |call: &ContextInput<'_>| call.state::<Chat>().is_some_and(|s| s.admin),
            Static::text("admin", "## Admin", "The user may change settings."),
        ))
        .source(Knowledge::tagged("profile"))
        .source(Conversation::from_state(|s: &Chat| &s.history))
        .source(Semantic::new())
}

fn request() -> ContextRequest {
    ContextRequest::new("When is the launch?").with_strategy(ContextStrategy {
        semantic_limit: 2,
        semantic_threshold: 0.0,
        ..ContextStrategy::default()
    })
}

fn context_of(trace: &Trace) -> Vec<ContextReport> {
    trace
        .events_of(EventType::Context)
        .filter_map(|e| match &e.event.kind {
            EventKind::Context(report) => Some((**report).clone()),
            _ => None,
        })
        .collect()
}

fn system_text(prompt: &agent_op::Prompt) -> String {
    match prompt.messages.first() {
        Some(Message::System { content, .. }) => content.clone(),
        other => panic!("expected a system message first, got {other:?}"),
    }
}

#[tokio::test]
async fn infer_hydrates_every_source_compiles_and_traces_it() {
    let provider = Arc::new(ScriptedProvider::new([Response::text("Tuesday at 10:00.")]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .shared_memory(memory().await)
        .context_pipeline(pipeline());
    let program: Op<Chat, String> = op::infer("gpt-4o-mini", request()).map(|r| r.content);
    let outcome = agent_interp_seq::run(&config, chat(), program)
        .await
        .unwrap();
    assert_eq!(outcome.value, "Tuesday at 10:00.");

    let calls = provider.calls();
    assert_eq!(calls.len(), 1);
    let prompt = &calls[0].prompt;
    let system = system_text(prompt);
    assert!(
        system.starts_with("## Rules\nAnswer in one sentence"),
        "{system}"
    );
    assert!(system.contains("You are talking to Ana."), "{system}");
    assert!(
        !system.contains("## Admin"),
        "the condition does not hold: {system}"
    );
    assert!(system.contains("Ana prefers short answers."), "{system}");
    assert!(
        system.contains("The launch is planned for Tuesday"),
        "{system}"
    );
    // Two profile entries under one heading.
    assert_eq!(system.matches("## What you know").count(), 1, "{system}");
    // The conversation, then the observation.
    let n = prompt.messages.len();
    assert_eq!(prompt.messages[n - 1], Message::user("When is the launch?"));
    assert_eq!(
        prompt.messages[n - 2],
        Message::assistant("Agreed: Tuesday it is.")
    );
    assert_eq!(
        prompt.messages[n - 3],
        Message::user("We should launch on Tuesday.")
    );

    let reports = context_of(&outcome.trace);
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(report.model, "gpt-4o-mini");
    assert_eq!(report.encoding, "o200k_base");
    let names: Vec<_> = report.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rules",
            "user",
            "admin",
            "knowledge",
            "conversation",
            "semantic"
        ]
    );
    assert_eq!(report.sources[2].outcome, SourceOutcome::Skipped);
    assert_eq!(report.sources[3].sections, 2);
    assert_eq!(report.sources[5].sections, 2);
    assert!(
        report
            .compile
            .sections
            .iter()
            .all(|s| s.outcome == Outcome::Kept)
    );
    assert!(report.compile.tokens_after <= report.compile.available);
    let semantic = report
        .compile
        .sections
        .iter()
        .find(|s| matches!(s.source, SectionSource::Semantic { .. }))
        .unwrap();
    assert!(semantic.id.starts_with("semantic:"));
    // The context event comes right before the model call.
    let kinds: Vec<EventType> = outcome
        .trace
        .events
        .iter()
        .map(|e| e.event.event_type())
        .collect();
    assert_eq!(
        kinds,
        [
            EventType::Context,
            EventType::InferStart,
            EventType::InferEnd,
            EventType::RunEnd
        ]
    );
}

#[tokio::test]
async fn both_interpreters_send_the_same_prompt_and_record_the_same_trace() {
    let memory = memory().await;
    let program = || -> Op<Chat, String> {
        op::par::<Chat, String>(vec![
            op::infer("gpt-4o", request()).map(|r| r.content),
            op::infer("gpt-4o", request().with_goal("Plan the launch")).map(|r| r.content),
        ])
        .map(|answers| answers.join(" | "))
    };
    let mut traces = Vec::new();
    let mut prompts = Vec::new();
    for parallel in [false, true] {
        let provider = Arc::new(ScriptedProvider::from_fn(|_, prompt| {
            Ok(Response::text(format!(
                "{} messages",
                prompt.messages.len()
            )))
        }));
        let config = Config::new()
            .shared_provider(provider.clone())
            .shared_memory(memory.clone())
            .context_pipeline(pipeline())
            .trace_id("calm-owl-0001");
        let outcome = if parallel {
            agent_interp_par::run(&config, chat(), program()).await
        } else {
            agent_interp_seq::run(&config, chat(), program()).await
        }
        .unwrap();
        traces.push(outcome.trace.canonical());
        let mut sent: Vec<_> = provider.calls().into_iter().map(|c| c.prompt).collect();
        sent.sort_by_key(|p| format!("{p:?}"));
        prompts.push(sent);
    }
    assert_eq!(traces[0], traces[1]);
    assert_eq!(prompts[0], prompts[1]);
    // The goal is a critical section of its own.
    assert!(
        prompts[0]
            .iter()
            .any(|p| system_text(p).contains("## Goal\nPlan the launch"))
    );
}

#[tokio::test]
async fn a_tight_budget_drops_low_value_sections_and_tools_and_says_why() {
    let provider = Arc::new(ScriptedProvider::new([
        Response::text("first"),
        Response::text("second"),
    ]));
    let echo = |name: &'static str| {
        FnTool::new(
            name,
            "Echoes its arguments back, verbatim, for testing. ".repeat(4),
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            |args: serde_json::Value| async move { Ok(args) },
        )
    };
    let config = Config::new()
        .shared_provider(provider.clone())
        .shared_memory(memory().await)
        .tool(echo("echo"))
        .tool(echo("shout"))
        .context_pipeline(
            pipeline()
                .source(
                    Static::text("filler", "## Background", "lorem ipsum ".repeat(400))
                        .priority(Priority::Low),
                )
                .tool_priority("shout", Priority::Low),
        );
    let budget = TokenBudget::new(260);
    let program: Op<Chat, _> = op::infer("gpt-4o", request().with_budget(budget))
        .then(op::tool("shout", json!({"text": "hi"})))
        .and_then(|refused| {
            op::tool("echo", json!({"text": "hi"})).map(move |allowed| (refused, allowed))
        })
        .and_then(|first| {
            op::infer_raw("gpt-4o", agent_op::Prompt::new().user("again"))
                .then(op::tool("shout", json!({"text": "hi"})))
                .map(move |after_raw| (first, after_raw))
        });
    let outcome = agent_interp_seq::run(&config, chat(), program)
        .await
        .unwrap();
    let ((refused, allowed), after_raw) = outcome.value;
    let refused = refused.unwrap_err();
    assert_eq!(refused.kind, ToolErrorKind::NotOffered);
    assert!(refused.message.contains("`shout`"), "{}", refused.message);
    assert_eq!(allowed.unwrap(), json!({"text": "hi"}));
    assert!(
        after_raw.is_ok(),
        "a prompt the program built itself withholds nothing"
    );

    let report = &context_of(&outcome.trace)[0];
    assert!(report.compile.tokens_after <= report.compile.available);
    assert_eq!(report.compile.available, 234);
    let filler = report.section("filler").unwrap();
    assert_eq!(
        filler.outcome,
        Outcome::Dropped {
            reason: DropReason::OverBudget
        }
    );
    assert_eq!(report.section("rules").unwrap().outcome, Outcome::Kept);
    let shout = report
        .compile
        .tools
        .iter()
        .find(|t| t.name == "shout")
        .unwrap();
    assert!(!shout.outcome.is_sent());
    assert_eq!(report.dropped_tools().collect::<Vec<_>>(), ["shout"]);
    let sent = &provider.calls()[0].prompt;
    assert!(sent.tools.iter().all(|t| t.name != "shout"));
    // The trace's JSON answers "why did the model not see the filler?" on its own.
    let line = serde_json::to_value(&outcome.trace.events[0].event).unwrap();
    let filler = line["data"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "filler")
        .unwrap();
    assert_eq!(filler["outcome"], "dropped");
    assert_eq!(filler["reason"], "over_budget");
}

struct Failing;

impl ContextSource for Failing {
    fn name(&self) -> &str {
        "flaky-crm"
    }

    fn hydrate(&self, _input: &ContextInput<'_>) -> SourceFuture {
        Box::pin(async { Err(SourceError::other("connection refused")) })
    }
}

#[tokio::test]
async fn a_failing_source_fails_the_call_by_name_unless_it_is_optional() {
    let program = || -> Op<Chat, Response> { op::infer("gpt-4o", request()) };
    let config = Config::new()
        .provider(ScriptedProvider::new([]))
        .shared_memory(memory().await)
        .context_pipeline(pipeline().source(Failing));
    let error = agent_interp_seq::run(&config, chat(), program())
        .await
        .unwrap_err();
    match &error.kind {
        ErrorKind::Context { model, error } => {
            assert_eq!(model, "gpt-4o");
            assert!(error.to_string().contains("`flaky-crm`"), "{error}");
            assert!(error.to_string().contains("connection refused"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    let source = std::error::Error::source(&error).unwrap();
    assert!(source.to_string().contains("flaky-crm"));

    let config = Config::new()
        .provider(ScriptedProvider::new([Response::text("ok")]))
        .shared_memory(memory().await)
        .context_pipeline(pipeline().optional_source(Failing));
    let outcome = agent_interp_par::run(&config, chat(), program())
        .await
        .unwrap();
    let report = &context_of(&outcome.trace)[0];
    let crm = report
        .sources
        .iter()
        .find(|s| s.name == "flaky-crm")
        .unwrap();
    assert_eq!(
        crm.outcome,
        SourceOutcome::Dropped {
            error: "connection refused".into()
        }
    );
}

#[tokio::test]
async fn bad_inputs_are_typed_errors() {
    // A state of another type.
    let config = Config::new()
        .provider(ScriptedProvider::new([]))
        .context_pipeline(
            Pipeline::new().source(FromState::new("user", "", |s: &Chat| s.user.clone())),
        );
    let error = agent_interp_seq::run(&config, 7u32, op::infer("m", ContextRequest::new("hi")))
        .await
        .unwrap_err();
    assert!(error.kind.to_string().contains("`user`"), "{}", error.kind);
    assert!(error.kind.to_string().contains("Chat"), "{}", error.kind);

    // No memory backend for a memory source.
    let config = Config::new()
        .provider(ScriptedProvider::new([]))
        .context_pipeline(Pipeline::new().source(Semantic::new()));
    let error = agent_interp_seq::run(&config, (), op::infer("m", ContextRequest::new("hi")))
        .await
        .unwrap_err();
    assert!(
        error.kind.to_string().contains("no memory backend"),
        "{}",
        error.kind
    );

    // Critical sections over budget, and a budget of 0: the compiler's typed error.
    for total in [0, 20] {
        let config = Config::new()
            .provider(ScriptedProvider::new([]))
            .context_pipeline(Pipeline::new().source(Static::text(
                "rules",
                "## Rules",
                "word ".repeat(50),
            )));
        let request = ContextRequest::new("hi").with_budget(TokenBudget::new(total));
        let error = agent_interp_seq::run(&config, (), op::infer("gpt-4o", request))
            .await
            .unwrap_err();
        let ErrorKind::Context { error, .. } = &error.kind else {
            panic!("{:?}", error.kind)
        };
        let cause = error
            .cause()
            .unwrap()
            .downcast_ref::<PromptError>()
            .unwrap();
        assert!(
            matches!(cause, PromptError::CriticalOverBudget { .. }),
            "{cause}"
        );
    }

    // An empty request with no sources.
    let config = Config::new().provider(ScriptedProvider::new([]));
    let error = agent_interp_seq::run(&config, (), op::infer("llama3", ContextRequest::new("")))
        .await
        .unwrap_err();
    assert!(error.kind.to_string().contains("empty"), "{}", error.kind);
}

#[tokio::test]
async fn without_a_pipeline_infer_sends_the_observation_and_tools() {
    let provider = Arc::new(ScriptedProvider::new([Response::text("hello")]));
    let config = Config::new().shared_provider(provider.clone());
    let outcome = agent_interp_seq::run(
        &config,
        (),
        op::infer("llama3.2", ContextRequest::new("hi")),
    )
    .await
    .unwrap();
    assert_eq!(outcome.value.content, "hello");
    assert_eq!(provider.calls()[0].prompt.messages, [Message::user("hi")]);
    assert_eq!(context_of(&outcome.trace)[0].encoding, "approximate");
}

/// A source that takes 150 ms, counting in `live` the sources hydrating at once and in `peak`
/// the most there were.
struct Slow {
    name: &'static str,
    live: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl ContextSource for Slow {
    fn name(&self) -> &str {
        self.name
    }

    fn hydrate(&self, _input: &ContextInput<'_>) -> SourceFuture {
        let id = self.name;
        let (live, peak) = (self.live.clone(), self.peak.clone());
        Box::pin(async move {
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(150)).await;
            live.fetch_sub(1, Ordering::SeqCst);
            Ok(Hydrated::new(vec![agent_prompt::Section::text(id, "", id)]))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_run_concurrently_under_the_parallel_interpreter() {
    let mut hydrate_ms = Vec::new();
    for parallel in [false, true] {
        let (live, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let slow = |name| Slow {
            name,
            live: live.clone(),
            peak: peak.clone(),
        };
        let pipeline = Pipeline::new()
            .source(slow("a"))
            .source(slow("b"))
            .source(slow("c"));
        let config = Config::new()
            .provider(ScriptedProvider::new([Response::text("ok")]))
            .context_pipeline(pipeline);
        let program = op::infer("m", ContextRequest::new("go"));
        let outcome = if parallel {
            agent_interp_par::run(&config, (), program).await
        } else {
            agent_interp_seq::run(&config, (), program).await
        }
        .unwrap();
        let report = &context_of(&outcome.trace)[0];
        for source in &report.sources {
            assert!(source.elapsed_us >= 150_000, "{source:?}");
        }
        hydrate_ms.push(report.hydrate_us / 1000);
        // All three at once under the parallel interpreter, one at a time otherwise.
        let expected = if parallel { 3 } else { 1 };
        assert_eq!(
            peak.load(Ordering::SeqCst),
            expected,
            "parallel: {parallel}"
        );
    }
    // The report's times are real: the sequential run waited for each source in turn.
    assert!(hydrate_ms[0] >= 450, "sequential: {hydrate_ms:?}");
}

#[tokio::test]
async fn a_summarizer_replaces_what_did_not_fit_with_a_paid_traced_summary() {
    let provider = Arc::new(ScriptedProvider::new([
        Response::text("Background: the launch moved to Tuesday."),
        Response::text("Tuesday."),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .context_pipeline(
            Pipeline::new()
                .source(Static::text("rules", "## Rules", "Be brief."))
                .source(
                    Static::text("notes", "## Notes", "The launch moved. ".repeat(300))
                        .priority(Priority::Low),
                )
                .summarize_with("gpt-4o-mini"),
        );
    let request = ContextRequest::new("When?").with_budget(TokenBudget::new(300));
    let outcome = agent_interp_seq::run(&config, (), op::infer("gpt-4o", request))
        .await
        .unwrap();
    assert_eq!(outcome.value.content, "Tuesday.");
    let calls = provider.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].model, "gpt-4o-mini");
    assert!(
        calls[0].prompt.messages[1]
            .content()
            .contains("The launch moved.")
    );
    assert!(system_text(&calls[1].prompt).contains("the launch moved to Tuesday"));
    assert_eq!(outcome.trace.infer_calls(), 2);
    let report = &context_of(&outcome.trace)[0];
    assert_eq!(
        report.section("notes").unwrap().outcome,
        Outcome::Dropped {
            reason: DropReason::Summarized
        }
    );
    let summary = report.section("summary").unwrap();
    assert!(summary.outcome.is_sent());
    assert_eq!(
        summary.source,
        SectionSource::Summary {
            of: vec!["notes".into()]
        }
    );
    assert!(report.compile.tokens_after <= report.compile.available);
}

#[tokio::test]
async fn only_memories_the_model_was_sent_count_as_recalled() {
    let memory = memory().await;
    let config = Config::new()
        .provider(ScriptedProvider::new([Response::text("ok")]))
        .shared_memory(memory.clone())
        .context_pipeline(Pipeline::new().source(Knowledge::tagged("profile").limit(1)));
    agent_interp_seq::run(&config, (), op::infer("m", ContextRequest::new("hi")))
        .await
        .unwrap();
    let profile = memory.by_tags(&["profile".into()]).await.unwrap();
    let counts: Vec<u64> = profile.iter().map(|e| e.access_count).collect();
    assert_eq!(counts.iter().sum::<u64>(), 1, "{counts:?}");
}

#[test]
fn context_events_round_trip_through_jsonl_and_old_lines_still_read() {
    let report: ContextReport = serde_json::from_value(json!({
        "model": "gpt-4o", "encoding": "o200k_base",
        "sources": [{"name": "semantic", "sections": 1, "elapsed_us": 812, "outcome": "hydrated"},
                    {"name": "crm", "sections": 0, "elapsed_us": 3, "outcome": "dropped", "error": "timeout"}],
        "hydrate_us": 900, "compile_us": 40,
        "sections": [{"id": "semantic:1", "source": {"kind": "semantic", "score": 0.8}, "priority": "medium",
                      "tokens_before": 12, "tokens_after": 0, "outcome": "dropped", "reason": "over_budget"}],
        "tools": [], "tokens_before": 40, "tokens_after": 28, "budget": 100, "reserve": 10,
        "available": 90, "compression_ratio": 0.7
    }))
    .unwrap();
    let event = agent_op::Event::now(EventKind::Context(Box::new(report.clone())));
    let line = serde_json::to_string(&event).unwrap();
    let back: agent_op::Event = serde_json::from_str(&line).unwrap();
    assert_eq!(back, event);
    assert_eq!(report.without_timing().sources[0].elapsed_us, 0);
    // A line written before context events existed.
    let old = r#"{"at":"2026-01-24T10:00:00Z","type":"infer_start","data":{"model":"m","prompt_preview":"hi","messages":1,"tools":0,"iteration":0}}"#;
    let old: agent_op::Event = serde_json::from_str(old).unwrap();
    assert_eq!(old.event_type(), EventType::InferStart);
}
