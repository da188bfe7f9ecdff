//! The run model every protocol shares, with no HTTP in it: runs started on agents, on
//! threads or alone, their events live and stored, their journals, cancellation, and the
//! recovery of runs a killed server left unfinished.

mod event;
mod handle;
mod hub;
mod journal;
mod limits;
mod record;
mod store;
mod subscriber;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_engine::{CancellationToken, RunError, SteeringQueue};
use agent_op::TraceId;
use chrono::Utc;
use serde_json::Value;
use tokio::sync::watch;

pub use event::{Numbered, RunEvent};
pub use handle::{EventStream, RunHandle, Waited};
pub use limits::Limits;
pub use record::{
    Failure, Multitask, RunRecord, RunStatus, Spent, ThreadRecord, ThreadState, ThreadStatus, Turn,
};
pub use store::{Store, StoreError};

use crate::agents::{Agents, InvalidInput, Request, ServedAgent, message_of};
use hub::Hub;
use journal::RunJournal;
use limits::{Claim, Limiter};
use store::{InsertRun, RunEnd, ThreadEnd};
use subscriber::HubSubscriber;

/// Why a run could not be started or found.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsError {
    /// No agent has that name.
    #[error("no agent is named `{0}`")]
    UnknownAgent(String),
    /// No thread has that id.
    #[error("no thread has the id `{0}`")]
    UnknownThread(String),
    /// No run has that id.
    #[error("no run has the id `{0}`")]
    UnknownRun(String),
    /// No run on the thread waits for a person (a `resume` with nothing to resume).
    #[error("no run on thread `{0}` waits for an answer")]
    NotInterrupted(String),
    /// The thread has a run going (the [`Multitask::Reject`] strategy).
    #[error("thread `{0}` has a run going")]
    ThreadBusy(String),
    /// The agent refuses the input.
    #[error("the input is refused: {0}")]
    InvalidInput(#[from] InvalidInput),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The API key's limits refuse the run.
    #[error("over this key's limits: {what}")]
    Limited {
        /// Which limit.
        what: String,
        /// Seconds until a run may be accepted.
        retry_after: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A run to start: `NewRun::new(agent, input)`, then what differs from the defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NewRun {
    /// The agent.
    pub agent: String,
    /// The thread it continues, if any (it must exist).
    pub thread_id: Option<String>,
    /// Its input.
    pub input: Value,
    /// The caller's metadata.
    pub metadata: Value,
    /// The API key's name, if keys are configured.
    pub key: Option<String>,
    /// What it does to a run going on its thread.
    pub multitask: Multitask,
}

impl NewRun {
    /// A run of `agent` on `input`, on no thread, with no metadata and no key.
    pub fn new(agent: impl Into<String>, input: Value) -> NewRun {
        NewRun {
            agent: agent.into(),
            thread_id: None,
            input,
            metadata: Value::Object(serde_json::Map::new()),
            key: None,
            multitask: Multitask::default(),
        }
    }

    /// On the thread `id`, which sees its earlier turns.
    pub fn thread(mut self, id: impl Into<String>) -> NewRun {
        self.thread_id = Some(id.into());
        self
    }

    /// With the caller's metadata.
    pub fn metadata(mut self, metadata: Value) -> NewRun {
        self.metadata = metadata;
        self
    }

    /// Started with the API key named `name` (its limits apply).
    pub fn key(mut self, name: impl Into<String>) -> NewRun {
        self.key = Some(name.into());
        self
    }

    /// What it does to a run going on its thread (default [`Multitask::Enqueue`]).
    pub fn multitask(mut self, strategy: Multitask) -> NewRun {
        self.multitask = strategy;
        self
    }
}

/// What the run model keeps about a run that is going.
struct Live {
    hub: Arc<Hub>,
    cancel: CancellationToken,
    done: watch::Receiver<Option<RunRecord>>,
    /// Where a person's answer to an interrupt goes.
    steering: SteeringQueue,
    /// The interrupt the run waits on (a tool approval, a question), if any.
    waiting: Arc<watch::Sender<Option<Interrupt>>>,
    /// The run's thread, if any.
    thread_id: Option<String>,
    /// The order runs were started or queued in (the last of a thread's is its queue's
    /// tail).
    order: u64,
}

/// A run waiting for a person: what it asks, and the id to answer it by.
#[derive(Clone, Debug, PartialEq)]
pub struct Interrupt {
    /// Its id (the tool call's id for an approval).
    pub id: String,
    /// What the run asks (for an approval: the tool, the call's id and its arguments).
    pub value: Value,
}

/// The run model: starts runs on agents, keeps their events and records in a [`Store`].
/// Clones share it.
#[derive(Clone)]
pub struct Runs {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    agents: Agents,
    limiter: Limiter,
    live: Mutex<HashMap<String, Arc<Live>>>,
    /// The next [`Live::order`].
    order: std::sync::atomic::AtomicU64,
    /// Cancelled to stop every run at its next commit (shutdown).
    stopping: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
}

impl Runs {
    pub(crate) fn new(
        store: Store,
        agents: Agents,
        limits: HashMap<String, limits::Limits>,
    ) -> Runs {
        Runs {
            inner: Arc::new(Inner {
                store,
                agents,
                limiter: Limiter::new(limits),
                live: Mutex::default(),
                order: std::sync::atomic::AtomicU64::new(0),
                stopping: CancellationToken::new(),
                tasks: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The served agent `name`.
    pub(crate) fn agent(&self, name: &str) -> Option<&Arc<dyn ServedAgent>> {
        self.inner.agents.get(name)
    }

    /// The served agents, by name.
    pub(crate) fn agents(&self) -> impl Iterator<Item = (&String, &Arc<dyn ServedAgent>)> {
        self.inner.agents.by_name.iter()
    }

    /// Starts a run; it goes on in the background. On a thread with a run going, what
    /// happens is the run's [`Multitask`] strategy: [`RunsError::ThreadBusy`], the run going
    /// cancelled (and deleted), or this one queued behind it.
    pub async fn start(&self, new: NewRun) -> Result<RunHandle, RunsError> {
        if self.inner.tasks.is_closed() {
            return Err(RunsError::ShuttingDown);
        }
        let agent = self
            .agent(&new.agent)
            .ok_or_else(|| RunsError::UnknownAgent(new.agent.clone()))?
            .clone();
        // A run waiting for a person still holds its thread (the store says `interrupted`
        // for it, as for a run that was stopped), and so do runs queued there.
        let mut after = None;
        if let Some(id) = &new.thread_id {
            let going = self.on_thread(id);
            if !going.is_empty() {
                match new.multitask {
                    Multitask::Reject => return Err(RunsError::ThreadBusy(id.clone())),
                    Multitask::Interrupt | Multitask::Rollback => {
                        for (_, live) in &going {
                            live.cancel.cancel();
                        }
                        for (run_id, live) in &going {
                            let mut done = live.done.clone();
                            let _ = done.wait_for(Option::is_some).await;
                            if new.multitask == Multitask::Rollback {
                                self.inner.store.delete_run(run_id).await?;
                            }
                        }
                    }
                    _ => after = going.last().map(|(_, live)| live.clone()),
                }
            }
        }
        let history = match &new.thread_id {
            Some(id) => {
                self.inner
                    .store
                    .thread(id)
                    .await?
                    .ok_or_else(|| RunsError::UnknownThread(id.clone()))?
                    .turns
            }
            None => Vec::new(),
        };
        // Made before anything is written: a refused input leaves no run behind. A queued
        // run's program is made again when its turn comes, with the turns before it.
        let program = agent.program(Request {
            input: &new.input,
            history: &history,
        })?;
        let claim = match &new.key {
            Some(key) => self
                .inner
                .limiter
                .claim(key)
                .map_err(|refused| RunsError::Limited {
                    what: refused.what,
                    retry_after: refused.retry_after,
                })?,
            None => None,
        };
        let now = Utc::now();
        let record = RunRecord {
            id: uuid::Uuid::new_v4().to_string(),
            thread_id: new.thread_id.clone(),
            agent: new.agent.clone(),
            created_at: now,
            updated_at: now,
            status: RunStatus::Pending,
            metadata: new.metadata,
            input: new.input,
            output: None,
            failure: None,
            spent: Spent::default(),
            key: new.key,
            multitask: new.multitask,
        };
        let inserted = self
            .inner
            .store
            .insert_run(record.clone(), after.is_none())
            .await;
        let refused = match inserted {
            Ok(InsertRun::Inserted) => None,
            Ok(InsertRun::NoThread) => {
                Some(RunsError::UnknownThread(new.thread_id.unwrap_or_default()))
            }
            Ok(InsertRun::Busy) => Some(RunsError::ThreadBusy(new.thread_id.unwrap_or_default())),
            Err(error) => Some(error.into()),
        };
        if let Some(error) = refused {
            if let Some(claim) = &claim {
                self.inner.limiter.release(claim, Spent::default());
            }
            return Err(error);
        }
        let start = match after {
            Some(before) => Start::AfterTurn(before),
            None => Start::Now(program, history),
        };
        Ok(self.launch(record, agent, start, None, claim))
    }

    /// The runs going or queued on `thread`, in the order they were started.
    fn on_thread(&self, thread: &str) -> Vec<(String, Arc<Live>)> {
        let mut going: Vec<(String, Arc<Live>)> = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, live)| live.thread_id.as_deref() == Some(thread))
            .map(|(id, live)| (id.clone(), live.clone()))
            .collect();
        going.sort_by_key(|(_, live)| live.order);
        going
    }

    /// Waits for the turn of a queued run (`record`, behind `before`), then claims its
    /// thread and makes its program with the turns before it.
    async fn await_turn(
        &self,
        record: &RunRecord,
        agent: &Arc<dyn ServedAgent>,
        before: Arc<Live>,
        cancel: &CancellationToken,
    ) -> Result<(agent_op::Op<(), Value>, Vec<Turn>), Ended> {
        let mut done = before.done.clone();
        tokio::select! {
            _ = done.wait_for(Option::is_some) => {}
            () = cancel.cancelled() => return Err(Ended::BeforeStart(None)),
        }
        let thread = record.thread_id.as_deref().unwrap_or_default();
        let refused = |message: String| {
            Ended::BeforeStart(Some(Failure {
                kind: "refused".into(),
                message,
            }))
        };
        match self.inner.store.claim_thread(thread).await {
            Ok(InsertRun::Inserted) => {}
            Ok(InsertRun::NoThread) => return Err(refused(format!("thread `{thread}` is gone"))),
            Ok(InsertRun::Busy) => {
                return Err(refused(format!(
                    "thread `{thread}` was taken by another run"
                )));
            }
            Err(error) => return Err(refused(error.to_string())),
        }
        let history = match self.inner.store.thread(thread).await {
            Ok(Some(thread)) => thread.turns,
            Ok(None) => return Err(refused(format!("thread `{thread}` is gone"))),
            Err(error) => return Err(refused(error.to_string())),
        };
        let program = agent
            .program(Request {
                input: &record.input,
                history: &history,
            })
            .map_err(|refusal| refused(refusal.to_string()))?;
        Ok((program, history))
    }

    /// Runs the program of `record` in the background, from its journal if `resume`.
    fn launch(
        &self,
        record: RunRecord,
        agent: Arc<dyn ServedAgent>,
        start: Start,
        resumed: Option<Resumed>,
        claim: Option<Claim>,
    ) -> RunHandle {
        let after = resumed.as_ref().map_or(0, |r| r.after);
        let hub = Hub::new(&record.id, after, self.inner.store.clone());
        let cancel = self.inner.stopping.child_token();
        let (done_tx, done) = watch::channel(None);
        let steering = SteeringQueue::new();
        let waiting = Arc::new(watch::channel(None).0);
        let live = Arc::new(Live {
            hub: hub.clone(),
            cancel: cancel.clone(),
            done,
            steering: steering.clone(),
            waiting: waiting.clone(),
            thread_id: record.thread_id.clone(),
            order: self
                .inner
                .order
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        });
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(record.id.clone(), live.clone());
        let runs = self.clone();
        let started = record.clone();
        // Budgets of the key's day wrap the program when it is made: at once, or when a
        // queued run's turn comes.
        let budget = claim.as_ref().and_then(|c| c.budget.clone());
        self.inner.tasks.spawn(async move {
            let ready = match start {
                Start::Now(program, history) => Ok((program, history)),
                Start::AfterTurn(before) => {
                    runs.await_turn(&started, &agent, before, &cancel).await
                }
            };
            let (end, history) = match ready {
                Ok((program, history)) => {
                    let program = within_allowance(budget, program);
                    let end = runs
                        .execute(&started, agent, program, &hub, (cancel, steering, waiting), resumed)
                        .await;
                    (end, history)
                }
                Err(ended) => (Err(ended), Vec::new()),
            };
            let stopped = matches!(&end, Err(Ended::Run(e)) if matches!(e.kind, agent_engine::ErrorKind::Aborted))
                || matches!(&end, Err(Ended::BeforeStart(None)));
            let stopped = stopped && runs.inner.stopping.is_cancelled();
            let finished = if stopped {
                // Stopped by the server's shutdown, not by its caller: left running in the
                // store, with its journal, for the next server to resume.
                let _ = runs.inner.store.flush().await;
                started
            } else {
                runs.finish(started, history, end, &hub).await
            };
            hub.close();
            if let Some(claim) = &claim {
                runs.inner.limiter.release(claim, finished.spent);
            }
            runs.inner
                .live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&finished.id);
            let _ = done_tx.send(Some(finished));
        });
        RunHandle {
            record,
            live: Some(live),
            resumed_from: 0,
            runs: self.clone(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        record: &RunRecord,
        agent: Arc<dyn ServedAgent>,
        program: agent_op::Op<(), Value>,
        hub: &Arc<Hub>,
        (cancel, steering, waiting): (
            CancellationToken,
            SteeringQueue,
            Arc<watch::Sender<Option<Interrupt>>>,
        ),
        resumed: Option<Resumed>,
    ) -> Result<agent_engine::Outcome<(), Value>, Ended> {
        self.inner.store.set_running(&record.id);
        hub.push(RunEvent::Started {
            run_id: record.id.clone(),
            thread_id: record.thread_id.clone(),
            agent: record.agent.clone(),
        });
        let config = agent
            .config()
            .cancel_token(cancel)
            .steering(steering)
            .trace_id(TraceId::from(record.id.as_str()))
            .name(record.agent.clone())
            .subscribe(HubSubscriber {
                hub: hub.clone(),
                waiting,
                store: self.inner.store.clone(),
                run_id: record.id.clone(),
                thread_id: record.thread_id.clone(),
                skip: std::sync::atomic::AtomicU64::new(
                    resumed.as_ref().map_or(0, |r| r.trace_events),
                ),
            });
        let journal = Arc::new(RunJournal {
            store: self.inner.store.clone(),
            run_id: record.id.clone(),
        });
        let outcome = if resumed.is_some() {
            agent_interp_par::resume(&config, journal, (), program).await
        } else {
            agent_interp_par::run_durable(&config, journal, (), program).await
        };
        outcome.map_err(|e| Ended::Run(Box::new(e)))
    }

    /// Records how the run ended and tells its followers; the final record.
    async fn finish(
        &self,
        record: RunRecord,
        mut turns: Vec<Turn>,
        end: Result<agent_engine::Outcome<(), Value>, Ended>,
        hub: &Hub,
    ) -> RunRecord {
        let (status, output, failure, trace) = match end {
            Ok(outcome) => (
                RunStatus::Success,
                Some(outcome.value),
                None,
                Some(outcome.trace),
            ),
            Err(Ended::Run(error)) => {
                let status = if matches!(error.kind, agent_engine::ErrorKind::Aborted) {
                    RunStatus::Interrupted
                } else {
                    RunStatus::Error
                };
                let failure = Failure {
                    kind: error.kind.kind_name().to_owned(),
                    message: error.kind.to_string(),
                };
                (status, None, Some(failure), Some(error.trace))
            }
            // A failure, not none: an `interrupted` run with neither failure nor trace is one
            // waiting for a person, which a restarted server resumes.
            Err(Ended::BeforeStart(None)) => (
                RunStatus::Interrupted,
                None,
                Some(Failure {
                    kind: "cancelled".into(),
                    message: "cancelled before its turn came".into(),
                }),
                None,
            ),
            Err(Ended::BeforeStart(Some(failure))) => (RunStatus::Error, None, Some(failure), None),
        };
        let spent = trace.as_ref().map(Spent::of).unwrap_or_default();
        match (&output, &failure) {
            (Some(value), _) => hub.push(RunEvent::Output {
                value: value.clone(),
                spent,
            }),
            (None, Some(failure)) => hub.push(RunEvent::Failed {
                failure: failure.clone(),
                spent,
            }),
            (None, None) => {}
        }
        hub.push(RunEvent::Ended { status });
        let trace_bytes = trace.as_ref().and_then(|trace| {
            let mut bytes = Vec::new();
            agent_op::trace::jsonl::write_jsonl(trace, &mut bytes)
                .ok()
                .map(|()| bytes)
        });
        let thread = record.thread_id.as_ref().map(|id| {
            if let Some(output) = &output {
                // The turns the input carried join the thread with it, as LangGraph's
                // `messages` state adds every input message.
                let user = match message_of(&record.input) {
                    Some((message, earlier)) => {
                        turns.extend(earlier);
                        message
                    }
                    None => record.input.to_string(),
                };
                turns.push(Turn {
                    role: "user".into(),
                    content: user,
                });
                turns.push(Turn {
                    role: "assistant".into(),
                    content: match output {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    },
                });
            }
            ThreadEnd {
                id: id.clone(),
                status: match status {
                    RunStatus::Success => ThreadStatus::Idle,
                    RunStatus::Interrupted => ThreadStatus::Interrupted,
                    _ => ThreadStatus::Error,
                },
                turns,
            }
        });
        let end = RunEnd {
            run_id: record.id.clone(),
            status,
            output: output.clone(),
            failure: failure.clone(),
            spent,
            trace: trace_bytes,
            thread,
        };
        if let Err(error) = self.inner.store.finish_run(end).await {
            tracing::error!(run = %record.id, %error, "agent-serve: the end of a run was not stored");
        }
        RunRecord {
            status,
            output,
            failure,
            spent,
            updated_at: Utc::now(),
            ..record
        }
    }

    /// The run `id`: live if it is going, else as stored.
    pub async fn get(&self, id: &str) -> Result<RunHandle, RunsError> {
        let live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned();
        let record = self
            .inner
            .store
            .run(id)
            .await?
            .ok_or_else(|| RunsError::UnknownRun(id.to_owned()))?;
        // A run that ended between the two reads still has its (closed) hub and its end.
        Ok(RunHandle {
            record,
            live,
            resumed_from: 0,
            runs: self.clone(),
        })
    }

    /// What the run going on `thread_id` waits for, if it waits for a person.
    pub fn interrupt(&self, thread_id: &str) -> Option<Interrupt> {
        let (_, live) = self.waiting_on(thread_id)?;
        live.waiting.borrow().clone()
    }

    /// The run on `thread_id` that waits for a person, with its id.
    fn waiting_on(&self, thread_id: &str) -> Option<(String, Arc<Live>)> {
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(_, live)| {
                live.thread_id.as_deref() == Some(thread_id) && live.waiting.borrow().is_some()
            })
            .map(|(id, live)| (id.clone(), live.clone()))
    }

    /// Answers the interrupt the run going on `thread_id` waits on (`approve` approves a
    /// tool call; anything else is the person's answer or refusal) and lets it go on;
    /// [`RunsError::NotInterrupted`] if no run there waits.
    pub async fn resume(&self, thread_id: &str, answer: String) -> Result<RunHandle, RunsError> {
        let Some((run_id, live)) = self.waiting_on(thread_id) else {
            self.thread(thread_id).await?;
            return Err(RunsError::NotInterrupted(thread_id.to_owned()));
        };
        let resumed_from = live.hub.last_seq();
        live.waiting.send_replace(None);
        self.inner
            .store
            .set_status(&run_id, RunStatus::Running, Some(thread_id));
        live.steering.push(agent_op::Steering::new(answer));
        let record = self
            .inner
            .store
            .run(&run_id)
            .await?
            .ok_or_else(|| RunsError::UnknownRun(run_id.clone()))?;
        Ok(RunHandle {
            record: RunRecord {
                status: RunStatus::Running,
                ..record
            },
            live: Some(live),
            resumed_from,
            runs: self.clone(),
        })
    }

    /// Creates a thread (with the caller's id, if given); `Ok(None)` if that id is taken.
    pub async fn create_thread(
        &self,
        id: Option<String>,
        metadata: Value,
    ) -> Result<Option<ThreadRecord>, RunsError> {
        let now = Utc::now();
        Ok(self
            .inner
            .store
            .insert_thread(ThreadRecord {
                id: id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                created_at: now,
                updated_at: now,
                metadata,
                status: ThreadStatus::Idle,
                turns: Vec::new(),
                last_output: None,
            })
            .await?)
    }

    /// The thread `id`.
    pub async fn thread(&self, id: &str) -> Result<ThreadRecord, RunsError> {
        self.inner
            .store
            .thread(id)
            .await?
            .ok_or_else(|| RunsError::UnknownThread(id.to_owned()))
    }

    /// The thread's states, newest first.
    pub async fn thread_history(
        &self,
        id: &str,
        limit: usize,
    ) -> Result<Vec<ThreadState>, RunsError> {
        self.thread(id).await?;
        Ok(self.inner.store.thread_history(id, limit).await?)
    }

    /// Runs, newest first.
    pub async fn list(
        &self,
        thread: Option<&str>,
        status: Option<RunStatus>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<RunRecord>, RunsError> {
        Ok(self
            .inner
            .store
            .runs(thread.map(str::to_owned), status, limit, offset)
            .await?)
    }

    /// The JSONL trace of a finished run (`None` while it goes).
    pub async fn trace(&self, id: &str) -> Result<Option<Vec<u8>>, RunsError> {
        self.get(id).await?;
        Ok(self.inner.store.trace(id).await?)
    }

    /// Counts today's spend of each key's stored runs toward its daily limits (a restart
    /// does not reset the day).
    pub(crate) async fn seed_limits(&self) -> Result<(), RunsError> {
        for (key, spent, at) in self.inner.store.spent_since(start_of_day()).await? {
            self.inner.limiter.seed(&key, spent, at);
        }
        Ok(())
    }

    /// Continues the runs a stopped server left pending, running or waiting for a person, from their journals:
    /// no committed model or tool call is made again. Returns how many.
    pub async fn recover(&self) -> Result<usize, RunsError> {
        let unfinished = self.inner.store.unfinished_runs().await?;
        let mut count = 0;
        for record in unfinished {
            let Some(agent) = self.agent(&record.agent).cloned() else {
                tracing::warn!(run = %record.id, agent = %record.agent, "agent-serve: cannot resume a run of an agent no longer served");
                continue;
            };
            // A run queued behind another on its thread (resumed just before it, as runs
            // come oldest first) waits for its turn again.
            if let Some(before) = record
                .thread_id
                .as_deref()
                .and_then(|id| self.on_thread(id).pop())
            {
                self.launch(record, agent, Start::AfterTurn(before.1), None, None);
                count += 1;
                continue;
            }
            let history = match &record.thread_id {
                Some(id) => self
                    .inner
                    .store
                    .thread(id)
                    .await?
                    .map(|t| t.turns)
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            let program = match agent.program(Request {
                input: &record.input,
                history: &history,
            }) {
                Ok(program) => program,
                Err(error) => {
                    tracing::warn!(run = %record.id, %error, "agent-serve: cannot resume a run");
                    continue;
                }
            };
            let stored = self.inner.store.events_after(&record.id, 0).await?;
            let resumed = Resumed {
                after: stored.last().map_or(0, |e| e.seq),
                trace_events: stored
                    .iter()
                    .filter(|e| matches!(e.event, RunEvent::Trace { .. }))
                    .count() as u64,
            };
            // A resumed run is not counted against its key's limits again (its program
            // must be the one journaled, which ran under the key's budget of that day).
            self.launch(
                record,
                agent,
                Start::Now(program, history),
                Some(resumed),
                None,
            );
            count += 1;
        }
        Ok(count)
    }

    /// Stops accepting runs and waits (at most `grace`) for the running ones to end;
    /// those still going then are cancelled at their next commit (their journals keep what
    /// they did, and a restarted server resumes them).
    pub async fn shutdown(&self, grace: std::time::Duration) {
        self.inner.tasks.close();
        if tokio::time::timeout(grace, self.inner.tasks.wait())
            .await
            .is_err()
        {
            self.inner.stopping.cancel();
            let _ = tokio::time::timeout(grace, self.inner.tasks.wait()).await;
        }
        let _ = self.inner.store.flush().await;
    }
}

/// `program` within what the API key has left of its day, if it has a daily allowance.
fn within_allowance(
    budget: Option<agent_op::Budget>,
    program: agent_op::Op<(), Value>,
) -> agent_op::Op<(), Value> {
    match budget {
        Some(budget) => agent_op::op::limit(budget, program).and_then(|limited| match limited {
            Ok(answer) => agent_op::op::pure(answer),
            Err(spent) => {
                agent_op::op::fail(format!("the API key's daily allowance ran out: {spent}"))
            }
        }),
        None => program,
    }
}

/// What a launched run runs.
enum Start {
    /// Its program, made with its thread's turns.
    Now(agent_op::Op<(), Value>, Vec<Turn>),
    /// A queued run: its program is made when the run before it on its thread is over.
    AfterTurn(Arc<Live>),
}

fn start_of_day() -> chrono::DateTime<Utc> {
    Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .map_or_else(Utc::now, |t| t.and_utc())
}

/// Where a resumed run's events stand.
struct Resumed {
    /// The last event stored.
    after: u64,
    /// How many of the stored events are trace events.
    trace_events: u64,
}

/// How a run stopped, when it did not answer.
enum Ended {
    /// Its program failed or was cancelled.
    Run(Box<RunError>),
    /// A queued run ended before its turn: cancelled (`None`), or refused when its turn came.
    BeforeStart(Option<Failure>),
}

/// Every public future of the run model can be `tokio::spawn`ed.
#[allow(dead_code)]
fn futures_are_send(runs: &Runs, handle: &RunHandle) {
    fn send<T: Send>(_: T) {}
    send(runs.start(NewRun {
        agent: String::new(),
        thread_id: None,
        input: Value::Null,
        metadata: Value::Null,
        key: None,
        multitask: Multitask::Reject,
    }));
    send(handle.wait());
    send(handle.events(0).next());
    send(runs.recover());
    send(runs.shutdown(std::time::Duration::ZERO));
}
