//! The effect handlers a program sees inside its workflow: a provider, tools and a memory
//! backend that do nothing themselves but start activities, so the work happens on
//! whichever worker picks them up.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use agent_op::{
    BoxFuture, CallContext, Candidate, MemoryBackend, MemoryEntry, MemoryError, MemoryId, MicroUsd,
    NewMemory, Prompt, Provider, ProviderError, PrunePolicy, PruneReport, Response, ScoredMemory,
    SearchOptions, Tag, Tool, ToolDefinition, ToolError,
};
use futures::future::FusedFuture;
use send_wrapper::SendWrapper;
use serde_json::Value;
use temporalio_sdk::{ActivityOptions, CancellableFuture};

use crate::activities::Effects;
use crate::rollover::Rollover;
use crate::wire::{self, InferCall, InferReply, MemoryCall, MemoryReply, ToolCall, ToolReply};

/// The effect activities.
#[derive(Copy, Clone)]
enum Effect {
    Infer,
    Tool,
    Memory,
}
use crate::workflow::Ctx;

/// Starts effect activities from inside a workflow. The context is the SDK's (single
/// threaded); [`SendWrapper`] lets the engine, whose futures are `Send`, hold it, and checks
/// at run time that it never leaves the workflow's thread (it cannot: nothing in the
/// engine spawns, and the SDK polls the whole workflow on one thread).
#[derive(Clone)]
pub(crate) struct Activities {
    ctx: Arc<SendWrapper<Ctx>>,
    settings: ActivitySettings,
    rollover: Arc<Rollover>,
}

/// How effect activities are run (the SDK's options hold a single-threaded cancellation
/// token, so the worker keeps these and the workflow builds the options).
#[derive(Copy, Clone, Debug)]
pub(crate) struct ActivitySettings {
    pub(crate) timeout: std::time::Duration,
    pub(crate) heartbeat: std::time::Duration,
    pub(crate) attempts: u32,
}

/// The settings, carried into a future that builds the options where it runs.
struct Sendable(ActivitySettings);

impl Sendable {
    fn build(&self) -> ActivityOptions {
        self.0.options()
    }
}

impl ActivitySettings {
    fn options_sendable(&self) -> Sendable {
        Sendable(*self)
    }

    fn options(&self) -> ActivityOptions {
        ActivityOptions::with_start_to_close_timeout(self.timeout)
            .heartbeat_timeout(self.heartbeat)
            .retry_policy(
                temporalio_common::RetryPolicy::builder()
                    .maximum_attempts(self.attempts)
                    .initial_interval(std::time::Duration::from_millis(200))
                    .build(),
            )
            .build()
    }
}

impl Activities {
    pub(crate) fn new(ctx: Ctx, settings: ActivitySettings, rollover: Arc<Rollover>) -> Activities {
        Activities {
            ctx: Arc::new(SendWrapper::new(ctx)),
            settings,
            rollover,
        }
    }

    /// Starts activity `name` with `input` when first polled; the future cancels it if
    /// dropped before it ends (a race's loser, a call a deadline cut off). Once the run is
    /// handing over to its next run (see [`Rollover`]), the call waits instead: the next
    /// run makes it.
    fn call(&self, activity: Effect, input: Value) -> BoxFuture<'static, Result<Value, String>> {
        let ctx = self.ctx.clone();
        let options = self.settings.options_sendable();
        let rollover = self.rollover.clone();
        let call = async move {
            let _in_flight = rollover.start(ctx.continue_as_new_suggested()).await;
            let options = options.build();
            let started = match activity {
                Effect::Infer => {
                    CancelOnDrop(Box::pin(ctx.execute_activity(
                        Effects::infer,
                        input,
                        options,
                    )))
                    .await
                }
                Effect::Tool => {
                    CancelOnDrop(Box::pin(ctx.execute_activity(
                        Effects::tool,
                        input,
                        options,
                    )))
                    .await
                }
                Effect::Memory => {
                    CancelOnDrop(Box::pin(ctx.execute_activity(
                        Effects::memory,
                        input,
                        options,
                    )))
                    .await
                }
            };
            started.map_err(|error| describe(&error))
        };
        Box::pin(SendWrapper::new(call))
    }
}

/// The activity failure's own text (the SDK's wrapper says only "Activity task failed").
fn describe(error: &temporalio_sdk::ActivityExecutionError) -> String {
    match error.cause() {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// An SDK future that asks the server to cancel its activity or timer when dropped before
/// it ended.
pub(crate) struct CancelOnDrop<F: CancellableFuture>(pub(crate) Pin<Box<F>>);

impl<F: CancellableFuture> Future for CancelOnDrop<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl<F: CancellableFuture> Drop for CancelOnDrop<F> {
    fn drop(&mut self) {
        if !self.0.is_terminated() {
            self.0.cancel();
        }
    }
}

/// Decodes an activity's answer, naming the activity when it does not fit.
fn decode<T: serde::de::DeserializeOwned>(activity: &str, value: Value) -> Result<T, String> {
    serde_json::from_value(value)
        .map_err(|e| format!("the answer of activity {activity} does not decode: {e}"))
}

/// The model, called through the `effect_agents.infer` activity. Prices and capabilities
/// come from the worker's own provider, when it has one, so budgets reserve the same
/// amounts on every worker that runs the workflow.
pub(crate) struct ProviderProxy {
    pub(crate) activities: Activities,
    pub(crate) local: Option<Arc<dyn Provider>>,
}

impl Provider for ProviderProxy {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        let input = serde_json::to_value(InferCall {
            model: model.to_owned(),
            prompt: prompt.clone(),
        });
        let call = input.map(|input| self.activities.call(Effect::Infer, input));
        Box::pin(async move {
            let call = call
                .map_err(|e| ProviderError::other(format!("a prompt does not serialize: {e}")))?;
            let value = call.await.map_err(ProviderError::transport)?;
            let reply: InferReply = decode(wire::INFER, value).map_err(ProviderError::other)?;
            reply
        })
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        self.local.as_ref().and_then(|p| p.max_cost(model, prompt))
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        self.local
            .as_ref()
            .is_some_and(|p| p.supports_json_schema(model))
    }

    fn name(&self) -> &str {
        self.local.as_ref().map_or("unknown", |p| p.name())
    }
}

/// A tool, called through the `effect_agents.tool` activity. Its definition is the
/// worker's; its code runs wherever the activity does.
pub(crate) struct ToolProxy {
    pub(crate) activities: Activities,
    pub(crate) definition: ToolDefinition,
}

impl ToolProxy {
    fn invoke(
        &self,
        args: Value,
        idempotency_key: String,
    ) -> BoxFuture<'_, Result<Value, ToolError>> {
        let call = serde_json::to_value(ToolCall {
            name: self.definition.name.clone(),
            args,
            idempotency_key,
        })
        .map(|input| self.activities.call(Effect::Tool, input));
        Box::pin(async move {
            let call = call
                .map_err(|e| ToolError::failed(format!("tool arguments do not serialize: {e}")))?;
            let value = call.await.map_err(ToolError::failed)?;
            let reply: ToolReply = decode(wire::TOOL, value).map_err(ToolError::failed)?;
            reply
        })
    }
}

impl Tool for ToolProxy {
    fn name(&self) -> &str {
        &self.definition.name
    }

    fn description(&self) -> &str {
        &self.definition.description
    }

    fn parameters(&self) -> Value {
        self.definition.parameters.clone()
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        self.invoke(args, String::new())
    }

    fn call_in(
        &self,
        args: Value,
        context: &CallContext,
    ) -> BoxFuture<'_, Result<Value, ToolError>> {
        self.invoke(args, context.idempotency_key.clone())
    }
}

/// The memory backend, reached through the `effect_agents.memory` activity.
pub(crate) struct MemoryProxy {
    pub(crate) activities: Activities,
}

impl MemoryProxy {
    fn run(&self, call: MemoryCall) -> BoxFuture<'static, Result<MemoryReply, MemoryError>> {
        let started =
            serde_json::to_value(&call).map(|input| self.activities.call(Effect::Memory, input));
        Box::pin(async move {
            let unavailable = |why: String| {
                MemoryError::storage("memory activity", None, std::io::Error::other(why))
            };
            let call = started
                .map_err(|e| unavailable(format!("a memory call does not serialize: {e}")))?;
            let value = call.await.map_err(unavailable)?;
            match decode::<MemoryReply>(wire::MEMORY, value).map_err(unavailable)? {
                MemoryReply::Failed { error } => Err(error),
                reply => Ok(reply),
            }
        })
    }
}

/// A memory reply of the wrong shape for its call.
fn misfit(operation: &str) -> MemoryError {
    MemoryError::storage(
        "memory activity",
        None,
        std::io::Error::other(format!("the answer to {operation} has the wrong shape")),
    )
}

macro_rules! expect {
    ($reply:expr, $operation:literal, $pattern:pat => $value:expr) => {
        match $reply {
            $pattern => Ok($value),
            _ => Err(misfit($operation)),
        }
    };
}

impl MemoryBackend for MemoryProxy {
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>> {
        let call = self.run(MemoryCall::Store { memory });
        Box::pin(async move { expect!(call.await?, "store", MemoryReply::Stored { id } => id) })
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        let call = self.run(MemoryCall::Search {
            query: query.to_owned(),
            k,
        });
        Box::pin(async move { expect!(call.await?, "search", MemoryReply::Hits { hits } => hits) })
    }

    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>> {
        let call = self.run(MemoryCall::Recent { n });
        Box::pin(async move {
            expect!(call.await?, "recent", MemoryReply::Entries { entries } => entries)
        })
    }

    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        let call = self.run(MemoryCall::ByTags {
            tags: tags.to_vec(),
        });
        Box::pin(async move {
            expect!(call.await?, "by_tags", MemoryReply::Entries { entries } => entries)
        })
    }

    fn prune<'a>(
        &'a self,
        policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>> {
        let call = self.run(MemoryCall::Prune {
            policy: policy.clone(),
        });
        Box::pin(
            async move { expect!(call.await?, "prune", MemoryReply::Pruned { report } => report) },
        )
    }

    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>> {
        let call = self.run(MemoryCall::Delete { id: id.clone() });
        Box::pin(async move {
            expect!(call.await?, "delete", MemoryReply::Deleted { deleted } => deleted)
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>> {
        let call = self.run(MemoryCall::Get { id: id.clone() });
        Box::pin(async move { expect!(call.await?, "get", MemoryReply::Entry { entry } => entry) })
    }

    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>> {
        let call = self.run(MemoryCall::Count);
        Box::pin(
            async move { expect!(call.await?, "count", MemoryReply::Count { count } => count) },
        )
    }

    fn search_candidates<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        let call = self.run(MemoryCall::SearchCandidates {
            query: query.to_owned(),
            k,
        });
        Box::pin(async move {
            expect!(call.await?, "search_candidates", MemoryReply::Candidates { candidates } => candidates)
        })
    }

    fn search_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        let call = self.run(MemoryCall::SearchWith {
            query: query.to_owned(),
            k,
            options: options.clone(),
        });
        Box::pin(
            async move { expect!(call.await?, "search_with", MemoryReply::Hits { hits } => hits) },
        )
    }

    fn search_candidates_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        let call = self.run(MemoryCall::SearchCandidatesWith {
            query: query.to_owned(),
            k,
            options: options.clone(),
        });
        Box::pin(async move {
            expect!(call.await?, "search_candidates_with", MemoryReply::Candidates { candidates } => candidates)
        })
    }

    fn record_access<'a>(
        &'a self,
        ids: &'a [MemoryId],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        let call = self.run(MemoryCall::RecordAccess { ids: ids.to_vec() });
        Box::pin(async move {
            expect!(call.await?, "record_access", MemoryReply::Entries { entries } => entries)
        })
    }
}
