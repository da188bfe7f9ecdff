//! An agent that answers from what it remembers: `op::infer` with a `ContextRequest`, its
//! context hydrated from the rules, the program's state, the conversation and a memory store,
//! compiled under a small token budget. Runs offline (a scripted model) and prints, for each
//! call, which sections were sent and which were dropped, and why.
//!
//! ```text
//! cargo run --example memory_answer
//! ```

use effect_agents::context::{ContextStrategy, Outcome, SourceOutcome, TokenBudget};
use effect_agents::memory::InMemoryBackend;
use effect_agents::prelude::*;
use effect_agents::prompt::{
    Conversation, FromState, Knowledge, Pipeline, Priority, Semantic, Static,
};
use effect_agents::{EventKind, EventType, Message, NewMemory};

/// The program's state: who it talks to and what was said.
#[derive(Clone, Default)]
struct Chat {
    user: String,
    history: Vec<Message>,
}

/// One turn: ask with a context request, then remember both sides of the exchange.
fn turn(question: &'static str) -> Op<Chat, String> {
    let request = ContextRequest::new(question)
        .with_budget(TokenBudget::new(220))
        .with_strategy(ContextStrategy {
            semantic_limit: 3,
            semantic_threshold: 0.1,
            ..ContextStrategy::default()
        });
    op::infer("gpt-4o-mini", request).and_then(move |reply| {
        let answer = reply.content.clone();
        op::modify(move |chat: &mut Chat| {
            chat.history.push(Message::user(question));
            chat.history.push(Message::assistant(reply.content));
        })
        .map(move |_| answer)
    })
}

fn pipeline() -> Pipeline {
    Pipeline::new()
        .source(Static::text(
            "rules",
            "## Rules",
            "Answer in one sentence, only from what you know.",
        ))
        .source(FromState::new("user", "## User", |c: &Chat| {
            Some(format!("You are talking to {}.", c.user))
        }))
        .source(Knowledge::tagged("profile"))
        .source(Conversation::from_state(|c: &Chat| &c.history))
        .optional_source(Semantic::new())
        .source(
            Static::text("style", "## House style", "Prefer plain words. ".repeat(60))
                .priority(Priority::Low),
        )
}

async fn memories() -> InMemoryBackend {
    let memory = InMemoryBackend::new();
    let facts = [
        ("Ana prefers answers without jargon.", "profile"),
        (
            "The launch moved from Monday to Tuesday 10:00 because the demo server was down.",
            "event",
        ),
        (
            "The demo server is ci-3; it was repaired on Sunday.",
            "event",
        ),
        ("The team lunch is on Friday.", "event"),
    ];
    for (content, tag) in facts {
        let memory_entry = NewMemory {
            content: content.into(),
            context: "chat".into(),
            tags: vec![tag.into()],
        };
        memory.store(memory_entry).await.expect("stored");
    }
    memory
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedProvider::new([
        Response::text("The launch is on Tuesday at 10:00."),
        Response::text("Because the demo server, ci-3, was down."),
    ]);
    let config = Config::new()
        .provider(model)
        .memory(memories().await)
        .context_pipeline(pipeline());
    let program = turn("When is the launch?")
        .and_then(|first| turn("Why did it move?").map(move |second| (first, second)));
    let outcome = run(
        &config,
        Chat {
            user: "Ana".into(),
            ..Chat::default()
        },
        program,
    )
    .await?;
    println!("answers: {:?}\n", outcome.value);

    for (call, entry) in outcome.trace.events_of(EventType::Context).enumerate() {
        let EventKind::Context(report) = &entry.event.kind else {
            continue;
        };
        println!(
            "call {call}: {} of {} tokens available ({} reserved), compression {:.2}",
            report.compile.tokens_after,
            report.compile.available,
            report.compile.reserve,
            report.compile.compression_ratio
        );
        for source in &report.sources {
            let outcome = match &source.outcome {
                SourceOutcome::Dropped { error } => format!("dropped: {error}"),
                other => format!("{other:?}").to_lowercase(),
            };
            println!(
                "  source {:<12} {:>2} section(s) {:>6} µs  {outcome}",
                source.name, source.sections, source.elapsed_us
            );
        }
        for section in &report.compile.sections {
            let why = match &section.outcome {
                Outcome::Dropped { reason } => format!("dropped ({reason:?})"),
                other => format!("{other:?}").to_lowercase(),
            };
            println!(
                "  section {:<40} {:>4} -> {:>4} tokens  {why}",
                section.id, section.tokens_before, section.tokens_after
            );
        }
    }
    Ok(())
}
