//! JSON helpers both wire formats share.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// `null` and a missing field both mean the default (vLLM sends `"choices": null`).
pub(crate) fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// An embedding vector, read as `f64`s and narrowed to `f32`: a value beyond `f32`'s range
/// becomes an infinity, which the embedders then report as non-finite — whatever float
/// features serde_json was built with (with `float_roundtrip`, reading such a value as
/// `f32` directly is a parse error instead).
#[cfg_attr(not(feature = "openai"), allow(dead_code))]
pub(crate) fn vector<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<f32>, D::Error> {
    let wide = Vec::<f64>::deserialize(deserializer)?;
    Ok(wide.into_iter().map(|x| x as f32).collect())
}

/// Embedding vectors as [`vector`] reads one; `null` or missing is none.
#[cfg_attr(not(feature = "ollama"), allow(dead_code))]
pub(crate) fn vectors<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Vec<f32>>, D::Error> {
    let wide = Option::<Vec<Vec<f64>>>::deserialize(deserializer)?.unwrap_or_default();
    Ok(wide
        .into_iter()
        .map(|v| v.into_iter().map(|x| x as f32).collect())
        .collect())
}

/// Tool arguments from their JSON text: `""` is no arguments (`{}`); text that is not valid
/// JSON is kept as a JSON string so nothing the model said is lost (the tool then rejects it).
pub(crate) fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// Tool arguments as received: JSON text, or (some servers) an object.
pub(crate) fn arguments_value(arguments: Value) -> Value {
    match arguments {
        Value::String(text) => parse_arguments(&text),
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other,
    }
}

/// Tool arguments as JSON text to send: a string holds arguments that were not valid JSON
/// when received (see [`parse_arguments`]) and goes back unchanged.
pub(crate) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_round_trip() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(parse_arguments("{\"a\":"), json!("{\"a\":"));
        assert_eq!(arguments_text(&json!("{\"a\":")), "{\"a\":");
        assert_eq!(arguments_text(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(arguments_value(json!({"a": 1})), json!({"a": 1}));
        assert_eq!(arguments_value(json!("{\"b\":2}")), json!({"b": 2}));
        assert_eq!(arguments_value(Value::Null), json!({}));
    }
}
