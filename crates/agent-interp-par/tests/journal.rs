//! Journaled runs under both interpreters: durable runs commit every nondeterministic result,
//! replays answer from the journal with no calls at all, a changed program diverges with a
//! typed error, replay-then-live pays only for what changed, resume continues a cut-off run,
//! and checkpoints are resume points.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_interp_seq::{Config, ErrorKind, Outcome, RunError};
use agent_journal::{Entry, EntryKind, Fsync, Journal, JsonlJournal, SqliteJournal};
use agent_memory::InMemoryBackend;
use agent_op::crdt::AppendLog;
use agent_op::journal::{Divergence, Key};
use agent_op::{
    BoxFuture, CallContext, FnTool, Merge, Op, Prompt, Response, Steering, Tool, ToolError,
    TraceId, op,
};
use agent_provider::ScriptedProvider;
use serde_json::{Value, json};

#[derive(Clone, Debug, Default, PartialEq, Merge, serde::Serialize)]
struct St {
    log: AppendLog<String>,
}

/// Counts what a run really did: model calls, tool runs.
#[derive(Clone, Default)]
struct Counts {
    model: Arc<AtomicUsize>,
    tools: Arc<AtomicUsize>,
}

impl Counts {
    fn model(&self) -> usize {
        self.model.load(Ordering::SeqCst)
    }
    fn tools(&self) -> usize {
        self.tools.load(Ordering::SeqCst)
    }
}

/// A config whose provider answers from the prompt (`reply to <last message>`, after
/// `latency` for the message `slow`) and whose tools double numbers; `counts` sees every
/// call.
fn config(counts: &Counts) -> Config {
    let model = counts.model.clone();
    let provider = ScriptedProvider::from_fn(move |_, prompt: &Prompt| {
        model.fetch_add(1, Ordering::SeqCst);
        let last = prompt
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("reply to {last}")).with_usage(10, 3))
    });
    let tools = counts.tools.clone();
    let double = FnTool::new("double", "doubles n", json!({}), move |args: Value| {
        let tools = tools.clone();
        async move {
            tools.fetch_add(1, Ordering::SeqCst);
            let ms = args["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            match args["n"].as_i64() {
                Some(n) => Ok(json!(n * 2)),
                None => Err(ToolError::invalid_arguments("n must be a number")),
            }
        }
    });
    let config = Config::new()
        .provider(provider)
        .tool(double)
        .memory(InMemoryBackend::new())
        .trace_id("calm-owl-1234");
    config.steering_queue().push(Steering::new("be brief"));
    config
}

fn ask(q: &str) -> Op<St, String> {
    op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content)
}

/// One of everything the journal records: clock, randomness, model and tool calls (a tool
/// error among them), a `par`, a `race` whose winner is the second branch, memory, steering
/// and a checkpoint.
fn program(topic: &'static str) -> Op<St, String> {
    op::now().and_then(move |t| {
        op::random().and_then(move |r| {
            ask(topic).and_then(move |plan| {
                op::tool("double", json!({"n": 21})).and_then(move |doubled| {
                    op::tool("double", json!({"n": "x"})).and_then(move |bad| {
                        op::par(vec![
                            ask("left").and_then(|a| {
                                op::modify_as(move |s: &mut St, me| s.log.append(a, me))
                            }),
                            ask("right").and_then(|a| {
                                op::modify_as(move |s: &mut St, me| s.log.append(a, me))
                            }),
                        ])
                        .and_then(move |_| {
                            op::race(vec![
                                // Slow, then gives up: under the sequential interpreter it
                                // fails first; under the concurrent one it is cut off
                                // mid-call when the other branch wins.
                                op::tool("double", json!({"n": 1, "ms": 200}))
                                    .and_then(|_| op::fail("the slow branch gives up")),
                                ask("fast"),
                            ])
                            .and_then(move |won| {
                                op::remember("a note about Oslo", "test", Vec::new()).and_then(move |id| {
                                    op::recall("Oslo", 3).and_then(move |hits| {
                                        op::next_steering().and_then(move |steer| {
                                            op::checkpoint("end").map(move |_| {
                                                format!(
                                                    "{t}|{r}|{plan}|{doubled:?}|{bad:?}|{won}|{id}|{}|{steer:?}",
                                                    hits.len()
                                                )
                                            })
                                        })
                                    })
                                })
                            })
                        })
                    })
                })
            })
        })
    })
}

type Canonical = std::collections::BTreeMap<TraceId, Vec<agent_op::EventKind>>;

fn summary(o: &Outcome<St, String>) -> (String, St, Canonical) {
    (o.value.clone(), o.state.clone(), o.trace.canonical())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A multi-threaded runtime: there the concurrent interpreter hands its commits to a task of
/// their own.
fn threads() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn sqlite(dir: &tempfile::TempDir, name: &str) -> Arc<SqliteJournal> {
    Arc::new(SqliteJournal::open(dir.path().join(name)).await.unwrap())
}

#[test]
fn a_durable_run_replays_under_both_interpreters_with_no_calls() {
    rt().block_on(async {
        for record_par in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let journal = sqlite(&dir, "run.db").await;
            let live = Counts::default();
            let recorded = record_with(record_par, &config(&live), journal.clone(), program("Oslo"))
                .await
                .unwrap();
            assert_eq!((live.model(), live.tools()), (4, 3), "the recording ran live");
            let report = recorded.journal.clone().unwrap();
            assert_eq!(report.replayed, 0);
            let entries = journal.entries().await.unwrap();
            let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
            for kind in [
                EntryKind::Run,
                EntryKind::Clock,
                EntryKind::Random,
                EntryKind::Model,
                EntryKind::Tool,
                EntryKind::Outcome,
                EntryKind::Memory,
                EntryKind::Recall,
                EntryKind::Steering,
                EntryKind::Checkpoint,
            ] {
                assert!(kinds.contains(&kind), "{kind:?} journaled: {kinds:?}");
            }
            assert!(recorded.value.contains("reply to fast"), "{}", recorded.value);

            for replay_par in [false, true] {
                let replay = Counts::default();
                let config = config(&replay);
                let replayed = replay_with(replay_par, &config, &*journal, program("Oslo"))
                    .await
                    .unwrap();
                assert_eq!((replay.model(), replay.tools()), (0, 0), "no calls at all");
                assert_eq!(summary(&replayed), summary(&recorded), "recorded under par: {record_par}, replayed under par: {replay_par}");
                assert_eq!(replayed.checkpoints.len(), 1);
                // The steering queue was not consumed: the message came from the journal.
                assert!(config.steering_queue().pop().is_some());
                let report = replayed.journal.unwrap();
                assert_eq!(report.live, 0);
                assert_eq!(report.replayed as usize, entries.len() - 1 - 2, "every entry but the run's, the race outcome and the checkpoint marker answered an effect");
            }
        }
    });
}

fn divergence(error: RunError) -> Divergence {
    match error.kind.root_cause() {
        ErrorKind::Divergence(d) => (**d).clone(),
        other => panic!("not a divergence: {other}"),
    }
}

#[test]
fn a_changed_prompt_diverges_where_it_changed_and_says_how() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            program("Oslo"),
        )
        .await
        .unwrap();
        for par in [false, true] {
            let counts = Counts::default();
            let result = replay_with(par, &config(&counts), &*journal, program("Rome")).await;
            let error = result.unwrap_err();
            // The failure is in the trace, like any other.
            assert!(
                error
                    .trace
                    .events
                    .iter()
                    .any(|e| matches!(&e.event.kind, agent_op::EventKind::Error(_)))
            );
            let d = divergence(error);
            assert_eq!(
                d.key,
                Key {
                    branch: String::new(),
                    seq: 2
                },
                "the first model call, after the clock and the random number"
            );
            let recorded = d.recorded.clone().unwrap();
            assert_ne!(recorded.fingerprint, d.requested.fingerprint);
            assert_eq!(d.diff(), r#"messages[0].text: "Oslo" → "Rome""#);
            let text = d.to_string();
            assert!(
                text.starts_with("replay diverged at run, effect 2: recorded model sha256:"),
                "{text}"
            );
            assert_eq!(counts.model(), 0);
        }
    });
}

#[test]
fn another_programs_journal_diverges_at_its_first_effect() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "other.db").await;
        let other: Op<St, String> = op::tool("double", json!({"n": 2})).map(|r| format!("{r:?}"));
        agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            other,
        )
        .await
        .unwrap();
        let error = agent_interp_par::replay(
            &config(&Counts::default()),
            &*journal,
            St::default(),
            program("Oslo"),
        )
        .await
        .unwrap_err();
        let d = divergence(error);
        // `now` asked where the other program called a tool.
        assert_eq!(d.key.seq, 0);
        assert_eq!(d.recorded.as_ref().unwrap().kind, EntryKind::Tool);
        assert_eq!(
            d.diff(),
            "the journal recorded a tool call here; the program asked for a clock call"
        );
    });
}

#[test]
fn a_truncated_journal_replays_its_prefix_then_says_where_it_ended() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let full = sqlite(&dir, "full.db").await;
        agent_interp_seq::run_durable(
            &config(&Counts::default()),
            full.clone(),
            St::default(),
            program("Oslo"),
        )
        .await
        .unwrap();
        let entries = full.entries().await.unwrap();
        // The run entry, clock, random and the first model call.
        let cut = Arc::new(JsonlJournal::open(dir.path().join("cut.jsonl"), Fsync::Never).unwrap());
        cut.append(entries[..4].to_vec()).await.unwrap();
        let counts = Counts::default();
        let error =
            agent_interp_seq::replay(&config(&counts), &*cut, St::default(), program("Oslo"))
                .await
                .unwrap_err();
        let d = divergence(error);
        assert!(d.recorded.is_none());
        assert_eq!(d.requested.kind, EntryKind::Tool);
        assert!(d.to_string().contains("the journal ends before it"), "{d}");
        assert_eq!((counts.model(), counts.tools()), (0, 0));
    });
}

#[test]
fn replay_then_live_pays_only_for_what_changed() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        let program = |last: &'static str| -> Op<St, String> {
            ask("one").and_then(move |a| {
                ask("two").and_then(move |b| ask(last).map(move |c| format!("{a}/{b}/{c}")))
            })
        };
        agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            program("three"),
        )
        .await
        .unwrap();
        for par in [false, true] {
            let counts = Counts::default();
            let new = sqlite(&dir, &format!("new-{par}.db")).await;
            let config = config(&counts);
            let outcome = if par {
                agent_interp_par::replay_then_live(
                    &config,
                    &*journal,
                    Some(new.clone()),
                    St::default(),
                    program("THREE"),
                )
                .await
            } else {
                agent_interp_seq::replay_then_live(
                    &config,
                    &*journal,
                    Some(new.clone()),
                    St::default(),
                    program("THREE"),
                )
                .await
            }
            .unwrap();
            assert_eq!(counts.model(), 1, "only the changed call was made");
            assert_eq!(outcome.value, "reply to one/reply to two/reply to THREE");
            let report = outcome.journal.unwrap();
            assert_eq!((report.replayed, report.live), (2, 1));
            let diverged = report.diverged.unwrap();
            assert_eq!(diverged.key.seq, 2);
            assert_eq!(diverged.diff(), r#"messages[0].text: "three" → "THREE""#);
            // The new journal holds the whole new run: replaying it makes no call.
            let again = Counts::default();
            let replayed = agent_interp_seq::replay(
                &config_like(&again),
                &*new,
                St::default(),
                program("THREE"),
            )
            .await
            .unwrap();
            assert_eq!(replayed.value, outcome.value);
            assert_eq!(again.model(), 0);
        }
    });
}

fn config_like(counts: &Counts) -> Config {
    config(counts)
}

#[test]
fn resume_continues_a_cut_off_run_without_repeating_committed_calls() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let full = sqlite(&dir, "full.db").await;
        let steps = |n: u64| -> Op<St, String> {
            op::loop_fn((0u64, String::new()), move |(i, acc)| {
                if i == n {
                    return op::pure(std::ops::ControlFlow::Break(acc));
                }
                ask(&format!("step {i} after {}", acc.len())).map(move |r| {
                    std::ops::ControlFlow::Continue((i + 1, format!("{acc}{}", r.len())))
                })
            })
        };
        let whole = agent_interp_seq::run_durable(
            &config(&Counts::default()),
            full.clone(),
            St::default(),
            steps(10),
        )
        .await
        .unwrap();
        let entries = full.entries().await.unwrap();
        assert_eq!(entries.len(), 11);
        for par in [false, true] {
            // A crash after 4 committed calls: the journal holds the run entry and those.
            let cut = Arc::new(
                JsonlJournal::open(
                    dir.path().join(format!("cut-{par}.jsonl")),
                    Fsync::EveryEntry,
                )
                .unwrap(),
            );
            cut.append(entries[..5].to_vec()).await.unwrap();
            let counts = Counts::default();
            let resumed = if par {
                agent_interp_par::resume(&config(&counts), cut.clone(), St::default(), steps(10))
                    .await
            } else {
                agent_interp_seq::resume(&config(&counts), cut.clone(), St::default(), steps(10))
                    .await
            }
            .unwrap();
            assert_eq!(
                counts.model(),
                6,
                "the 4 committed calls were not made again"
            );
            assert_eq!(resumed.value, whole.value);
            assert_eq!(resumed.trace.canonical(), whole.trace.canonical());
            assert_eq!(resumed.trace.id, whole.trace.id, "the run keeps its id");
            assert_eq!(
                cut.entries().await.unwrap(),
                entries,
                "the journal is whole again"
            );
            let report = resumed.journal.unwrap();
            assert_eq!((report.replayed, report.live), (4, 6));
        }
        // A finished journal resumes to the same result with no calls.
        let counts = Counts::default();
        let again =
            agent_interp_seq::resume(&config(&counts), full.clone(), St::default(), steps(10))
                .await
                .unwrap();
        assert_eq!((again.value, counts.model()), (whole.value, 0));
    });
}

#[test]
fn a_journal_that_is_not_empty_is_not_started_again() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            ask("hi"),
        )
        .await
        .unwrap();
        let error = agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            ask("hi"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                &error.kind,
                ErrorKind::Journal(e) if matches!(**e, agent_journal::JournalError::NotEmpty { entries: 2, .. })
            ),
            "{}",
            error.kind
        );
    });
}

#[test]
fn a_checkpoint_is_a_resume_point() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        let program = |then: &'static str| -> Op<St, String> {
            ask("research").and_then(move |notes| {
                op::modify_as(move |s: &mut St, me| s.log.append(notes, me))
                    .and_then(|_| op::checkpoint("researched"))
                    .and_then(move |_| ask(then))
            })
        };
        let first = agent_interp_seq::run_durable(
            &config(&Counts::default()),
            journal.clone(),
            St::default(),
            program("write a poem"),
        )
        .await
        .unwrap();
        let checkpoint = first.checkpoints[0].clone();
        for par in [false, true] {
            let counts = Counts::default();
            let other = if par {
                agent_interp_par::resume_from(
                    &config(&counts),
                    &*journal,
                    &checkpoint,
                    None,
                    St::default(),
                    program("write an essay"),
                )
                .await
            } else {
                agent_interp_seq::resume_from(
                    &config(&counts),
                    &*journal,
                    &checkpoint,
                    None,
                    St::default(),
                    program("write an essay"),
                )
                .await
            }
            .unwrap();
            assert_eq!(
                counts.model(),
                1,
                "the research before the checkpoint was replayed"
            );
            assert_eq!(other.value, "reply to write an essay");
            assert_eq!(
                other.checkpoints[0].state, checkpoint.state,
                "the same state at the checkpoint"
            );
        }
        // A checkpoint the journal has no marker of.
        let mut stranger = checkpoint.clone();
        stranger.name = "elsewhere".into();
        let error = agent_interp_seq::resume_from(
            &config(&Counts::default()),
            &*journal,
            &stranger,
            None,
            St::default(),
            program("x"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(error.kind, ErrorKind::CheckpointNotJournaled { .. }),
            "{}",
            error.kind
        );
    });
}

/// A side-effecting tool that records the idempotency key of every call it runs.
struct Charge {
    keys: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Tool for Charge {
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "charges a card"
    }
    fn parameters(&self) -> Value {
        json!({})
    }
    fn call(&self, _args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async { Err(ToolError::failed("needs an idempotency key")) })
    }
    fn call_in(
        &self,
        _args: Value,
        context: &CallContext,
    ) -> BoxFuture<'_, Result<Value, ToolError>> {
        self.keys
            .lock()
            .unwrap()
            .push(context.idempotency_key.clone());
        Box::pin(async { Ok(json!("charged")) })
    }
}

#[test]
fn side_effecting_tools_get_the_same_idempotency_key_when_a_call_is_repeated() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
        let config = config(&Counts::default()).tool(Charge { keys: keys.clone() });
        let program = || -> Op<St, String> {
            op::par(vec![
                op::tool("charge", json!({})),
                op::tool("charge", json!({})),
            ])
            .map(|r| format!("{r:?}"))
        };
        let journal = sqlite(&dir, "charges.db").await;
        agent_interp_seq::run_durable(&config, journal.clone(), St::default(), program())
            .await
            .unwrap();
        let first = keys.lock().unwrap().clone();
        assert_eq!(first, ["calm-owl-1234.0/0", "calm-owl-1234.1/0"]);
        // The second charge was in flight at a crash: its entry never reached the journal.
        let entries = journal.entries().await.unwrap();
        let cut =
            Arc::new(JsonlJournal::open(dir.path().join("cut.jsonl"), Fsync::EveryEntry).unwrap());
        let kept: Vec<Entry> = entries
            .into_iter()
            .filter(|e| e.key.branch != "1")
            .collect();
        cut.append(kept).await.unwrap();
        keys.lock().unwrap().clear();
        agent_interp_par::resume(&config, cut, St::default(), program())
            .await
            .unwrap();
        assert_eq!(
            *keys.lock().unwrap(),
            ["calm-owl-1234.1/0"],
            "repeated with the same key"
        );
    });
}

#[test]
fn a_timeout_that_cuts_a_fork_replays_the_same_cut_under_both_interpreters() {
    // A paused clock, so the cut lands at the same virtual time in every run (the JSON Lines
    // journal writes synchronously, so nothing idles the runtime mid-commit).
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let program = || -> Op<St, String> {
        op::timeout(
            Duration::from_millis(50),
            op::par(vec![
                op::tool("double", json!({"n": 1, "ms": 10})).map(|r| format!("{r:?}")),
                op::tool("double", json!({"n": 2, "ms": 200})).map(|r| format!("{r:?}")),
                ask("quick"),
            ]),
        )
        .and_then(|cut| ask("after").map(move |a| format!("{cut:?} then {a}")))
    };
    let dir = tempfile::tempdir().unwrap();
    for record_par in [false, true] {
        let journal = Arc::new(
            JsonlJournal::open(
                dir.path().join(format!("cut-{record_par}.jsonl")),
                Fsync::Never,
            )
            .unwrap(),
        );
        let recorded = paused()
            .block_on(async {
                if record_par {
                    agent_interp_par::run_durable(
                        &config(&Counts::default()),
                        journal.clone(),
                        St::default(),
                        program(),
                    )
                    .await
                } else {
                    agent_interp_seq::run_durable(
                        &config(&Counts::default()),
                        journal.clone(),
                        St::default(),
                        program(),
                    )
                    .await
                }
            })
            .unwrap();
        assert!(
            recorded.value.starts_with("Err(TimedOut"),
            "{}",
            recorded.value
        );
        let entries = paused().block_on(journal.entries()).unwrap();
        assert!(
            entries.iter().any(|e| {
                let result: serde_json::Value = serde_json::from_str(e.result.get()).unwrap();
                result.get("finished").is_some()
            }),
            "the cut is journaled: {entries:?}"
        );
        for replay_par in [false, true] {
            let counts = Counts::default();
            let replayed = paused()
                .block_on(async {
                    if replay_par {
                        agent_interp_par::replay(
                            &config(&counts),
                            &*journal,
                            St::default(),
                            program(),
                        )
                        .await
                    } else {
                        agent_interp_seq::replay(
                            &config(&counts),
                            &*journal,
                            St::default(),
                            program(),
                        )
                        .await
                    }
                })
                .unwrap();
            assert_eq!((counts.model(), counts.tools()), (0, 0));
            assert_eq!(
                summary(&replayed),
                summary(&recorded),
                "recorded under par: {record_par}, replayed under par: {replay_par}"
            );
        }
    }
}

/// A memory whose searches fail, counting every call it gets.
#[derive(Clone, Default)]
struct Broken(Arc<AtomicUsize>);

impl agent_op::MemoryBackend for Broken {
    fn store(
        &self,
        memory: agent_op::NewMemory,
    ) -> BoxFuture<'_, Result<agent_op::MemoryId, agent_op::MemoryError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(agent_op::MemoryId(memory.content)) })
    }
    fn search<'a>(
        &'a self,
        _query: &'a str,
        _k: usize,
    ) -> BoxFuture<'a, Result<Vec<agent_op::ScoredMemory>, agent_op::MemoryError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Err(agent_op::MemoryError::Storage {
                operation: "search".into(),
                location: Some("broken.db".into()),
                cause: agent_op::Cause::new(std::io::Error::other("disk gone")),
            })
        })
    }
    fn recent(
        &self,
        _n: usize,
    ) -> BoxFuture<'_, Result<Vec<agent_op::MemoryEntry>, agent_op::MemoryError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn by_tags<'a>(
        &'a self,
        _tags: &'a [agent_op::Tag],
    ) -> BoxFuture<'a, Result<Vec<agent_op::MemoryEntry>, agent_op::MemoryError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn prune<'a>(
        &'a self,
        _policy: &'a agent_op::PrunePolicy,
    ) -> BoxFuture<'a, Result<agent_op::PruneReport, agent_op::MemoryError>> {
        Box::pin(async { Ok(agent_op::PruneReport::default()) })
    }
    fn delete<'a>(
        &'a self,
        _id: &'a agent_op::MemoryId,
    ) -> BoxFuture<'a, Result<bool, agent_op::MemoryError>> {
        Box::pin(async { Ok(false) })
    }
    fn get<'a>(
        &'a self,
        _id: &'a agent_op::MemoryId,
    ) -> BoxFuture<'a, Result<Option<agent_op::MemoryEntry>, agent_op::MemoryError>> {
        Box::pin(async { Ok(None) })
    }
    fn count(&self) -> BoxFuture<'_, Result<u64, agent_op::MemoryError>> {
        Box::pin(async { Ok(0) })
    }
}

#[test]
fn a_run_that_failed_on_memory_replays_to_the_same_failure() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "broken.db").await;
        let program = || -> Op<St, String> {
            op::remember("a note", "test", Vec::new())
                .and_then(|_| op::recall("note", 3))
                .map(|hits| hits.len().to_string())
        };
        let live = Broken::default();
        let config = |memory: &Broken| config(&Counts::default()).memory(memory.clone());
        let recorded = agent_interp_seq::run_durable(
            &config(&live),
            journal.clone(),
            St::default(),
            program(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(recorded.kind, ErrorKind::Memory(_)),
            "{}",
            recorded.kind
        );
        assert_eq!(live.0.load(Ordering::SeqCst), 2);
        for par in [false, true] {
            let untouched = Broken::default();
            let replayed = replay_with(par, &config(&untouched), &*journal, program())
                .await
                .unwrap_err();
            assert_eq!(
                replayed.kind, recorded.kind,
                "the same error, its cause by message"
            );
            assert_eq!(replayed.trace.canonical(), recorded.trace.canonical());
            assert_eq!(
                untouched.0.load(Ordering::SeqCst),
                0,
                "the memory was not touched"
            );
        }
    });
}

/// Runs `program` durably into `journal` under the sequential (`par = false`) or the
/// concurrent interpreter.
async fn record_with(
    par: bool,
    config: &Config,
    journal: Arc<dyn Journal>,
    program: Op<St, String>,
) -> Result<Outcome<St, String>, RunError> {
    if par {
        agent_interp_par::run_durable(config, journal, St::default(), program).await
    } else {
        agent_interp_seq::run_durable(config, journal, St::default(), program).await
    }
}

/// Replays `journal` under the sequential (`par = false`) or the concurrent interpreter.
async fn replay_with(
    par: bool,
    config: &Config,
    journal: &dyn Journal,
    program: Op<St, String>,
) -> Result<Outcome<St, String>, RunError> {
    if par {
        agent_interp_par::replay(config, journal, St::default(), program).await
    } else {
        agent_interp_seq::replay(config, journal, St::default(), program).await
    }
}

#[test]
fn a_replay_needs_no_provider_tools_or_memory() {
    rt().block_on(async {
        for record_par in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let journal = sqlite(&dir, "run.db").await;
            let live = config(&Counts::default());
            let recorded = record_with(record_par, &live, journal.clone(), program("Oslo"))
                .await
                .unwrap();
            for par in [false, true] {
                // What a machine with no API key, no tools and no memory has.
                let bare = Config::new().trace_id("calm-owl-1234");
                let replayed = replay_with(par, &bare, &*journal, program("Oslo"))
                    .await
                    .unwrap();
                assert_eq!(
                    summary(&replayed),
                    summary(&recorded),
                    "recorded under par: {record_par}, replayed under par: {par}"
                );
            }
        }
    });
}

#[test]
fn a_run_that_lacked_a_tool_or_provider_replays_to_the_same_failure_with_nothing_configured() {
    rt().block_on(async {
        let cases: [(&str, Config, Op<St, String>); 2] = [
            (
                "tool",
                config(&Counts::default()),
                op::tool("missing", json!({})).map(|r| format!("{r:?}")),
            ),
            (
                "provider",
                Config::new().tool(FnTool::new("t", "t", json!({}), |_: Value| async {
                    Ok(json!(1))
                })),
                ask("hello"),
            ),
        ];
        for (what, live, program) in cases {
            let dir = tempfile::tempdir().unwrap();
            let journal = sqlite(&dir, "run.db").await;
            let recorded =
                agent_interp_seq::run_durable(&live, journal.clone(), St::default(), program)
                    .await
                    .unwrap_err();
            let program = || match what {
                "tool" => op::tool("missing", json!({})).map(|r| format!("{r:?}")),
                _ => ask("hello"),
            };
            for par in [false, true] {
                let replayed = replay_with(par, &Config::new(), &*journal, program())
                    .await
                    .unwrap_err();
                // The same failure (an unknown tool names the tools the recorded run had),
                // not a divergence: the journal recorded that the run failed there.
                assert_eq!(replayed.kind, recorded.kind, "{what}, par: {par}");
                assert_eq!(replayed.trace.canonical(), recorded.trace.canonical());
            }
        }
    });
}

#[test]
fn a_divergence_in_any_branch_is_the_runs_error() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        let recorded = |first: &'static str| -> Op<St, String> {
            op::par(vec![ask("same"), ask(first)]).map(|v| v.join(","))
        };
        record_with(
            false,
            &config(&Counts::default()),
            journal.clone(),
            recorded("left"),
        )
        .await
        .unwrap();
        // In a `par` branch, and in a `race` branch another branch would win: either way the
        // run stops with the divergence itself, not a branch failure or a race won.
        let changed_par = || recorded("right");
        let changed_race = || -> Op<St, String> {
            op::par(vec![ask("same"), op::race(vec![ask("right"), ask("left")])])
                .map(|v| v.join(","))
        };
        for par in [false, true] {
            for program in [changed_par(), changed_race()] {
                let error = replay_with(par, &Config::new(), &*journal, program)
                    .await
                    .unwrap_err();
                assert!(
                    matches!(&error.kind, ErrorKind::Divergence(d) if d.key.branch == "1"),
                    "par: {par}: {:?}",
                    error.kind
                );
                let d = error.divergence().expect("the accessor finds it");
                assert_eq!(
                    d.key,
                    Key {
                        branch: "1".into(),
                        seq: 0
                    }
                );
                assert!(error.journal_error().is_none());
            }
        }
    });
}

/// A journal of given entries, for replaying ones changed by hand.
struct Entries(Vec<Entry>);

impl Journal for Entries {
    fn describe(&self) -> String {
        "edited".to_owned()
    }
    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, agent_journal::JournalError>> {
        let entries = self.0.clone();
        Box::pin(async move { Ok(entries) })
    }
    fn append(&self, _: Vec<Entry>) -> BoxFuture<'_, Result<(), agent_journal::JournalError>> {
        Box::pin(async { Ok(()) })
    }
}

#[test]
fn entries_that_do_not_fit_the_program_are_journal_errors_naming_their_position() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = sqlite(&dir, "run.db").await;
        let program = || -> Op<St, String> {
            op::race(vec![op::fail("first gives up"), ask("fast")]).and_then(|won| {
                op::timeout(
                    Duration::from_millis(10),
                    op::tool("double", json!({"n": 1, "ms": 5_000})),
                )
                .map(move |cut| format!("{won}|{cut:?}"))
            })
        };
        record_with(
            true,
            &config(&Counts::default()),
            journal.clone(),
            program(),
        )
        .await
        .unwrap();
        let entries = journal.entries().await.unwrap();
        // Edits the results `edit` changes (it says whether it did).
        let edited = |edit: &dyn Fn(&mut serde_json::Value) -> bool| {
            let mut entries = entries.clone();
            let mut changed = false;
            for entry in &mut entries {
                let mut result: serde_json::Value =
                    serde_json::from_str(entry.result.get()).unwrap();
                if edit(&mut result) {
                    entry.result = serde_json::value::to_raw_value(&result).unwrap();
                    changed = true;
                }
            }
            assert!(changed, "nothing edited");
            Entries(entries)
        };
        let race = |r: &serde_json::Value| r.get("winner").is_some();
        let cut = |r: &serde_json::Value| r.get("interrupted").is_some();
        let cases: Vec<(&str, Entries, &str)> = vec![
            (
                "a winner the race lacks",
                edited(&|r| {
                    race(r) && {
                        r["winner"] = json!(7);
                        true
                    }
                }),
                "run, effect 0",
            ),
            (
                "a failed loser the race lacks",
                edited(&|r| {
                    race(r) && {
                        r["finished"] = json!([9]);
                        true
                    }
                }),
                "run, effect 0",
            ),
            (
                "a winner that fails",
                edited(&|r| {
                    race(r) && {
                        r["winner"] = json!(0);
                        r["finished"] = json!([]);
                        true
                    }
                }),
                "run, effect 0",
            ),
            (
                "a scope that is not there",
                edited(&|r| {
                    cut(r) && {
                        r["interrupted"]["scope"] = json!(3);
                        true
                    }
                }),
                "run, effect 1",
            ),
            (
                "an exit that does not parse",
                edited(&|r| {
                    cut(r) && {
                        r["interrupted"]["exit"] = json!({"odd": 1});
                        true
                    }
                }),
                "run, effect 1",
            ),
            (
                "two entries at one position",
                {
                    let mut twice = entries.clone();
                    twice.push(entries.last().unwrap().clone());
                    Entries(twice)
                },
                "",
            ),
        ];
        for (what, journal, at) in cases {
            for par in [false, true] {
                let error = replay_with(par, &Config::new(), &journal, program())
                    .await
                    .unwrap_err();
                let Some(agent_journal::JournalError::Malformed { at: found, .. }) =
                    error.journal_error()
                else {
                    panic!("{what}, par {par}: not a journal error: {:?}", error.kind);
                };
                assert!(found.starts_with(at), "{what}, par {par}: at {found}");
            }
        }
    });
}

/// A wide fan-out: each branch asks the model and runs a tool.
fn wide(branches: i64) -> Op<St, String> {
    op::par(
        (0..branches)
            .map(|i| {
                ask(&format!("q{i}")).and_then(move |reply| {
                    op::tool("double", json!({"n": i}))
                        .map(move |doubled| format!("{reply}:{:?}", doubled.ok()))
                })
            })
            .collect(),
    )
    .and_then(|replies: Vec<String>| ask(&replies.join(",")))
}

#[test]
fn a_wide_durable_fan_out_on_many_threads_commits_what_a_sequential_run_does() {
    // On a multi-threaded runtime the concurrent interpreter hands its commits to a task of
    // their own, which builds model calls' entries there and appends them in batches.
    threads().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut journals = Vec::new();
        let mut values = Vec::new();
        for par in [false, true] {
            let journal = sqlite(&dir, &format!("run-{par}.db")).await;
            let counts = Counts::default();
            let outcome = record_with(par, &config(&counts), journal.clone(), wide(300))
                .await
                .unwrap();
            assert_eq!((counts.model(), counts.tools()), (301, 300));
            values.push(outcome.value);
            let mut entries: Vec<Entry> = journal
                .entries()
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.kind != EntryKind::Run)
                .collect();
            entries.sort_by(|a, b| (&a.key.branch, a.key.seq).cmp(&(&b.key.branch, b.key.seq)));
            journals.push((journal, entries));
        }
        assert_eq!(values[0], values[1]);
        assert_eq!(journals[0].1.len(), 601, "every call");
        assert_eq!(
            journals[0].1, journals[1].1,
            "the same entries, built where they were"
        );

        let (journal, _) = &journals[1];
        let counts = Counts::default();
        let replayed = replay_with(true, &config(&counts), &**journal, wide(300))
            .await
            .unwrap();
        assert_eq!((counts.model(), counts.tools()), (0, 0));
        assert_eq!(replayed.value, values[1]);
    });
}

/// A journal that keeps its entries and lets its first append (the run's marker) through at
/// once; the others wait until the test opens the gate.
struct Gated {
    kept: std::sync::Mutex<Vec<Entry>>,
    appends: AtomicUsize,
    gate: tokio::sync::Semaphore,
    waiting: tokio::sync::Notify,
    reads: AtomicUsize,
}

impl Gated {
    fn new() -> Gated {
        Gated {
            kept: std::sync::Mutex::default(),
            appends: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(0),
            waiting: tokio::sync::Notify::new(),
            reads: AtomicUsize::new(0),
        }
    }
}

impl Journal for Gated {
    fn describe(&self) -> String {
        "gated".to_owned()
    }
    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, agent_journal::JournalError>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(self.kept.lock().unwrap().clone()) })
    }
    fn append(
        &self,
        entries: Vec<Entry>,
    ) -> BoxFuture<'_, Result<(), agent_journal::JournalError>> {
        Box::pin(async move {
            if self.appends.fetch_add(1, Ordering::SeqCst) > 0 {
                self.waiting.notify_one();
                drop(self.gate.acquire().await.unwrap());
            }
            self.kept.lock().unwrap().extend(entries);
            Ok(())
        })
    }
}

#[test]
fn a_resume_waits_for_what_a_dropped_runs_committer_still_appends() {
    threads().block_on(async {
        let counts = Counts::default();
        let journal = Arc::new(Gated::new());
        let program = || op::par(vec![ask("one"), ask("two")]);
        let run = {
            let (config, journal) = (config(&counts), journal.clone());
            tokio::spawn(async move {
                agent_interp_par::run_durable(&config, journal, St::default(), program()).await
            })
        };
        // Both calls made, their entries handed over and held at the gate: the run is dropped.
        journal.waiting.notified().await;
        while counts.model() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        run.abort();
        assert!(run.await.unwrap_err().is_cancelled());
        // A resume started at once must not read the journal before those entries are in it.
        let resume = {
            let (config, journal) = (config(&counts), journal.clone());
            tokio::spawn(async move {
                agent_interp_par::resume(&config, journal, St::default(), program()).await
            })
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
        while journal.reads.load(Ordering::SeqCst) < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        journal.gate.add_permits(1_000);
        let resumed = resume.await.unwrap().unwrap();
        assert_eq!(resumed.value, vec!["reply to one", "reply to two"]);
        assert_eq!(counts.model(), 2, "the resume made a committed call again");
    });
}
