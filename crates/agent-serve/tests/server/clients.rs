//! The official clients against the server: OpenAI's Python SDK (`openai`) on the chat
//! routes, LangGraph's (`langgraph-sdk`) on the Agent Protocol's and AG-UI's models
//! (`ag-ui-protocol`) on `/ag-ui`, installed into a virtualenv under `target/` on first use
//! (one `SKIPPED:` line when that cannot be done).

use crate::support;

use std::path::Path;
use std::process::Command;

use agent_serve::{Keys, Limits};

/// The virtualenv's Python with the clients, installing them if missing; `None` (said in
/// one line) when they cannot be had.
fn clients_python() -> Option<std::path::PathBuf> {
    bench_kit::python::SERVE_CLIENTS.python()
}

/// Runs a client script against a server with the key `ak_clients`.
async fn drive(script: &str) {
    let Some(python) = clients_python() else {
        return;
    };
    let keys = Keys::default().with_key("clients", "ak_clients", Limits::none());
    let server = support::start(Some(keys)).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let base = server.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(base)
            .arg("ak_clients")
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_chats_with_an_agent() {
    drive("openai_client.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_langgraph_sdk_drives_runs_threads_and_streams() {
    drive("langgraph_client.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_ui_events_parse_with_the_protocols_own_models() {
    drive("ag_ui_client.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_uis_own_http_agent_runs_agents_through_the_endpoint() {
    let Some(entry) = bench_kit::npm::AG_UI_CLIENT.entry() else {
        return;
    };
    let keys = Keys::default().with_key("clients", "ak_clients", Limits::none());
    let server = support::start(Some(keys)).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/ag_ui_http_agent.mjs");
    let base = server.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .arg(entry)
            .arg(base)
            .arg("ak_clients")
            .output()
    })
    .await
    .unwrap();
    let Ok(output) = output else {
        eprintln!(
            "SKIPPED: the AG-UI client test needs node to run {}",
            bench_kit::npm::AG_UI_CLIENT.package
        );
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
}

/// Runs schemathesis (property-based requests generated from an OpenAPI document) against
/// a server with the key `ak_clients`; the checks that failed, if any.
async fn schemathesis(schema: &str, checks: &str) {
    let Some(python) = clients_python() else {
        return;
    };
    let keys = Keys::default().with_key("clients", "ak_clients", Limits::none());
    let server = support::start(Some(keys)).await;
    let schema = schema.replace("{base}", &server.base);
    let base = server.base.clone();
    let checks = checks.to_owned();
    let schemathesis = python.with_file_name("schemathesis");
    // schemathesis keeps a cache in the folder it runs in: not in the source tree.
    let scratch = tempfile::tempdir().unwrap();
    let here = scratch.path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis)
            .current_dir(here)
            .args(["run", &schema, "--url", &base, "--checks", &checks])
            .args(["--header", "Authorization: Bearer ak_clients"])
            .args([
                "--max-examples",
                "25",
                "--request-timeout",
                "20",
                "--no-color",
            ])
            .output()
            .expect("schemathesis runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("passed") || l.contains("failed") || l.contains("operations"))
        .collect();
    println!("{}", summary.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_on_our_document_finds_no_5xx_and_responses_that_match_it() {
    schemathesis(
        "{base}/openapi.json",
        "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_on_the_agent_protocols_document_finds_no_5xx() {
    let document = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/kits/agent-protocol/openapi.json");
    if !document.is_file() {
        eprintln!(
            "SKIPPED: the Agent Protocol's OpenAPI document is not at {}",
            document.display()
        );
        return;
    }
    schemathesis(&document.to_string_lossy(), "not_a_server_error").await;
}
