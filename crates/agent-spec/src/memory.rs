//! The SQLite memory a spec's `[memory]` names.

use std::path::Path;

use agent_memory::SqliteBackend;

use crate::error::SpecError;
use crate::spec::Spec;

/// Opens the memory database of `spec`, creating the file if it is missing; `None` for a
/// spec without `[memory]`. `base` is the directory `memory.db` is relative to (usually
/// [`Spec::dir`]).
pub async fn memory(spec: &Spec, base: &Path) -> Result<Option<SqliteBackend>, SpecError> {
    let Some(memory) = &spec.memory else {
        return Ok(None);
    };
    let path = base.join(&memory.db);
    SqliteBackend::builder(&path)
        .create_if_missing(true)
        .open()
        .await
        .map(Some)
        .map_err(|source| SpecError::Memory {
            path,
            action: "opening the memory database",
            source,
        })
}
