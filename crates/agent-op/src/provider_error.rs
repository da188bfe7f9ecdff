//! [`ProviderError`]: why a model call failed, in terms any provider can use.
//!
//! The variants say what happened to the call (rate limited, refused, timed out, cut off,
//! not understood), not how the provider speaks: HTTP statuses and headers belong to the
//! HTTP clients, which keep them in an error of their own held as the variant's
//! [`cause`](ProviderError::cause) (for the clients of `agent-provider`,
//! `agent_provider::HttpError`).

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::cause::Cause;

/// Why a model call failed.
///
/// Match on the variant to decide what to do; the lower layer's error (the HTTP response,
/// the connection error, the JSON error) is the [`cause`](ProviderError::cause), returned by
/// [`Error::source`] too. Errors never carry API keys: clients redact credentials before
/// building them.
///
/// ```
/// use agent_op::ProviderError;
/// use std::time::Duration;
///
/// let err = ProviderError::RateLimited {
///     retry_after: Some(Duration::from_secs(2)),
///     message: "slow down".into(),
///     cause: None,
/// };
/// assert!(err.is_retryable());
/// assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider asked us to slow down; retrying later may succeed.
    RateLimited {
        /// How long the provider asked us to wait, when it said.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
        /// The provider's answer (for HTTP clients, the response).
        cause: Option<Cause>,
    },
    /// The account has no quota or credit left; retrying will not help.
    QuotaExhausted {
        /// The provider's message.
        message: String,
        /// The provider's answer.
        cause: Option<Cause>,
    },
    /// The prompt does not fit the model's context window.
    ContextLengthExceeded {
        /// The provider's message.
        message: String,
        /// The provider's answer.
        cause: Option<Cause>,
    },
    /// The credentials were missing, wrong or not allowed to use the model.
    Authentication {
        /// The provider's message.
        message: String,
        /// The provider's answer.
        cause: Option<Cause>,
    },
    /// The provider refused or failed the call for another reason: a server error, an
    /// unknown model, a request it would not take.
    Refused {
        /// The provider's message (or the start of its answer, when it gave none).
        message: String,
        /// Whether the same request may succeed later (a server error, an overloaded
        /// server), as opposed to a refusal that will be repeated.
        retryable: bool,
        /// The provider's answer (for HTTP clients, the response with its status).
        cause: Option<Cause>,
    },
    /// No complete answer arrived in time.
    Timeout {
        /// The time limit that passed.
        after: Duration,
    },
    /// The connection failed or broke (DNS, TCP, TLS, a reset, a reply cut short).
    Transport {
        /// What failed.
        message: String,
        /// The connection's error, when there is one (a cut stream has none).
        cause: Option<Cause>,
    },
    /// The reply could not be understood.
    Decode {
        /// What was wrong.
        message: String,
        /// The offending part of the reply.
        excerpt: String,
        /// The decoder's error (a `serde_json::Error`, say), when there is one.
        cause: Option<Cause>,
    },
    /// The request breaks a rule of the provider's API (too many stop sequences, a tool whose
    /// parameters are not a JSON schema object, …), so it was not sent: sending it again will
    /// not help, the prompt has to change.
    InvalidRequest {
        /// Which rule the request breaks.
        message: String,
    },
    /// A test provider received a call it did not expect.
    Unexpected {
        /// What was unexpected.
        message: String,
    },
    /// Every provider of a fallback chain failed: their errors, in the order they were
    /// tried (never nested: a chain of chains is one flat list).
    AllFailed {
        /// Each provider's error, the first one tried first.
        errors: Vec<ProviderError>,
    },
    /// Anything else (for providers outside this workspace).
    Other {
        /// What failed.
        message: String,
        /// The underlying error, when there is one.
        cause: Option<Cause>,
    },
}

impl ProviderError {
    /// A short, stable name of the kind of failure (`rate_limited`, `timeout`, …), as
    /// telemetry's `error.type` wants it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ProviderError::RateLimited { .. } => "rate_limited",
            ProviderError::QuotaExhausted { .. } => "quota_exhausted",
            ProviderError::ContextLengthExceeded { .. } => "context_length_exceeded",
            ProviderError::Authentication { .. } => "authentication",
            ProviderError::Refused { .. } => "refused",
            ProviderError::Timeout { .. } => "timeout",
            ProviderError::Transport { .. } => "transport",
            ProviderError::Decode { .. } => "decode",
            ProviderError::InvalidRequest { .. } => "invalid_request",
            ProviderError::Unexpected { .. } => "unexpected",
            ProviderError::AllFailed { .. } => "all_failed",
            ProviderError::Other { .. } => "other",
        }
    }

    /// An [`Other`](ProviderError::Other) error with no cause.
    pub fn other(message: impl Into<String>) -> ProviderError {
        ProviderError::Other {
            message: message.into(),
            cause: None,
        }
    }

    /// A [`Transport`](ProviderError::Transport) error with no cause (a stream cut short).
    pub fn transport(message: impl Into<String>) -> ProviderError {
        ProviderError::Transport {
            message: message.into(),
            cause: None,
        }
    }

    /// A [`Decode`](ProviderError::Decode) error with no cause.
    pub fn decode(message: impl Into<String>, excerpt: impl Into<String>) -> ProviderError {
        ProviderError::Decode {
            message: message.into(),
            excerpt: excerpt.into(),
            cause: None,
        }
    }

    /// The error with `cause` as its [`cause`](ProviderError::cause), for the variants that
    /// hold one; the others are returned unchanged.
    pub fn with_cause(self, cause: Cause) -> ProviderError {
        let mut err = self;
        if let Some(slot) = err.cause_slot() {
            *slot = Some(cause);
        }
        err
    }

    /// The lower layer's error this one came from, when kept: for the HTTP clients of
    /// `agent-provider`, an `agent_provider::HttpError` (status, headers, body) for an
    /// answer the server gave, the `reqwest::Error` for a connection that failed, the
    /// `serde_json::Error` for a reply that did not parse.
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            ProviderError::RateLimited { cause, .. }
            | ProviderError::QuotaExhausted { cause, .. }
            | ProviderError::ContextLengthExceeded { cause, .. }
            | ProviderError::Authentication { cause, .. }
            | ProviderError::Refused { cause, .. }
            | ProviderError::Transport { cause, .. }
            | ProviderError::Decode { cause, .. }
            | ProviderError::Other { cause, .. } => cause.as_ref(),
            ProviderError::Timeout { .. }
            | ProviderError::InvalidRequest { .. }
            | ProviderError::Unexpected { .. }
            | ProviderError::AllFailed { .. } => None,
        }
    }

    fn cause_slot(&mut self) -> Option<&mut Option<Cause>> {
        match self {
            ProviderError::RateLimited { cause, .. }
            | ProviderError::QuotaExhausted { cause, .. }
            | ProviderError::ContextLengthExceeded { cause, .. }
            | ProviderError::Authentication { cause, .. }
            | ProviderError::Refused { cause, .. }
            | ProviderError::Transport { cause, .. }
            | ProviderError::Decode { cause, .. }
            | ProviderError::Other { cause, .. } => Some(cause),
            ProviderError::Timeout { .. }
            | ProviderError::InvalidRequest { .. }
            | ProviderError::Unexpected { .. }
            | ProviderError::AllFailed { .. } => None,
        }
    }

    /// Whether the same request may succeed if sent again later.
    ///
    /// Retryable: [`RateLimited`](ProviderError::RateLimited),
    /// [`Timeout`](ProviderError::Timeout), [`Transport`](ProviderError::Transport),
    /// [`Refused`](ProviderError::Refused) when it says so, and
    /// [`AllFailed`](ProviderError::AllFailed) if the last provider's error is. Everything
    /// else is not — in particular [`InvalidRequest`](ProviderError::InvalidRequest) and
    /// [`Decode`](ProviderError::Decode).
    pub fn is_retryable(&self) -> bool {
        match self {
            // What the caller does next depends on the last provider tried.
            ProviderError::AllFailed { errors } => errors.last().is_some_and(Self::is_retryable),
            ProviderError::RateLimited { .. }
            | ProviderError::Timeout { .. }
            | ProviderError::Transport { .. } => true,
            ProviderError::Refused { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// How long the provider asked us to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. } => *retry_after,
            ProviderError::AllFailed { errors } => errors.last().and_then(Self::retry_after),
            _ => None,
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::RateLimited {
                retry_after,
                message,
                ..
            } => {
                f.write_str("rate limited")?;
                if let Some(wait) = retry_after {
                    write!(f, ", retry after {wait:?}")?;
                }
                write!(f, ": {message}")
            }
            ProviderError::QuotaExhausted { message, .. } => {
                write!(f, "quota exhausted: {message}")
            }
            ProviderError::ContextLengthExceeded { message, .. } => {
                write!(f, "context length exceeded: {message}")
            }
            ProviderError::Authentication { message, .. } => {
                write!(f, "authentication failed: {message}")
            }
            ProviderError::Refused {
                message, retryable, ..
            } => {
                let kind = if *retryable { "failed" } else { "refused" };
                write!(f, "the provider {kind} the request: {message}")
            }
            ProviderError::Timeout { after } => write!(f, "timed out after {after:?}"),
            ProviderError::Transport { message, .. } => write!(f, "transport error: {message}"),
            ProviderError::Decode {
                message, excerpt, ..
            } => write!(f, "could not decode response: {message} (near `{excerpt}`)"),
            ProviderError::InvalidRequest { message } => write!(f, "invalid request: {message}"),
            ProviderError::Unexpected { message } => {
                write!(f, "unexpected model call: {message}")
            }
            ProviderError::AllFailed { errors } => {
                write!(f, "all {} providers failed", errors.len())?;
                for (i, error) in errors.iter().enumerate() {
                    write!(f, "; ({}) {error}", i + 1)?;
                }
                Ok(())
            }
            ProviderError::Other { message, .. } => f.write_str(message),
        }
    }
}

impl Error for ProviderError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause()
            .map(|cause| cause.get_ref() as &(dyn Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_request_is_not_retried() {
        let err = ProviderError::InvalidRequest {
            message: "5 stop sequences; the API allows at most 4".into(),
        };
        assert!(!err.is_retryable());
        assert_eq!(err.retry_after(), None);
        assert_eq!(
            err.to_string(),
            "invalid request: 5 stop sequences; the API allows at most 4"
        );
    }

    #[test]
    fn the_cause_is_the_source_and_downcasts() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let err = ProviderError::transport("the connection broke").with_cause(Cause::new(io));
        assert!(err.is_retryable());
        let source = err.source().expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the io error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
        // Variants without a cause ignore one.
        let timeout = ProviderError::Timeout {
            after: Duration::from_secs(1),
        }
        .with_cause(Cause::new(std::io::Error::other("x")));
        assert!(timeout.source().is_none());
    }

    #[test]
    fn a_refusal_is_retried_only_when_it_says_so() {
        let refused = |retryable| ProviderError::Refused {
            message: "m".into(),
            retryable,
            cause: None,
        };
        assert!(refused(true).is_retryable());
        assert!(!refused(false).is_retryable());
        assert_eq!(
            refused(false).to_string(),
            "the provider refused the request: m"
        );
    }
}

/// A cause restored from its message (a journaled error keeps its cause as text).
#[derive(Debug)]
pub(crate) struct RecordedCause(pub(crate) String);

impl fmt::Display for RecordedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for RecordedCause {}

/// A [`ProviderError`] as journals store it: its kind, its fields, and its cause as text.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    retryable: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    excerpt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<ProviderError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cause: Option<String>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Serialized for journals: the variant (as [`kind_name`](ProviderError::kind_name)), its
/// fields, and the cause's message. A deserialized error compares equal to the original
/// (causes compare by message).
impl serde::Serialize for ProviderError {
    fn serialize<Ser: serde::Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        let mut stored = Stored {
            kind: self.kind_name().to_owned(),
            message: String::new(),
            retry_after_ms: None,
            retryable: false,
            excerpt: String::new(),
            after_ms: None,
            errors: Vec::new(),
            cause: self.cause().map(ToString::to_string),
        };
        match self {
            ProviderError::RateLimited {
                retry_after,
                message,
                ..
            } => {
                stored.retry_after_ms = retry_after.map(millis);
                stored.message = message.clone();
            }
            ProviderError::Refused {
                message, retryable, ..
            } => {
                stored.message = message.clone();
                stored.retryable = *retryable;
            }
            ProviderError::Decode {
                message, excerpt, ..
            } => {
                stored.message = message.clone();
                stored.excerpt = excerpt.clone();
            }
            ProviderError::Timeout { after } => stored.after_ms = Some(millis(*after)),
            ProviderError::AllFailed { errors } => stored.errors = errors.clone(),
            ProviderError::QuotaExhausted { message, .. }
            | ProviderError::ContextLengthExceeded { message, .. }
            | ProviderError::Authentication { message, .. }
            | ProviderError::Transport { message, .. }
            | ProviderError::InvalidRequest { message }
            | ProviderError::Unexpected { message }
            | ProviderError::Other { message, .. } => stored.message = message.clone(),
        }
        stored.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for ProviderError {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Stored::deserialize(deserializer)?;
        let cause = s.cause.map(|text| Cause::new(RecordedCause(text)));
        let message = s.message;
        Ok(match s.kind.as_str() {
            "rate_limited" => ProviderError::RateLimited {
                retry_after: s.retry_after_ms.map(Duration::from_millis),
                message,
                cause,
            },
            "quota_exhausted" => ProviderError::QuotaExhausted { message, cause },
            "context_length_exceeded" => ProviderError::ContextLengthExceeded { message, cause },
            "authentication" => ProviderError::Authentication { message, cause },
            "refused" => ProviderError::Refused {
                message,
                retryable: s.retryable,
                cause,
            },
            "timeout" => ProviderError::Timeout {
                after: Duration::from_millis(s.after_ms.unwrap_or(0)),
            },
            "transport" => ProviderError::Transport { message, cause },
            "decode" => ProviderError::Decode {
                message,
                excerpt: s.excerpt,
                cause,
            },
            "invalid_request" => ProviderError::InvalidRequest { message },
            "unexpected" => ProviderError::Unexpected { message },
            "all_failed" => ProviderError::AllFailed { errors: s.errors },
            "other" => ProviderError::Other { message, cause },
            other => {
                return Err(serde::de::Error::unknown_variant(
                    other,
                    &[
                        "rate_limited",
                        "quota_exhausted",
                        "context_length_exceeded",
                        "authentication",
                        "refused",
                        "timeout",
                        "transport",
                        "decode",
                        "invalid_request",
                        "unexpected",
                        "all_failed",
                        "other",
                    ],
                ));
            }
        })
    }
}

#[cfg(test)]
mod serde_tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_json_with_its_cause_as_text() {
        let io = Cause::new(std::io::Error::other("connection reset"));
        let errors = vec![
            ProviderError::RateLimited {
                retry_after: Some(Duration::from_millis(1500)),
                message: "slow".into(),
                cause: Some(io.clone()),
            },
            ProviderError::Refused {
                message: "no".into(),
                retryable: true,
                cause: None,
            },
            ProviderError::Timeout {
                after: Duration::from_secs(3),
            },
            ProviderError::decode("bad json", "{x"),
            ProviderError::AllFailed {
                errors: vec![ProviderError::other("a"), ProviderError::transport("b")],
            },
            ProviderError::InvalidRequest {
                message: "too many stops".into(),
            },
        ];
        for error in errors {
            let json = serde_json::to_value(&error).unwrap();
            let back: ProviderError = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(back, error, "{json}");
        }
        let unknown = serde_json::from_value::<ProviderError>(serde_json::json!({"kind": "x"}));
        assert!(unknown.is_err());
    }
}
