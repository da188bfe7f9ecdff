//! The official clients against the server: OpenAI's Python SDK (`openai`) on the chat
//! routes and LangGraph's (`langgraph-sdk`) on the Agent Protocol's, each installed into a
//! virtualenv under `target/` on first use (one `SKIPPED:` line when that cannot be done).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agent_serve::{Keys, Limits};

const PACKAGES: [&str; 3] = [
    "openai==3.63.0",
    "langgraph-sdk==0.4.14",
    "schemathesis==4.32.5",
];

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// The virtualenv's Python with both clients, installing them if missing; `None` (said in
/// one line) when they cannot be had.
fn clients_python() -> Option<PathBuf> {
    let venv = target_dir().join("serve-clients-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import openai, langgraph_sdk, schemathesis"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: the client tests need python3 with venv to install {PACKAGES:?}");
        return None;
    }
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(PACKAGES)
        .status();
    if !installed.is_ok_and(|s| s.success()) || !ready(&python) {
        eprintln!("SKIPPED: the client tests could not install {PACKAGES:?} with pip");
        return None;
    }
    Some(python)
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
