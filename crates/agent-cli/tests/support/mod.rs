//! What the viewer's tests share with its benchmark (which includes these files by path).

pub mod chromium;
pub mod dom;
pub mod traces;

use std::path::PathBuf;

/// Where the viewer's tests leave pages and screenshots: `target/test-output/viewer/`.
#[allow(dead_code)] // the chat page test does not keep pages
pub fn output_dir() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A relative CARGO_TARGET_DIR is relative to where cargo ran: the workspace, here.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|dir| workspace.join(dir))
        .unwrap_or_else(|| workspace.join("target"));
    let dir = target.join("test-output").join("viewer");
    std::fs::create_dir_all(&dir).expect("the output folder can be made");
    dir
}
