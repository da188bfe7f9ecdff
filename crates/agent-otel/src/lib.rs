//! OpenTelemetry export for effect-agents: the runtime's `tracing` spans (named and
//! attributed per the GenAI semantic conventions by the interpreters) sent to any OTLP
//! backend — a collector, Jaeger, Arize Phoenix, Langfuse, Honeycomb — in one call.
//!
//! ```no_run
//! # async fn demo() -> Result<(), agent_otel::OtelError> {
//! // Endpoint and protocol from the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT,
//! // OTEL_EXPORTER_OTLP_PROTOCOL: `http/protobuf`, the default, or `grpc`).
//! let telemetry = agent_otel::init("my-service")?;
//! // ... run agents ...
//! telemetry.shutdown()?; // flushes what is still batched (dropping the guard does too)
//! # Ok(())
//! # }
//! ```
//!
//! [`Otel`] configures the same explicitly, and [`Otel::build`] hands back the layer for a
//! subscriber you compose yourself (with `tracing_subscriber::fmt`, filters, …).
//!
//! Spans are batched and exported from a background thread, so a run never waits on the
//! backend. HTTP export uses the workspace's `reqwest` on a thread of its own; every request
//! has a timeout (10 s by default). gRPC (feature `grpc`, default) uses tonic, and must be
//! set up inside a tokio runtime.
//!
//! What the spans hold is decided by the interpreters: message contents only when a run opts
//! in with `Config::export_content`, credentials never.

mod arrays;
mod http_client;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Tracer};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Why telemetry could not be set up or flushed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (a bad endpoint, gRPC outside a tokio runtime).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or [`Otel::protocol`]) names a protocol this build
    /// does not speak.
    #[error(
        "unsupported OTLP protocol `{0}` (this build speaks `http/protobuf`{grpc})",
        grpc = if cfg!(feature = "grpc") { " and `grpc`" } else { "; `grpc` needs the `grpc` feature" }
    )]
    UnsupportedProtocol(String),
    /// A global `tracing` subscriber was already installed.
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[source] tracing_subscriber::util::TryInitError),
    /// Flushing or shutting down the exporter failed.
    #[error("exporting spans failed: {0}")]
    Export(#[source] opentelemetry_sdk::error::OTelSdkError),
}

/// How spans travel to the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), to `{endpoint}/v1/traces`.
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`; feature `grpc`).
    Grpc,
}

impl Protocol {
    /// The protocol an `OTEL_EXPORTER_OTLP_PROTOCOL` value names.
    pub fn parse(value: &str) -> Result<Protocol, OtelError> {
        match value.trim() {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "grpc" if cfg!(feature = "grpc") => Ok(Protocol::Grpc),
            other => Err(OtelError::UnsupportedProtocol(other.to_owned())),
        }
    }

    /// From `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`;
    /// HTTP/protobuf when neither is set.
    pub fn from_env() -> Result<Protocol, OtelError> {
        let set = [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
        match set {
            Some(value) => Protocol::parse(&value),
            None => Ok(Protocol::HttpProtobuf),
        }
    }
}

/// Sets up OTLP export of the runtime's spans for `service` and installs it as the global
/// `tracing` subscriber, with endpoint and protocol from the standard `OTEL_EXPORTER_OTLP_*`
/// variables. Keep the guard: dropping it flushes and stops the export.
pub fn init(service: &str) -> Result<OtelGuard, OtelError> {
    Otel::new(service).install()
}

/// OTLP export, configured: service name, endpoint, protocol, timeout, level.
#[derive(Clone, Debug)]
pub struct Otel {
    service: String,
    endpoint: Option<String>,
    protocol: Option<Protocol>,
    timeout: Duration,
    level: LevelFilter,
    queue: usize,
}

/// Spans per export request.
const EXPORT_BATCH: usize = 1024;

impl Otel {
    /// Export for `service` (the `service.name` resource attribute), to the endpoint and
    /// with the protocol the environment names.
    pub fn new(service: impl Into<String>) -> Otel {
        Otel {
            service: service.into(),
            endpoint: None,
            protocol: None,
            timeout: Duration::from_secs(10),
            level: LevelFilter::INFO,
            queue: 65_536,
        }
    }

    /// The backend's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` would give it
    /// (`http://127.0.0.1:4318` for HTTP, `http://127.0.0.1:4317` for gRPC); overrides the
    /// environment.
    pub fn endpoint(mut self, url: impl Into<String>) -> Otel {
        self.endpoint = Some(url.into());
        self
    }

    /// The protocol; overrides the environment.
    pub fn protocol(mut self, protocol: Protocol) -> Otel {
        self.protocol = Some(protocol);
        self
    }

    /// How long one export may take (default 10 s).
    pub fn timeout(mut self, limit: Duration) -> Otel {
        self.timeout = limit;
        self
    }

    /// How many finished spans may wait for export (default 65,536). A burst beyond that
    /// (a backend that is down, say) drops spans rather than growing memory or slowing the
    /// run.
    pub fn max_queue(mut self, spans: usize) -> Otel {
        self.queue = spans.max(1);
        self
    }

    /// The most verbose spans exported (default `INFO`, which is every span the
    /// interpreters create).
    pub fn level(mut self, level: LevelFilter) -> Otel {
        self.level = level;
        self
    }

    /// The layer exporting spans, for a subscriber you compose, and the guard that flushes
    /// it.
    pub fn build<S>(self) -> Result<(impl Layer<S>, OtelGuard), OtelError>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let level = self.level;
        let (tracer, guard) = self.tracer()?;
        // The spans carry GenAI attributes; thread ids, source locations and busy/idle
        // times would only add noise (and volume) to every one.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_location(false)
            .with_tracked_inactivity(false)
            .with_filter(level);
        Ok((layer, guard))
    }

    /// Builds the export and installs it as the global `tracing` subscriber.
    pub fn install(self) -> Result<OtelGuard, OtelError> {
        let (layer, guard) = self.build()?;
        tracing_subscriber::registry()
            .with(layer)
            .try_init()
            .map_err(OtelError::AlreadyInstalled)?;
        Ok(guard)
    }

    fn tracer(self) -> Result<(Tracer, OtelGuard), OtelError> {
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => Protocol::from_env()?,
        };
        let exporter = match protocol {
            Protocol::HttpProtobuf => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(http_client::ThreadClient::new(self.timeout))
                    .with_timeout(self.timeout);
                if let Some(base) = &self.endpoint {
                    builder =
                        builder.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
                }
                builder.build().map_err(OtelError::Exporter)?
            }
            #[cfg(feature = "grpc")]
            Protocol::Grpc => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_timeout(self.timeout);
                if let Some(base) = &self.endpoint {
                    builder = builder.with_endpoint(base.clone());
                }
                builder.build().map_err(OtelError::Exporter)?
            }
            #[cfg(not(feature = "grpc"))]
            Protocol::Grpc => return Err(OtelError::UnsupportedProtocol("grpc".into())),
        };
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(self.queue)
            .with_max_export_batch_size(EXPORT_BATCH)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(arrays::Arrays(processor))
            .with_resource(Resource::builder().with_service_name(self.service).build())
            .build();
        let tracer = provider.tracer("effect-agents");
        Ok((tracer, OtelGuard { provider }))
    }
}

/// Keeps the export running; flushes and stops it when dropped (or on
/// [`shutdown`](OtelGuard::shutdown), which reports failures). Both block until the last spans
/// are sent. With gRPC the send runs on the tokio runtime the exporter was built in, so drop
/// the guard where that runtime keeps running (a multi-threaded runtime, or after leaving a
/// current-thread one), not inside a task of a current-thread runtime.
#[derive(Debug)]
#[must_use = "dropping the guard stops the export"]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl OtelGuard {
    /// Exports every span finished so far, waiting until the backend has them.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.provider.force_flush().map_err(OtelError::Export)
    }

    /// Flushes and stops the export.
    pub fn shutdown(self) -> Result<(), OtelError> {
        self.provider.shutdown().map_err(OtelError::Export)
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        // After `shutdown` this reports "already shut down", which is no news.
        let _ = self.provider.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_the_environment_spells_them() {
        assert_eq!(
            Protocol::parse("http/protobuf").unwrap(),
            Protocol::HttpProtobuf
        );
        #[cfg(feature = "grpc")]
        assert_eq!(Protocol::parse("grpc").unwrap(), Protocol::Grpc);
        let error = Protocol::parse("http/json").unwrap_err();
        assert!(error.to_string().contains("http/json"), "{error}");
    }
}
