//! [`PostgresJournal`]: journals in a PostgreSQL database, for runs whose workers live on
//! several machines.

use std::time::{Duration, Instant};

use agent_op::journal::{Entry, JOURNAL_VERSION, Journal, JournalError};
use agent_op::{BoxFuture, Cause};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Mutex;

use crate::group::{Batch, Pending, Turn, turn, wait};
use crate::row::{COLUMNS, entry_of_sqlx};

/// The advisory-lock class of journals (the first half of a two-key advisory lock).
const LOCK_CLASS: i32 = 0x6a6f_7572; // "jour"

/// How long connecting (or one statement) may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

const SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS effect_agents_journals (
    journal TEXT PRIMARY KEY NOT NULL,
    format_version INTEGER NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS effect_agents_journal_entries (
    journal TEXT NOT NULL,
    position BIGSERIAL,
    branch TEXT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    checksum BIGINT,
    PRIMARY KEY (journal, branch, seq)
)",
    // Tables made for format version 1 lack the column (their journals are refused by
    // version; new journals beside them need it). A row without one is refused.
    "ALTER TABLE effect_agents_journal_entries ADD COLUMN IF NOT EXISTS checksum BIGINT",
];

/// Named journals in a PostgreSQL database (tables `effect_agents_journals` and
/// `effect_agents_journal_entries`, created if missing).
///
/// The journal is held with a session advisory lock on its own connection: a second
/// writer, on any machine, gets [`JournalError::Locked`]; the lock goes when the writer's
/// connection does (the process died, the server restarted). If the connection breaks, the
/// next append reconnects (retrying for up to `reconnect_for`, 60 seconds by default),
/// takes the lock again, and commits: entries are inserted idempotently, so an entry whose
/// commit was acknowledged just before the break is not duplicated. Commits are synchronous
/// (`synchronous_commit = on` for the journal's session, whatever the server's default): an
/// acknowledged entry survives a server crash.
pub struct PostgresJournal {
    options: PgConnectOptions,
    name: String,
    describe: String,
    reconnect_for: Duration,
    conn: Mutex<Option<PgConnection>>,
    pending: Pending,
}

impl std::fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("journal", &self.describe)
            .finish_non_exhaustive()
    }
}

impl PostgresJournal {
    /// Opens (creating if missing) the journal `name` in the database at `url`
    /// (`postgres://user:password@host/db`), and takes its lock.
    pub async fn open(url: &str, name: &str) -> Result<PostgresJournal, JournalError> {
        let describe = format!("postgres journal `{name}`");
        let options: PgConnectOptions = url.parse().map_err(|e| JournalError::Database {
            journal: describe.clone(),
            cause: Cause::new(e),
        })?;
        let journal = PostgresJournal {
            options: options.disable_statement_logging(),
            name: name.to_owned(),
            describe,
            reconnect_for: Duration::from_secs(60),
            conn: Mutex::new(None),
            pending: Pending::default(),
        };
        let conn = journal.connect().await?;
        *journal.conn.lock().await = Some(conn);
        Ok(journal)
    }

    /// How long an append keeps trying to reconnect after the connection broke (default 60
    /// seconds).
    pub fn reconnect_for(mut self, limit: Duration) -> PostgresJournal {
        self.reconnect_for = limit;
        self
    }

    /// Releases the lock and closes the connection.
    pub async fn close(self) -> Result<(), JournalError> {
        if let Some(conn) = self.conn.lock().await.take() {
            conn.close().await.map_err(|e| self.database(e))?;
        }
        Ok(())
    }

    fn database(&self, e: sqlx::Error) -> JournalError {
        JournalError::Database {
            journal: self.describe.clone(),
            cause: Cause::new(e),
        }
    }

    /// Connects, creates the tables, checks the format version and takes the lock.
    fn connect(&self) -> BoxFuture<'_, Result<PgConnection, JournalError>> {
        Box::pin(self.connect_inner())
    }

    async fn connect_inner(&self) -> Result<PgConnection, JournalError> {
        let db = |e| self.database(e);
        let mut conn = tokio::time::timeout(STATEMENT_TIMEOUT, self.options.connect())
            .await
            .map_err(|_| self.timed_out("connecting"))?
            .map_err(db)?;
        // A journal entry is acknowledged only once it is on disk, whatever the server's
        // default (test servers and some managed ones turn synchronous commits off).
        sqlx::query("SET synchronous_commit = on")
            .execute(&mut conn)
            .await
            .map_err(db)?;
        let timeout = format!("SET statement_timeout = {}", STATEMENT_TIMEOUT.as_millis());
        sqlx::query(&timeout).execute(&mut conn).await.map_err(db)?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext($2))")
            .bind(LOCK_CLASS)
            .bind(&self.name)
            .fetch_one(&mut conn)
            .await
            .map_err(db)?;
        if !locked {
            return Err(JournalError::Locked {
                journal: self.describe.clone(),
                holder: None,
            });
        }
        // Concurrent first opens of different journals may race to create the tables.
        let mut tx = conn.begin().await.map_err(db)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, 0)")
            .bind(LOCK_CLASS)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&mut *tx).await.map_err(db)?;
        }
        sqlx::query(
            "INSERT INTO effect_agents_journals (journal, format_version) VALUES ($1, $2) \
             ON CONFLICT (journal) DO NOTHING",
        )
        .bind(&self.name)
        .bind(i32::try_from(JOURNAL_VERSION).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let version: i32 = sqlx::query_scalar(
            "SELECT format_version FROM effect_agents_journals WHERE journal = $1",
        )
        .bind(&self.name)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        if u32::try_from(version).ok() != Some(JOURNAL_VERSION) {
            return Err(JournalError::UnsupportedVersion {
                journal: self.describe.clone(),
                found: u32::try_from(version).unwrap_or(0),
            });
        }
        Ok(conn)
    }

    fn timed_out(&self, what: &str) -> JournalError {
        JournalError::Database {
            journal: self.describe.clone(),
            cause: Cause::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{what} took longer than {STATEMENT_TIMEOUT:?}"),
            )),
        }
    }

    /// Runs `work` on the connection, reconnecting (and retrying `work`) while the failure
    /// is a broken connection and `reconnect_for` has not passed.
    async fn with_conn(
        &self,
        guard: &mut Option<PgConnection>,
        work: Work<'_>,
    ) -> Result<Done, JournalError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            if guard.is_none() {
                match self.connect().await {
                    Ok(conn) => *guard = Some(conn),
                    Err(
                        e @ (JournalError::Locked { .. } | JournalError::UnsupportedVersion { .. }),
                    ) => {
                        return Err(e);
                    }
                    Err(e) if started.elapsed() >= self.reconnect_for => return Err(e),
                    Err(_) => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(2));
                        continue;
                    }
                }
            }
            let Some(conn) = guard.as_mut() else { continue };
            match tokio::time::timeout(STATEMENT_TIMEOUT, self.run(conn, &work)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if !broken(&e) => return Err(self.database(e)),
                Ok(Err(e)) if started.elapsed() >= self.reconnect_for => {
                    *guard = None;
                    return Err(self.database(e));
                }
                Err(_) if started.elapsed() >= self.reconnect_for => {
                    *guard = None;
                    return Err(self.timed_out("a statement"));
                }
                // A broken connection (or a statement that hung): start over on a new one.
                Ok(Err(_)) | Err(_) => *guard = None,
            }
        }
    }
}

/// Whether `e` means the connection is gone (rather than the statement being wrong).
fn broken(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        // admin_shutdown, crash_shutdown, cannot_connect_now (a restarting server).
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("57P01" | "57P02" | "57P03"))
        }
        _ => false,
    }
}

impl Journal for PostgresJournal {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        Box::pin(async move {
            let mut guard = self.conn.lock().await;
            let rows = match self.with_conn(&mut guard, Work::Read).await? {
                Done::Rows(rows) => rows,
                Done::Inserted => Vec::new(),
            };
            rows.iter()
                .enumerate()
                .map(|(i, row)| entry_of_sqlx(&self.describe, i, row))
                .collect()
        })
    }

    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        Box::pin(async move {
            let mut answered = self.pending.push(entries);
            let guard = match turn(&self.describe, &mut answered, self.conn.lock()).await {
                Turn::Answered(result) => return result,
                Turn::Writer(guard) => guard,
            };
            // Boxed: every append's future would otherwise carry the commit's state.
            Box::pin(self.commit(guard, self.pending.take())).await;
            wait(&self.describe, answered).await
        })
    }
}

impl PostgresJournal {
    /// Commits `batch` on the connection `guard` holds and answers its waiters.
    async fn commit(
        &self,
        mut guard: tokio::sync::MutexGuard<'_, Option<PgConnection>>,
        batch: Batch,
    ) {
        if batch.is_empty() {
            return;
        }
        let result = self
            .with_conn(&mut guard, Work::Insert(&batch))
            .await
            .map(drop);
        drop(guard);
        batch.waiters.answer(&result);
    }
}

/// What [`PostgresJournal::with_conn`] does on the connection.
enum Work<'a> {
    Read,
    Insert(&'a Batch),
}

enum Done {
    Rows(Vec<sqlx::postgres::PgRow>),
    Inserted,
}

impl PostgresJournal {
    /// Boxed: proving the driver's futures `Send` for every lifetime trips the compiler when
    /// they are awaited inside the journal's boxed futures directly.
    fn run<'c>(
        &'c self,
        conn: &'c mut PgConnection,
        work: &'c Work<'_>,
    ) -> BoxFuture<'c, Result<Done, sqlx::Error>> {
        Box::pin(async move {
            match work {
                Work::Read => {
                    let sql = format!(
                        "SELECT {COLUMNS} FROM effect_agents_journal_entries \
                         WHERE journal = $1 ORDER BY position"
                    );
                    sqlx::query(&sql)
                        .bind(&self.name)
                        .fetch_all(&mut *conn)
                        .await
                        .map(Done::Rows)
                }
                Work::Insert(entries) => self.insert(conn, entries).await.map(|()| Done::Inserted),
            }
        })
    }

    /// Inserts `entries` in one transaction, with one statement (arrays unnested), skipping
    /// any already there (a commit acknowledged just before the connection broke).
    async fn insert(&self, conn: &mut PgConnection, batch: &Batch) -> Result<(), sqlx::Error> {
        // Borrowed: a broken connection retries with the same entries.
        let rows = batch.checksums.len();
        let mut branches = Vec::with_capacity(rows);
        let mut seqs = Vec::with_capacity(rows);
        let mut kinds = Vec::with_capacity(rows);
        let mut fingerprints = Vec::with_capacity(rows);
        let mut requests = Vec::with_capacity(rows);
        let mut results = Vec::with_capacity(rows);
        let mut checksums = Vec::with_capacity(rows);
        for (e, checksum) in batch.appends.iter().flatten().zip(&batch.checksums) {
            branches.push(e.key.branch.as_str());
            seqs.push(i64::try_from(e.key.seq).unwrap_or(i64::MAX));
            kinds.push(e.kind.as_str());
            fingerprints.push(e.fingerprint.as_str());
            requests.push(e.request.get());
            results.push(e.result.get());
            checksums.push(i64::from(*checksum));
        }
        sqlx::query(
            "INSERT INTO effect_agents_journal_entries \
               (journal, branch, seq, kind, fingerprint, request, result, checksum) \
             SELECT $1, * FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::text[], \
               $6::text[], $7::text[], $8::bigint[]) \
             ON CONFLICT (journal, branch, seq) DO NOTHING",
        )
        .bind(&self.name)
        .bind(branches)
        .bind(seqs)
        .bind(kinds)
        .bind(fingerprints)
        .bind(requests)
        .bind(results)
        .bind(checksums)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
