//! [`CassetteEntry`]: one recorded call, and its JSON form.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_op::{MicroUsd, Prompt, ProviderError, Response};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::fingerprint::fingerprint;

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
    #[error("cassette `{path}`, line {line}: {message}")]
    Parse {
        /// The cassette's path.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
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
        let entry = serde_json::from_str(&line).map_err(|e| CassetteError::Parse {
            path: path.to_owned(),
            line: i + 1,
            message: e.to_string(),
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
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ErrorRepr {
    RateLimited {
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        message: String,
    },
    QuotaExhausted {
        status: u16,
        message: String,
    },
    ContextLengthExceeded {
        message: String,
    },
    Authentication {
        status: u16,
        message: String,
    },
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

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&ProviderError> for ErrorRepr {
    fn from(err: &ProviderError) -> ErrorRepr {
        match err.clone() {
            ProviderError::RateLimited {
                status,
                retry_after,
                message,
            } => ErrorRepr::RateLimited {
                status,
                retry_after_ms: retry_after.map(millis),
                message,
            },
            ProviderError::QuotaExhausted { status, message } => {
                ErrorRepr::QuotaExhausted { status, message }
            }
            ProviderError::ContextLengthExceeded { message } => {
                ErrorRepr::ContextLengthExceeded { message }
            }
            ProviderError::Authentication { status, message } => {
                ErrorRepr::Authentication { status, message }
            }
            ProviderError::Http {
                status,
                body,
                headers,
            } => ErrorRepr::Http {
                status,
                body,
                headers,
            },
            ProviderError::Timeout { after } => ErrorRepr::Timeout {
                after_ms: millis(after),
            },
            ProviderError::Transport { message } => ErrorRepr::Transport { message },
            ProviderError::Decode { message, excerpt } => ErrorRepr::Decode { message, excerpt },
            ProviderError::InvalidRequest { message } => ErrorRepr::InvalidRequest { message },
            ProviderError::Unexpected { message } => ErrorRepr::Unexpected { message },
            ProviderError::AllFailed { errors } => ErrorRepr::AllFailed {
                errors: errors.iter().map(ErrorRepr::from).collect(),
            },
            ProviderError::Other(message) => ErrorRepr::Other { message },
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
                status,
                retry_after_ms,
                message,
            } => ProviderError::RateLimited {
                status,
                retry_after: retry_after_ms.map(Duration::from_millis),
                message,
            },
            ErrorRepr::QuotaExhausted { status, message } => {
                ProviderError::QuotaExhausted { status, message }
            }
            ErrorRepr::ContextLengthExceeded { message } => {
                ProviderError::ContextLengthExceeded { message }
            }
            ErrorRepr::Authentication { status, message } => {
                ProviderError::Authentication { status, message }
            }
            ErrorRepr::Http {
                status,
                body,
                headers,
            } => ProviderError::Http {
                status,
                body,
                headers,
            },
            ErrorRepr::Timeout { after_ms } => ProviderError::Timeout {
                after: Duration::from_millis(after_ms),
            },
            ErrorRepr::Transport { message } => ProviderError::Transport { message },
            ErrorRepr::Decode { message, excerpt } => ProviderError::Decode { message, excerpt },
            ErrorRepr::InvalidRequest { message } => ProviderError::InvalidRequest { message },
            ErrorRepr::Unexpected { message } => ProviderError::Unexpected { message },
            ErrorRepr::AllFailed { errors } => ProviderError::AllFailed {
                errors: errors.into_iter().map(ProviderError::from).collect(),
            },
            ErrorRepr::Other { message } => ProviderError::Other(message),
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
        let errors = [
            ProviderError::RateLimited {
                status: 429,
                retry_after: Some(Duration::from_millis(1500)),
                message: "slow".into(),
            },
            ProviderError::QuotaExhausted {
                status: 429,
                message: "pay".into(),
            },
            ProviderError::ContextLengthExceeded {
                message: "long".into(),
            },
            ProviderError::Authentication {
                status: 401,
                message: "who".into(),
            },
            ProviderError::Http {
                status: 500,
                body: "b".into(),
                headers: vec![("x".into(), "y".into())],
            },
            ProviderError::Timeout {
                after: Duration::from_secs(3),
            },
            ProviderError::Transport {
                message: "reset".into(),
            },
            ProviderError::Decode {
                message: "m".into(),
                excerpt: "e".into(),
            },
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
                    ProviderError::Other("o".into()),
                ],
            },
            ProviderError::Other("o".into()),
        ];
        for err in errors {
            let entry = CassetteEntry::new("m", Prompt::new().user("x"), Err(err.clone()));
            let line = serde_json::to_string(&entry).unwrap();
            let back: CassetteEntry = serde_json::from_str(&line).unwrap();
            assert_eq!(back, entry, "{line}");
        }
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
