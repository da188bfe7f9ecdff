//! Recording calls to a cassette and replaying them without a network.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_op::{Cause, Delta, MicroUsd, Prompt, Provider, ProviderError, Response, ToolDefinition};
use agent_provider::ScriptedProvider;
use agent_provider::cassette::{
    CassetteEntry, CassetteError, RecordingProvider, ReplayProvider, fingerprint,
};
use agent_provider::{HttpError, ModelPrice, OpenAiClient, Pricing};
use common::{Reply, TestServer, sse_events};
use serde_json::json;

fn prompt(text: &str) -> Prompt {
    Prompt::new().user(text)
}

#[tokio::test]
async fn recorded_calls_replay_identically_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let limited = ProviderError::RateLimited {
        retry_after: Some(Duration::from_millis(1500)),
        message: "slow down".into(),
        cause: Some(Cause::new(HttpError::new(
            429,
            vec![("retry-after".into(), "1.5".into())],
            "slow down",
        ))),
    };
    let scripted = ScriptedProvider::from_results([
        Ok(Response::text("first answer").with_usage(3, 2)),
        Err(limited.clone()),
        Ok(Response::text("second answer")),
        Ok(Response::tool_call("call_1", "add", json!({"a": 1}))),
    ]);
    let recording = RecordingProvider::create(scripted, &path).unwrap();
    let mut live = Vec::new();
    for (model, text) in [
        ("m", "same"),
        ("m", "same"),
        ("m", "same"),
        ("other", "tools"),
    ] {
        live.push(recording.chat(model, &prompt(text)).await);
    }

    let replay = ReplayProvider::open(&path).unwrap();
    assert_eq!(replay.unused(), 4);
    let mut replayed = Vec::new();
    for (model, text) in [
        ("m", "same"),
        ("m", "same"),
        ("m", "same"),
        ("other", "tools"),
    ] {
        replayed.push(replay.chat(model, &prompt(text)).await);
    }
    assert_eq!(replayed, live);
    assert_eq!(replayed[1], Err(limited), "errors replay too");
    assert_eq!(replay.unused(), 0);

    // Asked once more than recorded.
    let err = replay.chat("m", &prompt("same")).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Unexpected { message } if message.contains("3 time(s)") && message.contains("all were replayed")),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_unrecorded_request_fails_clearly() {
    let replay = ReplayProvider::from_entries([CassetteEntry::new(
        "m",
        prompt("what is 2+2?"),
        Ok(Response::text("4")),
    )]);
    let err = replay.chat("m", &prompt("what is 2+3?")).await.unwrap_err();
    let ProviderError::Unexpected { message } = &err else {
        panic!("expected Unexpected, got {err:?}");
    };
    assert!(message.contains("no recorded call"), "{message}");
    assert!(message.contains("`m`"), "{message}");
    assert!(message.contains("what is 2+3?"), "{message}");
    assert!(
        message.contains(&fingerprint("m", &prompt("what is 2+3?"))),
        "{message}"
    );
    // Same prompt, other model: not a match either.
    assert!(replay.chat("n", &prompt("what is 2+2?")).await.is_err());
    assert_eq!(replay.unused(), 1);
}

#[tokio::test]
async fn a_real_client_records_without_its_key_and_streams_replay() {
    const KEY: &str = "sk-cassette-secret-key-987654321";
    let events = [
        json!({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}),
    ];
    let server = TestServer::start(move |request, _| {
        if request.json()["stream"] == json!(true) {
            Reply::sse(vec![sse_events(&events)])
        } else {
            // A server that echoes the rejected key.
            Reply::json(
                401,
                &json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "code": "invalid_api_key"}}),
            )
        }
    })
    .await;
    let client = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key(KEY)
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.jsonl");
    let recording = RecordingProvider::create(client, &path).unwrap();
    let tools = vec![ToolDefinition {
        name: "t".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    }];
    let streamed_prompt = prompt("stream it").tools(tools);
    let mut live_deltas = Vec::new();
    let streamed = recording
        .chat_stream("gpt-4o-mini", &streamed_prompt, &mut |d| {
            live_deltas.push(d)
        })
        .await
        .unwrap();
    // A failed call is recorded too, with its error.
    let err = recording
        .chat("gpt-4o-mini", &prompt("plain"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Authentication { .. }),
        "{err:?}"
    );
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );

    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.contains("\"kind\":\"authentication\""), "{text}");
    assert!(
        !text.contains("sk-cassette"),
        "the key is not in the cassette: {text}"
    );
    assert!(!text.to_lowercase().contains("authorization"));
    let entry: CassetteEntry = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(entry.model, "gpt-4o-mini");
    assert_eq!(entry.prompt, streamed_prompt);
    assert_eq!(
        entry.fingerprint,
        fingerprint("gpt-4o-mini", &streamed_prompt)
    );

    let replay = ReplayProvider::open(&path).unwrap();
    let mut replayed_deltas = Vec::new();
    let replayed = replay
        .chat_stream("gpt-4o-mini", &streamed_prompt, &mut |d| {
            replayed_deltas.push(d)
        })
        .await
        .unwrap();
    assert_eq!(replayed, streamed);
    assert_eq!(
        live_deltas,
        [Delta::Text("Hel".into()), Delta::Text("lo".into())]
    );
    assert_eq!(replayed_deltas, [Delta::Text("Hello".into())]);
    assert_eq!(
        replay
            .chat("gpt-4o-mini", &prompt("plain"))
            .await
            .unwrap_err(),
        err
    );
}

#[tokio::test]
async fn appending_and_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("append.jsonl");
    for answer in ["one", "two"] {
        let recording =
            RecordingProvider::append(ScriptedProvider::new([Response::text(answer)]), &path)
                .unwrap();
        recording.chat("m", &prompt(answer)).await.unwrap();
    }
    let replay = ReplayProvider::open(&path).unwrap();
    assert_eq!(replay.unused(), 2);
    assert_eq!(
        replay.chat("m", &prompt("two")).await.unwrap().content,
        "two"
    );

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let shared = Shared::default();
    let recording =
        RecordingProvider::to_writer(ScriptedProvider::new([Response::text("x")]), shared.clone());
    recording.chat("m", &prompt("x")).await.unwrap();
    let written = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
    assert!(
        written.ends_with('\n') && written.contains("\"response\""),
        "{written}"
    );

    /// A writer that always fails.
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let recording =
        RecordingProvider::to_writer(ScriptedProvider::new([Response::text("x")]), Broken);
    let err = recording.chat("m", &prompt("x")).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Other { message: m, .. } if m.contains("disk full")),
        "{err:?}"
    );
}

#[test]
fn missing_and_malformed_cassettes() {
    let dir = tempfile::tempdir().unwrap();
    let err = ReplayProvider::open(dir.path().join("missing.jsonl")).unwrap_err();
    assert!(matches!(err, CassetteError::Io { .. }), "{err}");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"fingerprint\":\"x\"}\n").unwrap();
    let err = ReplayProvider::open(&bad).unwrap_err();
    assert!(matches!(err, CassetteError::Parse { line: 1, .. }), "{err}");
}

#[test]
fn fingerprints_ignore_key_order_but_not_content() {
    let schema_a: serde_json::Value =
        serde_json::from_str(r#"{"type": "object", "properties": {"b": {}, "a": {}}}"#).unwrap();
    let schema_b: serde_json::Value =
        serde_json::from_str(r#"{"properties": {"a": {}, "b": {}}, "type": "object"}"#).unwrap();
    // serde_json keeps key order (`preserve_order`), so the two really differ as sent.
    assert_ne!(schema_a.to_string(), schema_b.to_string());
    let with = |schema| {
        prompt("x").tools(vec![ToolDefinition {
            name: "t".into(),
            description: "d".into(),
            parameters: schema,
        }])
    };
    assert_eq!(
        fingerprint("m", &with(schema_a)),
        fingerprint("m", &with(schema_b))
    );
    assert_ne!(
        fingerprint("m", &prompt("x").temperature(0.5)),
        fingerprint("m", &prompt("x").temperature(0.6))
    );
}

#[tokio::test]
async fn replay_serves_the_recorded_max_cost() {
    let server = TestServer::always(Reply::json(
        200,
        &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
    ))
    .await;
    let client = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .pricing(Pricing::new().with(
            "priced",
            ModelPrice::per_million(MicroUsd(1_000_000), MicroUsd(2_000_000)),
        ))
        .build()
        .unwrap();
    let bounded = prompt("bounded").max_tokens(50);
    let expected = client.max_cost("priced", &bounded);
    assert!(expected.is_some());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("costs.jsonl");
    let recording = RecordingProvider::create(client, &path).unwrap();
    assert_eq!(recording.max_cost("priced", &bounded), expected);
    recording.chat("priced", &bounded).await.unwrap();
    recording
        .chat("priced", &prompt("unbounded"))
        .await
        .unwrap();
    recording.chat("unpriced", &bounded).await.unwrap();

    let replay = ReplayProvider::open(&path).unwrap();
    assert_eq!(replay.max_cost("priced", &bounded), expected);
    assert_eq!(replay.max_cost("priced", &prompt("unbounded")), None);
    assert_eq!(replay.max_cost("unpriced", &bounded), None);
    assert_eq!(replay.max_cost("never", &bounded), None, "not recorded");
    replay.chat("priced", &bounded).await.unwrap();
    assert_eq!(
        replay.max_cost("priced", &bounded),
        None,
        "all replayed: the next call fails without cost"
    );

    // The bound holds whichever recorded outcome a call gets: the largest still to serve.
    let replay = ReplayProvider::from_entries([
        CassetteEntry::new("m", prompt("x"), Ok(Response::text("a")))
            .with_max_cost(Some(MicroUsd(5))),
        CassetteEntry::new("m", prompt("x"), Ok(Response::text("b")))
            .with_max_cost(Some(MicroUsd(9))),
    ]);
    assert_eq!(replay.max_cost("m", &prompt("x")), Some(MicroUsd(9)));
    replay.chat("m", &prompt("x")).await.unwrap();
    replay.chat("m", &prompt("x")).await.unwrap();
    assert_eq!(replay.max_cost("m", &prompt("x")), None);
    // Entries from cassettes recorded before `max_cost` existed: unknown.
    let replay = ReplayProvider::from_entries([CassetteEntry::new(
        "m",
        prompt("x"),
        Ok(Response::text("a")),
    )]);
    assert_eq!(replay.max_cost("m", &prompt("x")), None);
}
