//! Request fingerprints: a stable hash of what a call sends.

use std::fmt::Write as _;

use agent_op::Prompt;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A stable fingerprint of a call (`sha256:<hex>`): the SHA-256 of the canonical JSON of
/// `{"model": model, "prompt": prompt}`, with object keys sorted and no whitespace.
///
/// Everything the prompt holds counts (messages, tools, options), credentials and transport
/// settings do not, and the key order inside JSON values (tool schemas, arguments) does not
/// matter.
///
/// ```
/// use agent_op::Prompt;
/// use agent_provider::cassette::fingerprint;
///
/// let a = fingerprint("m", &Prompt::new().user("hi"));
/// assert_eq!(a, fingerprint("m", &Prompt::new().user("hi")));
/// assert_ne!(a, fingerprint("m", &Prompt::new().user("hi").max_tokens(5)));
/// assert!(a.starts_with("sha256:"));
/// ```
pub fn fingerprint(model: &str, prompt: &Prompt) -> String {
    let prompt = serde_json::to_value(prompt)
        // A prompt holds only strings, numbers and JSON values; encoding it cannot fail, but
        // if it ever did, its debug form still identifies it deterministically.
        .unwrap_or_else(|e| Value::String(format!("{prompt:?} ({e})")));
    let mut request = serde_json::Map::new();
    request.insert("model".to_owned(), Value::String(model.to_owned()));
    request.insert("prompt".to_owned(), prompt);
    let mut canonical = String::new();
    write_canonical(&Value::Object(request), &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// JSON with object keys sorted (by their UTF-8 bytes) and no insignificant whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let mut out = String::new();
        write_canonical(&json!({"b": [{"z": 1, "a": "x\"y"}], "a": null}), &mut out);
        assert_eq!(out, r#"{"a":null,"b":[{"a":"x\"y","z":1}]}"#);
    }

    #[test]
    fn fingerprints_are_pinned() {
        // Changing this value breaks every recorded cassette: only do it on purpose.
        // The SHA-256 of {"model":"m","prompt":{"messages":[{"content":"hi","role":"user"}],"options":{}}}
        assert_eq!(
            fingerprint("m", &Prompt::new().user("hi")),
            "sha256:b9fd7f2eb0bb7f7afcc635322014476b0ff7659da3645a988c3e6a5ca9c88098"
        );
        assert_ne!(
            fingerprint("m", &Prompt::new().user("hi")),
            fingerprint("n", &Prompt::new().user("hi"))
        );
    }
}
