//! `agent journal show | diff`: the journals of durable runs, from the shell.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use agent_journal::{Entry, Journal, JsonlJournal, SqliteJournal};
use agent_op::journal::{Difference, EntryKind, compare};
use agent_op::preview;

use crate::error::CliError;

/// The entries of the journal at `path`: a SQLite database (by its header) or a JSON Lines
/// file. Nothing is written; a journal a running process holds is refused (exit code 4).
pub async fn read(path: &Path) -> Result<Vec<Entry>, CliError> {
    let journal = |source| CliError::Journal {
        path: path.to_path_buf(),
        source,
    };
    if is_sqlite(path)? {
        // Opening may create the database's `-wal` and `-shm` files; a database refused as
        // damaged must not be left with them (a locked one's belong to its holder).
        let sidecars: Vec<std::path::PathBuf> = ["-wal", "-shm"]
            .iter()
            .map(|suffix| {
                let mut name = path.as_os_str().to_owned();
                name.push(suffix);
                std::path::PathBuf::from(name)
            })
            .filter(|p| !p.exists())
            .collect();
        let read = async {
            let db = SqliteJournal::open(path).await?;
            let entries = db.entries().await;
            db.close().await?;
            entries
        }
        .await;
        match read {
            Ok(entries) => Ok(entries),
            Err(error) => {
                if !matches!(error, agent_op::journal::JournalError::Locked { .. }) {
                    for sidecar in &sidecars {
                        let _ = std::fs::remove_file(sidecar);
                    }
                }
                Err(journal(error))
            }
        }
    } else {
        JsonlJournal::read(path).map_err(journal)
    }
}

/// Whether the file at `path` is a SQLite database (by its header).
fn is_sqlite(path: &Path) -> Result<bool, CliError> {
    let mut header = [0u8; 16];
    let mut file = std::fs::File::open(path).map_err(|source| CliError::Io {
        path: path.to_path_buf(),
        action: "reading",
        source,
    })?;
    Ok(file.read_exact(&mut header).is_ok() && &header == b"SQLite format 3\0")
}

/// Opens the journal at `path` for a run: an existing file by what it holds (a SQLite
/// database, else JSON Lines), a new one by its name (`.jsonl`: JSON Lines, else SQLite).
/// With `existing`, a missing file is an error rather than a new journal.
pub(crate) async fn open_for_run(
    path: &Path,
    existing: bool,
) -> Result<Arc<dyn Journal>, CliError> {
    let journal = |source| CliError::Journal {
        path: path.to_path_buf(),
        source,
    };
    let sqlite = if path.exists() {
        is_sqlite(path)?
    } else if existing {
        return Err(CliError::Invalid(format!(
            "{}: no journal there (`agent run --journal FILE` makes one)",
            path.display()
        )));
    } else {
        path.extension().is_none_or(|e| e != "jsonl")
    };
    if sqlite {
        Ok(Arc::new(SqliteJournal::open(path).await.map_err(journal)?))
    } else {
        Ok(Arc::new(
            JsonlJournal::open(path, agent_journal::Fsync::EveryEntry).map_err(journal)?,
        ))
    }
}

/// `agent journal show`.
pub async fn show(path: &Path, json: bool) -> Result<String, CliError> {
    let entries = read(path).await?;
    let mut out = String::new();
    if !json {
        // Which run this journal is of, from its run entry.
        if let Some(run) = entries.iter().find(|e| e.kind == EntryKind::Run) {
            let run = parsed(&run.result);
            let _ = writeln!(
                out,
                "run {} started {}",
                run["trace_id"].as_str().unwrap_or("?"),
                run["started_at"].as_str().unwrap_or("?")
            );
        }
        let [n, branch, effect, kind, fingerprint, request, result] = [
            "#",
            "branch",
            "effect",
            "kind",
            "fingerprint",
            "request",
            "result",
        ];
        let _ = writeln!(
            out,
            "{n:>6}  {branch:<12} {effect:>6}  {kind:<10} {fingerprint:<15}  {request:<48}  {result}"
        );
    }
    for (position, e) in entries.iter().enumerate() {
        if json {
            let _ = writeln!(out, "{}", serde_json::json!(e));
            continue;
        }
        let branch = if e.key.branch.is_empty() {
            "run"
        } else {
            &e.key.branch
        };
        let short = e.fingerprint.get(..15).unwrap_or(&e.fingerprint);
        let _ = writeln!(
            out,
            "{position:>6}  {branch:<12} {:>6}  {:<10} {short:<15}  {:<48}  {}",
            e.key.seq,
            e.kind.as_str(),
            describe(&parsed(&e.request)),
            describe_result(&parsed(&e.result))
        );
    }
    if !json {
        let _ = match entries.len() {
            1 => writeln!(out, "1 entry"),
            n => writeln!(out, "{n} entries"),
        };
    }
    Ok(out)
}

/// A request or result the journal holds as JSON text, as a value to describe (`null` in
/// the rare case it is nested too deep to parse).
fn parsed(json: &serde_json::value::RawValue) -> serde_json::Value {
    serde_json::from_str(json.get()).unwrap_or_default()
}

/// A request in one line: a model call as its model and last message, anything else as
/// its JSON.
fn describe(request: &serde_json::Value) -> String {
    let last = request["messages"].as_array().and_then(|m| m.last());
    match (request["model"].as_str(), last) {
        (Some(model), Some(message)) => preview(
            &format!(
                "{model} · {}: {}",
                message["role"].as_str().unwrap_or("?"),
                message["text"].as_str().unwrap_or("")
            ),
            48,
        ),
        _ if request.is_null() => String::new(),
        _ => preview(&request.to_string(), 48),
    }
}

/// A result in one line: a reply's text, a tool's output, an error as such.
fn describe_result(result: &serde_json::Value) -> String {
    let text = match result {
        serde_json::Value::Object(o) if o.len() == 1 && o.contains_key("Ok") => match &o["Ok"] {
            // A model reply: its text, or the tools it asked for.
            serde_json::Value::Object(r) if r.contains_key("finish_reason") => {
                match r.get("content").and_then(|c| c.as_str()) {
                    Some(text) if !text.is_empty() => text.to_owned(),
                    _ => format!(
                        "asks for tools: {}",
                        r.get("tool_calls").map_or(String::new(), |c| c.to_string())
                    ),
                }
            }
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        },
        serde_json::Value::Object(o) if o.len() == 1 && o.contains_key("Err") => {
            format!("error: {}", o["Err"])
        }
        other => other.to_string(),
    };
    preview(&text.replace('\n', " "), 80)
}

/// `agent journal diff`: the text (or JSON) and the exit code (1 if they differ).
pub async fn diff(left: &Path, right: &Path, json: bool) -> Result<(String, u8), CliError> {
    let difference = compare(&read(left).await?, &read(right).await?);
    let code = u8::from(difference.is_some());
    if json {
        let value = difference.as_ref().map(|d| {
            let side = |r: &Option<agent_op::journal::Recorded>| {
                r.as_ref().map(|r| {
                    serde_json::json!({"kind": r.kind, "fingerprint": r.fingerprint, "request": r.summary})
                })
            };
            serde_json::json!({
                "branch": d.key.branch, "effect": d.key.seq,
                "left": side(&d.left), "right": side(&d.right), "diff": d.diff(),
            })
        });
        return Ok((format!("{}\n", serde_json::json!(value)), code));
    }
    Ok((diff_text(difference.as_ref(), left, right), code))
}

fn diff_text(difference: Option<&Difference>, left: &Path, right: &Path) -> String {
    let Some(d) = difference else {
        return "the journals ask the same questions everywhere\n".to_owned();
    };
    let side = |r: &Option<agent_op::journal::Recorded>| match r {
        Some(r) => format!("{} {}", r.kind.as_str(), r.fingerprint),
        None => "(nothing)".to_owned(),
    };
    let mut out = format!(
        "first difference at {}\n  {}: {}\n  {}: {}\n",
        d.key,
        left.display(),
        side(&d.left),
        right.display(),
        side(&d.right)
    );
    for line in d.diff().lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}
