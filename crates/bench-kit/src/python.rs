//! Python packages the tests run (official SDKs and servers, from PyPI), each set in its own
//! virtualenv under `target/`, installed on first use.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace's target directory (`CARGO_TARGET_DIR`, else `target/` at its root).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// A virtualenv of pinned packages the tests use.
#[derive(Clone, Copy, Debug)]
pub struct Venv {
    /// Its folder under `target/`.
    pub name: &'static str,
    /// The packages, pinned (`pkg==1.2.3`).
    pub packages: &'static [&'static str],
    /// A Python statement that succeeds once they are installed (`import openai`).
    pub import: &'static str,
    /// Who needs them, for the `SKIPPED:` line.
    pub what: &'static str,
}

/// Arize Phoenix, the OTLP backend `agent-otel`'s export test sends to.
pub const PHOENIX: Venv = Venv {
    name: "phoenix-venv",
    packages: &["arize-phoenix==20.26.1"],
    import: "import phoenix.server.main",
    what: "the Phoenix test",
};

/// The official clients `agent-serve` is tested with: OpenAI's and LangGraph's SDKs,
/// schemathesis and AG-UI's models.
pub const SERVE_CLIENTS: Venv = Venv {
    name: "serve-clients-venv",
    packages: &[
        "openai==3.63.0",
        "langgraph-sdk==0.4.14",
        "schemathesis==4.32.5",
        "ag-ui-protocol==1.0.0",
    ],
    import: "import openai, langgraph_sdk, schemathesis, ag_ui.core",
    what: "the client tests",
};

/// Every virtualenv the tests use (`cargo xtask test-all` installs them while it builds).
pub const ALL: &[Venv] = &[PHOENIX, SERVE_CLIENTS];

impl Venv {
    /// Its Python, installing the packages if missing; `None` (said in one `SKIPPED:` line)
    /// when they cannot be had.
    pub fn python(&self) -> Option<PathBuf> {
        venv(self.name, self.packages, self.import, self.what)
    }

    /// Installs it if missing, saying nothing; whether it is ready.
    pub fn prepare(&self) -> bool {
        install(self.name, self.packages, self.import).is_ok()
    }
}

/// The Python of the virtualenv `target/<name>` holding `packages` (pinned: `pkg==1.2.3`),
/// made and installed if `import` (a Python statement: `import openai`) fails in it.
/// `None` when that cannot be done (no `python3` with `venv`, no PyPI), said in one
/// `SKIPPED:` line naming `what` needs them.
///
/// Tests that run at once (in one binary or several) wait for one another's install: the
/// virtualenv is made under a lock file beside it.
pub fn venv(name: &str, packages: &[&str], import: &str, what: &str) -> Option<PathBuf> {
    match install(name, packages, import) {
        Ok(python) => Some(python),
        Err(Missing::Venv) => {
            eprintln!("SKIPPED: {what} needs python3 with venv to install {packages:?}");
            None
        }
        Err(Missing::Packages) => {
            eprintln!("SKIPPED: {what} could not install {packages:?} with pip");
            None
        }
    }
}

/// What could not be had.
enum Missing {
    /// `python3 -m venv` failed.
    Venv,
    /// pip failed.
    Packages,
}

// `File::lock` needs Rust 1.89, above the workspace's MSRV; test code only.
#[allow(clippy::incompatible_msrv)]
fn install(name: &str, packages: &[&str], import: &str) -> Result<PathBuf, Missing> {
    let target = target_dir();
    let venv = target.join(name);
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", import])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return Ok(python);
    }
    let _ = std::fs::create_dir_all(&target);
    let lock = File::create(target.join(format!("{name}.lock")));
    // Held until this returns; without a lock file the install still goes on, unguarded.
    let _held = lock.and_then(|file| file.lock().map(|()| file));
    if ready(&python) {
        return Ok(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        return Err(Missing::Venv);
    }
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status();
    if !installed.is_ok_and(|s| s.success()) || !ready(&python) {
        return Err(Missing::Packages);
    }
    Ok(python)
}
