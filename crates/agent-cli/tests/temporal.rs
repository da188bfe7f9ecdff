//! `agent worker --temporal` serves a spec's agent; `agent run --temporal` runs it there and
//! gives the answer `agent run` gives here.

#![cfg(feature = "temporal")]

use std::path::Path;
use std::process::{Command, Stdio};

#[path = "../../../xtask/src/temporal.rs"]
#[allow(dead_code)]
mod server;

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn a_spec_runs_on_a_temporal_worker_with_the_same_answer() {
    let address = match server::ensure_running(&server::target_dir(&root())) {
        Ok(address) => address,
        Err(why) => {
            eprintln!(
                "SKIPPED: a_spec_runs_on_a_temporal_worker_with_the_same_answer: no Temporal server: {why}"
            );
            return;
        }
    };
    let spec = root().join("examples/research.scripted.toml");
    let dir = tempfile::tempdir().unwrap();
    let queue = format!("cli-{:016x}", std::process::id() as u64 * 7919 + 17);
    let mut worker = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["worker", "--temporal", &address, "--task-queue", &queue])
        .arg(&spec)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let remote = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            "--quiet",
            "--temporal",
            &address,
            "--task-queue",
            &queue,
            "--trace",
        ])
        .arg(dir.path().join("remote.jsonl"))
        .arg(&spec)
        .output()
        .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();
    let local = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--quiet", "--trace"])
        .arg(dir.path().join("local.jsonl"))
        .arg(&spec)
        .output()
        .unwrap();
    assert!(
        remote.status.success(),
        "agent run --temporal failed: {}",
        String::from_utf8_lossy(&remote.stderr)
    );
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    assert!(!remote.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&remote.stdout),
        String::from_utf8_lossy(&local.stdout)
    );
    assert!(
        dir.path().join("remote.jsonl").exists(),
        "the run's trace was written"
    );
}
