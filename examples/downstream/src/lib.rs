//! Agents written as a user of `effect-agents` would: against the facade alone.
//!
//! Nothing here imports `agent-op` or the interpreter crates, so this crate checks that the
//! front door is enough: the DSL and `op!`, `#[derive(Merge)]`, both interpreters, the
//! provider and memory modules, and errors a program can match on.

use std::time::Duration;

use effect_agents::crdt::{GCounter, GSet};
use effect_agents::prelude::*;

/// The README's research agent: ask what to search, search, note the fact (the state is the
/// list of facts), checkpoint, answer.
pub fn research(question: &str) -> Op<Vec<String>, String> {
    let question = question.to_owned();
    effect_agents::op! {
        let plan <- op::infer_raw("planner", Prompt::new().system("Reply with a search query.").user(question.clone()));
        let found <- op::tool("search", json!({ "query": plan.content }));
        let fact = found.unwrap_or_else(|e| Value::String(format!("search failed: {e}")));
        op::modify(move |facts: &mut Vec<String>| facts.push(fact.to_string()));
        op::checkpoint("searched");
        let facts <- op::gets(|facts: &Vec<String>| facts.join("\n"));
        let answer <- op::infer_raw("writer", Prompt::new().user(format!("{question}\nFacts:\n{facts}")));
        op::pure(answer.content)
    }
}

/// An offline search tool for [`research`].
pub fn search_tool() -> impl Tool {
    FnTool::new(
        "search",
        "Searches a small offline encyclopedia",
        json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        |args: Value| {
            std::future::ready(match args["query"].as_str() {
                Some(q) if q.contains("otter") => {
                    Ok(json!("Sea otters hold hands while sleeping."))
                }
                Some(q) => Ok(json!(format!("No entry for {q:?}."))),
                None => Err(ToolError::invalid_arguments("`query` must be a string")),
            })
        },
    )
}

/// What a fan-out of [`survey`] branches gathers: merged field by field when they join.
/// (`Serialize` through the facade needs serde told where it is.)
#[derive(Clone, Debug, Default, PartialEq, effect_agents::serde::Serialize, Merge)]
#[serde(crate = "effect_agents::serde")]
pub struct Findings {
    /// Every answer seen, by any branch.
    pub answers: GSet<String>,
    /// Model calls made, per branch.
    pub calls: GCounter,
}

/// Asks about every topic in parallel branches, each recording its answer in [`Findings`].
pub fn survey(topics: &[&str]) -> Op<Findings, Vec<String>> {
    let branches = topics
        .iter()
        .map(|topic| {
            op::infer_raw("m", Prompt::new().user(format!("Tell me about {topic}"))).and_then(
                |reply| {
                    let answer = reply.content;
                    let noted = answer.clone();
                    op::modify_as(move |f: &mut Findings, me| {
                        f.answers.insert(noted);
                        f.calls.increment(me, 1);
                    })
                    .map(move |_| answer)
                },
            )
        })
        .collect();
    op::par(branches)
}

/// A model that answers every prompt by upper-casing it, after `latency`.
pub fn echo_model(latency: Duration) -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, prompt| {
        let last = prompt.messages.last().map(|m| m.content().to_uppercase());
        Ok(Response::text(last.unwrap_or_default()))
    })
    .with_latency(latency)
}

/// Compiles the code in the workspace README as doc tests, so the repository's front page
/// cannot drift from the API. It lives here, in a crate that is never published, because
/// each published crate ships only its own files (its own README).
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct WorkspaceReadmeDoctests;
