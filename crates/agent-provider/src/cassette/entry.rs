//! [`CassetteEntry`]: one recorded call, and its JSON form.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_op::{Cause, MicroUsd, Prompt, ProviderError, Response};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::fingerprint::fingerprint;
use crate::HttpError;

/// One recorded call: the request and what came back.
#[derive(Clone, Debug, PartialEq)]
pub struct CassetteEntry {
    /// The request's [`fingerprint`](super::fingerprint).
    pub fingerprint: String,
    /// The model asked for.
    pub model: String,
    /// What was sent.
    pub prompt: Prompt,
    /// The reply, or the error the call failed with.
    pub outcome: Result<Response, ProviderError>,
    /// What the recorded provider's [`max_cost`](agent_op::Provider::max_cost) said of the
    /// call, served back by [`ReplayProvider`](super::ReplayProvider) (`None` if it did not
    /// know, or the cassette predates this field).
    pub max_cost: Option<MicroUsd>,
}

impl CassetteEntry {
    /// An entry for a call of `model` with `prompt` that gave `outcome`, with no
    /// [`max_cost`](CassetteEntry::max_cost).
    pub fn new(
        model: impl Into<String>,
        prompt: Prompt,
        outcome: Result<Response, ProviderError>,
    ) -> CassetteEntry {
        let model = model.into();
        CassetteEntry {
            fingerprint: fingerprint(&model, &prompt),
            model,
            prompt,
            outcome,
            max_cost: None,
        }
    }

    /// The entry with its [`max_cost`](CassetteEntry::max_cost) set.
    #[must_use]
    pub fn with_max_cost(mut self, max_cost: Option<MicroUsd>) -> CassetteEntry {
        self.max_cost = max_cost;
        self
    }
}

/// Why a cassette could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CassetteError {
    /// The file could not be opened, read or written.
    #[error("cassette `{path}`: {source}")]
    Io {
        /// The cassette's path (`<memory>` for readers and writers).
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a cassette entry.
    #[error("cassette `{path}`, line {line}: {source}")]
    Parse {
        /// The cassette's path.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads every entry of a JSONL cassette; blank lines are skipped.
pub fn read_entries(
    reader: impl BufRead,
    path: &Path,
) -> Result<Vec<CassetteEntry>, CassetteError> {
    let mut entries = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| CassetteError::Io {
            path: path.to_owned(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let entry = serde_json::from_str(&line).map_err(|source| CassetteError::Parse {
            path: path.to_owned(),
            line: i + 1,
            source,
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

/// The JSON form of an entry.
#[derive(Serialize, Deserialize)]
struct EntryRepr {
    fingerprint: String,
    model: String,
    prompt: Prompt,
    /// Absent in cassettes recorded before it existed, and when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_cost: Option<MicroUsd>,
    #[serde(flatten)]
    outcome: OutcomeRepr,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutcomeRepr {
    Response(Response),
    Error(ErrorRepr),
}

/// [`ProviderError`] as JSON.
///
/// An error's [`HttpError`] cause is kept (as `http`); other causes (a `reqwest` or
/// `serde_json` error) live only in the message, so a replayed error has no other cause.
/// Cassettes recorded before errors held their HTTP answer as a cause (`status` fields, an
/// `http` kind) still read.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ErrorRepr {
    RateLimited {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        message: String,
        #[serde(flatten)]
        http: AnswerRepr,
    },
    QuotaExhausted {
        message: String,
        #[serde(flatten)]
        http: AnswerRepr,
    },
    ContextLengthExceeded {
        message: String,
        #[serde(flatten)]
        http: AnswerRepr,
    },
    Authentication {
        message: String,
        #[serde(flatten)]
        http: AnswerRepr,
    },
    Refused {
        message: String,
        retryable: bool,
        #[serde(flatten)]
        http: AnswerRepr,
    },
    /// How cassettes recorded before `refused` existed wrote an unsuccessful HTTP status.
    Http {
        status: u16,
        body: String,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    Timeout {
        after_ms: u64,
    },
    Transport {
        message: String,
    },
    Decode {
        message: String,
        excerpt: String,
    },
    InvalidRequest {
        message: String,
    },
    Unexpected {
        message: String,
    },
    AllFailed {
        errors: Vec<ErrorRepr>,
    },
    Other {
        message: String,
    },
}

/// The HTTP answer of an error, when it has one.
#[derive(Default, Serialize, Deserialize)]
struct AnswerRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpError>,
    /// Older cassettes: the status alone.
    #[serde(default, skip_serializing)]
    status: Option<u16>,
}

impl AnswerRepr {
    fn of(cause: &Option<Cause>) -> AnswerRepr {
        AnswerRepr {
            http: cause
                .as_ref()
                .and_then(|c| c.downcast_ref::<HttpError>())
                .cloned(),
            status: None,
        }
    }

    fn into_cause(self) -> Option<Cause> {
        let http = self
            .http
            .or_else(|| Some(HttpError::new(self.status?, Vec::new(), "")))?;
        Some(Cause::new(http))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&ProviderError> for ErrorRepr {
    fn from(err: &ProviderError) -> ErrorRepr {
        match err {
            ProviderError::RateLimited {
                retry_after,
                message,
                cause,
            } => ErrorRepr::RateLimited {
                retry_after_ms: retry_after.map(millis),
                message: message.clone(),
                http: AnswerRepr::of(cause),
            },
            ProviderError::QuotaExhausted { message, cause } => ErrorRepr::QuotaExhausted {
                message: message.clone(),
                http: AnswerRepr::of(cause),
            },
            ProviderError::ContextLengthExceeded { message, cause } => {
                ErrorRepr::ContextLengthExceeded {
                    message: message.clone(),
                    http: AnswerRepr::of(cause),
                }
            }
            ProviderError::Authentication { message, cause } => ErrorRepr::Authentication {
                message: message.clone(),
                http: AnswerRepr::of(cause),
            },
            ProviderError::Refused {
                message,
                retryable,
                cause,
            } => ErrorRepr::Refused {
                message: message.clone(),
                retryable: *retryable,
                http: AnswerRepr::of(cause),
            },
            ProviderError::Timeout { after } => ErrorRepr::Timeout {
                after_ms: millis(*after),
            },
            ProviderError::Transport { message, .. } => ErrorRepr::Transport {
                message: message.clone(),
            },
            ProviderError::Decode {
                message, excerpt, ..
            } => ErrorRepr::Decode {
                message: message.clone(),
                excerpt: excerpt.clone(),
            },
            ProviderError::InvalidRequest { message } => ErrorRepr::InvalidRequest {
                message: message.clone(),
            },
            ProviderError::Unexpected { message } => ErrorRepr::Unexpected {
                message: message.clone(),
            },
            ProviderError::AllFailed { errors } => ErrorRepr::AllFailed {
                errors: errors.iter().map(ErrorRepr::from).collect(),
            },
            ProviderError::Other { message, .. } => ErrorRepr::Other {
                message: message.clone(),
            },
            other => ErrorRepr::Other {
                message: other.to_string(),
            },
        }
    }
}

impl From<ErrorRepr> for ProviderError {
    fn from(repr: ErrorRepr) -> ProviderError {
        match repr {
            ErrorRepr::RateLimited {
                retry_after_ms,
                message,
                http,
            } => ProviderError::RateLimited {
                retry_after: retry_after_ms.map(Duration::from_millis),
                message,
                cause: http.into_cause(),
            },
            ErrorRepr::QuotaExhausted { message, http } => ProviderError::QuotaExhausted {
                message,
                cause: http.into_cause(),
            },
            ErrorRepr::ContextLengthExceeded { message, http } => {
                ProviderError::ContextLengthExceeded {
                    message,
                    cause: http.into_cause(),
                }
            }
            ErrorRepr::Authentication { message, http } => ProviderError::Authentication {
                message,
                cause: http.into_cause(),
            },
            ErrorRepr::Refused {
                message,
                retryable,
                http,
            } => ProviderError::Refused {
                message,
                retryable,
                cause: http.into_cause(),
            },
            ErrorRepr::Http {
                status,
                body,
                headers,
            } => ProviderError::Refused {
                message: body.clone(),
                retryable: status >= 500 || status == 408,
                cause: Some(Cause::new(HttpError::new(status, headers, body))),
            },
            ErrorRepr::Timeout { after_ms } => ProviderError::Timeout {
                after: Duration::from_millis(after_ms),
            },
            ErrorRepr::Transport { message } => ProviderError::transport(message),
            ErrorRepr::Decode { message, excerpt } => ProviderError::decode(message, excerpt),
            ErrorRepr::InvalidRequest { message } => ProviderError::InvalidRequest { message },
            ErrorRepr::Unexpected { message } => ProviderError::Unexpected { message },
            ErrorRepr::AllFailed { errors } => ProviderError::AllFailed {
                errors: errors.into_iter().map(ProviderError::from).collect(),
            },
            ErrorRepr::Other { message } => ProviderError::other(message),
        }
    }
}

impl Serialize for CassetteEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        EntryRepr {
            fingerprint: self.fingerprint.clone(),
            model: self.model.clone(),
            prompt: self.prompt.clone(),
            max_cost: self.max_cost,
            outcome: match &self.outcome {
                Ok(response) => OutcomeRepr::Response(response.clone()),
                Err(err) => OutcomeRepr::Error(err.into()),
            },
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CassetteEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<CassetteEntry, D::Error> {
        let repr = EntryRepr::deserialize(deserializer)?;
        Ok(CassetteEntry {
            fingerprint: repr.fingerprint,
            model: repr.model,
            prompt: repr.prompt,
            outcome: match repr.outcome {
                OutcomeRepr::Response(response) => Ok(response),
                OutcomeRepr::Error(err) => Err(err.into()),
            },
            max_cost: repr.max_cost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_round_trips() {
        let answer = |status| {
            Some(Cause::new(HttpError::new(
                status,
                vec![("x".into(), "y".into())],
                "b",
            )))
        };
        let errors = [
            ProviderError::RateLimited {
                retry_after: Some(Duration::from_millis(1500)),
                message: "slow".into(),
                cause: answer(429),
            },
            ProviderError::RateLimited {
                retry_after: None,
                message: "slow".into(),
                cause: None,
            },
            ProviderError::QuotaExhausted {
                message: "pay".into(),
                cause: answer(429),
            },
            ProviderError::ContextLengthExceeded {
                message: "long".into(),
                cause: None,
            },
            ProviderError::Authentication {
                message: "who".into(),
                cause: answer(401),
            },
            ProviderError::Refused {
                message: "down".into(),
                retryable: true,
                cause: answer(500),
            },
            ProviderError::Refused {
                message: "no".into(),
                retryable: false,
                cause: None,
            },
            ProviderError::Timeout {
                after: Duration::from_secs(3),
            },
            ProviderError::transport("reset"),
            ProviderError::decode("m", "e"),
            ProviderError::InvalidRequest {
                message: "i".into(),
            },
            ProviderError::Unexpected {
                message: "u".into(),
            },
            ProviderError::AllFailed {
                errors: vec![
                    ProviderError::Timeout {
                        after: Duration::from_secs(1),
                    },
                    ProviderError::other("o"),
                ],
            },
            ProviderError::other("o"),
        ];
        for err in errors {
            let entry = CassetteEntry::new("m", Prompt::new().user("x"), Err(err.clone()));
            let line = serde_json::to_string(&entry).unwrap();
            let back: CassetteEntry = serde_json::from_str(&line).unwrap();
            assert_eq!(back, entry, "{line}");
        }
    }

    #[test]
    fn errors_of_older_cassettes_still_read() {
        let read = |outcome: &str| -> ProviderError {
            let template =
                CassetteEntry::new("m", Prompt::new().user("x"), Err(ProviderError::other("o")));
            let line = serde_json::to_string(&template)
                .unwrap()
                .replace(r#"{"kind":"other","message":"o"}"#, outcome);
            let entry: CassetteEntry = serde_json::from_str(&line).expect(&line);
            entry.outcome.expect_err("an error")
        };
        let limited =
            read(r#"{"kind":"rate_limited","status":429,"retry_after_ms":50,"message":"m"}"#);
        assert_eq!(limited.retry_after(), Some(Duration::from_millis(50)));
        assert_eq!(HttpError::of(&limited).map(|h| h.status), Some(429));
        let http =
            read(r#"{"kind":"http","status":503,"body":"busy","headers":[["retry-after","2"]]}"#);
        assert!(
            matches!(
                http,
                ProviderError::Refused {
                    retryable: true,
                    ..
                }
            ),
            "{http:?}"
        );
        let answer = HttpError::of(&http).expect("the answer");
        assert_eq!((answer.status, answer.body.as_str()), (503, "busy"));
        assert_eq!(answer.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn max_cost_is_optional_and_round_trips() {
        let entry = CassetteEntry::new("m", Prompt::new().user("x"), Ok(Response::text("y")));
        let line = serde_json::to_string(&entry).unwrap();
        assert!(!line.contains("max_cost"), "{line}");
        let priced = entry.clone().with_max_cost(Some(MicroUsd(1234)));
        let line = serde_json::to_string(&priced).unwrap();
        assert!(line.contains("\"max_cost\":1234"), "{line}");
        let back: CassetteEntry = serde_json::from_str(&line).unwrap();
        assert_eq!(back, priced);
        // A line recorded before the field existed.
        let old = r#"{"fingerprint":"sha256:x","model":"m","prompt":{"messages":[{"role":"user","content":"x"}],"options":{}},"response":{"content":"y","tool_calls":[],"finish_reason":"stop","usage":{"input_tokens":0,"output_tokens":0}}}"#;
        let back: CassetteEntry = serde_json::from_str(old).unwrap();
        assert_eq!(back.max_cost, None);
    }

    #[test]
    fn bad_lines_name_their_line() {
        let text = "\n{\"not\": \"an entry\"}\n";
        let err = read_entries(text.as_bytes(), Path::new("c.jsonl")).unwrap_err();
        assert!(matches!(err, CassetteError::Parse { line: 2, .. }), "{err}");
    }
}
