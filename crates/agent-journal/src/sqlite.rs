//! [`SqliteJournal`]: a journal in a SQLite database, one row per entry.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use agent_op::journal::{Entry, JOURNAL_VERSION, Journal, JournalError};
use agent_op::{BoxFuture, Cause};
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqliteSynchronous,
};
use sqlx::{Arguments, ConnectOptions, Connection, SqliteConnection};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::group::{Batch, Pending, Turn, turn, wait};
use crate::row::{COLUMNS, entry_of};

/// How hard SQLite works to make a commit survive a crash.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = NORMAL` in WAL mode (the default): a committed entry survives the
    /// process being killed (SIGKILL) at any moment; a power loss may roll back the last
    /// commits, never corrupt the file.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is `fsync`ed, so it also survives power loss.
    Full,
}

/// A journal in a SQLite database file: the default for durable runs.
///
/// The database holds one journal. It is opened in exclusive locking mode, so while one
/// handle is open no other process (or handle) can write it or read it: a second opener
/// gets [`JournalError::Locked`]. A file that is not a journal database (another SQLite
/// database, a damaged or foreign file) is refused with a clear error, never replaced.
///
/// Appends that arrive while a commit is under way are committed together by the next one.
/// The append that starts a commit hands it to SQLite at once; within a tokio runtime the
/// commit then finishes on a task of its own, committing whatever else was queued meanwhile,
/// so it neither waits for the appending task to come back to it (in a wide `par`, that task
/// polls thousands of branches first) nor stops if that append is dropped. Close the journal
/// ([`close`](SqliteJournal::close)) to release its file: it waits for a commit under way.
///
/// ```
/// use agent_journal::{Journal, SqliteJournal};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let journal = SqliteJournal::open(dir.path().join("run.db")).await.unwrap();
/// assert!(journal.entries().await.unwrap().is_empty());
/// # });
/// ```
pub struct SqliteJournal {
    path: PathBuf,
    /// The path as text, for messages.
    name: Arc<str>,
    /// Shared with the commit under way (see [`Commit`]).
    conn: Arc<Mutex<Option<SqliteConnection>>>,
    pending: Arc<Pending>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

const SCHEMA: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS journal_meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS journal_entries (
    position INTEGER PRIMARY KEY,
    branch TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    checksum INTEGER NOT NULL,
    UNIQUE (branch, seq)
)",
];

impl SqliteJournal {
    /// Opens (creating if missing) the journal database at `path` with the default
    /// [`Durability`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteJournal, JournalError> {
        SqliteJournal::open_with(path, Durability::default()).await
    }

    /// Opens (creating if missing) the journal database at `path`.
    pub async fn open_with(
        path: impl AsRef<Path>,
        durability: Durability,
    ) -> Result<SqliteJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let name = path.display().to_string();
        let existed = std::fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .locking_mode(SqliteLockingMode::Exclusive)
            .synchronous(match durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            })
            // Refuse at once rather than wait: the other writer holds the lock for its life.
            .busy_timeout(Duration::ZERO)
            // A wide fan-out commits thousands of entries at once: with SQLite's default
            // 2 MiB page cache their pages went to the WAL before the commit and again at
            // it, and each statement's undo journal went to a temporary file.
            .pragma("cache_size", "-16384")
            // A new journal's pages hold 16 KiB (SQLite's default is 4): a journal is
            // appended to and read whole, and larger pages take fewer B-tree steps per row
            // (about 15 % less time per appended entry here) and fill the 1,000-page
            // write-ahead log four times later, so its checkpoint comes four times less often.
            .page_size(16384)
            .pragma("temp_store", "memory")
            .disable_statement_logging();
        let conn = match connect(&name, &options, existed).await {
            // SQLite answers "locked" for some damaged files too: tell them apart.
            Err(JournalError::Locked { .. }) if existed => Err(diagnose_locked(&name, &path).await),
            other => other,
        }?;
        Ok(SqliteJournal {
            path,
            name: name.into(),
            conn: Arc::new(Mutex::new(Some(conn))),
            pending: Arc::default(),
        })
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the database, releasing its lock (dropping the journal does too).
    pub async fn close(self) -> Result<(), JournalError> {
        let name = self.describe();
        if let Some(conn) = self.conn.lock().await.take() {
            conn.close().await.map_err(|e| database(&name, e))?;
        }
        Ok(())
    }
}

/// Connects to the journal database, checks an `existed` one, and takes its exclusive lock
/// (kept: exclusive locking mode), creating the tables if new.
async fn connect(
    name: &str,
    options: &SqliteConnectOptions,
    existed: bool,
) -> Result<SqliteConnection, JournalError> {
    let mut conn = options.connect().await.map_err(|e| database(name, e))?;
    match prepare(name, &mut conn, existed).await {
        Ok(()) => Ok(conn),
        Err(e) => {
            // Closed now, not in the background: its lock must not outlive the refusal.
            let _ = conn.close().await;
            Err(e)
        }
    }
}

/// Checks an `existed` journal database and takes its exclusive lock, creating the tables
/// if new.
async fn prepare(
    name: &str,
    conn: &mut SqliteConnection,
    existed: bool,
) -> Result<(), JournalError> {
    let db = |e: sqlx::Error| database(name, e);
    if existed {
        check_existing(name, conn).await?;
    }
    // Takes the exclusive lock now, so a second writer is refused at open, not at its first
    // append.
    let mut tx = conn.begin().await.map_err(db)?;
    // One `query` per statement: `raw_sql`'s future is not `Send` for every lifetime, so
    // `open` could not be spawned (sqlx 0.8).
    for statement in SCHEMA {
        sqlx::query(statement).execute(&mut *tx).await.map_err(db)?;
    }
    sqlx::query("INSERT OR IGNORE INTO journal_meta (key, value) VALUES ('format_version', ?)")
        .bind(JOURNAL_VERSION.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    tx.commit().await.map_err(db)
}

/// Why opening the journal at `path` was answered "locked": another writer holds it
/// ([`JournalError::Locked`]), or the file is damaged, which a plain connection (no WAL, no
/// exclusive mode) reading its schema and checking its pages tells.
async fn diagnose_locked(name: &str, path: &Path) -> JournalError {
    let locked = JournalError::Locked {
        journal: name.to_owned(),
        holder: None,
    };
    // A refused connection is closed on the driver's thread, maybe not yet: give it a
    // moment to let go of its lock.
    let options = SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(Duration::from_millis(250))
        .disable_statement_logging();
    let Ok(mut conn) = options.connect().await else {
        return locked;
    };
    let checked: Result<Vec<String>, sqlx::Error> = sqlx::query_scalar("PRAGMA quick_check(1)")
        .fetch_all(&mut conn)
        .await;
    let _ = conn.close().await;
    match checked {
        Err(e) => match database(name, e) {
            JournalError::Locked { .. } => locked,
            damaged => damaged,
        },
        Ok(found) if found.iter().all(|row| row == "ok") => locked,
        Ok(found) => JournalError::Malformed {
            journal: name.to_owned(),
            at: "its pages".into(),
            cause: Cause::new(std::io::Error::other(found.join("; "))),
        },
    }
}

/// Refuses a database that is not a journal of this format (a foreign database, another
/// version), and reports a damaged file (or one another writer holds) as such.
async fn check_existing(name: &str, conn: &mut SqliteConnection) -> Result<(), JournalError> {
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| database(name, e))?;
    if tables.iter().any(|t| t == "journal_meta") && !tables.iter().any(|t| t == "journal_entries")
    {
        // Both are made in one transaction: one without the other is damage.
        return Err(JournalError::Malformed {
            journal: name.to_owned(),
            at: "its tables".into(),
            cause: Cause::new(std::io::Error::other(
                "it has no journal_entries table (damaged?)",
            )),
        });
    }
    if !tables.iter().any(|t| t == "journal_meta") {
        return Err(JournalError::Malformed {
            journal: name.to_owned(),
            at: "its tables".into(),
            cause: Cause::new(std::io::Error::other(format!(
                "not a journal database (it holds the tables: {})",
                if tables.is_empty() {
                    "none".to_owned()
                } else {
                    tables.join(", ")
                }
            ))),
        });
    }
    let version: Option<String> =
        sqlx::query_scalar("SELECT value FROM journal_meta WHERE key = 'format_version'")
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| database(name, e))?;
    match version.as_deref().map(str::parse::<u32>) {
        Some(Ok(v)) if v == JOURNAL_VERSION => Ok(()),
        Some(Ok(found)) => Err(JournalError::UnsupportedVersion {
            journal: name.to_owned(),
            found,
        }),
        _ => Err(JournalError::Malformed {
            journal: name.to_owned(),
            at: "journal_meta".into(),
            cause: Cause::new(std::io::Error::other("no readable format_version")),
        }),
    }
}

/// A driver error as a journal error: a lock held elsewhere is [`JournalError::Locked`].
fn database(name: &str, e: sqlx::Error) -> JournalError {
    if let sqlx::Error::Database(db) = &e {
        // sqlx takes SQLite's message as UTF-8 unchecked, and a damaged file's message can
        // quote bytes that are not: formatting such an error panics. Kept as lossy text.
        let bytes = db.message().as_bytes();
        if std::str::from_utf8(bytes).is_err() {
            let code = db.code().unwrap_or_default();
            let message = String::from_utf8_lossy(bytes);
            return JournalError::Database {
                journal: name.to_owned(),
                cause: Cause::new(std::io::Error::other(format!(
                    "SQLite error {code}: {message}"
                ))),
            };
        }
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with or without extended codes.
        let busy = db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6));
        if busy {
            return JournalError::Locked {
                journal: name.to_owned(),
                holder: None,
            };
        }
    }
    JournalError::Database {
        journal: name.to_owned(),
        cause: Cause::new(e),
    }
}

impl Journal for SqliteJournal {
    fn describe(&self) -> String {
        self.name.to_string()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        Box::pin(async move {
            let name = &self.name;
            let mut guard = self.conn.lock().await;
            let conn = open_conn(name, &mut guard)?;
            let sql = format!("SELECT {COLUMNS} FROM journal_entries ORDER BY position");
            let rows = sqlx::query(&sql)
                .fetch_all(conn)
                .await
                .map_err(|e| database(name, e))?;
            rows.iter()
                .enumerate()
                .map(|(i, row)| entry_of(name, i, row))
                .collect()
        })
    }

    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        Box::pin(async move {
            let name = &self.name;
            let mut answered = self.pending.push(entries);
            let lock = Arc::clone(&self.conn).lock_owned();
            let guard = match turn(name, &mut answered, lock).await {
                Turn::Answered(result) => return result,
                Turn::Writer(guard) => guard,
            };
            // Boxed: every append's future would otherwise carry the commit's state (the
            // driver's futures, the statements), allocated and moved with each entry.
            let mut commit = Box::pin(
                Commit {
                    name: Arc::clone(name),
                    guard,
                    pending: Arc::clone(&self.pending),
                }
                .run(),
            );
            // Started here, so a lone append hands its statement to SQLite at once; finished
            // on a task of its own where there is a runtime, since this task may not come
            // back to it for long (in a wide `par` it polls thousands of branches first),
            // and the connection would stay taken meanwhile.
            let started = std::future::poll_fn(|cx| Poll::Ready(commit.as_mut().poll(cx))).await;
            if started.is_pending() {
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn(commit)),
                    Err(_) => commit.await,
                }
            }
            wait(name, answered).await
        })
    }
}

/// The writer's turn at the connection: it commits what is queued, group after group, until
/// nothing is.
struct Commit {
    name: Arc<str>,
    guard: OwnedMutexGuard<Option<SqliteConnection>>,
    pending: Arc<Pending>,
}

impl Commit {
    async fn run(mut self) {
        loop {
            let batch = self.pending.take();
            if batch.is_empty() {
                return;
            }
            let Batch {
                appends,
                checksums,
                waiters,
            } = batch;
            let result = match open_conn(&self.name, &mut self.guard) {
                Ok(conn) => insert(&self.name, conn, appends, checksums).await,
                Err(e) => Err(e),
            };
            if self.pending.is_empty() {
                // The last group: the connection is free before its appends return, so a
                // caller that closes the journal next finds it so.
                drop(self.guard);
                waiters.answer(&result);
                return;
            }
            waiters.answer(&result);
        }
    }
}

fn open_conn<'c>(
    name: &str,
    guard: &'c mut Option<SqliteConnection>,
) -> Result<&'c mut SqliteConnection, JournalError> {
    guard.as_mut().ok_or_else(|| JournalError::Io {
        journal: name.to_owned(),
        cause: Cause::new(std::io::Error::other("the journal is closed")),
    })
}

/// Rows per `INSERT` statement: one statement per row costs a round trip to the driver's
/// worker thread each, which dominates a large group commit.
const ROWS_PER_STATEMENT: usize = 200;

/// Inserts the entries of `appends`, in order, with their `checksums`, atomically: as one
/// statement when they fit in one (SQLite commits a statement on its own, one round trip to
/// the driver's thread), else in a transaction. Their text is moved into the statements'
/// arguments, not copied: the driver would copy borrowed text again to hand it to its own
/// thread.
async fn insert(
    name: &str,
    conn: &mut SqliteConnection,
    appends: Vec<Vec<Entry>>,
    checksums: Vec<u32>,
) -> Result<(), JournalError> {
    let db = |e: sqlx::Error| database(name, e);
    let total = checksums.len();
    // A batch of one kind (a fan-out's model calls) names it in the statement rather than
    // binding it to every row: the driver copies each bound text to its own thread.
    let mut kinds = appends.iter().flatten().map(|e| e.kind);
    let first = kinds.next();
    let kind = first.filter(|&first| kinds.all(|k| k == first));
    let mut entries = appends.into_iter().flatten().zip(checksums);
    let mut statement = |rows: usize| {
        let row = match kind {
            Some(kind) => format!(", (?, ?, '{}', ?, ?, ?, ?)", kind.as_str()),
            None => ROW.to_owned(),
        };
        let mut sql = String::with_capacity(INSERT.len() + row.len() * rows);
        sql.push_str(INSERT);
        for i in 0..rows {
            sql.push_str(if i == 0 { &row[2..] } else { &row });
        }
        let mut args = SqliteArguments::default();
        args.reserve(7 * rows, 0);
        for (entry, checksum) in entries.by_ref().take(rows) {
            bind_row(&mut args, entry, checksum, kind.is_none()).map_err(|e| {
                JournalError::Database {
                    journal: name.to_owned(),
                    cause: Cause::from_boxed(e),
                }
            })?;
        }
        Ok::<_, JournalError>((sql, args))
    };
    if total == 0 {
        return Ok(());
    }
    if total <= ROWS_PER_STATEMENT {
        let (sql, args) = statement(total)?;
        sqlx::query_with(&sql, args)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
        return Ok(());
    }
    let mut tx = conn.begin().await.map_err(db)?;
    let mut left = total;
    while left > 0 {
        let rows = left.min(ROWS_PER_STATEMENT);
        left -= rows;
        let (sql, args) = statement(rows)?;
        sqlx::query_with(&sql, args)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
    }
    tx.commit().await.map_err(db)
}

/// Adds `entry`'s row, with its `checksum`, to `args`, in the columns' order (its kind only
/// when `with_kind`: otherwise the statement names it).
fn bind_row(
    args: &mut SqliteArguments<'_>,
    entry: Entry,
    checksum: u32,
    with_kind: bool,
) -> Result<(), sqlx::error::BoxDynError> {
    args.add(entry.key.branch)?;
    args.add(i64::try_from(entry.key.seq).unwrap_or(i64::MAX))?;
    if with_kind {
        args.add(entry.kind.as_str())?;
    }
    args.add(entry.fingerprint)?;
    args.add(String::from(Box::<str>::from(entry.request)))?;
    args.add(String::from(Box::<str>::from(entry.result)))?;
    args.add(i64::from(checksum))
}

/// The statement [`insert`] adds rows to, and one row's placeholders (after a comma).
const INSERT: &str = "INSERT INTO journal_entries \
                      (branch, seq, kind, fingerprint, request, result, checksum) VALUES ";
const ROW: &str = ", (?, ?, ?, ?, ?, ?, ?)";

#[cfg(test)]
mod tests {
    use agent_op::journal::{EntryKind, Key, fingerprint};
    use serde_json::json;

    use super::*;

    fn entry(seq: u64) -> Entry {
        Entry {
            key: Key {
                branch: String::new(),
                seq,
            },
            kind: EntryKind::Tool,
            fingerprint: fingerprint(&json!({"tool": "t", "args": seq})),
            request: serde_json::value::to_raw_value(&json!({"tool": "t", "args": seq})).unwrap(),
            result: serde_json::value::to_raw_value(&json!({"Ok": seq * 2})).unwrap(),
        }
    }

    #[tokio::test]
    async fn entries_survive_reopening_in_order_and_concurrent_appends_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let journal = std::sync::Arc::new(SqliteJournal::open(&path).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..50u64 {
            let journal = journal.clone();
            tasks.push(tokio::spawn(async move {
                journal.append(vec![entry(i)]).await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let mut seen: Vec<u64> = journal
            .entries()
            .await
            .unwrap()
            .iter()
            .map(|e| e.key.seq)
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..50).collect::<Vec<_>>());
        std::sync::Arc::try_unwrap(journal)
            .unwrap()
            .close()
            .await
            .unwrap();
        let again = SqliteJournal::open(&path).await.unwrap();
        let read = again.entries().await.unwrap();
        assert_eq!(read.len(), 50);
        assert_eq!(read[0], entry(read[0].key.seq));
    }

    /// Every append (one per journaled effect of a durable run) allocates its future: the
    /// commit's state, which only the append that writes needs, is not part of it.
    #[tokio::test]
    async fn an_appends_future_stays_small() {
        let dir = tempfile::tempdir().unwrap();
        let journal = SqliteJournal::open(dir.path().join("small.db"))
            .await
            .unwrap();
        let append = journal.append(vec![entry(0)]);
        let size = std::mem::size_of_val(&*append);
        assert!(size <= 512, "{size}");
        append.await.unwrap();
    }

    /// A commit, once started, finishes even if the append that started it is dropped (a
    /// race loser cancelled mid-append): its entries are in the journal, and the connection
    /// is free for the next.
    #[tokio::test]
    async fn a_started_commit_outlives_its_dropped_append() {
        let dir = tempfile::tempdir().unwrap();
        let journal = SqliteJournal::open(dir.path().join("dropped.db"))
            .await
            .unwrap();
        let mut append = journal.append(vec![entry(0)]);
        // Polled once: the commit is started (and, but in a rare race, not yet finished).
        let _ = std::future::poll_fn(|cx| Poll::Ready(append.as_mut().poll(cx))).await;
        drop(append);
        journal.append(vec![entry(1)]).await.unwrap();
        assert_eq!(journal.entries().await.unwrap(), [entry(0), entry(1)]);
    }

    #[tokio::test]
    async fn empty_and_multi_statement_appends_commit_whole() {
        let dir = tempfile::tempdir().unwrap();
        let journal = SqliteJournal::open(dir.path().join("sizes.db"))
            .await
            .unwrap();
        journal.append(Vec::new()).await.unwrap();
        assert!(journal.entries().await.unwrap().is_empty());
        // More rows than one statement takes, then exactly one statement's worth.
        let many: Vec<Entry> = (0..ROWS_PER_STATEMENT as u64 * 2 + 3).map(entry).collect();
        journal.append(many.clone()).await.unwrap();
        let one: Vec<Entry> = (1000..1000 + ROWS_PER_STATEMENT as u64)
            .map(entry)
            .collect();
        journal.append(one.clone()).await.unwrap();
        let all: Vec<Entry> = many.into_iter().chain(one).collect();
        assert_eq!(journal.entries().await.unwrap(), all);
        // A batch that fails (a position already taken) leaves none of its rows behind.
        let clash = vec![entry(5000), entry(0)];
        journal.append(clash).await.unwrap_err();
        let big_clash: Vec<Entry> = (6000..6000 + ROWS_PER_STATEMENT as u64 + 1)
            .map(entry)
            .chain([entry(1)])
            .collect();
        journal.append(big_clash).await.unwrap_err();
        assert_eq!(journal.entries().await.unwrap(), all);
    }

    /// A batch of one kind names it in its statements; a batch of several binds it to each
    /// row. Both read back as they were given.
    #[tokio::test]
    async fn batches_of_one_kind_and_of_several_keep_their_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let journal = SqliteJournal::open(dir.path().join("kinds.db"))
            .await
            .unwrap();
        let of_kind = |seq: u64, kind: EntryKind| Entry { kind, ..entry(seq) };
        let mixed: Vec<Entry> = (0..ROWS_PER_STATEMENT as u64 + 5)
            .map(|seq| {
                let kind = [EntryKind::Model, EntryKind::Checkpoint, EntryKind::Outcome];
                of_kind(seq, kind[seq as usize % 3])
            })
            .collect();
        let models: Vec<Entry> = (1000..1000 + ROWS_PER_STATEMENT as u64 + 5)
            .map(|seq| of_kind(seq, EntryKind::Model))
            .collect();
        let one = vec![of_kind(5000, EntryKind::Random)];
        journal.append(mixed.clone()).await.unwrap();
        journal.append(models.clone()).await.unwrap();
        journal.append(one.clone()).await.unwrap();
        let all: Vec<Entry> = mixed.into_iter().chain(models).chain(one).collect();
        assert_eq!(journal.entries().await.unwrap(), all);
    }

    #[tokio::test]
    async fn a_second_writer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let first = SqliteJournal::open(&path).await.unwrap();
        first.append(vec![entry(0)]).await.unwrap();
        let err = SqliteJournal::open(&path).await.unwrap_err();
        assert!(matches!(err, JournalError::Locked { .. }), "{err:?}");
        first.close().await.unwrap();
        let reopened = SqliteJournal::open(&path).await.unwrap();
        assert_eq!(reopened.entries().await.unwrap(), [entry(0)]);
    }

    #[tokio::test]
    async fn corrupt_and_foreign_files_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.db");
        let bytes =
            b"this is not a database, and it is long enough to be mistaken for one.".repeat(80);
        std::fs::write(&garbage, &bytes).unwrap();
        let err = SqliteJournal::open(&garbage).await.unwrap_err();
        assert!(matches!(err, JournalError::Database { .. }), "{err:?}");
        assert!(err.to_string().contains("not a database"), "{err}");
        assert_eq!(
            std::fs::read(&garbage).unwrap(),
            bytes,
            "never a silent fresh start"
        );

        let foreign = dir.path().join("foreign.db");
        {
            let mut conn = SqliteConnectOptions::new()
                .filename(&foreign)
                .create_if_missing(true)
                .connect()
                .await
                .unwrap();
            sqlx::raw_sql("CREATE TABLE memories (id TEXT)")
                .execute(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
        }
        let err = SqliteJournal::open(&foreign).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("not a journal database (it holds the tables: memories)"),
            "{err}"
        );

        let newer = dir.path().join("newer.db");
        let journal = SqliteJournal::open(&newer).await.unwrap();
        {
            let mut guard = journal.conn.lock().await;
            sqlx::query("UPDATE journal_meta SET value = '7' WHERE key = 'format_version'")
                .execute(guard.as_mut().unwrap())
                .await
                .unwrap();
        }
        journal.close().await.unwrap();
        let err = SqliteJournal::open(&newer).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("format version 7; this library reads version 2"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn changed_and_undecodable_rows_are_refused_naming_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.db");
        let journal = SqliteJournal::open(&path).await.unwrap();
        journal.append(vec![entry(0), entry(1)]).await.unwrap();
        let exec = |sql: &'static str| async {
            let mut guard = journal.conn.lock().await;
            sqlx::query(sql)
                .execute(guard.as_mut().unwrap())
                .await
                .unwrap();
        };
        // A different value that is still valid JSON: only the checksum can tell.
        exec("UPDATE journal_entries SET result = '{\"Ok\":7}' WHERE seq = 1").await;
        let err = journal.entries().await.unwrap_err();
        assert!(
            matches!(&err, JournalError::ChecksumMismatch { at, .. } if at == "row 2"),
            "{err:?}"
        );
        // Text that is not UTF-8 (what a flipped byte in the file gives) is a typed error,
        // not a panic in the driver's decoding.
        exec("UPDATE journal_entries SET result = CAST(X'7B22FF22' AS TEXT) WHERE seq = 1").await;
        let err = journal.entries().await.unwrap_err();
        assert!(
            matches!(&err, JournalError::Malformed { at, .. } if at == "row 2"),
            "{err:?}"
        );
        exec("UPDATE journal_entries SET checksum = 'none' WHERE seq = 0").await;
        let err = journal.entries().await.unwrap_err();
        assert!(
            matches!(&err, JournalError::Malformed { at, .. } if at == "row 1"),
            "{err:?}"
        );
    }

    /// A schema damaged into bytes that are not UTF-8: SQLite's message quotes them, and
    /// sqlx takes that message as UTF-8 unchecked. Opening fails with an error that shows.
    #[tokio::test]
    async fn a_schema_damaged_into_invalid_text_is_an_error_that_can_be_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.db");
        let journal = SqliteJournal::open(&path).await.unwrap();
        journal.append(vec![entry(0)]).await.unwrap();
        journal.close().await.unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let statement = b"CREATE TABLE journal_entries";
        let at = bytes
            .windows(statement.len())
            .position(|w| w == statement)
            .expect("the schema is in the file");
        bytes[at + statement.len() + 1] = 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = SqliteJournal::open(&path).await.unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains('\u{fffd}'), "{shown}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");
    }
}
