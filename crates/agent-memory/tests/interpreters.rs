//! `remember` / `recall` / `forget` programs run by both interpreters against the real
//! backends: entries land, recall finds them, events carry previews and hashes only.

use agent_interp_seq::{Config, ErrorKind};
use agent_memory::{InMemoryBackend, SqliteBackend};
use agent_op::op::{self, Op};
use agent_op::{EventKind, MemoryBackend, MemoryEntry, MemoryId, PREVIEW_CHARS, Tag, content_hash};

fn long_fact(i: usize) -> String {
    format!(
        "Fact {i}: the parser handles nested quotes. {}",
        "Detail. ".repeat(60)
    )
}

/// Remembers a long fact, recalls it, forgets an unknown id.
fn learn_and_recall(i: usize) -> Op<(), (MemoryId, Vec<MemoryEntry>, bool)> {
    op::remember(
        long_fact(i),
        "read in the code review",
        vec![Tag::from("parser")],
    )
    .and_then(move |id| {
        op::recall(format!("Fact {i} parser nested quotes"), 3).and_then(move |hits| {
            op::forget(MemoryId::from("no-such-id")).map(move |existed| (id, hits, existed))
        })
    })
}

fn check_events(trace: &agent_op::Trace) {
    let mut remembered = 0;
    for event in &trace.events {
        match &event.event.kind {
            EventKind::Remember(r) => {
                remembered += 1;
                assert!(r.content_preview.chars().count() <= PREVIEW_CHARS + 1);
                assert!(
                    r.content_preview.len() < long_fact(0).len(),
                    "full content recorded"
                );
                assert!(r.content_hash.starts_with("sha256:"));
                assert_eq!(r.tags, vec![Tag::from("parser")]);
            }
            EventKind::Recall(r) => {
                assert!(r.results >= 1);
                assert_eq!(r.ids.len(), r.results as usize);
                assert_eq!(r.query_hash.len(), "sha256:".len() + 64);
            }
            EventKind::Forget(f) => assert!(!f.existed),
            _ => {}
        }
    }
    assert!(remembered >= 1);
}

async fn sequential(backend: impl MemoryBackend + Clone + 'static) {
    let config = Config::new().memory(backend.clone());
    let outcome = agent_interp_seq::run(&config, (), learn_and_recall(1))
        .await
        .expect("run");
    let (id, hits, existed) = outcome.value;
    assert_eq!(hits[0].id, id);
    assert_eq!(hits[0].content, long_fact(1));
    assert!(!existed);
    check_events(&outcome.trace);
    let remembered = outcome
        .trace
        .events
        .iter()
        .find_map(|e| match &e.event.kind {
            EventKind::Remember(r) => Some(r.clone()),
            _ => None,
        });
    assert_eq!(
        remembered.map(|r| r.content_hash),
        Some(content_hash(&long_fact(1)))
    );
    let stored = backend.get(&id).await.expect("get").expect("stored");
    assert_eq!(stored.access_count, 1, "the recall counted");
}

async fn parallel(backend: impl MemoryBackend + Clone + 'static) {
    let config = Config::new().memory(backend.clone());
    let branches: Vec<Op<(), _>> = (0..6).map(learn_and_recall).collect();
    let outcome = agent_interp_par::run(&config, (), op::par(branches))
        .await
        .expect("run");
    assert_eq!(outcome.value.len(), 6);
    for (i, (id, hits, _)) in outcome.value.iter().enumerate() {
        assert!(
            hits.iter().any(|h| &h.id == id),
            "branch {i} did not recall its own fact"
        );
    }
    check_events(&outcome.trace);
    assert_eq!(backend.count().await.expect("count"), 6);
}

#[tokio::test]
async fn sequential_in_memory() {
    sequential(InMemoryBackend::new()).await;
}

#[tokio::test]
async fn sequential_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    sequential(
        SqliteBackend::open(dir.path().join("m.db"))
            .await
            .expect("open"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_in_memory() {
    parallel(InMemoryBackend::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    parallel(
        SqliteBackend::open(dir.path().join("m.db"))
            .await
            .expect("open"),
    )
    .await;
}

#[tokio::test]
async fn memory_without_a_backend_is_a_clear_error_in_both_interpreters() {
    let err = agent_interp_seq::run(&Config::new(), (), learn_and_recall(0))
        .await
        .expect_err("ran without a backend");
    assert_eq!(err.kind, ErrorKind::NoMemoryBackend);
    let err = agent_interp_par::run(&Config::new(), (), learn_and_recall(0))
        .await
        .expect_err("ran without a backend");
    assert_eq!(err.kind, ErrorKind::NoMemoryBackend);
    assert!(err.to_string().contains("no memory backend"), "{err}");
}

#[tokio::test]
async fn backend_errors_fail_the_run_with_the_memory_error() {
    let program: Op<(), MemoryId> = op::remember("   ", "blank", vec![]);
    let err = agent_interp_seq::run(&Config::new().memory(InMemoryBackend::new()), (), program)
        .await
        .expect_err("blank content was stored");
    assert!(
        matches!(
            err.kind,
            ErrorKind::Memory(agent_op::MemoryError::InvalidInput(_))
        ),
        "{err}"
    );
}

/// Runs `program` under the interpreter named `which` ("seq" or "par").
async fn run_with<A: Send + 'static>(
    which: &str,
    config: &Config,
    program: Op<(), A>,
) -> Result<A, agent_interp_seq::RunError> {
    let outcome = match which {
        "seq" => agent_interp_seq::run(config, (), program).await?,
        _ => agent_interp_par::run(config, (), program).await?,
    };
    Ok(outcome.value)
}

/// A `recall` cut off by a short `timeout`, then a `remember`, over and over: each cut-off
/// recall is dropped part-way, and the store must carry on. (Before `begin_immediate`, the
/// second iteration's `remember` failed with "non-zero transaction depth", and every later
/// one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_recalls_leave_sqlite_usable_in_both_interpreters() {
    for which in ["seq", "par"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("m.db");
        let backend = SqliteBackend::open(&path).await.expect("open");
        let config = Config::new().memory(backend.clone());
        for i in 0..20 {
            for micros in [1, 100, 400] {
                let program = op::timeout(
                    std::time::Duration::from_micros(micros),
                    op::recall(format!("Fact {i} parser"), 3),
                )
                .and_then(move |_| op::remember(long_fact(i), "after a timed-out recall", vec![]));
                run_with(which, &config, program)
                    .await
                    .unwrap_or_else(|e| panic!("{which}: iteration {i} ({micros} µs): {e}"));
            }
        }
        assert_eq!(backend.count().await.expect("count"), 60, "{which}");
        let other = SqliteBackend::open(&path).await.expect("second handle");
        other
            .store(agent_op::NewMemory {
                content: "from another handle".to_owned(),
                context: String::new(),
                tags: vec![],
            })
            .await
            .unwrap_or_else(|e| panic!("{which}: a second handle cannot write: {e}"));
        assert!(
            backend
                .integrity_check()
                .await
                .expect("integrity check")
                .is_sound()
        );
    }
}

/// A tool that sleeps for `{"micros": n}`: a race opponent that touches no store.
struct Sleep;

impl agent_op::Tool for Sleep {
    fn name(&self) -> &str {
        "sleep"
    }

    fn description(&self) -> &str {
        "sleeps"
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    fn call(
        &self,
        args: serde_json::Value,
    ) -> agent_op::BoxFuture<'_, Result<serde_json::Value, agent_op::ToolError>> {
        Box::pin(async move {
            // Yields instead of `tokio::time::sleep`, whose timer rounds up to milliseconds.
            let until = std::time::Duration::from_micros(args["micros"].as_u64().unwrap_or(0));
            let started = std::time::Instant::now();
            while started.elapsed() < until {
                tokio::task::yield_now().await;
            }
            Ok(serde_json::Value::Null)
        })
    }
}

/// A large `remember` racing a sleep that ends at fractions of the remember's own duration:
/// under the parallel interpreter the remember loses and is dropped at every stage of its
/// write. The store must take it whole or not at all and stay usable. (The window the sqlx
/// bug needed is a few microseconds wide, so this rarely met it; the conformance check and
/// the timeout test above are the ones that failed before the fix.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remember_that_loses_a_race_leaves_sqlite_usable_in_both_interpreters() {
    let big = "A large memory that takes a while to embed and write. ".repeat(1_000);
    for which in ["seq", "par"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend = SqliteBackend::open(dir.path().join("m.db"))
            .await
            .expect("open");
        // How long an uncontested remember of this size takes, once warm.
        let mut full = 0;
        for i in 0..3 {
            let started = std::time::Instant::now();
            backend
                .store(agent_op::NewMemory {
                    content: format!("timing {i} {big}"),
                    context: String::new(),
                    tags: vec![],
                })
                .await
                .expect("store");
            full = started.elapsed().as_micros() as u64;
        }
        let config = Config::new().memory(backend.clone()).tool(Sleep);
        let rounds = 40;
        for round in 0..rounds {
            let micros = full * round / rounds;
            let program = op::race(vec![
                op::remember(format!("{round} {big}"), "raced", vec![]).map(|_| "remembered"),
                op::tool("sleep", serde_json::json!({"micros": micros})).map(|_| "slept"),
            ])
            .and_then(move |_| op::remember(format!("after race {round}"), "after", vec![]));
            run_with(which, &config, program)
                .await
                .unwrap_or_else(|e| panic!("{which}: round {round} ({micros} µs): {e}"));
        }
        let all = backend.recent(usize::MAX).await.expect("recent");
        let after = all
            .iter()
            .filter(|e| e.content.starts_with("after race"))
            .count();
        assert_eq!(
            after, rounds as usize,
            "{which}: a remember after a race failed"
        );
        for entry in &all {
            let read = backend.get(&entry.id).await.expect("get").expect("listed");
            assert_eq!(read.content, entry.content, "{which}: half-written entry");
        }
        assert!(
            backend
                .integrity_check()
                .await
                .expect("integrity check")
                .is_sound()
        );
    }
}
