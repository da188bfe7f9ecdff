//! How HTTP failures become [`ProviderError`]s: the mapping both clients share.
//!
//! | HTTP status / body                                              | variant                 | retryable |
//! |-----------------------------------------------------------------|-------------------------|-----------|
//! | 401, 403                                                        | `Authentication`        | no        |
//! | 402, or code/type `insufficient_quota`                          | `QuotaExhausted`        | no        |
//! | 429 (any other body), or code `rate_limit_exceeded`             | `RateLimited`           | yes       |
//! | 400/413/422 saying the context length was exceeded              | `ContextLengthExceeded` | no        |
//! | 408, 5xx (any other body)                                       | `Http`                  | yes       |
//! | any other status                                                | `Http`                  | no        |
//! | 200 whose body is not the expected JSON                         | `Decode`                | no        |
//! | timeout (connect, request, read)                                | `Timeout`               | yes       |
//! | connection refused/reset, TLS, truncated body or stream         | `Transport`             | yes       |
//!
//! Every message, body excerpt and header value passes through the client's
//! [`Redactor`](crate::secret::Redactor) first, so credentials echoed by a server never reach an
//! error.

use std::time::Duration;

use agent_op::ProviderError;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::secret::Redactor;

/// The most of an unsuccessful response body kept in [`ProviderError::Http`].
pub(crate) const BODY_EXCERPT_BYTES: usize = 2048;
/// The most of a provider's error message kept in other variants.
const MESSAGE_BYTES: usize = 1024;
/// How much text either side of a decoding failure [`ProviderError::Decode`] shows.
const DECODE_CONTEXT_BYTES: usize = 60;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The base URL or host is not a usable `http`/`https` URL.
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header name or value cannot be sent. The value is never shown.
    #[error("invalid header `{name}`: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key was to be read from an environment variable that is not set.
    #[error("no API key: the environment variable `{var}` is not set")]
    MissingApiKey {
        /// The variable's name.
        var: String,
    },
    /// The HTTP client could not be created (for example, TLS initialisation failed).
    #[error("could not build the HTTP client: {0}")]
    Client(String),
}

/// What an error body says, in the shapes the supported servers use:
/// `{"error":{"message","type","code"}}` (OpenAI, OpenRouter, llama.cpp), `{"error":"text"}`
/// (Ollama), and `{"object":"error","message","type","code"}` (vLLM).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ErrorBody {
    pub(crate) message: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) code: Option<String>,
    pub(crate) numeric_code: Option<u16>,
}

impl ErrorBody {
    /// Reads an error body; anything that is not JSON gives an empty description.
    pub(crate) fn parse(body: &[u8]) -> ErrorBody {
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => ErrorBody::from_value(&value),
            Err(_) => ErrorBody::default(),
        }
    }

    /// Reads an already parsed error body.
    pub(crate) fn from_value(value: &Value) -> ErrorBody {
        let inner = match value.get("error") {
            Some(Value::String(message)) => {
                return ErrorBody {
                    message: Some(message.clone()),
                    ..ErrorBody::default()
                };
            }
            Some(inner @ Value::Object(_)) => inner,
            _ => value,
        };
        let text = |key: &str| inner.get(key).and_then(Value::as_str).map(str::to_owned);
        let (code, numeric_code) = match inner.get("code") {
            Some(Value::String(code)) => (Some(code.clone()), None),
            Some(Value::Number(n)) => (None, n.as_u64().and_then(|n| u16::try_from(n).ok())),
            _ => (None, None),
        };
        ErrorBody {
            message: text("message"),
            kind: text("type"),
            code,
            numeric_code,
        }
    }

    fn is(&self, what: &str) -> bool {
        self.code.as_deref() == Some(what) || self.kind.as_deref() == Some(what)
    }

    fn says_context_exceeded(&self) -> bool {
        if self.is("context_length_exceeded") || self.is("exceed_context_size_error") {
            return true;
        }
        let Some(message) = &self.message else {
            return false;
        };
        let m = message.to_ascii_lowercase();
        m.contains("maximum context length")
            || ((m.contains("context length")
                || m.contains("context window")
                || m.contains("context size"))
                && (m.contains("exceed") || m.contains("too long") || m.contains("too large")))
    }
}

/// The error for an unsuccessful HTTP response.
pub(crate) fn from_status(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    redactor: &Redactor,
) -> ProviderError {
    let described = ErrorBody::parse(body);
    let text = String::from_utf8_lossy(body);
    classify(
        status,
        &described,
        || header_pairs(headers, redactor),
        retry_after(headers),
        &text,
        redactor,
    )
}

/// The error for an `error` object a server sent inside a successful (streaming) response.
pub(crate) fn from_stream_error(value: &Value, raw: &str, redactor: &Redactor) -> ProviderError {
    let described = ErrorBody::from_value(value);
    let status = described.numeric_code.unwrap_or(200);
    classify(status, &described, Vec::new, None, raw, redactor)
}

fn classify(
    status: u16,
    described: &ErrorBody,
    headers: impl FnOnce() -> Vec<(String, String)>,
    retry_after: Option<Duration>,
    raw_body: &str,
    redactor: &Redactor,
) -> ProviderError {
    let message = || {
        let message = match &described.message {
            Some(m) if !m.is_empty() => m.as_str(),
            _ => raw_body.trim(),
        };
        excerpt(&redactor.redact(message), MESSAGE_BYTES)
    };
    if status == 401 || status == 403 || described.is("invalid_api_key") {
        return ProviderError::Authentication {
            status,
            message: message(),
        };
    }
    if status == 402 || described.is("insufficient_quota") {
        return ProviderError::QuotaExhausted {
            status,
            message: message(),
        };
    }
    if status == 429 || described.is("rate_limit_exceeded") {
        return ProviderError::RateLimited {
            status,
            retry_after,
            message: message(),
        };
    }
    if matches!(status, 200 | 400 | 413 | 422) && described.says_context_exceeded() {
        return ProviderError::ContextLengthExceeded { message: message() };
    }
    ProviderError::Http {
        status,
        body: excerpt(&redactor.redact(raw_body), BODY_EXCERPT_BYTES),
        headers: headers(),
    }
}

/// Response headers as text pairs, redacted.
pub(crate) fn header_pairs(headers: &HeaderMap, redactor: &Redactor) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes());
            (name.as_str().to_owned(), redactor.redact(&value))
        })
        .collect()
}

/// How long the server asked us to wait: `retry-after-ms` (OpenAI, Azure), else `Retry-After`
/// as seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn seconds(secs: f64) -> Option<Duration> {
    if secs.is_finite() && secs >= 0.0 {
        Duration::try_from_secs_f64(secs).ok()
    } else {
        None
    }
}

/// The error for a successful response whose body is not what the API documents.
pub(crate) fn decode(
    what: &str,
    body: &[u8],
    err: &serde_json::Error,
    redactor: &Redactor,
) -> ProviderError {
    let text = String::from_utf8_lossy(body);
    let at = byte_offset(&text, err.line(), err.column());
    ProviderError::Decode {
        message: format!("{what}: {err}"),
        excerpt: redactor.redact(around(&text, at, DECODE_CONTEXT_BYTES)),
    }
}

/// A [`ProviderError::Decode`] for a problem that is not a JSON syntax error.
pub(crate) fn invalid(
    message: impl Into<String>,
    excerpt_of: &str,
    redactor: &Redactor,
) -> ProviderError {
    ProviderError::Decode {
        message: message.into(),
        excerpt: redactor.redact(&excerpt(excerpt_of, 2 * DECODE_CONTEXT_BYTES)),
    }
}

/// The byte offset of serde_json's 1-based (line, column) in `text`.
fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    if line == 0 {
        return 0;
    }
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// Up to `radius` bytes either side of byte `at`, cut on character boundaries.
fn around(text: &str, at: usize, radius: usize) -> &str {
    let mut start = at.saturating_sub(radius);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = at.saturating_add(radius).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    &text[start..end]
}

/// The first `max_bytes` of `text` (on a character boundary), marked with `…` when cut.
pub(crate) fn excerpt(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The message of an error and all its sources, joined by `: `.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use reqwest::header::HeaderValue;

    fn classify_body(status: u16, body: &str) -> ProviderError {
        from_status(
            status,
            &HeaderMap::new(),
            body.as_bytes(),
            &Redactor::default(),
        )
    }

    #[test]
    fn error_bodies_of_each_server_shape() {
        let openai = ErrorBody::parse(
            br#"{"error":{"message":"m","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(openai.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(openai.kind.as_deref(), Some("invalid_request_error"));
        let ollama = ErrorBody::parse(br#"{"error":"model 'x' not found"}"#);
        assert_eq!(ollama.message.as_deref(), Some("model 'x' not found"));
        let vllm = ErrorBody::parse(
            br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
        );
        assert_eq!(vllm.numeric_code, Some(400));
        assert_eq!(vllm.message.as_deref(), Some("bad"));
        assert_eq!(ErrorBody::parse(b"<html>"), ErrorBody::default());
    }

    #[test]
    fn the_mapping_table() {
        assert!(matches!(
            classify_body(
                401,
                r#"{"error":{"message":"bad key","code":"invalid_api_key"}}"#
            ),
            ProviderError::Authentication { status: 401, .. }
        ));
        assert!(matches!(
            classify_body(403, "{}"),
            ProviderError::Authentication { status: 403, .. }
        ));
        let quota = classify_body(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        );
        assert!(matches!(
            quota,
            ProviderError::QuotaExhausted { status: 429, .. }
        ));
        assert!(!quota.is_retryable());
        assert!(matches!(
            classify_body(402, "{}"),
            ProviderError::QuotaExhausted { .. }
        ));
        let limited = classify_body(
            429,
            r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#,
        );
        assert!(matches!(
            limited,
            ProviderError::RateLimited { status: 429, .. }
        ));
        assert!(limited.is_retryable());
        for body in [
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens","code":400}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
            r#"{"error":"input length exceeds the context length"}"#,
        ] {
            assert!(
                matches!(
                    classify_body(400, body),
                    ProviderError::ContextLengthExceeded { .. }
                ),
                "{body}"
            );
        }
        let server = classify_body(503, "overloaded");
        assert!(
            matches!(&server, ProviderError::Http { status: 503, body, .. } if body == "overloaded")
        );
        assert!(server.is_retryable());
        assert!(!classify_body(404, r#"{"error":"model 'x' not found"}"#).is_retryable());
    }

    #[test]
    fn messages_and_bodies_are_redacted_and_bounded() {
        let redactor = Redactor::new([Secret::new("sk-secret")]);
        let err = from_status(
            401,
            &HeaderMap::new(),
            br#"{"error":{"message":"Incorrect API key provided: sk-secret"}}"#,
            &redactor,
        );
        assert!(!err.to_string().contains("sk-secret"), "{err}");
        let mut headers = HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("sk-secret"));
        let long = format!("sk-secret {}", "x".repeat(10_000));
        let err = from_status(500, &headers, long.as_bytes(), &redactor);
        let ProviderError::Http { body, headers, .. } = err else {
            panic!("expected Http");
        };
        assert!(body.len() <= BODY_EXCERPT_BYTES + '…'.len_utf8());
        assert!(body.starts_with("[redacted] x"));
        assert_eq!(
            headers,
            vec![("x-echo".to_owned(), "[redacted]".to_owned())]
        );
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a past date means now"
        );
        let future = (chrono::Utc::now() + chrono::Duration::seconds(30))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        h.insert("retry-after", HeaderValue::from_str(&future).unwrap());
        let wait = retry_after(&h).unwrap();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn decode_errors_point_at_the_offending_text() {
        let body = "{\"choices\": [ {\"message\": tru } ] }".as_bytes();
        let err = serde_json::from_slice::<Value>(body).unwrap_err();
        let ProviderError::Decode { excerpt, message } =
            decode("chat", body, &err, &Redactor::default())
        else {
            panic!("expected Decode");
        };
        assert!(excerpt.contains("tru }"), "{excerpt}");
        assert!(message.starts_with("chat: "), "{message}");
    }

    #[test]
    fn excerpts_cut_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "h…");
        assert_eq!(excerpt("hé", 10), "hé");
        assert_eq!(around("aéb", 2, 0), "é");
        assert_eq!(around("aéb", 1, 1), "aé");
    }
}
