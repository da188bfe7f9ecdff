//! [`JsonlJournal`]: a journal in a JSON Lines file.
//!
//! One JSON object per line: first a header `{"journal":{"version":1}}`, then one
//! `{"entry":{..}}` per result, in the order they were committed. A file whose last line
//! was cut by a crash (no newline at its end, and not valid JSON) opens with that line
//! dropped and cut off the file: only whole, committed entries count. The file is locked
//! (an advisory lock, released when the process dies) while it is open, so a second writer
//! is refused instead of interleaving lines.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_op::journal::{Entry, JOURNAL_VERSION, Journal, JournalError};
use agent_op::{BoxFuture, Cause};
use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// When a [`JsonlJournal`] makes its appends durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fsync {
    /// After every append, before it returns: an entry survives a crash of the machine once
    /// appended.
    #[default]
    EveryEntry,
    /// Never explicitly: entries survive a crash of the process (they are written to the
    /// operating system at once), not necessarily of the machine.
    Never,
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Journal(Header),
    Entry(Box<Entry>),
}

/// An append-only JSON Lines journal file: a header `{"journal":{"version":1}}`, then one
/// `{"entry":{..}}` per committed result. A last line torn by a crash is dropped (and cut
/// off) on open; the file is locked while open, so a second writer is refused.
///
/// ```
/// use agent_journal::{Fsync, Journal, JsonlJournal};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let journal = JsonlJournal::open(dir.path().join("run.jsonl"), Fsync::EveryEntry).unwrap();
/// assert!(journal.entries().await.unwrap().is_empty());
/// # });
/// ```
#[derive(Debug)]
pub struct JsonlJournal {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    fsync: Fsync,
    entries: Vec<Entry>,
}

impl JsonlJournal {
    /// Opens the journal at `path`, creating it (with its header) if missing, locks it, and
    /// reads its committed entries. A last line cut by a crash is dropped and cut off.
    pub fn open(path: impl AsRef<Path>, fsync: Fsync) -> Result<JsonlJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let name = path.display().to_string();
        let io = |e: std::io::Error| JournalError::Io {
            journal: name.clone(),
            cause: Cause::new(e),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                return Err(JournalError::Locked {
                    journal: name,
                    holder: None,
                });
            }
            Err(e) => return Err(io(e)),
        }
        let (entries, whole) = read(&name, &file)?;
        let length = file.metadata().map_err(io)?.len();
        if whole < length {
            // A torn last line: never committed, so never seen.
            file.set_len(whole).map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let mut inner = Inner {
            file,
            fsync,
            entries: Vec::new(),
        };
        match entries {
            Some(entries) => inner.entries = entries,
            None => inner.write_lines(
                &name,
                &[Line::Journal(Header {
                    version: JOURNAL_VERSION,
                })],
            )?,
        }
        Ok(JsonlJournal {
            path,
            inner: Mutex::new(inner),
        })
    }

    /// Reads the committed entries of the journal at `path` without opening it for writing:
    /// no lock, and a torn last line is left in place (and left out).
    pub fn read(path: impl AsRef<Path>) -> Result<Vec<Entry>, JournalError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| JournalError::Io {
            journal: name.clone(),
            cause: Cause::new(e),
        })?;
        Ok(read(&name, &file)?.0.unwrap_or_default())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Journal for JsonlJournal {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        let entries = self.lock().entries.clone();
        Box::pin(async move { Ok(entries) })
    }

    /// Appends `entries` in one write (and, with [`Fsync::EveryEntry`], one `fsync`). The
    /// write is synchronous: a file append is short, and the program waits for it anyway.
    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        let result = {
            let mut inner = self.lock();
            let lines: Vec<Line> = entries
                .into_iter()
                .map(|e| Line::Entry(Box::new(e)))
                .collect();
            let written = inner.write_lines(&self.describe(), &lines);
            if written.is_ok() {
                inner
                    .entries
                    .extend(lines.into_iter().filter_map(|line| match line {
                        Line::Entry(entry) => Some(*entry),
                        Line::Journal(_) => None,
                    }));
            }
            written
        };
        Box::pin(async move { result })
    }
}

impl Inner {
    fn write_lines(&mut self, name: &str, lines: &[Line]) -> Result<(), JournalError> {
        let io = |e: std::io::Error| JournalError::Io {
            journal: name.to_owned(),
            cause: Cause::new(e),
        };
        let mut bytes = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut bytes, line).map_err(|e| io(std::io::Error::other(e)))?;
            bytes.push(b'\n');
        }
        // One write per append: a crash leaves at most the last line torn.
        self.file.write_all(&bytes).map_err(io)?;
        if self.fsync == Fsync::EveryEntry {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

/// The entries of `file` (`None` if it is empty) and the length of its whole lines.
fn read(name: &str, file: &File) -> Result<(Option<Vec<Entry>>, u64), JournalError> {
    let io = |e: std::io::Error| JournalError::Io {
        journal: name.to_owned(),
        cause: Cause::new(e),
    };
    let malformed = |number: usize, cause: Cause| JournalError::Malformed {
        journal: name.to_owned(),
        at: format!("line {number}"),
        cause,
    };
    let mut reader = BufReader::new(file);
    reader.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut entries: Option<Vec<Entry>> = None;
    let (mut whole, mut number) = (0u64, 0usize);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(io)?;
        if read == 0 {
            break;
        }
        number += 1;
        let complete = line.ends_with(b"\n");
        let value = match serde_json::from_slice::<Value>(&line) {
            Ok(value) => value,
            // Cut by a crash mid-write: it was never committed.
            Err(_) if !complete => break,
            Err(e) => return Err(malformed(number, Cause::new(e))),
        };
        if number == 1 {
            let version = value
                .get("journal")
                .and_then(|h| h.get("version"))
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    malformed(
                        1,
                        Cause::new(std::io::Error::other(
                            "the file does not start with a journal header",
                        )),
                    )
                })?;
            if version != u64::from(JOURNAL_VERSION) {
                return Err(JournalError::UnsupportedVersion {
                    journal: name.to_owned(),
                    found: u32::try_from(version).unwrap_or(u32::MAX),
                });
            }
            entries = Some(Vec::new());
        } else {
            match serde_json::from_value::<Line>(value) {
                Ok(Line::Entry(entry)) => entries.get_or_insert_with(Vec::new).push(*entry),
                Ok(Line::Journal(_)) | Err(_) if !complete => break,
                Ok(Line::Journal(_)) => {
                    return Err(malformed(
                        number,
                        Cause::new(std::io::Error::other("a second journal header")),
                    ));
                }
                Err(e) => return Err(malformed(number, Cause::new(e))),
            }
        }
        whole += read as u64;
    }
    Ok((entries, whole))
}

#[cfg(test)]
mod tests {
    use agent_op::journal::{EntryKind, Key, fingerprint};
    use serde_json::json;

    use super::*;

    fn entry(seq: u64, result: Value) -> Entry {
        Entry {
            key: Key {
                branch: "0".into(),
                seq,
            },
            kind: EntryKind::Model,
            fingerprint: fingerprint(&json!({"model": "m", "prompt": seq})),
            request: json!({"model": "m"}),
            result,
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn entries_survive_reopening_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("j.jsonl");
        let journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert!(block_on(journal.entries()).unwrap().is_empty());
        block_on(journal.append(vec![entry(0, json!("hello")), entry(1, json!({"n": 2}))]))
            .unwrap();
        drop(journal);
        let again = JsonlJournal::open(&path, Fsync::Never).unwrap();
        assert_eq!(
            block_on(again.entries()).unwrap(),
            [entry(0, json!("hello")), entry(1, json!({"n": 2}))]
        );
        block_on(again.append(vec![entry(2, json!(null))])).unwrap();
        drop(again);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(
            text.starts_with("{\"journal\":{\"version\":1}}\n"),
            "{text}"
        );
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_cut_off() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("torn.jsonl");
        let journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        block_on(journal.append(vec![entry(0, json!("kept"))])).unwrap();
        drop(journal);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"entry\":{\"key\":{\"branch\":\"0\",\"se")
            .unwrap();
        drop(file);
        let journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert_eq!(
            block_on(journal.entries()).unwrap(),
            [entry(0, json!("kept"))]
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        block_on(journal.append(vec![entry(1, json!("next"))])).unwrap();
        drop(journal);
        let journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert_eq!(block_on(journal.entries()).unwrap().len(), 2);
    }

    #[test]
    fn a_second_writer_is_refused_until_the_first_closes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("busy.jsonl");
        let first = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        let second = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap_err();
        assert!(matches!(second, JournalError::Locked { .. }), "{second}");
        assert!(second.to_string().contains("in use by another writer"));
        drop(first);
        JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
    }

    #[test]
    fn damaged_lines_other_versions_and_foreign_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let damaged = tmp.path().join("damaged.jsonl");
        std::fs::write(&damaged, "{\"journal\":{\"version\":1}}\nnot json\n{}\n").unwrap();
        let err = JsonlJournal::open(&damaged, Fsync::Never).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(std::error::Error::source(&err).is_some());

        let newer = tmp.path().join("newer.jsonl");
        std::fs::write(&newer, "{\"journal\":{\"version\":9}}\n").unwrap();
        let err = JsonlJournal::open(&newer, Fsync::Never).unwrap_err();
        assert!(matches!(
            err,
            JournalError::UnsupportedVersion { found: 9, .. }
        ));
        assert!(
            err.to_string()
                .contains("version 9; this library reads version 1"),
            "{err}"
        );

        let foreign = tmp.path().join("trace.jsonl");
        std::fs::write(&foreign, "{\"v\":2}\n").unwrap();
        let err = JsonlJournal::open(&foreign, Fsync::Never).unwrap_err();
        assert!(err.to_string().contains("journal header"), "{err}");
        // Nothing was written over the foreign file.
        assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "{\"v\":2}\n");
    }
}
