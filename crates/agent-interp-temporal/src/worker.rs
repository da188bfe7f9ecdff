//! [`Worker`]: registers programs and effect handlers, and serves a task queue.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use agent_engine::{Engine, ErrorKind};
use agent_op::{MemoryBackend, Op, Provider, Tool, ToolSet};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use temporalio_client::Client;
use temporalio_common::worker::{WorkerDeploymentOptions, build_id_from_current_exe};
use temporalio_sdk::WorkerOptions;
use temporalio_sdk::runtime::WorkflowErrorType;

use crate::activities::Effects;
use crate::error::TemporalError;
use crate::proxy::ActivitySettings;
use crate::scheduler::WorkflowScheduler;
use crate::wire::ProgramOutput;
use crate::workflow::{self, Failure, Registration, Runnable, Start};

/// How long one effect activity may run (a model call, a tool call, a memory operation).
pub const DEFAULT_ACTIVITY_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a worker may stay silent while running an activity before the server gives the
/// activity to another worker (it heartbeats twice a second while it runs).
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often an activity is tried when its worker dies or times out. A provider's or tool's
/// own error is not retried by Temporal: the program sees it, as it would in one process.
pub const DEFAULT_ACTIVITY_ATTEMPTS: u32 = 10;

/// How many effects (model, tool and memory calls) a workflow run starts before it
/// continues as new: a sequential agent loop writes about six history events per call, so
/// this stays under Temporal's warning at 10,240 events.
pub const DEFAULT_CONTINUE_AS_NEW_AFTER: usize = 1_000;

/// A Temporal worker for effect-agents programs: it runs the workflows of the programs
/// registered on it and the activities (model, tool and memory calls) of every program on
/// its task queue.
///
/// Every worker that runs workflows of a task queue must register the same programs, the same
/// tool definitions and a provider with the same prices (budgets reserve from them inside
/// the workflow). Workers with no program serve activities only, with their own provider,
/// tools and memory: put them where the GPUs, keys or data are.
///
/// [`Worker::run`]'s future is not `Send` (the SDK's workflows are single-threaded): drive
/// it on the task that calls it (`tokio::join!`, `select!`), not with `tokio::spawn`.
pub struct Worker {
    client: Client,
    task_queue: String,
    programs: Vec<(String, Start)>,
    provider: Option<Arc<dyn Provider>>,
    tools: ToolSet,
    memory: Option<Arc<dyn MemoryBackend>>,
    activity_timeout: Duration,
    heartbeat_timeout: Duration,
    activity_attempts: u32,
    max_concurrency: Option<NonZeroUsize>,
    max_cached_workflows: usize,
    max_concurrent_activities: usize,
    build_id: Option<String>,
    continue_as_new_after: Option<usize>,
}

impl Worker {
    /// A worker of `task_queue` on the server `client` is connected to, with no program and no
    /// effect handlers yet.
    pub fn new(client: Client, task_queue: impl Into<String>) -> Worker {
        Worker {
            client,
            task_queue: task_queue.into(),
            programs: Vec::new(),
            provider: None,
            tools: ToolSet::new(),
            memory: None,
            activity_timeout: DEFAULT_ACTIVITY_TIMEOUT,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            activity_attempts: DEFAULT_ACTIVITY_ATTEMPTS,
            max_concurrency: None,
            max_cached_workflows: 1000,
            max_concurrent_activities: 1000,
            build_id: None,
            continue_as_new_after: Some(DEFAULT_CONTINUE_AS_NEW_AFTER),
        }
    }

    /// Registers the program `name`: `make` builds it from its (deserialized) input; it starts
    /// from `S::default()`. The run's value and final state are serialized into the result.
    pub fn program<In, S, A, F>(self, name: impl Into<String>, make: F) -> Worker
    where
        In: DeserializeOwned,
        S: Default + Clone + Serialize + Send + 'static,
        A: Serialize + Send + 'static,
        F: Fn(In) -> Op<S, A> + Send + Sync + 'static,
    {
        self.program_with_state(name, move |input: In| (S::default(), make(input)))
    }

    /// Registers the program `name`: `make` builds its initial state and the program from its
    /// (deserialized) input.
    pub fn program_with_state<In, S, A, F>(mut self, name: impl Into<String>, make: F) -> Worker
    where
        In: DeserializeOwned,
        S: Clone + Serialize + Send + 'static,
        A: Serialize + Send + 'static,
        F: Fn(In) -> (S, Op<S, A>) + Send + Sync + 'static,
    {
        let start: Start = Arc::new(move |input: Value| -> Result<Runnable, String> {
            let input: In = serde_json::from_value(input).map_err(|e| e.to_string())?;
            let (state, program) = make(input);
            Ok(Box::new(move |config, journal| {
                Box::pin(async move {
                    let scheduler = WorkflowScheduler::with_limit(config.concurrency_limit());
                    // Durably into the run's journal, which holds what the runs before this
                    // one did when the workflow continued as new (answered with no activity).
                    let outcome = Engine::new(scheduler)
                        .resume(&config, journal, state, program)
                        .await
                        .map_err(|error| Failure {
                            kind: error.kind.kind_name().to_owned(),
                            message: describe(&error.kind),
                        })?;
                    let codec = |e: serde_json::Error| Failure {
                        kind: "bad_output".into(),
                        message: e.to_string(),
                    };
                    Ok(ProgramOutput {
                        value: serde_json::to_value(&outcome.value).map_err(codec)?,
                        state: serde_json::to_value(&outcome.state).map_err(codec)?,
                        trace: outcome.trace,
                        checkpoints: outcome.checkpoints,
                    })
                })
            }))
        });
        self.programs.push((name.into(), start));
        self
    }

    /// The model provider activities call (and whose prices workflows reserve budgets with).
    pub fn provider(self, provider: impl Provider + 'static) -> Worker {
        self.shared_provider(Arc::new(provider))
    }

    /// A shared model provider (see [`Worker::provider`]).
    pub fn shared_provider(mut self, provider: Arc<dyn Provider>) -> Worker {
        self.provider = Some(provider);
        self
    }

    /// The tools programs may call: run by this worker's activities, offered to the models
    /// of the workflows it runs.
    pub fn tools(mut self, tools: ToolSet) -> Worker {
        self.tools = tools;
        self
    }

    /// Adds one tool (see [`Worker::tools`]).
    pub fn tool(mut self, tool: impl Tool + 'static) -> Worker {
        self.tools.insert(Arc::new(tool));
        self
    }

    /// The memory backend of `remember`, `recall` and `forget`, reached through activities.
    pub fn memory(self, memory: impl MemoryBackend + 'static) -> Worker {
        self.shared_memory(Arc::new(memory))
    }

    /// A shared memory backend (see [`Worker::memory`]).
    pub fn shared_memory(mut self, memory: Arc<dyn MemoryBackend>) -> Worker {
        self.memory = Some(memory);
        self
    }

    /// How long one effect activity may run ([`DEFAULT_ACTIVITY_TIMEOUT`]).
    pub fn activity_timeout(mut self, timeout: Duration) -> Worker {
        self.activity_timeout = timeout;
        self
    }

    /// How long a silent activity worker is trusted ([`DEFAULT_HEARTBEAT_TIMEOUT`]); a
    /// worker that dies mid-call is noticed after this long and the call given to another.
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Worker {
        self.heartbeat_timeout = timeout;
        self
    }

    /// How often an activity is tried when workers die or time out
    /// ([`DEFAULT_ACTIVITY_ATTEMPTS`]).
    pub fn activity_attempts(mut self, attempts: u32) -> Worker {
        self.activity_attempts = attempts.max(1);
        self
    }

    /// Runs at most `limit` branches of each fork at once, in the workflows this worker runs.
    pub fn max_concurrency(mut self, limit: NonZeroUsize) -> Worker {
        self.max_concurrency = Some(limit);
        self
    }

    /// How many workflows this worker keeps in memory between their tasks (others are
    /// rebuilt from their history when their next task comes); 0 rebuilds every time.
    pub fn max_cached_workflows(mut self, n: usize) -> Worker {
        self.max_cached_workflows = n;
        self
    }

    /// How many activities this worker runs at once.
    pub fn max_concurrent_activities(mut self, n: usize) -> Worker {
        self.max_concurrent_activities = n.max(1);
        self
    }

    /// How many effects a workflow run starts before it continues as new
    /// ([`DEFAULT_CONTINUE_AS_NEW_AFTER`]), or sooner if the server suggests it (the
    /// history nears Temporal's limits). `None` never continues as new: the history grows
    /// until Temporal fails the run at 51,200 events.
    ///
    /// Continuing as new is invisible to the program: the next run resumes from the
    /// journal the run hands over (no call is made again) and goes on, so the result, state
    /// and trace are those of one long run. It waits for a quiet moment: no effect in
    /// flight. The journal travels as the next run's input, which Temporal caps at 2 MiB; a
    /// run whose journal is larger goes on in its own history (with a warning). Every
    /// worker of a task queue should use the same setting.
    pub fn continue_as_new_after(mut self, effects: Option<usize>) -> Worker {
        self.continue_as_new_after = effects.map(|n| n.max(1));
        self
    }

    /// The build id this worker reports (by default, a hash of the running executable).
    /// Temporal refuses two workers of one process that serve the same kinds of task on one
    /// task queue with the same build id; give each its own to run several in one process.
    pub fn build_id(mut self, id: impl Into<String>) -> Worker {
        self.build_id = Some(id.into());
        self
    }

    fn options(self) -> Result<(WorkerOptions, Client), TemporalError> {
        use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder};
        let activity = ActivitySettings {
            timeout: self.activity_timeout,
            heartbeat: self.heartbeat_timeout,
            attempts: self.activity_attempts,
        };
        let tuner = TunerHolder::builder()
            .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(100))
            .activity_task_slot_supplier(FixedSizeSlotSupplier::new(self.max_concurrent_activities))
            .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(10))
            .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(10))
            .build();
        let tools = self.tools.definitions();
        let mut options = WorkerOptions::new(self.task_queue.clone())
            .register_activities(Effects {
                provider: self.provider.clone(),
                tools: self.tools.clone(),
                memory: self.memory.clone(),
                identity: format!("{}@{}", self.task_queue, std::process::id()),
            })
            .tuner(tuner)
            .deployment_options(WorkerDeploymentOptions::from_build_id(
                self.build_id
                    .clone()
                    .unwrap_or_else(|| build_id_from_current_exe().to_owned()),
            ))
            .max_cached_workflows(self.max_cached_workflows)
            // A program changed under a running workflow fails the workflow with Temporal's
            // non-determinism error (reported as `TemporalError::Divergence`), instead of
            // retrying its task forever.
            .workflow_failure_errors(std::collections::HashSet::from([
                WorkflowErrorType::Nondeterminism,
            ]))
            .graceful_shutdown_period(Duration::from_secs(1))
            .build();
        for (name, start) in self.programs {
            let registration = Registration {
                start,
                provider: self.provider.clone(),
                tools: tools.clone(),
                memory: self.memory.is_some(),
                activity,
                max_concurrency: self.max_concurrency,
                continue_as_new_after: self.continue_as_new_after,
            };
            workflow::register(&mut options, &name, registration)
                .map_err(|e| TemporalError::Worker(format!("registering program `{name}`: {e}")))?;
        }
        Ok((options, self.client))
    }

    /// Serves the task queue until `shutdown` resolves, then lets running activities finish
    /// for up to a second and returns.
    ///
    /// Needs a multi-threaded tokio runtime (the SDK runs its workflows on threads of its
    /// own). The future is not `Send`: await it on the task that made it.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), TemporalError> {
        let (options, client) = self.options()?;
        let runtime = temporalio_sdk::Runtime::from_current_tokio(Default::default())
            .map_err(|e| TemporalError::Worker(e.to_string()))?;
        let mut worker = temporalio_sdk::Worker::new(&runtime, client, options)
            .map_err(|e| TemporalError::Worker(e.to_string()))?;
        let stop = worker.shutdown_handle();
        let stopper = async move {
            shutdown.await;
            stop();
        };
        let (ran, ()) = tokio::join!(worker.run(), stopper);
        ran.map_err(|e| TemporalError::Worker(e.to_string()))
    }
}

/// An error with its causes, as one line.
fn describe(kind: &ErrorKind) -> String {
    let mut message = kind.to_string();
    let mut source = std::error::Error::source(kind);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
