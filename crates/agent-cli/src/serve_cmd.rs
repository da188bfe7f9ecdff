//! `agent serve SPEC…` and `agent keys new`: the specs' agents behind HTTP (a thin main
//! over `agent-serve`), and the API keys it accepts.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_serve::{Keys, Server, SpecAgent};

use crate::error::CliError;

/// What `agent serve` was asked for.
#[derive(Debug)]
pub struct ServeOptions {
    /// The specs.
    pub specs: Vec<PathBuf>,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The store.
    pub store: PathBuf,
    /// The keys file, if any.
    pub keys: Option<PathBuf>,
    /// How long running runs may go on after SIGTERM.
    pub grace: Duration,
    /// The origins whose pages may call the API from a browser.
    pub cors_origins: Vec<String>,
}

/// Serves the specs' agents until Ctrl-C or SIGTERM.
pub async fn serve(options: ServeOptions) -> Result<String, CliError> {
    if !options.listen.ip().is_loopback() && options.keys.is_none() {
        return Err(CliError::Invalid(format!(
            "--listen {}: not a loopback address, so --keys is needed (`agent keys new NAME --file FILE` makes one)",
            options.listen
        )));
    }
    let keys = match &options.keys {
        Some(path) => {
            let keys = Keys::read(path).map_err(|e| CliError::Invalid(e.to_string()))?;
            if keys.is_empty() {
                return Err(CliError::Invalid(format!(
                    "{}: holds no key, so every request would be refused",
                    path.display()
                )));
            }
            keys
        }
        None => Keys::default(),
    };
    // MCP servers' logs go beside the store.
    let logs = match options.store.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut builder = Server::builder().store(&options.store).keys(keys);
    for origin in &options.cors_origins {
        builder = builder.cors_origin(origin);
    }
    let mut names = Vec::new();
    for spec in &options.specs {
        let agent = tokio::select! {
            agent = SpecAgent::load(spec, &logs) => agent?,
            by = crate::run::stop_signal() => return Err(CliError::Interrupted(by)),
        };
        names.push(agent.name());
        builder = builder.agent(agent.name(), agent);
    }
    let server = builder
        .build()
        .await
        .map_err(|e| CliError::Invalid(format!("cannot serve: {e}")))?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| CliError::Environment(format!("cannot listen on {}: {e}", options.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Environment(format!("cannot listen on {}: {e}", options.listen)))?;
    let resumed = server.resumed();
    eprintln!(
        "serving {} on http://{address} (store {}{})",
        names.join(", "),
        options.store.display(),
        if resumed > 0 {
            format!("; {resumed} unfinished runs resumed")
        } else {
            String::new()
        }
    );
    server
        .serve(
            listener,
            async {
                let by = crate::run::stop_signal().await;
                eprintln!("{by}: no new requests; running runs get their grace to finish");
            },
            options.grace,
        )
        .await
        .map_err(|e| CliError::Environment(format!("the server stopped: {e}")))?;
    Ok(String::new())
}

/// `agent keys new NAME --file FILE`: a new key, its hash appended to `file`, the key
/// itself printed (once).
pub fn new_key(name: &str, file: &Path) -> Result<String, CliError> {
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(CliError::Invalid(
            "a key's name is one word (no spaces)".into(),
        ));
    }
    let (key, line) = Keys::generate(name);
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|source| CliError::Io {
            path: file.to_owned(),
            action: "writing",
            source,
        })?;
    writeln!(out, "{line}").map_err(|source| CliError::Io {
        path: file.to_owned(),
        action: "writing",
        source,
    })?;
    Ok(format!("{key}\n"))
}
