//! `@modelcontextprotocol/server-everything` from npm, installed under `target/` on first
//! use: the real third-party MCP server the MCP tests run against (shared by the
//! `agent-agents` and `agent-cli` tests).

use std::path::PathBuf;
use std::process::Command;

/// The pinned package.
pub const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The server's entry point, installed if missing; `None` (said in one line) without npm.
pub fn server_everything() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("mcp-everything");
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if entry.exists() {
        return Some(entry);
    }
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&dir)
        .arg(PACKAGE)
        .status();
    match installed {
        Ok(status) if status.success() && entry.exists() => Some(entry),
        Ok(status) => panic!("npm install {PACKAGE} failed: {status}"),
        Err(e) => {
            eprintln!("SKIPPED: MCP tests need npm to install {PACKAGE} ({e})");
            None
        }
    }
}
