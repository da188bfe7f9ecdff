//! Hostile input on every route: 1,000 malformed requests each (wrong types, huge and deeply
//! nested bodies, invalid UTF-8, bodies that stop half-way, odd ids and queries). Every
//! answer is a 4xx with a JSON body (or a 2xx for what happens to be valid), never a 5xx;
//! the server keeps serving; the runs stored before are unchanged.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PER_ROUTE: usize = 1_000;

/// A malformed (or, by chance, valid) body.
fn body(rng: &mut fastrand::Rng) -> Vec<u8> {
    let fields = [
        "assistant_id",
        "input",
        "thread_id",
        "stream_mode",
        "model",
        "messages",
        "metadata",
        "limit",
        "command",
        "if_exists",
    ];
    let values = [
        json!(null),
        json!(true),
        json!(-1),
        json!(1e308),
        json!("echo"),
        json!("x".repeat(3000)),
        json!([]),
        json!({}),
        json!([{"role": 5}]),
        json!({"messages": "no"}),
        json!(["values", 7]),
        json!("\u{0000}\u{ffff}"),
    ];
    match rng.usize(0..9) {
        0 => (0..rng.usize(0..200)).map(|_| rng.u8(..)).collect(),
        1 => {
            let depth = rng.usize(100..5_000);
            format!(
                "{{\"assistant_id\": \"echo\", \"input\": {}{}}}",
                "[".repeat(depth),
                "]".repeat(depth)
            )
            .into_bytes()
        }
        2 => {
            let mut bytes = br#"{"assistant_id": "echo", "input": ""#.to_vec();
            bytes.extend((0..rng.usize(1..50)).map(|_| rng.u8(0x80..=0xff)));
            bytes.extend_from_slice(b"\"}");
            bytes
        }
        3 => {
            let text = json!({"assistant_id": "echo", "input": {"message": "hi"}}).to_string();
            text.as_bytes()[..rng.usize(0..text.len())].to_vec()
        }
        4 => Vec::new(),
        5 => b"[1, 2, 3]".to_vec(),
        _ => {
            let mut object = serde_json::Map::new();
            for _ in 0..rng.usize(0..5) {
                let field = fields[rng.usize(0..fields.len())];
                object.insert(field.into(), values[rng.usize(0..values.len())].clone());
            }
            Value::Object(object).to_string().into_bytes()
        }
    }
}

/// A path segment: an id that exists, one that does not, or something odd.
fn segment(rng: &mut fastrand::Rng, known: &[String]) -> String {
    match rng.usize(0..6) {
        0 => known[rng.usize(0..known.len())].clone(),
        1 => "nope".into(),
        2 => "%00".into(),
        3 => "%FF%FE".into(),
        4 => "a".repeat(rng.usize(1..2_000)),
        _ => "..%2F..%2Fetc".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_hostile_requests_per_route_get_4xx_and_change_nothing() {
    let server = support::start(None).await;
    // Runs and a thread stored before.
    let (_, thread) = server.post("/threads", json!({})).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    let mut runs = Vec::new();
    for i in 0..3 {
        let response = server
            .client
            .post(format!("{}/threads/{tid}/runs/wait", server.base))
            .json(&json!({"assistant_id": "echo", "input": format!("turn {i}")}))
            .send()
            .await
            .unwrap();
        let location = response.headers()["content-location"]
            .to_str()
            .unwrap()
            .to_owned();
        runs.push(location);
    }
    let mut before = Vec::new();
    for run in &runs {
        before.push(server.get(run).await.1);
    }
    let run_ids: Vec<String> = runs
        .iter()
        .map(|l| l.rsplit('/').next().unwrap().to_owned())
        .collect();

    let routes: &[(&str, &str)] = &[
        ("POST", "/assistants/search"),
        ("GET", "/assistants/{a}"),
        ("GET", "/assistants/{a}/schemas"),
        ("POST", "/threads"),
        ("GET", "/threads/{t}"),
        ("GET", "/threads/{t}/state"),
        ("POST", "/threads/{t}/history"),
        ("POST", "/runs"),
        ("POST", "/runs/wait"),
        ("POST", "/runs/stream"),
        ("GET", "/runs/{r}"),
        ("GET", "/runs/{r}/join"),
        ("GET", "/runs/{r}/stream"),
        ("POST", "/runs/{r}/cancel"),
        ("GET", "/runs/{r}/trace"),
        ("POST", "/threads/{t}/runs"),
        ("GET", "/threads/{t}/runs"),
        ("POST", "/threads/{t}/runs/wait"),
        ("POST", "/threads/{t}/runs/stream"),
        ("GET", "/threads/{t}/runs/{r}"),
        ("GET", "/threads/{t}/runs/{r}/join"),
        ("GET", "/threads/{t}/runs/{r}/stream"),
        ("POST", "/threads/{t}/runs/{r}/cancel"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("POST", "/ag-ui/echo"),
        ("POST", "/ag-ui/{a}"),
    ];
    let mut rng = fastrand::Rng::with_seed(45);
    let address = server.base.trim_start_matches("http://").to_owned();
    let agents = vec!["echo".to_owned(), "slow".to_owned()];
    let threads = vec![tid.clone()];
    let queries = [
        "",
        "?limit=-1",
        "?limit=abc&offset=99999999999999999999",
        "?status=weird",
        "?stream_mode=nope",
        "?wait=1&action=rollback",
        "?%zz",
    ];
    let mut answered = 0usize;
    for (method, pattern) in routes {
        for i in 0..PER_ROUTE {
            let path = pattern
                .replace("{a}", &segment(&mut rng, &agents))
                .replace("{t}", &segment(&mut rng, &threads))
                .replace("{r}", &segment(&mut rng, &run_ids));
            let query = queries[rng.usize(0..queries.len())];
            let body = body(&mut rng);
            // One in ten stops half-way: the declared length is never sent.
            let cut = *method == "POST" && i % 10 == 0 && !body.is_empty();
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let mut request = format!(
                "{method} {path}{query} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            );
            if *method == "POST" {
                request.push_str(&format!(
                    "content-length: {}\r\n",
                    body.len() + usize::from(cut) * 10
                ));
            }
            request.push_str("\r\n");
            let mut bytes = request.into_bytes();
            if *method == "POST" {
                bytes.extend_from_slice(&body);
            }
            stream.write_all(&bytes).await.unwrap();
            if cut {
                // The client goes away with the body unfinished.
                let _ = stream.shutdown().await;
                drop(stream);
                continue;
            }
            let mut answer = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
                    .await;
            if read.is_err() {
                // A stream of a stored run that is over ends on its own; only a live stream
                // would hold the connection (none is live here).
                panic!("{method} {path}{query}: no answer within 10 s");
            }
            let answer = String::from_utf8_lossy(&answer);
            let status: u16 = answer
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{method} {path}{query}: not HTTP: {answer:.200}"));
            assert!(
                status < 500,
                "{method} {path}{query} with {:?}: {answer:.500}",
                String::from_utf8_lossy(&body[..body.len().min(80)])
            );
            if (400..500).contains(&status) {
                let text = answer.split("\r\n\r\n").nth(1).unwrap_or("");
                let text = if answer.contains("chunked") {
                    text.lines().nth(1).unwrap_or("")
                } else {
                    text
                };
                assert!(
                    serde_json::from_str::<Value>(text).is_ok(),
                    "{method} {path}{query}: a {status} without a JSON body: {answer:.300}"
                );
            }
            answered += 1;
        }
    }
    assert!(answered >= routes.len() * PER_ROUTE * 8 / 10);

    // Still serving; what was stored is as it was.
    let (status, _) = server.get("/healthz").await;
    assert_eq!(status, 200);
    for (run, was) in runs.iter().zip(&before) {
        let (_, now) = server.get(run).await;
        assert_eq!(&now, was);
    }
    let (status, values) = server
        .post(
            "/runs/wait",
            json!({"assistant_id": "echo", "input": "after"}),
        )
        .await;
    assert_eq!(status, 200, "{values}");
}
