//! What the Temporal tests share: the project's development server, and a worker running
//! beside the test on the same task.

#![allow(dead_code)]

use std::path::Path;

#[path = "../../../../xtask/src/temporal.rs"]
pub mod server;

/// The address of the project's Temporal server (started if needed), or `None` after one
/// `SKIPPED:` line saying why there is none.
pub fn address(test: &str) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match server::ensure_running(&server::target_dir(&root)) {
        Ok(address) => Some(address),
        Err(why) => {
            eprintln!("SKIPPED: {test}: no Temporal server: {why}");
            None
        }
    }
}

/// A task queue no other test uses.
pub fn task_queue(test: &str) -> String {
    format!("{test}-{:016x}", fastrand::u64(..))
}
