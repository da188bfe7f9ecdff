//! [`HttpError`]: what an HTTP server answered when it refused a call.

use std::fmt;
use std::time::Duration;

use agent_op::ProviderError;

/// An unsuccessful HTTP answer: its status, headers and the start of its body.
///
/// The clients of this crate keep it as the [`cause`](ProviderError::cause) of the
/// [`ProviderError`] they return for an answer with an error status, so the variant says
/// what happened (rate limited, refused, …) and this says how the server put it.
/// [`HttpError::of`] finds it.
///
/// Header values and the body pass through the client's redaction first: credentials a
/// server echoes never appear here.
///
/// ```
/// use agent_op::{Cause, ProviderError};
/// use agent_provider::HttpError;
///
/// # fn handle(err: ProviderError) {
/// match (&err, HttpError::of(&err)) {
///     (ProviderError::RateLimited { retry_after, .. }, _) => println!("wait {retry_after:?}"),
///     (_, Some(http)) if http.status == 404 => println!("no such model"),
///     _ => println!("{err}"),
/// }
/// # }
/// # let answer = HttpError::new(404, vec![], "model not found");
/// # handle(ProviderError::Refused {
/// #     message: "model not found".into(),
/// #     retryable: false,
/// #     cause: Some(Cause::new(answer)),
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct HttpError {
    /// The HTTP status.
    pub status: u16,
    /// The response headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The start of the response body (at most a few KiB, marked with `…` when cut).
    pub body: String,
}

impl HttpError {
    /// An answer with `status`, `headers` and `body`.
    pub fn new(status: u16, headers: Vec<(String, String)>, body: impl Into<String>) -> Self {
        HttpError {
            status,
            headers,
            body: body.into(),
        }
    }

    /// The HTTP answer behind `err`, when the server gave one: the error's
    /// [`cause`](ProviderError::cause), or for
    /// [`AllFailed`](ProviderError::AllFailed) the last provider's.
    pub fn of(err: &ProviderError) -> Option<&HttpError> {
        match err {
            ProviderError::AllFailed { errors } => errors.last().and_then(HttpError::of),
            _ => err.cause()?.downcast_ref(),
        }
    }

    /// How long the server asked us to wait, from `retry-after-ms` or `Retry-After`
    /// (seconds or an HTTP date), if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        retry_after_in(|name| self.header(name))
    }

    /// The value of header `name` (compared without regard to case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if !self.body.is_empty() {
            write!(f, ": {}", self.body)?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpError {}

/// How long a server asked us to wait: `retry-after-ms` (OpenAI, Azure), else `Retry-After`
/// as seconds or as an HTTP date; headers looked up by (lower-case) name.
pub(crate) fn retry_after_in<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Option<Duration> {
    let text = |name: &str| header(name).map(str::trim);
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
