//! [`MemoryJournal`]: a journal kept in memory, for tests and for runs whose journal travels
//! with them (a Temporal workflow continuing as new carries its journal to the next run).

use std::sync::{Arc, Mutex};

use agent_op::BoxFuture;
use agent_op::journal::{Entry, Journal, JournalError};

/// A journal held in memory: nothing survives the process, and an append is "durable" as
/// soon as it returns. Clones share the same entries.
///
/// ```
/// use agent_journal::{Journal, MemoryJournal};
/// use agent_op::journal::{Key, Request};
/// use serde_json::json;
/// use serde_json::value::to_raw_value;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let journal = MemoryJournal::new();
/// let result = to_raw_value(&3).unwrap();
/// let entry = Request::tool("weather", &json!({"city": "Oslo"})).entry(Key::run(), result);
/// journal.append(vec![entry.clone()]).await.unwrap();
/// assert_eq!(journal.entries().await.unwrap(), vec![entry]);
/// # });
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryJournal {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> MemoryJournal {
        MemoryJournal::default()
    }

    /// A journal holding `entries` (a run to resume).
    pub fn from_entries(entries: Vec<Entry>) -> MemoryJournal {
        MemoryJournal {
            entries: Arc::new(Mutex::new(entries)),
        }
    }

    /// A copy of the entries appended so far, in order.
    pub fn snapshot(&self) -> Vec<Entry> {
        self.lock().clone()
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // Entries are only ever pushed whole: a panic elsewhere leaves them consistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Journal for MemoryJournal {
    fn describe(&self) -> String {
        "memory".to_owned()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        let entries = self.snapshot();
        Box::pin(async move { Ok(entries) })
    }

    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        self.lock().extend(entries);
        Box::pin(async { Ok(()) })
    }
}
