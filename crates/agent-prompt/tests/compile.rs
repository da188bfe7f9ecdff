//! Compilation: the rules of `agent_prompt::compile`, and properties over random IRs.

use agent_op::{Message, ToolCall, ToolDefinition};
use agent_prompt::{
    BudgetAllocation, CompositionMode, DropReason, Encoding, Outcome, Priority, PromptError,
    PromptIr, PromptMeta, Section, SectionSource, TokenBudget, TokenCounter, ToolDef, compile,
    compose,
};
use proptest::prelude::*;

fn now() -> agent_op::Timestamp {
    chrono::DateTime::from_timestamp(1_760_000_000, 0).expect("a valid time")
}

fn ir(budget: u32, observation: &str) -> PromptIr {
    PromptIr::new(
        observation,
        PromptMeta::new(TokenBudget::new(budget), now()),
    )
}

fn words(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("w{}x ", (seed * 31 + i * 7) % 211))
        .collect()
}

/// The tokens the compiled prompt really takes, counted afresh from its messages.
fn recount(prompt: &agent_op::Prompt, counter: &TokenCounter) -> u32 {
    let tools: u32 = prompt
        .tools
        .iter()
        .map(|t| {
            agent_prompt::TOOL_OVERHEAD
                + counter.count(&t.name)
                + counter.count(&t.description)
                + counter.count(&t.parameters.to_string())
        })
        .sum();
    agent_prompt::REPLY_PRIMING + counter.count_messages(&prompt.messages.to_vec()) + tools
}

fn outcome<'a>(report: &'a agent_prompt::CompileReport, id: &str) -> &'a Outcome {
    &report
        .sections
        .iter()
        .find(|s| s.id == id)
        .expect("the section is reported")
        .outcome
}

#[test]
fn critical_sections_that_do_not_fit_are_an_error_saying_by_how_much() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let ir = ir(40, "question")
        .section(Section::text("base", "## Base", words(100, 1)).with_priority(Priority::Critical));
    let err = compile(&ir, &counter).unwrap_err();
    let PromptError::CriticalOverBudget { needed, available } = err else {
        panic!("{err:?}");
    };
    assert_eq!(available, 36);
    assert!(needed > available);
    assert!(
        err.to_string()
            .contains(&format!("({} over)", needed - available)),
        "{err}"
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    let counter = TokenCounter::new(Encoding::Approximate);
    assert_eq!(compile(&ir(100, ""), &counter), Err(PromptError::Empty));
    let empty_section = ir(100, "").section(Section::text("a", "", ""));
    assert_eq!(compile(&empty_section, &counter), Err(PromptError::Empty));
    let twice = ir(100, "q")
        .section(Section::text("a", "", "x"))
        .section(Section::text("a", "", "y"));
    assert_eq!(
        compile(&twice, &counter),
        Err(PromptError::DuplicateSectionId { id: "a".into() })
    );
    // A budget of 0 cannot hold even the reply's priming.
    assert!(matches!(
        compile(&ir(0, "q"), &counter),
        Err(PromptError::CriticalOverBudget { available: 0, .. })
    ));
}

#[test]
fn sections_are_shrunk_toward_their_minimum_before_any_is_dropped() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let mut ir = ir(0, "q")
        .section(Section::text("notes", "## Notes", words(300, 2)).with_min_tokens(60))
        .section(Section::text("facts", "## Facts", words(100, 3)).with_priority(Priority::Low));
    ir.count(&counter);
    // Room for the facts whole and the notes at twice their minimum.
    let need = ir.sections[1].tokens + 120 + 30;
    ir.meta.budget = TokenBudget::new(need).with_reserve(0.0);
    let compiled = compile(&ir, &counter).unwrap();
    let report = &compiled.report;
    assert_eq!(outcome(report, "notes"), &Outcome::Shrunk);
    assert_eq!(outcome(report, "facts"), &Outcome::Kept);
    assert!(report.tokens_after <= report.available);
    assert!(recount(&compiled.prompt, &counter) <= report.available);
    // The shrunk section keeps its start.
    let system = compiled.prompt.messages[0].content();
    assert!(system.starts_with(&format!("## Notes\n{}", &words(300, 2)[..20])));
}

#[test]
fn the_recent_conversation_keeps_its_newest_part() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let log = (0..200)
        .map(|i| format!("[{i}] message {i}\n"))
        .collect::<String>();
    let mut ir = ir(300, "q").section(
        Section::text("recent", "## Recent", log)
            .with_source(SectionSource::Temporal)
            .with_min_tokens(10),
    );
    ir.count(&counter);
    let compiled = compile(&ir, &counter).unwrap();
    let system = compiled.prompt.messages[0].content();
    assert!(system.ends_with("[199] message 199"), "{system}");
    assert!(!system.contains("[0] message 0\n"));
}

fn call(id: &str) -> Message {
    Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "search".into(),
            arguments: serde_json::json!({"q": id}),
        }],
    }
}

#[test]
fn message_sections_keep_tool_calls_with_their_results_and_drop_orphans() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let messages = vec![
        Message::tool_result("orphan", "an answer whose call is not here"),
        Message::user("first question ".repeat(30)),
        call("c1"),
        Message::tool_result("c1", "result one ".repeat(20)),
        Message::user("second"),
        call("c2"),
        Message::tool_result("c2", "result two"),
    ];
    let whole = counter.count_messages(&messages[1..]);
    for size in (10..whole + 10).step_by(7) {
        let mut ir = ir(size + 60, "q")
            .section(Section::messages("chat", messages.clone()).with_min_tokens(1));
        ir.meta.budget = ir.meta.budget.clone().with_reserve(0.0);
        ir.count(&counter);
        let Ok(compiled) = compile(&ir, &counter) else {
            continue;
        };
        let sent = compiled.prompt.messages.to_vec();
        // Never starts with a tool result; every tool result follows its call.
        assert!(
            !matches!(sent.first(), Some(Message::Tool { .. })),
            "{size}: {sent:?}"
        );
        for (i, m) in sent.iter().enumerate() {
            if let Message::Tool { tool_call_id, .. } = m {
                let called = sent[..i].iter().rev().any(|earlier| {
                    matches!(earlier, Message::Assistant { tool_calls, .. }
                        if tool_calls.iter().any(|c| &c.id == tool_call_id))
                });
                assert!(called, "{size}: orphan {tool_call_id} in {sent:?}");
            }
        }
        assert!(recount(&compiled.prompt, &counter) <= compiled.report.available);
    }
}

#[test]
fn low_priority_tools_go_before_medium_sections() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let tool = |name: &str, priority| {
        ToolDef::new(ToolDefinition {
            name: name.into(),
            description: words(40, 9),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        })
        .with_priority(priority)
    };
    let mut ir = ir(0, "q")
        .section(Section::text("context", "## Context", words(60, 4)))
        .tool(tool("rare", Priority::Low))
        .tool(tool("main", Priority::Critical));
    ir.count(&counter);
    // Room for everything but one tool.
    let need = ir.sections[0].tokens + ir.tools[1].tokens + 30;
    ir.meta.budget = TokenBudget::new(need).with_reserve(0.0);
    let compiled = compile(&ir, &counter).unwrap();
    let report = &compiled.report;
    assert_eq!(outcome(report, "context"), &Outcome::Kept);
    assert_eq!(
        report.tools[0].outcome,
        Outcome::Dropped {
            reason: DropReason::OverBudget
        }
    );
    assert_eq!(report.tools[1].outcome, Outcome::Kept);
    let names: Vec<_> = compiled
        .prompt
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["main"]);
}

#[test]
fn fixed_ratios_cap_each_share() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let mut ir = ir(1_000, "q")
        .section(
            Section::text("rules", "## Rules", words(300, 5))
                .with_composition(CompositionMode::Constraint),
        )
        .section(Section::text("memories", "## Memories", words(100, 6)));
    ir.meta.budget = TokenBudget::new(1_000).with_allocation(BudgetAllocation::FixedRatios {
        system: 0.2,
        context: 0.7,
        observation: 0.1,
    });
    ir.count(&counter);
    let report = compile(&ir, &counter).unwrap().report;
    assert_eq!(
        outcome(&report, "rules"),
        &Outcome::Dropped {
            reason: DropReason::OverAllocation
        }
    );
    assert_eq!(outcome(&report, "memories"), &Outcome::Kept);
}

#[test]
fn relevance_and_recency_rank_sections_of_one_priority() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let old = now() - chrono::Duration::days(30);
    let mut ir = ir(0, "q")
        .section(Section::text("stale", "## A", words(60, 7)).with_recency(old))
        .section(Section::text("fresh", "## B", words(60, 8)).with_recency(now()))
        .section(Section::text("nan", "## C", words(60, 9)).with_relevance(f32::NAN));
    ir.count(&counter);
    // Room for one section.
    let need = ir.sections[1].tokens + 30;
    ir.meta.budget = TokenBudget::new(need).with_reserve(0.0);
    let report = compile(&ir, &counter).unwrap().report;
    assert_eq!(outcome(&report, "fresh"), &Outcome::Kept);
    assert!(!outcome(&report, "stale").is_sent());
    assert!(!outcome(&report, "nan").is_sent());
}

#[test]
fn duplicates_are_sent_once_at_their_highest_priority() {
    let counter = TokenCounter::new(Encoding::O200kBase);
    let ir = ir(500, "q")
        .section(Section::text("a", "## Same", "same text"))
        .section(Section::text("b", "## Same", "same text").with_priority(Priority::Critical));
    let compiled = compile(&ir, &counter).unwrap();
    assert_eq!(
        outcome(&compiled.report, "a"),
        &Outcome::Dropped {
            reason: DropReason::Duplicate
        }
    );
    assert_eq!(outcome(&compiled.report, "b"), &Outcome::Kept);
    assert_eq!(
        compiled.prompt.messages[0]
            .content()
            .matches("same text")
            .count(),
        1
    );
}

#[test]
fn compose_orders_by_mode_dedups_and_renames() {
    let a = ir(100, "first")
        .section(
            Section::text("ctx", "", "a-context").with_composition(CompositionMode::Contextual),
        )
        .section(
            Section::text("base", "", "a-base").with_composition(CompositionMode::Hierarchical),
        )
        .section(Section::text("shared", "", "same").with_composition(CompositionMode::Additive));
    let b = ir(100, "second")
        .section(
            Section::text("base", "", "b-base").with_composition(CompositionMode::Hierarchical),
        )
        .section(Section::text("rule", "", "b-rule").with_composition(CompositionMode::Constraint))
        .section(Section::text("shared2", "", "same").with_composition(CompositionMode::Additive));
    let c = compose(a.clone(), b.clone());
    let ids: Vec<_> = c.sections.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["base", "base#2", "rule", "shared", "ctx"]);
    assert_eq!(c.observation, "first\n\nsecond");
    assert_eq!(compose(a, b), c, "deterministic");
}

#[test]
fn every_type_round_trips_through_json() {
    let mut ir = ir(1_000, "q")
        .section(
            Section::text("s", "## S", "text")
                .with_source(SectionSource::Semantic { score: 0.82 })
                .with_relevance(0.5)
                .with_recency(now())
                .with_min_tokens(3)
                .with_embedding(vec![0.1, 0.2]),
        )
        .section(Section::messages("m", vec![Message::user("hi"), call("c")]))
        .tool(ToolDef::new(ToolDefinition {
            name: "t".into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}),
        }));
    ir.meta.budget.allocation = BudgetAllocation::FixedRatios {
        system: 0.3,
        context: 0.6,
        observation: 0.1,
    };
    ir.count(&TokenCounter::new(Encoding::Cl100kBase));
    let json = serde_json::to_string(&ir).unwrap();
    let back: PromptIr = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ir);
    let request = agent_prompt::ContextRequest::new("q").with_goal("g");
    let json = serde_json::to_string(&request).unwrap();
    assert_eq!(
        serde_json::from_str::<agent_prompt::ContextRequest>(&json).unwrap(),
        request
    );
    let report = compile(&ir, &TokenCounter::new(Encoding::Cl100kBase))
        .unwrap()
        .report;
    let json = serde_json::to_string(&report).unwrap();
    assert_eq!(
        serde_json::from_str::<agent_prompt::CompileReport>(&json).unwrap(),
        report
    );
}

fn priority() -> impl Strategy<Value = Priority> {
    prop_oneof![
        Just(Priority::Low),
        Just(Priority::Medium),
        Just(Priority::High),
        Just(Priority::Critical),
    ]
}

fn section(i: usize) -> impl Strategy<Value = Section> {
    (
        0usize..120,
        priority(),
        proptest::option::of(prop_oneof![Just(f32::NAN), 0.0f32..1.0]),
        proptest::option::of(0u32..80),
        any::<bool>(),
        prop_oneof!["[a-z ]{0,40}", "[日本語テキスト🦀 ]{0,20}"],
    )
        .prop_map(move |(n, priority, relevance, min, temporal, extra)| {
            let mut s = Section::text(format!("s{i}"), format!("## {i}"), words(n, i) + &extra)
                .with_priority(priority);
            s.relevance = relevance;
            s.min_tokens = min;
            if temporal {
                s = s.with_source(SectionSource::Temporal);
            }
            s
        })
}

/// One unit of a conversation: a user message, or an assistant message calling 1–3 tools
/// followed by their results (in the order called).
fn conversation_unit(i: usize) -> impl Strategy<Value = Vec<Message>> {
    prop_oneof![
        (0usize..30).prop_map(move |n| vec![Message::user(words(n, i))]),
        (1usize..4, 0usize..40).prop_map(move |(calls, n)| {
            let ids: Vec<String> = (0..calls).map(|c| format!("c{i}_{c}")).collect();
            let mut unit = vec![Message::Assistant {
                content: String::new(),
                tool_calls: ids
                    .iter()
                    .map(|id| ToolCall {
                        id: id.clone(),
                        name: "search".into(),
                        arguments: serde_json::json!({"q": id}),
                    })
                    .collect(),
            }];
            unit.extend(ids.iter().map(|id| Message::tool_result(id, words(n, i))));
            unit
        }),
    ]
}

/// A conversation section: units, sometimes after an orphan tool result (its call cut off
/// before the window), at any priority and minimum.
fn conversation(i: usize) -> impl Strategy<Value = Section> {
    (
        proptest::collection::vec(conversation_unit(i), 0..8),
        any::<bool>(),
        priority(),
        proptest::option::of(0u32..80),
    )
        .prop_map(move |(units, orphan, priority, min)| {
            let mut messages = Vec::new();
            if orphan {
                messages.push(Message::tool_result(
                    "gone",
                    "a result whose call is not here",
                ));
            }
            messages.extend(units.into_iter().flatten());
            let mut s = Section::messages(format!("chat{i}"), messages)
                .with_priority(priority)
                .with_source(SectionSource::Temporal);
            s.min_tokens = min;
            s
        })
}

fn random_ir() -> impl Strategy<Value = (PromptIr, u32)> {
    (0usize..12, 0usize..3, 0u32..1_500)
        .prop_flat_map(|(n, chats, budget)| {
            let sections: Vec<_> = (0..n).map(section).collect();
            let chats: Vec<_> = (0..chats).map(|c| conversation(100 + c)).collect();
            (sections, chats, Just(budget))
        })
        .prop_map(|(mut sections, chats, budget)| {
            // Conversations in the middle, as the temporal window usually sits.
            let at = sections.len() / 2;
            sections.splice(at..at, chats);
            let mut ir = ir(budget, "what now?");
            ir.sections = sections;
            (ir, budget)
        })
}

/// Every tool result sent follows the call that asked for it, and every call sent has all
/// its results right after it: a window never splits a call from its results.
fn tool_pairs_intact(sent: &[Message]) -> Result<(), String> {
    for (i, m) in sent.iter().enumerate() {
        match m {
            Message::Tool { tool_call_id, .. } => {
                let called = sent[..i].iter().rev().any(|earlier| {
                    matches!(earlier, Message::Assistant { tool_calls, .. }
                        if tool_calls.iter().any(|c| &c.id == tool_call_id))
                });
                if !called {
                    return Err(format!("orphan result {tool_call_id} at {i}"));
                }
            }
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let following: Vec<&str> = sent[i + 1..]
                    .iter()
                    .map_while(|m| match m {
                        Message::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
                        _ => None,
                    })
                    .collect();
                for call in tool_calls {
                    if !following.contains(&call.id.as_str()) {
                        return Err(format!("call {} at {i} without its result", call.id));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn compiled_prompts_fit_keep_critical_sections_and_tool_pairs_and_are_deterministic((ir, budget) in random_ir()) {
        for encoding in [Encoding::O200kBase, Encoding::Approximate] {
            let counter = TokenCounter::new(encoding);
            let mut counted = ir.clone();
            counted.count(&counter);
            match compile(&counted, &counter) {
                Ok(compiled) => {
                    let available = TokenBudget::new(budget).available();
                    prop_assert!(compiled.report.tokens_after <= available);
                    prop_assert!(recount(&compiled.prompt, &counter) <= available,
                        "recounted {} > {available}", recount(&compiled.prompt, &counter));
                    for (section, report) in counted.sections.iter().zip(&compiled.report.sections) {
                        if section.priority == Priority::Critical && !section.content.is_empty() {
                            prop_assert!(
                                report.outcome == Outcome::Kept
                                    || report.outcome == Outcome::Dropped { reason: DropReason::Duplicate }
                                    // A conversation of nothing but results whose calls are gone.
                                    || report.outcome == Outcome::Dropped { reason: DropReason::Empty },
                                "{report:?}"
                            );
                        }
                    }
                    if let Err(split) = tool_pairs_intact(&compiled.prompt.messages.to_vec()) {
                        prop_assert!(false, "{split}: {:?}", compiled.prompt.messages);
                    }
                    // Same IR, same bytes — counted or not.
                    let again = compile(&ir, &counter).unwrap();
                    prop_assert_eq!(&again.prompt, &compiled.prompt);
                }
                Err(PromptError::CriticalOverBudget { needed, available }) => {
                    prop_assert!(needed > available);
                }
                Err(PromptError::Empty) => {}
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}
