//! Prune: merges planned on a read snapshot, then every rule applied in one short write
//! transaction.

use std::sync::Arc;

use agent_op::{MemoryError, PrunePolicy, PruneReport};
use sqlx::sqlite::SqliteConnection;

use super::retry::{DbError, read_tx, write_tx};
use super::write::trim_change_log;
use super::{SqliteBackend, cache};
use crate::clock::{age_cutoff, now_micros};
use crate::common::cpu;
use crate::prune::{MergeGroup, plan_work, validate};

impl SqliteBackend {
    pub(super) async fn prune_inner(
        &self,
        policy: &PrunePolicy,
    ) -> Result<PruneReport, MemoryError> {
        validate(policy)?;
        let now = now_micros(self.inner.clock.as_ref());
        let cutoff = policy.max_age.and_then(|age| age_cutoff(now, age));
        // Merges are planned first, on a read snapshot and outside any write transaction
        // (planning is O(n²)); the write transaction below only applies them.
        let merges = match policy.merge_similarity {
            Some(threshold) => self.plan_merges(threshold, cutoff).await?,
            None => Vec::new(),
        };
        let report = write_tx!(self, "pruning", |conn| {
            let mut report = PruneReport::default();
            if let Some(cutoff) = cutoff {
                let done = sqlx::query("DELETE FROM entries WHERE accessed_at < ?1")
                    .bind(cutoff)
                    .execute(&mut *conn)
                    .await?;
                report.removed += done.rows_affected();
            }
            report.merged += apply_merges(&mut *conn, &merges).await?;
            if let Some(max) = policy.max_entries {
                let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM entries")
                    .fetch_one(&mut *conn)
                    .await?;
                let max = i64::try_from(max).unwrap_or(i64::MAX);
                if count > max {
                    let done = sqlx::query(
                        "DELETE FROM entries WHERE id IN (SELECT id FROM entries \
                         ORDER BY access_count, accessed_at, id LIMIT ?1)",
                    )
                    .bind(count - max)
                    .execute(&mut *conn)
                    .await?;
                    report.removed += done.rows_affected();
                }
            }
            trim_change_log(&mut *conn).await?;
            report
        });
        self.note_write();
        report
    }

    /// Plans the merge rule on a read snapshot: the entries the age rule (`cutoff`) keeps,
    /// with the vectors of this handle's copy (brought up to date in the same snapshot).
    /// Copying the vectors (O(n · dimensions)) and comparing them (O(n²)) both run on the
    /// blocking pool when large, holding the copy's lock only a chunk at a time while copying
    /// and no lock while comparing.
    pub(super) async fn plan_merges(
        &self,
        threshold: f32,
        cutoff: Option<i64>,
    ) -> Result<Vec<MergeGroup>, MemoryError> {
        let cache = &self.inner.cache;
        let entries = read_tx!(self, "planning merges", |conn| {
            cache::sync(&mut *conn, cache).await?;
            let rows: Vec<(i64, i64)> =
                // Oldest first: the order planning visits them in.
                sqlx::query_as(
                    "SELECT id, created_at FROM entries WHERE accessed_at >= ?1 \
                     ORDER BY created_at, id",
                )
                    .bind(cutoff.unwrap_or(i64::MIN))
                    .fetch_all(&mut *conn)
                    .await?;
            rows
        })?;
        // The copy is read after the transaction, and other tasks may sync it meanwhile;
        // it still holds the snapshot's vector of every entry listed that was not deleted
        // since. The copy was synced in the snapshot, so it had them all; later syncs only
        // add entries (not listed, so ignored), drop deleted ones (planning without them is
        // what applying the plan would do anyway: it skips merges of deleted entries), or
        // reload the same vectors — a stored vector never changes and ids are never reused.
        let cache = Arc::clone(cache);
        let work = plan_work(entries.len(), self.inner.dimensions);
        cpu(work, move || {
            cache::merge_set(&cache, &entries).plan(threshold)
        })
        .await
    }
}

/// Applies planned merges inside the prune transaction; returns how many entries were
/// absorbed. The plan was made on an earlier snapshot, so it is checked first: a pair whose
/// keeper or absorbed entry is gone (deleted, or merged by another handle meanwhile) is
/// skipped. A few set-based statements over a temporary table, whatever the number of
/// groups, keep the write lock short.
pub(super) async fn apply_merges(
    conn: &mut SqliteConnection,
    groups: &[MergeGroup],
) -> Result<u64, DbError> {
    let pairs: Vec<[i64; 2]> = groups
        .iter()
        .flat_map(|g| g.absorbed.iter().map(move |a| [g.keeper, *a]))
        .collect();
    if pairs.is_empty() {
        return Ok(0);
    }
    let pairs = serde_json::to_string(&pairs).map_err(DbError::Encode)?;
    for sql in [
        "CREATE TEMP TABLE IF NOT EXISTS prune_merges \
             (absorbed INTEGER PRIMARY KEY, keeper INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS temp.prune_merges_by_keeper ON prune_merges (keeper)",
        "DELETE FROM temp.prune_merges",
    ] {
        sqlx::query(sql).execute(&mut *conn).await?;
    }
    sqlx::query(
        "INSERT INTO temp.prune_merges (keeper, absorbed) \
         SELECT value ->> 0, value ->> 1 FROM json_each(?1)",
    )
    .bind(pairs)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "DELETE FROM temp.prune_merges \
         WHERE keeper NOT IN (SELECT id FROM main.entries) \
            OR absorbed NOT IN (SELECT id FROM main.entries)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE main.entries SET \
             access_count = access_count + (SELECT coalesce(sum(e.access_count), 0) \
                 FROM temp.prune_merges m JOIN main.entries e ON e.id = m.absorbed \
                 WHERE m.keeper = entries.id), \
             accessed_at = max(accessed_at, (SELECT coalesce(max(e.accessed_at), 0) \
                 FROM temp.prune_merges m JOIN main.entries e ON e.id = m.absorbed \
                 WHERE m.keeper = entries.id)) \
         WHERE id IN (SELECT keeper FROM temp.prune_merges)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT OR IGNORE INTO main.entry_tags (entry_id, tag) \
         SELECT m.keeper, t.tag FROM temp.prune_merges m \
         JOIN main.entry_tags t ON t.entry_id = m.absorbed",
    )
    .execute(&mut *conn)
    .await?;
    let done = sqlx::query(
        "DELETE FROM main.entries WHERE id IN (SELECT absorbed FROM temp.prune_merges)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM temp.prune_merges")
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}
