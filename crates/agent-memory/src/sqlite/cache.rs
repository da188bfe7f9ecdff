//! The in-memory copy of the database's vectors, and how it follows the database.
//!
//! Triggers append every vector insert and entry delete to the `changes` table. A cache
//! remembers the last `seq` it applied (its cursor); [`sync`] reads the rows after it (and
//! the current vectors of the entries they name) in one read transaction and applies them.
//! If prune trimmed the log past the cursor (`store_meta.changes_floor` above it), the cache
//! reloads every vector instead. Writes by any handle or process are thus seen by the next
//! search of every handle.
//!
//! A stored vector that cannot be used (wrong size, NaN or infinite values: damage from
//! outside, since this crate never writes one) is left out of the copy and remembered in
//! [`VectorCache::corrupt`]; the entry stays readable, searchable by keyword and prunable,
//! and `integrity_check` reports it. One bad row never makes the store unopenable.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use sqlx::SqliteConnection;

use super::open::META_CHANGES_FLOOR;
use super::retry::DbError;
use crate::ann::{AnnConfig, IndexStatus};
use crate::prune::{COPY_CHUNK, MergeSet};
use crate::vector::{Hit, Restriction, VectorIndex, cosine, from_blob};

/// Unit vectors of every entry, as of change-log position `cursor`.
pub(crate) struct VectorCache {
    index: VectorIndex,
    cursor: i64,
    dimensions: usize,
    /// Entries whose stored vector is unusable (left out of `index`).
    corrupt: BTreeSet<i64>,
    /// How `index`'s approximate part is built.
    ann: AnnConfig,
    /// Changes applied since the copy was last saved beside the database (or loaded).
    pub(crate) unsaved: u64,
}

impl VectorCache {
    pub(crate) fn new(dimensions: usize, ann: AnnConfig) -> VectorCache {
        VectorCache {
            index: VectorIndex::with_ann(dimensions, ann.clone()),
            cursor: -1,
            dimensions,
            corrupt: BTreeSet::new(),
            ann,
            unsaved: 0,
        }
    }

    /// A copy holding `index` as of change-log position `cursor`, as saved beside the
    /// database.
    pub(crate) fn restored(
        index: VectorIndex,
        cursor: i64,
        corrupt: BTreeSet<i64>,
        ann: AnnConfig,
    ) -> VectorCache {
        VectorCache {
            dimensions: index.dimensions(),
            index,
            cursor,
            corrupt,
            ann,
            unsaved: 0,
        }
    }

    /// The change-log position the copy is at (-1: nothing loaded).
    pub(crate) fn cursor(&self) -> i64 {
        self.cursor
    }

    pub(crate) fn index(&self) -> &VectorIndex {
        &self.index
    }

    pub(crate) fn corrupt_set(&self) -> &BTreeSet<i64> {
        &self.corrupt
    }

    pub(crate) fn ann_config(&self) -> &AnnConfig {
        &self.ann
    }

    /// The vector data a search touches (see [`VectorIndex::search_cost`]).
    pub(crate) fn search_cost(&self, exact: bool) -> usize {
        self.index.search_cost(exact)
    }

    /// How far the approximate index of the copy has got.
    pub(crate) fn status(&self) -> IndexStatus {
        self.index.status()
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn search_where(
        &self,
        query: &[f32],
        k: usize,
        restriction: &Restriction<'_>,
        exact: bool,
    ) -> Vec<Hit> {
        self.index.search_where(query, k, restriction, exact)
    }

    /// The cosine similarity of the unit vector `query` and `id`'s vector; `None` if the
    /// copy has no (usable) vector for `id`.
    pub(crate) fn similarity(&self, query: &[f32], id: i64) -> Option<f32> {
        Some(cosine(query, self.index.get(id)?))
    }

    /// Entries whose stored vector is unusable, ascending.
    pub(crate) fn corrupt(&self) -> Vec<i64> {
        self.corrupt.iter().copied().collect()
    }
}

/// A copy of the vectors `cache` holds for `entries` (id, creation time), in that order, for
/// merge planning. Takes the read lock for [`COPY_CHUNK`] entries at a time, so a sync
/// waiting to update the copy is held up for one chunk, not the whole copy; an entry removed
/// between chunks (deleted) is left out. Run it off the async executor when large: it is
/// O(entries × dimensions).
pub(crate) fn merge_set(cache: &RwLock<VectorCache>, entries: &[(i64, i64)]) -> MergeSet {
    let dimensions = read_cache(cache).dimensions;
    let mut set = MergeSet::with_capacity(dimensions, entries.len());
    for chunk in entries.chunks(COPY_CHUNK) {
        let copy = read_cache(cache);
        for (id, created_at) in chunk {
            if let Some(vector) = copy.index.get(*id) {
                set.push(*id, *created_at, vector);
            }
        }
    }
    set
}

pub(crate) fn read_cache(cache: &RwLock<VectorCache>) -> RwLockReadGuard<'_, VectorCache> {
    // Updates hold the lock only for in-memory edits that cannot panic halfway.
    cache.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_cache(cache: &RwLock<VectorCache>) -> RwLockWriteGuard<'_, VectorCache> {
    cache.write().unwrap_or_else(PoisonError::into_inner)
}

/// Decodes a stored vector: `dimensions` finite f32 values, or a description of what is
/// wrong with it.
pub(crate) fn decode(blob: &[u8], dimensions: usize) -> Result<Vec<f32>, String> {
    let vector = from_blob(blob, dimensions).ok_or_else(|| {
        format!(
            "{} bytes, expected {} ({dimensions} f32 values)",
            blob.len(),
            dimensions.saturating_mul(4)
        )
    })?;
    if vector.iter().any(|x| !x.is_finite()) {
        return Err("NaN or infinite values".to_owned());
    }
    Ok(vector)
}

/// Whether a copy at change-log position `cursor` is current: the log has no row after it
/// and its floor has not passed it, so [`sync`] would change nothing. One statement (its own
/// snapshot) instead of a transaction and two queries: most searches follow no write.
///
/// `sqlite_sequence` holds the highest `seq` the log ever gave out (the column is
/// `AUTOINCREMENT`): every change a commit adds raises it, and trimming old rows does not
/// lower it. (An earlier version read the wal-index header from `<file>-shm` instead, with
/// no statement at all; but opening and closing a file SQLite holds drops every POSIX lock
/// this process has on it, SQLite's included, and another process then reinitialized the
/// shared memory under this one's mapping: SIGBUS.)
pub(crate) async fn unchanged_since(
    conn: &mut SqliteConnection,
    cursor: i64,
) -> Result<bool, DbError> {
    let (last, floor): (Option<i64>, Option<String>) = sqlx::query_as(
        "SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'changes'), \
                (SELECT value FROM store_meta WHERE key = ?1)",
    )
    .bind(META_CHANGES_FLOOR)
    .fetch_one(&mut *conn)
    .await?;
    // A damaged floor answers no: the full sync reports it.
    let floor_passed = floor_of(floor.as_deref()).map_or(true, |floor| cursor < floor);
    Ok(!floor_passed && last.unwrap_or(0) <= cursor)
}

/// The change-log floor recorded as `text` in `store_meta` (none recorded: 0).
fn floor_of(text: Option<&str>) -> Result<i64, DbError> {
    match text {
        Some(text) => text
            .parse::<i64>()
            .map_err(|_| DbError::Corrupt(format!("store_meta.{META_CHANGES_FLOOR} is {text:?}"))),
        None => Ok(0),
    }
}

/// Brings `cache` up to date. `conn` must be inside a read transaction (one snapshot).
pub(crate) async fn sync(
    conn: &mut SqliteConnection,
    cache: &Arc<RwLock<VectorCache>>,
) -> Result<(), DbError> {
    let (cursor, dimensions, ann) = {
        let c = read_cache(cache);
        (c.cursor, c.dimensions, c.ann.clone())
    };
    let floor: Option<(String,)> = sqlx::query_as("SELECT value FROM store_meta WHERE key = ?1")
        .bind(META_CHANGES_FLOOR)
        .fetch_optional(&mut *conn)
        .await?;
    let floor = floor_of(floor.as_ref().map(|(text,)| text.as_str()))?;
    if cursor < 0 || cursor < floor {
        return reload(conn, cache, dimensions, ann).await;
    }

    let rows: Vec<(i64, i64, i64)> =
        sqlx::query_as("SELECT seq, entry_id, op FROM changes WHERE seq > ?1 ORDER BY seq")
            .bind(cursor)
            .fetch_all(&mut *conn)
            .await?;
    let Some(&(last, _, _)) = rows.last() else {
        return Ok(());
    };
    let upserted: Vec<i64> = rows
        .iter()
        .filter(|(_, _, op)| *op == 1)
        .map(|(_, id, _)| *id)
        .collect();
    // Decoded vectors (`None`: present but unusable).
    let mut vectors: HashMap<i64, Option<Vec<f32>>> = HashMap::with_capacity(upserted.len());
    if !upserted.is_empty() {
        let found: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings \
             WHERE entry_id IN (SELECT value FROM json_each(?1))",
        )
        .bind(super::json_ids(&upserted))
        .fetch_all(&mut *conn)
        .await?;
        for (id, blob) in found {
            vectors.insert(id, decode(&blob, dimensions).ok());
        }
    }

    let mut c = write_cache(cache);
    // Another sync with a newer snapshot may have got here first: apply only what it has
    // not. Each id ends in its state in this snapshot (vector present or not), which is at
    // least as new as every applied row.
    if last <= c.cursor {
        return Ok(());
    }
    let from = c.cursor;
    for (seq, id, _) in rows {
        if seq <= from {
            continue;
        }
        c.unsaved += 1;
        match vectors.get(&id) {
            Some(Some(vector)) => {
                c.index.upsert(id, vector);
                c.corrupt.remove(&id);
            }
            Some(None) => {
                c.index.remove(id);
                c.corrupt.insert(id);
            }
            None => {
                c.index.remove(id);
                c.corrupt.remove(&id);
            }
        }
    }
    c.cursor = last;
    Ok(())
}

/// Replaces the cache with every stored vector.
async fn reload(
    conn: &mut SqliteConnection,
    cache: &Arc<RwLock<VectorCache>>,
    dimensions: usize,
    ann: AnnConfig,
) -> Result<(), DbError> {
    let (cursor,): (i64,) = sqlx::query_as(
        "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'changes'), 0)",
    )
    .fetch_one(&mut *conn)
    .await?;
    let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM embeddings")
        .fetch_one(&mut *conn)
        .await?;
    // Filled with the approximate part off, then turned on: the graph is built in one
    // batch, on several threads, in the background.
    let mut index = VectorIndex::with_ann(dimensions, AnnConfig::disabled());
    index.reserve(usize::try_from(count).unwrap_or(0));
    let mut corrupt = BTreeSet::new();
    let mut rows = sqlx::query_as::<_, (i64, Vec<u8>)>(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings",
    )
    .fetch(&mut *conn);
    while let Some((id, blob)) = futures_util::TryStreamExt::try_next(&mut rows).await? {
        match decode(&blob, dimensions) {
            Ok(vector) => index.upsert(id, &vector),
            Err(_) => {
                corrupt.insert(id);
            }
        }
    }
    drop(rows);
    index.set_ann(ann);
    let mut c = write_cache(cache);
    if cursor >= c.cursor {
        c.unsaved = index.len() as u64 + 1;
        c.index = index;
        c.cursor = cursor;
        c.corrupt = corrupt;
    }
    Ok(())
}
