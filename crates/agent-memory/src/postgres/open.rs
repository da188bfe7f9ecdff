//! Connecting: the builder, the pool, the store's schema and its migrations, and the checks
//! that refuse a schema this crate did not make or an embedder the store was not built
//! with.
//!
//! Setting a store up runs on one connection of its own, holding a session-level advisory
//! lock ([`SETUP_LOCK`]) so that processes connecting at once never race on `CREATE`
//! statements: find or create pgvector, create the schema if missing, refuse a schema that
//! holds other tables, apply the embedded migrations, record or check the embedder, and
//! create the table of vectors (whose column type needs the dimension) with its HNSW index.
//! Then the pool is built; each of its connections gets the schema and pgvector's schema as
//! its `search_path`, the statement timeout and the HNSW search settings.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agent_op::{EmbeddingProvider, MemoryError};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use tokio::runtime::Handle;

use super::lease::{Orphans, PING_AFTER_IDLE, Warm};
use super::pgvector::{self, Pgvector};
use super::retry::DbError;
use super::{Inner, PostgresBackend, storage};
use crate::clock::{Clock, SystemClock};
use crate::common::check_embedder;
use crate::embed::HashingEmbedder;

/// The schema migrations, embedded from `crates/agent-memory/migrations-postgres`.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-postgres");

/// `store_meta` keys.
const META_MODEL: &str = "embedding_model";
const META_DIMENSIONS: &str = "embedding_dimensions";

/// The most dimensions pgvector's HNSW index takes for the `vector` type; larger vectors
/// are stored and searched exactly, without an index.
pub(super) const MAX_INDEXED_DIMENSIONS: usize = 2_000;

/// Creates the HNSW index of the vectors (when missing); also what a bulk load that rebuilds
/// the index runs (see `write`).
pub(super) const CREATE_HNSW: &str = "CREATE INDEX IF NOT EXISTS embeddings_hnsw ON embeddings \
     USING hnsw (embedding vector_cosine_ops)";

/// `hnsw.ef_search` of every pooled connection: the size of the candidate list an HNSW scan
/// keeps, at least the [`MIN_CANDIDATES`](crate::MIN_CANDIDATES) a search asks for (more
/// come from iterative scans on pgvector 0.8+, or from an exact scan before it).
pub(super) const EF_SEARCH: usize = 100;

/// Key of the advisory lock held while a store is set up (`agent_me` in ASCII).
const SETUP_LOCK: i64 = 0x6167_656e_745f_6d65;

/// Options for [`PostgresBackend::builder`]; [`connect`](PostgresBuilder::connect) connects.
///
/// ```no_run
/// use std::time::Duration;
/// use agent_memory::PostgresBackend;
///
/// # async fn example() -> Result<(), agent_op::MemoryError> {
/// let memory = PostgresBackend::builder("postgres://agent:secret@db.internal/app")
///     .schema("support_bot_memory")
///     .max_connections(20)
///     .statement_timeout(Some(Duration::from_secs(10)))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `connect` is called"]
pub struct PostgresBuilder {
    url: String,
    embedder: Arc<dyn EmbeddingProvider>,
    clock: Arc<dyn Clock>,
    schema: String,
    max_connections: u32,
    min_connections: u32,
    connect_timeout: Duration,
    acquire_timeout: Duration,
    statement_timeout: Option<Duration>,
    retry_for: Duration,
}

impl PostgresBuilder {
    /// The schema a store uses unless told otherwise.
    pub const DEFAULT_SCHEMA: &'static str = "agent_memory";

    pub(super) fn new(url: &str) -> PostgresBuilder {
        PostgresBuilder {
            url: url.to_owned(),
            embedder: Arc::new(HashingEmbedder::new()),
            clock: Arc::new(SystemClock),
            schema: PostgresBuilder::DEFAULT_SCHEMA.to_owned(),
            max_connections: 10,
            min_connections: 0,
            connect_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(30),
            statement_timeout: Some(Duration::from_secs(60)),
            retry_for: Duration::from_secs(30),
        }
    }

    /// The embedder (default [`HashingEmbedder`]). A store remembers the model and dimension
    /// it was created with and refuses others.
    pub fn embedder(mut self, embedder: Arc<dyn EmbeddingProvider>) -> PostgresBuilder {
        self.embedder = embedder;
        self
    }

    /// The clock that stamps creation and access times (default [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> PostgresBuilder {
        self.clock = clock;
        self
    }

    /// The schema holding the store (default [`DEFAULT_SCHEMA`](Self::DEFAULT_SCHEMA),
    /// `agent_memory`), created if
    /// missing. Several stores can share a database, each in its own schema. Lowercase ASCII
    /// letters, digits and `_`, not starting with a digit or `pg_`, at most 63 bytes;
    /// anything else fails `connect` with [`MemoryError::InvalidInput`].
    pub fn schema(mut self, schema: &str) -> PostgresBuilder {
        self.schema = schema.to_owned();
        self
    }

    /// The most connections the pool opens (default 10, at least 1).
    pub fn max_connections(mut self, n: u32) -> PostgresBuilder {
        self.max_connections = n.max(1);
        self
    }

    /// Connections the pool keeps open even when idle (default 0).
    pub fn min_connections(mut self, n: u32) -> PostgresBuilder {
        self.min_connections = n;
        self
    }

    /// How long `connect` waits for the server to answer (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> PostgresBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long an operation waits for a pooled connection, including opening one, before
    /// it fails with [`MemoryError::Storage`] (default 30 s).
    pub fn acquire_timeout(mut self, timeout: Duration) -> PostgresBuilder {
        self.acquire_timeout = timeout;
        self
    }

    /// PostgreSQL's `statement_timeout` on the pool's connections: a statement running longer
    /// is cancelled and its operation fails with [`MemoryError::Storage`] (default 60 s;
    /// `None` for no limit). Setting a store up (migrations, building the HNSW index over
    /// existing rows) is not limited, nor is a bulk load (a
    /// [`store_batch`](super::PostgresBackend::store_batch) of 1,000 memories or more), whose
    /// statements take time in proportion to the batch.
    pub fn statement_timeout(mut self, timeout: Option<Duration>) -> PostgresBuilder {
        self.statement_timeout = timeout;
        self
    }

    /// How long an operation that met a deadlock or a serialization failure is run again,
    /// with backoff, before the error reaches the caller (default 30 s).
    pub fn retry_for(mut self, limit: Duration) -> PostgresBuilder {
        self.retry_for = limit;
        self
    }

    /// Connects, creating the store on first use: creates pgvector in the database if the
    /// server has it but the database does not, creates the schema, applies the embedded
    /// migrations, records (or checks) the embedder, and creates the table of vectors with
    /// its HNSW index.
    ///
    /// Errors: [`MemoryError::InvalidInput`] for a URL that cannot be parsed, an unusable
    /// schema name or an embedder with zero dimensions; [`MemoryError::EmbedderMismatch`] if
    /// the store was built with another embedder model or dimension;
    /// [`MemoryError::UnexpectedData`] if the schema holds other tables than this crate's
    /// (nothing is changed in it); [`MemoryError::Storage`] if the server cannot be reached
    /// (within [`connect_timeout`](PostgresBuilder::connect_timeout)), refuses the
    /// connection, lacks pgvector or the right to create it (the cause is a
    /// [`PgvectorError`](super::PgvectorError)), or holds a store migrated by a newer
    /// version of this crate.
    pub async fn connect(self) -> Result<PostgresBackend, MemoryError> {
        check_embedder(self.embedder.as_ref())?;
        check_schema_name(&self.schema)?;
        if !["postgres://", "postgresql://"]
            .iter()
            .any(|scheme| self.url.starts_with(scheme))
        {
            return Err(MemoryError::InvalidInput(
                "a PostgreSQL URL starts with postgres:// or postgresql://".to_owned(),
            ));
        }
        let options = PgConnectOptions::from_str(&self.url)
            .map_err(|e| MemoryError::InvalidInput(format!("unusable PostgreSQL URL: {e}")))?
            .application_name("agent-memory");
        // PostgreSQL's default database is the user's name.
        let database = options
            .get_database()
            .unwrap_or(options.get_username())
            .to_owned();
        let location = format!(
            "postgres://{}@{}:{}/{} (schema {})",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            database,
            self.schema
        );
        let fail = |what: &str, e: DbError| storage(&location, what, e);

        let mut setup = match tokio::time::timeout(self.connect_timeout, options.connect()).await {
            Ok(connected) => connected.map_err(|e| fail("connecting", e.into()))?,
            Err(_) => {
                return Err(MemoryError::storage(
                    "connecting",
                    Some(location),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", self.connect_timeout),
                    ),
                ));
            }
        };
        let prepared = set_up(&mut setup, &database, &self.schema, self.embedder.as_ref()).await;
        // Closing also releases the advisory lock; nothing to do if it fails.
        let _ = setup.close().await;
        let prepared = prepared.map_err(|e| match e {
            SetUpError::Mismatch(e) => e,
            SetUpError::Db(what, e) => fail(what, e),
        })?;

        let search_path = format!(
            "{}, {}",
            quote_ident(&self.schema),
            quote_ident(&prepared.pgvector.schema)
        );
        let statement_timeout = self
            .statement_timeout
            .map_or(0, |t| t.as_millis().clamp(1, i32::MAX as u128))
            .to_string();
        let iterative = prepared.pgvector.has_iterative_scan();
        let ping_within = self.acquire_timeout / 2;
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .min_connections(self.min_connections.min(self.max_connections))
            .acquire_timeout(self.acquire_timeout)
            // sqlx pings every connection it hands out: a round trip before each statement,
            // a third of a search's time. Only a connection idle for a while is pinged now
            // (as HikariCP does); one in use moments ago is alive but for a server that
            // died in between, whose error reaches the caller as any lost connection's.
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < PING_AFTER_IDLE {
                        return Ok(true);
                    }
                    // A server gone silent never answers: the connection is given up while
                    // the acquire still has time to open another.
                    let pinged = tokio::time::timeout(ping_within, conn.ping()).await;
                    Ok(matches!(pinged, Ok(Ok(()))))
                })
            })
            .after_connect(move |conn, _meta| {
                let search_path = search_path.clone();
                let statement_timeout = statement_timeout.clone();
                Box::pin(async move {
                    sqlx::query(
                        "SELECT set_config('search_path', $1, false), \
                                set_config('statement_timeout', $2, false), \
                                set_config('hnsw.ef_search', $3, false)",
                    )
                    .bind(search_path)
                    .bind(statement_timeout)
                    .bind(EF_SEARCH.to_string())
                    .execute(&mut *conn)
                    .await?;
                    if iterative {
                        // Filtered HNSW scans go on until enough rows pass (pgvector 0.8+).
                        sqlx::query(
                            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)",
                        )
                        .execute(&mut *conn)
                        .await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        // One connection now, so a server that cannot set a pooled connection up fails here.
        pool.acquire()
            .await
            .map_err(|e| fail("opening the connection pool", e.into()))?;
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                pool,
                location,
                dimensions: self.embedder.dimensions(),
                embedder: self.embedder,
                clock: self.clock,
                retry_for: self.retry_for,
                indexed: prepared.indexed,
                iterative,
                orphans: Arc::new(Orphans::new(self.statement_timeout)),
                warm: Arc::new(Warm::new(Handle::try_current().ok())),
            }),
        })
    }
}

/// What setting a store up found.
struct Prepared {
    pgvector: Pgvector,
    /// Whether the vectors have an HNSW index.
    indexed: bool,
}

/// Why setting a store up failed.
enum SetUpError {
    Mismatch(MemoryError),
    /// A database error, with what was being done.
    Db(&'static str, DbError),
}

/// Wraps database errors of a step with its name.
fn step<T>(what: &'static str, result: Result<T, impl Into<DbError>>) -> Result<T, SetUpError> {
    result.map_err(|e| SetUpError::Db(what, e.into()))
}

/// Sets the store up on `conn` (see the module docs), holding [`SETUP_LOCK`].
async fn set_up(
    conn: &mut PgConnection,
    database: &str,
    schema: &str,
    embedder: &dyn EmbeddingProvider,
) -> Result<Prepared, SetUpError> {
    const LOCKING: &str = "waiting for other connections setting a store up";
    step(
        LOCKING,
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(SETUP_LOCK)
            .execute(&mut *conn)
            .await,
    )?;
    let pgvector = step(
        "enabling the pgvector extension (`vector`)",
        pgvector::ensure(conn, database).await,
    )?;

    const SCHEMA: &str = "creating the store's schema";
    let exists: Option<(i32,)> = step(
        SCHEMA,
        sqlx::query_as("SELECT 1 FROM pg_namespace WHERE nspname = $1")
            .bind(schema)
            .fetch_optional(&mut *conn)
            .await,
    )?;
    if exists.is_none() {
        // The name was checked: lowercase letters, digits and `_` only.
        let sql = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema));
        step(SCHEMA, sqlx::query(&sql).execute(&mut *conn).await)?;
    }
    step(
        SCHEMA,
        sqlx::query("SELECT set_config('search_path', $1, false)")
            .bind(format!(
                "{}, {}",
                quote_ident(schema),
                quote_ident(&pgvector.schema)
            ))
            .execute(&mut *conn)
            .await,
    )?;
    step(
        "checking the store's schema",
        check_ours(&mut *conn, schema).await,
    )?;
    step(
        "migrating the schema",
        MIGRATOR.run_direct(&mut *conn).await,
    )?;
    check_recorded_embedder(&mut *conn, embedder).await?;

    let dimensions = embedder.dimensions();
    let indexed = dimensions <= MAX_INDEXED_DIMENSIONS;
    const VECTORS: &str = "creating the table of vectors";
    // The dimension is a number of ours, not user text.
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS embeddings ( \
             entry_id  bigint PRIMARY KEY REFERENCES entries (id) ON DELETE CASCADE, \
             embedding vector({dimensions}) NOT NULL)"
    );
    step(VECTORS, sqlx::query(&sql).execute(&mut *conn).await)?;
    if indexed {
        step(
            "building the HNSW index",
            sqlx::query(CREATE_HNSW).execute(&mut *conn).await,
        )?;
    }
    step(
        LOCKING,
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(SETUP_LOCK)
            .execute(&mut *conn)
            .await,
    )?;
    Ok(Prepared { pgvector, indexed })
}

/// Refuses a schema that holds other tables than this crate's — another program's, or a
/// schema such as `public` in use by an application — before anything is written to it. An
/// empty schema passes, and so does one whose creation was interrupted (only an empty
/// `_sqlx_migrations`).
async fn check_ours(conn: &mut PgConnection, schema: &str) -> Result<(), DbError> {
    let tables: Vec<(String,)> =
        sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY 1")
            .bind(schema)
            .fetch_all(&mut *conn)
            .await?;
    let names: Vec<&str> = tables.iter().map(|(name,)| name.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    if names.contains(&"_sqlx_migrations") {
        let sql = format!(
            "SELECT version, checksum FROM {}._sqlx_migrations",
            quote_ident(schema)
        );
        let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(&sql).fetch_all(&mut *conn).await?;
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
        "schema `{schema}` is not an agent-memory store: it holds other tables ({shown}) and \
         not this crate's; refusing to modify it (nothing was changed; choose another schema \
         with `PostgresBuilder::schema`)"
    )))
}

/// Records the embedder in a new store, or checks it against the recorded one.
async fn check_recorded_embedder(
    conn: &mut PgConnection,
    embedder: &dyn EmbeddingProvider,
) -> Result<(), SetUpError> {
    const WHAT: &str = "checking the recorded embedder";
    let model = embedder.model().to_owned();
    let dimensions = embedder.dimensions();
    step(
        WHAT,
        sqlx::query(
            "INSERT INTO store_meta (key, value) VALUES ($1, $2), ($3, $4) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(META_MODEL)
        .bind(&model)
        .bind(META_DIMENSIONS)
        .bind(dimensions.to_string())
        .execute(&mut *conn)
        .await,
    )?;
    let rows: Vec<(String, String)> = step(
        WHAT,
        sqlx::query_as("SELECT key, value FROM store_meta WHERE key IN ($1, $2)")
            .bind(META_MODEL)
            .bind(META_DIMENSIONS)
            .fetch_all(&mut *conn)
            .await,
    )?;
    let get = |key: &str| {
        rows.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                SetUpError::Db(
                    WHAT,
                    DbError::Corrupt(format!("store_meta.{key} is missing")),
                )
            })
    };
    let stored_model = get(META_MODEL)?;
    let stored_dimensions = get(META_DIMENSIONS)?;
    let parsed = stored_dimensions.parse::<usize>().map_err(|_| {
        SetUpError::Db(
            WHAT,
            DbError::Corrupt(format!(
                "store_meta.{META_DIMENSIONS} is {stored_dimensions:?}"
            )),
        )
    })?;
    if stored_model != model || parsed != dimensions {
        return Err(SetUpError::Mismatch(MemoryError::EmbedderMismatch {
            stored_model,
            stored_dimensions: parsed,
            given_model: model,
            given_dimensions: dimensions,
        }));
    }
    Ok(())
}

/// Refuses schema names that would need quoting or that PostgreSQL reserves.
fn check_schema_name(schema: &str) -> Result<(), MemoryError> {
    let fine = !schema.is_empty()
        && schema.len() <= 63
        && !schema.starts_with("pg_")
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if fine {
        Ok(())
    } else {
        Err(MemoryError::InvalidInput(format!(
            "unusable schema name {schema:?}: use lowercase ASCII letters, digits and `_`, \
             not starting with a digit or `pg_`, at most 63 bytes"
        )))
    }
}

/// `name` as an SQL identifier: in double quotes, inner quotes doubled.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_need_no_quoting() {
        for good in ["agent_memory", "_x", "t_123", "a"] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "Agent",
            "1abc",
            "pg_memory",
            "a-b",
            "a b",
            "x\"; DROP SCHEMA public; --",
            "été",
            long.as_str(),
        ] {
            assert!(
                matches!(check_schema_name(bad), Err(MemoryError::InvalidInput(_))),
                "{bad:?}"
            );
        }
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
