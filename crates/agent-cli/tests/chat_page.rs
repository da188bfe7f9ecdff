//! `agent serve`'s chat page in headless Chromium: a message typed and sent, the answer
//! streamed into the page, the turn's tool call with its arguments and result, its cost,
//! and the link to its trace.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_message_sent_in_the_chat_page_streams_its_answer_and_shows_its_tool_call() {
    let chromium = match support::chromium::find_or_install() {
        Ok(chromium) => chromium,
        Err(why) => {
            eprintln!("SKIPPED: the chat page test needs Chromium: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(
        dir.path().join("notes/notes.md"),
        "Budgets are enforced by the runtime.",
    )
    .unwrap();
    let spec = dir.path().join("notes.toml");
    std::fs::write(
        &spec,
        r#"[model]
provider = "scripted"
name = "m"
replies = [
  { calls = [{ tool = "read_file", args = { path = "notes.md" } }] },
  "The notes say budgets are enforced by the runtime.",
]

[agent]
name = "notes"
goal = "Answer from the notes."

[tools.read_file]
root = "notes"
"#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Killed(
        Command::new(env!("CARGO_BIN_EXE_agent"))
            .arg("serve")
            .arg(&spec)
            .arg("--store")
            .arg(dir.path().join("serve.db"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "agent serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/chat.mjs");
    let out = chromium
        .drive_url(
            &script,
            &format!("http://127.0.0.1:{port}/"),
            &["notes", "What do the notes say?"],
        )
        .unwrap();
    let Some(out) = out else {
        eprintln!("SKIPPED: the chat page test needs Node to drive Chromium");
        return;
    };
    let page: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(page["user"], "What do the notes say?", "{page}");
    assert_eq!(page["error"], false, "{page}");
    assert_eq!(
        page["answer"], "The notes say budgets are enforced by the runtime.",
        "{page}"
    );
    let tools = page["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{page}");
    assert!(
        tools[0]["name"].as_str().unwrap().contains("read_file"),
        "{page}"
    );
    assert!(
        tools[0]["args"].as_str().unwrap().contains("notes.md"),
        "{page}"
    );
    assert!(
        tools[0]["result"]
            .as_str()
            .unwrap()
            .contains("Budgets are enforced"),
        "{page}"
    );
    assert!(
        page["cost"].as_str().unwrap().contains("2 model calls"),
        "{page}"
    );
    assert_eq!(page["trace"], true, "{page}");
    // The answer was on the page before the turn was done (streamed, not only at the end).
    assert!(!page["seen"].as_array().unwrap().is_empty(), "{page}");
}
