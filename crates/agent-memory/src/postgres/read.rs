//! Listings and lookups: recent, by tag, by id, the count. Each is one statement, so each
//! sees one snapshot (entries with their tags).

use agent_op::{MemoryEntry, MemoryError, MemoryId, Tag};

use super::retry::statement;
use super::{ENTRY_COLUMNS, EntryRow, PostgresBackend, entries};
use crate::common::{normalize_tags, parse_id};

impl PostgresBackend {
    pub(super) async fn recent_inner(&self, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e \
             ORDER BY e.created_at DESC, e.id DESC LIMIT $1"
        );
        let rows = statement!(self, "listing recent memories", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(&sql)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?;
            rows
        })?;
        Ok(entries(rows))
    }

    pub(super) async fn by_tags_inner(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<MemoryEntry>, MemoryError> {
        let wanted: Vec<String> = normalize_tags(tags.to_vec())
            .into_iter()
            .map(|t| t.0)
            .collect();
        if wanted.is_empty() {
            return self.recent_inner(usize::MAX).await;
        }
        if wanted.iter().any(|t| t.contains('\0')) {
            // No stored tag holds a NUL (PostgreSQL text cannot), and none can be sent.
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e \
             WHERE e.id IN (SELECT entry_id FROM entry_tags WHERE tag = ANY($1) \
                            GROUP BY entry_id HAVING count(*) = cardinality($1)) \
             ORDER BY e.created_at DESC, e.id DESC"
        );
        let rows = statement!(self, "listing memories by tag", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(&sql)
                .bind(&wanted)
                .fetch_all(&mut *conn)
                .await?;
            rows
        })?;
        Ok(entries(rows))
    }

    pub(super) async fn get_inner(
        &self,
        id: &MemoryId,
    ) -> Result<Option<MemoryEntry>, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(None);
        };
        let sql = format!("SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.id = $1");
        let rows = statement!(self, "reading a memory", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(&sql).bind(n).fetch_all(&mut *conn).await?;
            rows
        })?;
        Ok(entries(rows).into_iter().next())
    }

    pub(super) async fn count_inner(&self) -> Result<u64, MemoryError> {
        let count = statement!(self, "counting memories", |conn| {
            let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM entries")
                .fetch_one(&mut *conn)
                .await?;
            count
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}
