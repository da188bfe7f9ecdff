//! Opening a store: the builder, connections, migrations, and the checks that refuse a
//! file this crate did not make or an embedder it was not built with.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use agent_op::{EmbeddingProvider, MemoryError};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Mutex;

use super::cache::{VectorCache, read_cache};
use super::retry::{Backoff, DbError};
use super::{Inner, SqliteBackend, retry, storage};
use crate::ann::AnnConfig;
use crate::clock::{Clock, SystemClock};
use crate::common::check_embedder;
use crate::embed::HashingEmbedder;

/// The schema migrations, embedded from `crates/agent-memory/migrations`.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// `store_meta` keys.
pub(super) const META_MODEL: &str = "embedding_model";
pub(super) const META_DIMENSIONS: &str = "embedding_dimensions";
pub(super) const META_CHANGES_FLOOR: &str = "changes_floor";
pub(super) const META_STORE_ID: &str = "store_id";

/// How hard SQLite works to make a commit survive a crash.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = NORMAL` (the default). In WAL mode a commit is durable against the
    /// process crashing or being killed (SIGKILL) at any moment — the commit is in the
    /// operating system's hands once `store` returns — and the database is never corrupted.
    /// A power loss or OS crash may roll back the last commits (never corrupt the file).
    /// Commits need no `fsync`, which makes them fast.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is `fsync`ed before it returns, so commits also
    /// survive power loss, at the cost of one `fsync` per write.
    Full,
}

/// Options for opening a [`SqliteBackend`]; made by [`SqliteBackend::builder`].
pub struct SqliteBuilder {
    path: PathBuf,
    embedder: Arc<dyn EmbeddingProvider>,
    clock: Arc<dyn Clock>,
    durability: Durability,
    busy_timeout: Duration,
    lock_retry: Duration,
    read_connections: u32,
    create_if_missing: bool,
    ann: AnnConfig,
}

impl SqliteBuilder {
    /// The defaults, for [`SqliteBackend::builder`].
    pub(super) fn new(path: PathBuf) -> SqliteBuilder {
        SqliteBuilder {
            path,
            embedder: Arc::new(HashingEmbedder::new()),
            clock: Arc::new(SystemClock),
            durability: Durability::default(),
            busy_timeout: Duration::from_secs(5),
            lock_retry: Duration::from_secs(60),
            read_connections: 4,
            create_if_missing: true,
            ann: AnnConfig::default(),
        }
    }

    /// The embedder (default: [`HashingEmbedder::new`]). Its model name and dimension are
    /// recorded when the database is created; opening the database later with a different
    /// one fails with [`MemoryError::EmbedderMismatch`].
    pub fn embedder(mut self, embedder: Arc<dyn EmbeddingProvider>) -> SqliteBuilder {
        self.embedder = embedder;
        self
    }

    /// The clock stamping creation and access times (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> SqliteBuilder {
        self.clock = clock;
        self
    }

    /// Commit durability (default [`Durability::Normal`]).
    pub fn durability(mut self, durability: Durability) -> SqliteBuilder {
        self.durability = durability;
        self
    }

    /// How long one SQLite call waits for a lock held by another connection before it
    /// reports "busy" (default 5 s; at most `i32::MAX` milliseconds).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteBuilder {
        self.busy_timeout = timeout.min(Duration::from_millis(i32::MAX as u64));
        self
    }

    /// How long an operation keeps retrying, with backoff, after SQLite reports "busy"
    /// (default 60 s). Only after this does a lock error reach the caller.
    pub fn lock_retry(mut self, limit: Duration) -> SqliteBuilder {
        self.lock_retry = limit;
        self
    }

    /// The most connections used for reads at once (default 4, at least 1). Writes use one
    /// more connection of their own, and so does the check searches make for changes.
    pub fn read_connections(mut self, n: u32) -> SqliteBuilder {
        self.read_connections = n.max(1);
        self
    }

    /// How the approximate vector index is built and searched (default
    /// [`AnnConfig::default`]: from 10,000 entries on; [`AnnConfig::disabled`] keeps every
    /// search exact). The index lives in the handle's memory beside its vector copy; the
    /// database stays the source of truth.
    pub fn ann(mut self, config: AnnConfig) -> SqliteBuilder {
        self.ann = config;
        self
    }

    /// Whether to create the file if it does not exist (default `true`).
    pub fn create_if_missing(mut self, create: bool) -> SqliteBuilder {
        self.create_if_missing = create;
        self
    }

    /// Opens (or creates) the database: sets WAL mode, applies the embedded migrations,
    /// checks the recorded embedder, and loads every vector into memory for search.
    ///
    /// A stored vector that cannot be used (wrong size, NaN or infinite values) does not make
    /// the store unopenable: its entry is left out of vector search and listed by
    /// [`SqliteBackend::corrupt_embeddings`] and [`SqliteBackend::integrity_check`].
    ///
    /// Errors: [`MemoryError::EmbedderMismatch`] if the database was built with another
    /// embedder model or dimension; [`MemoryError::InvalidInput`] for an embedder with zero
    /// dimensions; [`MemoryError::Storage`] if the file cannot be opened, is not a database,
    /// is some other program's database (it has tables but not this crate's schema: refused
    /// before anything is written to it), or was migrated by a newer version of this crate.
    pub async fn open(self) -> Result<SqliteBackend, MemoryError> {
        check_embedder(self.embedder.as_ref())?;
        let path = self.path.clone();
        let fail = |what: &str, e: DbError| storage(&path, what, e);

        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(self.create_if_missing)
            .foreign_keys(true)
            .busy_timeout(self.busy_timeout)
            .synchronous(match self.durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            });

        // Nothing below may touch a file that is some other program's database.
        refuse_foreign(&options, self.lock_retry)
            .await
            .map_err(|e| fail("opening the database", e))?;

        // Switching a new database to WAL takes a lock that SQLite's busy timeout does not
        // wait for, so the writer connection (which does it) is opened under retries.
        let writer_options = options.clone().journal_mode(SqliteJournalMode::Wal);
        let mut backoff = Backoff::new(self.lock_retry);
        let mut writer = loop {
            let attempt = writer_options.connect().await.map_err(DbError::from);
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| fail("opening the database", e))?;
        };

        // Two processes creating the same database race on the first migration; the loser
        // fails (busy, or "already applied"), waits, and finds the migration applied.
        let mut backoff = Backoff::new(self.lock_retry);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt = MIGRATOR
                .run_direct(&mut writer)
                .await
                .map_err(DbError::from);
            // Busy: retry until the deadline. A failed statement (the race above): a few
            // times. A refused migration history (e.g. from a newer version): never.
            let retry = matches!(&attempt, Err(e) if e.is_busy()
                || (attempts < 5 && matches!(e, DbError::Sql(_))));
            if attempt.is_ok() || !(retry && backoff.wait().await) {
                attempt.map_err(|e| fail("migrating the schema", e))?;
                break;
            }
        }

        let store_id =
            check_recorded_embedder(&mut writer, self.embedder.as_ref(), self.lock_retry)
                .await
                .map_err(|e| match e {
                    Recorded::Mismatch(e) => e,
                    Recorded::Db(e) => fail("checking the recorded embedder", e),
                })?;

        // No ping before handing out an idle connection (sqlx's default): a file opened in
        // this process cannot hang up, and the ping is a round trip to the connection's
        // thread, as long as the statement a search then runs when nothing changed.
        let readers = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(self.read_connections)
            .min_connections(0)
            .acquire_timeout(self.lock_retry.max(Duration::from_secs(30)))
            .connect_with(options.clone())
            .await
            .map_err(|e| fail("opening read connections", e.into()))?;
        let checker = options
            .connect()
            .await
            .map_err(|e| fail("opening the connection that checks for changes", e.into()))?;

        let backend = SqliteBackend {
            inner: Arc::new(Inner {
                #[cfg(test)]
                change_log_reads: Default::default(),
                #[cfg(test)]
                repeated_reads: Default::default(),
                #[cfg(test)]
                checks: Default::default(),
                wrote: AtomicBool::new(false),
                path: self.path,
                readers,
                checker: Mutex::new(Some(checker)),
                writer: Mutex::new(Some(writer)),
                cache: Arc::new(RwLock::new(VectorCache::new(
                    self.embedder.dimensions(),
                    self.ann,
                ))),
                dimensions: self.embedder.dimensions(),
                embedder: self.embedder,
                clock: self.clock,
                lock_retry: self.lock_retry,
                store_id,
                saving: AtomicBool::new(false),
            }),
        };
        // The copy saved beside the database, if it verifies, then the changes since.
        let loaded = backend.load_saved().await?;
        backend.sync().await?;
        if loaded && !backend.saved_copy_agrees().await? {
            let ann = read_cache(&backend.inner.cache).ann_config().clone();
            *backend
                .inner
                .cache
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                VectorCache::new(backend.inner.dimensions, ann);
            let _ = tokio::fs::remove_file(super::saved::path_for(&backend.inner.path)).await;
            backend.sync().await?;
        }
        Ok(backend)
    }
}

/// Refuses a file that is some other program's database — it has tables, but not this
/// crate's migration history — before anything writes to it (switching it to WAL, creating
/// the migrations table). A new or empty file passes, and so does one where creating the
/// store was interrupted (only an empty `_sqlx_migrations` table).
pub(super) async fn refuse_foreign(
    options: &SqliteConnectOptions,
    lock_retry: Duration,
) -> Result<(), DbError> {
    let mut backoff = Backoff::new(lock_retry);
    loop {
        let attempt: Result<(), DbError> = async {
            let mut conn = options.connect().await?;
            let verdict = check_ours(&mut conn).await;
            // Read-only: nothing to lose if closing fails.
            let _ = conn.close().await;
            verdict
        }
        .await;
        let busy = matches!(&attempt, Err(e) if e.is_busy());
        if busy && backoff.wait().await {
            continue;
        }
        return attempt;
    }
}

/// See [`refuse_foreign`].
pub(super) async fn check_ours(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let names: Vec<&str> = tables.iter().map(|(name,)| name.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    if names.contains(&"_sqlx_migrations") {
        let applied: Vec<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations")
                .fetch_all(&mut *conn)
                .await?;
        if applied.is_empty() && names == ["_sqlx_migrations"] {
            return Ok(());
        }
        let ours = MIGRATOR.iter().next().is_some_and(|first| {
            applied.iter().any(|(version, checksum)| {
                *version == first.version && *checksum == *first.checksum
            })
        });
        if ours {
            return Ok(());
        }
    }
    const SHOWN: usize = 8;
    let mut shown = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        shown.push_str(&format!(", … ({} tables)", names.len()));
    }
    Err(DbError::Corrupt(format!(
        "this file is not an agent-memory store: it holds other tables ({shown}) and not this \
         crate's schema; refusing to modify it (nothing was changed)"
    )))
}

pub(super) enum Recorded {
    Mismatch(MemoryError),
    Db(DbError),
}

impl From<sqlx::Error> for Recorded {
    fn from(e: sqlx::Error) -> Recorded {
        Recorded::Db(e.into())
    }
}

/// Records the embedder in a new database, or checks it against the recorded one.
pub(super) async fn check_recorded_embedder(
    writer: &mut SqliteConnection,
    embedder: &dyn EmbeddingProvider,
    lock_retry: Duration,
) -> Result<String, Recorded> {
    let model = embedder.model().to_owned();
    let dimensions = embedder.dimensions();
    // Names this store for the vector copy saved beside it (a copy of another store that
    // was moved to this path is never loaded).
    let new_store_id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let mut backoff = Backoff::new(lock_retry);
    let (stored_model, stored_dimensions, store_id) = loop {
        let attempt: Result<(String, String, String), DbError> = async {
            let mut tx = retry::begin_immediate(writer).await?;
            for (key, value) in [
                (META_MODEL, model.clone()),
                (META_DIMENSIONS, dimensions.to_string()),
                (META_STORE_ID, new_store_id.clone()),
            ] {
                sqlx::query("INSERT OR IGNORE INTO store_meta (key, value) VALUES (?1, ?2)")
                    .bind(key)
                    .bind(value)
                    .execute(&mut *tx)
                    .await?;
            }
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT key, value FROM store_meta WHERE key IN (?1, ?2, ?3)")
                    .bind(META_MODEL)
                    .bind(META_DIMENSIONS)
                    .bind(META_STORE_ID)
                    .fetch_all(&mut *tx)
                    .await?;
            tx.commit().await?;
            let get = |key: &str| {
                rows.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| DbError::Corrupt(format!("store_meta.{key} is missing")))
            };
            Ok((get(META_MODEL)?, get(META_DIMENSIONS)?, get(META_STORE_ID)?))
        }
        .await;
        let busy = matches!(&attempt, Err(e) if e.is_busy());
        if busy && backoff.wait().await {
            continue;
        }
        break attempt.map_err(Recorded::Db)?;
    };
    let parsed_dimensions = stored_dimensions.parse::<usize>().map_err(|_| {
        Recorded::Db(DbError::Corrupt(format!(
            "store_meta.{META_DIMENSIONS} is {stored_dimensions:?}"
        )))
    })?;
    if stored_model != model || parsed_dimensions != dimensions {
        return Err(Recorded::Mismatch(MemoryError::EmbedderMismatch {
            stored_model,
            stored_dimensions: parsed_dimensions,
            given_model: model,
            given_dimensions: dimensions,
        }));
    }
    Ok(store_id)
}
