//! Durable runs survive SIGKILL: a child process runs a program of 100 model calls against a
//! local OpenAI-compatible server (which counts requests) with a durable SQLite journal; the
//! test kills it at 20 random points, resuming each time, then lets it finish. The result
//! must equal an uninterrupted run's, and the server must have seen at most 100 requests
//! plus one per kill (the one call that may be in flight when the process dies). While the
//! first child runs, this process tries to open the same journal and must be refused.

#![cfg(feature = "sqlite")]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_journal::{Journal, SqliteJournal};
use support::chat::{CALLS, expected, finish, run_child, server, spawn_child};

const KILLS: usize = 20;
const CHILD_DB: &str = "EFFECT_AGENTS_KILL_TEST_DB";

/// The child: resumes (or starts) the durable run of the journal at `$CHILD_DB`.
#[test]
#[ignore = "the child process of `sigkill_at_random_points_then_resume_pays_at_most_once_per_kill`"]
fn child_run() {
    run_child(CHILD_DB, "kill-test-0001", async |db| {
        Arc::new(SqliteJournal::open(&db).await.unwrap()) as Arc<dyn Journal>
    });
}

fn child(db: &Path, url: &str) -> std::process::Child {
    spawn_child("child_run", CHILD_DB, db, url)
}

/// Waits until the server has seen `requests` reach `at`, or `process` has exited (then
/// returns true). Fails the test if neither happens within a minute.
fn calls_reached(requests: &AtomicUsize, at: usize, process: &mut std::process::Child) -> bool {
    let started = Instant::now();
    while requests.load(Ordering::SeqCst) < at {
        if process.try_wait().unwrap().is_some() {
            return true;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child made no progress for a minute"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// How many entries the journal at `db` holds (opened after the child is dead).
async fn committed(db: &Path) -> usize {
    let journal = SqliteJournal::open(db).await.unwrap();
    let n = journal.entries().await.unwrap().len();
    journal.close().await.unwrap();
    n
}

#[test]
fn sigkill_at_random_points_then_resume_pays_at_most_once_per_kill() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let url = rt.block_on(server(Duration::from_millis(8), requests.clone()));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("durable.db");

    let expected = rt.block_on(expected());

    // A second process cannot write the journal while a run holds it: once the child is
    // calling the model (it opened the journal before its first call), this process is
    // refused.
    let mut holder = child(&db, &url);
    assert!(
        !calls_reached(&requests, 1, &mut holder),
        "the first child finished without calling the model"
    );
    let refused = rt.block_on(SqliteJournal::open(&db));
    assert!(
        matches!(refused, Err(agent_journal::JournalError::Locked { .. })),
        "a second process opening the journal is refused: {refused:?}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();

    let mut rng = fastrand::Rng::with_seed(fastrand::u64(..));
    let mut kills = 1;
    let mut progress = Vec::new();
    let mut finished_early = false;
    while kills < KILLS {
        // A random point of the run, counted in the child's model calls rather than in time
        // since it started (on a loaded machine starting alone can take longer than any fixed
        // delay, and every kill then landed before the first call): after 0 to 7 of its
        // requests reached the server, then up to 10 ms more (a call takes 8 ms).
        let at = requests.load(Ordering::SeqCst) + rng.usize(0..8);
        let mut process = child(&db, &url);
        let finished = calls_reached(&requests, at, &mut process);
        std::thread::sleep(Duration::from_millis(rng.u64(0..10)));
        if finished || process.try_wait().unwrap().is_some() {
            // It finished before the kill landed.
            finished_early = true;
            break;
        }
        process.kill().unwrap(); // SIGKILL
        process.wait().unwrap();
        kills += 1;
        progress.push(rt.block_on(committed(&db)));
    }

    // The last run, left to finish.
    let last = child(&db, &url);
    let started = Instant::now();
    let result = finish(last);
    assert_eq!(
        result, expected,
        "the resumed run ends like an uninterrupted one"
    );
    let seen = requests.load(Ordering::SeqCst);
    assert!(
        seen <= CALLS as usize + kills,
        "the server saw {seen} requests for {CALLS} calls and {kills} kills"
    );
    assert!(
        seen >= CALLS as usize,
        "every call reached the server once: {seen}"
    );
    assert_eq!(
        rt.block_on(committed(&db)),
        CALLS as usize + 1,
        "100 calls and the run entry"
    );
    // The kills landed mid-run, at different points.
    let mid_run = progress
        .iter()
        .filter(|&&n| n > 1 && n < CALLS as usize + 1)
        .count();
    assert!(
        finished_early || mid_run >= KILLS / 2,
        "kills should land mid-run: committed entries after each kill {progress:?}"
    );
    eprintln!(
        "kill test: {kills} kills, committed after each {progress:?}, {seen} requests for \
         {CALLS} calls, final run {:?}",
        started.elapsed()
    );
}
