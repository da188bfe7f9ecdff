//! [`RunJournal`]: a run's journal, in the store beside its events.

use agent_op::BoxFuture;
use agent_op::Cause;
use agent_op::journal::{Entry, Journal, JournalError};

use super::store::{Store, StoreError};

/// The journal of one run: entries committed to the store's database (in the same group
/// commits as every other run's), so a killed server resumes its runs from it.
pub(crate) struct RunJournal {
    pub(crate) store: Store,
    pub(crate) run_id: String,
}

impl RunJournal {
    fn failed(&self, error: StoreError) -> JournalError {
        JournalError::Io {
            journal: self.describe(),
            cause: Cause::new(error),
        }
    }
}

impl Journal for RunJournal {
    fn describe(&self) -> String {
        format!("run {} in {}", self.run_id, self.store.path().display())
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        Box::pin(async move {
            let rows = self
                .store
                .journal(&self.run_id)
                .await
                .map_err(|e| self.failed(e))?;
            rows.iter()
                .enumerate()
                .map(|(i, row)| {
                    serde_json::from_str(row).map_err(|e| JournalError::Malformed {
                        journal: self.describe(),
                        at: format!("entry {}", i + 1),
                        cause: Cause::new(e),
                    })
                })
                .collect()
        })
    }

    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        Box::pin(async move {
            let rows = entries
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| JournalError::Io {
                    journal: self.describe(),
                    cause: Cause::new(e),
                })?;
            self.store
                .journal_append(&self.run_id, rows)
                .await
                .map_err(|e| self.failed(e))
        })
    }
}
