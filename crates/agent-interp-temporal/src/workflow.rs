//! [`ProgramWorkflow`]: the one workflow type every program runs as, registered once per
//! program name.

use std::any::Any;
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use agent_engine::{CancellationToken, Config, SteeringQueue, Subscriber};
use agent_journal::MemoryJournal;
use agent_op::journal::Journal;
use agent_op::{
    BoxFuture, Checkpoint, Event, Provider, Steering, ToolDefinition, ToolSet, TraceEntry, TraceId,
};
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde_json::Value;
use temporalio_common::WorkflowDefinition;
use temporalio_common::data_converters::PayloadConverter;
use temporalio_common::protos::temporal::api::common::v1::{Payload, Payloads};
use temporalio_sdk::workflows::{
    WorkflowDefinitionDescriptor, WorkflowError, WorkflowImplementation,
};
use temporalio_sdk::{
    ApplicationFailure, ContinueAsNewOptions, WorkflowContext, WorkflowContextView,
    WorkflowTermination,
};
use temporalio_workflow::workflow_interceptors::WorkflowOutputValue;

use crate::clock::WorkflowClock;
use crate::driver::{Driven, Step};
use crate::proxy::{Activities, ActivitySettings, MemoryProxy, ProviderProxy, ToolProxy};
use crate::rollover::{Carried, Rollover};
use crate::wire::{ProgramInput, ProgramOutput, Progress};

/// The SDK's context of a running program workflow.
pub(crate) type Ctx = WorkflowContext<ProgramWorkflow>;

/// The signal that feeds a program's steering queue.
pub(crate) const STEER: &str = "steer";
/// The query that returns the trace so far (the whole trace once the run has ended).
pub(crate) const TRACE: &str = "trace";
/// The query that returns the checkpoints taken so far.
pub(crate) const CHECKPOINTS: &str = "checkpoints";

/// Why a program did not produce an output: its kind (`ErrorKind::kind_name`, or
/// `bad_input`) and its message.
pub(crate) struct Failure {
    pub(crate) kind: String,
    pub(crate) message: String,
}

/// A program, ready to run with the config the workflow builds, durably into a journal
/// (which holds what earlier runs of the workflow did, when it continued as new).
pub(crate) type Runnable = Box<
    dyn FnOnce(Config, Arc<dyn Journal>) -> BoxFuture<'static, Result<ProgramOutput, Failure>>
        + Send,
>;

/// The largest input a run continuing as new hands over (Temporal refuses payloads over
/// 2 MiB): past it, the run goes on in its own history instead.
const MAX_CARRIED_BYTES: usize = 2_000_000;

/// Decodes a program's input and builds it.
pub(crate) type Start = Arc<dyn Fn(Value) -> Result<Runnable, String> + Send + Sync>;

/// What a workflow needs of the worker that registered its program.
#[derive(Clone)]
pub(crate) struct Registration {
    pub(crate) start: Start,
    /// The worker's provider, for prices and capabilities (the calls are activities).
    pub(crate) provider: Option<Arc<dyn Provider>>,
    /// The tools the program may call, by definition (the calls are activities).
    pub(crate) tools: Vec<ToolDefinition>,
    /// Whether the program may use memory (the operations are activities).
    pub(crate) memory: bool,
    pub(crate) activity: ActivitySettings,
    pub(crate) max_concurrency: Option<NonZeroUsize>,
    /// Effects a run starts before it continues as new (see [`Rollover`]).
    pub(crate) continue_as_new_after: Option<usize>,
}

thread_local! {
    /// The name `ProgramWorkflow::definition` gives the registration in progress (the SDK
    /// asks a static function for it).
    static REGISTERING: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Registers `name` as a workflow type running `registration`'s program.
pub(crate) fn register(
    options: &mut temporalio_sdk::WorkerOptions,
    name: &str,
    registration: Registration,
) -> Result<(), String> {
    REGISTERING.with(|n| *n.borrow_mut() = name.to_owned());
    let registration = Arc::new(registration);
    let done = options
        .register_workflow_with_factory::<ProgramWorkflow, _>(move || ProgramWorkflow {
            registration: registration.clone(),
            steering: SteeringQueue::new(),
            progress: Arc::new(Mutex::new(Progress::default())),
        })
        .map(|_| ())
        .map_err(|e| e.to_string());
    REGISTERING.with(|n| n.borrow_mut().clear());
    done
}

/// The workflow a program runs as: the shared engine with the [`WorkflowScheduler`]
/// (crate::WorkflowScheduler), the workflow's clock and randomness, and effects as
/// activities.
pub(crate) struct ProgramWorkflow {
    registration: Arc<Registration>,
    steering: SteeringQueue,
    progress: Arc<Mutex<Progress>>,
}

/// The client-side name of the workflow; programs are started by their own names.
pub(crate) struct ProgramRun;

impl WorkflowDefinition for ProgramRun {
    type Input = Value;
    type Output = Value;

    fn name(&self) -> &str {
        "effect_agents.program"
    }
}

/// Records events and checkpoints as they happen, for the queries.
struct Live(Arc<Mutex<Progress>>);

impl Subscriber for Live {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        let mut progress = self.0.lock().unwrap_or_else(|e| e.into_inner());
        progress.events.push(TraceEntry {
            trace_id: trace_id.clone(),
            cancelled: false,
            event: event.clone(),
        });
    }

    fn on_checkpoint(&self, checkpoint: &Checkpoint) {
        let mut progress = self.0.lock().unwrap_or_else(|e| e.into_inner());
        progress.checkpoints.push(checkpoint.clone());
    }
}

fn terminate(kind: &str, message: String) -> WorkflowTermination {
    WorkflowTermination::from(
        ApplicationFailure::builder(anyhow::anyhow!(message))
            .type_name(kind.to_owned())
            .non_retryable(true)
            .build(),
    )
}

fn json_of(payloads: &[Payload]) -> Value {
    match payloads {
        [] => Value::Null,
        [one] => serde_json::from_slice(&one.data).unwrap_or(Value::Null),
        many => Value::Array(
            many.iter()
                .map(|p| serde_json::from_slice(&p.data).unwrap_or(Value::Null))
                .collect(),
        ),
    }
}

fn workflow_error(message: String) -> WorkflowError {
    let error: Box<dyn std::error::Error + Send + Sync> = message.into();
    WorkflowError::Execution(error)
}

impl WorkflowImplementation for ProgramWorkflow {
    type Run = ProgramRun;
    const HAS_INIT: bool = false;
    const INIT_TAKES_INPUT: bool = false;

    fn name() -> &'static str {
        "effect_agents.program"
    }

    fn definition() -> WorkflowDefinitionDescriptor {
        WorkflowDefinitionDescriptor {
            workflow_type: REGISTERING.with(|n| n.borrow().clone()),
            has_init: false,
            init_takes_input: false,
            signals: vec![],
            queries: vec![],
            updates: vec![],
        }
    }

    fn init(_ctx: WorkflowContextView, _input: Option<Value>) -> Self {
        unreachable!("program workflows are registered with a factory")
    }

    fn run(
        ctx: WorkflowContext<Self>,
        input: Option<Value>,
    ) -> LocalBoxFuture<'static, Result<Box<dyn WorkflowOutputValue>, WorkflowTermination>> {
        async move {
            let (registration, steering, progress) = ctx.state(|w| {
                (
                    w.registration.clone(),
                    w.steering.clone(),
                    w.progress.clone(),
                )
            });
            let program = ctx.info().workflow_type().to_owned();
            let input: ProgramInput = serde_json::from_value(input.unwrap_or(Value::Null))
                .map_err(|e| terminate("bad_input", format!("program {program}: {e}")))?;
            let carried = input.carried.unwrap_or_else(|| Carried {
                seed: ctx.random::<u64>(),
                ..Carried::default()
            });
            for message in carried.steering {
                steering.push(message);
            }
            let journal = MemoryJournal::from_entries(carried.entries);
            let rollover = Arc::new(Rollover::new(registration.continue_as_new_after));
            let runnable = (registration.start)(input.input.clone()).map_err(|e| {
                terminate(
                    "bad_input",
                    format!("program {program} cannot read its input: {e}"),
                )
            })?;
            let activities = Activities::new(ctx.clone(), registration.activity, rollover.clone());
            let mut tools = ToolSet::new();
            for definition in &registration.tools {
                tools.insert(Arc::new(ToolProxy {
                    activities: activities.clone(),
                    definition: definition.clone(),
                }));
            }
            let mut config = Config::new()
                .shared_provider(Arc::new(ProviderProxy {
                    activities: activities.clone(),
                    local: registration.provider.clone(),
                }))
                .tools(tools)
                // A toolbox in the program carries its tools; their calls still go out as
                // activities (the scope decides only which may run).
                .route_tools_through_config(true)
                .steering(steering.clone())
                .clock(Arc::new(WorkflowClock::new(ctx.clone())))
                .random_seed(carried.seed)
                .trace_id(ctx.workflow_id().to_owned())
                .name(program.clone())
                .shared_subscriber(Arc::new(Live(progress.clone())));
            if registration.memory {
                config = config.shared_memory(Arc::new(MemoryProxy { activities }));
            }
            if let Some(limit) = registration.max_concurrency {
                config = config.max_concurrency(limit);
            }
            let abort = CancellationToken::new();
            config = config.cancel_token(abort.clone());
            let workflow_cancelled = ctx.cancellation_token();
            let cancelled = async move { workflow_cancelled.cancelled().await };
            let mut driven = Driven::new(
                runnable(config, Arc::new(journal.clone())),
                rollover.clone(),
                cancelled,
                abort.clone(),
            );
            let output = loop {
                match (&mut driven).await {
                    Step::Done(output) => break output,
                    Step::ContinueAsNew => {
                        let mut pending = Vec::new();
                        while let Some(message) = steering.pop() {
                            pending.push(message);
                        }
                        let next = ProgramInput {
                            input: input.input.clone(),
                            carried: Some(Carried {
                                entries: Carried::compact(journal.snapshot()),
                                steering: pending.clone(),
                                seed: carried.seed,
                            }),
                        };
                        let next = serde_json::to_value(&next).map_err(|e| {
                            terminate("bad_output", format!("program {program}: {e}"))
                        })?;
                        let size = serde_json::to_vec(&next).map_or(usize::MAX, |b| b.len());
                        if size <= MAX_CARRIED_BYTES {
                            drop(driven);
                            let Err(handover) =
                                ctx.continue_as_new(next, ContinueAsNewOptions::default());
                            return Err(handover);
                        }
                        tracing::warn!(
                            workflow_id = ctx.workflow_id(),
                            bytes = size,
                            "the run's journal is too large to carry into a new run; it goes \
                             on in this one"
                        );
                        for message in pending {
                            steering.push(message);
                        }
                        rollover.abandon();
                    }
                }
            }
            .map_err(|failure| {
                if failure.kind == "aborted" && abort.is_cancelled() {
                    // The workflow was cancelled, and the program stopped for it.
                    WorkflowTermination::cancelled()
                } else {
                    terminate(&failure.kind, failure.message)
                }
            })?;
            progress.lock().unwrap_or_else(|e| e.into_inner()).trace = Some(output.trace.clone());
            let output = serde_json::to_value(&output)
                .map_err(|e| terminate("bad_output", format!("program {program}: {e}")))?;
            Ok(Box::new(output) as Box<dyn WorkflowOutputValue>)
        }
        .boxed_local()
    }

    fn decode_signal_input(
        _name: &str,
        payloads: Payloads,
        _converter: &PayloadConverter,
    ) -> Result<Option<Box<dyn Any>>, WorkflowError> {
        Ok(Some(Box::new(json_of(&payloads.payloads))))
    }

    fn dispatch_signal(
        ctx: WorkflowContext<Self>,
        name: &str,
        input: Box<dyn Any>,
    ) -> LocalBoxFuture<'static, Result<(), WorkflowError>> {
        let outcome = if name == STEER {
            match input
                .downcast::<Value>()
                .map(|v| serde_json::from_value::<Steering>(*v))
            {
                // `state_mut` tells the SDK the workflow made progress, so it polls the
                // program again, which takes the message.
                Ok(Ok(steering)) => {
                    ctx.state_mut(|w| w.steering.push(steering));
                    Ok(())
                }
                Ok(Err(e)) => Err(workflow_error(format!(
                    "a steering signal does not decode: {e}"
                ))),
                Err(_) => Err(workflow_error("a steering signal does not decode".into())),
            }
        } else {
            Err(workflow_error(format!(
                "program workflows take no signal `{name}`"
            )))
        };
        async move { outcome }.boxed_local()
    }

    fn decode_query_input(
        _name: &str,
        _payloads: &Payloads,
        _converter: &PayloadConverter,
    ) -> Result<Option<Box<dyn Any>>, WorkflowError> {
        Ok(Some(Box::new(())))
    }

    fn dispatch_query(
        &self,
        _ctx: WorkflowContextView,
        name: &str,
        _input: Box<dyn Any>,
    ) -> Result<Box<dyn WorkflowOutputValue>, WorkflowError> {
        let progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let answer = match name {
            TRACE => serde_json::to_value(&*progress),
            CHECKPOINTS => serde_json::to_value(&progress.checkpoints),
            other => {
                return Err(workflow_error(format!(
                    "program workflows answer no query `{other}`"
                )));
            }
        };
        let answer = answer.map_err(|e| workflow_error(e.to_string()))?;
        Ok(Box::new(answer))
    }

    fn dispatch_update(
        _ctx: WorkflowContext<Self>,
        name: &str,
        _input: Box<dyn Any>,
    ) -> LocalBoxFuture<'static, Result<Box<dyn WorkflowOutputValue>, WorkflowError>> {
        let error = workflow_error(format!("program workflows take no update `{name}`"));
        async move { Err(error) }.boxed_local()
    }

    fn validate_update(
        &self,
        _ctx: WorkflowContextView,
        name: &str,
        _input: Box<dyn Any>,
    ) -> Result<(), WorkflowError> {
        Err(workflow_error(format!(
            "program workflows take no update `{name}`"
        )))
    }
}
