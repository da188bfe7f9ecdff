//! What `test-all` checks about the crates as published: that each one packages and builds
//! from its package alone, and that the public API keeps the promise of the version.
//!
//! - [`package_args`] packages every member that may be published (those without
//!   `publish = false`), and cargo verifies each package by building it in isolation from
//!   the files it ships.
//! - [`semver_checks`] runs `cargo-semver-checks` (installed under `target/tools/` on first
//!   use) against the last release, [`BASELINE`]: a breaking change to a crate's public API
//!   fails unless the workspace version was bumped as the change requires.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cargo;

/// The last release: its version and the commit it was made from (tagged `v0.1.0`). The
/// commit, not the tag, is what the check uses: a clone does not always bring tags. Update
/// both when a release is made.
pub const BASELINE: Release = Release {
    version: "0.1.0",
    commit: "feedae2f8cfb509b7be8554febc715d4d5864e54",
};

/// A released version of the workspace's crates.
pub struct Release {
    /// The version every published crate had.
    pub version: &'static str,
    /// The commit it was released from.
    pub commit: &'static str,
}

/// Published crates whose library is not a promise to users, left out of the API check:
/// `agent-cli`'s library is the `agent` binary's implementation (its contract is the
/// command line, its flags and exit codes), and checking it costs more than the rest of the
/// workspace together.
const NOT_API: &[&str] = &["agent-cli"];

/// The cargo-semver-checks release the check installs: pinned, since each release reads
/// the rustdoc JSON of a range of toolchains (0.51 reads Rust 1.95's).
const SEMVER_CHECKS_VERSION: &str = "0.51.0";

/// The arguments of `cargo package` for every member that may be published, verified (each
/// package built from its own files, against the others as packaged). `--allow-dirty`: a
/// developer runs this before committing, and what is checked is the working tree.
pub fn package_args(root: &Path) -> Result<Vec<String>, String> {
    let mut args: Vec<String> = ["package", "--workspace", "--allow-dirty", "--locked"]
        .map(String::from)
        .into();
    for name in unpublished_members(root)? {
        args.push("--exclude".to_owned());
        args.push(name);
    }
    Ok(args)
}

/// The workspace members with `publish = false`.
fn unpublished_members(root: &Path) -> Result<Vec<String>, String> {
    let output = cargo(root, &["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("could not run `cargo metadata`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("`cargo metadata` printed no JSON: {e}"))?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or("`cargo metadata` listed no packages")?;
    // `publish = false` is an empty list of registries; `null` means any registry.
    Ok(packages
        .iter()
        .filter(|p| p["publish"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect())
}

/// What the semver step runs, or why it cannot.
pub enum SemverCheck {
    /// The command to run.
    Run(Command),
    /// The check cannot run here (no tool to be had, no baseline commit): the reason.
    Skipped(String),
    /// Installing the tool failed for another reason.
    Failed(String),
}

/// The `cargo semver-checks` command comparing every published crate with [`BASELINE`],
/// installing the tool first if needed.
pub fn semver_checks(root: &Path) -> SemverCheck {
    if !has_commit(root, BASELINE.commit) {
        return SemverCheck::Skipped(format!(
            "the baseline commit {} (v{}) is not in this clone's history (a shallow clone?)",
            BASELINE.commit, BASELINE.version
        ));
    }
    let tool = match install(root) {
        Ok(tool) => tool,
        Err(InstallError::Unavailable(why)) => return SemverCheck::Skipped(why),
        Err(InstallError::Failed(why)) => return SemverCheck::Failed(why),
    };
    let mut command = Command::new(tool);
    command
        .args([
            "semver-checks",
            "--workspace",
            "--baseline-rev",
            BASELINE.commit,
        ])
        .args(NOT_API.iter().flat_map(|name| ["--exclude", name]))
        .current_dir(root)
        // One target directory for every crate's rustdoc JSON, current and baseline: by
        // default each crate gets its own and builds every dependency again (11 min against
        // 34 min for this workspace).
        .env(
            "CARGO_TARGET_DIR",
            crate::pg::target_dir(root).join("semver-checks"),
        );
    SemverCheck::Run(command)
}

/// Whether `commit` is in the repository at `root`.
fn has_commit(root: &Path, commit: &str) -> bool {
    Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(root)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The cargo-semver-checks binary under `target/tools/`, installed from crates.io if it is
/// not there (a few minutes, once per target directory).
fn install(root: &Path) -> Result<PathBuf, InstallError> {
    let prefix = crate::pg::target_dir(root)
        .join("tools")
        .join(format!("cargo-semver-checks-{SEMVER_CHECKS_VERSION}"));
    let binary = prefix.join("bin").join("cargo-semver-checks");
    if binary.is_file() {
        return Ok(binary);
    }
    eprintln!(
        "==> installing cargo-semver-checks {SEMVER_CHECKS_VERSION} into {}",
        prefix.display()
    );
    let prefix_arg = prefix.to_string_lossy().into_owned();
    let output = cargo(
        root,
        &[
            "install",
            "cargo-semver-checks",
            "--locked",
            "--version",
            &format!("={SEMVER_CHECKS_VERSION}"),
            "--root",
            &prefix_arg,
        ],
    )
    // The tool builds with its own locked dependencies, not this workspace's settings.
    // Without its release profile's fat LTO and single codegen unit it builds in two thirds
    // of the time, and it spends milliseconds per crate anyway.
    .env("CARGO_INCREMENTAL", "0")
    .env("CARGO_PROFILE_RELEASE_LTO", "false")
    .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
    .env_remove("CARGO_TARGET_DIR")
    .output()
    .map_err(|e| InstallError::Failed(format!("could not run `cargo install`: {e}")))?;
    if output.status.success() && binary.is_file() {
        return Ok(binary);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = lines[lines.len().saturating_sub(12)..].join("\n");
    let offline = [
        "failed to download",
        "failed to query replaced source",
        "Couldn't resolve host",
    ];
    if offline.iter().any(|s| stderr.contains(s)) {
        Err(InstallError::Unavailable(format!(
            "crates.io cannot be reached to install cargo-semver-checks:\n{tail}"
        )))
    } else {
        Err(InstallError::Failed(format!(
            "installing cargo-semver-checks failed:\n{tail}"
        )))
    }
}

/// Why the tool could not be installed.
enum InstallError {
    /// Not from here: the registry cannot be reached.
    Unavailable(String),
    /// Anything else.
    Failed(String),
}
