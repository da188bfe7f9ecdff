//! `agent run --otlp`: the run's spans (named and attributed per the GenAI semantic
//! conventions) exported to an OpenTelemetry backend.

use std::time::Duration;

use agent_otel::{Otel, OtelGuard};

use crate::cli::OtlpArgs;
use crate::error::CliError;

/// The variables that turn export on without `--otlp`, as other OpenTelemetry tools do.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether spans are exported: `--otlp`, or an OTLP endpoint variable set.
pub(crate) fn wanted(args: &OtlpArgs) -> bool {
    args.otlp.is_some()
        || ENDPOINT_VARIABLES
            .iter()
            .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
}

/// Starts exporting spans for the run of `agent` (the service name unless
/// `OTEL_SERVICE_NAME` says), if [`wanted`]. Keep the guard until the run ends, then
/// [`finish`].
pub(crate) fn start(args: &OtlpArgs, agent: &str) -> Result<Option<OtelGuard>, CliError> {
    if !wanted(args) {
        return Ok(None);
    }
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| agent.to_owned());
    // The run waits for the last spans at its end: a backend that is down costs at most this.
    let mut otel = Otel::new(service).timeout(Duration::from_secs(5));
    if let Some(endpoint) = args.otlp.as_deref().filter(|e| !e.is_empty()) {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(CliError::Invalid(format!(
                "--otlp={endpoint}: give the backend's URL, such as http://127.0.0.1:4318"
            )));
        }
        otel = otel.endpoint(endpoint);
    }
    otel.install()
        .map(Some)
        .map_err(|e| CliError::Invalid(format!("OpenTelemetry export: {e}")))
}

/// Sends the spans still batched; a backend that cannot be reached is a warning, not a failed
/// run (the trace file has everything).
pub(crate) fn finish(guard: Option<OtelGuard>) {
    if let Some(guard) = guard
        && let Err(e) = guard.shutdown()
    {
        eprintln!("warning: the run's spans could not all be exported: {e}");
    }
}
