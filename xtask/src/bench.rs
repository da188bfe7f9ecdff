//! `cargo xtask bench [FILTER]`: runs every bench target, streaming result lines to stdout.
//!
//! Bench targets behind an optional feature are skipped by cargo unless it is on, so the
//! features of such targets are switched on here: `agent-memory/local-embed` for
//! `embed.local_minilm` (which fetches its model into `target/models/` on first use).
//!
//! The Temporal development server (`temporal.rs`) is started before the benchmarks when
//! they may include Temporal's (no filter, or one containing `temporal`, which Temporal's
//! benchmarks are to be named after) and stopped after them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ExitCode, Stdio};

use crate::{cargo, display, exit_code, temporal};

/// Set for `--large`: bench targets then also run their slow figures.
const LARGE_VAR: &str = "EFFECT_AGENTS_BENCH_LARGE";

/// Runs `cargo bench --workspace --benches --features agent-memory/postgres,agent-memory/local-embed,agent-journal/postgres [-- FILTER]`
/// from `root` (with `large`, telling the bench targets to run their slow figures too),
/// forwarding each result line of the child's stdout to stdout as it arrives and every other
/// line to stderr. The child's stderr is inherited. Exits with the child's status.
///
/// The `postgres` feature builds the PostgreSQL benchmark, which starts the project's test
/// server itself (`xtask/src/pg.rs`, or uses `DATABASE_URL`), stops it when done, and says
/// `SKIPPED:` on stderr when no server can be had. `local-embed` builds the local embedding
/// model's benchmark (the model is fetched into `target/models/` on first use).
///
/// With no filter or one containing `temporal`, the Temporal development server is started
/// first (its address in `AGENT_TEMPORAL_ADDRESS`, or the reason there is none in
/// `AGENT_TEMPORAL_UNAVAILABLE`) and stopped when the benchmarks are done, however they end.
pub fn run(root: &Path, filter: Option<String>, large: bool) -> Result<ExitCode, String> {
    let temporal = if filter.as_deref().is_none_or(|f| f.contains("temporal")) {
        Temporal::start(root)?
    } else {
        Temporal::default()
    };
    let mut args = vec![
        "bench",
        "--workspace",
        "--benches",
        "--features",
        "agent-memory/postgres,agent-memory/local-embed,agent-journal/postgres",
    ];
    if let Some(filter) = &filter {
        args.extend(["--", filter.as_str()]);
    }
    let shown = display(&args);
    eprintln!("==> {shown}");
    let mut command = cargo(root, &args);
    if large {
        // Read by the bench targets (`bench_kit::large`).
        command.env(LARGE_VAR, "1");
    }
    command.envs(temporal.env.iter().map(|(k, v)| (*k, v.as_str())));
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("could not run `{shown}`: {e}"))?;
    let forwarded = match child.stdout.take() {
        Some(stdout) => forward(stdout),
        None => Err(io::Error::other("child stdout was not captured")),
    };
    if let Err(e) = forwarded {
        // Nothing more can be reported; don't leave the benchmarks running unobserved.
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("forwarding the output of `{shown}`: {e}"));
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for `{shown}`: {e}"))?;
    if !status.success() {
        eprintln!("==> FAILED: {shown} ({status})");
    }
    Ok(exit_code(status))
}

/// The Temporal development server of a benchmark run: the variables the benchmarks get,
/// and the server this run started (stopped when this is dropped).
#[derive(Default)]
struct Temporal {
    env: Vec<(&'static str, String)>,
    started: Option<temporal::Server>,
}

impl Temporal {
    /// Starts the server unless `AGENT_TEMPORAL_ADDRESS` names one already. No server to be
    /// had is not an error (the benchmarks say `SKIPPED:`); one that fails to start is.
    fn start(root: &Path) -> Result<Temporal, String> {
        let mut this = Temporal::default();
        if std::env::var_os(temporal::ADDRESS_ENV).is_some_and(|a| !a.is_empty()) {
            eprintln!(
                "==> {} is set; the benchmarks use that Temporal server",
                temporal::ADDRESS_ENV
            );
            return Ok(this);
        }
        let server = temporal::Server::new(&temporal::target_dir(root));
        match server.start() {
            Ok(started) => {
                eprintln!(
                    "==> Temporal development server ({}) at {}{}",
                    temporal::PACKAGE,
                    started.address,
                    if started.already_running {
                        " (already running: left running)"
                    } else {
                        ""
                    }
                );
                this.env.push((temporal::ADDRESS_ENV, started.address));
                if !started.already_running {
                    this.started = Some(server);
                }
            }
            Err(temporal::TemporalError::Unavailable(why)) => {
                eprintln!("==> no Temporal development server, its benchmarks are skipped: {why}");
                this.env.push((temporal::UNAVAILABLE_ENV, why));
            }
            Err(temporal::TemporalError::Failed(why)) => {
                return Err(format!("starting the Temporal development server: {why}"));
            }
        }
        Ok(this)
    }
}

impl Drop for Temporal {
    fn drop(&mut self) {
        if let Some(server) = self.started.take() {
            match server.stop() {
                Ok(_) => eprintln!("==> stopped the Temporal development server"),
                Err(e) => eprintln!("==> stopping the Temporal development server failed: {e}"),
            }
        }
    }
}

/// Copies `input` line by line: result lines to stdout, other lines to stderr. Each line is
/// flushed at once, so progress shows while the benchmarks run.
fn forward(input: impl Read) -> io::Result<()> {
    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if is_result_line(line) {
            let mut out = io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        } else {
            let mut err = io::stderr().lock();
            writeln!(err, "{line}")?;
            err.flush()?;
        }
    }
}

/// Whether `line` is a benchmark result: a JSON object with a `name` key.
fn is_result_line(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|v| v.as_object().is_some_and(|o| o.contains_key("name")))
}

#[cfg(test)]
mod tests {
    use super::is_result_line;

    #[test]
    fn recognizes_result_lines() {
        assert!(is_result_line(
            r#"{"name":"seq.step","value":58.1,"unit":"ns/step","baseline":9.7,"ratio":5.99}"#
        ));
        assert!(is_result_line(r#"  {"name":"x"}  "#));
    }

    #[test]
    fn rejects_other_lines() {
        assert!(!is_result_line(""));
        assert!(!is_result_line("running 0 tests"));
        assert!(!is_result_line(r#"{"value":1}"#));
        assert!(!is_result_line(r#"["name"]"#));
        assert!(!is_result_line("{\"name\":"));
    }
}
