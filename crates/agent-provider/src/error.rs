//! How HTTP failures become [`ProviderError`]s: the mapping both clients share.
//!
//! | HTTP status / body                                              | variant                 | retryable |
//! |-----------------------------------------------------------------|-------------------------|-----------|
//! | 401, 403                                                        | `Authentication`        | no        |
//! | 402, or code/type `insufficient_quota`                          | `QuotaExhausted`        | no        |
//! | 429 (any other body), or code `rate_limit_exceeded`             | `RateLimited`           | yes       |
//! | 400/413/422 saying the context length was exceeded              | `ContextLengthExceeded` | no        |
//! | 408, 5xx (any other body)                                       | `Refused`               | yes       |
//! | any other status                                                | `Refused`               | no        |
//! | 200 whose body is not the expected JSON                         | `Decode`                | no        |
//! | timeout (connect, request, read)                                | `Timeout`               | yes       |
//! | connection refused/reset, TLS, truncated body or stream         | `Transport`             | yes       |
//! | a redirect (3xx): never followed                                | `Refused`               | no        |
//!
//! Every answer with a status keeps it, with the headers and the start of the body, in an
//! [`HttpError`] that is the error's cause: the variants themselves know nothing of HTTP.
//!
//! An `error` object received inside a successful response (a stream's chunk or line, or a
//! 200 body) has no HTTP status of its own: a numeric `code` between 400 and 599 is taken as
//! its status; otherwise it is classified by its code, type and message as above, and
//! anything else becomes a `Refused` that is retryable (a server error, an overloaded server,
//! a crashed runner) unless its type is `invalid_request_error`. Never "HTTP 200".
//!
//! Every message, body excerpt and header value passes through the client's
//! [`Redactor`](crate::secret::Redactor) first (the whole text, before it is cut), so
//! credentials echoed by a server never reach an error. The values of `Retry-After`,
//! `retry-after-ms` and `Content-Length` are kept as received.

use std::time::Duration;

use agent_op::{Cause, ProviderError};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::http_error::HttpError;
use crate::secret::Redactor;

/// The most of an unsuccessful response body kept in an [`HttpError`].
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
        /// The URL as given, with any user information (`user:password@`) replaced by
        /// `[redacted]`.
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
    #[error("could not build the HTTP client: {message}")]
    Client {
        /// What failed, with its causes, credentials redacted.
        message: String,
        /// The HTTP library's error. It holds no request yet, so no URL or credential.
        #[source]
        source: reqwest::Error,
    },
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

    fn is_any(&self, what: &[&str]) -> bool {
        what.iter().any(|w| self.is(w))
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
        Some(status),
        &described,
        || header_pairs(headers, redactor),
        retry_after(headers),
        &text,
        redactor,
    )
}

/// The error for an `error` object a server sent inside a successful (streaming) response.
///
/// It has no HTTP status: a numeric `code` that is an error status (400–599) is taken as one;
/// otherwise the object is classified by what it says (see the module docs), and what it does
/// not say becomes a retryable `Refused`.
pub(crate) fn from_stream_error(value: &Value, raw: &str, redactor: &Redactor) -> ProviderError {
    let described = ErrorBody::from_value(value);
    let status = described
        .numeric_code
        .filter(|code| (400..=599).contains(code));
    classify(status, &described, Vec::new, None, raw, redactor)
}

/// Codes and types saying the credentials were refused.
const AUTHENTICATION: &[&str] = &["invalid_api_key", "authentication_error"];
/// Codes and types saying the account has no quota left.
const QUOTA: &[&str] = &["insufficient_quota"];
/// Codes and types saying the client is sending too fast.
const RATE_LIMIT: &[&str] = &["rate_limit_exceeded", "rate_limit_error"];

/// Maps an error to its variant, with the answer as an [`HttpError`] cause when it has a
/// status. `status` is `None` for an error received inside a successful response.
fn classify(
    status: Option<u16>,
    described: &ErrorBody,
    headers: impl FnOnce() -> Vec<(String, String)>,
    retry_after: Option<Duration>,
    raw_body: &str,
    redactor: &Redactor,
) -> ProviderError {
    let body = excerpt(&redactor.redact(raw_body), BODY_EXCERPT_BYTES);
    let message = match &described.message {
        Some(m) if !m.is_empty() => excerpt(&redactor.redact(m), MESSAGE_BYTES),
        _ => excerpt(body.trim(), MESSAGE_BYTES),
    };
    let cause = status.map(|status| Cause::new(HttpError::new(status, headers(), body)));
    if matches!(status, Some(401 | 403)) || described.is_any(AUTHENTICATION) {
        return ProviderError::Authentication { message, cause };
    }
    if status == Some(402) || described.is_any(QUOTA) {
        return ProviderError::QuotaExhausted { message, cause };
    }
    if status == Some(429) || described.is_any(RATE_LIMIT) {
        return ProviderError::RateLimited {
            retry_after,
            message,
            cause,
        };
    }
    if matches!(status, None | Some(400 | 413 | 422)) && described.says_context_exceeded() {
        return ProviderError::ContextLengthExceeded { message, cause };
    }
    let retryable = match status {
        Some(status) => status >= 500 || status == 408,
        // A server error, an overloaded server, a crashed runner, or nothing said: the
        // request itself was accepted, so it may well succeed if sent again.
        None => !described.is("invalid_request_error"),
    };
    ProviderError::Refused {
        message,
        retryable,
        cause,
    }
}

/// Headers whose values are kept as received: they never hold credentials, and `Retry`
/// reads `Retry-After` back from them.
const NEVER_REDACTED: &[&str] = &["retry-after", "retry-after-ms", "content-length"];

/// Response headers as text pairs, redacted.
pub(crate) fn header_pairs(headers: &HeaderMap, redactor: &Redactor) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes());
            let value = if NEVER_REDACTED.contains(&name.as_str()) {
                value.into_owned()
            } else {
                redactor.redact(&value)
            };
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// How long the server asked us to wait: `retry-after-ms` (OpenAI, Azure), else `Retry-After`
/// as seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    crate::http_error::retry_after_in(|name| headers.get(name).and_then(|v| v.to_str().ok()))
}

/// The error for a successful response whose body is not what the API documents.
pub(crate) fn decode(
    what: &str,
    body: &[u8],
    err: serde_json::Error,
    redactor: &Redactor,
) -> ProviderError {
    let text = String::from_utf8_lossy(body);
    let at = byte_offset(&text, err.line(), err.column());
    // Redact the whole text, then cut: cutting first could split a secret, and the part left
    // in the excerpt would no longer be recognised.
    let (redacted, at) = redactor.redact_tracking(&text, at);
    // serde's messages quote what they found (`invalid type: string "…"`): when that holds
    // a credential, the cause is a serde_json error of the redacted text instead.
    let said = err.to_string();
    let redacted_said = redactor.redact(&said);
    let cause = if redacted_said == said {
        Cause::new(err)
    } else {
        Cause::new(<serde_json::Error as serde::de::Error>::custom(
            &redacted_said,
        ))
    };
    ProviderError::Decode {
        message: format!("{what}: {redacted_said}"),
        excerpt: around(&redacted, at, DECODE_CONTEXT_BYTES).to_owned(),
        cause: Some(cause),
    }
}

/// A [`ProviderError::Decode`] for a problem that is not a JSON syntax error.
pub(crate) fn invalid(
    message: impl Into<String>,
    excerpt_of: &str,
    redactor: &Redactor,
) -> ProviderError {
    ProviderError::decode(
        redactor.redact(&message.into()),
        excerpt(&redactor.redact(excerpt_of), 2 * DECODE_CONTEXT_BYTES),
    )
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

    fn status_of(err: &ProviderError) -> Option<u16> {
        HttpError::of(err).map(|answer| answer.status)
    }

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
        let refused = classify_body(
            401,
            r#"{"error":{"message":"bad key","code":"invalid_api_key"}}"#,
        );
        assert!(
            matches!(&refused, ProviderError::Authentication { message, .. } if message == "bad key")
        );
        assert_eq!(status_of(&refused), Some(401));
        let forbidden = classify_body(403, "{}");
        assert!(matches!(forbidden, ProviderError::Authentication { .. }));
        assert_eq!(status_of(&forbidden), Some(403));
        let quota = classify_body(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        );
        assert!(matches!(quota, ProviderError::QuotaExhausted { .. }));
        assert_eq!(status_of(&quota), Some(429));
        assert!(!quota.is_retryable());
        assert!(matches!(
            classify_body(402, "{}"),
            ProviderError::QuotaExhausted { .. }
        ));
        let limited = classify_body(
            429,
            r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#,
        );
        assert!(matches!(limited, ProviderError::RateLimited { .. }));
        assert_eq!(status_of(&limited), Some(429));
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
            matches!(&server, ProviderError::Refused { retryable: true, message, .. } if message == "overloaded")
        );
        assert_eq!(
            HttpError::of(&server).map(|a| a.body.as_str()),
            Some("overloaded")
        );
        assert_eq!(status_of(&server), Some(503));
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
        let Some(HttpError { body, headers, .. }) = HttpError::of(&err).cloned() else {
            panic!("expected an HTTP answer: {err:?}");
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
        let ProviderError::Decode {
            excerpt,
            message,
            cause,
        } = decode("chat", body, err, &Redactor::default())
        else {
            panic!("expected Decode");
        };
        assert!(excerpt.contains("tru }"), "{excerpt}");
        assert!(message.starts_with("chat: "), "{message}");
        let json = cause
            .as_ref()
            .and_then(|c| c.downcast_ref::<serde_json::Error>());
        assert_eq!(json.map(|e| (e.line(), e.column())), Some((1, 30)));
    }

    /// Every 8-byte piece of `key`.
    fn pieces_of(key: &str) -> Vec<&str> {
        (0..=key.len() - 8).map(|i| &key[i..i + 8]).collect()
    }

    #[test]
    fn a_key_next_to_a_syntax_error_never_leaks_from_a_decode_error() {
        const KEY: &str = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghij";
        let redactor = Redactor::new([Secret::new(KEY)]);
        for pad in 0..150 {
            for tail in ["", " }", &"x".repeat(100)] {
                // The body echoes the key, and breaks right after it.
                let body = format!(
                    "{{\"echo\": \"{}{KEY}\" oops{tail}",
                    "é".repeat(pad % 7) + &"a".repeat(pad)
                );
                let err = serde_json::from_str::<Value>(&body).unwrap_err();
                let decoded = decode("chat", body.as_bytes(), err, &redactor);
                for text in [decoded.to_string(), format!("{decoded:?}")] {
                    for piece in pieces_of(KEY) {
                        assert!(!text.contains(piece), "pad {pad}: `{piece}` leaked: {text}");
                    }
                }
                let ProviderError::Decode { excerpt, .. } = &decoded else {
                    panic!("expected Decode");
                };
                assert!(excerpt.contains("oops"), "pad {pad}: {excerpt}");
            }
        }
        // serde quotes what it found in its messages; those are redacted too.
        let body = format!("{{\"choices\": \"{KEY}\"}}");
        let err = serde_json::from_str::<Vec<u8>>(&format!("\"{KEY}\"")).unwrap_err();
        let decoded = decode("chat", body.as_bytes(), err, &redactor);
        assert!(!decoded.to_string().contains(&KEY[..20]), "{decoded}");
        // The excerpts of other decoding failures too.
        for pad in 0..200 {
            let text = format!("{}{KEY} and more", "b".repeat(pad));
            let err = invalid("no choices", &text, &redactor);
            for piece in pieces_of(KEY) {
                assert!(!format!("{err:?}").contains(piece), "pad {pad}: {err:?}");
            }
        }
    }

    #[test]
    fn errors_inside_a_stream_are_classified_without_a_status() {
        let stream_error = |value: Value| {
            let raw = value.to_string();
            from_stream_error(&value, &raw, &Redactor::default())
        };
        let server = stream_error(
            serde_json::json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}}),
        );
        assert!(
            matches!(&server, ProviderError::Refused { retryable: true, message, cause: None } if message.contains("server had an error")),
            "{server:?}"
        );
        assert!(server.is_retryable());
        assert!(!server.to_string().contains("200"), "{server}");
        let ollama =
            stream_error(serde_json::json!({"error": "llama runner process has terminated"}));
        assert!(
            matches!(
                ollama,
                ProviderError::Refused {
                    retryable: true,
                    ..
                }
            ),
            "{ollama:?}"
        );
        assert!(ollama.is_retryable());
        for (value, expected) in [
            (
                serde_json::json!({"error": {"message": "slow", "type": "requests", "code": "rate_limit_exceeded"}}),
                "RateLimited",
            ),
            (
                serde_json::json!({"error": {"message": "pay", "type": "insufficient_quota", "code": "insufficient_quota"}}),
                "QuotaExhausted",
            ),
            (
                serde_json::json!({"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}}),
                "Authentication",
            ),
            (
                serde_json::json!({"error": {"message": "long", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
                "ContextLengthExceeded",
            ),
            (
                serde_json::json!({"error": "input length exceeds the context length"}),
                "ContextLengthExceeded",
            ),
            (
                serde_json::json!({"error": {"message": "overloaded", "code": 529}}),
                "Refused { message: \"overloaded\", retryable: true, cause: Some(HttpError { status: 529",
            ),
            (
                serde_json::json!({"error": {"message": "bad", "type": "invalid_request_error"}}),
                "Refused { message: \"bad\", retryable: false, cause: None",
            ),
            (
                serde_json::json!({"error": {"message": "odd", "code": 200}}),
                "Refused { message: \"odd\", retryable: true, cause: None",
            ),
        ] {
            let err = stream_error(value.clone());
            assert!(format!("{err:?}").starts_with(expected), "{value}: {err:?}");
        }
        assert!(matches!(
            stream_error(serde_json::json!({"error": {"code": "rate_limit_exceeded"}})),
            ProviderError::RateLimited { cause: None, .. }
        ));
    }

    #[test]
    fn retry_after_and_content_length_are_never_redacted() {
        let redactor = Redactor::new([Secret::new("12345678")]);
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("12345678"));
        headers.insert("content-length", HeaderValue::from_static("12345678"));
        headers.insert("x-other", HeaderValue::from_static("12345678"));
        let pairs = header_pairs(&headers, &redactor);
        assert_eq!(
            pairs,
            vec![
                ("retry-after".to_owned(), "12345678".to_owned()),
                ("content-length".to_owned(), "12345678".to_owned()),
                ("x-other".to_owned(), "[redacted]".to_owned()),
            ]
        );
    }

    #[test]
    fn excerpts_cut_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "h…");
        assert_eq!(excerpt("hé", 10), "hé");
        assert_eq!(around("aéb", 2, 0), "é");
        assert_eq!(around("aéb", 1, 1), "aé");
    }
}
