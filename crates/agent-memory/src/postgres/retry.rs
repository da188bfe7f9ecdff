//! Errors of the PostgreSQL layer, and running statements and transactions with retries of
//! what PostgreSQL asks to be retried.
//!
//! A deadlock (`40P01`) or serialization failure (`40001`) rolls the whole transaction back
//! and means "run it again": [`transaction!`] and [`statement!`] do, with
//! [`Backoff`](crate::backoff::Backoff), for up to [`PostgresBuilder::retry_for`](super::PostgresBuilder::retry_for).
//! Nothing else is retried: after a lost connection a write may or may not have committed,
//! so that error reaches the caller (the pool replaces the connection for the next
//! operation).
//!
//! Cancellation: every connection is taken through a [`Lease`](super::lease::Lease), which
//! also opens and commits transactions; a lease dropped mid-operation is drained (statement
//! in flight awaited, open transaction rolled back) before its connection returns to the
//! pool, and the handle's next operation waits for that: no lock or transaction outlives a
//! dropped operation, and its effect (all or nothing) is settled before the same handle does
//! anything else.

use sqlx::migrate::MigrateError;

use super::copy::TooLarge;
use super::pgvector::PgvectorError;

/// SQLSTATE of a serialization failure.
const SERIALIZATION_FAILURE: &str = "40001";
/// SQLSTATE of a detected deadlock.
const DEADLOCK_DETECTED: &str = "40P01";

/// What went wrong inside the PostgreSQL backend, before it becomes a `MemoryError`.
#[derive(Debug)]
pub(crate) enum DbError {
    /// From sqlx (the server, the connection, the pool).
    Sql(sqlx::Error),
    /// From the migrator.
    Migrate(MigrateError),
    /// The pgvector extension cannot be used.
    Pgvector(PgvectorError),
    /// Stored data that cannot be what this crate wrote (or another program's schema).
    Corrupt(String),
    /// A value too large for the binary COPY format.
    TooLarge(TooLarge),
}

impl From<TooLarge> for DbError {
    fn from(e: TooLarge) -> DbError {
        DbError::TooLarge(e)
    }
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> DbError {
        DbError::Sql(e)
    }
}

impl From<MigrateError> for DbError {
    fn from(e: MigrateError) -> DbError {
        match e {
            MigrateError::Execute(e) => DbError::Sql(e),
            other => DbError::Migrate(other),
        }
    }
}

impl From<PgvectorError> for DbError {
    fn from(e: PgvectorError) -> DbError {
        DbError::Pgvector(e)
    }
}

impl DbError {
    /// Whether PostgreSQL rolled the transaction back for a deadlock or a serialization
    /// failure, which running it again resolves.
    pub(crate) fn is_transient(&self) -> bool {
        self.sqlstate()
            .is_some_and(|code| code == SERIALIZATION_FAILURE || code == DEADLOCK_DETECTED)
    }

    /// The SQLSTATE of a database error.
    pub(crate) fn sqlstate(&self) -> Option<String> {
        match self {
            DbError::Sql(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }
}

/// Runs `$body` (an expression that may use `?` on [`DbError`]-convertible errors and
/// `.await`) in a transaction on a pooled connection, bound to `$conn: &mut PgConnection`,
/// and commits. The whole transaction is retried while PostgreSQL reports a deadlock or a
/// serialization failure; the result is `Result<_, MemoryError>` with `$what` as context.
macro_rules! transaction {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let backend = &$backend;
        let mut backoff = $crate::backoff::Backoff::new(backend.inner.retry_for);
        loop {
            let attempt: Result<_, $crate::postgres::retry::DbError> = async {
                let mut lease = $crate::postgres::lease::Lease::acquire(
                    &backend.inner.pool,
                    &backend.inner.orphans,
                    &backend.inner.warm,
                )
                .await?;
                lease.begin().await?;
                let out = {
                    let $conn: &mut sqlx::PgConnection = lease.conn();
                    $body
                };
                lease.commit().await?;
                lease.finish();
                Ok(out)
            }
            .await;
            let transient = matches!(&attempt, Err(e) if e.is_transient());
            if transient && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| backend.error($what, e));
        }
    }};
}

/// Like [`transaction!`] without the transaction: `$body` runs on a pooled connection in
/// autocommit mode (for a single statement, which is atomic on its own).
macro_rules! statement {
    ($backend:expr, $what:expr, |$conn:ident| $body:expr) => {{
        let backend = &$backend;
        let mut backoff = $crate::backoff::Backoff::new(backend.inner.retry_for);
        loop {
            let attempt: Result<_, $crate::postgres::retry::DbError> = async {
                let mut lease = $crate::postgres::lease::Lease::acquire(
                    &backend.inner.pool,
                    &backend.inner.orphans,
                    &backend.inner.warm,
                )
                .await?;
                let out = {
                    let $conn: &mut sqlx::PgConnection = lease.conn();
                    $body
                };
                lease.finish();
                Ok(out)
            }
            .await;
            let transient = matches!(&attempt, Err(e) if e.is_transient());
            if transient && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| backend.error($what, e));
        }
    }};
}

pub(crate) use {statement, transaction};
