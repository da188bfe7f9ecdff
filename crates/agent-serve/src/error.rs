//! [`ApiError`]: one error type for every route, rendered in each protocol's own body shape,
//! and [`JsonBody`], the JSON extractor whose refusals are `ApiError`s.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::runs::RunsError;

/// A refused or failed request: a status, a stable code and a message for people.
///
/// As a response it is the Agent Protocol's shape (`{"error", "message", "detail"}`, what
/// the LangGraph SDK reads); the OpenAI routes render it as OpenAI's error body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code (`not_found`, `invalid_input`, `thread_busy`, …).
    pub code: &'static str,
    /// What is wrong, for people.
    pub message: String,
    /// Seconds to wait before trying again (429s).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: nothing has that name or id.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 422: well-formed, but refused.
    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
    }

    /// 401: no valid key.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API key is needed (Authorization: Bearer KEY, or X-Api-Key: KEY)",
        )
    }
}

impl From<RunsError> for ApiError {
    fn from(error: RunsError) -> ApiError {
        match &error {
            RunsError::UnknownAgent(_) | RunsError::UnknownThread(_) | RunsError::UnknownRun(_) => {
                ApiError::not_found(error.to_string())
            }
            RunsError::NotInterrupted(_) => {
                ApiError::new(StatusCode::CONFLICT, "not_interrupted", error.to_string())
            }
            RunsError::ThreadBusy(_) => {
                ApiError::new(StatusCode::CONFLICT, "thread_busy", error.to_string())
            }
            RunsError::InvalidInput(_) => ApiError::unprocessable(error.to_string()),
            RunsError::ShuttingDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                error.to_string(),
            ),
            RunsError::Limited { retry_after, .. } => ApiError {
                retry_after: Some(*retry_after),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    error.to_string(),
                )
            },
            RunsError::Store(_) => {
                // The store's own message may name files: logged, not answered.
                tracing::error!(%error, "agent-serve: the store failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the server's store failed; try again",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": self.code,
            "message": self.message,
            "detail": self.message,
        });
        with_retry(self.status, self.retry_after, axum::Json(body))
    }
}

/// `body` with `status` and, for a 429, `Retry-After`.
pub(crate) fn with_retry(
    status: StatusCode,
    retry_after: Option<u64>,
    body: impl IntoResponse,
) -> Response {
    let mut response = (status, body).into_response();
    if let Some(secs) = retry_after {
        if let Ok(value) = secs.to_string().parse() {
            response.headers_mut().insert("retry-after", value);
        }
    }
    response
}

/// A JSON request body, parsed into `T`; refusals are [`ApiError`]s naming what is wrong
/// (not JSON, the wrong shape, too deep, too large).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody<T>, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request("the request needs a JSON body"));
        }
        parse(&bytes).map(JsonBody)
    }
}

/// An empty body is `None` (for routes whose body is optional).
impl<T: DeserializeOwned, S: Send + Sync> axum::extract::OptionalFromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Option<JsonBody<T>>, ApiError> {
        let bytes = read_body(request, state).await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        parse(&bytes).map(|value| Some(JsonBody(value)))
    }
}

async fn read_body<S: Send + Sync>(
    request: Request,
    state: &S,
) -> Result<axum::body::Bytes, ApiError> {
    axum::body::Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            let status = rejection.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(status, "too_large", "the request body is too large")
            } else {
                ApiError::bad_request(format!(
                    "the request body could not be read: {}",
                    rejection.body_text()
                ))
            }
        })
}

/// `bytes` as a `T`. serde_json refuses nesting deeper than 128 levels with an error, not
/// a stack overflow.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = parse_body(&mut deserializer)?;
    deserializer
        .end()
        .map_err(|e| ApiError::bad_request(format!("the body is not one JSON value: {e}")))?;
    Ok(value)
}

fn parse_body<'de, T: DeserializeOwned>(
    deserializer: &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
) -> Result<T, ApiError> {
    T::deserialize(deserializer).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            ApiError::unprocessable(format!("the body does not have the expected shape: {e}"))
        }
        _ => ApiError::bad_request(format!("the body is not valid JSON: {e}")),
    })
}
