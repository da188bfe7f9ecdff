//! [`Config`]: what a run may use, and the handles to steer and abort it.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use agent_op::{ContextPipeline, MemoryBackend, Provider, Steering, Tool, ToolSet, TraceId};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::subscriber::Subscriber;

/// What a run may use: the model provider, the permitted tools, the memory backend, event
/// subscribers, the steering queue and the abort token. Cloning is cheap (everything is shared).
///
/// ```
/// use agent_engine::Config;
/// use agent_provider::ScriptedProvider;
/// use agent_op::Response;
///
/// let provider = ScriptedProvider::new([Response::text("hello")]);
/// let config = Config::new().provider(provider).trace_id("calm-owl-0001");
/// config.abort_handle().cancel(); // stops the run promptly with `ErrorKind::Aborted`
/// ```
#[derive(Clone, Default)]
pub struct Config {
    pub(crate) provider: Option<Arc<dyn Provider>>,
    pub(crate) tools: ToolSet,
    pub(crate) memory: Option<Arc<dyn MemoryBackend>>,
    pub(crate) context: Option<Arc<dyn ContextPipeline>>,
    pub(crate) subscribers: Vec<Arc<dyn Subscriber>>,
    pub(crate) steering: SteeringQueue,
    pub(crate) cancel: CancellationToken,
    pub(crate) trace_id: Option<TraceId>,
    pub(crate) max_concurrency: Option<NonZeroUsize>,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) goal: Option<Arc<str>>,
    /// `record_content(false)`: stored inverted so that the derived default records.
    pub(crate) omit_content: bool,
    pub(crate) export_content: bool,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) random_seed: Option<u64>,
    pub(crate) route_tools_through_config: bool,
}

impl Config {
    /// A config with no provider, tools, memory or subscribers.
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets the model provider.
    pub fn provider(mut self, provider: impl Provider + 'static) -> Config {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// Sets a shared model provider.
    pub fn shared_provider(mut self, provider: Arc<dyn Provider>) -> Config {
        self.provider = Some(provider);
        self
    }

    /// Sets the tools the run may call (any other tool name fails the run).
    pub fn tools(mut self, tools: ToolSet) -> Config {
        self.tools = tools;
        self
    }

    /// Adds one permitted tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Config {
        self.tools.insert(Arc::new(tool));
        self
    }

    /// Sets the memory backend for `remember`, `recall` and `forget`.
    pub fn memory(mut self, memory: impl MemoryBackend + 'static) -> Config {
        self.memory = Some(Arc::new(memory));
        self
    }

    /// Sets a shared memory backend.
    pub fn shared_memory(mut self, memory: Arc<dyn MemoryBackend>) -> Config {
        self.memory = Some(memory);
        self
    }

    /// Sets how `op::infer` builds its prompts: the sources it gathers context from and how
    /// it compiles them. Without one, the run uses `agent_prompt::Pipeline::new()` (no
    /// sources: the request's observation and the run's tools, fitted to its budget) when
    /// this crate's `prompt` feature is on, and fails `infer` calls with
    /// [`ErrorKind::NoContextPipeline`](crate::ErrorKind::NoContextPipeline) when it is off.
    pub fn context_pipeline(mut self, pipeline: impl ContextPipeline + 'static) -> Config {
        self.context = Some(Arc::new(pipeline));
        self
    }

    /// Sets a shared context pipeline (see [`Config::context_pipeline`]).
    pub fn shared_context_pipeline(mut self, pipeline: Arc<dyn ContextPipeline>) -> Config {
        self.context = Some(pipeline);
        self
    }

    /// Adds an event subscriber; every event is passed to every subscriber as it happens.
    pub fn subscribe(mut self, subscriber: impl Subscriber + 'static) -> Config {
        self.subscribers.push(Arc::new(subscriber));
        self
    }

    /// Adds an event subscriber the caller keeps a handle on (to read what it gathered, or to
    /// [`flush`](crate::JsonlSubscriber::flush) it).
    pub fn shared_subscriber(mut self, subscriber: Arc<dyn Subscriber>) -> Config {
        self.subscribers.push(subscriber);
        self
    }

    /// Uses `queue` for steering messages (share it with whoever steers the run).
    pub fn steering(mut self, queue: SteeringQueue) -> Config {
        self.steering = queue;
        self
    }

    /// Uses `token` to abort the run: cancelling it stops the run promptly.
    pub fn cancel_token(mut self, token: CancellationToken) -> Config {
        self.cancel = token;
        self
    }

    /// Names the agent this run is: its `tracing` root span is `invoke_agent {name}`, with
    /// `gen_ai.agent.name` set.
    pub fn name(mut self, name: impl Into<String>) -> Config {
        self.name = Some(Arc::from(name.into()));
        self
    }

    /// What the agent this run is was asked: with [`export_content`](Config::export_content),
    /// its `invoke_agent` span carries it as `gen_ai.input.messages` (a user message), beside
    /// the answer as `gen_ai.output.messages`, so a backend shows the run's question and
    /// answer at its top.
    pub fn goal(mut self, goal: impl Into<String>) -> Config {
        self.goal = Some(Arc::from(goal.into()));
        self
    }

    /// Whether the trace records content: every model call's whole request (messages, tools
    /// offered, options) and reply, and every tool call's whole output. On by default, for
    /// runs whose trace stays with whoever ran them; `record_content(false)` keeps only
    /// previews and hashes (for traces of personal data, say). Tool arguments are always
    /// recorded; credentials never are (providers keep them out of requests and errors).
    pub fn record_content(mut self, on: bool) -> Config {
        self.omit_content = !on;
        self
    }

    /// Also puts content on the run's `tracing` spans, which exporters send elsewhere:
    /// prompts and replies (`gen_ai.input.messages`, `gen_ai.output.messages`), tool arguments
    /// and results. Off by default, since they can hold secrets and personal data; only
    /// takes effect while [`record_content`](Config::record_content) is on.
    pub fn export_content(mut self, on: bool) -> Config {
        self.export_content = on;
        self
    }

    /// Whether the trace records content.
    pub(crate) fn records_content(&self) -> bool {
        !self.omit_content
    }

    /// Whether spans carry content.
    pub(crate) fn exports_content(&self) -> bool {
        self.export_content && !self.omit_content
    }

    /// Reads time from `clock` instead of tokio's: deadlines, waits, `op::now`, checkpoint
    /// times (see [`Clock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Config {
        self.clock = Some(clock);
        self
    }

    /// Draws `op::random`'s numbers from a generator seeded with `seed`, one sequence per
    /// run, instead of from the thread's generator: the same program draws the same numbers
    /// in the same order (a Temporal workflow seeds it from the workflow's own seed).
    pub fn random_seed(mut self, seed: u64) -> Config {
        self.random_seed = Some(seed);
        self
    }

    /// Runs every tool call with the config's tool of that name, even when a `with_tools`
    /// scope of the program carries its own tool object (the scope still decides which tools
    /// may run). For interpreters whose config tools run the calls elsewhere: the Temporal
    /// interpreter's start activities on whichever worker picks them up.
    pub fn route_tools_through_config(mut self, on: bool) -> Config {
        self.route_tools_through_config = on;
        self
    }

    /// Fixes the run's trace id (otherwise each run gets a fresh random one).
    pub fn trace_id(mut self, id: impl Into<TraceId>) -> Config {
        self.trace_id = Some(id.into());
        self
    }

    /// Runs at most `limit` branches of each `par` or `race` at once (concurrent interpreters;
    /// the sequential one runs one branch at a time anyway). The limit is per fork, so nested
    /// forks cannot deadlock waiting for each other's slots.
    pub fn max_concurrency(mut self, limit: NonZeroUsize) -> Config {
        self.max_concurrency = Some(limit);
        self
    }

    /// The per-fork concurrency limit, if any.
    pub fn concurrency_limit(&self) -> Option<NonZeroUsize> {
        self.max_concurrency
    }

    /// The steering queue: push messages here for the program's `op::next_steering()`.
    pub fn steering_queue(&self) -> &SteeringQueue {
        &self.steering
    }

    /// The abort token: `cancel()` it to stop the run.
    pub fn abort_handle(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The permitted tools.
    pub fn tool_set(&self) -> &ToolSet {
        &self.tools
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("provider", &self.provider.is_some())
            .field("tools", &self.tools)
            .field("memory", &self.memory.is_some())
            .field("context_pipeline", &self.context.is_some())
            .field("subscribers", &self.subscribers.len())
            .field("steering", &self.steering.len())
            .field("aborted", &self.cancel.is_cancelled())
            .field("trace_id", &self.trace_id)
            .field("max_concurrency", &self.max_concurrency)
            .field("name", &self.name)
            .field("record_content", &!self.omit_content)
            .field("export_content", &self.export_content)
            .field("clock", &self.clock.is_some())
            .field("random_seed", &self.random_seed)
            .field(
                "route_tools_through_config",
                &self.route_tools_through_config,
            )
            .finish()
    }
}

/// A queue of steering messages shared between a run and whoever steers it. Clones share the
/// same queue.
#[derive(Clone, Default)]
pub struct SteeringQueue {
    inner: Arc<Mutex<VecDeque<Steering>>>,
    /// Wakes programs waiting for a message (`op::wait_steering`).
    arrived: Arc<tokio::sync::Notify>,
}

impl SteeringQueue {
    /// An empty queue.
    pub fn new() -> SteeringQueue {
        SteeringQueue::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Steering>> {
        // A panic elsewhere cannot leave a VecDeque half-updated; keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a message for the program's next `op::next_steering()`.
    pub fn push(&self, steering: Steering) {
        self.lock().push_back(steering);
        self.arrived.notify_waiters();
    }

    /// Waits until a message may be waiting (a push since the returned future was created).
    pub(crate) fn arrival(&self) -> tokio::sync::futures::OwnedNotified {
        self.arrived.clone().notified_owned()
    }

    /// Takes the oldest queued message.
    pub fn pop(&self) -> Option<Steering> {
        self.lock().pop_front()
    }

    /// How many messages are waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for SteeringQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteeringQueue")
            .field("waiting", &self.len())
            .finish()
    }
}
