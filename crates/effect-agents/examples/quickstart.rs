//! The quickstart: a small research agent, run by the sequential interpreter against a scripted
//! model (no network, no API key), printing its answer and a trace summary and writing the
//! trace as JSONL.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use effect_agents::MicroUsd;
use effect_agents::prelude::*;
use effect_agents::trace::jsonl::write_trace_file;

/// Ask the model what to search, search, note the result (the state is the list of facts
/// found), checkpoint, then write the answer.
fn research(question: &str) -> Op<Vec<String>, String> {
    let question = question.to_owned();
    op! {
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

/// An offline stand-in for a search API.
fn search_tool() -> FnTool<impl Fn(Value) -> std::future::Ready<Result<Value, ToolError>>> {
    let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
    FnTool::new(
        "search",
        "Searches a small offline encyclopedia",
        schema,
        |args: Value| {
            std::future::ready(match args["query"].as_str() {
                Some(q) if q.contains("otter") => Ok(json!(
                    "Sea otters hold hands while sleeping so they do not drift apart."
                )),
                Some(q) => Ok(json!(format!("No entry for {q:?}."))),
                None => Err(ToolError::invalid_arguments("`query` must be a string")),
            })
        },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A scripted model: the replies a real model might give, with usage and cost.
    let model = ScriptedProvider::new([
        Response::text("why do sea otters hold hands")
            .with_usage(42, 8)
            .with_cost(MicroUsd(63)),
        Response::text(
            "Sea otters hold hands while they sleep so the current does not separate them.",
        )
        .with_usage(96, 21)
        .with_cost(MicroUsd(171)),
    ]);
    let config = Config::new().provider(model).tool(search_tool());

    let outcome = run(&config, Vec::new(), research("Why do otters hold hands?")).await?;

    println!("answer: {}", outcome.value);
    let trace = &outcome.trace;
    let tokens = trace.total_tokens();
    let cost = trace.total_cost();
    println!("trace {}:", trace.id);
    println!("  events       {}", trace.events.len());
    println!("  model calls  {}", trace.infer_calls());
    println!("  tool calls   {}", trace.tool_calls().len());
    println!(
        "  tokens       {} in / {} out",
        tokens.input_tokens, tokens.output_tokens
    );
    println!(
        "  cost         {} ({:.4} cents)",
        cost.known,
        cost.known.cents()
    );
    println!("  checkpoints  {:?}", trace.checkpoints());
    if let Some(d) = trace.total_duration() {
        println!("  duration     {d:?}");
    }
    std::fs::create_dir_all("traces")?;
    let path = format!("traces/{}.jsonl", trace.id);
    write_trace_file(&path, trace)?;
    println!("trace written to {path}");
    Ok(())
}
