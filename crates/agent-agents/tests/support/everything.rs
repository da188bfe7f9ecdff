//! `@modelcontextprotocol/server-everything` from npm, installed under `target/` on first
//! use: the real third-party MCP server the MCP tests run against (shared by the
//! `agent-agents` and `agent-cli` tests).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned package.
pub const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

const ENTRY: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// The server's entry point, installed if missing; `None` (said in one line) without npm.
///
/// Tests in one binary run on several threads and test binaries may share `target/`, so
/// the install holds a file lock, and it happens in a staging directory renamed into place
/// only when complete: no test ever sees half a `node_modules`.
// `File::lock` needs Rust 1.89, above the workspace's MSRV; test code only.
#[allow(clippy::incompatible_msrv)]
pub fn server_everything() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("mcp-everything");
    let entry = dir.join(ENTRY);
    if entry.exists() {
        return Some(entry);
    }
    fs::create_dir_all(&target).expect("create target/");
    let lock = File::create(target.join("mcp-everything.lock")).expect("create the install lock");
    lock.lock().expect("take the install lock");
    if entry.exists() {
        return Some(entry);
    }
    let staging = target.join("mcp-everything.staging");
    // The registry is reached over the network: one retry covers a dropped connection.
    let mut last = String::new();
    for _ in 0..2 {
        let _ = fs::remove_dir_all(&staging);
        match npm_install(&staging) {
            Ok(()) if staging.join(ENTRY).exists() => {
                let _ = fs::remove_dir_all(&dir);
                fs::rename(&staging, &dir).expect("move the installed server into place");
                return Some(entry);
            }
            Ok(()) => last = format!("npm install {PACKAGE} left no {ENTRY}"),
            Err(Some(e)) => last = e,
            Err(None) => {
                eprintln!("SKIPPED: MCP tests need npm to install {PACKAGE}");
                return None;
            }
        }
    }
    panic!("{last}");
}

/// `Err(None)` when npm itself cannot be run.
fn npm_install(prefix: &Path) -> Result<(), Option<String>> {
    let output = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .arg(PACKAGE)
        .output()
        .map_err(|_| None)?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(Some(format!(
            "npm install {PACKAGE} failed: {}\n{}",
            output.status,
            tail.join("\n")
        )))
    }
}
