//! The activities: where a program's effects really happen, on whichever worker of the
//! task queue picks them up. Each worker serves them with its own provider, tools and
//! memory backend.

use std::sync::Arc;
use std::time::Duration;

use agent_op::{CallContext, MemoryBackend, Provider, ProviderError, ToolError, ToolSet};
use futures::FutureExt;
use serde_json::Value;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::wire::{InferCall, InferReply, MemoryCall, MemoryReply, ToolCall, ToolReply};

/// How often a running activity tells the server it is alive, which is also how it learns
/// that its call was cancelled (a `race` lost, a deadline passed).
const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// The effect handlers a worker serves activities with.
pub(crate) struct Effects {
    pub(crate) provider: Option<Arc<dyn Provider>>,
    pub(crate) tools: ToolSet,
    pub(crate) memory: Option<Arc<dyn MemoryBackend>>,
    pub(crate) identity: String,
}

#[activities]
impl Effects {
    /// Calls the model with the worker's provider.
    #[activity(name = "effect_agents.infer")]
    pub(crate) async fn infer(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: Value,
    ) -> Result<Value, ActivityError> {
        let call: InferCall = decode(input)?;
        let reply: InferReply = match &self.provider {
            None => Err(ProviderError::other(format!(
                "worker {} runs model calls but has no provider",
                self.identity
            ))),
            Some(provider) => {
                let provider = provider.clone();
                heartbeating(&ctx, async move {
                    provider.chat(&call.model, &call.prompt).await
                })
                .await?
            }
        };
        encode(&reply)
    }

    /// Calls a tool of the worker's tool set.
    #[activity(name = "effect_agents.tool")]
    pub(crate) async fn tool(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: Value,
    ) -> Result<Value, ActivityError> {
        let call: ToolCall = decode(input)?;
        let reply: ToolReply = match self.tools.get(&call.name) {
            None => Err(ToolError::not_offered(format!(
                "worker {} has no tool `{}`",
                self.identity, call.name
            ))),
            Some(tool) => {
                let context = CallContext::new(call.idempotency_key);
                heartbeating(&ctx, async move { tool.call_in(call.args, &context).await }).await?
            }
        };
        encode(&reply)
    }

    /// Runs a memory operation on the worker's memory backend.
    #[activity(name = "effect_agents.memory")]
    pub(crate) async fn memory(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: Value,
    ) -> Result<Value, ActivityError> {
        let call: MemoryCall = decode(input)?;
        let reply = match self.memory.clone() {
            None => MemoryReply::Failed {
                error: agent_op::MemoryError::storage(
                    "memory",
                    Some(self.identity.clone()),
                    std::io::Error::other("this worker has no memory backend"),
                ),
            },
            Some(memory) => heartbeating(&ctx, run_memory(memory, call)).await?,
        };
        encode(&reply)
    }
}

async fn run_memory(memory: Arc<dyn MemoryBackend>, call: MemoryCall) -> MemoryReply {
    let reply = match call {
        MemoryCall::Store { memory: new } => {
            memory.store(new).await.map(|id| MemoryReply::Stored { id })
        }
        MemoryCall::Search { query, k } => memory
            .search(&query, k)
            .await
            .map(|hits| MemoryReply::Hits { hits }),
        MemoryCall::SearchWith { query, k, options } => memory
            .search_with(&query, k, &options)
            .await
            .map(|hits| MemoryReply::Hits { hits }),
        MemoryCall::SearchCandidates { query, k } => memory
            .search_candidates(&query, k)
            .await
            .map(|candidates| MemoryReply::Candidates { candidates }),
        MemoryCall::SearchCandidatesWith { query, k, options } => memory
            .search_candidates_with(&query, k, &options)
            .await
            .map(|candidates| MemoryReply::Candidates { candidates }),
        MemoryCall::RecordAccess { ids } => memory
            .record_access(&ids)
            .await
            .map(|entries| MemoryReply::Entries { entries }),
        MemoryCall::Recent { n } => memory
            .recent(n)
            .await
            .map(|entries| MemoryReply::Entries { entries }),
        MemoryCall::ByTags { tags } => memory
            .by_tags(&tags)
            .await
            .map(|entries| MemoryReply::Entries { entries }),
        MemoryCall::Prune { policy } => memory
            .prune(&policy)
            .await
            .map(|report| MemoryReply::Pruned { report }),
        MemoryCall::Delete { id } => memory
            .delete(&id)
            .await
            .map(|deleted| MemoryReply::Deleted { deleted }),
        MemoryCall::Get { id } => memory
            .get(&id)
            .await
            .map(|entry| MemoryReply::Entry { entry }),
        MemoryCall::Count => memory
            .count()
            .await
            .map(|count| MemoryReply::Count { count }),
    };
    reply.unwrap_or_else(|error| MemoryReply::Failed { error })
}

/// Runs `work` while heartbeating; returns early (as a cancelled activity) once the server
/// says the call was cancelled.
async fn heartbeating<T>(
    ctx: &ActivityContext,
    work: impl Future<Output = T>,
) -> Result<T, ActivityError> {
    let mut work = std::pin::pin!(work.fuse());
    loop {
        // A heartbeat that cannot be sent only delays noticing a cancellation.
        let _ = ctx.record_heartbeat(Value::Null).await;
        tokio::select! {
            out = &mut work => return Ok(out),
            () = ctx.cancelled() => return Err(ActivityError::cancelled()),
            () = tokio::time::sleep(HEARTBEAT_EVERY) => {}
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ActivityError> {
    serde_json::from_value(input).map_err(|e| {
        ActivityError::application(
            temporalio_sdk::ApplicationFailure::builder(anyhow::anyhow!(
                "an effect-agents activity got input it cannot read: {e}"
            ))
            .type_name("BadActivityInput".to_string())
            .non_retryable(true)
            .build(),
        )
    })
}

fn encode<T: serde::Serialize>(reply: &T) -> Result<Value, ActivityError> {
    serde_json::to_value(reply).map_err(|e| {
        ActivityError::application(
            temporalio_sdk::ApplicationFailure::builder(anyhow::anyhow!(
                "an effect-agents activity's answer does not serialize: {e}"
            ))
            .type_name("BadActivityOutput".to_string())
            .non_retryable(true)
            .build(),
        )
    })
}
