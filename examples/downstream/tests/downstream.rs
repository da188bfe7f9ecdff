//! The downstream crate's agents, run under both interpreters through the facade.

use std::time::{Duration, Instant};

use downstream::{Findings, echo_model, research, search_tool, survey};
use effect_agents::prelude::*;
use effect_agents::{ErrorKind, MicroUsd, ProviderError};

fn research_config() -> Config {
    let model = ScriptedProvider::new([
        Response::text("why do sea otters hold hands").with_cost(MicroUsd(60)),
        Response::text("So they do not drift apart.").with_cost(MicroUsd(170)),
    ]);
    Config::new().provider(model).tool(search_tool())
}

#[tokio::test]
async fn the_readme_agent_runs_the_same_under_both_interpreters() {
    let question = "Why do otters hold hands?";
    let seq = run(&research_config(), Vec::new(), research(question))
        .await
        .expect("sequential run");
    let par = effect_agents::par::run(&research_config(), Vec::new(), research(question))
        .await
        .expect("parallel run");
    for outcome in [&seq, &par] {
        assert_eq!(outcome.value, "So they do not drift apart.");
        assert_eq!(outcome.state, ["\"Sea otters hold hands while sleeping.\""]);
        assert_eq!(outcome.trace.checkpoints(), ["searched"]);
        assert_eq!(outcome.trace.infer_calls(), 2);
        assert_eq!(outcome.trace.total_cost().known, MicroUsd(230));
    }
    assert_eq!(seq.trace.events.len(), par.trace.events.len());
}

#[tokio::test]
async fn derived_merge_joins_branch_states_and_par_runs_branches_at_once() {
    let topics = ["otters", "rivers", "kelp"];
    let config = Config::new()
        .provider(echo_model(Duration::from_millis(60)))
        .trace_id("survey");
    let seq = run(&config, Findings::default(), survey(&topics))
        .await
        .expect("sequential run");
    let started = Instant::now();
    let par = effect_agents::par::run(&config, Findings::default(), survey(&topics))
        .await
        .expect("parallel run");
    let took = started.elapsed();
    assert_eq!(seq.value, par.value);
    assert_eq!(
        seq.state, par.state,
        "the derived Merge joined the same state"
    );
    assert_eq!(par.state.answers.len(), 3);
    assert_eq!(
        par.state.calls.value(),
        3,
        "one count per branch, none lost"
    );
    assert!(
        took < Duration::from_millis(170),
        "three 60 ms calls in par took {took:?}"
    );
}

#[tokio::test]
async fn a_program_can_tell_failures_apart_without_reading_text() {
    // A tool the run does not permit.
    let program: Op<(), _> = op::tool("delete_everything", json!({}));
    let err = run(&Config::new().tool(search_tool()), (), program)
        .await
        .expect_err("an unpermitted tool ran");
    assert!(
        matches!(&err.kind, ErrorKind::UnknownTool { name, .. } if name == "delete_everything"),
        "{err}"
    );

    // Model failures, by kind.
    let failing = |error: ProviderError| {
        Config::new().provider(ScriptedProvider::from_fn(move |_, _| Err(error.clone())))
    };
    let ask = || op::infer_raw::<()>("m", Prompt::new().user("hi"));
    let rate_limited = ProviderError::RateLimited {
        status: 429,
        retry_after: Some(Duration::from_secs(2)),
        message: "slow down".into(),
    };
    let err = run(&failing(rate_limited), (), ask())
        .await
        .expect_err("429");
    assert!(
        matches!(
            &err.kind,
            ErrorKind::Provider { error: ProviderError::RateLimited { retry_after: Some(after), .. }, .. }
                if *after == Duration::from_secs(2)
        ),
        "{err}"
    );
    let timeout = ProviderError::Timeout {
        after: Duration::from_secs(30),
    };
    let err = run(&failing(timeout), (), ask())
        .await
        .expect_err("timeout");
    assert!(
        matches!(
            &err.kind,
            ErrorKind::Provider {
                error: ProviderError::Timeout { .. },
                ..
            }
        ),
        "{err}"
    );
}
