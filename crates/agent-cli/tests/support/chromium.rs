//! Headless Chromium for the viewer's browser tests and benchmark: found on this machine, or
//! installed with `apt-get` (Debian's `chromium` package) when missing, and always run under a
//! time limit.

// Shared by the tests and the benchmark, which each use part of it.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// How long one page load may take before the browser is killed.
pub const PAGE_LIMIT: Duration = Duration::from_secs(60);

/// Virtual time the page gets to run its scripts before the DOM is dumped or captured. Virtual
/// time only advances while the page is idle, so this costs nothing once it has settled.
const SETTLE_MS: u32 = 5000;

/// One browser at a time: tests run in parallel, and several Chromiums rendering at once on a
/// 2-core machine could dump a page before its script finished its first render.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

const INSTALL_LIMIT: Duration = Duration::from_secs(20 * 60);

/// A Chromium binary that answered `--version`.
#[derive(Clone, Debug)]
pub struct Chromium {
    path: PathBuf,
}

/// Chromium, found or installed; `Err` says why there is none (for the one `SKIPPED:` line).
///
/// Installs at most once per process: tests run on several threads.
pub fn find_or_install() -> Result<Chromium, String> {
    static FOUND: OnceLock<Mutex<Option<Result<Chromium, String>>>> = OnceLock::new();
    let slot = FOUND.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(locate().or_else(|_| install().and_then(|()| locate())));
    }
    slot.clone().unwrap_or_else(|| Err("no result".into()))
}

fn locate() -> Result<Chromium, String> {
    let mut candidates = vec![PathBuf::from("/usr/bin/chromium")];
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            for name in ["chromium", "chromium-browser"] {
                candidates.push(dir.join(name));
            }
        }
    }
    for path in candidates.into_iter().filter(|p| p.is_file()) {
        let mut version = Command::new(&path);
        version.arg("--version");
        let answered = run_limited(version, Duration::from_secs(30))
            .map(|run| run.status.success())
            .unwrap_or(false);
        if answered {
            return Ok(Chromium { path });
        }
    }
    Err("chromium not found".into())
}

fn install() -> Result<(), String> {
    let apt = Path::new("/usr/bin/apt-get");
    if !apt.is_file() {
        return Err("not installed, and apt-get is not available".into());
    }
    let attempt = || {
        let mut cmd = Command::new(apt);
        cmd.args(["install", "-y"])
            // Another install (a parallel test binary, the bench) may hold the lock: wait.
            .args(["-o", "DPkg::Lock::Timeout=600", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive");
        run_limited(cmd, INSTALL_LIMIT)
    };
    let first = attempt()?;
    if first.status.success() {
        return Ok(());
    }
    // A fresh machine has no package lists yet.
    let mut update = Command::new(apt);
    update.args(["update", "-o", "DPkg::Lock::Timeout=600"]);
    let updated = run_limited(update, INSTALL_LIMIT)?;
    if !updated.status.success() {
        return Err(format!(
            "apt-get update failed: {}",
            last_line(&updated.stderr)
        ));
    }
    let second = attempt()?;
    if second.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get install chromium failed: {}",
            last_line(&second.stderr)
        ))
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}

/// What a process printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `cmd` in a process group of its own and kills that group after `limit`: Chromium
/// starts helper processes, which must not outlive a hung browser.
pub fn run_limited(mut cmd: Command, limit: Duration) -> Result<Run, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} did not finish within {} s and was killed",
                    cmd.get_program(),
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {:?}: {e}", cmd.get_program())),
        }
    };
    // Helpers still alive after the browser exited would hold the pipes open forever: give
    // them a moment to go, then end them.
    let settled = Instant::now();
    while !(stdout.is_finished() && stderr.is_finished()) {
        if settled.elapsed() > Duration::from_secs(5) {
            kill_group(child.id());
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(Run {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Kills the process group the child leads (its id is the group's id: `process_group(0)`).
fn kill_group(pid: u32) {
    // `--` matters: procps-ng 4.0's `kill -KILL -1234` reads the signal's number as the
    // target and kills process group 9 instead.
    let _ = Command::new("kill")
        .args(["-s", "KILL", "--"])
        .arg(format!("-{pid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Chromium {
    /// The binary.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn command(&self, profile: &Path) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={SETTLE_MS}"));
        cmd
    }

    /// The DOM of `page` (a `file://` URL is made of the path; `fragment` is appended as the
    /// URL's `#...` part) once its scripts have run.
    ///
    /// On a loaded machine Chromium can dump a page before the viewer's first frame, which
    /// leaves no `data-rendered` mark: such a dump is retried (twice), and the last one is
    /// returned either way, for the caller's checks to judge.
    pub fn dump_dom(&self, page: &Path, fragment: &str) -> Result<String, String> {
        let mut tries = 0;
        loop {
            let dom = self.dump_dom_once(page, fragment)?;
            tries += 1;
            if dom.contains("data-rendered=") || tries == 3 {
                return Ok(dom);
            }
            eprintln!(
                "chromium dumped {} before its first render; trying again",
                page.display()
            );
        }
    }

    fn dump_dom_once(&self, page: &Path, fragment: &str) -> Result<String, String> {
        let _turn = one_at_a_time();
        let profile = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let mut cmd = self.command(profile.path());
        cmd.arg("--dump-dom").arg(file_url(page, fragment)?);
        let run = run_limited(cmd, PAGE_LIMIT)?;
        if !run.status.success() || run.stdout.trim().is_empty() {
            return Err(format!(
                "chromium --dump-dom failed ({}): {}",
                run.status,
                last_line(&run.stderr)
            ));
        }
        Ok(run.stdout)
    }

    /// Runs the DevTools driver `script` (a Node module: see `drive.mjs`) on `page` and
    /// returns what it prints; `Ok(None)` when Node cannot be run.
    pub fn drive(&self, script: &Path, page: &Path) -> Result<Option<String>, String> {
        self.drive_url(script, &file_url(page, "")?, &[])
    }

    /// [`drive`](Chromium::drive) on the page at `url`, passing `extra` arguments to the
    /// driver after the profile folder.
    pub fn drive_url(
        &self,
        script: &Path,
        url: &str,
        extra: &[&str],
    ) -> Result<Option<String>, String> {
        let _turn = one_at_a_time();
        let profile = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let mut cmd = Command::new("node");
        // Node 20 has its WebSocket client behind this flag; later versions accept it.
        cmd.arg("--experimental-websocket")
            .arg(script)
            .arg(&self.path)
            .arg(url)
            .arg(profile.path())
            .args(extra);
        let run = match run_limited(cmd, PAGE_LIMIT) {
            Ok(run) => run,
            Err(e) if e.contains("No such file") || e.contains("not found") => return Ok(None),
            Err(e) => return Err(e),
        };
        if !run.status.success() {
            return Err(format!(
                "the driver failed ({}): {}",
                run.status,
                last_line(&run.stderr)
            ));
        }
        Ok(Some(run.stdout))
    }

    /// Captures `page` as a PNG at `png`, in a window of `width`×`height`.
    pub fn screenshot(
        &self,
        page: &Path,
        png: &Path,
        width: u32,
        height: u32,
    ) -> Result<(), String> {
        let _turn = one_at_a_time();
        let profile = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let mut cmd = self.command(profile.path());
        cmd.arg(format!("--screenshot={}", png.display()))
            .arg(format!("--window-size={width},{height}"))
            .arg(file_url(page, "")?);
        let run = run_limited(cmd, PAGE_LIMIT)?;
        if !run.status.success() {
            return Err(format!(
                "chromium --screenshot failed ({}): {}",
                run.status,
                last_line(&run.stderr)
            ));
        }
        Ok(())
    }
}

/// A `file://` URL for an absolute path (percent-encoding what a URL cannot hold as is).
fn file_url(page: &Path, fragment: &str) -> Result<String, String> {
    let page = page
        .canonicalize()
        .map_err(|e| format!("no page at {}: {e}", page.display()))?;
    let text = page
        .to_str()
        .ok_or_else(|| format!("not a UTF-8 path: {}", page.display()))?;
    let mut url = String::from("file://");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    if !fragment.is_empty() {
        url.push('#');
        url.push_str(fragment);
    }
    Ok(url)
}
