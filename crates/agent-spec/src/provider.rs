//! The model provider a spec's `[model]` names.

use std::path::Path;
use std::sync::Arc;

use agent_op::{Provider, Response, ToolCall};
use serde_json::Value;

use crate::error::SpecError;
use crate::spec::{ModelSpec, Reply};

/// The provider `model` names, wrapped in a recorder writing a cassette to `record` if given.
/// `base` is the directory a cassette's path is relative to (usually [`Spec::dir`]).
///
/// An OpenAI-compatible server's settings default to `OPENAI_BASE_URL` and `OPENAI_API_KEY`
/// (a missing key variable is a [`SpecError::Environment`]), Ollama's to `OLLAMA_HOST`.
///
/// [`Spec::dir`]: crate::Spec::dir
pub fn provider(
    model: &ModelSpec,
    base: &Path,
    record: Option<&Path>,
) -> Result<Arc<dyn Provider>, SpecError> {
    use agent_provider::cassette::ReplayProvider;
    use agent_provider::{OllamaClient, OpenAiClient, ScriptedProvider};

    let inner: Arc<dyn Provider> = match model {
        ModelSpec::Openai {
            base_url,
            api_key_env,
            ..
        } => {
            let mut builder = OpenAiClient::builder();
            if let Some(url) = base_url
                .clone()
                .or_else(|| std::env::var("OPENAI_BASE_URL").ok())
            {
                builder = builder.base_url(url);
            }
            builder = match api_key_env.as_deref() {
                Some("") => builder.no_api_key(),
                Some(var) => builder.api_key_from_env(var),
                None => builder.api_key_from_env("OPENAI_API_KEY"),
            };
            Arc::new(builder.build().map_err(config_error)?)
        }
        ModelSpec::Ollama { host, .. } => {
            let mut builder = OllamaClient::builder();
            if let Some(host) = host.clone().or_else(|| std::env::var("OLLAMA_HOST").ok()) {
                builder = builder.host(host);
            }
            Arc::new(builder.build().map_err(config_error)?)
        }
        ModelSpec::Cassette { cassette, .. } => {
            let path = base.join(cassette);
            Arc::new(ReplayProvider::open(&path).map_err(|e| {
                SpecError::Invalid(format!("{}: not a readable cassette: {e}", path.display()))
            })?)
        }
        ModelSpec::Scripted { replies, .. } => {
            let responses = replies
                .iter()
                .enumerate()
                .map(|(i, reply)| scripted(i, reply))
                .collect::<Vec<_>>();
            Arc::new(ScriptedProvider::new(responses))
        }
    };
    match record {
        None => Ok(inner),
        Some(path) => Ok(Arc::new(
            agent_provider::cassette::RecordingProvider::create(inner, path).map_err(|e| {
                SpecError::Invalid(format!("{}: cannot record to it: {e}", path.display()))
            })?,
        )),
    }
}

fn config_error(error: agent_provider::ConfigError) -> SpecError {
    match error {
        agent_provider::ConfigError::MissingApiKey { var } => SpecError::Environment(format!(
            "the API key variable `{var}` is not set (set it, or `api_key_env = \"\"` for a server without keys)"
        )),
        other => SpecError::Invalid(format!("the model's settings are wrong: {other}")),
    }
}

/// The `i`th scripted reply as a response; its tool calls get ids `call_<i>_<j>`.
fn scripted(i: usize, reply: &Reply) -> Response {
    match reply {
        Reply::Text(text) => Response::text(text.clone()),
        Reply::Calls { calls } => {
            let mut response = Response::text("");
            response.tool_calls = calls
                .iter()
                .enumerate()
                .map(|(j, call)| ToolCall {
                    id: format!("call_{i}_{j}"),
                    name: call.tool.clone(),
                    arguments: serde_json::to_value(&call.args).unwrap_or(Value::Null),
                })
                .collect();
            response
        }
    }
}
