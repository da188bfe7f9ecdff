//! `agent memory …`: the SQLite memory from the shell.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_memory::SqliteBackend;
use agent_op::{MemoryBackend, MemoryError, MemoryId, NewMemory, PrunePolicy, Tag};
use serde_json::json;

use crate::error::CliError;

/// Opens the database at `path`. Read commands (`create == false`) never create a file: a
/// missing one is an error naming it.
pub async fn open(path: &Path, create: bool) -> Result<SqliteBackend, CliError> {
    if !create && !path.exists() {
        return Err(CliError::Invalid(format!(
            "{}: no such memory database (`agent memory add` creates one)",
            path.display()
        )));
    }
    SqliteBackend::builder(path)
        .create_if_missing(create)
        .open()
        .await
        .map_err(|source| failed(path, "opening the memory database", source))
}

fn failed(path: &Path, action: &'static str, source: MemoryError) -> CliError {
    CliError::Memory {
        path: path.to_owned(),
        action,
        source,
    }
}

/// `add`: stores one memory; prints its id.
pub async fn add(
    db: &Path,
    content: String,
    context: String,
    tags: Vec<String>,
    as_json: bool,
) -> Result<String, CliError> {
    let memory = open(db, true).await?;
    let id = memory
        .store(NewMemory {
            content,
            context,
            tags: tags.into_iter().map(Tag).collect(),
        })
        .await
        .map_err(|e| failed(db, "storing the memory", e))?;
    memory.close().await;
    Ok(if as_json {
        format!("{}\n", json!({ "id": id }))
    } else {
        format!("{id}\n")
    })
}

/// `search`: the best `limit` memories for `query` with their scores. Reading does not count
/// as a recall (the entries' access counts stay as they were).
pub async fn search(
    db: &Path,
    query: &str,
    limit: usize,
    as_json: bool,
) -> Result<String, CliError> {
    let memory = open(db, false).await?;
    let hits = memory
        .search_candidates(query, limit)
        .await
        .map_err(|e| failed(db, "searching", e))?;
    memory.close().await;
    let mut out = String::new();
    for candidate in hits {
        let hit = candidate.hit;
        if as_json {
            let line = json!({
                "id": hit.entry.id,
                "score": hit.score,
                "similarity": candidate.similarity,
                "content": hit.entry.content,
                "tags": hit.entry.tags,
            });
            let _ = writeln!(out, "{line}");
        } else {
            let _ = writeln!(
                out,
                "{:>7.4}  {}  {}",
                hit.score,
                hit.entry.id,
                one_line(&hit.entry.content)
            );
        }
    }
    Ok(out)
}

fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(99).collect::<String>())
    } else {
        line
    }
}

/// `list`: the newest `limit` memories.
pub async fn list(db: &Path, limit: usize, as_json: bool) -> Result<String, CliError> {
    let memory = open(db, false).await?;
    let entries = memory
        .recent(limit)
        .await
        .map_err(|e| failed(db, "listing", e))?;
    memory.close().await;
    let mut out = String::new();
    for entry in entries {
        if as_json {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(&entry).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
            );
        } else {
            let tags: Vec<&str> = entry.tags.iter().map(|t| t.0.as_str()).collect();
            let _ = writeln!(
                out,
                "{}  {}  [{}]  {}",
                entry.id,
                entry.created_at.format("%Y-%m-%d %H:%M:%S"),
                tags.join(", "),
                one_line(&entry.content)
            );
        }
    }
    Ok(out)
}

/// `forget`: deletes one memory; an unknown id is an error.
pub async fn forget(db: &Path, id: &str, as_json: bool) -> Result<String, CliError> {
    let memory = open(db, false).await?;
    let existed = memory
        .delete(&MemoryId(id.to_owned()))
        .await
        .map_err(|e| failed(db, "deleting", e))?;
    memory.close().await;
    if !existed {
        return Err(CliError::Invalid(format!(
            "{}: no memory with id `{id}`",
            db.display()
        )));
    }
    Ok(if as_json {
        format!("{}\n", json!({ "deleted": id }))
    } else {
        format!("deleted {id}\n")
    })
}

/// `prune`: applies a policy; prints what it removed.
pub async fn prune(
    db: &Path,
    max_entries: Option<u64>,
    max_age_days: Option<u64>,
    as_json: bool,
) -> Result<String, CliError> {
    if max_entries.is_none() && max_age_days.is_none() {
        return Err(CliError::Invalid(
            "prune needs --max-entries or --max-age-days".into(),
        ));
    }
    let memory = open(db, false).await?;
    let mut policy = PrunePolicy::new();
    if let Some(n) = max_entries {
        policy = policy.max_entries(n);
    }
    if let Some(days) = max_age_days {
        policy = policy.max_age(Duration::from_secs(days.saturating_mul(86_400)));
    }
    let report = memory
        .prune(&policy)
        .await
        .map_err(|e| failed(db, "pruning", e))?;
    memory.close().await;
    Ok(if as_json {
        format!(
            "{}\n",
            json!({ "removed": report.removed, "merged": report.merged })
        )
    } else {
        format!("removed {}, merged {}\n", report.removed, report.merged)
    })
}

/// What `stats` reports.
#[derive(Debug, serde::Serialize)]
pub struct Stats {
    /// The database file.
    pub path: PathBuf,
    /// Entries stored.
    pub entries: u64,
    /// The embedder's model.
    pub embedder: String,
    /// Dimensions of the embeddings.
    pub dimensions: usize,
    /// Bytes on disk: the file and its write-ahead log.
    pub bytes: u64,
}

/// `stats`: counts, dimensions, sizes.
pub async fn stats(db: &Path, as_json: bool) -> Result<String, CliError> {
    let memory = open(db, false).await?;
    let entries = memory
        .count()
        .await
        .map_err(|e| failed(db, "counting", e))?;
    let embedder = memory.embedder().clone();
    memory.close().await;
    let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let stats = Stats {
        path: db.to_owned(),
        entries,
        embedder: embedder.model().to_owned(),
        dimensions: embedder.dimensions(),
        bytes: size(db.to_owned()) + size(PathBuf::from(wal)),
    };
    Ok(if as_json {
        format!("{}\n", json!(stats))
    } else {
        format!(
            "{}\n  entries     {}\n  embedder    {} ({} dimensions)\n  size        {:.1} KiB\n",
            stats.path.display(),
            stats.entries,
            stats.embedder,
            stats.dimensions,
            stats.bytes as f64 / 1024.0
        )
    })
}
