//! Checking a store: SQLite's integrity check plus every stored vector.

use std::time::Duration;

use agent_op::MemoryError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};

use super::retry::{Backoff, DbError};
use super::{SqliteBackend, cache, storage};

impl SqliteBackend {
    /// Checks the file: runs `PRAGMA integrity_check` (which includes the FTS5 index) and
    /// checks every stored vector (the store's dimension, finite values) and that every entry
    /// has one. Returns `"ok"` for a sound store, else the findings, one per line: SQLite's,
    /// then `the embedding of entry N is unusable: …` and `entry N has no embedding`.
    ///
    /// The check runs on a new connection, closed afterwards: in SQLite 3.46 the FTS5 part of
    /// the check reuses the index structure a connection cached during an earlier
    /// transaction without first checking it is current, so on a pooled connection it can
    /// report "malformed inverted index" for a sound file another connection has written to
    /// since. (Queries are not affected: FTS5 revalidates its cache when a query starts.)
    pub async fn integrity_check(&self) -> Result<String, MemoryError> {
        let inner = &self.inner;
        let options = SqliteConnectOptions::new()
            .filename(&inner.path)
            .busy_timeout(Duration::from_secs(5));
        let mut backoff = Backoff::new(inner.lock_retry);
        let dimensions = inner.dimensions;
        let lines = loop {
            let attempt: Result<Vec<String>, DbError> = async {
                let mut conn = options.connect().await?;
                let rows: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check")
                    .fetch_all(&mut conn)
                    .await?;
                let mut lines: Vec<String> = rows
                    .into_iter()
                    .map(|(line,)| line)
                    .filter(|line| line != "ok")
                    .collect();
                lines.extend(check_embeddings(&mut conn, dimensions).await?);
                conn.close().await?;
                Ok(lines)
            }
            .await;
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| storage(&inner.path, "checking integrity", e))?;
        };
        if lines.is_empty() {
            return Ok("ok".to_owned());
        }
        Ok(lines.join("\n"))
    }
}

/// Checks every stored vector (size, finite values) and that every entry has one; the
/// findings of [`SqliteBackend::integrity_check`] beyond SQLite's own.
pub(super) async fn check_embeddings(
    conn: &mut SqliteConnection,
    dimensions: usize,
) -> Result<Vec<String>, DbError> {
    let mut findings = Vec::new();
    let mut rows = sqlx::query_as::<_, (i64, Vec<u8>)>(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings ORDER BY entry_id",
    )
    .fetch(&mut *conn);
    while let Some((id, blob)) = futures_util::TryStreamExt::try_next(&mut rows).await? {
        if let Err(why) = cache::decode(&blob, dimensions) {
            findings.push(format!("the embedding of entry {id} is unusable: {why}"));
        }
    }
    drop(rows);
    let missing: Vec<(i64,)> = sqlx::query_as(
        "SELECT id FROM entries WHERE id NOT IN (SELECT entry_id FROM embeddings) ORDER BY id",
    )
    .fetch_all(&mut *conn)
    .await?;
    findings.extend(
        missing
            .into_iter()
            .map(|(id,)| format!("entry {id} has no embedding")),
    );
    Ok(findings)
}
