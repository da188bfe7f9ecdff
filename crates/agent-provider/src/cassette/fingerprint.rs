//! Request fingerprints: a stable hash of what a call sends.

use agent_op::Prompt;
use serde_json::Value;

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
    agent_op::journal::fingerprint(&Value::Object(request))
}

#[cfg(test)]
mod tests {
    use super::*;

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
