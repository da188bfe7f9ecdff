//! Errors of the SQLite layer and the retry loop for "database is locked".

use sqlx::migrate::MigrateError;

pub(crate) use crate::backoff::Backoff;

/// SQLite's primary result codes for a lock held by another connection.
const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;

/// What went wrong inside the SQLite backend, before it becomes a `MemoryError`.
#[derive(Debug)]
pub(crate) enum DbError {
    /// From sqlx (SQLite itself, the connection, the pool).
    Sql(sqlx::Error),
    /// From the migrator.
    Migrate(MigrateError),
    /// Stored data that cannot be what this crate wrote (or another program's database).
    Corrupt(String),
    /// Encoding a bound JSON parameter failed.
    Encode(serde_json::Error),
    /// The handle was closed.
    Closed,
    /// A failure outside SQL, already described (a vector scan whose thread died).
    Memory(agent_op::MemoryError),
}

impl From<agent_op::MemoryError> for DbError {
    fn from(e: agent_op::MemoryError) -> DbError {
        DbError::Memory(e)
    }
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> DbError {
        // sqlx takes SQLite's message as UTF-8 unchecked, and a damaged file's message can
        // quote bytes that are not: showing such an error panics. Kept as lossy text.
        if let sqlx::Error::Database(db) = &e
            && std::str::from_utf8(db.message().as_bytes()).is_err()
        {
            return DbError::Corrupt(format!(
                "SQLite error {}: {}",
                db.code().unwrap_or_default(),
                String::from_utf8_lossy(db.message().as_bytes())
            ));
        }
        DbError::Sql(e)
    }
}

impl From<MigrateError> for DbError {
    fn from(e: MigrateError) -> DbError {
        match e {
            MigrateError::Execute(e) => e.into(),
            other => DbError::Migrate(other),
        }
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Sql(e) => write!(f, "{e}"),
            DbError::Migrate(e) => write!(f, "schema migration failed: {e}"),
            DbError::Corrupt(m) => write!(f, "the database holds unexpected data: {m}"),
            DbError::Encode(e) => write!(f, "encoding a parameter: {e}"),
            DbError::Closed => f.write_str("the store is closed"),
            DbError::Memory(e) => write!(f, "{e}"),
        }
    }
}

impl DbError {
    /// Whether this is SQLite reporting a lock held elsewhere (`SQLITE_BUSY`,
    /// `SQLITE_LOCKED` and their extended codes), which is worth retrying.
    pub(crate) fn is_busy(&self) -> bool {
        let e = match self {
            DbError::Sql(e) => e,
            DbError::Migrate(MigrateError::ExecuteMigration(e, _)) => e,
            _ => return false,
        };
        match e {
            sqlx::Error::Database(db) => db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| matches!(code & 0xff, SQLITE_BUSY | SQLITE_LOCKED)),
            _ => false,
        }
    }
}

/// Opens a write transaction on `connection` holding SQLite's write lock from the start, as
/// `BEGIN IMMEDIATE` would: waiting for the lock happens here, under the busy timeout and
/// [`Backoff`], never halfway through the caller's statements.
///
/// Why not `begin_with("BEGIN IMMEDIATE")`: in sqlx 0.8 a custom `BEGIN` is not
/// cancellation-safe. Its future has an await point after the worker has counted the
/// transaction open; dropped there, the connection is left at transaction depth 1 with the
/// lock held, and every later `begin` on it fails ("attempted to call begin_with at non-zero
/// transaction depth") while other connections see "database is locked". The plain
/// [`Connection::begin`](sqlx::Connection::begin) is cancellation-safe (if its future is
/// dropped before it returns, the worker rolls the transaction back), and so is the
/// returned [`Transaction`](sqlx::Transaction) (dropped, it queues a rollback the worker
/// runs before anything else on the connection). A statement that writes nothing then takes
/// the write lock.
pub(crate) async fn begin_immediate(
    connection: &mut sqlx::SqliteConnection,
) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, sqlx::Error> {
    let mut tx = sqlx::Connection::begin(connection).await?;
    sqlx::query("UPDATE store_meta SET value = value WHERE 0")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Runs `$attempt` (an `async` block yielding `Result<_, DbError>`, made anew for each try)
/// until it succeeds, fails otherwise than busy, or [`Backoff`] gives up on SQLite reporting
/// busy; the result is `Result<_, MemoryError>` with `$what` as context. What every macro
/// below retries with.
macro_rules! retried {
    ($inner:ident, $what:expr, $attempt:expr) => {{
        let mut backoff = $crate::backoff::Backoff::new($inner.lock_retry);
        loop {
            let attempt: Result<_, $crate::sqlite::retry::DbError> = $attempt.await;
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| $crate::sqlite::storage(&$inner.path, $what, e));
        }
    }};
}

/// Runs `$body` (an expression that may use `?` on [`DbError`]-convertible errors and
/// `.await`) inside a write transaction (see [`begin_immediate`]) on `$backend`'s writer connection, bound
/// to `$conn: &mut SqliteConnection`. The whole transaction is retried with [`Backoff`] while
/// SQLite reports busy; the result is `Result<_, MemoryError>` with `$what` as context.
macro_rules! write_tx {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let inner = &$backend.inner;
        $crate::sqlite::retry::retried!(inner, $what, async {
            let mut guard = inner.writer.lock().await;
            let connection = guard
                .as_mut()
                .ok_or_else(|| $crate::sqlite::retry::DbError::Closed)?;
            let mut tx = $crate::sqlite::retry::begin_immediate(connection).await?;
            let out = {
                let $conn: &mut sqlx::SqliteConnection = &mut *tx;
                $body
            };
            tx.commit().await?;
            Ok(out)
        })
    }};
}

/// Like [`write_tx!`] for one statement, which SQLite makes atomic by itself: run on the
/// writer connection outside an explicit transaction (autocommit), it costs one round trip to
/// the connection's thread where a transaction costs three more (its `BEGIN`, the statement
/// taking the write lock, its `COMMIT`). Retried with [`Backoff`] while SQLite reports busy.
macro_rules! write_one {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let inner = &$backend.inner;
        $crate::sqlite::retry::retried!(inner, $what, async {
            let mut guard = inner.writer.lock().await;
            let $conn: &mut sqlx::SqliteConnection = guard
                .as_mut()
                .ok_or_else(|| $crate::sqlite::retry::DbError::Closed)?;
            Ok($body)
        })
    }};
}

/// Like [`write_tx!`] for reads: a deferred (read) transaction on a pooled read connection,
/// so several statements see one snapshot.
macro_rules! read_tx {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let inner = &$backend.inner;
        $crate::sqlite::retry::retried!(inner, $what, async {
            let mut pooled = inner.readers.acquire().await?;
            let mut tx = sqlx::Connection::begin(&mut *pooled).await?;
            let out = {
                let $conn: &mut sqlx::SqliteConnection = &mut *tx;
                $body
            };
            tx.commit().await?;
            Ok(out)
        })
    }};
}

/// Like [`read_tx!`] without the transaction, for reads whose statements need not see one
/// snapshot: each statement is its own (autocommit), and the two round trips of a
/// transaction's `BEGIN` and `COMMIT` are saved.
macro_rules! read_each {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let inner = &$backend.inner;
        $crate::sqlite::retry::retried!(inner, $what, async {
            let mut pooled = inner.readers.acquire().await?;
            let $conn: &mut sqlx::SqliteConnection = &mut *pooled;
            Ok($body)
        })
    }};
}

pub(crate) use {read_each, read_tx, retried, write_one, write_tx};
