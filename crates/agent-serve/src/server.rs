//! [`Server`]: agents registered by name, a store, keys — and the [`axum::Router`] that
//! serves them, to mount in a service's own app or to run alone.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::CorsLayer;

use crate::agents::{Agents, ServedAgent};
use crate::auth::{Keys, authenticate};
use crate::error::ApiError;
use crate::protocol::{ag_ui, agent_protocol, openai};
use crate::runs::{Runs, Store, StoreError};

/// The default limit on a request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// Why a server could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// An agent's name cannot be served (names are path segments and model ids).
    #[error("`{0}` cannot name an agent: use 1 to 64 letters, digits, `-`, `_` or `.`")]
    AgentName(String),
    /// Two agents have one name.
    #[error("two agents are named `{0}`")]
    DuplicateAgent(String),
    /// A CORS origin is not an origin (`https://app.example.com`, or `*` for any).
    #[error("`{0}` is not a CORS origin: give `scheme://host[:port]`, or `*` for any origin")]
    CorsOrigin(String),
    /// The store could not be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Builds a [`Server`].
pub struct ServerBuilder {
    agents: Agents,
    keys: Keys,
    store: PathBuf,
    body_limit: usize,
    cors: Vec<String>,
    error: Option<ServeError>,
}

impl ServerBuilder {
    /// Serves `agent` under `name`.
    pub fn agent(self, name: impl Into<String>, agent: impl ServedAgent) -> ServerBuilder {
        self.shared_agent(name, Arc::new(agent))
    }

    /// Serves a shared `agent` under `name`.
    pub fn shared_agent(
        mut self,
        name: impl Into<String>,
        agent: Arc<dyn ServedAgent>,
    ) -> ServerBuilder {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if self.error.is_none() {
            if !valid {
                self.error = Some(ServeError::AgentName(name));
            } else {
                match self.agents.by_name.entry(name) {
                    std::collections::btree_map::Entry::Occupied(taken) => {
                        self.error = Some(ServeError::DuplicateAgent(taken.key().clone()));
                    }
                    std::collections::btree_map::Entry::Vacant(free) => {
                        free.insert(agent);
                    }
                }
            }
        }
        self
    }

    /// Accepts only these API keys (default: none configured, every route open).
    pub fn keys(mut self, keys: Keys) -> ServerBuilder {
        self.keys = keys;
        self
    }

    /// The SQLite database runs, threads and events are kept in (default
    /// `agent-serve.db` in the working directory).
    pub fn store(mut self, path: impl Into<PathBuf>) -> ServerBuilder {
        self.store = path.into();
        self
    }

    /// The largest request body accepted, in bytes (default [`DEFAULT_BODY_LIMIT`]).
    pub fn body_limit(mut self, bytes: usize) -> ServerBuilder {
        self.body_limit = bytes;
        self
    }

    /// Lets pages from `origin` call the API from a browser: `https://app.example.com`, or
    /// `*` for any origin. Call it once per origin. Without it (the default) no route sends
    /// CORS headers, so browsers keep other sites' pages out; the chat page at `/` is
    /// same-origin and needs none. Keys are still asked of every call: a page sends its key
    /// as a bearer token, never as a cookie.
    pub fn cors_origin(mut self, origin: impl Into<String>) -> ServerBuilder {
        self.cors.push(origin.into());
        self
    }

    /// Opens the store and resumes the runs a stopped server left unfinished (from their
    /// journals: no committed call is made again).
    pub async fn build(self) -> Result<Server, ServeError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let cors = cors_layer(&self.cors)?;
        let store = Store::open(&self.store).await?;
        let runs = Runs::new(store, self.agents, self.keys.limits());
        let store_error = |e| match e {
            crate::runs::RunsError::Store(e) => ServeError::Store(e),
            other => ServeError::Store(StoreError::Malformed {
                what: "unfinished run",
                detail: other.to_string(),
            }),
        };
        runs.seed_limits().await.map_err(store_error)?;
        let resumed = runs.recover().await.map_err(store_error)?;
        if resumed > 0 {
            tracing::info!(resumed, "agent-serve: resumed unfinished runs");
        }
        let document = Arc::new(crate::openapi::served(!self.keys.is_empty()));
        Ok(Server {
            runs,
            document,
            keys: self.keys,
            body_limit: self.body_limit,
            cors,
            resumed,
        })
    }
}

/// The CORS layer allowing `origins` (none: no layer).
fn cors_layer(origins: &[String]) -> Result<Option<CorsLayer>, ServeError> {
    use axum::http::{HeaderName, HeaderValue, Method, header};
    use tower_http::cors::AllowOrigin;
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|origin| {
                let uri: Option<axum::http::Uri> = origin.parse().ok();
                let is_origin = uri.as_ref().is_some_and(|uri| {
                    matches!(uri.scheme_str(), Some("http" | "https"))
                        && uri.host().is_some()
                        && uri.path_and_query().is_none_or(|p| p.as_str() == "/")
                        && !origin.ends_with('/')
                });
                match HeaderValue::from_str(origin) {
                    Ok(value) if is_origin => Ok(value),
                    _ => Err(ServeError::CorsOrigin(origin.clone())),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([header::CONTENT_LOCATION, header::RETRY_AFTER])
            .max_age(Duration::from_secs(3600)),
    ))
}

/// Agents served over HTTP.
///
/// ```no_run
/// use agent_serve::{FnAgent, Server, message_of, InvalidInput};
/// use agent_engine::Config;
/// use agent_op::op;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let echo = FnAgent::new(Config::new(), |request| {
///     let (message, _) = message_of(request.input)
///         .ok_or_else(|| InvalidInput("a message is needed".into()))?;
///     Ok(op::pure(serde_json::Value::String(message)))
/// });
/// let server = Server::builder().agent("echo", echo).store("runs.db").build().await?;
/// // Mount it beside a service's own routes…
/// let app = axum::Router::new()
///     .route("/hello", axum::routing::get(|| async { "hi" }))
///     .merge(server.router());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Server {
    runs: Runs,
    /// The OpenAPI document (`/openapi.json`), made once.
    document: Arc<serde_json::Value>,
    keys: Keys,
    body_limit: usize,
    /// The CORS layer, when origins are allowed.
    cors: Option<CorsLayer>,
    resumed: usize,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("store", self.runs.store())
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder with no agents.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            agents: Agents::default(),
            keys: Keys::default(),
            store: PathBuf::from("agent-serve.db"),
            body_limit: DEFAULT_BODY_LIMIT,
            cors: Vec::new(),
            error: None,
        }
    }

    /// The run model (to start runs from Rust, beside the HTTP routes).
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// How many unfinished runs were resumed when it was built.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// Every route: the Agent Protocol's, OpenAI's chat, the health checks; authenticated
    /// when keys are configured; bodies bounded.
    pub fn router(&self) -> Router {
        let router = Router::new()
            .merge(agent_protocol::router())
            .merge(openai::router())
            .merge(ag_ui::router())
            .route("/", get(chat_page))
            .route("/openapi.json", get(openapi_document))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .fallback(not_found)
            .layer(axum::Extension(self.document.clone()))
            .with_state(self.runs.clone())
            .layer(axum::middleware::from_fn_with_state(
                self.keys.clone(),
                authenticate,
            ))
            .layer(DefaultBodyLimit::max(self.body_limit))
            .layer(axum::middleware::from_fn_with_state(
                self.body_limit,
                refuse_declared_too_large,
            ))
            .layer(axum::middleware::from_fn(json_errors));
        // Outermost: a browser's preflight carries no key, and is answered here.
        match &self.cors {
            Some(cors) => router.layer(cors.clone()),
            None => router,
        }
    }

    /// Serves [`router`](Server::router) on `listener` until `shutdown` completes, then
    /// stops accepting, lets running runs go on for up to `grace` and stops the rest at
    /// their next commit: they stay `running` in the store, and a server started again on
    /// it resumes them. Returns within about twice `grace` (plus the time a model or tool
    /// call in flight takes to notice its cancellation).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
        grace: Duration,
    ) -> std::io::Result<()> {
        let runs = self.runs.clone();
        let (stopping, stop) = tokio::sync::oneshot::channel::<()>();
        // Open streams keep their connections until their runs end: the runs must be
        // wound down while the listener drains, not after.
        let winding = {
            let runs = runs.clone();
            tokio::spawn(async move {
                if stop.await.is_ok() {
                    runs.shutdown(grace).await;
                }
            })
        };
        use axum::serve::ListenerExt as _;
        // Small SSE events and JSON answers go out at once, not after a delayed ACK.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = stopping.send(());
            })
            .await?;
        let _ = winding.await;
        runs.shutdown(grace).await;
        Ok(())
    }
}

/// Refusals made before a handler runs (a path or query that does not parse, a method a
/// route does not have) are plain text in axum; every 4xx here is JSON in its protocol's
/// shape.
async fn json_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let openai = request.uri().path().starts_with("/v1/");
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !status.is_client_error() || is_json {
        return response;
    }
    let allow = response.headers().get("allow").cloned();
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status.as_u16() {
        405 => "method_not_allowed",
        413 => "too_large",
        415 => "unsupported_media_type",
        _ => "bad_request",
    };
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("bad request")
            .to_lowercase()
    } else {
        text
    };
    let error = ApiError::new(status, code, message);
    let mut response = if openai {
        openai::OpenAiError(error).into_response()
    } else {
        error.into_response()
    };
    if let Some(allow) = allow {
        response.headers_mut().insert("allow", allow);
    }
    response
}

/// A body whose declared length is over the limit is refused before it is read (bodies
/// without a length are cut at the limit as they are read).
async fn refuse_declared_too_large(
    State(limit): State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let declared = request
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        let error = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the request body is too large (at most {limit} bytes)"),
        );
        return if request.uri().path().starts_with("/v1/") {
            openai::OpenAiError(error).into_response()
        } else {
            error.into_response()
        };
    }
    next.run(request).await
}

/// The chat page: one self-contained HTML file (no network but this server's API).
const CHAT_PAGE: &str = include_str!("chat.html");

async fn chat_page() -> impl IntoResponse {
    (
        [
            ("content-type", "text/html; charset=utf-8"),
            (
                "content-security-policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
            ),
            ("x-content-type-options", "nosniff"),
        ],
        CHAT_PAGE,
    )
}

async fn openapi_document(
    axum::Extension(document): axum::Extension<Arc<serde_json::Value>>,
) -> Json<serde_json::Value> {
    Json((*document).clone())
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(runs): State<Runs>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), runs.store().flush()).await {
        Ok(Ok(())) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "store unavailable"})),
        ),
    }
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route is `{}`", uri.path()))
}
