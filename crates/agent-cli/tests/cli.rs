//! The `agent` binary as a user runs it: the offline example, the trace and memory commands,
//! and each kind of bad input (with its exit code and one clear line).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[path = "../../agent-agents/tests/support/procs.rs"]
mod procs;
#[path = "../../agent-otel/tests/support/receiver.rs"]
mod receiver;

fn agent(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the agent binary runs")
}

/// `agent ARGS` in `dir`, which must succeed and print one JSON value.
fn agent_json(args: &[&str], dir: &Path) -> serde_json::Value {
    let out = agent(args, dir);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("the command prints JSON")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Sends `signal` (`INT`, `TERM`, …) to the running `child` and waits for it: it must exit
/// with 130 and say it was aborted by `named`. Returns its output.
fn stopped_by(child: std::process::Child, signal: &str, named: &str) -> Output {
    let killed = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{signal}: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("aborted ({named})")),
        "{}",
        stderr(&out)
    );
    out
}

/// `agent run SPEC --trace TRACE --quiet` in `dir`.
fn run_quiet(spec: &Path, trace: &Path, dir: &Path) -> Output {
    agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
        ],
        dir,
    )
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Runs the offline example into `dir`; returns the trace path.
fn run_example(dir: &Path) -> PathBuf {
    let spec = examples().join("research.toml");
    let trace = dir.join("research.trace.jsonl");
    let out = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--json",
        ],
        dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(answer["answer"]["title"].is_string(), "{answer}");
    assert!(!answer["answer"]["points"].as_array().unwrap().is_empty());
    trace
}

#[test]
fn the_offline_example_runs_and_its_trace_can_be_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let trace = run_example(dir.path());
    let trace_arg = trace.to_str().unwrap();

    let summary = agent_json(&["trace", "summary", trace_arg, "--json"], dir.path());
    assert_eq!(summary["model_calls"], 2, "{summary}");
    assert_eq!(summary["tool_calls"], 1);
    assert_eq!(summary["tools"]["read_file"]["calls"], 1);
    assert_eq!(summary["errors"], 0);
    assert_eq!(summary["outcome"], "succeeded", "{summary}");
    assert!(summary["value_preview"].is_string(), "{summary}");
    assert!(summary.get("error").is_none(), "{summary}");

    let text = stdout(&agent(&["trace", "summary", trace_arg], dir.path()));
    assert!(text.contains("outcome   succeeded"), "{text}");
    assert!(
        text.contains("research-model") && text.contains("read_file"),
        "{text}"
    );

    let tree = stdout(&agent(&["trace", "tree", trace_arg], dir.path()));
    assert!(
        tree.contains("[par]"),
        "the tool calls run as a fork: {tree}"
    );

    let events = agent(
        &[
            "trace",
            "events",
            trace_arg,
            "--type",
            "tool_call,tool_result",
        ],
        dir.path(),
    );
    let lines: Vec<String> = stdout(&events).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("tool_call") && lines[0].contains("notes.md"));
    let bad_type = agent(
        &["trace", "events", trace_arg, "--type", "nope"],
        dir.path(),
    );
    assert_eq!(bad_type.status.code(), Some(3));
    assert!(stderr(&bad_type).contains("unknown event type `nope`"));
    let bad_branch = agent(
        &["trace", "events", trace_arg, "--branch", "no-such-branch"],
        dir.path(),
    );
    assert_eq!(bad_branch.status.code(), Some(3));
    assert!(
        stderr(&bad_branch).contains("no branch `no-such-branch`"),
        "{}",
        stderr(&bad_branch)
    );

    // The same run twice agrees; a run with another answer diverges, and says where.
    let again = dir.path().join("again.trace.jsonl");
    let spec = examples().join("research.toml");
    let rerun = run_quiet(&spec, &again, dir.path());
    assert_eq!(rerun.status.code(), Some(0), "{}", stderr(&rerun));
    let same = agent(
        &["trace", "diff", trace_arg, again.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
    let other_spec = std::fs::read_to_string(examples().join("research.scripted.toml"))
        .unwrap()
        .replace("Deterministic, budgeted agents", "Something else")
        .replace(
            "root = \"research\"",
            &format!("root = {:?}", examples().join("research")),
        );
    let other_path = dir.path().join("other.toml");
    std::fs::write(&other_path, other_spec).unwrap();
    let other = dir.path().join("other.trace.jsonl");
    let ran = run_quiet(&other_path, &other, dir.path());
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let diff = agent(
        &[
            "trace",
            "diff",
            trace_arg,
            other.to_str().unwrap(),
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(diff.status.code(), Some(1), "{}", stdout(&diff));
    let diff: serde_json::Value = serde_json::from_str(&stdout(&diff)).unwrap();
    assert!(
        diff["branch"].as_str().unwrap().starts_with("run"),
        "{diff}"
    );
    assert!(diff["left"].to_string().contains("Deterministic"), "{diff}");
    assert!(
        diff["right"].to_string().contains("Something else"),
        "{diff}"
    );

    let view = agent(&["trace", "view", trace_arg], dir.path());
    assert_eq!(view.status.code(), Some(0), "{}", stderr(&view));
    let url = stdout(&view).trim().to_owned();
    let html = PathBuf::from(url.strip_prefix("file://").expect("a file:// URL"));
    assert!(html.is_absolute(), "{url}");
    assert!(std::fs::read_to_string(&html).unwrap().contains("<html"));

    // --open hands the URL to the desktop's opener (here a stand-in that notes it).
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let noted = dir.path().join("opened.txt");
        let opener = bin.join("xdg-open");
        std::fs::write(
            &opener,
            format!("#!/bin/sh\necho \"$1\" > '{}'\n", noted.display()),
        )
        .unwrap();
        std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(env!("CARGO_BIN_EXE_agent"))
            .args(["trace", "view", trace_arg, "--open"])
            .current_dir(dir.path())
            .env("PATH", path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let deadline = Instant::now() + Duration::from_secs(60);
        let written = || {
            std::fs::read_to_string(&noted)
                .ok()
                .filter(|t| t.ends_with('\n'))
        };
        while written().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let opened = written().expect("the opener ran");
        assert_eq!(opened.trim(), url);
    }
}

#[test]
fn a_corrupt_trace_names_its_line_and_lenient_summarizes_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let trace = run_example(dir.path());
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    lines.insert(4, "{\"v\":2,\"trace_id\":\"x\",\"event\":{\"type\":");
    let corrupt = dir.path().join("corrupt.jsonl");
    std::fs::write(&corrupt, lines.join("\n") + "\n").unwrap();
    let out = agent(&["trace", "summary", corrupt.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(err.contains("line 5"), "{err}");
    assert!(err.lines().count() <= 3, "one line and its causes: {err}");
    let lenient = agent(
        &[
            "trace",
            "summary",
            corrupt.to_str().unwrap(),
            "--lenient",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(lenient.status.code(), Some(0), "{}", stderr(&lenient));
    assert!(stderr(&lenient).contains("line 5"));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&lenient)).unwrap();
    // The header is line 1, so lines 2–4 are the readable events (and content lines).
    let events = lines[1..4]
        .iter()
        .filter(|l| !l.contains("\"content\":{"))
        .count();
    assert_eq!(summary["events"], events, "{summary} of {total} lines");

    let missing = agent(&["trace", "summary", "no-such-file.jsonl"], dir.path());
    assert_eq!(missing.status.code(), Some(3));
    assert!(stderr(&missing).contains("no-such-file.jsonl"));
}

#[test]
fn a_spec_with_an_unknown_key_names_it_and_the_allowed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.toml");
    std::fs::write(
        &spec,
        "[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = [\"hi\"]\n\n[agent]\ngoal = \"x\"\nmax_turn = 3\n",
    )
    .unwrap();
    let out = agent(&["run", spec.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(err.contains("unknown field `max_turn`"), "{err}");
    assert!(
        err.contains("max_turns"),
        "the allowed keys are listed: {err}"
    );
}

#[test]
fn a_missing_api_key_says_which_variable() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("openai.toml");
    std::fs::write(
        &spec,
        "[model]\nprovider = \"openai\"\nname = \"gpt\"\napi_key_env = \"AGENT_CLI_TEST_NO_SUCH_KEY\"\n\n[agent]\ngoal = \"x\"\n",
    )
    .unwrap();
    let out = agent(&["run", spec.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(4));
    assert!(
        stderr(&out).contains("AGENT_CLI_TEST_NO_SUCH_KEY"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unreachable_endpoint_fails_the_run_promptly_and_the_trace_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let spec = dir.path().join("down.toml");
    std::fs::write(
        &spec,
        format!(
            "[model]\nprovider = \"openai\"\nname = \"gpt\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\napi_key_env = \"\"\n\n[agent]\ngoal = \"x\"\n"
        ),
    )
    .unwrap();
    let trace = dir.path().join("down.trace.jsonl");
    let started = Instant::now();
    let out = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(stderr(&out).contains("the run failed"), "{}", stderr(&out));
    assert!(trace.exists());
}

#[test]
fn ctrl_c_or_sigterm_aborts_cleanly_and_still_writes_the_trace() {
    for (signal, named) in [("INT", "Ctrl-C"), ("TERM", "SIGTERM")] {
        aborts_cleanly_and_still_writes_the_trace(signal, named);
    }
}

/// A run stopped by `kill -SIGNAL` while its model call hangs says `aborted (NAMED)`.
fn aborts_cleanly_and_still_writes_the_trace(signal: &str, named: &str) {
    let dir = tempfile::tempdir().unwrap();
    // A server that accepts and never answers: the model call hangs until the abort.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let spec = dir.path().join("slow.toml");
    std::fs::write(
        &spec,
        format!(
            "[model]\nprovider = \"openai\"\nname = \"gpt\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\napi_key_env = \"\"\n\n[agent]\ngoal = \"x\"\n"
        ),
    )
    .unwrap();
    let trace = dir.path().join("slow.trace.jsonl");
    let child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the model call is under way (its start is in the streamed trace).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&trace).is_ok_and(|t| t.contains("infer_start")) {
        assert!(
            Instant::now() < deadline,
            "the run did not start its model call within a minute"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stopped_by(child, signal, named);
    let written = std::fs::read_to_string(&trace).unwrap();
    assert!(
        written.contains("\"trace\""),
        "the complete trace, with its header"
    );
    assert!(written.contains("infer_start"));
}

#[test]
fn the_memory_commands_work_on_a_sqlite_file_and_reads_never_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mem.db");
    let db_arg = db.to_str().unwrap();
    for missing in [
        vec!["memory", "--db", db_arg, "search", "x"],
        vec!["memory", "--db", db_arg, "list"],
        vec!["memory", "--db", db_arg, "stats"],
        vec!["memory", "--db", db_arg, "forget", "x"],
    ] {
        let out = agent(&missing, dir.path());
        assert_eq!(out.status.code(), Some(3), "{missing:?}");
        assert!(
            stderr(&out).contains("no such memory database"),
            "{}",
            stderr(&out)
        );
        assert!(!db.exists(), "{missing:?} created the file");
    }
    let add = |text: &str, tag: &str| {
        let out = agent(
            &[
                "memory", "--db", db_arg, "add", text, "--tag", tag, "--json",
            ],
            dir.path(),
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let id: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        id["id"].as_str().unwrap().to_owned()
    };
    let rust = add("Rust has ownership and borrowing", "lang");
    add("Rust compiles to fast code", "lang");
    add("Paris is the capital of France", "geo");
    let search = agent(
        &[
            "memory",
            "--db",
            db_arg,
            "search",
            "ownership in Rust",
            "--json",
        ],
        dir.path(),
    );
    let hits: Vec<serde_json::Value> = stdout(&search)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(hits[0]["id"], rust.as_str(), "{hits:?}");
    assert!(hits[0]["score"].as_f64().unwrap() > hits[1]["score"].as_f64().unwrap());
    let text = stdout(&agent(
        &["memory", "--db", db_arg, "search", "ownership"],
        dir.path(),
    ));
    assert!(text.lines().next().unwrap().contains("ownership"), "{text}");
    let list = stdout(&agent(&["memory", "--db", db_arg, "list"], dir.path()));
    assert_eq!(list.lines().count(), 3, "{list}");
    let stats = agent(&["memory", "--db", db_arg, "stats", "--json"], dir.path());
    let stats: serde_json::Value = serde_json::from_str(&stdout(&stats)).unwrap();
    assert_eq!(stats["entries"], 3);
    assert!(stats["dimensions"].as_u64().unwrap() > 0);
    assert!(stats["bytes"].as_u64().unwrap() > 0);
    let forget = agent(&["memory", "--db", db_arg, "forget", &rust], dir.path());
    assert_eq!(forget.status.code(), Some(0));
    let again = agent(&["memory", "--db", db_arg, "forget", &rust], dir.path());
    assert_eq!(again.status.code(), Some(3), "an unknown id is an error");
    let prune = agent(
        &[
            "memory",
            "--db",
            db_arg,
            "prune",
            "--max-entries",
            "0",
            "--json",
        ],
        dir.path(),
    );
    let pruned: serde_json::Value = serde_json::from_str(&stdout(&prune)).unwrap();
    assert_eq!(pruned["removed"], 2, "{pruned}");
}

#[test]
fn completions_and_help_work() {
    let dir = tempfile::tempdir().unwrap();
    let out = agent(&["completions", "bash"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("agent"));
    let help = agent(&["--help"], dir.path());
    assert!(stdout(&help).contains("Exit codes"), "{}", stdout(&help));
    let usage = agent(&["trace"], dir.path());
    assert_eq!(usage.status.code(), Some(2));
}

/// The README lists the exit codes as `agent --help` does, word for word.
#[test]
fn the_readme_gives_the_exit_codes_of_the_help() {
    let dir = tempfile::tempdir().unwrap();
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = words(&stdout(&agent(&["--help"], dir.path())));
    let start = help
        .find("Exit codes: ")
        .expect("the help lists exit codes")
        + 12;
    // The list ends with the sentence of its last code, 130.
    let last = start + help[start..].find("; 130 ").expect("130 is listed");
    let end = last + help[last..].find('.').expect("the list ends");
    let codes = &help[start..end];
    assert!(codes.starts_with("0 success; 1 "), "{codes}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    assert!(
        words(&readme).contains(codes),
        "README.md does not give the exit codes as `agent --help` does: {codes}"
    );
}

#[test]
fn a_text_agent_is_kept_inside_its_directory_and_remembers_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.txt"), "alpha").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "do not read").unwrap();
    let spec = dir.path().join("text.toml");
    std::fs::write(
        &spec,
        r#"
[model]
provider = "scripted"
name = "m"
replies = [
    { calls = [{ tool = "read_file", args = { path = "../secret.txt" } }, { tool = "read_file", args = { path = "a.txt" } }] },
    "The file says alpha.",
]

[agent]
goal = "What does a.txt say?"

[tools.read_file]
root = "docs"

[memory]
db = "mem.db"
"#,
    )
    .unwrap();
    let trace = dir.path().join("text.trace.jsonl");
    let out = run_quiet(&spec, &trace, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "The file says alpha.");
    let events = stdout(&agent(
        &[
            "trace",
            "events",
            trace.to_str().unwrap(),
            "--type",
            "tool_result",
            "--json",
        ],
        dir.path(),
    ));
    let results: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["event"]["data"]["success"], false, "{events}");
    assert!(
        results[0]["event"]["data"]["output_preview"]
            .as_str()
            .unwrap()
            .contains("outside")
    );
    assert_eq!(results[1]["event"]["data"]["success"], true);
    // The answer is in the spec's memory.
    let db = dir.path().join("mem.db");
    let list = stdout(&agent(
        &["memory", "--db", db.to_str().unwrap(), "list"],
        dir.path(),
    ));
    assert!(list.contains("The file says alpha."), "{list}");
}

#[path = "../../agent-agents/tests/support/everything.rs"]
mod everything;

#[test]
fn a_spec_can_offer_the_tools_of_an_mcp_server() {
    let Some(entry) = everything::server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("mcp.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[model]
provider = "scripted"
name = "m"
replies = [
    {{ calls = [{{ tool = "echo", args = {{ message = "hello from the spec" }} }}] }},
    "done",
]

[agent]
goal = "Echo something."

[[tools.mcp]]
name = "everything"
command = "node"
args = [{entry:?}, "stdio"]
capabilities = ["mcp.everything"]
"#
        ),
    )
    .unwrap();
    let trace = dir.path().join("mcp.trace.jsonl");
    let out = run_quiet(&spec, &trace, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done");
    // The server's own logging went to its log beside the trace, not to the terminal.
    let log = std::fs::read_to_string(dir.path().join("mcp.everything.mcp.log")).unwrap();
    assert!(log.contains("Starting"), "{log}");
    assert!(!stderr(&out).contains("Starting"), "{}", stderr(&out));
    // `agent tools` lists the server's tools with their source and schema.
    let listed = agent(&["tools", spec.to_str().unwrap(), "--json"], dir.path());
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let tools: Vec<serde_json::Value> = stdout(&listed)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let echo = tools.iter().find(|t| t["name"] == "echo").expect("echo");
    assert_eq!(echo["source"], "mcp:everything");
    assert_eq!(echo["capabilities"], serde_json::json!(["mcp.everything"]));
    assert!(
        echo["parameters"]["properties"]["message"].is_object(),
        "{echo}"
    );
    let results = stdout(&agent(
        &[
            "trace",
            "events",
            trace.to_str().unwrap(),
            "--type",
            "tool_result",
            "--json",
        ],
        dir.path(),
    ));
    let result: serde_json::Value = serde_json::from_str(results.lines().next().unwrap()).unwrap();
    assert_eq!(result["event"]["data"]["name"], "echo");
    assert_eq!(result["event"]["data"]["success"], true, "{result}");
    assert!(
        result["event"]["data"]["output_preview"]
            .as_str()
            .unwrap()
            .contains("hello from the spec"),
        "{result}"
    );
}

/// Records `topic`'s two-call run durably into the journal at `path`.
fn record(path: &Path, topic: &str) {
    use agent_op::{Op, Prompt, Response, op};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let journal = std::sync::Arc::new(agent_journal::SqliteJournal::open(path).await.unwrap());
        let provider = agent_provider::ScriptedProvider::from_fn(|_, p: &Prompt| {
            Ok(Response::text(format!("re: {}", p.messages[0].content())))
        });
        let topic = topic.to_owned();
        let program: Op<(), String> = op::infer_raw("m", Prompt::new().user("plan"))
            .and_then(move |_| op::infer_raw("m", Prompt::new().user(topic)))
            .map(|r| r.content);
        let config = agent_interp_seq::Config::new().provider(provider);
        agent_interp_seq::run_durable(&config, journal.clone(), (), program)
            .await
            .unwrap();
        std::sync::Arc::into_inner(journal)
            .unwrap()
            .close()
            .await
            .unwrap();
    });
}

#[test]
fn journals_show_their_entries_and_diff_where_the_runs_asked_differently() {
    let dir = tempfile::tempdir().unwrap();
    record(&dir.path().join("oslo.db"), "Oslo");
    record(&dir.path().join("rome.db"), "Rome");
    let shown = agent(&["journal", "show", "oslo.db"], dir.path());
    assert!(shown.status.success(), "{shown:?}");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("3 entries"), "{text}");
    assert!(text.contains("model") && text.contains("Oslo"), "{text}");
    // Which run, column headers, and what each effect returned.
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("run "), "{text}");
    let header = lines.next().unwrap();
    for column in [
        "branch",
        "effect",
        "kind",
        "fingerprint",
        "request",
        "result",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert!(text.contains("re: Oslo"), "the model's reply: {text}");
    assert!(
        !dir.path().join("oslo.db-wal").exists(),
        "show writes nothing"
    );

    // A damaged database is refused and left without the files opening it made.
    let bytes = std::fs::read(dir.path().join("oslo.db")).unwrap();
    std::fs::write(dir.path().join("torn.db"), &bytes[..bytes.len() / 2]).unwrap();
    let torn = agent(&["journal", "show", "torn.db"], dir.path());
    assert_eq!(torn.status.code(), Some(3), "{torn:?}");
    for sidecar in ["torn.db-wal", "torn.db-shm"] {
        assert!(
            !dir.path().join(sidecar).exists(),
            "{sidecar} was left behind"
        );
    }

    let same = agent(&["journal", "diff", "oslo.db", "oslo.db"], dir.path());
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    let diff = agent(&["journal", "diff", "oslo.db", "rome.db"], dir.path());
    assert_eq!(diff.status.code(), Some(1), "{diff:?}");
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        text.starts_with("first difference at run, effect 1"),
        "{text}"
    );
    assert!(
        text.contains(r#"messages[0].text: "Oslo" → "Rome""#),
        "{text}"
    );
    let json = agent(
        &["journal", "diff", "oslo.db", "rome.db", "--json"],
        dir.path(),
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["effect"], 1);

    // Not a journal: a clear error and the input exit code.
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let bad = agent(&["journal", "show", "notes.txt"], dir.path());
    assert_eq!(bad.status.code(), Some(3), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a readable journal"));
}

#[test]
fn a_failed_run_says_so_in_its_exit_code_trace_summary_and_events() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.txt"), "alpha").unwrap();
    let spec = dir.path().join("broke.toml");
    // The first reply asks for a tool, so the answer needs a second call: one over budget.
    std::fs::write(
        &spec,
        r#"
[model]
provider = "scripted"
name = "m"
replies = [
    { calls = [{ tool = "read_file", args = { path = "a.txt" } }] },
    "The file says alpha.",
]

[agent]
goal = "What does a.txt say?"

[tools.read_file]
root = "docs"

[budget]
calls = 1
"#,
    )
    .unwrap();
    let trace = dir.path().join("broke.trace.jsonl");
    let trace_arg = trace.to_str().unwrap();
    let out = run_quiet(&spec, &trace, dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the budget ran out"),
        "{}",
        stderr(&out)
    );

    let summary = agent_json(&["trace", "summary", trace_arg, "--json"], dir.path());
    assert_eq!(summary["outcome"], "failed", "{summary}");
    assert_eq!(summary["error"]["kind"], "program", "{summary}");
    let message = summary["error"]["message"].as_str().unwrap();
    assert!(message.contains("the budget ran out"), "{summary}");
    let text = stdout(&agent(&["trace", "summary", trace_arg], dir.path()));
    assert!(
        text.contains("outcome   failed (program): the budget ran out"),
        "{text}"
    );

    let events = agent(
        &["trace", "events", trace_arg, "--type", "run_end", "--json"],
        dir.path(),
    );
    assert_eq!(events.status.code(), Some(0), "{}", stderr(&events));
    let lines: Vec<serde_json::Value> = stdout(&events)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "one run_end: {lines:?}");
    let data = &lines[0]["event"]["data"];
    assert_eq!(data["outcome"], "failed");
    assert_eq!(data["spent"]["calls"], 1, "{data}");
}

#[test]
fn every_reading_command_warns_about_a_torn_trace_and_takes_lenient() {
    let dir = tempfile::tempdir().unwrap();
    let trace = run_example(dir.path());
    let mut bytes = std::fs::read(&trace).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let lines = text.lines().count();
    let events = text.lines().filter(|l| l.contains("\"event\":{")).count();
    bytes.extend_from_slice(br#"{"v":3,"trace_id":"x","event":{"at":"#);
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, &bytes).unwrap();
    let torn_arg = torn.to_str().unwrap();
    let left = trace.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["trace", "summary", torn_arg],
        &["trace", "tree", torn_arg],
        &["trace", "events", torn_arg],
        &["trace", "diff", left, torn_arg],
        &["trace", "view", torn_arg],
    ];
    for command in commands {
        for lenient in [false, true] {
            let mut args = command.to_vec();
            if lenient {
                args.push("--lenient");
            }
            let out = agent(&args, dir.path());
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
            assert!(
                err.contains(&format!("line {} is torn", lines + 1))
                    && err.contains(&format!("the {events} events before it")),
                "{args:?} warns: {err}"
            );
        }
    }
}

/// One of anything is counted in the singular ("1 event", not "1 events").
#[test]
fn one_of_a_thing_is_counted_in_the_singular() {
    let dir = tempfile::tempdir().unwrap();
    let torn = dir.path().join("one.jsonl");
    std::fs::write(
        &torn,
        concat!(
            r#"{"v":3,"trace":{"id":"one","start":"2026-11-22T10:00:00Z"}}"#,
            "\n",
            r#"{"v":3,"trace_id":"one","event":{"at":"2026-11-22T10:00:00Z","type":"custom","data":{"name":"a","data":null}}}"#,
            "\n",
            r#"{"v":3,"trace_id":"one","ev"#,
        ),
    )
    .unwrap();
    let out = agent(&["trace", "summary", torn.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warning = stderr(&out);
    assert!(
        warning.contains(
            "line 3 is torn (27 bytes, cut off mid-write); reading the 1 event before it"
        ),
        "{warning}"
    );
    let summary = stdout(&out);
    assert!(
        summary.contains("1 in 1 branch (0 cancelled), 0 errors"),
        "{summary}"
    );
}

#[test]
fn trace_diff_compares_whole_answers_and_shows_where_they_differ() {
    let dir = tempfile::tempdir().unwrap();
    let common = "a long preamble that fills the preview. ".repeat(8);
    let mut traces = Vec::new();
    for (name, ending) in [("left", "the answer is yes"), ("right", "the answer is no")] {
        let spec = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &spec,
            format!(
                "[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = [\"{common}{ending}\"]\n\n[agent]\ngoal = \"x\"\n"
            ),
        )
        .unwrap();
        let trace = dir.path().join(format!("{name}.trace.jsonl"));
        let out = run_quiet(&spec, &trace, dir.path());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        traces.push(trace);
    }
    assert!(
        common.chars().count() > 200,
        "the difference is past the preview"
    );
    let (left, right) = (traces[0].to_str().unwrap(), traces[1].to_str().unwrap());
    let out = agent(&["trace", "diff", left, right], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("they differ at data.reply.content"), "{text}");
    assert!(
        text.contains("answer is yes") && text.contains("answer is no"),
        "{text}"
    );
    // A trace agrees with itself.
    let same = agent(&["trace", "diff", left, left], dir.path());
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
}

#[test]
fn a_streamed_answer_is_shown_once_on_a_terminal_and_still_reaches_a_pipe() {
    // `script` (util-linux) gives the command a terminal for stdout and stderr.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: the terminal test needs `script` (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("once.toml");
    std::fs::write(
        &spec,
        "[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = [\"The one and only answer.\"]\n\n[agent]\ngoal = \"x\"\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_agent");
    let on_terminal = Command::new("script")
        .args(["-qec", &format!("{bin} run once.toml"), "/dev/null"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(
        shown.matches("The one and only answer.").count(),
        1,
        "{shown}"
    );
    // Piped, stdout gets the answer (the terminal still sees it streamed).
    let piped = Command::new("script")
        .args([
            "-qec",
            &format!("{bin} run once.toml > answer.txt"),
            "/dev/null",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stdout)
    );
    let answer = std::fs::read_to_string(dir.path().join("answer.txt")).unwrap();
    assert_eq!(answer, "The one and only answer.\n");

    // A typed (JSON) answer: pretty-printed on stdout, and its streamed JSON not left on
    // the screen beside it. The point is longer than the progress line shows of the text,
    // so the only whole copy of it on the terminal is the answer's.
    let research = examples().join("research.toml");
    let typed = Command::new("script")
        .args([
            "-qec",
            &format!("{bin} run {} --trace t.jsonl", research.display()),
            "/dev/null",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&typed.stdout);
    let point = "A program is a value: the same program and replies give the same result \
                 and trace under either interpreter.";
    assert_eq!(shown.matches(point).count(), 1, "{shown}");
    assert!(
        shown.contains("\"title\": \"Deterministic, budgeted agents\""),
        "{shown}"
    );
}

#[test]
fn an_mcp_server_whose_command_is_missing_is_named_once_with_its_command() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("nomcp.toml");
    std::fs::write(
        &spec,
        r#"
[model]
provider = "scripted"
name = "m"
replies = ["hi"]

[agent]
goal = "x"

[[tools.mcp]]
name = "ghost"
command = "no-such-mcp-server-binary"
capabilities = ["ghost"]
"#,
    )
    .unwrap();
    let out = agent(&["run", spec.to_str().unwrap(), "--quiet"], dir.path());
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no-such-mcp-server-binary"), "{err}");
    assert_eq!(
        err.matches("`ghost`").count(),
        1,
        "the server is named once: {err}"
    );
}

/// A spec whose MCP server starts a child and never answers the handshake.
fn silent_mcp_spec(dir: &Path, handshake_timeout_secs: u32) -> (PathBuf, PathBuf) {
    let pids = dir.join("pids");
    let spec = dir.join("silent.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
[model]
provider = "scripted"
name = "m"
replies = ["hi"]

[agent]
goal = "x"

[[tools.mcp]]
name = "quiet"
command = "sh"
args = ["-c", '''{}''']
handshake_timeout_secs = {handshake_timeout_secs}
"#,
            procs::silent_server_script(&pids)
        ),
    )
    .unwrap();
    (spec, pids)
}

#[test]
fn an_mcp_server_that_never_answers_times_out_says_why_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, pids) = silent_mcp_spec(dir.path(), 1);
    let out = agent(&["run", spec.to_str().unwrap(), "--quiet"], dir.path());
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("`quiet` did not answer within 1s"), "{err}");
    // What the server said on stderr went to its log, not the terminal, and the error shows
    // its end.
    assert!(err.contains("silent.quiet.mcp.log"), "{err}");
    assert!(err.contains("silent server starting"), "{err}");
    let log = std::fs::read_to_string(dir.path().join("silent.quiet.mcp.log")).unwrap();
    assert!(log.contains("silent server starting"), "{log}");
    let pids = procs::read_pids(&pids);
    assert_eq!(pids.len(), 2, "the server and its child: {pids:?}");
    procs::wait_gone(&pids).unwrap_or_else(|left| panic!("left running: {left:?}"));
}

/// Ctrl-C, and SIGTERM (`kill`, `timeout`, a service manager) or SIGHUP (the terminal went
/// away), which the servers' own process groups do not receive.
#[test]
fn ctrl_c_sigterm_or_sighup_while_an_mcp_server_starts_kills_it_and_its_children() {
    for (signal, named) in [("INT", "Ctrl-C"), ("TERM", "SIGTERM"), ("HUP", "SIGHUP")] {
        let dir = tempfile::tempdir().unwrap();
        let (spec, pids) = silent_mcp_spec(dir.path(), 600);
        let child = Command::new(env!("CARGO_BIN_EXE_agent"))
            .args(["run", spec.to_str().unwrap(), "--quiet"])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pids = procs::read_pids(&pids);
        assert_eq!(pids.len(), 2, "the server and its child: {pids:?}");
        assert!(pids.iter().all(|&p| procs::alive(p)));
        stopped_by(child, signal, named);
        procs::wait_gone(&pids).unwrap_or_else(|left| panic!("{signal}: left running: {left:?}"));
    }
}

#[test]
fn agent_tools_lists_a_specs_built_in_tools_with_their_capabilities_and_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("tools.toml");
    std::fs::write(
        &spec,
        r#"
[model]
provider = "openai"
name = "gpt"
api_key_env = "NO_SUCH_KEY_IS_NEEDED_TO_LIST_TOOLS"

[agent]
goal = "x"

[tools.read_file]
root = "."

[tools.http_get]
allow = ["example.com"]
"#,
    )
    .unwrap();
    let out = agent(&["tools", spec.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("offers 2 tools"), "{text}");
    assert!(
        text.contains("read_file · built-in · needs fs.read"),
        "{text}"
    );
    assert!(text.contains("http_get · built-in · needs net"), "{text}");
    assert!(text.contains("allowed hosts: example.com"), "{text}");
    assert!(text.contains("\"url\""), "the schema is shown: {text}");
    let json = stdout(&agent(
        &["tools", spec.to_str().unwrap(), "--json"],
        dir.path(),
    ));
    let names: Vec<String> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["name"].to_string())
        .collect();
    assert_eq!(names, ["\"read_file\"", "\"http_get\""]);
}

/// `agent run --otlp=URL` exports the run's spans: the agent span, its model calls and tool
/// call nested under it, with prompts and replies only with `--otlp-content`; the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT` variable turns export on without the flag.
#[test]
fn agent_run_exports_its_spans_over_otlp_by_flag_or_by_the_standard_variable() {
    let spec = examples().join("research.toml");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace.jsonl");
    let by_flag = receiver::Receiver::start();
    let out = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
            &format!("--otlp={}", by_flag.url()),
            "--otlp-content",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The run flushed its spans before exiting: they are all here already.
    let spans = by_flag.spans.lock().unwrap().clone();
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent researcher")
        .unwrap_or_else(|| panic!("no agent span in {spans:#?}"));
    assert_eq!(root.service, "researcher");
    // With content: the agent's goal and its whole answer, on the agent span.
    assert!(
        root.attributes["gen_ai.input.messages"].contains("deterministic and safe"),
        "{root:?}"
    );
    assert!(
        root.attributes["gen_ai.output.messages"].contains("Recorded runs replay offline"),
        "{root:?}"
    );
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert!(chats.len() >= 2, "{spans:#?}");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, root.span_id, "{chat:?}");
        assert!(
            chat.attributes["gen_ai.input.messages"].contains("notes.md"),
            "{chat:?}"
        );
    }
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool read_file")
        .expect("a tool span");
    assert_eq!(tool.parent_span_id, root.span_id);

    let by_variable = receiver::Receiver::start();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", by_variable.url())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", "from-the-variable")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spans = by_variable.spans.lock().unwrap().clone();
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert!(chats.len() >= 2, "{spans:#?}");
    assert!(spans.iter().all(|s| s.service == "from-the-variable"));
    assert!(
        chats
            .iter()
            .all(|c| !c.attributes.contains_key("gen_ai.input.messages")),
        "contents stay off the wire unless asked for"
    );

    // A replay exports its spans too.
    let journal = dir.path().join("run.journal.db");
    let out = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
            "--journal",
            journal.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let replayed = receiver::Receiver::start();
    let out = agent(
        &[
            "replay",
            journal.to_str().unwrap(),
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
            &format!("--otlp={}", replayed.url()),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spans = replayed.spans.lock().unwrap().clone();
    assert!(
        spans.iter().any(|s| s.name == "invoke_agent researcher"),
        "{spans:#?}"
    );
    assert!(
        spans.iter().filter(|s| s.name.starts_with("chat ")).count() >= 2,
        "{spans:#?}"
    );

    // A flag value that is not a URL is refused before anything runs.
    let out = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--otlp=localhost",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("http://127.0.0.1:4318"),
        "{}",
        stderr(&out)
    );
}

/// An HTTP server on 127.0.0.1 answering every GET with the same page, or, while `hang` is
/// set, accepting and never answering.
fn page_server(hang: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().flatten() {
            if hang.load(std::sync::atomic::Ordering::SeqCst) {
                held.push(stream);
                continue;
            }
            let mut request = [0u8; 2048];
            let _ = stream.read(&mut request);
            let body = "the page";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A spec whose model fetches a page, then answers; `model` is its `[model]` table.
fn fetching_spec(dir: &Path, name: &str, port: u16, model: &str) -> PathBuf {
    let spec = dir.join(name);
    std::fs::write(
        &spec,
        format!(
            "{model}\n[agent]\ngoal = \"Fetch the page.\"\n\n[tools.http_get]\nallow = [\"127.0.0.1:{port}\"]\n"
        ),
    )
    .unwrap();
    spec
}

/// `agent run --journal`, stopped by Ctrl-C while a tool call hangs, is continued by `agent
/// resume` without repeating the committed model call; `agent replay` then re-runs it with
/// no calls, and a changed spec diverges (or, with `--live-after-divergence`, goes on live).
#[test]
fn a_durable_run_stopped_by_ctrl_c_resumes_and_replays_from_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let hang = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = page_server(hang.clone());
    // Record the model's two replies once (scripted), to serve them by request (cassette).
    let scripted = format!(
        "[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = [{{ calls = [{{ tool = \"http_get\", args = {{ url = \"http://127.0.0.1:{port}/\" }} }}] }}, \"It says: the page.\"]\n"
    );
    let recording = fetching_spec(dir.path(), "scripted.toml", port, &scripted);
    let cassette = dir.path().join("cassette.jsonl");
    let out = agent(
        &[
            "run",
            recording.to_str().unwrap(),
            "--quiet",
            "--record",
            cassette.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let replayed =
        "[model]\nprovider = \"cassette\"\nname = \"m\"\ncassette = \"cassette.jsonl\"\n";
    let spec = fetching_spec(dir.path(), "fetch.toml", port, replayed);
    let journal = dir.path().join("run.db");
    let trace = dir.path().join("fetch.trace.jsonl");

    // The durable run: the model's first reply is committed, then the fetch hangs; Ctrl-C.
    hang.store(true, std::sync::atomic::Ordering::SeqCst);
    let child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--journal",
            journal.to_str().unwrap(),
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&trace).is_ok_and(|t| t.contains("tool_call")) {
        assert!(Instant::now() < deadline, "the tool call never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));

    // A second durable run into the same journal is refused, pointing at resume.
    let again = agent(
        &[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--journal",
            journal.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(again.status.code(), Some(3), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("agent resume"),
        "{}",
        stderr(&again)
    );

    // Resume: the committed model call is answered from the journal, the fetch and the
    // second model call run live.
    hang.store(false, std::sync::atomic::Ordering::SeqCst);
    let resumed = agent_json(
        &[
            "resume",
            journal.to_str().unwrap(),
            spec.to_str().unwrap(),
            "--quiet",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(resumed["answer"], "It says: the page.");
    assert!(
        resumed["journal"]["replayed"].as_u64().unwrap() >= 1,
        "{resumed}"
    );
    assert!(
        resumed["journal"]["live"].as_u64().unwrap() >= 2,
        "{resumed}"
    );

    // Replay: everything from the journal, nothing live, even with the page server hanging
    // and no cassette.
    hang.store(true, std::sync::atomic::Ordering::SeqCst);
    std::fs::remove_file(&cassette).unwrap();
    let replay = agent_json(
        &[
            "replay",
            journal.to_str().unwrap(),
            spec.to_str().unwrap(),
            "--quiet",
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(replay["answer"], "It says: the page.");
    assert_eq!(replay["journal"]["live"], 0, "{replay}");

    // A changed goal diverges at the first model call, showing the change.
    let changed_text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("Fetch the page.", "Fetch the page, quickly.");
    let changed = dir.path().join("changed.toml");
    std::fs::write(
        &changed,
        changed_text.replace("cassette.jsonl", "none.jsonl"),
    )
    .unwrap();
    std::fs::write(dir.path().join("none.jsonl"), "").unwrap();
    let diverged = agent(
        &[
            "replay",
            journal.to_str().unwrap(),
            changed.to_str().unwrap(),
            "--quiet",
        ],
        dir.path(),
    );
    assert_eq!(diverged.status.code(), Some(1), "{}", stderr(&diverged));
    assert!(
        stderr(&diverged).contains("diverged"),
        "{}",
        stderr(&diverged)
    );
    assert!(
        stderr(&diverged).contains("quickly"),
        "{}",
        stderr(&diverged)
    );

    // With --live-after-divergence the changed spec runs live from there (its model is
    // scripted here) and the journal is left as it was.
    let live_text = std::fs::read_to_string(&recording)
        .unwrap()
        .replace("Fetch the page.", "Fetch the page, quickly.")
        .replace("It says: the page.", "Quickly: the page.");
    let live = dir.path().join("live.toml");
    std::fs::write(&live, live_text).unwrap();
    hang.store(false, std::sync::atomic::Ordering::SeqCst);
    let before = agent(
        &["journal", "show", journal.to_str().unwrap(), "--json"],
        dir.path(),
    );
    let went_on = agent_json(
        &[
            "replay",
            journal.to_str().unwrap(),
            live.to_str().unwrap(),
            "--quiet",
            "--json",
            "--live-after-divergence",
        ],
        dir.path(),
    );
    assert_eq!(went_on["answer"], "Quickly: the page.");
    assert!(
        went_on["journal"]["diverged"]
            .as_str()
            .unwrap()
            .contains("quickly"),
        "{went_on}"
    );
    let after = agent(
        &["journal", "show", journal.to_str().unwrap(), "--json"],
        dir.path(),
    );
    assert_eq!(
        stdout(&before),
        stdout(&after),
        "the journal is not changed"
    );
}
