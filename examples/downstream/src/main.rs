//! Runs the downstream agents under both interpreters and prints what they returned.

use std::time::Duration;

use downstream::{Findings, echo_model, survey};
use effect_agents::prelude::*;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::new().provider(echo_model(Duration::from_millis(5)));
    let topics = ["otters", "rivers", "kelp"];
    let sequential = run(&config, Findings::default(), survey(&topics)).await?;
    let parallel = effect_agents::par::run(&config, Findings::default(), survey(&topics)).await?;
    println!("sequential: {:?}", sequential.value);
    println!("parallel:   {:?}", parallel.value);
    println!("calls counted: {}", parallel.state.calls.value());
    Ok(())
}
