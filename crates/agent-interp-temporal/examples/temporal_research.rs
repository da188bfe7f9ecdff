//! A program run as a durable Temporal workflow, with its model calls as activities.
//!
//! ```sh
//! cargo xtask temporal start      # a local development server; prints its address
//! cargo run -p agent-interp-temporal --example temporal_research -- "$(cat target/temporal/address)"
//! ```
//!
//! The worker and the client share this process here; in production they are separate
//! deployments (any number of workers on the task queue, clients anywhere).

use std::time::Duration;

use agent_interp_temporal::{StartOptions, Worker, connect, start};
use agent_op::{Op, Prompt, Response, op};
use agent_provider::ScriptedProvider;

/// Asks three questions at once, then summarizes the answers.
fn research(topic: String) -> Op<(), String> {
    let ask = |q: String| op::infer_raw("any-model", Prompt::new().user(q)).map(|r| r.content);
    op::par(vec![
        ask(format!("history of {topic}")),
        ask(format!("uses of {topic}")),
        ask(format!("risks of {topic}")),
    ])
    .and_then(move |notes| ask(format!("summarize: {}", notes.join(" | "))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7233".into());
    let client = connect(&address).await?;
    // A scripted model, so the example runs offline; use `agent_provider`'s OpenAI or Ollama
    // client for a real one.
    let model = ScriptedProvider::from_fn(|_, prompt| {
        let asked = prompt
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("[{asked}]")))
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), "research")
        .provider(model)
        .program("research", research)
        .run(async move {
            let _ = stopped.await;
        });
    let client_side = async {
        let run = start(
            &client,
            "research",
            "lighthouses",
            StartOptions::new("research"),
        )
        .await?;
        println!("started workflow {}", run.workflow_id());
        let outcome =
            tokio::time::timeout(Duration::from_secs(60), run.result::<(), String>()).await??;
        println!("{}", outcome.value);
        println!(
            "{} model calls, {} events",
            outcome.trace.infer_calls(),
            outcome.trace.events.len()
        );
        let _ = stop.send(());
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    let (ran, done) = tokio::join!(worker, client_side);
    ran?;
    done
}
