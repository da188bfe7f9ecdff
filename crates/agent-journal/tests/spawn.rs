//! Every public future of the journal backends and of both interpreters' journaled and plain
//! runs can be handed to `tokio::spawn`: a service opens a journal and runs a program per
//! request, on whatever worker thread picks the request up. This file failing to compile is
//! the failure; running it checks the spawned futures really finish.

use std::sync::Arc;

use agent_interp_seq::{Config, Outcome, RunError};
use agent_journal::{Fsync, Journal, JournalError, JsonlJournal, SqliteJournal};
use agent_op::{Checkpoint, Op, Prompt, Response, op};
use agent_provider::ScriptedProvider;

/// A future `tokio::spawn` takes: `Send + 'static` with a `Send` output.
fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future)
}

fn config() -> Config {
    Config::new().provider(ScriptedProvider::from_fn(|_, _: &Prompt| {
        Ok(Response::text("hi"))
    }))
}

fn program() -> Op<(), String> {
    op::infer_raw("m", Prompt::new().user("hello"))
        .map(|r| r.content)
        .and_then(|said| op::checkpoint("said").map(move |_| said))
}

type Ran = Result<Outcome<(), String>, RunError>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_backends_and_journaled_runs_spawn() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("run.db");

    // The backends: opening, reading, appending, closing.
    let sqlite: SqliteJournal = spawn({
        let db = db.clone();
        async move { SqliteJournal::open(&db).await }
    })
    .await
    .unwrap()
    .unwrap();
    let sqlite = Arc::new(sqlite);
    let entries = spawn({
        let j = sqlite.clone();
        async move { j.entries().await }
    });
    assert!(entries.await.unwrap().unwrap().is_empty());
    let appended = spawn({
        let j = sqlite.clone();
        async move { j.append(Vec::new()).await }
    });
    appended.await.unwrap().unwrap();
    let closed = spawn(async move {
        let j = Arc::try_unwrap(sqlite).expect("no other handle");
        j.close().await
    });
    closed.await.unwrap().unwrap();
    let with = spawn({
        let path = dir.path().join("full.db");
        async move {
            SqliteJournal::open_with(&path, agent_journal::Durability::Full)
                .await?
                .close()
                .await
        }
    });
    with.await.unwrap().unwrap();
    let jsonl = spawn({
        let path = dir.path().join("run.jsonl");
        async move {
            let journal = JsonlJournal::open(&path, Fsync::EveryEntry)?;
            journal.append(Vec::new()).await?;
            journal.entries().await
        }
    });
    assert!(jsonl.await.unwrap().unwrap().is_empty());

    // Journaled runs under both interpreters.
    let durable: Arc<dyn Journal> = Arc::new(SqliteJournal::open(&db).await.unwrap());
    let recorded: Ran = spawn({
        let journal = durable.clone();
        async move { agent_interp_seq::run_durable(&config(), journal, (), program()).await }
    })
    .await
    .unwrap();
    let checkpoint: Checkpoint = recorded.unwrap().checkpoints.remove(0);
    let runs: Vec<tokio::task::JoinHandle<Ran>> = vec![
        spawn(async { agent_interp_seq::run(&config(), (), program()).await }),
        spawn(async { agent_interp_par::run(&config(), (), program()).await }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_seq::replay(&Config::new(), &*j, (), program()).await }
        }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_par::replay(&Config::new(), &*j, (), program()).await }
        }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_seq::replay_then_live(&config(), &*j, None, (), program()).await }
        }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_par::replay_then_live(&config(), &*j, None, (), program()).await }
        }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_seq::resume(&config(), j, (), program()).await }
        }),
        spawn({
            let j = durable.clone();
            async move { agent_interp_par::resume(&config(), j, (), program()).await }
        }),
        spawn({
            let (j, c) = (durable.clone(), checkpoint.clone());
            async move { agent_interp_seq::resume_from(&config(), &*j, &c, None, (), program()).await }
        }),
        spawn({
            let (j, c) = (durable.clone(), checkpoint.clone());
            async move { agent_interp_par::resume_from(&config(), &*j, &c, None, (), program()).await }
        }),
    ];
    for run in runs {
        assert_eq!(run.await.unwrap().unwrap().value, "hi");
    }
    // A durable run on a journal that has entries is refused, from a spawned task too.
    let again = spawn({
        let j = durable.clone();
        async move { agent_interp_par::run_durable(&config(), j, (), program()).await }
    });
    let refused = again.await.unwrap().unwrap_err();
    assert!(matches!(
        refused.journal_error(),
        Some(JournalError::NotEmpty { .. })
    ));
    let agent = spawn(async {
        agent_interp_seq::run_agent(
            ScriptedProvider::from_fn(|_, _: &Prompt| Ok(Response::text("done"))),
            agent_op::ToolSet::new(),
            "be brief",
            op::infer_raw("m", Prompt::new().user("go")).map(|r| r.content),
        )
        .await
    });
    assert_eq!(agent.await.unwrap().unwrap(), "done");
}

/// The PostgreSQL journal's futures, when the crate has it (compiled whenever the feature
/// is on; run only with a server).
#[cfg(feature = "postgres")]
#[allow(dead_code)]
fn postgres_futures_spawn(url: String) {
    let opened = spawn(async move {
        let journal = agent_journal::PostgresJournal::open(&url, "spawned").await?;
        journal.entries().await?;
        journal.append(Vec::new()).await?;
        journal.close().await
    });
    drop(opened);
}
