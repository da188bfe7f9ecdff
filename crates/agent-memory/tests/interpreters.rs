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
