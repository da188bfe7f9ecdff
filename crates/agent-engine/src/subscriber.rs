//! Event subscribers: observers that see every event as it happens.

use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use agent_op::trace::jsonl::{JsonlAppender, JsonlError, TornLine};
use agent_op::{Checkpoint, Delta, Event, Trace, TraceEntry, TraceId};

/// Sees every event of a run as it happens (in a concurrent run, branches interleave; the final
/// trace is ordered deterministically).
///
/// Subscribers run on the interpreter's task, so they should be quick; a panicking subscriber
/// is isolated and does not stop the run. Any `Fn(&TraceId, &Event)` is a subscriber.
pub trait Subscriber: Send + Sync {
    /// An event happened in the run or branch `trace_id`.
    fn on_event(&self, trace_id: &TraceId, event: &Event);

    /// A checkpoint was taken.
    fn on_checkpoint(&self, checkpoint: &Checkpoint) {
        let _ = checkpoint;
    }

    /// Whether this subscriber wants model replies piece by piece. If any subscriber of a run
    /// does, the interpreter calls providers in streaming mode and passes every piece to
    /// [`Subscriber::on_delta`] as it arrives. Deltas are not stored in the trace (the final
    /// `InferEnd` is).
    fn wants_deltas(&self) -> bool {
        false
    }

    /// A piece of a model reply arrived, in the run or branch `trace_id`.
    fn on_delta(&self, trace_id: &TraceId, delta: &Delta) {
        let _ = (trace_id, delta);
    }

    /// The run ended (finished or failed) with `trace`: a subscriber that buffers writes
    /// them out here, before the run returns.
    fn on_run_end(&self, trace: &Trace) {
        let _ = trace;
    }
}

impl<F: Fn(&TraceId, &Event) + Send + Sync> Subscriber for F {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        self(trace_id, event)
    }
}

/// Streams every event to a JSONL trace file as it happens, without making the run wait for
/// the disk.
///
/// Events go over a channel to a writer thread of its own, which serializes them, writes them
/// through a buffer and pushes them to the operating system whenever it has caught up (so a
/// crash of the process loses at most the events still in flight, and readers report a line
/// cut off mid-write as torn). At the end of each run, on [`flush`](JsonlSubscriber::flush)
/// and when the subscriber is dropped (also while unwinding from a panic) everything sent so
/// far is written and `fsync`ed. Write errors cannot fail the run; they are kept for
/// [`errors`](JsonlSubscriber::errors).
#[derive(Debug)]
pub struct JsonlSubscriber {
    /// `None` once closed (on drop).
    sender: Mutex<Option<mpsc::Sender<Write>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

/// What the writer thread is asked to do.
enum Write {
    /// Boxed: an event is large, and the channel holds a slot per message.
    Entry(Box<TraceEntry>),
    /// Write everything received so far, `fsync`, then answer.
    Sync(mpsc::SyncSender<()>),
}

impl JsonlSubscriber {
    /// Appends to the file at `path` (created if missing) from a new writer thread. Returns the
    /// torn line it cut off, if an earlier writer crashed mid-line.
    pub fn open(path: impl AsRef<Path>) -> Result<(JsonlSubscriber, Option<TornLine>), JsonlError> {
        let (appender, torn) = JsonlAppender::open(path)?;
        let (sender, receiver) = mpsc::channel();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let writer = std::thread::Builder::new()
            .name("jsonl-trace-writer".to_owned())
            .spawn({
                let errors = Arc::clone(&errors);
                move || write_until_closed(appender, &receiver, &errors)
            })?;
        Ok((
            JsonlSubscriber {
                sender: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
                errors,
            },
            torn,
        ))
    }

    /// Waits until every event sent so far is written and `fsync`ed.
    pub fn flush(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        if self.send(Write::Sync(done)) {
            // An error here means the writer is gone; its errors say why.
            let _ = wait.recv();
        }
    }

    /// Write errors so far (a subscriber cannot fail the run, so it keeps them here).
    pub fn errors(&self) -> Vec<String> {
        lock(&self.errors).clone()
    }

    /// Hands `write` to the writer thread; `false` if it is gone.
    fn send(&self, write: Write) -> bool {
        match lock(&self.sender).as_ref() {
            Some(sender) => sender.send(write).is_ok(),
            None => false,
        }
    }
}

impl Drop for JsonlSubscriber {
    /// Closes the channel and waits for the writer to write, `fsync` and stop: nothing sent
    /// is lost, even when the drop happens while a panic unwinds.
    fn drop(&mut self) {
        lock(&self.sender).take();
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
    }
}

impl Subscriber for JsonlSubscriber {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        let entry = Box::new(TraceEntry {
            trace_id: trace_id.clone(),
            cancelled: false,
            event: event.clone(),
        });
        if !self.send(Write::Entry(entry)) {
            lock(&self.errors).push("the trace writer thread has stopped".to_owned());
        }
    }

    fn on_run_end(&self, _trace: &Trace) {
        self.flush();
    }
}

/// The writer thread: writes entries as they come, flushes to the OS whenever the channel is
/// empty, `fsync`s on request and when the channel closes.
fn write_until_closed(
    mut appender: JsonlAppender,
    receiver: &mpsc::Receiver<Write>,
    errors: &Mutex<Vec<String>>,
) {
    let report = |result: Result<(), JsonlError>| {
        if let Err(e) = result {
            lock(errors).push(e.to_string());
        }
    };
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        while let Some(write) = next {
            match write {
                Write::Entry(entry) => report(appender.append(&entry)),
                Write::Sync(done) => {
                    report(appender.sync());
                    let _ = done.send(());
                }
            }
            next = receiver.try_recv().ok();
        }
        // Caught up: hand the lines to the OS (a crash of the process then loses nothing).
        report(appender.flush());
    }
    report(appender.sync());
}

/// Locks `mutex`, whose data stays valid even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
