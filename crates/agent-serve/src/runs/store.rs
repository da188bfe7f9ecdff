//! [`Store`]: runs, threads, their events and journals in one SQLite database.
//!
//! One thread owns the connection. Callers queue jobs; the thread runs everything queued in
//! one transaction (each job under a savepoint of its own, so one job's failure leaves the
//! others' work), commits, and only then answers: what a caller was told is written survives
//! a SIGKILL, and a thousand runs a second cost a few hundred commits, not thousands.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use tokio::sync::oneshot;

use super::event::{Numbered, RunEvent};
use super::record::{
    Failure, Multitask, RunRecord, RunStatus, Spent, ThreadRecord, ThreadState, ThreadStatus, Turn,
};

/// The most jobs committed in one transaction.
const BATCH: usize = 512;

/// Why the store could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened or set up.
    #[error("cannot open the store {path}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error("the store failed while {doing}")]
    Database {
        /// What the store was doing.
        doing: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored value is not what this version writes (a damaged or foreign database).
    #[error("the store holds a malformed {what}: {detail}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The store's thread has stopped.
    #[error("the store is closed")]
    Closed,
}

/// What a job does once the transaction it ran in is committed (or failed to be).
type Done = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;
/// A unit of work on the connection.
/// A unit of work on the connection: whether it succeeded (a failed one's writes are rolled
/// back), and what to do after the commit.
type Job = Box<dyn FnOnce(&Connection) -> (bool, Done) + Send>;

/// The database of runs, threads, events and journals. Clones share it.
#[derive(Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    path: Arc<Path>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    turns TEXT NOT NULL,
    last_output TEXT
);
CREATE TABLE IF NOT EXISTS thread_states (
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    turns TEXT NOT NULL,
    output TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    thread_id TEXT,
    agent TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    status TEXT NOT NULL,
    metadata TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT,
    failure TEXT,
    spent TEXT NOT NULL,
    key_name TEXT,
    trace BLOB,
    multitask TEXT NOT NULL DEFAULT 'reject'
);
CREATE INDEX IF NOT EXISTS runs_by_thread ON runs (thread_id, created_at);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal (
    run_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
";

impl Store {
    /// Opens (creating if missing) the store at `path`.
    pub async fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path: Arc<Path> = path.as_ref().into();
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let open = |source| StoreError::Open {
                    path: path.to_path_buf(),
                    source,
                };
                let conn = Connection::open(&path).map_err(open)?;
                conn.busy_timeout(std::time::Duration::from_secs(5))
                    .map_err(open)?;
                conn.execute_batch(SCHEMA).map_err(open)?;
                migrate(&conn).map_err(open)?;
                Ok::<_, StoreError>(conn)
            })
            .await
            .map_err(|_| StoreError::Closed)??
        };
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("agent-serve-store".into())
            .spawn(move || work(opened, queue))
            .map_err(|_| StoreError::Closed)?;
        Ok(Store { jobs, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection within the next transaction; answers once it is committed.
    async fn call<T: Send + 'static>(
        &self,
        doing: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = f(conn);
            let ok = result.is_ok();
            let done: Done = Box::new(move |commit| {
                let result = match (result, commit) {
                    (Ok(_), Some(e)) => Err(StoreError::Database {
                        doing,
                        source: clone_error(e),
                    }),
                    (result, _) => result,
                };
                let _ = tx.send(result);
            });
            (ok, done)
        });
        self.jobs.send(job).map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues `f` without waiting for it (jobs still run in the order they were queued).
    fn queue(&self, f: impl FnOnce(&Connection) -> Result<(), StoreError> + Send + 'static) {
        let job: Job = Box::new(move |conn| {
            let result = f(conn);
            if let Err(error) = &result {
                tracing::warn!(%error, "agent-serve store: a queued write failed");
            }
            let done: Done = Box::new(|_| {});
            (result.is_ok(), done)
        });
        let _ = self.jobs.send(job);
    }

    /// Records a new run. With `claim`, the run's thread must exist and be free: it is then
    /// marked busy in the same transaction (`Ok(false)` if it was busy; nothing is written).
    pub(crate) async fn insert_run(
        &self,
        run: RunRecord,
        claim: bool,
    ) -> Result<InsertRun, StoreError> {
        self.call("recording a run", move |conn| {
            if let (true, Some(thread)) = (claim, &run.thread_id) {
                let status: Option<String> = conn
                    .query_row(
                        "SELECT status FROM threads WHERE id = ?1",
                        [thread],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(db("reading a thread"))?;
                match status.as_deref() {
                    None => return Ok(InsertRun::NoThread),
                    Some("busy") => return Ok(InsertRun::Busy),
                    Some(_) => {}
                }
                conn.execute(
                    "UPDATE threads SET status = 'busy', updated_at = ?2 WHERE id = ?1",
                    params![thread, time(&run.created_at)],
                )
                .map_err(db("claiming a thread"))?;
            }
            conn.execute(
                "INSERT INTO runs (id, thread_id, agent, created_at, updated_at, status, metadata, \
                 input, output, failure, spent, key_name, multitask) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, NULL, ?9, ?10, ?11)",
                params![
                    run.id,
                    run.thread_id,
                    run.agent,
                    time(&run.created_at),
                    time(&run.updated_at),
                    run.status.as_str(),
                    run.metadata.to_string(),
                    run.input.to_string(),
                    json(&run.spent),
                    run.key,
                    run.multitask.as_str(),
                ],
            )
            .map_err(db("recording a run"))?;
            Ok(InsertRun::Inserted)
        })
        .await
    }

    /// Marks `thread` busy for a run that waited its turn ([`Multitask::Enqueue`]):
    /// [`InsertRun::Busy`] if another run holds it.
    pub(crate) async fn claim_thread(&self, thread: &str) -> Result<InsertRun, StoreError> {
        let thread = thread.to_owned();
        self.call("claiming a thread", move |conn| {
            let claimed = conn
                .execute(
                    "UPDATE threads SET status = 'busy', updated_at = ?2 \
                     WHERE id = ?1 AND status <> 'busy'",
                    params![thread, time(&Utc::now())],
                )
                .map_err(db("claiming a thread"))?;
            if claimed == 1 {
                return Ok(InsertRun::Inserted);
            }
            let exists = conn
                .query_row("SELECT 1 FROM threads WHERE id = ?1", [&thread], |_| Ok(()))
                .optional()
                .map_err(db("reading a thread"))?
                .is_some();
            Ok(if exists {
                InsertRun::Busy
            } else {
                InsertRun::NoThread
            })
        })
        .await
    }

    /// Deletes the run `id` with its events and journal ([`Multitask::Rollback`]): what it
    /// did to its thread's turns was never recorded, as it did not finish.
    pub(crate) async fn delete_run(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call("deleting a run", move |conn| {
            for sql in [
                "DELETE FROM events WHERE run_id = ?1",
                "DELETE FROM journal WHERE run_id = ?1",
                "DELETE FROM thread_states WHERE run_id = ?1",
                "DELETE FROM runs WHERE id = ?1",
            ] {
                conn.execute(sql, [&id]).map_err(db("deleting a run"))?;
            }
            Ok(())
        })
        .await
    }

    /// Marks the run `id` running (queued: written before anything queued after it, such as
    /// the run's end, without making the run wait for the commit).
    pub(crate) fn set_running(&self, id: &str) {
        let id = id.to_owned();
        self.queue(move |conn| {
            conn.execute(
                "UPDATE runs SET status = 'running', updated_at = ?2 WHERE id = ?1",
                params![id, time(&Utc::now())],
            )
            .map_err(db("starting a run"))?;
            Ok(())
        });
    }

    /// Sets a going run's status (and its thread's: `interrupted` while it waits for a
    /// person, `busy` again when it goes on), queued like [`set_running`](Store::set_running).
    pub(crate) fn set_status(&self, id: &str, status: RunStatus, thread: Option<&str>) {
        let id = id.to_owned();
        let thread = thread.map(str::to_owned);
        self.queue(move |conn| {
            let now = time(&Utc::now());
            conn.execute(
                "UPDATE runs SET status = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, status.as_str(), now],
            )
            .map_err(db("updating a run"))?;
            if let Some(thread) = thread {
                let thread_status = if status == RunStatus::Interrupted {
                    ThreadStatus::Interrupted
                } else {
                    ThreadStatus::Busy
                };
                conn.execute(
                    "UPDATE threads SET status = ?2, updated_at = ?3 WHERE id = ?1",
                    params![thread, thread_status.as_str(), now],
                )
                .map_err(db("updating a thread"))?;
            }
            Ok(())
        });
    }

    /// Records how the run ended, its trace, and (on a thread) the thread's new state, in
    /// one transaction.
    pub(crate) async fn finish_run(&self, end: RunEnd) -> Result<(), StoreError> {
        self.call("finishing a run", move |conn| {
            let now = Utc::now();
            conn.execute(
                "UPDATE runs SET status = ?2, output = ?3, failure = ?4, spent = ?5, trace = ?6, \
                 updated_at = ?7 WHERE id = ?1",
                params![
                    end.run_id,
                    end.status.as_str(),
                    end.output.as_ref().map(Value::to_string),
                    end.failure.as_ref().map(json),
                    json(&end.spent),
                    end.trace,
                    time(&now),
                ],
            )
            .map_err(db("finishing a run"))?;
            if let Some(thread) = end.thread {
                conn.execute(
                    "UPDATE threads SET status = ?2, turns = ?3, last_output = \
                     COALESCE(?4, last_output), updated_at = ?5 WHERE id = ?1",
                    params![
                        thread.id,
                        thread.status.as_str(),
                        json(&thread.turns),
                        end.output.as_ref().map(Value::to_string),
                        time(&now),
                    ],
                )
                .map_err(db("updating a thread"))?;
                if end.status == RunStatus::Success {
                    conn.execute(
                        "INSERT INTO thread_states (thread_id, seq, run_id, turns, output, created_at) \
                         SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5 \
                         FROM thread_states WHERE thread_id = ?1",
                        params![
                            thread.id,
                            end.run_id,
                            json(&thread.turns),
                            end.output.as_ref().map(Value::to_string),
                            time(&now),
                        ],
                    )
                    .map_err(db("recording a thread's state"))?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Queues a run's events (written in order, before anything queued after them).
    pub(crate) fn append_events(&self, run_id: &str, events: Vec<Arc<Numbered>>) {
        let run_id = run_id.to_owned();
        self.queue(move |conn| {
            let mut insert = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO events (run_id, seq, data) VALUES (?1, ?2, ?3)",
                )
                .map_err(db("writing events"))?;
            for event in events {
                insert
                    .execute(params![run_id, event.seq as i64, json(&event.event)])
                    .map_err(db("writing events"))?;
            }
            Ok(())
        });
    }

    /// Waits until everything queued before is written.
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        self.call("flushing", |_| Ok(())).await
    }

    /// The run's events after `after`, in order.
    pub(crate) async fn events_after(
        &self,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<Numbered>, StoreError> {
        let run_id = run_id.to_owned();
        self.call("reading events", move |conn| {
            let mut select = conn
                .prepare_cached(
                    "SELECT seq, data FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq",
                )
                .map_err(db("reading events"))?;
            let rows = select
                .query_map(params![run_id, after.min(i64::MAX as u64) as i64], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(db("reading events"))?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, data) = row.map_err(db("reading events"))?;
                let event: RunEvent = parse("event", &data)?;
                events.push(Numbered::new(seq.max(0) as u64, event));
            }
            Ok(events)
        })
        .await
    }

    /// The run `id`, if there is one.
    pub(crate) async fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.call("reading a run", move |conn| {
            let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
            let row = conn
                .query_row(&sql, [id], raw_run)
                .optional()
                .map_err(db("reading a run"))?;
            row.map(RawRun::record).transpose()
        })
        .await
    }

    /// Runs, newest first: of one thread (or all), with one status (or any).
    pub(crate) async fn runs(
        &self,
        thread: Option<String>,
        status: Option<RunStatus>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.call("listing runs", move |conn| {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE (?1 IS NULL OR thread_id = ?1) \
                 AND (?2 IS NULL OR status = ?2) ORDER BY created_at DESC, id LIMIT ?3 OFFSET ?4"
            );
            let mut select = conn.prepare_cached(&sql).map_err(db("listing runs"))?;
            let rows = select
                .query_map(
                    params![
                        thread,
                        status.map(RunStatus::as_str),
                        limit.min(10_000) as i64,
                        offset.min(i64::MAX as usize) as i64
                    ],
                    raw_run,
                )
                .map_err(db("listing runs"))?;
            let mut runs = Vec::new();
            for row in rows {
                runs.push(row.map_err(db("listing runs"))?.record()?);
            }
            Ok(runs)
        })
        .await
    }

    /// Runs that were pending or running when the server stopped.
    pub(crate) async fn unfinished_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.call("listing unfinished runs", move |conn| {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status IN ('pending', 'running') \
                 OR (status = 'interrupted' AND failure IS NULL AND trace IS NULL) \
                 ORDER BY created_at"
            );
            let mut select = conn.prepare(&sql).map_err(db("listing runs"))?;
            let rows = select.query_map([], raw_run).map_err(db("listing runs"))?;
            let mut runs = Vec::new();
            for row in rows {
                runs.push(row.map_err(db("listing runs"))?.record()?);
            }
            Ok(runs)
        })
        .await
    }

    /// The spend of every run started with an API key since `since`: (key, spent, when).
    pub(crate) async fn spent_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, Spent, DateTime<Utc>)>, StoreError> {
        self.call("reading spend", move |conn| {
            let mut select = conn
                .prepare(
                    "SELECT key_name, spent, created_at FROM runs \
                     WHERE key_name IS NOT NULL AND created_at >= ?1",
                )
                .map_err(db("reading spend"))?;
            let rows = select
                .query_map([time(&since)], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
                .map_err(db("reading spend"))?;
            let mut spent = Vec::new();
            for row in rows {
                let (key, json, at) = row.map_err(db("reading spend"))?;
                spent.push((key, parse("run spend", &json)?, parse_time(&at)?));
            }
            Ok(spent)
        })
        .await
    }

    /// The JSONL trace of the finished run `id`.
    pub(crate) async fn trace(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let id = id.to_owned();
        self.call("reading a trace", move |conn| {
            conn.query_row("SELECT trace FROM runs WHERE id = ?1", [id], |row| {
                row.get::<_, Option<Vec<u8>>>(0)
            })
            .optional()
            .map(Option::flatten)
            .map_err(db("reading a trace"))
        })
        .await
    }

    /// Creates a thread; `Ok(None)` if one with that id exists.
    pub(crate) async fn insert_thread(
        &self,
        thread: ThreadRecord,
    ) -> Result<Option<ThreadRecord>, StoreError> {
        self.call("creating a thread", move |conn| {
            let inserted = conn
                .execute(
                    "INSERT OR IGNORE INTO threads (id, created_at, updated_at, metadata, status, turns) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        thread.id,
                        time(&thread.created_at),
                        time(&thread.updated_at),
                        thread.metadata.to_string(),
                        thread.status.as_str(),
                        json(&thread.turns),
                    ],
                )
                .map_err(db("creating a thread"))?;
            Ok((inserted == 1).then_some(thread))
        })
        .await
    }

    /// The thread `id`, if there is one.
    pub(crate) async fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, StoreError> {
        let id = id.to_owned();
        self.call("reading a thread", move |conn| {
            let row = conn
                .query_row(
                    "SELECT id, created_at, updated_at, metadata, status, turns, last_output \
                     FROM threads WHERE id = ?1",
                    [id],
                    |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, String>(3)?,
                            row.get::<_, String>(4)?,
                            row.get::<_, String>(5)?,
                            row.get::<_, Option<String>>(6)?,
                        ))
                    },
                )
                .optional()
                .map_err(db("reading a thread"))?;
            let Some((id, created, updated, metadata, status, turns, last)) = row else {
                return Ok(None);
            };
            Ok(Some(ThreadRecord {
                id,
                created_at: parse_time(&created)?,
                updated_at: parse_time(&updated)?,
                metadata: parse("thread metadata", &metadata)?,
                status: ThreadStatus::from_name(&status).ok_or_else(|| StoreError::Malformed {
                    what: "thread status",
                    detail: format!("`{status}` is no status"),
                })?,
                turns: parse("thread turns", &turns)?,
                last_output: last.map(|l| parse("thread output", &l)).transpose()?,
            }))
        })
        .await
    }

    /// The thread's states, newest first, at most `limit`.
    pub(crate) async fn thread_history(
        &self,
        id: &str,
        limit: usize,
    ) -> Result<Vec<ThreadState>, StoreError> {
        let id = id.to_owned();
        self.call("reading a thread's history", move |conn| {
            let mut select = conn
                .prepare_cached(
                    "SELECT run_id, seq, turns, output, created_at FROM thread_states \
                     WHERE thread_id = ?1 ORDER BY seq DESC LIMIT ?2",
                )
                .map_err(db("reading a thread's history"))?;
            let rows = select
                .query_map(params![id, limit.min(10_000) as i64], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, String>(4)?,
                    ))
                })
                .map_err(db("reading a thread's history"))?;
            let mut states = Vec::new();
            for row in rows {
                let (run_id, seq, turns, output, created) =
                    row.map_err(db("reading a thread's history"))?;
                states.push(ThreadState {
                    run_id,
                    seq: seq.max(0) as u64,
                    turns: parse("thread turns", &turns)?,
                    output: output.map(|o| parse("thread output", &o)).transpose()?,
                    created_at: parse_time(&created)?,
                });
            }
            Ok(states)
        })
        .await
    }

    /// The journal entries of run `id`, as JSON text, in order.
    pub(crate) async fn journal(&self, id: &str) -> Result<Vec<String>, StoreError> {
        let id = id.to_owned();
        self.call("reading a journal", move |conn| {
            let mut select = conn
                .prepare_cached("SELECT entry FROM journal WHERE run_id = ?1 ORDER BY position")
                .map_err(db("reading a journal"))?;
            let rows = select
                .query_map([id], |row| row.get::<_, String>(0))
                .map_err(db("reading a journal"))?;
            rows.collect::<Result<Vec<_>, _>>()
                .map_err(db("reading a journal"))
        })
        .await
    }

    /// Appends entries (JSON text) to run `id`'s journal; answers once they are committed.
    pub(crate) async fn journal_append(
        &self,
        id: &str,
        entries: Vec<String>,
    ) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call("appending to a journal", move |conn| {
            let next: i64 = conn
                .query_row(
                    "SELECT COALESCE(MAX(position), 0) FROM journal WHERE run_id = ?1",
                    [&id],
                    |row| row.get(0),
                )
                .map_err(db("appending to a journal"))?;
            let mut insert = conn
                .prepare_cached("INSERT INTO journal (run_id, position, entry) VALUES (?1, ?2, ?3)")
                .map_err(db("appending to a journal"))?;
            for (i, entry) in entries.iter().enumerate() {
                insert
                    .execute(params![id, next + 1 + i as i64, entry])
                    .map_err(db("appending to a journal"))?;
            }
            Ok(())
        })
        .await
    }
}

/// What [`Store::insert_run`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum InsertRun {
    /// The run is recorded.
    Inserted,
    /// Its thread does not exist.
    NoThread,
    /// Its thread has a run going.
    Busy,
}

/// How a run ended, for [`Store::finish_run`].
pub(crate) struct RunEnd {
    pub(crate) run_id: String,
    pub(crate) status: RunStatus,
    pub(crate) output: Option<Value>,
    pub(crate) failure: Option<Failure>,
    pub(crate) spent: Spent,
    pub(crate) trace: Option<Vec<u8>>,
    pub(crate) thread: Option<ThreadEnd>,
}

/// A thread's state after a run.
pub(crate) struct ThreadEnd {
    pub(crate) id: String,
    pub(crate) status: ThreadStatus,
    pub(crate) turns: Vec<Turn>,
}

/// The store's thread: runs queued jobs in batches, one transaction each.
fn work(conn: Connection, queue: mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let began = conn.execute_batch("BEGIN IMMEDIATE");
        let mut done = Vec::with_capacity(batch.len());
        for job in batch {
            // Each job under a savepoint: a failed one is rolled back alone.
            let _ = conn.execute_batch("SAVEPOINT job");
            let (ok, finished) = job(&conn);
            if !ok {
                let _ = conn.execute_batch("ROLLBACK TO job");
            }
            let _ = conn.execute_batch("RELEASE job");
            done.push(finished);
        }
        let commit = match began {
            Ok(()) => conn.execute_batch("COMMIT").err(),
            Err(e) => Some(e),
        };
        if commit.is_some() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for finished in done {
            finished(commit.as_ref());
        }
    }
}

fn clone_error(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::ToSqlConversionFailure(other.to_string().into()),
    }
}

fn db(doing: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| StoreError::Database { doing, source }
}

fn time(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Malformed {
            what: "time",
            detail: format!("`{text}`: {e}"),
        })
}

fn json(value: &impl serde::Serialize) -> String {
    // Serializing plain data (no maps with non-string keys) cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

fn parse<T: serde::de::DeserializeOwned>(what: &'static str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Malformed {
        what,
        detail: e.to_string(),
    })
}

const RUN_COLUMNS: &str = "id, thread_id, agent, created_at, updated_at, status, metadata, input, \
                           output, failure, spent, key_name, multitask";

/// Brings a store made by an earlier version up to this one's schema.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    // Runs' multitask strategies came after the first stores were made.
    let has_multitask: bool = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'multitask'",
        [],
        |row| row.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !has_multitask {
        conn.execute_batch("ALTER TABLE runs ADD COLUMN multitask TEXT NOT NULL DEFAULT 'reject'")?;
    }
    Ok(())
}

/// A run's row, before its text is parsed.
struct RawRun {
    id: String,
    thread_id: Option<String>,
    agent: String,
    created_at: String,
    updated_at: String,
    status: String,
    metadata: String,
    input: String,
    output: Option<String>,
    failure: Option<String>,
    spent: String,
    key: Option<String>,
    multitask: String,
}

fn raw_run(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        id: row.get(0)?,
        thread_id: row.get(1)?,
        agent: row.get(2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
        status: row.get(5)?,
        metadata: row.get(6)?,
        input: row.get(7)?,
        output: row.get(8)?,
        failure: row.get(9)?,
        spent: row.get(10)?,
        key: row.get(11)?,
        multitask: row.get(12)?,
    })
}

impl RawRun {
    fn record(self) -> Result<RunRecord, StoreError> {
        Ok(RunRecord {
            status: RunStatus::from_name(&self.status).ok_or_else(|| StoreError::Malformed {
                what: "run status",
                detail: format!("`{}` is no status", self.status),
            })?,
            id: self.id,
            thread_id: self.thread_id,
            agent: self.agent,
            created_at: parse_time(&self.created_at)?,
            updated_at: parse_time(&self.updated_at)?,
            metadata: parse("run metadata", &self.metadata)?,
            input: parse("run input", &self.input)?,
            output: self.output.map(|o| parse("run output", &o)).transpose()?,
            failure: self.failure.map(|f| parse("run failure", &f)).transpose()?,
            spent: parse("run spend", &self.spent)?,
            key: self.key,
            multitask: Multitask::from_name(&self.multitask).ok_or_else(|| {
                StoreError::Malformed {
                    what: "run multitask strategy",
                    detail: format!("`{}` is no strategy", self.multitask),
                }
            })?,
        })
    }
}
