//! The streamable-HTTP transport of MCP, on the workspace's `reqwest` (rmcp's own adapter
//! wants a newer reqwest whose TLS stack needs cmake and a second crypto library).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

type Error = StreamableHttpError<reqwest::Error>;

/// An HTTP client for MCP's streamable-HTTP transport: one POST per message (answered with
/// JSON or an SSE stream), GET for the server's own stream, DELETE to end the session.
#[derive(Clone, Debug)]
pub(crate) struct HttpClient {
    client: reqwest::Client,
}

impl HttpClient {
    /// A client whose connections must open within `connect_timeout`. Requests have no
    /// overall timeout here, since an SSE answer may stream for as long as a tool runs; each
    /// MCP request is bounded by the server's timeout instead.
    pub(crate) fn new(connect_timeout: Duration) -> Result<HttpClient, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()?;
        Ok(HttpClient { client })
    }

    fn request(
        &self,
        method: reqwest::Method,
        uri: &str,
        session_id: Option<&str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut request = self.client.request(method, uri);
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        if let Some(session_id) = session_id {
            request = request.header(SESSION_ID, session_id);
        }
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        request
    }
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn sse(response: reqwest::Response) -> BoxStream<'static, Result<sse_stream::Sse, SseError>> {
    sse_stream::SseStream::from_bytes_stream(response.bytes_stream()).boxed()
}

/// A non-success status as the transport's error, with the start of the body (only that
/// much is read).
async fn unexpected(mut response: reqwest::Response) -> Error {
    let status = response.status();
    let start = match tokio::time::timeout(Duration::from_secs(5), response.chunk()).await {
        Ok(Ok(Some(chunk))) => chunk,
        _ => Default::default(),
    };
    let body: String = String::from_utf8_lossy(&start).chars().take(200).collect();
    StreamableHttpError::UnexpectedServerResponse(format!("HTTP {status}: {body}").into())
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let response = self
            .request(
                reqwest::Method::POST,
                &uri,
                session_id.as_deref(),
                auth_header,
                custom_headers,
            )
            .header(ACCEPT, format!("{JSON}, {EVENT_STREAM}"))
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(unexpected(response).await);
        }
        let session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match content_type(&response) {
            Some(ct) if ct.starts_with(EVENT_STREAM) => {
                Ok(StreamableHttpPostResponse::Sse(sse(response), session))
            }
            Some(ct) if ct.starts_with(JSON) => {
                let message: ServerJsonRpcMessage =
                    response.json().await.map_err(StreamableHttpError::Client)?;
                Ok(StreamableHttpPostResponse::Json(message, session))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other)),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        let response = self
            .request(
                reqwest::Method::DELETE,
                &uri,
                Some(&session_id),
                auth_header,
                custom_headers,
            )
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        match response.status() {
            StatusCode::METHOD_NOT_ALLOWED => {
                Err(StreamableHttpError::ServerDoesNotSupportDeleteSession)
            }
            s if s.is_success() => Ok(()),
            _ => Err(unexpected(response).await),
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, Error> {
        let mut request = self
            .request(
                reqwest::Method::GET,
                &uri,
                Some(&session_id),
                auth_header,
                custom_headers,
            )
            .header(ACCEPT, EVENT_STREAM);
        if let Some(last) = last_event_id {
            request = request.header(LAST_EVENT_ID, last);
        }
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if status == StatusCode::NOT_FOUND {
            return Err(StreamableHttpError::SessionExpired);
        }
        if !status.is_success() {
            return Err(unexpected(response).await);
        }
        match content_type(&response) {
            Some(ct) if ct.starts_with(EVENT_STREAM) => Ok(sse(response)),
            other => Err(StreamableHttpError::UnexpectedContentType(other)),
        }
    }
}
