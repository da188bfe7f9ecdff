//! [`SqliteJournal`]: a journal in a SQLite database, one row per entry.
//!
//! `writer` is the journal's own thread, which owns the connection; `db` is what it does
//! with it (open and check the database, append rows, read them back).

mod db;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_op::BoxFuture;
use agent_op::Cause;
use agent_op::journal::{Entry, Journal, JournalError};
use tokio::sync::oneshot;

use crate::group::wait;

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
/// The database is worked on by a thread of the journal's own, so no executor's thread
/// ever waits for SQLite. An append queues its entries and waits for their commit; the
/// thread commits everything queued in one transaction, so appends that arrive while a
/// commit is under way are committed together by the next one (a wide `par` pays for a
/// few commits, not one per branch). A commit, once queued, happens even if the append
/// that queued it is dropped. Close the journal ([`close`](SqliteJournal::close)) to
/// release its file: it waits for what is queued. Dropped, the journal closes in the
/// background.
///
/// ```
/// use agent_journal::{Journal, SqliteJournal};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let journal = SqliteJournal::open(dir.path().join("run.db")).await.unwrap();
/// assert!(journal.entries().await.unwrap().is_empty());
/// journal.close().await.unwrap();
/// # });
/// ```
pub struct SqliteJournal {
    path: PathBuf,
    /// The path as text, for messages.
    name: Arc<str>,
    /// What this handle and the journal's thread share.
    shared: Arc<writer::Shared>,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

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
        let name: Arc<str> = path.display().to_string().into();
        let existed = std::fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        let (opened, answer) = oneshot::channel();
        let shared = writer::start(Arc::clone(&name), path.clone(), durability, existed, opened)?;
        match answer.await {
            Ok(Ok(())) => Ok(SqliteJournal { path, name, shared }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(stopped(&name)),
        }
    }

    /// The database file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the database once what is queued is committed, releasing its lock (dropping
    /// the journal does too, in the background).
    pub async fn close(self) -> Result<(), JournalError> {
        let (tx, rx) = oneshot::channel();
        self.shared.close(Some(tx));
        rx.await.unwrap_or_else(|_| Err(stopped(&self.name)))
    }
}

impl Drop for SqliteJournal {
    fn drop(&mut self) {
        self.shared.close(None);
    }
}

/// The error of an answer the journal's thread never gave: it stopped (it panicked).
fn stopped(name: &str) -> JournalError {
    JournalError::Io {
        journal: name.to_owned(),
        cause: Cause::new(std::io::Error::other(
            "the journal's thread stopped before it answered",
        )),
    }
}

impl Journal for SqliteJournal {
    fn describe(&self) -> String {
        self.name.to_string()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        Box::pin(async move {
            let read = self.shared.read();
            read.await.unwrap_or_else(|_| Err(stopped(&self.name)))
        })
    }

    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        // Queued now, not when first polled: the commit happens even if this is dropped
        // unpolled, in the order appends were made.
        let answered = self.shared.append(entries);
        Box::pin(wait(&self.name, answered))
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use agent_op::journal::{EntryKind, Key, fingerprint};
    use serde_json::json;

    use super::db::ROWS_PER_STATEMENT;
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
        rusqlite::Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE memories (id TEXT)")
            .unwrap();
        let err = SqliteJournal::open(&foreign).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("not a journal database (it holds the tables: memories)"),
            "{err}"
        );

        let newer = dir.path().join("newer.db");
        let journal = SqliteJournal::open(&newer).await.unwrap();
        journal
            .shared
            .execute("UPDATE journal_meta SET value = '7' WHERE key = 'format_version'")
            .await
            .unwrap()
            .unwrap();
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
            journal.shared.execute(sql).await.unwrap().unwrap();
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
