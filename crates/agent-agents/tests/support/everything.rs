//! `@modelcontextprotocol/server-everything` from npm, installed under `target/` on first
//! use: the real third-party MCP server the MCP tests run against (shared by the
//! `agent-agents` and `agent-cli` tests).

use std::path::PathBuf;

/// The server's entry point, installed if missing; `None` (said in one line) without npm.
pub fn server_everything() -> Option<PathBuf> {
    bench_kit::npm::MCP_EVERYTHING.entry()
}
