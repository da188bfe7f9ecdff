//! The downstream crate's agents, run under both interpreters through the facade.

use std::time::Duration;

use downstream::{Findings, echo_model, research, search_tool, survey};
use effect_agents::prelude::*;
use effect_agents::provider::HttpError;
use effect_agents::{ErrorKind, MicroUsd, ProviderError};
use tokio::time::Instant;

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

/// On a paused clock (virtual time), so the model's 60 ms are exact.
#[tokio::test(start_paused = true)]
async fn derived_merge_joins_branch_states_and_par_runs_branches_at_once() {
    let topics = ["otters", "rivers", "kelp"];
    let config = Config::new()
        .provider(echo_model(Duration::from_millis(60)))
        .trace_id("survey");
    let started = Instant::now();
    let seq = run(&config, Findings::default(), survey(&topics))
        .await
        .expect("sequential run");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(180),
        "three 60 ms calls one after the other"
    );
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
    assert_eq!(took, Duration::from_millis(60), "three 60 ms calls at once");
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
        retry_after: Some(Duration::from_secs(2)),
        message: "slow down".into(),
        cause: None,
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

/// Serves each connection on 127.0.0.1 the next of `replies` (raw HTTP responses; `None`
/// never answers), and returns the base URL.
async fn http_server(replies: Vec<Option<&'static str>>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for reply in replies {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // Read the request head and body (enough for the client to finish sending).
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                match reply {
                    Some(reply) => {
                        let _ = socket.write_all(reply.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(60)).await,
                }
            });
        }
    });
    url
}

/// Real HTTP failures, through the facade's OpenAI client: a 429, a 401, a timeout and a
/// reply that is not JSON are four different variants, with no text to parse.
#[tokio::test]
async fn real_http_failures_are_told_apart_by_kind() {
    use effect_agents::provider::openai::OpenAiClient;
    let url = http_server(vec![
        Some(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 7\r\n\
             content-length: 47\r\nconnection: close\r\n\r\n{\"error\":{\"message\":\"slow\",\"type\":\"limit\"}}  ",
        ),
        Some(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 44\r\n\
             connection: close\r\n\r\n{\"error\":{\"message\":\"bad key\",\"type\":\"x\"}}",
        ),
        None,
        Some(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\
             connection: close\r\n\r\n{\"choices",
        ),
    ])
    .await;
    let client = OpenAiClient::compatible(url)
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let config = Config::new().provider(client);
    let ask = || op::infer_raw::<()>("m", Prompt::new().user("hi"));
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let err = run(&config, (), ask()).await.expect_err("a failure");
        let ErrorKind::Provider { error, .. } = &err.kind else {
            panic!("not a provider error: {err}");
        };
        // The HTTP answer, when there was one, is the error's cause.
        let status = HttpError::of(error).map(|answer| answer.status);
        kinds.push(match (error, status) {
            (
                ProviderError::RateLimited {
                    retry_after: Some(after),
                    ..
                },
                Some(429),
            ) if *after == Duration::from_secs(7) => "rate limited",
            (ProviderError::Authentication { .. }, Some(401)) => "authentication",
            (ProviderError::Timeout { .. }, None) => "timeout",
            (ProviderError::Decode { .. }, None) => {
                // The JSON error itself is reachable through the chain.
                let source = std::error::Error::source(error).expect("a cause");
                assert!(
                    source.downcast_ref::<serde_json::Error>().is_some(),
                    "{source:?}"
                );
                "decode"
            }
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(
        kinds,
        ["rate limited", "authentication", "timeout", "decode"]
    );
}
