//! What both clients send the same way — tools and JSON schemas — and the checks a request
//! passes before it goes out.
//!
//! A request an API forbids is not sent: it fails at once with
//! [`ProviderError::InvalidRequest`], which is not retryable, instead of costing a round trip
//! and coming back as a 400 (or, from some servers, a 500 that would be retried).

use std::sync::LazyLock;

use agent_op::{ProviderError, ToolDefinition};
use serde::Serialize;
use serde_json::{Value, json};

/// OpenAI's limit on `stop` sequences.
#[cfg(feature = "openai")]
pub(crate) const OPENAI_MAX_STOP_SEQUENCES: usize = 4;

/// The schema sent for a tool without parameters: an object with no properties. Both APIs
/// require `parameters` to be a JSON schema object (or absent); `null` is rejected, and
/// llama.cpp turns an empty schema `{}` into a grammar for any JSON value.
static NO_PARAMETERS: LazyLock<Value> =
    LazyLock::new(|| json!({"type": "object", "properties": {}}));

/// A tool as both APIs take it: `{"type": "function", "function": {name, description,
/// parameters}}`.
#[derive(Serialize)]
pub(crate) struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// `tools` in wire form. Parameters that are `null` or `{}` become an object schema without
/// properties; parameters that are not a JSON object are an
/// [`InvalidRequest`](ProviderError::InvalidRequest).
pub(crate) fn tools<'a>(
    tools: impl IntoIterator<Item = &'a ToolDefinition>,
) -> Result<Vec<WireTool<'a>>, ProviderError> {
    tools
        .into_iter()
        .map(|tool| {
            Ok(WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: parameters(tool)?,
                },
            })
        })
        .collect()
}

/// The schema to send for `tool`'s parameters.
fn parameters(tool: &ToolDefinition) -> Result<&Value, ProviderError> {
    match &tool.parameters {
        Value::Null => Ok(&NO_PARAMETERS),
        Value::Object(schema) if schema.is_empty() => Ok(&NO_PARAMETERS),
        schema @ Value::Object(_) => Ok(schema),
        other => Err(ProviderError::InvalidRequest {
            message: format!(
                "the parameters of tool `{}` must be a JSON schema object (or null for none), not {}",
                tool.name,
                json_kind(other)
            ),
        }),
    }
}

/// A structured-output schema, which both APIs require to be a JSON object.
pub(crate) fn response_schema<'a>(
    name: &str,
    schema: &'a Value,
) -> Result<&'a Value, ProviderError> {
    match schema {
        Value::Object(_) => Ok(schema),
        other => Err(ProviderError::InvalidRequest {
            message: format!(
                "the response format schema `{name}` must be a JSON schema object, not {}",
                json_kind(other)
            ),
        }),
    }
}

/// Fails if there are more than `max` stop sequences (no limit when `max` is `None`).
#[cfg(feature = "openai")]
pub(crate) fn check_stop_sequences(
    stop: &[String],
    max: Option<usize>,
) -> Result<(), ProviderError> {
    match max {
        Some(max) if stop.len() > max => Err(ProviderError::InvalidRequest {
            message: format!(
                "{} stop sequences; the API allows at most {max}",
                stop.len()
            ),
        }),
        _ => Ok(()),
    }
}

/// What kind of JSON value `value` is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The error for a message kind, tool choice or response format this client does not know:
/// the prompt was built with a newer `agent-op` than this crate understands.
pub(crate) fn unsupported(what: &str) -> ProviderError {
    ProviderError::InvalidRequest {
        message: format!(
            "this client cannot send {what} (is `agent-op` newer than `agent-provider`?)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(parameters: Value) -> ToolDefinition {
        ToolDefinition {
            name: "t".into(),
            description: String::new(),
            parameters,
        }
    }

    #[test]
    fn parameterless_tools_get_an_empty_object_schema() {
        for given in [Value::Null, json!({})] {
            let wire = serde_json::to_value(tools([&tool(given)]).unwrap()).unwrap();
            assert_eq!(
                wire[0]["function"]["parameters"],
                json!({"type": "object", "properties": {}})
            );
        }
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let wire = serde_json::to_value(tools([&tool(schema.clone())]).unwrap()).unwrap();
        assert_eq!(wire[0]["function"]["parameters"], schema);
    }

    #[test]
    fn parameters_that_are_not_objects_are_invalid() {
        for given in [json!("x"), json!([1]), json!(true), json!(3)] {
            let err = tools([&tool(given.clone())]).err();
            assert!(
                matches!(&err, Some(ProviderError::InvalidRequest { message }) if message.contains("tool `t`")),
                "{given}: {err:?}"
            );
        }
    }

    #[test]
    #[cfg(feature = "openai")]
    fn stop_sequences_and_schemas() {
        let four = vec!["a".to_owned(); 4];
        assert!(check_stop_sequences(&four, Some(4)).is_ok());
        let five = vec!["a".to_owned(); 5];
        assert!(matches!(
            check_stop_sequences(&five, Some(4)),
            Err(ProviderError::InvalidRequest { .. })
        ));
        assert!(check_stop_sequences(&five, None).is_ok());
        assert!(response_schema("s", &json!({"type": "object"})).is_ok());
        assert!(matches!(
            response_schema("s", &json!(true)),
            Err(ProviderError::InvalidRequest { .. })
        ));
    }
}
