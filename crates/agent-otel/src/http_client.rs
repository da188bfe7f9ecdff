//! The HTTP client of OTLP/HTTP export: the workspace's async `reqwest`, driven by a thread of
//! its own. The SDK's batch processor exports from its own thread by blocking on the export
//! future, where no tokio runtime runs; this client hands each request to its thread's
//! runtime and waits for the answer on a channel, so it works from any thread, inside a
//! runtime or not.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<Response<Bytes>, HttpError>>;

/// An [`HttpClient`] sending on a background thread; the thread ends with the last clone.
#[derive(Clone, Debug)]
pub(crate) struct ThreadClient {
    jobs: mpsc::UnboundedSender<(Request<Bytes>, Reply)>,
}

impl ThreadClient {
    /// A client whose requests (body included) must finish within `timeout`.
    pub(crate) fn new(timeout: Duration) -> ThreadClient {
        let (jobs, mut queue) = mpsc::unbounded_channel::<(Request<Bytes>, Reply)>();
        let spawned = std::thread::Builder::new()
            .name("otlp-http".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let message = format!("no runtime for OTLP export: {e}");
                        while let Some((_, reply)) = queue.blocking_recv() {
                            let _ = reply.send(Err(message.clone().into()));
                        }
                        return;
                    }
                };
                let client = reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .build();
                runtime.block_on(async move {
                    while let Some((request, reply)) = queue.recv().await {
                        let answer = match &client {
                            Ok(client) => send(client, request).await,
                            Err(e) => {
                                Err(format!("the HTTP client could not be built: {e}").into())
                            }
                        };
                        let _ = reply.send(answer);
                    }
                });
            });
        if let Err(e) = spawned {
            // Without a thread every export fails (and says why); the run is unaffected.
            tracing::warn!(target: "effect_agents::otel", "no OTLP export thread: {e}");
        }
        ThreadClient { jobs }
    }
}

async fn send(
    client: &reqwest::Client,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let request = reqwest::Request::try_from(request)?;
    let response = client.execute(request).await?;
    let mut answer = Response::builder().status(response.status());
    for (name, value) in response.headers() {
        answer = answer.header(name, value);
    }
    let body = response.bytes().await?;
    Ok(answer.body(body)?)
}

impl HttpClient for ThreadClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.jobs
                .send((request, reply))
                .map_err(|_| "the OTLP export thread has stopped")?;
            answer
                .await
                .map_err(|_| "the OTLP export thread dropped the request")?
        })
    }
}
