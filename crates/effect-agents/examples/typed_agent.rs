//! A typed agent: two typed tools in a capability-scoped toolbox, a sub-agent with a
//! narrower toolbox and its own budget, and a typed answer. Runs offline on a scripted model;
//! set `OLLAMA_HOST` (and `AGENT_MODEL`, default `llama3.2`) to run it against Ollama, or
//! `OPENAI_BASE_URL` (with `OPENAI_API_KEY` if the server wants one, `AGENT_MODEL` default
//! `gpt-4o-mini`) with the `openai` feature.
//!
//! ```text
//! cargo run --example typed_agent
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_agents::agents::{SubAgent, Toolbox, agent, tool};
use effect_agents::prelude::*;
use effect_agents::{Budget, EventType, Provider, ToolCall};

/// The answer the agent must produce.
#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct TripPlan {
    /// The day to go.
    day: String,
    /// Whether to pack an umbrella.
    umbrella: bool,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    rain: bool,
}

fn toolbox() -> Toolbox {
    let weather = tool(
        "weather",
        "Tomorrow's weather in a city",
        |c: City| async move { Ok(format!("{}: rain in the morning, 9 °C", c.city)) },
    )
    .read_only()
    .needs("net");
    let calendar = tool(
        "free_days",
        "The user's free days next week",
        |_: City| async move { Ok(vec!["Tuesday", "Saturday"]) },
    )
    .read_only()
    .needs("calendar.read");
    Toolbox::new("trip").with(weather).with(calendar)
}

/// A scripted model playing both agents, for running offline.
fn scripted() -> ScriptedProvider {
    let planner = AtomicUsize::new(0);
    let forecaster = AtomicUsize::new(0);
    let call = |id: &str, name: &str, args: Value| {
        let mut reply = Response::text("");
        reply.tool_calls = vec![ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args,
        }];
        reply
    };
    ScriptedProvider::from_fn(move |_, prompt| {
        let system = prompt
            .messages
            .first()
            .map(|m| m.content())
            .unwrap_or_default();
        if system.contains("forecaster") {
            return Ok(match forecaster.fetch_add(1, Ordering::SeqCst) {
                0 => call("f1", "weather", json!({"city": "Bergen"})),
                _ => Response::text("{\"rain\": true}"),
            });
        }
        Ok(match planner.fetch_add(1, Ordering::SeqCst) {
            0 => {
                let mut both = call("p1", "free_days", json!({"city": "Bergen"}));
                both.tool_calls.push(ToolCall {
                    id: "p2".into(),
                    name: "forecast".into(),
                    arguments: json!({"city": "Bergen"}),
                });
                both
            }
            _ => Response::text("```json\n{\"day\": \"Saturday\", \"umbrella\": true}\n```"),
        })
    })
}

fn provider() -> (Arc<dyn Provider>, String) {
    let model = |default: &str| std::env::var("AGENT_MODEL").unwrap_or_else(|_| default.into());
    #[cfg(feature = "openai")]
    if let Ok(url) = std::env::var("OPENAI_BASE_URL") {
        let mut builder = effect_agents::provider::openai::OpenAiClient::compatible(url);
        if std::env::var("OPENAI_API_KEY").is_ok() {
            builder = builder.api_key_from_env("OPENAI_API_KEY");
        }
        if let Ok(client) = builder.build() {
            return (Arc::new(client), model("gpt-4o-mini"));
        }
    }
    #[cfg(feature = "ollama")]
    if std::env::var("OLLAMA_HOST").is_ok()
        && let Ok(client) = effect_agents::provider::ollama::OllamaClient::builder().build()
    {
        return (Arc::new(client), model("llama3.2"));
    }
    (Arc::new(scripted()), "scripted".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (provider, model) = provider();
    let all = toolbox();
    // The forecaster may only look at the weather: a narrower toolbox, three model calls.
    let weather_only = all.narrow("forecast", &["weather"])?;
    let forecast_model = model.clone();
    let forecaster = SubAgent::new(
        "forecast",
        "Says whether it will rain in a city",
        Budget::new().calls(3),
        move |c: City| {
            agent::<(), Forecast>(
                forecast_model.clone(),
                &weather_only,
                format!("Will it rain in {}?", c.city),
            )
            .instructions("You are the forecaster.")
        },
    );
    let program = agent::<(), TripPlan>(model, &all, "Plan a day trip to Bergen next week.")
        .instructions("You are the trip planner.")
        .sub_agent(forecaster)
        .max_turns(6)
        .run();
    let config = Config::new()
        .shared_provider(provider)
        .tools(all.tool_set());
    let outcome = effect_agents::par::run(&config, (), program).await?;
    match &outcome.value {
        Ok(plan) => println!("plan: go on {}, umbrella: {}", plan.day, plan.umbrella),
        Err(e) => println!("no plan: {e}"),
    }
    let trace = &outcome.trace;
    println!(
        "trace: {} events, {} model calls, {} tool calls, {} denied, {} branches",
        trace.events.len(),
        trace.infer_calls(),
        trace.events_of(EventType::ToolCall).count(),
        trace.events_of(EventType::ToolDenied).count(),
        trace.events_of(EventType::Fork).count(),
    );
    Ok(())
}
