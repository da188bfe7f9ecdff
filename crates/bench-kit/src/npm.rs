//! npm packages the tests run (official clients, kits and servers), each installed under
//! `target/` on first use.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python::target_dir;

/// A pinned npm package the tests use.
#[derive(Clone, Copy, Debug)]
pub struct Package {
    /// Its folder under `target/`.
    pub dir: &'static str,
    /// The package, pinned (`name@1.2.3`).
    pub package: &'static str,
    /// The file the tests run, inside the folder.
    pub entry: &'static str,
    /// Who needs it, for the `SKIPPED:` line.
    pub what: &'static str,
}

/// The MCP project's reference server, which the MCP client tests call.
pub const MCP_EVERYTHING: Package = Package {
    dir: "mcp-everything",
    package: "@modelcontextprotocol/server-everything@2026.8.31",
    entry: "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    what: "MCP tests",
};

/// AG-UI's own client, which runs agents through `agent-serve`'s `/ag-ui`.
pub const AG_UI_CLIENT: Package = Package {
    dir: "ag-ui-client",
    package: "@ag-ui/client@1.0.4",
    entry: "node_modules/@ag-ui/client/dist/index.mjs",
    what: "the AG-UI client test",
};

/// Every package the tests use (`cargo xtask test-all` installs them while it builds).
pub const ALL: &[Package] = &[MCP_EVERYTHING, AG_UI_CLIENT];

impl Package {
    /// Its entry, installed if missing; `None` (said in one `SKIPPED:` line) without npm.
    pub fn entry(&self) -> Option<PathBuf> {
        install(self.dir, self.package, self.entry, self.what)
    }

    /// Installs it if missing, saying nothing; whether it is ready.
    pub fn prepare(&self) -> bool {
        matches!(try_install(self.dir, self.package, self.entry), Ok(Some(_)))
    }
}

/// `entry` (a path inside the install: `node_modules/<package>/dist/index.js`) of `package`
/// (pinned: `name@1.2.3`) installed into `target/<dir>`, installed if missing; `None` (said
/// in one `SKIPPED:` line naming `what` needs it) without npm. Panics when npm runs but the
/// install fails twice (the registry is reachable in CI: a failure there is a failure).
///
/// Tests in one binary run on several threads and test binaries may share `target/`, so
/// the install holds a file lock, and it happens in a staging directory renamed into place
/// only when complete: no test ever sees half a `node_modules`.
pub fn install(dir: &str, package: &str, entry: &str, what: &str) -> Option<PathBuf> {
    match try_install(dir, package, entry) {
        Ok(Some(path)) => Some(path),
        Ok(None) => {
            eprintln!("SKIPPED: {what} needs npm to install {package}");
            None
        }
        Err(failure) => panic!("{failure}"),
    }
}

/// The installed entry; `Ok(None)` without npm; `Err` when npm failed twice.
// `File::lock` needs Rust 1.89, above the workspace's MSRV; test code only.
#[allow(clippy::incompatible_msrv)]
fn try_install(dir: &str, package: &str, entry: &str) -> Result<Option<PathBuf>, String> {
    let target = target_dir();
    let installed = target.join(dir);
    let path = installed.join(entry);
    if path.exists() {
        return Ok(Some(path));
    }
    fs::create_dir_all(&target).map_err(|e| format!("create target/: {e}"))?;
    let lock = File::create(target.join(format!("{dir}.lock")))
        .map_err(|e| format!("create the install lock: {e}"))?;
    lock.lock()
        .map_err(|e| format!("take the install lock: {e}"))?;
    if path.exists() {
        return Ok(Some(path));
    }
    let staging = target.join(format!("{dir}.staging"));
    // The registry is reached over the network: one retry covers a dropped connection.
    let mut last = String::new();
    for _ in 0..2 {
        let _ = fs::remove_dir_all(&staging);
        match npm_install(&staging, package) {
            Ok(()) if staging.join(entry).exists() => {
                let _ = fs::remove_dir_all(&installed);
                fs::rename(&staging, &installed)
                    .map_err(|e| format!("move the install into place: {e}"))?;
                return Ok(Some(path));
            }
            Ok(()) => last = format!("npm install {package} left no {entry}"),
            Err(Some(e)) => last = e,
            Err(None) => return Ok(None),
        }
    }
    Err(last)
}

/// `Err(None)` when npm itself cannot be run.
fn npm_install(prefix: &Path, package: &str) -> Result<(), Option<String>> {
    let output = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .arg(package)
        .output()
        .map_err(|_| None)?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(Some(format!(
            "npm install {package} failed: {}\n{}",
            output.status,
            tail.join("\n")
        )))
    }
}
