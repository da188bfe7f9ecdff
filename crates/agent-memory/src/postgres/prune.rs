//! Prune: merges planned from a snapshot with no lock held, then every rule applied in one
//! short transaction.

use agent_op::{MemoryError, PrunePolicy, PruneReport};
use futures_util::TryStreamExt;
use sqlx::PgConnection;

use super::PostgresBackend;
use super::retry::{DbError, statement, transaction};
use crate::clock::{age_cutoff, now_micros};
use crate::common::cpu;
use crate::prune::{MergeGroup, MergeSet, validate};
use crate::vector::unit;

impl PostgresBackend {
    pub(super) async fn prune_inner(
        &self,
        policy: &PrunePolicy,
    ) -> Result<PruneReport, MemoryError> {
        validate(policy)?;
        let now = now_micros(self.inner.clock.as_ref());
        let cutoff = policy.max_age.and_then(|age| age_cutoff(now, age));
        // Merges are planned first, from one snapshot and outside any transaction that
        // writes (planning is O(n²)); the transaction below only applies them.
        let merges = match policy.merge_similarity {
            Some(threshold) => self.plan_merges(threshold, cutoff).await?,
            None => Vec::new(),
        };
        let (keepers, absorbed): (Vec<i64>, Vec<i64>) = merges
            .iter()
            .flat_map(|g| g.absorbed.iter().map(move |a| (g.keeper, *a)))
            .unzip();
        let max_entries = policy
            .max_entries
            .map(|max| i64::try_from(max).unwrap_or(i64::MAX));
        transaction!(self, "pruning", |conn| {
            // Blocks other writers (not readers) until commit: the rules see a store that
            // does not change under them, as on SQLite. Prunes exclude each other too.
            sqlx::query("LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut *conn)
                .await?;
            let mut report = PruneReport::default();
            if let Some(cutoff) = cutoff {
                let done = sqlx::query("DELETE FROM entries WHERE accessed_at < $1")
                    .bind(cutoff)
                    .execute(&mut *conn)
                    .await?;
                report.removed += done.rows_affected();
            }
            report.merged += apply_merges(&mut *conn, &keepers, &absorbed).await?;
            if let Some(max) = max_entries {
                let done = sqlx::query(
                    "DELETE FROM entries WHERE id IN (SELECT id FROM entries \
                     ORDER BY access_count, accessed_at, id \
                     LIMIT greatest((SELECT count(*) FROM entries) - $1, 0))",
                )
                .bind(max)
                .execute(&mut *conn)
                .await?;
                report.removed += done.rows_affected();
            }
            if report.removed + report.merged > 0 {
                // Keyword counts of words no entry holds any more: their striped rows sum to
                // zero and would stay forever (every word ever stored leaves some). Other
                // writers wait on the lock above, so none is adding to them meanwhile.
                sqlx::query(
                    "DELETE FROM keyword_docs d USING ( \
                         SELECT lexeme FROM keyword_docs GROUP BY lexeme HAVING sum(docs) = 0) z \
                     WHERE d.lexeme = z.lexeme",
                )
                .execute(&mut *conn)
                .await?;
            }
            report
        })
    }

    /// Plans the merge rule from one snapshot: the entries the age rule (`cutoff`) keeps,
    /// oldest first, with their vectors, streamed into a [`MergeSet`] (unit vectors, as
    /// stored); then compared on the blocking pool when large. No lock is held: other
    /// handles and processes keep writing while this plans.
    async fn plan_merges(
        &self,
        threshold: f32,
        cutoff: Option<i64>,
    ) -> Result<Vec<MergeGroup>, MemoryError> {
        let dimensions = self.inner.dimensions;
        let set = statement!(self, "planning merges", |conn| {
            let (count,): (i64,) =
                sqlx::query_as("SELECT count(*) FROM entries WHERE accessed_at >= $1")
                    .bind(cutoff.unwrap_or(i64::MIN))
                    .fetch_one(&mut *conn)
                    .await?;
            let mut set = MergeSet::with_capacity(dimensions, usize::try_from(count).unwrap_or(0));
            let mut rows = sqlx::query_as::<_, (i64, i64, Vec<f32>)>(
                "SELECT e.id, e.created_at, v.embedding::real[] FROM entries e \
                 JOIN embeddings v ON v.entry_id = e.id WHERE e.accessed_at >= $1 \
                 ORDER BY e.created_at, e.id",
            )
            .bind(cutoff.unwrap_or(i64::MIN))
            .fetch(&mut *conn);
            while let Some((id, created, vector)) = rows.try_next().await? {
                // Stored unit-length already; `unit` only guards against rounding.
                set.push(id, created, &unit(&vector));
            }
            set
        })?;
        let work = set.work();
        cpu(work, move || set.plan(threshold)).await
    }
}

/// Applies planned merges (`keepers[i]` absorbs `absorbed[i]`) inside the prune
/// transaction; returns how many entries were absorbed. The plan was made from an earlier
/// snapshot, so a pair whose keeper or absorbed entry is gone (deleted, or merged by another
/// handle meanwhile) is skipped. One statement, whatever the number of pairs: the keepers
/// get the absorbed entries' access counts added, the later access time and their tags;
/// then the absorbed entries are deleted (their tags and vectors with them).
async fn apply_merges(
    conn: &mut PgConnection,
    keepers: &[i64],
    absorbed: &[i64],
) -> Result<u64, DbError> {
    if keepers.is_empty() {
        return Ok(0);
    }
    let done = sqlx::query(
        "WITH pairs AS ( \
             SELECT p.keeper, p.absorbed FROM unnest($1::bigint[], $2::bigint[]) AS p(keeper, absorbed) \
             WHERE EXISTS (SELECT 1 FROM entries k WHERE k.id = p.keeper) \
               AND EXISTS (SELECT 1 FROM entries a WHERE a.id = p.absorbed) \
         ), sums AS ( \
             SELECT p.keeper, sum(a.access_count)::bigint AS count, max(a.accessed_at) AS accessed \
             FROM pairs p JOIN entries a ON a.id = p.absorbed GROUP BY p.keeper \
         ), kept AS ( \
             UPDATE entries k SET access_count = k.access_count + s.count, \
                 accessed_at = greatest(k.accessed_at, s.accessed) \
             FROM sums s WHERE k.id = s.keeper \
         ), tags AS ( \
             INSERT INTO entry_tags (entry_id, tag) \
             SELECT DISTINCT p.keeper, t.tag FROM pairs p JOIN entry_tags t ON t.entry_id = p.absorbed \
             ON CONFLICT DO NOTHING \
         ) \
         DELETE FROM entries WHERE id IN (SELECT absorbed FROM pairs)",
    )
    .bind(keepers)
    .bind(absorbed)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}
