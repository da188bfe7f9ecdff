//! The HTTP plumbing both clients share: one `reqwest` client with timeouts and default
//! headers, bounded response bodies, and the mapping of every failure to a
//! [`ProviderError`](agent_op::ProviderError).

use std::fmt;
use std::time::{Duration, Instant};

use agent_op::{Cause, ProviderError};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, Url};

use crate::error::{self, ConfigError};
use crate::secret::{self, Redactor, Secret};

/// Default time allowed to open a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time allowed for a whole call, from sending the request to the last byte of the
/// reply (streams included).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default largest response body accepted: 64 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// The most of an error response's body that is read.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Connection settings, set through the client builders.
#[derive(Clone)]
pub(crate) struct HttpOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) read_timeout: Option<Duration>,
    pub(crate) max_response_bytes: usize,
    /// Extra headers sent with every request.
    pub(crate) headers: Vec<ExtraHeader>,
}

/// A header sent with every request.
#[derive(Clone)]
pub(crate) struct ExtraHeader {
    pub(crate) name: String,
    pub(crate) value: Secret,
    /// Whether the value is a credential: kept out of errors (and `Debug`, like every value).
    pub(crate) secret: bool,
}

impl ExtraHeader {
    /// A header whose value is a credential if its name says so ([`is_credential_name`]).
    pub(crate) fn new(name: impl Into<String>, value: impl Into<String>) -> ExtraHeader {
        let name = name.into();
        ExtraHeader {
            secret: is_credential_name(&name),
            name,
            value: Secret::new(value),
        }
    }

    /// A header whose value is a credential, whatever its name.
    pub(crate) fn secret(name: impl Into<String>, value: impl Into<String>) -> ExtraHeader {
        ExtraHeader {
            name: name.into(),
            value: Secret::new(value),
            secret: true,
        }
    }
}

/// Header names whose values are treated as credentials even when set with
/// [`header`](crate::OpenAiBuilder::header): `Authorization`, `Proxy-Authorization`,
/// `Cookie`, and any name containing `key`, `token`, `secret`, `password`, `auth` or
/// `session` (`api-key`, `x-api-key`, `x-goog-api-key`, `Ocp-Apim-Subscription-Key`,
/// `x-auth-token`, …).
pub(crate) fn is_credential_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "cookie"
        || ["key", "token", "secret", "password", "auth", "session"]
            .iter()
            .any(|part| name.contains(part))
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            read_timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            headers: Vec::new(),
        }
    }
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|h| h.name.as_str()).collect();
        f.debug_struct("HttpOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("headers", &names)
            .finish()
    }
}

/// Parses an `http`/`https` base URL. An error shows the URL with its user information (if
/// any) masked.
pub(crate) fn parse_base_url(url: &str) -> Result<Url, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidUrl {
        url: secret::mask_userinfo(url),
        reason,
    };
    let parsed = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "the scheme must be http or https, not `{}`",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none() {
        return Err(invalid("it has no host".to_owned()));
    }
    Ok(parsed)
}

/// `base` with `path` appended (`https://h/v1` + `chat/completions`).
pub(crate) fn endpoint(base: &Url, path: &str) -> Result<Url, ConfigError> {
    let joined = format!("{}/{}", base.as_str().trim_end_matches('/'), path);
    parse_base_url(&joined)
}

/// One configured HTTP client.
#[derive(Clone)]
pub(crate) struct Transport {
    client: reqwest::Client,
    options: HttpOptions,
    redactor: Redactor,
}

/// A successful response whose body is still to be read.
pub(crate) struct Reply {
    response: Response,
    started: Instant,
}

impl Reply {
    /// The media type of the response's `Content-Type`, without parameters and in lower case
    /// (`text/event-stream`); `None` when the header is missing.
    pub(crate) fn media_type(&self) -> Option<String> {
        let value = self.response.headers().get(header::CONTENT_TYPE)?;
        let text = String::from_utf8_lossy(value.as_bytes());
        let media_type = text.split(';').next().unwrap_or_default();
        Some(media_type.trim().to_ascii_lowercase())
    }
}

impl Transport {
    /// A client for the server at `base_url` sending `auth` (a header carrying a credential,
    /// if any) and the extra headers of `options` with every request.
    ///
    /// Its redactor knows the credentials: `auth`, the secret extra headers, and the user
    /// information of `base_url`. Redirects are not followed (a 3xx is an error), so no header
    /// ever reaches another host.
    pub(crate) fn new(
        options: &HttpOptions,
        auth: Option<(HeaderName, Secret)>,
        base_url: &Url,
    ) -> Result<Transport, ConfigError> {
        let mut headers = HeaderMap::new();
        let mut secrets = secret::url_secrets(base_url);
        let extra = options
            .headers
            .iter()
            .map(|h| (h.name.as_str(), &h.value, h.secret));
        let auth_triple = auth.as_ref().map(|(n, v)| (n.as_str(), v, true));
        for (name, value, is_secret) in extra.chain(auth_triple) {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                ConfigError::InvalidHeader {
                    name: name.to_owned(),
                    reason: e.to_string(),
                }
            })?;
            let mut header_value =
                HeaderValue::from_str(value.expose()).map_err(|_| ConfigError::InvalidHeader {
                    name: name.to_owned(),
                    reason: "the value has characters not allowed in a header".to_owned(),
                })?;
            header_value.set_sensitive(is_secret);
            headers.insert(header_name, header_value);
            if is_secret {
                secrets.push(value.clone());
            }
        }
        if let Some((_, key)) = &auth {
            // The bare key, in case a server echoes it without its "Bearer " prefix.
            if let Some(bare) = key.expose().strip_prefix("Bearer ") {
                secrets.push(Secret::new(bare));
            }
        }
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("effect-agents/", env!("CARGO_PKG_VERSION")))
            // A redirect would carry the credential headers to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout);
        if let Some(read) = options.read_timeout {
            builder = builder.read_timeout(read);
        }
        let redactor = Redactor::new(secrets);
        let client = builder.build().map_err(|source| ConfigError::Client {
            message: redactor.redact(&error::chain(&source)),
            source,
        })?;
        Ok(Transport {
            client,
            options: options.clone(),
            redactor,
        })
    }

    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    pub(crate) fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// POSTs a JSON body; an unsuccessful status becomes the matching error.
    pub(crate) async fn post_json(
        &self,
        url: &Url,
        body: Vec<u8>,
        accept: &'static str,
    ) -> Result<Reply, ProviderError> {
        let started = Instant::now();
        let response = self
            .client
            .post(url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, accept)
            .body(body)
            .send()
            .await
            .map_err(|e| self.failure(e, started))?;
        let status = response.status();
        if status.is_success() {
            return Ok(Reply { response, started });
        }
        let headers = response.headers().clone();
        let body = self.read_error_body(response, started).await;
        Err(error::from_status(
            status.as_u16(),
            &headers,
            &body,
            &self.redactor,
        ))
    }

    /// Reads a whole successful body, failing if it is larger than the configured limit.
    pub(crate) async fn body(&self, reply: Reply) -> Result<Bytes, ProviderError> {
        let Reply {
            mut response,
            started,
        } = reply;
        let limit = self.options.max_response_bytes;
        if let Some(length) = response.content_length() {
            if length > limit as u64 {
                return Err(self.too_large());
            }
        }
        let first = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(Bytes::new()),
            Err(e) => return Err(self.failure(e, started)),
        };
        let second = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            // The common case: the whole body arrived as one chunk; no copy needed.
            Ok(None) if first.len() <= limit => return Ok(first),
            Ok(None) => return Err(self.too_large()),
            Err(e) => return Err(self.failure(e, started)),
        };
        let capacity = response
            .content_length()
            .map_or(first.len() + second.len(), |n| n as usize)
            .min(limit);
        let mut body = Vec::with_capacity(capacity);
        body.extend_from_slice(&first);
        body.extend_from_slice(&second);
        loop {
            if body.len() > limit {
                return Err(self.too_large());
            }
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => return Ok(Bytes::from(body)),
                Err(e) => return Err(self.failure(e, started)),
            }
        }
    }

    /// The body as a stream of chunks, failing once more than the configured limit arrived.
    pub(crate) fn stream(
        &self,
        reply: Reply,
    ) -> impl Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
        let Reply { response, started } = reply;
        let transport = self.clone();
        let limit = self.options.max_response_bytes;
        let mut received = 0usize;
        response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| transport.failure(e, started))?;
            received = received.saturating_add(chunk.len());
            if received > limit {
                return Err(transport.too_large());
            }
            Ok(chunk)
        })
    }

    /// The error for a successful response of a media type the call cannot read (an HTML
    /// page from a proxy or a captive portal, say): a [`ProviderError::Decode`] naming the
    /// type, with the start of the body. It is not retryable, as the same request would get
    /// the same page; reading it as the expected format would instead fail obscurely (a
    /// stream "ended early", which is retried).
    pub(crate) async fn unexpected_media_type(
        &self,
        reply: Reply,
        expected: &str,
    ) -> ProviderError {
        let found = reply.media_type().unwrap_or_default();
        let body = self.read_error_body(reply.response, reply.started).await;
        error::invalid(
            format!("expected {expected}, but the server answered with `{found}`"),
            &String::from_utf8_lossy(&body),
            &self.redactor,
        )
    }

    async fn read_error_body(&self, mut response: Response, started: Instant) -> Vec<u8> {
        let mut body = Vec::new();
        // An error body that fails half way is still worth showing as far as it got.
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_ERROR_BODY_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY_BYTES
                || started.elapsed() > self.options.request_timeout
            {
                break;
            }
        }
        body
    }

    fn too_large(&self) -> ProviderError {
        ProviderError::decode(
            format!(
                "the response is larger than the limit of {} bytes",
                self.options.max_response_bytes
            ),
            "",
        )
    }

    /// Maps a `reqwest` failure: timeouts to [`ProviderError::Timeout`] with the limit that
    /// passed, everything else to [`ProviderError::Transport`] without the URL and redacted.
    pub(crate) fn failure(&self, err: reqwest::Error, started: Instant) -> ProviderError {
        if err.is_timeout() {
            let options = &self.options;
            let after = if err.is_connect() {
                options.connect_timeout
            } else {
                match options.read_timeout {
                    Some(read) if started.elapsed() < options.request_timeout => read,
                    _ => options.request_timeout,
                }
            };
            return ProviderError::Timeout { after };
        }
        // Without the URL, the error holds nothing secret: keep it whole as the cause.
        let err = err.without_url();
        ProviderError::Transport {
            message: self.redactor.redact(&error::chain(&err)),
            cause: Some(Cause::new(err)),
        }
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The connection setters every client builder shares; the builder keeps an `HttpOptions` in
/// a field named `http`.
macro_rules! http_builder_methods {
    () => {
        /// Time allowed to open a connection (default 10 s).
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.connect_timeout = timeout;
            self
        }

        /// Time allowed for a whole call, from sending the request to the last byte of the
        /// reply, streams included (default 10 min). A call that takes longer fails with
        /// [`ProviderError::Timeout`](agent_op::ProviderError::Timeout).
        pub fn request_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.request_timeout = timeout;
            self
        }

        /// Longest wait for the next bytes of a reply (off by default): catches a stream that
        /// stalls long before the request timeout would.
        pub fn read_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.http.read_timeout = Some(timeout);
            self
        }

        /// The largest response body accepted (default 64 MiB); a larger one fails with
        /// [`ProviderError::Decode`](agent_op::ProviderError::Decode).
        pub fn max_response_bytes(mut self, bytes: usize) -> Self {
            self.http.max_response_bytes = bytes;
            self
        }

        /// Sends an extra header with every request (`X-Title`, `HTTP-Referer`, a client
        /// version…). Its value is never shown in `Debug` output. It is scrubbed from errors
        /// only if the header's name marks a credential: `Authorization`,
        /// `Proxy-Authorization`, `Cookie`, or a name containing `key`, `token`, `secret`,
        /// `password`, `auth` or `session` (`api-key`, `x-api-key`, …). Use
        /// [`secret_header`](Self::secret_header) for any other credential.
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.http
                .headers
                .push(crate::http::ExtraHeader::new(name, value));
            self
        }

        /// Sends an extra header carrying a credential with every request: its value is never
        /// shown in `Debug` output and is scrubbed from every error (values of 8 bytes or
        /// more; shorter ones cannot be told apart from ordinary text).
        pub fn secret_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.http
                .headers
                .push(crate::http::ExtraHeader::secret(name, value));
            self
        }
    };
}

pub(crate) use http_builder_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert!(parse_base_url("https://api.openai.com/v1").is_ok());
        assert!(matches!(
            parse_base_url("ftp://x"),
            Err(ConfigError::InvalidUrl { .. })
        ));
        assert!(parse_base_url("not a url").is_err());
        let base = parse_base_url("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!(
            endpoint(&base, "chat/completions").unwrap().as_str(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        let err = parse_base_url("ftp://user:hunter2-password@x/").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    }

    #[test]
    fn credential_header_names() {
        for name in [
            "Authorization",
            "proxy-authorization",
            "api-key",
            "X-API-Key",
            "x-goog-api-key",
            "Ocp-Apim-Subscription-Key",
            "x-auth-token",
            "Cookie",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "x-client-version",
            "X-Title",
            "HTTP-Referer",
            "OpenAI-Organization",
            "OpenAI-Project",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
    }

    #[test]
    fn header_values_are_checked_without_echoing_them() {
        let base = parse_base_url("http://127.0.0.1:1/").unwrap();
        let options = HttpOptions {
            headers: vec![ExtraHeader::new("x-key", "bad\nvalue-secret")],
            ..HttpOptions::default()
        };
        let err = Transport::new(&options, None, &base).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidHeader { .. }));
        assert!(!err.to_string().contains("value-secret"));
        let options = HttpOptions {
            headers: vec![ExtraHeader::new("bad name", "v")],
            ..HttpOptions::default()
        };
        assert!(Transport::new(&options, None, &base).is_err());
    }
}
