//! [`RecordingProvider`]: records every call of a provider to a cassette.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_op::{BoxFuture, Cause, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};

use super::entry::{CassetteEntry, CassetteError};

/// Wraps any provider and appends each call to a JSONL cassette (see the
/// [module docs](super)): the request, and the reply or the error. Each entry is flushed as
/// soon as the call ends, so a crashed run keeps what it recorded. Clones share the cassette.
///
/// A call whose entry cannot be written fails with [`ProviderError::Other`]: a recording that
/// silently misses calls would fail later, far from the cause.
///
/// Streamed calls pass their deltas through and record the assembled reply; replaying them
/// delivers that reply as deltas. Each entry also records what the provider's
/// [`max_cost`](Provider::max_cost) said of the call, which replay serves back.
///
/// ```
/// use agent_op::{Prompt, Provider, Response};
/// use agent_provider::ScriptedProvider;
/// use agent_provider::cassette::{RecordingProvider, ReplayProvider};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("calls.jsonl");
/// let recording = RecordingProvider::create(ScriptedProvider::new([Response::text("4")]), &path).unwrap();
/// recording.chat("m", &Prompt::new().user("2+2?")).await.unwrap();
///
/// let replay = ReplayProvider::open(&path).unwrap();
/// assert_eq!(replay.chat("m", &Prompt::new().user("2+2?")).await.unwrap().content, "4");
/// # });
/// ```
#[derive(Clone)]
pub struct RecordingProvider<P> {
    inner: P,
    sink: Arc<Mutex<Sink>>,
}

struct Sink {
    writer: Box<dyn Write + Send>,
    path: PathBuf,
}

impl<P> RecordingProvider<P> {
    /// Records `inner`'s calls to a new cassette at `path` (an existing file is replaced).
    pub fn create(inner: P, path: impl AsRef<Path>) -> Result<RecordingProvider<P>, CassetteError> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|source| CassetteError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok(RecordingProvider::with_writer(
            inner,
            BufWriter::new(file),
            path,
        ))
    }

    /// Records `inner`'s calls at the end of the cassette at `path` (created if missing).
    pub fn append(inner: P, path: impl AsRef<Path>) -> Result<RecordingProvider<P>, CassetteError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| CassetteError::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(RecordingProvider::with_writer(
            inner,
            BufWriter::new(file),
            path,
        ))
    }

    /// Records `inner`'s calls to `writer`.
    pub fn to_writer(inner: P, writer: impl Write + Send + 'static) -> RecordingProvider<P> {
        RecordingProvider::with_writer(inner, writer, Path::new("<memory>"))
    }

    fn with_writer(
        inner: P,
        writer: impl Write + Send + 'static,
        path: &Path,
    ) -> RecordingProvider<P> {
        RecordingProvider {
            inner,
            sink: Arc::new(Mutex::new(Sink {
                writer: Box::new(writer),
                path: path.to_owned(),
            })),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Writes one entry as a line and flushes it.
    fn record(
        &self,
        model: &str,
        prompt: &Prompt,
        max_cost: Option<MicroUsd>,
        outcome: &Result<Response, ProviderError>,
    ) -> Result<(), ProviderError> {
        let entry =
            CassetteEntry::new(model, prompt.clone(), outcome.clone()).with_max_cost(max_cost);
        let mut line = serde_json::to_vec(&entry).map_err(|e| {
            ProviderError::other(format!("could not encode a cassette entry: {e}"))
                .with_cause(Cause::new(e))
        })?;
        line.push(b'\n');
        // The sink is a writer; a panic elsewhere cannot leave it in a state worse than a
        // partly written line, which the next write follows on a new line.
        let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        let written = sink
            .writer
            .write_all(&line)
            .and_then(|()| sink.writer.flush());
        written.map_err(|e| {
            ProviderError::other(format!(
                "could not write to cassette `{}`: {e}",
                sink.path.display()
            ))
            .with_cause(Cause::new(e))
        })
    }
}

impl<P: Provider> Provider for RecordingProvider<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let outcome = self.inner.chat(model, prompt).await;
            self.record(model, prompt, self.inner.max_cost(model, prompt), &outcome)?;
            outcome
        })
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let outcome = self.inner.chat_stream(model, prompt, on_delta).await;
            self.record(model, prompt, self.inner.max_cost(model, prompt), &outcome)?;
            outcome
        })
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        self.inner.max_cost(model, prompt)
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        self.inner.supports_json_schema(model)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

impl<P: fmt::Debug> fmt::Debug for RecordingProvider<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("RecordingProvider")
            .field("cassette", &sink.path)
            .field("inner", &self.inner)
            .finish()
    }
}
