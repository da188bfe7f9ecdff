//! Checking a store: SQLite's integrity check plus every stored vector.

use std::fmt;
use std::time::Duration;

use agent_op::{MemoryError, MemoryId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};

use super::retry::{Backoff, DbError};
use super::{SqliteBackend, cache, storage};
use crate::common::format_id;

/// What [`SqliteBackend::integrity_check`] found: nothing, for a sound store.
///
/// Displays as `ok` when sound, else one problem per line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntegrityReport {
    /// The problems, SQLite's first.
    pub problems: Vec<IntegrityProblem>,
}

impl IntegrityReport {
    /// Whether the check found nothing wrong.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for IntegrityReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_sound() {
            return f.write_str("ok");
        }
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// One problem an integrity check found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IntegrityProblem {
    /// A line of SQLite's `PRAGMA integrity_check` (the file, its indexes, the FTS5 index).
    Sqlite(String),
    /// An entry's stored vector has the wrong size or non-finite values.
    UnusableEmbedding {
        /// The entry.
        id: MemoryId,
        /// What is wrong with it.
        why: String,
    },
    /// An entry has no stored vector.
    MissingEmbedding {
        /// The entry.
        id: MemoryId,
    },
}

impl fmt::Display for IntegrityProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntegrityProblem::Sqlite(line) => f.write_str(line),
            IntegrityProblem::UnusableEmbedding { id, why } => {
                write!(f, "the embedding of entry {id} is unusable: {why}")
            }
            IntegrityProblem::MissingEmbedding { id } => write!(f, "entry {id} has no embedding"),
        }
    }
}

impl SqliteBackend {
    /// Checks the file: runs `PRAGMA integrity_check` (which includes the FTS5 index) and
    /// checks every stored vector (the store's dimension, finite values) and that every entry
    /// has one. Returns what it found: SQLite's findings, then unusable and missing vectors
    /// ([`IntegrityReport::is_sound`] when there are none).
    ///
    /// The check runs on a new connection, closed afterwards: in SQLite 3.46 the FTS5 part of
    /// the check reuses the index structure a connection cached during an earlier
    /// transaction without first checking it is current, so on a pooled connection it can
    /// report "malformed inverted index" for a sound file another connection has written to
    /// since. (Queries are not affected: FTS5 revalidates its cache when a query starts.)
    pub async fn integrity_check(&self) -> Result<IntegrityReport, MemoryError> {
        let inner = &self.inner;
        let options = SqliteConnectOptions::new()
            .filename(&inner.path)
            .busy_timeout(Duration::from_secs(5));
        let mut backoff = Backoff::new(inner.lock_retry);
        let dimensions = inner.dimensions;
        let problems = loop {
            let attempt: Result<Vec<IntegrityProblem>, DbError> = async {
                let mut conn = options.connect().await?;
                let rows: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check")
                    .fetch_all(&mut conn)
                    .await?;
                let mut problems: Vec<IntegrityProblem> = rows
                    .into_iter()
                    .map(|(line,)| line)
                    .filter(|line| line != "ok")
                    .map(IntegrityProblem::Sqlite)
                    .collect();
                problems.extend(check_embeddings(&mut conn, dimensions).await?);
                conn.close().await?;
                Ok(problems)
            }
            .await;
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| storage(&inner.path, "checking integrity", e))?;
        };
        Ok(IntegrityReport { problems })
    }
}

/// Checks every stored vector (size, finite values) and that every entry has one; the
/// findings of [`SqliteBackend::integrity_check`] beyond SQLite's own.
pub(super) async fn check_embeddings(
    conn: &mut SqliteConnection,
    dimensions: usize,
) -> Result<Vec<IntegrityProblem>, DbError> {
    let mut findings = Vec::new();
    let mut rows = sqlx::query_as::<_, (i64, Vec<u8>)>(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings ORDER BY entry_id",
    )
    .fetch(&mut *conn);
    while let Some((id, blob)) = futures_util::TryStreamExt::try_next(&mut rows).await? {
        if let Err(why) = cache::decode(&blob, dimensions) {
            findings.push(IntegrityProblem::UnusableEmbedding {
                id: format_id(id),
                why,
            });
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
            .map(|(id,)| IntegrityProblem::MissingEmbedding { id: format_id(id) }),
    );
    Ok(findings)
}
