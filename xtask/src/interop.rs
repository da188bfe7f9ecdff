//! `cargo xtask interop`: the provider clients against real OpenAI-compatible servers.
//!
//! Installs llama-cpp-python's server and the LiteLLM proxy into a virtualenv under
//! `target/interop/` (pinned in `scripts/interop/requirements.txt`; llama.cpp builds from
//! source, about ten minutes on two cores the first time, which is why this is not part of
//! `test-all`), writes a tiny random-weight model (`scripts/interop/tiny_gguf.py`), serves it
//! on 127.0.0.1 directly and through LiteLLM, and runs the ignored tests of
//! `crates/agent-provider/tests/interop.rs` against both. The servers are stopped however the
//! run ends; their logs stay in `target/interop/`.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::{cargo, exit_code};

/// The model name both servers answer to.
const MODEL: &str = "tiny";

/// The key the LiteLLM proxy requires (a local test value, not a secret).
const LITELLM_KEY: &str = "sk-effect-agents-interop";

/// How long a server may take to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) fn run(root: &Path) -> Result<ExitCode, String> {
    let dir = root.join("target/interop");
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let python = install(root, &dir)?;

    let model = dir.join("tiny.gguf");
    step("writing the tiny model");
    check(
        Command::new(&python)
            .arg(root.join("scripts/interop/tiny_gguf.py"))
            .arg(&model),
        "tiny_gguf.py",
    )?;

    let llama_port = free_port()?;
    step(&format!(
        "starting llama-cpp-python on 127.0.0.1:{llama_port}"
    ));
    let mut llama = Server::start(
        "llama-cpp-python",
        Command::new(&python).args([
            "-m",
            "llama_cpp.server",
            "--model",
            &model.to_string_lossy(),
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            &llama_port.to_string(),
            "--n_ctx",
            "2048",
        ]),
        &dir.join("llama-server.log"),
    )?;
    llama.wait_until_up(llama_port, "/v1/models")?;

    let litellm_port = free_port()?;
    let config = dir.join("litellm.yaml");
    fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n      \
             api_base: http://127.0.0.1:{llama_port}/v1\n      api_key: none\n\
             general_settings:\n  master_key: {LITELLM_KEY}\n"
        ),
    )
    .map_err(|e| format!("writing {}: {e}", config.display()))?;
    step(&format!(
        "starting the LiteLLM proxy on 127.0.0.1:{litellm_port}"
    ));
    let mut litellm = Server::start(
        "LiteLLM",
        Command::new(dir.join("venv/bin/litellm"))
            .args(["--config", &config.to_string_lossy()])
            .args(["--host", "127.0.0.1", "--port", &litellm_port.to_string()])
            // No telemetry or update checks: the machine has no network beyond registries.
            .env("LITELLM_TELEMETRY", "False")
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        &dir.join("litellm.log"),
    )?;
    litellm.wait_until_up(litellm_port, "/health/liveliness")?;

    step("running crates/agent-provider/tests/interop.rs");
    let status = cargo(
        root,
        &[
            "test",
            "-p",
            "agent-provider",
            "--test",
            "interop",
            "--",
            "--ignored",
            "--test-threads",
            "1",
        ],
    )
    .env(
        "EFFECT_AGENTS_INTEROP_LLAMA_URL",
        format!("http://127.0.0.1:{llama_port}/v1"),
    )
    .env(
        "EFFECT_AGENTS_INTEROP_LITELLM_URL",
        format!("http://127.0.0.1:{litellm_port}/v1"),
    )
    .env("EFFECT_AGENTS_INTEROP_LITELLM_KEY", LITELLM_KEY)
    .status()
    .map_err(|e| format!("running cargo test: {e}"))?;
    Ok(exit_code(status))
}

/// Creates the virtualenv and installs the pinned requirements, unless the installed set
/// already matches them. Returns the venv's Python.
fn install(root: &Path, dir: &Path) -> Result<PathBuf, String> {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let requirements = root.join("scripts/interop/requirements.txt");
    let wanted = fs::read_to_string(&requirements)
        .map_err(|e| format!("reading {}: {e}", requirements.display()))?;
    let stamp = venv.join("effect-agents-requirements.txt");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    if !python.exists() {
        step("creating the virtualenv target/interop/venv");
        check(
            Command::new(std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into()))
                .args(["-m", "venv"])
                .arg(&venv),
            "python3 -m venv",
        )?;
    }
    step("installing llama-cpp-python[server] and litellm[proxy] (llama.cpp builds: ~10 min)");
    check(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "-r"])
            .arg(&requirements),
        "pip install",
    )?;
    fs::write(&stamp, wanted).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    Ok(python)
}

/// A server process in its own process group, stopped (group and all) when dropped.
struct Server {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Server {
    fn start(name: &'static str, command: &mut Command, log: &Path) -> Result<Server, String> {
        let file = fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let err = file
            .try_clone()
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        Ok(Server {
            name,
            child,
            log: log.to_path_buf(),
        })
    }

    /// Waits until `GET path` answers 200, failing early if the process exits.
    fn wait_until_up(&mut self, port: u16, path: &str) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) before answering; see {}",
                    self.name,
                    self.log.display()
                ));
            }
            if http_get_status(port, path) == Some(200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(format!(
            "{} did not answer GET {path} within {}s; see {}",
            self.name,
            START_TIMEOUT.as_secs(),
            self.log.display()
        ))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The whole group: LiteLLM and uvicorn start workers of their own.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// The status code of `GET http://127.0.0.1:{port}{path}`, or `None` if there is no answer.
fn http_get_status(port: u16, path: &str) -> Option<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A port free on 127.0.0.1 right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// Runs `command` to completion, failing with `what` if it does not succeed.
fn check(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("running {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

fn step(what: &str) {
    eprintln!("==> interop: {what}");
}
