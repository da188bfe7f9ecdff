//! What `test-all` checks about the crates as published: that each one packages and builds
//! from its package alone, and that the public API keeps the promise of the version.
//!
//! - [`package_args`] packages every member that may be published (those without
//!   `publish = false`): manifests, versions and the files each ships; [`verify`] builds
//!   the [`CORE`] crates from their packages alone, as `cargo package` verifies a package.
//! - [`semver_checks`] runs `cargo-semver-checks` (installed under `target/tools/` on first
//!   use) on the [`CORE`] crates against the last release, [`BASELINE`]: a breaking change
//!   to their public API fails unless the workspace version was bumped as the change
//!   requires. A crate added since has no API to keep and is left out, with a note.
//!
//! Building every published crate alone, and the rustdoc of every crate with all its
//! features, took 17 of `test-all`'s minutes by 2026-12-07: over the 45-minute budget.
//! Both are kept to the crates a service depends on first, as issue 44 allowed.

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

/// The crates a service depends on first: the facade, the program type and its derive,
/// the engine and the two in-process interpreters. Their packages are built alone
/// ([`verify`]) and their APIs checked against the release ([`semver_checks`]).
pub const CORE: &[&str] = &[
    "effect-agents",
    "agent-op",
    "agent-op-derive",
    "agent-engine",
    "agent-interp-seq",
    "agent-interp-par",
];

/// The facade, one of the [`CORE`] crates.
const FACADE: &str = "effect-agents";

/// The cargo-semver-checks release the check installs: pinned, since each release reads
/// the rustdoc JSON of a range of toolchains (0.51 reads Rust 1.95's).
const SEMVER_CHECKS_VERSION: &str = "0.51.0";

/// The arguments of `cargo package` for every member that may be published, not built
/// (see [`verify`]). `--allow-dirty`: a developer runs this before committing, and what
/// is checked is the working tree.
pub fn package_args(root: &Path) -> Result<Vec<String>, String> {
    let mut args: Vec<String> = [
        "package",
        "--workspace",
        "--allow-dirty",
        "--locked",
        "--no-verify",
    ]
    .map(String::from)
    .into();
    for name in unpublished_members(root)? {
        args.push("--exclude".to_owned());
        args.push(name);
    }
    Ok(args)
}

/// The builds that verify the [`CORE`] packages made by [`package_args`]: each package is
/// unpacked beside its `.crate` file (as `cargo package` unpacks what it verifies) and built
/// alone, from the files it ships and the lock file it ships, with the other crates of this
/// workspace taken from their packages, not from the registry (where this version is not
/// yet).
///
/// This is `cargo package`'s own verification, for the crates a service depends on first.
/// Cargo verifies every package it makes or none: a run that makes only these cannot resolve
/// the facade's optional dependencies on the other crates, and verifying every library took
/// 12 of `test-all`'s minutes, each one resolved with its own features. The others are
/// packaged unbuilt (manifests, versions, the files they ship).
pub fn verify(root: &Path) -> Result<Vec<(String, Command)>, String> {
    let published: Vec<Member> = members(root)?.into_iter().filter(|m| m.published).collect();
    let packages = crate::pg::target_dir(root).join("package");
    let mut patches = Vec::new();
    for member in &published {
        let unpacked = packages.join(format!("{}-{}", member.name, member.version));
        let archive = packages.join(format!("{}-{}.crate", member.name, member.version));
        if unpacked.exists() {
            std::fs::remove_dir_all(&unpacked)
                .map_err(|e| format!("could not remove {}: {e}", unpacked.display()))?;
        }
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&packages)
            .status()
            .map_err(|e| format!("could not run `tar` to unpack {}: {e}", archive.display()))?;
        if !status.success() {
            return Err(format!(
                "`tar` could not unpack {} ({status})",
                archive.display()
            ));
        }
        patches.push(format!(
            "patch.crates-io.{}.path={:?}",
            member.name,
            unpacked.to_string_lossy()
        ));
    }
    let mut builds = Vec::new();
    for name in CORE {
        let member = published
            .iter()
            .find(|m| m.name == *name)
            .ok_or_else(|| format!("{name}, a core crate, is not a published member"))?;
        let unpacked = packages.join(format!("{}-{}", member.name, member.version));
        let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(program);
        command.arg("build");
        for patch in &patches {
            command.args(["--config", patch]);
        }
        command
            .current_dir(&unpacked)
            // Dependencies already built for another crate (or for the tests, with the same
            // features and profile) are not built again.
            .env("CARGO_TARGET_DIR", crate::pg::target_dir(root))
            // The package has none of the workspace's profiles: debug info would double the
            // time and the disk of a build nothing runs.
            .env("CARGO_PROFILE_DEV_DEBUG", "false");
        builds.push((
            format!("cargo build of {} as packaged", unpacked.display()),
            command,
        ));
    }
    Ok(builds)
}

/// The workspace members with `publish = false`.
fn unpublished_members(root: &Path) -> Result<Vec<String>, String> {
    Ok(members(root)?
        .into_iter()
        .filter(|m| !m.published)
        .map(|m| m.name)
        .collect())
}

/// A workspace member, as `cargo metadata` lists it.
struct Member {
    /// The package's name.
    name: String,
    /// Its version.
    version: String,
    /// Its manifest, relative to the workspace root, with `/` between components (as git
    /// names it).
    manifest: String,
    /// Whether it may be published (it lacks `publish = false`).
    published: bool,
}

/// The workspace's members.
fn members(root: &Path) -> Result<Vec<Member>, String> {
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
    let workspace_root = Path::new(metadata["workspace_root"].as_str().unwrap_or_default());
    Ok(packages
        .iter()
        .filter_map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str()?);
            let relative = manifest.strip_prefix(workspace_root).unwrap_or(manifest);
            Some(Member {
                name: p["name"].as_str()?.to_owned(),
                version: p["version"].as_str()?.to_owned(),
                manifest: relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
                // `publish = false` is an empty list of registries; `null` means any registry.
                published: !p["publish"].as_array().is_some_and(Vec::is_empty),
            })
        })
        .collect())
}

/// The published members that were not in the release `commit` (no manifest at their path
/// there, or one naming another package): new crates, with no API to compare.
fn new_since(root: &Path, commit: &str) -> Result<Vec<String>, String> {
    Ok(members(root)?
        .into_iter()
        .filter(|m| m.published)
        .filter(|m| {
            let manifest = Command::new("git")
                .args(["show", &format!("{commit}:{}", m.manifest)])
                .current_dir(root)
                .stderr(std::process::Stdio::null())
                .output();
            let name = match manifest {
                Ok(output) if output.status.success() => {
                    package_name(&String::from_utf8_lossy(&output.stdout))
                }
                _ => None,
            };
            name.as_deref() != Some(m.name.as_str())
        })
        .map(|m| m.name)
        .collect())
}

/// The `name` of a manifest's `[package]` table (a plain `name = "…"` line, as every manifest
/// here writes it).
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_package && key.trim() == "name" {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// What the semver step runs, or why it cannot.
pub enum SemverCheck {
    /// The commands to run, each with how it is shown.
    Run(Vec<(String, Command)>),
    /// The check cannot run here (no tool to be had, no baseline commit): the reason.
    Skipped(String),
    /// Installing the tool failed for another reason.
    Failed(String),
}

/// The facade's features whose API the check covers: the in-process core (the concurrent
/// interpreter and the Prompt IR, which `op::infer` compiles). Its other features re-export
/// crates outside [`CORE`]; with every feature (the tool's default) its rustdoc built the
/// Temporal SDK and the local model's candle, twice: 8 of the step's minutes for the current
/// version alone.
const FACADE_FEATURES: &[&str] = &["par", "prompt"];

/// The `cargo semver-checks` commands comparing the [`CORE`] crates with [`BASELINE`],
/// installing the tool first if needed: the facade with [`FACADE_FEATURES`], the others with
/// the tool's choice of features (all but unstable ones). A core crate added since the
/// baseline is left out (the tool would fail to find it there), with a note on stderr.
///
/// With `idle`, the install and the checks run at the lowest CPU priority (`nice -n 19`,
/// where there is `nice`): for a run in the background of other steps.
pub fn semver_checks(root: &Path, idle: bool) -> SemverCheck {
    if !has_commit(root, BASELINE.commit) {
        return SemverCheck::Skipped(format!(
            "the baseline commit {} (v{}) is not in this clone's history (a shallow clone?)",
            BASELINE.commit, BASELINE.version
        ));
    }
    let new = match new_since(root, BASELINE.commit) {
        Ok(new) => new,
        Err(why) => return SemverCheck::Failed(why),
    };
    let (checked, added): (Vec<&str>, Vec<&str>) = CORE
        .iter()
        .partition(|name| !new.iter().any(|n| n == *name));
    for name in added {
        eprintln!(
            "note: {name} is new since v{} (not in {}): no released API to check, left out",
            BASELINE.version, BASELINE.commit
        );
    }
    let tool = match install_with(root, idle) {
        Ok(tool) => tool,
        Err(InstallError::Unavailable(why)) => return SemverCheck::Skipped(why),
        Err(InstallError::Failed(why)) => return SemverCheck::Failed(why),
    };
    let (facade, others): (Vec<&str>, Vec<&str>) =
        checked.into_iter().partition(|name| *name == FACADE);
    let mut runs = Vec::new();
    let command = |packages: &[&str], features: &[&str]| {
        let mut command = Command::new(&tool);
        command
            .args(["semver-checks", "--baseline-rev", BASELINE.commit])
            .args(packages.iter().flat_map(|name| ["-p", name]))
            .current_dir(root)
            // One target directory for every crate's rustdoc JSON, current and baseline: by
            // default each crate gets its own and builds every dependency again (11 min
            // against 34 min for this workspace).
            .env(
                "CARGO_TARGET_DIR",
                crate::pg::target_dir(root).join("semver-checks"),
            );
        if !features.is_empty() {
            command.arg("--only-explicit-features");
            command.args(features.iter().flat_map(|feature| ["--features", feature]));
        }
        if idle { niced(command) } else { command }
    };
    if !others.is_empty() {
        runs.push((
            format!("cargo semver-checks -p {}", others.join(" -p ")),
            command(&others, &[]),
        ));
    }
    if !facade.is_empty() {
        runs.push((
            format!(
                "cargo semver-checks -p {FACADE} --only-explicit-features --features {}",
                FACADE_FEATURES.join(",")
            ),
            command(&facade, FACADE_FEATURES),
        ));
    }
    SemverCheck::Run(runs)
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

/// `command` at the lowest CPU priority, where there is `nice`: its program, arguments,
/// folder and variables kept.
fn niced(command: Command) -> Command {
    let nice = Path::new("/usr/bin/nice");
    if !nice.is_file() {
        return command;
    }
    let mut niced = Command::new(nice);
    niced
        .args(["-n", "19"])
        .arg(command.get_program())
        .args(command.get_args());
    if let Some(dir) = command.get_current_dir() {
        niced.current_dir(dir);
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => niced.env(key, value),
            None => niced.env_remove(key),
        };
    }
    niced
}

/// The cargo-semver-checks binary under `target/tools/`, installed from crates.io if it is
/// not there (a few minutes, once per target directory), at the lowest CPU priority if
/// `idle`.
fn install_with(root: &Path, idle: bool) -> Result<PathBuf, InstallError> {
    let prefix = crate::pg::target_dir(root)
        .join("tools")
        .join(format!("cargo-semver-checks-{SEMVER_CHECKS_VERSION}"));
    let binary = prefix.join("bin").join("cargo-semver-checks");
    if binary.is_file() {
        return Ok(binary);
    }
    eprintln!(
        "==> installing cargo-semver-checks {SEMVER_CHECKS_VERSION} into {}{}",
        prefix.display(),
        if idle {
            " (in the background, at idle priority)"
        } else {
            ""
        }
    );
    let prefix_arg = prefix.to_string_lossy().into_owned();
    let mut command = cargo(
        root,
        &[
            "install",
            "cargo-semver-checks",
            "--locked",
            "--version",
            &format!("={SEMVER_CHECKS_VERSION}"),
            "--root",
            &prefix_arg,
            // Unoptimized, dependencies too (its manifest optimizes them even in debug
            // builds): 2m40 against 7 to 9 minutes for its release build on this 2-core
            // machine, and it still checks a crate in under two seconds.
            "--debug",
            "--config",
            "profile.dev.package.\"*\".opt-level=0",
        ],
    );
    if idle {
        command = niced(command);
    }
    let output = command
        .env("CARGO_INCREMENTAL", "0")
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifests_package_name_is_read_from_its_package_table() {
        let manifest = "[workspace]\nmembers = []\n\n[package]\nname = \"agent-spec\"\nversion.workspace = true\n\n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("agent-spec"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
        assert_eq!(package_name("[workspace]\nmembers = []\n"), None);
    }

    #[test]
    fn crates_missing_at_the_baseline_are_new() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        if !has_commit(&root, BASELINE.commit) {
            return; // A shallow clone: nothing to compare with.
        }
        let new = new_since(&root, BASELINE.commit).unwrap();
        // Crates of the release are checked; a crate added since (none, right after a
        // release) is not.
        for released in ["agent-op", "agent-cli", "effect-agents"] {
            assert!(!new.iter().any(|n| n == released), "{released} in {new:?}");
        }
    }
}
