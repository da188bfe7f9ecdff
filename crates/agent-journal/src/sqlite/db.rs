//! The journal database itself: opening and checking it, appending rows, reading them back.
//! Everything here runs on the journal's own thread (see `writer`), which owns the
//! connection.

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use agent_op::Cause;
use agent_op::journal::{Entry, JOURNAL_VERSION, JournalError};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags, Statement};

use super::Durability;
use crate::row::{self, COLUMNS};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS journal_meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS journal_entries (
    position INTEGER PRIMARY KEY,
    branch TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    checksum INTEGER NOT NULL,
    UNIQUE (branch, seq)
);";

/// Opens (creating if missing) the journal database at `path`, checks an `existed` one,
/// and takes its exclusive lock for the connection's life (exclusive locking mode), creating
/// the tables if new. A refused database is closed before this returns: its lock does not
/// outlive the refusal.
pub(super) fn open(
    name: &str,
    path: &Path,
    durability: Durability,
    existed: bool,
) -> Result<Connection, JournalError> {
    let conn = Connection::open(path).map_err(|e| database(name, e))?;
    match prepare(name, &conn, durability, existed) {
        Ok(()) => Ok(conn),
        Err(JournalError::Locked { .. }) if existed => {
            drop(conn);
            // SQLite answers "locked" for some damaged files too: tell them apart.
            Err(diagnose_locked(name, path))
        }
        Err(e) => Err(e),
    }
}

/// Sets the connection up, checks an `existed` journal, takes the lock and makes the tables.
fn prepare(
    name: &str,
    conn: &Connection,
    durability: Durability,
    existed: bool,
) -> Result<(), JournalError> {
    let db = |e: rusqlite::Error| database(name, e);
    // Refuse at once rather than wait: the other writer holds the lock for its life.
    conn.busy_timeout(Duration::ZERO).map_err(db)?;
    // A new journal's pages hold 16 KiB (SQLite's default is 4): a journal is appended to
    // and read whole, and larger pages take fewer B-tree steps per row (a durable fan-out of
    // 10,000 calls took 8 % less time) and fill the 1,000-page write-ahead log four times
    // later, so it is checkpointed four times less often. Set first: it applies only before
    // the database is written.
    conn.pragma_update(None, "page_size", 16384).map_err(db)?;
    // Exclusive before WAL: the log's index then lives in this process's memory, not in a
    // `-shm` file other processes could map.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(db)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(db)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(JournalError::Database {
            journal: name.to_owned(),
            cause: Cause::new(std::io::Error::other(format!(
                "SQLite kept the journal mode `{mode}` instead of WAL"
            ))),
        });
    }
    let synchronous = match durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", synchronous)
        .map_err(db)?;
    // A wide fan-out commits thousands of entries at once: with SQLite's default 2 MiB page
    // cache their pages went to the log before the commit and again at it, and each
    // statement's undo journal went to a temporary file.
    conn.pragma_update(None, "cache_size", -16384).map_err(db)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(db)?;
    if existed {
        check_existing(name, conn)?;
    }
    // Takes the exclusive lock now, so a second writer is refused at open, not at its first
    // append.
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         {SCHEMA}
         INSERT OR IGNORE INTO journal_meta (key, value) VALUES ('format_version', '{JOURNAL_VERSION}');
         COMMIT;"
    ))
    .map_err(|e| {
        // A failed statement leaves the transaction open: end it so the lock goes with the
        // connection.
        let _ = conn.execute_batch("ROLLBACK");
        db(e)
    })
}

/// Why opening the journal at `path` was answered "locked": another writer holds it
/// ([`JournalError::Locked`]), or the file is damaged, which a plain connection (no WAL, no
/// exclusive mode) reading its schema and checking its pages tells.
fn diagnose_locked(name: &str, path: &Path) -> JournalError {
    let locked = JournalError::Locked {
        journal: name.to_owned(),
        holder: None,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let Ok(conn) = Connection::open_with_flags(path, flags) else {
        return locked;
    };
    // Another writer may be letting go of it: give it a moment.
    if conn.busy_timeout(Duration::from_millis(250)).is_err() {
        return locked;
    }
    let checked: Result<Vec<String>, rusqlite::Error> = conn
        .prepare("PRAGMA quick_check(1)")
        .and_then(|mut check| check.query_map([], |row| row.get(0))?.collect());
    drop(conn);
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
fn check_existing(name: &str, conn: &Connection) -> Result<(), JournalError> {
    let db = |e: rusqlite::Error| database(name, e);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut tables| tables.query_map([], |row| row.get(0))?.collect())
        .map_err(db)?;
    let has = |table: &str| tables.iter().any(|t| t == table);
    if has("journal_meta") && !has("journal_entries") {
        // Both are made in one transaction: one without the other is damage.
        return Err(JournalError::Malformed {
            journal: name.to_owned(),
            at: "its tables".into(),
            cause: Cause::new(std::io::Error::other(
                "it has no journal_entries table (damaged?)",
            )),
        });
    }
    if !has("journal_meta") {
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
    let version: Option<String> = conn
        .prepare("SELECT value FROM journal_meta WHERE key = 'format_version'")
        .and_then(|mut version| {
            let mut rows = version.query([])?;
            match rows.next()? {
                // Anything but text (a damaged row) is no readable version.
                Some(row) => Ok(row.get::<_, String>(0).ok()),
                None => Ok(None),
            }
        })
        .map_err(db)?;
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
/// (The driver reads SQLite's messages as lossy text: a damaged file's message quoting bytes
/// that are not UTF-8 can still be shown.)
pub(super) fn database(name: &str, e: rusqlite::Error) -> JournalError {
    if let rusqlite::Error::SqliteFailure(failure, _) = &e
        && matches!(
            failure.code,
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked
        )
    {
        return JournalError::Locked {
            journal: name.to_owned(),
            holder: None,
        };
    }
    JournalError::Database {
        journal: name.to_owned(),
        cause: Cause::new(e),
    }
}

/// Rows per `INSERT` statement, for all but a batch's last few: one statement per row costs
/// SQLite a statement's start and end each, which a large group commit feels.
pub(super) const ROWS_PER_STATEMENT: usize = 50;

/// The statements inserting [`ROWS_PER_STATEMENT`] rows and one row: written once, since
/// their text is also what finds them in the connection's statement cache at every commit.
static INSERT_MANY: LazyLock<String> = LazyLock::new(|| insert_sql(ROWS_PER_STATEMENT));
static INSERT_ONE: LazyLock<String> = LazyLock::new(|| insert_sql(1));

/// The statement inserting `rows` rows, in the columns' order.
fn insert_sql(rows: usize) -> String {
    const INSERT: &str = "INSERT INTO journal_entries \
                          (branch, seq, kind, fingerprint, request, result, checksum) VALUES ";
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?)";
    let mut sql = String::with_capacity(INSERT.len() + (ROW.len() + 1) * rows);
    sql.push_str(INSERT);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(ROW);
    }
    sql
}

/// Appends `entries`, in order, with their `checksums`, atomically (one transaction). The
/// texts are bound as they are: SQLite copies them into the statement.
pub(super) fn insert<'e>(
    name: &str,
    conn: &mut Connection,
    entries: impl Iterator<Item = &'e Entry>,
    checksums: &[u32],
) -> Result<(), JournalError> {
    let db = |e: rusqlite::Error| database(name, e);
    let tx = conn.transaction().map_err(db)?;
    {
        let mut many = tx.prepare_cached(&INSERT_MANY).map_err(db)?;
        let mut one = tx.prepare_cached(&INSERT_ONE).map_err(db)?;
        let mut rows = entries.zip(checksums.iter().copied());
        let mut left = checksums.len();
        while left > 0 {
            let (statement, take) = if left >= ROWS_PER_STATEMENT {
                (&mut many, ROWS_PER_STATEMENT)
            } else {
                (&mut one, 1)
            };
            for (row, (entry, checksum)) in rows.by_ref().take(take).enumerate() {
                bind_row(statement, row * 7, entry, checksum).map_err(db)?;
            }
            statement.raw_execute().map_err(db)?;
            left -= take;
        }
    }
    // Dropped uncommitted (an error above), the transaction rolls back: none of the rows stay.
    tx.commit().map_err(db)
}

/// Binds `entry`'s row, with its `checksum`, to the parameters after `offset` (1-based).
fn bind_row(
    statement: &mut Statement<'_>,
    offset: usize,
    entry: &Entry,
    checksum: u32,
) -> Result<(), rusqlite::Error> {
    statement.raw_bind_parameter(offset + 1, entry.key.branch.as_str())?;
    statement.raw_bind_parameter(offset + 2, i64::try_from(entry.key.seq).unwrap_or(i64::MAX))?;
    statement.raw_bind_parameter(offset + 3, entry.kind.as_str())?;
    statement.raw_bind_parameter(offset + 4, entry.fingerprint.as_str())?;
    statement.raw_bind_parameter(offset + 5, entry.request.get())?;
    statement.raw_bind_parameter(offset + 6, entry.result.get())?;
    statement.raw_bind_parameter(offset + 7, i64::from(checksum))
}

/// Every entry of the journal, in order. Bytes read from the database are never trusted: a
/// column of the wrong type, text that is not UTF-8 or a number out of range is
/// [`JournalError::Malformed`] naming the row, and a row whose checksum does not match what
/// it holds is [`JournalError::ChecksumMismatch`].
pub(super) fn entries(name: &str, conn: &Connection) -> Result<Vec<Entry>, JournalError> {
    let db = |e: rusqlite::Error| database(name, e);
    let sql = format!("SELECT {COLUMNS} FROM journal_entries ORDER BY position");
    let mut select = conn.prepare_cached(&sql).map_err(db)?;
    let mut rows = select.query([]).map_err(db)?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        entries.push(entry_of(name, entries.len(), row)?);
    }
    Ok(entries)
}

/// The entry of `row` (the `index`th of its query): see [`row::entry_of`].
fn entry_of(name: &str, index: usize, row: &rusqlite::Row<'_>) -> Result<Entry, JournalError> {
    let wrong = |i: usize, found: ValueRef<'_>, wanted: &str| {
        Cause::new(std::io::Error::other(format!(
            "column {i} holds {}, not {wanted}",
            found.data_type()
        )))
    };
    row::entry_of(
        name,
        index,
        |i| match row.get_ref(i).map_err(Cause::new)? {
            ValueRef::Integer(n) => Ok(n),
            other => Err(wrong(i, other, "an integer")),
        },
        |i| match row.get_ref(i).map_err(Cause::new)? {
            ValueRef::Text(bytes) => std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(Cause::new),
            other => Err(wrong(i, other, "text")),
        },
    )
}
