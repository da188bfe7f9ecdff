//! The kill test against the PostgreSQL journal: a child process runs the 100-call program
//! durably with a `PostgresJournal`; the test SIGKILLs it at 20 random points and, every
//! fourth round, restarts the database server (an immediate stop, as a crash, then a start)
//! while it runs. The child
//! reconnects and goes on; each kill resumes. The result must equal an uninterrupted run's,
//! with at most one repeated call per kill.
//!
//! It runs its own server (`target/pg/journal-restart`, the project's PostgreSQL test server
//! script, `xtask/src/pg.rs`), so restarting it disturbs no other test; without PostgreSQL
//! binaries it says `SKIPPED:` in one line.
#![cfg(feature = "postgres")]

mod support;

#[path = "../../../xtask/src/pg.rs"]
#[allow(dead_code)]
mod cluster;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_journal::{Journal, PostgresJournal};
use cluster::{Cluster, PgError};
use support::chat::{CALLS, expected, finish, run_child, server, spawn_child};

const CHILD_PG: &str = "EFFECT_AGENTS_KILL_TEST_PG";
const JOURNAL: &str = "kill-test";

#[test]
#[ignore = "the child process of `postgres_restarts_and_sigkills_then_resume_pays_at_most_once_per_kill`"]
fn child_run_postgres() {
    run_child(CHILD_PG, "kill-test-0002", async |pg| {
        Arc::new(PostgresJournal::open(&pg, JOURNAL).await.unwrap()) as Arc<dyn Journal>
    });
}

/// The tests here share one server, which one of them restarts: they take turns.
static SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Stops the test's own server when dropped, however the test ends.
struct StopOnDrop(Cluster);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.0.stop() {
            eprintln!("stopping the journal kill test's server: {e}");
        }
    }
}

fn child(pg: &str, url: &str) -> std::process::Child {
    spawn_child("child_run_postgres", CHILD_PG, pg, url)
}

#[test]
fn postgres_restarts_and_sigkills_then_resume_pays_at_most_once_per_kill() {
    let _turn = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let target = cluster::target_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let cluster = Cluster::named(&target, "journal-restart");
    let started = match cluster.start() {
        Ok(started) => started,
        Err(PgError::Unavailable(why)) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the PostgreSQL journal kill test needs PostgreSQL binaries: {why}"
            );
            return;
        }
        Err(PgError::Failed(why)) => panic!("starting the test's PostgreSQL server: {why}"),
    };
    let _stop = StopOnDrop(cluster.clone());
    let pg = started.url.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A fresh journal: the server's data directory outlives test runs.
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        for table in ["effect_agents_journal_entries", "effect_agents_journals"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE journal = $1"))
                .bind(JOURNAL)
                .execute(&mut conn)
                .await
                .ok();
        }
    });
    let requests = Arc::new(AtomicUsize::new(0));
    let url = rt.block_on(server(Duration::from_millis(8), requests.clone()));
    let expected = rt.block_on(expected());

    let mut rng = fastrand::Rng::with_seed(fastrand::u64(..));
    let (mut kills, mut restarts) = (0, 0);
    for round in 0..20 {
        let mut process = child(&pg, &url);
        std::thread::sleep(Duration::from_millis(rng.u64(20..90)));
        if round % 4 == 1 {
            // The server goes away under the running child, and comes back on the same port.
            assert!(
                matches!(cluster.crash(), Ok(true)),
                "the server was running"
            );
            std::thread::sleep(Duration::from_millis(rng.u64(50..300)));
            let again = cluster.start().expect("restart");
            assert_eq!(again.url, pg, "the server came back on the same port");
            restarts += 1;
            std::thread::sleep(Duration::from_millis(rng.u64(40..160)));
        }
        if process.try_wait().unwrap().is_some() {
            break;
        }
        process.kill().unwrap(); // SIGKILL
        process.wait().unwrap();
        kills += 1;
    }
    let result = finish(child(&pg, &url));
    assert_eq!(
        result, expected,
        "the resumed run ends like an uninterrupted one"
    );
    let seen = requests.load(Ordering::SeqCst);
    assert!(
        (CALLS as usize..=CALLS as usize + kills).contains(&seen),
        "the server saw {seen} requests for {CALLS} calls, {kills} kills and {restarts} \
         database restarts"
    );
    let committed = rt.block_on(async {
        let journal = PostgresJournal::open(&pg, JOURNAL).await.unwrap();
        let n = journal.entries().await.unwrap().len();
        journal.close().await.unwrap();
        n
    });
    assert_eq!(committed, CALLS as usize + 1, "100 calls and the run entry");
    eprintln!(
        "postgres kill test: {kills} kills, {restarts} database restarts, {seen} requests for \
         {CALLS} calls"
    );
}

#[test]
fn a_second_postgres_writer_is_refused_and_other_versions_are_named() {
    let _turn = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let target = cluster::target_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let cluster = Cluster::named(&target, "journal-restart");
    let started = match cluster.start() {
        Ok(started) => started,
        Err(PgError::Unavailable(why)) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the PostgreSQL journal tests need PostgreSQL binaries: {why}"
            );
            return;
        }
        Err(PgError::Failed(why)) => panic!("starting the test's PostgreSQL server: {why}"),
    };
    let _stop = StopOnDrop(cluster.clone());
    let pg = started.url;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let name = format!("lock-test-{}", fastrand::u64(..));
        let first = PostgresJournal::open(&pg, &name).await.unwrap();
        let second = PostgresJournal::open(&pg, &name).await.unwrap_err();
        assert!(
            matches!(second, agent_journal::JournalError::Locked { .. }),
            "{second}"
        );
        // Another journal in the same database is free.
        let other = PostgresJournal::open(&pg, &format!("{name}-other"))
            .await
            .unwrap();
        other.close().await.unwrap();
        first.close().await.unwrap();
        let again = PostgresJournal::open(&pg, &name).await.unwrap();
        let entry = |seq: u64| {
            agent_op::journal::Request::tool("t", &serde_json::json!({"n": seq})).entry(
                agent_op::journal::Key {
                    branch: String::new(),
                    seq,
                },
                serde_json::value::to_raw_value(&serde_json::json!({"Ok": seq})).unwrap(),
            )
        };
        again.append(vec![entry(0), entry(1)]).await.unwrap();
        assert_eq!(again.entries().await.unwrap(), [entry(0), entry(1)]);

        // Rows changed behind the journal's back are refused, naming the row.
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
        edit_second(&mut conn, &name, "result = '{\"Ok\":7}'").await;
        let err = again.entries().await.unwrap_err();
        assert!(
            matches!(&err, agent_journal::JournalError::ChecksumMismatch { at, .. } if at.starts_with("row ")),
            "{err:?}"
        );
        edit_second(&mut conn, &name, "checksum = NULL").await;
        let err = again.entries().await.unwrap_err();
        assert!(
            matches!(&err, agent_journal::JournalError::Malformed { .. }),
            "{err:?}"
        );
        again.close().await.unwrap();

        sqlx::query("UPDATE effect_agents_journals SET format_version = 9 WHERE journal = $1")
            .bind(&name)
            .execute(&mut conn)
            .await
            .unwrap();
        let newer = PostgresJournal::open(&pg, &name).await.unwrap_err();
        assert!(
            newer
                .to_string()
                .contains("format version 9; this library reads version 2"),
            "{newer}"
        );
    });
}

/// Sets `set` on the second entry of the journal `name`, behind its back.
async fn edit_second(conn: &mut sqlx::PgConnection, name: &str, set: &str) {
    let sql =
        format!("UPDATE effect_agents_journal_entries SET {set} WHERE journal = $1 AND seq = 1");
    sqlx::query(&sql).bind(name).execute(conn).await.unwrap();
}
