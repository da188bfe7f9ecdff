//! `cargo xtask bench [FILTER]`: runs every bench target, streaming result lines to stdout.
//!
//! Bench targets behind an optional feature are skipped by cargo unless it is on, so the
//! features of such targets are switched on here: `agent-memory/local-embed` for
//! `embed.local_minilm` (which fetches its model into `target/models/` on first use).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ExitCode, Stdio};

use crate::{cargo, display, exit_code};

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
pub fn run(root: &Path, filter: Option<String>, large: bool) -> Result<ExitCode, String> {
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
