//! Array attributes: `tracing` fields hold strings and numbers but no arrays, so the engine
//! records the GenAI conventions' string arrays (`gen_ai.response.finish_reasons`) as JSON
//! text. [`Arrays`] turns them back into OTLP string arrays before export, as the
//! conventions and the receivers that read them (Phoenix, Langfuse) expect.

use std::time::Duration;

use opentelemetry::{Array, Context, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// The attributes the conventions type as string arrays.
const STRING_ARRAYS: [&str; 1] = ["gen_ai.response.finish_reasons"];

/// A span processor that hands spans on to `P` with [`STRING_ARRAYS`] as arrays.
#[derive(Debug)]
pub(crate) struct Arrays<P>(pub(crate) P);

impl<P: SpanProcessor> SpanProcessor for Arrays<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        for attribute in &mut span.attributes {
            if STRING_ARRAYS.contains(&attribute.key.as_str()) {
                if let Some(array) = string_array(&attribute.value) {
                    attribute.value = array;
                }
            }
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// `value` as a string array if it is the JSON text of an array of strings; other values
/// (set by other code, or already arrays) are left as they are.
fn string_array(value: &Value) -> Option<Value> {
    let Value::String(text) = value else {
        return None;
    };
    let items: Vec<String> = serde_json::from_str(text.as_str()).ok()?;
    Some(Value::Array(Array::String(
        items.into_iter().map(StringValue::from).collect(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_of_strings_becomes_a_string_array_and_anything_else_stays() {
        let reasons = Value::String(r#"["stop","length"]"#.into());
        assert_eq!(
            string_array(&reasons),
            Some(Value::Array(Array::String(vec![
                "stop".into(),
                "length".into()
            ])))
        );
        assert_eq!(string_array(&Value::String("stop".into())), None);
        assert_eq!(string_array(&Value::String("[1]".into())), None);
        assert_eq!(string_array(&Value::I64(1)), None);
    }
}
