//! The server over real HTTP on 127.0.0.1: the Agent Protocol's runs, threads and streams,
//! OpenAI's chat, keys, and bad input.

use std::time::Duration;

use crate::support::{start, start_with};
use agent_serve::{Keys, Limits, ServeError, Server};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_run_waits_for_its_answer_and_is_stored_with_its_spend_and_trace() {
    let server = start(None).await;
    let (status, values) = server
        .post(
            "/runs/wait",
            json!({"assistant_id": "echo", "input": {"message": "hi"}}),
        )
        .await;
    assert_eq!(status, 200, "{values}");
    assert_eq!(values["output"], "echo: hi (1 messages)");
    assert_eq!(values["messages"][0]["type"], "human");
    assert_eq!(values["messages"][1]["type"], "ai");

    // The run is listed nowhere but found by id, finished, with what it spent.
    let response = server
        .client
        .post(format!("{}/runs/wait", server.base))
        .json(&json!({"assistant_id": "echo", "input": "again"}))
        .send()
        .await
        .unwrap();
    let location = response.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    let (_, run) = server.get(&location).await;
    assert_eq!(run["status"], "success");
    assert_eq!(run["spent"]["calls"], 1);
    let trace = server
        .client
        .get(format!("{}{location}/trace", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(trace.lines().count() > 2, "{trace}");
    assert!(trace.contains("infer_end"), "{trace}");
    // The same trace in the viewer.
    let view = server
        .client
        .get(format!("{}{location}/view", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(view.status(), 200);
    assert!(
        view.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = view.text().await.unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{page:.200}");
    assert!(page.contains("trace-data"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_remembers_its_turns_and_takes_one_run_at_a_time() {
    let server = start(None).await;
    let (status, thread) = server.post("/threads", json!({})).await;
    assert_eq!(status, 200);
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let path = format!("/threads/{tid}/runs/wait");
    let (_, first) = server
        .post(
            &path,
            json!({"assistant_id": "echo", "input": {"message": "one"}}),
        )
        .await;
    assert_eq!(first["output"], "echo: one (1 messages)");
    let (_, second) = server
        .post(
            &path,
            json!({"assistant_id": "echo", "input": {"message": "two"}}),
        )
        .await;
    // The second run saw the first turn's question and answer.
    assert_eq!(second["output"], "echo: two (3 messages)");
    assert_eq!(second["messages"].as_array().unwrap().len(), 4);

    let (_, state) = server.get(&format!("/threads/{tid}/state")).await;
    assert_eq!(state["values"]["output"], "echo: two (3 messages)");
    let (_, history) = server
        .post(&format!("/threads/{tid}/history"), json!({"limit": 5}))
        .await;
    assert_eq!(history.as_array().unwrap().len(), 2);
    let (_, runs) = server.get(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "success")
    );

    let (status, error) = server
        .post(
            "/threads/nope/runs/wait",
            json!({"assistant_id": "echo", "input": "x"}),
        )
        .await;
    assert_eq!(status, 404, "{error}");
    let (status, _) = server
        .post(&path, json!({"assistant_id": "nobody", "input": "x"}))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_has_ids_and_its_modes_and_a_reconnect_gets_each_later_event_once() {
    let server = start(None).await;
    let request = server
        .client
        .post(format!("{}/runs/stream", server.base))
        .json(&json!({
            "assistant_id": "echo",
            "input": {"message": "hello"},
            "stream_mode": ["values", "events", "messages-tuple"],
        }));
    let (headers, events) = server.events(request).await;
    assert_eq!(headers["x-accel-buffering"], "no");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(events[0].1, "metadata");
    let ids: Vec<u64> = events
        .iter()
        .filter_map(|(id, _, _)| id.as_ref().map(|i| i.parse().unwrap()))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{ids:?}");
    let names: Vec<&str> = events.iter().map(|(_, e, _)| e.as_str()).collect();
    assert!(names.contains(&"events"), "{names:?}");
    let values = events.iter().find(|(_, e, _)| e == "values").unwrap();
    let values: Value = serde_json::from_str(&values.2).unwrap();
    assert_eq!(values["output"], "echo: hello (1 messages)");

    // Joining the finished run's stream after the third event replays the rest, once.
    let location = headers["content-location"].to_str().unwrap().to_owned();
    let third = ids[2];
    let rejoin = server
        .client
        .get(format!(
            "{}{location}/stream?stream_mode=values&stream_mode=events",
            server.base
        ))
        .header("last-event-id", third.to_string());
    let (_, again) = server.events(rejoin).await;
    let again_ids: Vec<u64> = again
        .iter()
        .filter_map(|(id, _, _)| id.as_ref().map(|i| i.parse().unwrap()))
        .collect();
    assert!(!again_ids.is_empty());
    assert!(again_ids.iter().all(|id| *id > third), "{again_ids:?}");
    let before: Vec<u64> = ids.iter().copied().filter(|id| *id > third).collect();
    let mut dedup = before.clone();
    dedup.dedup();
    let mut again_dedup = again_ids.clone();
    again_dedup.dedup();
    assert_eq!(dedup, again_dedup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_clients_get_chat_completions_streamed_or_whole() {
    let server = start(None).await;
    let (status, models) = server.get("/v1/models").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["approver", "echo", "slow", "tooler"]);

    let (status, completion) = server
        .post(
            "/v1/chat/completions",
            json!({"model": "echo", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"}
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "echo: hi (2 messages)"
    );
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");

    let request = server
        .client
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&json!({"model": "echo", "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "yo"}]}]}));
    let (_, events) = server.events(request).await;
    assert_eq!(events.last().unwrap().2, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, _, data)| serde_json::from_str(data).unwrap())
        .collect();
    let id = &chunks[0]["id"];
    assert!(
        chunks
            .iter()
            .all(|c| &c["id"] == id && c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let roles = chunks
        .iter()
        .filter(|c| !c["choices"][0]["delta"]["role"].is_null())
        .count();
    assert_eq!(roles, 1);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "echo: yo (1 messages)");
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(finishes.len(), 1);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].is_u64());

    let (status, error) = server
        .post(
            "/v1/chat/completions",
            json!({"model": "nobody", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(error["error"]["type"], "not_found_error");
    let (status, error) = server
        .post(
            "/v1/chat/completions",
            json!({"model": "echo", "messages": "no"}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(error["error"]["message"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_every_route_but_health_needs_one() {
    let (key, line) = Keys::generate("ci");
    let server = start(Some(Keys::parse(&line).unwrap())).await;
    let routes: &[(&str, &str)] = &[
        ("POST", "/assistants/search"),
        ("GET", "/assistants/echo"),
        ("GET", "/assistants/echo/schemas"),
        ("POST", "/threads"),
        ("GET", "/threads/x"),
        ("GET", "/threads/x/state"),
        ("POST", "/threads/x/history"),
        ("POST", "/runs"),
        ("POST", "/runs/wait"),
        ("POST", "/runs/stream"),
        ("GET", "/runs/x"),
        ("GET", "/runs/x/join"),
        ("GET", "/runs/x/stream"),
        ("POST", "/runs/x/cancel"),
        ("GET", "/runs/x/trace"),
        ("GET", "/runs/x/view"),
        ("POST", "/threads/x/runs"),
        ("GET", "/threads/x/runs"),
        ("POST", "/threads/x/runs/wait"),
        ("POST", "/threads/x/runs/stream"),
        ("GET", "/threads/x/runs/y"),
        ("GET", "/threads/x/runs/y/join"),
        ("GET", "/threads/x/runs/y/stream"),
        ("POST", "/threads/x/runs/y/cancel"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/ag-ui/echo"),
        ("GET", "/no/such/route"),
    ];
    for (method, path) in routes {
        let url = format!("{}{path}", server.base);
        let request = match *method {
            "GET" => server.client.get(&url),
            _ => server.client.post(&url).json(&json!({})),
        };
        let response = request.try_clone().unwrap().send().await.unwrap();
        assert_eq!(response.status(), 401, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert!(!body.to_string().contains(&key));
        let wrong = request
            .try_clone()
            .unwrap()
            .bearer_auth("ak_wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{method} {path} with a wrong key");
        let right = request.header("x-api-key", &key).send().await.unwrap();
        assert_ne!(right.status(), 401, "{method} {path} with the key");
    }
    for path in ["/healthz", "/readyz"] {
        let (status, _) = server.get(path).await;
        assert_eq!(status, 200, "{path}");
    }
    // The chat page is a static file with no data; it sends the key with each API call.
    let page = server
        .client
        .get(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("connect-src 'self'")
    );
    assert!(page.text().await.unwrap().contains("x-api-key"));
    let response = server
        .client
        .post(format!("{}/runs/wait", server.base))
        .bearer_auth(&key)
        .json(&json!({"assistant_id": "echo", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_a_4xx_naming_what_is_wrong() {
    let server = start(None).await;
    let url = format!("{}/runs/wait", server.base);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"{".to_vec(), 400),
        (b"not json".to_vec(), 400),
        (vec![0xff, 0xfe, 0x7b], 400),
        (b"{\"assistant_id\": 3}".to_vec(), 422),
        (b"{\"assistant_id\": \"echo\"}".to_vec(), 422),
        (b"{\"assistant_id\": \"echo\", \"input\": 5}".to_vec(), 422),
        (
            format!(
                "{{\"assistant_id\": \"echo\", \"input\": {}{}}}",
                "[".repeat(10_000),
                "]".repeat(10_000)
            )
            .into_bytes(),
            400,
        ),
        (
            b"{\"assistant_id\": \"echo\", \"input\": \"x\"} {}".to_vec(),
            400,
        ),
    ];
    for (body, want) in cases {
        let response = server
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(
            status,
            want,
            "{}: {text}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{text}"
        );
    }
    // A body over the limit is refused from its declared length, before it is read (a
    // client still sending it may see the connection closed: HTTP allows the early answer).
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            format!(
                "POST /runs/wait HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                2 << 20
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("too large"), "{answer}");

    // The server still serves.
    let (status, _) = server
        .post(
            "/runs/wait",
            json!({"assistant_id": "echo", "input": "still here"}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_limits_gets_429_with_retry_after_and_its_day_of_tokens_is_a_budget() {
    let keys = Keys::default()
        .with_key("rate", "ak_rate", Limits::none().runs_per_minute(2))
        .with_key("tokens", "ak_tokens", Limits::none().tokens_per_day(20));
    let server = start(Some(keys)).await;
    let run = |key: &'static str| {
        server
            .client
            .post(format!("{}/runs/wait", server.base))
            .bearer_auth(key)
            .json(&json!({"assistant_id": "echo", "input": "hi"}))
            .send()
    };
    assert_eq!(run("ak_rate").await.unwrap().status(), 200);
    assert_eq!(run("ak_rate").await.unwrap().status(), 200);
    let refused = run("ak_rate").await.unwrap();
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("per minute"),
        "{body}"
    );

    // 15 tokens a call and 20 a day: the first run fits; the second starts with 5 tokens
    // left, and the runtime's budget stops it; the third is refused before it starts.
    let first: Value = run("ak_tokens").await.unwrap().json().await.unwrap();
    assert_eq!(first["output"], "echo: hi (1 messages)");
    let second: Value = run("ak_tokens").await.unwrap().json().await.unwrap();
    let failure = second["__error__"]["message"].as_str().unwrap_or_default();
    assert!(failure.contains("allowance"), "{second}");
    let third = run("ak_tokens").await.unwrap();
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_response_has_its_events_in_order_with_rising_sequence_numbers() {
    let server = start(None).await;
    let request = server
        .client
        .post(format!("{}/v1/responses", server.base))
        .json(&json!({"model": "echo", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hey"}]}], "stream": true}));
    let (_, events) = server.events(request).await;
    let data: Vec<Value> = events
        .iter()
        .map(|(_, _, d)| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = data.iter().map(|d| d["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.first().copied(),
        Some("response.created"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().copied(),
        Some("response.completed"),
        "{kinds:?}"
    );
    for want in [
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ] {
        assert!(kinds.contains(&want), "{want} in {kinds:?}");
    }
    let numbers: Vec<u64> = data
        .iter()
        .map(|d| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    let done = data.last().unwrap();
    assert_eq!(done["response"]["status"], "completed");
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "echo: hey (1 messages)"
    );
    // Whole, with a failed agent's run as a failed response.
    let (status, whole) = server
        .post("/v1/responses", json!({"model": "echo", "input": "plain"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(whole["object"], "response");
    assert_eq!(
        whole["output"][0]["content"][0]["text"],
        "echo: plain (1 messages)"
    );
    let (status, error) = server
        .post("/v1/responses", json!({"model": "echo", "input": []}))
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(error["error"]["message"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_every_route_with_its_body_schema() {
    let server = start(None).await;
    let (status, doc) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/assistants/search", "post"),
        ("/threads/{tid}/runs/{rid}/stream", "get"),
        ("/runs/wait", "post"),
        ("/runs/{rid}/view", "get"),
        ("/v1/chat/completions", "post"),
        ("/v1/responses", "post"),
        ("/ag-ui/{agent}", "post"),
        ("/healthz", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path}"
        );
    }
    let body = &paths["/runs/wait"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    let name = body["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
    let schema = &doc["components"]["schemas"][name];
    assert!(schema["properties"]["assistant_id"].is_object(), "{schema}");
    assert!(
        schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("assistant_id"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_approval_is_interrupted_until_resumed_on_its_thread() {
    let server = start(None).await;
    let (_, thread) = server.post("/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let (status, waited) = server
        .post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "approver", "input": "delete x"}),
        )
        .await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["__interrupt__"][0]["id"], "call_1", "{waited}");
    assert_eq!(waited["__interrupt__"][0]["value"]["tool"], "delete");
    let (_, runs) = server.get(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs[0]["status"], "interrupted", "{runs}");
    let (_, thread) = server.get(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "interrupted", "{thread}");
    // The thread is held: another run is refused (when it asks to be); a resume with
    // nothing waiting is a 409 elsewhere.
    let (status, _) = server
        .post(
            &format!("/threads/{tid}/runs/wait"),
            json!({"assistant_id": "echo", "input": "meanwhile", "multitask_strategy": "reject"}),
        )
        .await;
    assert_eq!(status, 409);
    let (_, other) = server.post("/threads", json!({})).await;
    let (status, error) = server
        .post(
            &format!(
                "/threads/{}/runs/wait",
                other["thread_id"].as_str().unwrap()
            ),
            json!({"assistant_id": "approver", "command": {"resume": "approve"}}),
        )
        .await;
    assert_eq!(status, 409, "{error}");

    // Resumed (streamed): the stream shows what the answer led to.
    let request = server
        .client
        .post(format!("{}/threads/{tid}/runs/stream", server.base))
        .json(&json!({"assistant_id": "approver", "command": {"resume": {"call_1": "approve"}}, "stream_mode": ["values"]}));
    let (_, events) = server.events(request).await;
    let values = events.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    let values: Value = serde_json::from_str(&values.2).unwrap();
    assert_eq!(values["output"], "approved: approve", "{values}");
    assert!(
        events.iter().all(|(_, _, d)| !d.contains("__interrupt__")),
        "{events:?}"
    );
    let run_id = runs[0]["run_id"].as_str().unwrap();
    let (_, run) = server.get(&format!("/threads/{tid}/runs/{run_id}")).await;
    assert_eq!(run["status"], "success", "{run}");
    let (_, thread) = server.get(&format!("/threads/{tid}")).await;
    assert_eq!(thread["status"], "idle", "{thread}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_off_unless_an_origin_is_named_and_then_only_that_origin_may_read() {
    let app = "https://app.example.com";
    let preflight = |server: &crate::support::Running, origin: &str| {
        server
            .client
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/runs/wait", server.base),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = |response: &reqwest::Response| {
        response
            .headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_owned())
    };

    // Off by default: no route says another origin may read it.
    let closed = start(None).await;
    let response = preflight(&closed, app).await.unwrap();
    assert_eq!(allowed(&response), None);
    let response = closed
        .client
        .get(format!("{}/assistants/echo", closed.base))
        .header("origin", app)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(allowed(&response), None);

    // Named: that origin's preflight is answered without a key, calls still need one.
    let (key, line) = Keys::generate("page");
    let open = start_with(Some(Keys::parse(&line).unwrap()), |b| b.cors_origin(app)).await;
    let response = preflight(&open, app).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(allowed(&response).as_deref(), Some(app));
    let headers = response
        .headers()
        .get("access-control-allow-headers")
        .unwrap()
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        headers.contains("authorization") && headers.contains("content-type"),
        "{headers}"
    );
    let response = preflight(&open, "https://evil.example").await.unwrap();
    assert_eq!(allowed(&response), None);

    let call = |origin: &'static str, key: Option<String>| {
        let mut request = open
            .client
            .post(format!("{}/runs/wait", open.base))
            .header("origin", origin)
            .json(&json!({"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    let response = call(app, None).await.unwrap();
    assert_eq!(response.status(), 401);
    let response = call(app, Some(key.clone())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(allowed(&response).as_deref(), Some(app));
    let response = call("https://evil.example", Some(key)).await.unwrap();
    assert_eq!(allowed(&response), None);

    // An origin that is not one is refused when the server is built.
    for bad in [
        "app.example.com",
        "https://app.example.com/path",
        "ftp://x",
        "https://a b",
    ] {
        let built = Server::builder()
            .cors_origin(bad)
            .store(tempfile::tempdir().unwrap().path().join("s.db"))
            .build()
            .await;
        assert!(
            matches!(built, Err(ServeError::CorsOrigin(ref o)) if o == bad),
            "{bad}: {built:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_on_a_busy_thread_is_rejected_queued_or_replaces_the_first_as_asked() {
    let server = start(None).await;
    // A thread with a slow run going (its model takes 1.5 s).
    let busy_thread = || async {
        let (_, thread) = server.post("/threads", json!({})).await;
        let tid = thread["thread_id"].as_str().unwrap().to_owned();
        let (status, first) = server
            .post(
                &format!("/threads/{tid}/runs"),
                json!({"assistant_id": "slow", "input": {"message": "first"}}),
            )
            .await;
        assert_eq!(status, 200, "{first}");
        (tid, first["run_id"].as_str().unwrap().to_owned())
    };
    let second = |tid: &str, strategy: Option<&str>| {
        let mut body = json!({"assistant_id": "echo", "input": {"message": "second"}});
        if let Some(strategy) = strategy {
            body["multitask_strategy"] = json!(strategy);
        }
        let path = format!("/threads/{tid}/runs");
        let server = &server;
        async move { server.post(&path, body).await }
    };
    let join = |tid: &str, run: &str| {
        let path = format!("/threads/{tid}/runs/{run}/join");
        let server = &server;
        async move { server.get(&path).await }
    };

    // reject: 409, and the first run goes on.
    let (tid, first) = busy_thread().await;
    let (status, error) = second(&tid, Some("reject")).await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["error"], "thread_busy", "{error}");
    let (status, unknown) = second(&tid, Some("whenever")).await;
    assert_eq!(status, 422, "{unknown}");
    assert_eq!(
        join(&tid, &first).await.1["output"],
        "echo: first (1 messages)"
    );

    // enqueue (the default, as on LangGraph's server): pending until the first is over,
    // then it runs with the first turn in its history.
    let (tid, first) = busy_thread().await;
    let (status, queued) = second(&tid, None).await;
    assert_eq!(status, 200, "{queued}");
    assert_eq!(queued["status"], "pending", "{queued}");
    assert_eq!(queued["multitask_strategy"], "enqueue");
    let queued_id = queued["run_id"].as_str().unwrap().to_owned();
    let (_, answer) = join(&tid, &queued_id).await;
    assert_eq!(answer["output"], "echo: second (3 messages)", "{answer}");
    let (_, first_run) = server.get(&format!("/threads/{tid}/runs/{first}")).await;
    assert_eq!(first_run["status"], "success");
    // A queued run cancelled before its turn ends interrupted, never having run.
    let (tid, first) = busy_thread().await;
    let (_, queued) = second(&tid, Some("enqueue")).await;
    let queued_id = queued["run_id"].as_str().unwrap().to_owned();
    let (status, _) = server
        .post(
            &format!("/threads/{tid}/runs/{queued_id}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!(status, 202);
    let (_, cancelled) = join(&tid, &queued_id).await;
    let (_, cancelled_run) = server
        .get(&format!("/threads/{tid}/runs/{queued_id}"))
        .await;
    assert_eq!(
        cancelled_run["status"], "interrupted",
        "{cancelled} {cancelled_run}"
    );
    assert_eq!(cancelled_run["spent"]["calls"], 0, "{cancelled_run}");
    assert_eq!(
        join(&tid, &first).await.1["output"],
        "echo: first (1 messages)"
    );

    // interrupt: the first run is cancelled (kept, interrupted), the second runs without
    // its turn.
    let (tid, first) = busy_thread().await;
    let (status, replacing) = second(&tid, Some("interrupt")).await;
    assert_eq!(status, 200, "{replacing}");
    let replacing_id = replacing["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        join(&tid, &replacing_id).await.1["output"],
        "echo: second (1 messages)"
    );
    let (_, first_run) = server.get(&format!("/threads/{tid}/runs/{first}")).await;
    assert_eq!(first_run["status"], "interrupted", "{first_run}");

    // rollback: the first run is cancelled and deleted.
    let (tid, first) = busy_thread().await;
    let (status, replacing) = second(&tid, Some("rollback")).await;
    assert_eq!(status, 200, "{replacing}");
    let replacing_id = replacing["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        join(&tid, &replacing_id).await.1["output"],
        "echo: second (1 messages)"
    );
    let (status, _) = server.get(&format!("/threads/{tid}/runs/{first}")).await;
    assert_eq!(status, 404);
    let (_, runs) = server.get(&format!("/threads/{tid}/runs")).await;
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_stopped_by_shutdown_still_waits_its_turn_on_the_next_server() {
    use agent_serve::runs::NewRun;
    use agent_serve::{Multitask, RunStatus};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("serve.db");
    let build = || {
        Server::builder()
            .agent("echo", crate::support::echo())
            .agent(
                "slow",
                crate::support::echo_after(Duration::from_millis(800)),
            )
            .store(&store)
            .build()
    };
    let server = build().await.unwrap();
    let thread = server
        .runs()
        .create_thread(None, json!({}))
        .await
        .unwrap()
        .unwrap();
    let first = server
        .runs()
        .start(NewRun::new("slow", json!({"message": "first"})).thread(&thread.id))
        .await
        .unwrap();
    let queued = server
        .runs()
        .start(
            NewRun::new("echo", json!({"message": "second"}))
                .thread(&thread.id)
                .multitask(Multitask::Enqueue),
        )
        .await
        .unwrap();
    assert_eq!(queued.record.status, RunStatus::Pending);
    // Stopped at once: both are left unfinished in the store.
    server.runs().shutdown(Duration::ZERO).await;
    let stored = server.runs().get(&queued.record.id).await.unwrap().record;
    assert_eq!(stored.status, RunStatus::Pending);

    let again = build().await.unwrap();
    assert_eq!(again.resumed(), 2);
    let first = again
        .runs()
        .get(&first.record.id)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let second = again
        .runs()
        .get(&queued.record.id)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(first.output, Some(json!("echo: first (1 messages)")));
    // Its turn came after the first one's, whose turn it saw.
    assert_eq!(second.output, Some(json!("echo: second (3 messages)")));
    assert!(second.updated_at >= first.updated_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_a_person_when_its_server_stops_waits_again_on_the_next() {
    use agent_serve::RunStatus;
    use agent_serve::runs::NewRun;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("serve.db");
    let build = || {
        Server::builder()
            .agent("approver", crate::support::approver())
            .store(&store)
            .build()
    };
    let server = build().await.unwrap();
    let thread = server
        .runs()
        .create_thread(None, json!({}))
        .await
        .unwrap()
        .unwrap();
    let run = server
        .runs()
        .start(NewRun::new("approver", json!("delete x")).thread(&thread.id))
        .await
        .unwrap();
    assert!(matches!(
        run.wait_or_interrupt().await.unwrap(),
        agent_serve::runs::Waited::Interrupted(..)
    ));
    server.runs().shutdown(Duration::ZERO).await;

    let again = build().await.unwrap();
    assert_eq!(again.resumed(), 1);
    let handle = again.runs().get(&run.record.id).await.unwrap();
    // Waiting again, and shown so: not `running`.
    match handle.wait_or_interrupt().await.unwrap() {
        agent_serve::runs::Waited::Interrupted(_, interrupt) => {
            assert_eq!(interrupt.id, "call_1");
        }
        other => panic!("not waiting: {other:?}"),
    }
    let stored = again.runs().get(&run.record.id).await.unwrap().record;
    assert_eq!(stored.status, RunStatus::Interrupted);
    assert_eq!(
        again.runs().thread(&thread.id).await.unwrap().status,
        agent_serve::runs::ThreadStatus::Interrupted
    );
    // The interrupt was streamed once, before the stop.
    let mut events = handle.events(0);
    let mut interrupts = 0;
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(300), events.next()).await
    {
        if matches!(event.event, agent_serve::runs::RunEvent::Interrupted { .. }) {
            interrupts += 1;
        }
    }
    assert_eq!(interrupts, 1);

    let resumed = again
        .runs()
        .resume(&thread.id, "approve".into())
        .await
        .unwrap();
    let done = resumed.wait().await.unwrap();
    assert_eq!(done.output, Some(json!("approved: approve")));
    assert_eq!(done.status, RunStatus::Success);
}
