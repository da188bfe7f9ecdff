//! The vector copy saved beside the database (`<file>.vectors`), so that opening a large
//! store neither re-reads every vector from SQLite nor rebuilds the approximate index.
//!
//! The database stays the source of truth. A saved copy records the change-log position it
//! reflects and the log row at that position; at open it is used only if its checksum,
//! store id, embedder dimension and that log row all match the database, and it is then
//! brought up to date from the change log like any handle's copy. A sample of its vectors is
//! compared with the table afterwards. Any mismatch — a torn or stale file, another store's
//! file, a database rolled back under it — discards the file and loads from the table. The
//! file is written to a temporary name and renamed into place, so a crash mid-write leaves
//! the previous file (or none), never a half-written one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use agent_op::MemoryError;
use sqlx::SqliteConnection;

use super::SqliteBackend;
use super::cache::{VectorCache, decode, read_cache};
use super::open::META_CHANGES_FLOOR;
use super::retry::{DbError, read_tx};
use crate::ann::AnnConfig;
use crate::vector::{Source, VectorIndex, unit};

const MAGIC: &[u8; 8] = b"EAMEMVEC";
/// Bumped whenever the layout changes; other versions are ignored (and replaced).
const VERSION: u64 = 1;
/// Vectors compared with the table after loading.
const SAMPLE: usize = 32;

/// Where the copy of the database at `db` is saved.
pub(super) fn path_for(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".vectors");
    db.with_file_name(name)
}

/// The copy, serialized: header, corrupt ids, the index, then a CRC-32 of all of it.
fn encode(copy: &VectorCache, store_id: &str, check: (i64, i64)) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(store_id.len() as u64).to_le_bytes());
    out.extend_from_slice(store_id.as_bytes());
    out.extend_from_slice(&copy.cursor().to_le_bytes());
    out.extend_from_slice(&check.0.to_le_bytes());
    out.extend_from_slice(&check.1.to_le_bytes());
    let corrupt = copy.corrupt_set();
    out.extend_from_slice(&(corrupt.len() as u64).to_le_bytes());
    for id in corrupt {
        out.extend_from_slice(&id.to_le_bytes());
    }
    copy.index().write_to(&mut out);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&u64::from(crc).to_le_bytes());
    out
}

/// A decoded copy and the log row it was checked against.
struct Decoded {
    copy: VectorCache,
    check: (i64, i64),
}

/// Reads the file at `path` front to back, checking its CRC-32 as it goes; the values land
/// straight in their vectors (no second copy of a file of hundreds of megabytes).
struct CheckedFile {
    file: std::io::BufReader<std::fs::File>,
    crc: crc32fast::Hasher,
    /// Bytes left before the trailing checksum.
    left: u64,
}

impl Source for CheckedFile {
    fn fill(&mut self, buf: &mut [u8]) -> Option<()> {
        use std::io::Read;
        self.check_len(buf.len())?;
        self.file.read_exact(buf).ok()?;
        self.crc.update(buf);
        self.left -= buf.len() as u64;
        Some(())
    }

    fn check_len(&self, len: usize) -> Option<usize> {
        (len as u64 <= self.left).then_some(len)
    }
}

fn decode_file(path: &Path, store_id: &str, dimensions: usize, ann: AnnConfig) -> Option<Decoded> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut src = CheckedFile {
        file: std::io::BufReader::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        left: len.checked_sub(8)?,
    };
    let mut magic = [0u8; 8];
    src.fill(&mut magic)?;
    if &magic != MAGIC || src.u64()? != VERSION {
        return None;
    }
    let id_len = usize::try_from(src.u64()?).ok()?;
    let id_len = src.check_len(id_len)?;
    let mut id = vec![0u8; id_len];
    src.fill(&mut id)?;
    if id != store_id.as_bytes() {
        return None;
    }
    let cursor = src.i64()?;
    let check = (src.i64()?, src.i64()?);
    let corrupt_len = usize::try_from(src.u64()?).ok()?;
    src.check_len(corrupt_len.checked_mul(8)?)?;
    let corrupt: BTreeSet<i64> = (0..corrupt_len).map(|_| src.i64()).collect::<Option<_>>()?;
    let (mut index, graph) = VectorIndex::read_from(&mut src, dimensions)?;
    let mut trailer = [0u8; 8];
    if src.left != 0 || src.file.read_exact(&mut trailer).is_err() {
        return None;
    }
    if u64::from(src.crc.finalize()) != u64::from_le_bytes(trailer) {
        return None;
    }
    index.attach_graph(&graph, ann.clone());
    Some(Decoded {
        copy: VectorCache::restored(index, cursor, corrupt, ann),
        check,
    })
}

/// The log row at `seq`: (entry id, op), or (0, 0) for position 0 (an empty log).
async fn log_row(conn: &mut SqliteConnection, seq: i64) -> Result<Option<(i64, i64)>, DbError> {
    if seq == 0 {
        return Ok(Some((0, 0)));
    }
    Ok(
        sqlx::query_as("SELECT entry_id, op FROM changes WHERE seq = ?1")
            .bind(seq)
            .fetch_optional(&mut *conn)
            .await?,
    )
}

impl SqliteBackend {
    /// Loads the saved copy into the (empty) cache if it verifies; whether it did. A file
    /// that does not verify is removed. Errors reading the database are returned; a
    /// missing or unusable file is not an error.
    pub(super) async fn load_saved(&self) -> Result<bool, MemoryError> {
        let path = path_for(&self.inner.path);
        if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(false);
        }
        let (store_id, dimensions) = (self.inner.store_id.clone(), self.inner.dimensions);
        let ann = read_cache(&self.inner.cache).ann_config().clone();
        let file = path.clone();
        let decoded =
            tokio::task::spawn_blocking(move || decode_file(&file, &store_id, dimensions, ann))
                .await
                .map_err(|e| MemoryError::storage("loading the saved vectors", None, e))?;
        let Some(decoded) = decoded else {
            let _ = tokio::fs::remove_file(&path).await;
            return Ok(false);
        };
        let cursor = decoded.copy.cursor();
        let usable = read_tx!(self, "checking the saved vectors", |conn| {
            let (floor,): (String,) = sqlx::query_as(
                "SELECT coalesce((SELECT value FROM store_meta WHERE key = ?1), '0')",
            )
            .bind(META_CHANGES_FLOOR)
            .fetch_one(&mut *conn)
            .await?;
            let floor: i64 = floor.parse().unwrap_or(i64::MAX);
            cursor >= floor && log_row(&mut *conn, cursor).await? == Some(decoded.check)
        })?;
        if !usable {
            let _ = tokio::fs::remove_file(&path).await;
            return Ok(false);
        }
        *self
            .inner
            .cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = decoded.copy;
        Ok(true)
    }

    /// After loading a saved copy and syncing it: compares a sample of its vectors, and its
    /// largest id, with the table. `false` means the copy disagrees with the database.
    pub(super) async fn saved_copy_agrees(&self) -> Result<bool, MemoryError> {
        let (sample, largest) = {
            let copy = read_cache(&self.inner.cache);
            let ids = copy.index().ids_sample(SAMPLE);
            let largest = copy
                .index()
                .max_id()
                .max(copy.corrupt_set().last().copied());
            (ids, largest)
        };
        let cache = self.inner.cache.clone();
        let dimensions = self.inner.dimensions;
        read_tx!(self, "checking the saved vectors", |conn| {
            let (max,): (Option<i64>,) = sqlx::query_as("SELECT max(entry_id) FROM embeddings")
                .fetch_one(&mut *conn)
                .await?;
            let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
                "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings \
                 WHERE entry_id IN (SELECT value FROM json_each(?1))",
            )
            .bind(super::json_ids(&sample))
            .fetch_all(&mut *conn)
            .await?;
            let copy = read_cache(&cache);
            max == largest
                && rows.len() == sample.len()
                && rows.iter().all(|(id, blob)| {
                    decode(blob, dimensions)
                        .is_ok_and(|v| copy.index().get(*id) == Some(unit(&v).as_slice()))
                })
        })
    }

    /// Saves this handle's vector copy beside the database, if it changed since it was
    /// loaded or last saved. Runs the serialization and the write off the executor.
    pub(super) async fn save_vectors(&self) -> Result<(), MemoryError> {
        let cursor = {
            let copy = read_cache(&self.inner.cache);
            if copy.unsaved == 0 || copy.cursor() < 0 {
                return Ok(());
            }
            copy.cursor()
        };
        let check = read_tx!(self, "saving the vectors", |conn| log_row(
            &mut *conn, cursor
        )
        .await?)?;
        let Some(check) = check else {
            // The log was trimmed past the copy's position: it will reload, not save.
            return Ok(());
        };
        let cache = self.inner.cache.clone();
        let (store_id, path) = (self.inner.store_id.clone(), path_for(&self.inner.path));
        let result = tokio::task::spawn_blocking(move || {
            write_copy(&cache, &store_id, cursor, check, &path)
        })
        .await
        .map_err(|e| MemoryError::storage("saving the vectors", None, e))?;
        result.map_err(|e| MemoryError::storage("saving the vectors", None, e))
    }
}

/// Serializes the copy (if it is still at `cursor`) and writes it to `path` atomically.
fn write_copy(
    cache: &Arc<RwLock<VectorCache>>,
    store_id: &str,
    cursor: i64,
    check: (i64, i64),
    path: &Path,
) -> std::io::Result<()> {
    let bytes = {
        let copy = read_cache(cache);
        if copy.cursor() != cursor {
            // Synced meanwhile: the next save writes the newer state.
            return Ok(());
        }
        encode(&copy, store_id, check)
    };
    let mut temp = path.as_os_str().to_os_string();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = PathBuf::from(temp);
    let written = (|| {
        use std::io::Write;
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    } else {
        let mut copy = cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if copy.cursor() == cursor {
            copy.unsaved = 0;
        }
    }
    written
}
