//! Benchmarks of journaled runs:
//!
//! - `replay.step`: µs per replayed model call of a 10,000-call run read from its SQLite
//!   journal; baseline: the same run live on an instant in-process provider (the engine's
//!   own cost per call) plus reading one entry of the journal;
//! - `replay.total`: that replay's whole time (opening and reading the journal included)
//!   against the recorded run's wall time;
//! - `journal.sqlite_append` / `journal.postgres_append`: committed entries per second, one
//!   commit per entry as a sequential durable run makes them, with the default durability;
//!   baseline: raw inserts of the same rows, one transaction each, with the same settings,
//!   as an async program makes them with sqlx, in the same run;
//! - `journal.overhead`: `par.fanout_10k` (10,000 branches, one 10 ms model call each)
//!   with a durable SQLite journal, against the same run without one: medians of 11
//!   alternating runs.

#[cfg(feature = "postgres")]
#[path = "../../../xtask/src/pg.rs"]
#[allow(dead_code)]
mod cluster;

#[cfg(feature = "postgres")]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_interp_seq::Config;
use agent_journal::{Entry, EntryKind, Journal, Key, SqliteJournal, fingerprint};
use agent_op::{BoxFuture, Op, Prompt, Provider, ProviderError, Response, op};
use agent_provider::ScriptedProvider;
use serde_json::json;
use serde_json::value::to_raw_value;
use sqlx::{ConnectOptions, Connection};

const REPLAY_CALLS: u64 = 10_000;
const APPENDS: usize = 2_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn instant_provider() -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, p: &Prompt| {
        let n = p.messages.last().map_or(0, |m| m.content().len());
        Ok(Response::text(format!("answer {n}")).with_usage(12, 3))
    })
}

/// `calls` model calls in sequence, each naming its step.
fn calls(n: u64) -> Op<(), u64> {
    op::repeat(n, |i| {
        op::infer_raw("m", Prompt::new().user(format!("step {i}: what next?"))).map(|_| ())
    })
    .then(op::pure(n))
}

fn replay(rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("replay.db");
    let config = Config::new().provider(instant_provider());
    let recorded = rt.block_on(async {
        let journal = Arc::new(SqliteJournal::open(&path).await.expect("open"));
        let start = Instant::now();
        agent_interp_seq::run_durable(&config, journal.clone(), (), calls(REPLAY_CALLS))
            .await
            .expect("record");
        let took = start.elapsed();
        Arc::into_inner(journal)
            .expect("sole owner")
            .close()
            .await
            .expect("close");
        took
    });
    let replay_once = || {
        rt.block_on(async {
            let start = Instant::now();
            let journal = SqliteJournal::open(&path).await.expect("open");
            let out = agent_interp_seq::replay(&config, &journal, (), calls(REPLAY_CALLS))
                .await
                .expect("replay");
            let took = start.elapsed();
            assert_eq!(out.journal.expect("report").replayed, REPLAY_CALLS);
            journal.close().await.expect("close");
            took
        })
    };
    let live_once = || {
        rt.block_on(async {
            let start = Instant::now();
            agent_interp_seq::run(&config, (), calls(REPLAY_CALLS))
                .await
                .expect("live");
            start.elapsed()
        })
    };
    let read_once = || {
        rt.block_on(async {
            let start = Instant::now();
            let journal = SqliteJournal::open(&path).await.expect("open");
            let entries = journal.entries().await.expect("read");
            let took = start.elapsed();
            assert_eq!(entries.len() as u64, REPLAY_CALLS + 1);
            journal.close().await.expect("close");
            took
        })
    };
    let (replays, lives) = bench_kit::interleaved(5, replay_once, live_once);
    let reads: Vec<Duration> = (0..5).map(|_| read_once()).collect();
    let per =
        |samples: &[Duration]| bench_kit::median_per(samples, REPLAY_CALLS as f64, bench_kit::us);
    if bench_kit::enabled("replay.step") {
        bench_kit::report(
            "replay.step",
            per(&replays),
            "µs/call",
            per(&lives) + per(&reads),
        );
    }
    if bench_kit::enabled("replay.total") {
        let median = bench_kit::stats(
            &replays
                .iter()
                .map(|d| bench_kit::ms(*d))
                .collect::<Vec<_>>(),
        )
        .median;
        bench_kit::report("replay.total", median, "ms", bench_kit::ms(recorded));
    }
}

/// `APPENDS` entries like a model call's, each its own commit.
fn entries() -> Vec<Entry> {
    (0..APPENDS as u64)
        .map(|seq| {
            let request = json!({"model": "m", "messages": [{"role": "user", "hash": "sha256:0", "text": format!("step {seq}")}], "tools": []});
            let result = json!({"Ok": {"content": format!("answer {seq}"), "tool_calls": [], "usage": {"input_tokens": 12, "output_tokens": 3}}});
            Entry {
                key: Key { branch: String::new(), seq },
                kind: EntryKind::Model,
                fingerprint: fingerprint(&request),
                request: to_raw_value(&request).expect("JSON"),
                result: to_raw_value(&result).expect("JSON"),
            }
        })
        .collect()
}

fn per_second(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn sqlite_append(rt: &tokio::runtime::Runtime) {
    let rows = entries();
    let journal_run = || {
        rt.block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let journal = SqliteJournal::open(dir.path().join("a.db"))
                .await
                .expect("open");
            let start = Instant::now();
            for entry in &rows {
                journal.append(vec![entry.clone()]).await.expect("append");
            }
            let took = start.elapsed();
            journal.close().await.expect("close");
            took
        })
    };
    let raw_run = || {
        rt.block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            // The journal's table and the settings it opens with by default.
            let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.path().join("raw.db"))
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .locking_mode(sqlx::sqlite::SqliteLockingMode::Exclusive)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                .page_size(16384)
                .pragma("cache_size", "-16384")
                .pragma("temp_store", "memory")
                .disable_statement_logging()
                .connect()
                .await
                .expect("connect");
            sqlx::raw_sql(
                "CREATE TABLE e (position INTEGER PRIMARY KEY, branch TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, fingerprint TEXT NOT NULL, request TEXT NOT NULL, result TEXT NOT NULL, checksum INTEGER NOT NULL, UNIQUE (branch, seq))",
            )
            .execute(&mut conn)
            .await
            .expect("schema");
            let start = Instant::now();
            for e in &rows {
                let mut tx = conn.begin().await.expect("begin");
                sqlx::query("INSERT INTO e (branch, seq, kind, fingerprint, request, result, checksum) VALUES (?, ?, ?, ?, ?, ?, ?)")
                    .bind(&e.key.branch)
                    .bind(e.key.seq as i64)
                    .bind(e.kind.as_str())
                    .bind(&e.fingerprint)
                    .bind(e.request.get())
                    .bind(e.result.get())
                    .bind(i64::from(e.checksum()))
                    .execute(&mut *tx)
                    .await
                    .expect("insert");
                tx.commit().await.expect("commit");
            }
            let took = start.elapsed();
            conn.close().await.expect("close");
            took
        })
    };
    let (journal, raw) = bench_kit::interleaved(5, journal_run, raw_run);
    let rate = |s: &[Duration]| {
        bench_kit::stats(
            &s.iter()
                .map(|d| per_second(APPENDS, *d))
                .collect::<Vec<_>>(),
        )
        .median
    };
    bench_kit::report(
        "journal.sqlite_append",
        rate(&journal),
        "entries/s",
        rate(&raw),
    );
}

fn postgres_append(rt: &tokio::runtime::Runtime) {
    #[cfg(feature = "postgres")]
    {
        let Some((url, started)) = pg_server() else {
            return;
        };
        let _stop = StopOnDrop(started);
        let rows = entries();
        let journal_run = || {
            rt.block_on(async {
                let name = format!("bench-{}", fastrand::u64(..));
                let journal = agent_journal::PostgresJournal::open(&url, &name)
                    .await
                    .expect("open");
                let start = Instant::now();
                for entry in &rows {
                    journal.append(vec![entry.clone()]).await.expect("append");
                }
                let took = start.elapsed();
                journal.close().await.expect("close");
                took
            })
        };
        let raw_run = || {
            rt.block_on(async {
                let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
                sqlx::query("SET synchronous_commit = on").execute(&mut conn).await.expect("set");
                sqlx::query("CREATE TABLE IF NOT EXISTS bench_raw_journal (journal TEXT NOT NULL, position BIGSERIAL, branch TEXT NOT NULL, seq BIGINT NOT NULL, kind TEXT NOT NULL, fingerprint TEXT NOT NULL, request TEXT NOT NULL, result TEXT NOT NULL, PRIMARY KEY (journal, branch, seq))")
                    .execute(&mut conn)
                    .await
                    .expect("schema");
                let name = format!("bench-{}", fastrand::u64(..));
                let start = Instant::now();
                for e in &rows {
                    sqlx::query("INSERT INTO bench_raw_journal (journal, branch, seq, kind, fingerprint, request, result) VALUES ($1, $2, $3, $4, $5, $6, $7)")
                        .bind(&name)
                        .bind(&e.key.branch)
                        .bind(e.key.seq as i64)
                        .bind(e.kind.as_str())
                        .bind(&e.fingerprint)
                        .bind(e.request.get())
                        .bind(e.result.get())
                        .execute(&mut conn)
                        .await
                        .expect("insert");
                }
                let took = start.elapsed();
                conn.close().await.expect("close");
                took
            })
        };
        let (journal, raw) = bench_kit::interleaved(3, journal_run, raw_run);
        let rate = |s: &[Duration]| {
            bench_kit::stats(
                &s.iter()
                    .map(|d| per_second(APPENDS, *d))
                    .collect::<Vec<_>>(),
            )
            .median
        };
        bench_kit::report(
            "journal.postgres_append",
            rate(&journal),
            "entries/s",
            rate(&raw),
        );
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = rt;
        eprintln!("SKIPPED: journal.postgres_append needs the `postgres` feature of agent-journal");
    }
}

#[cfg(feature = "postgres")]
fn pg_server() -> Option<(String, Option<cluster::Cluster>)> {
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        return Some((url, None));
    }
    let target = cluster::target_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let server = cluster::Cluster::main(&target);
    match server.start() {
        Ok(started) if started.already_running => Some((started.url, None)),
        Ok(started) => Some((started.url, Some(server))),
        Err(cluster::PgError::Unavailable(why)) => {
            eprintln!("SKIPPED: journal.postgres_append needs a PostgreSQL server: {why}");
            None
        }
        Err(cluster::PgError::Failed(why)) => panic!("starting the PostgreSQL test server: {why}"),
    }
}

/// Stops the server this started, however the run ends.
#[cfg(feature = "postgres")]
struct StopOnDrop(Option<cluster::Cluster>);

#[cfg(feature = "postgres")]
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(server) = self.0.take()
            && let Err(e) = server.stop()
        {
            eprintln!("stopping the PostgreSQL test server: {e}");
        }
    }
}

/// A provider whose every call takes 10 ms of real time.
#[derive(Clone)]
struct Sleepy;

impl Provider for Sleepy {
    fn chat<'a>(
        &'a self,
        _model: &'a str,
        _prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(Response::text("ok").with_usage(3, 1))
        })
    }
}

fn fanout(n: usize) -> Op<(), Vec<String>> {
    op::par(
        (0..n)
            .map(|i| op::infer_raw("m", Prompt::new().user(format!("q{i}"))).map(|r| r.content))
            .collect(),
    )
}

fn overhead(rt: &tokio::runtime::Runtime) {
    const N: usize = 10_000;
    let config = Config::new().provider(Sleepy);
    let durable = || {
        rt.block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let journal = Arc::new(
                SqliteJournal::open(dir.path().join("f.db"))
                    .await
                    .expect("open"),
            );
            let start = Instant::now();
            let out = agent_interp_par::run_durable(&config, journal.clone(), (), fanout(N))
                .await
                .expect("run");
            let took = start.elapsed();
            assert_eq!(out.value.len(), N);
            // Closed here, untimed: dropped, it would checkpoint its log in the background
            // while the next (plain) run is timed. The committer task lets go of its share
            // as it ends, just after the run does.
            while Arc::strong_count(&journal) > 1 {
                tokio::task::yield_now().await;
            }
            Arc::into_inner(journal)
                .expect("sole owner")
                .close()
                .await
                .expect("close");
            took
        })
    };
    let plain = || {
        rt.block_on(async {
            let start = Instant::now();
            let out = agent_interp_par::run(&config, (), fanout(N))
                .await
                .expect("run");
            let took = start.elapsed();
            assert_eq!(out.value.len(), N);
            took
        })
    };
    // Eleven pairs: a run takes a few tens of milliseconds, and on a shared 2-core machine
    // a few of five could land in a slow moment (one full run's median was 2.02 where the
    // same binary gave 1.60-1.66 alone, before and after).
    let (with, without) = bench_kit::interleaved(11, durable, plain);
    let ms = |s: &[Duration]| {
        bench_kit::stats(&s.iter().map(|d| bench_kit::ms(*d)).collect::<Vec<_>>()).median
    };
    bench_kit::report("journal.overhead", ms(&with), "ms", ms(&without));
}

fn main() {
    let rt = runtime();
    if bench_kit::enabled("replay.step") || bench_kit::enabled("replay.total") {
        replay(&rt);
    }
    if bench_kit::enabled("journal.sqlite_append") {
        sqlite_append(&rt);
    }
    if bench_kit::enabled("journal.postgres_append") {
        postgres_append(&rt);
    }
    if bench_kit::enabled("journal.overhead") {
        overhead(&rt);
    }
}
