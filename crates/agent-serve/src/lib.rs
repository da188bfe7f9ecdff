//! Serve effect-agents agents over HTTP.
//!
//! A [`Server`] holds agents registered by name ([`FnAgent`] from a closure, or any
//! [`ServedAgent`]), a [`Store`] (SQLite) of runs, threads and their events, and optional
//! API [`Keys`]. Its [`router`](Server::router) is an [`axum::Router`] a service mounts
//! beside its own routes; `agent serve SPEC…` runs one for TOML specs ([`SpecAgent`], with
//! the default feature `spec`).
//!
//! | routes | protocol |
//! |---|---|
//! | `/assistants…`, `/threads…`, `/runs…` | the Agent Protocol as LangGraph's server and SDK shape it: assistants, threads, stateless and background runs, SSE streams in the modes `values`, `updates`, `messages-tuple`, `events`, `custom` |
//! | `/v1/models`, `/v1/chat/completions` | OpenAI's chat API: any OpenAI SDK or chat UI talks to an agent |
//! | `/runs/{id}/trace` | the run's JSONL trace, as `agent run` writes it |
//! | `/healthz`, `/readyz` | health checks (never authenticated) |
//!
//! Every run is durable: its journal and events are committed to the store as it goes,
//! and a server started again on the same store resumes the runs it finds unfinished with
//! no committed model or tool call made again. Every stream event has an `id:`; a client
//! that reconnects with `Last-Event-ID` gets each later event once.
//!
//! Modules: [`agents`] (what is served), [`runs`] (the run model, with no HTTP in it),
//! [`auth`] (keys), [`error`] (one error type, each protocol's body).

pub mod agents;
pub mod auth;
pub mod error;
mod openapi;
mod protocol;
pub mod runs;
mod server;
#[cfg(feature = "spec")]
mod spec_agent;
mod sse;

pub use agents::{FnAgent, InvalidInput, Request, ServedAgent, message_of, message_schema};
pub use auth::{KeyName, Keys, KeysError};
pub use error::{ApiError, JsonBody};
pub use protocol::openai::OpenAiError;
pub use runs::{
    Interrupt, Limits, Multitask, RunHandle, RunRecord, RunStatus, Runs, RunsError, Store,
    StoreError,
};
pub use server::{DEFAULT_BODY_LIMIT, ServeError, Server, ServerBuilder};
#[cfg(feature = "spec")]
#[cfg_attr(docsrs, doc(cfg(feature = "spec")))]
pub use spec_agent::SpecAgent;
