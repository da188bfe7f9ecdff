//! [`JsonlJournal`]: a journal in a JSON Lines file.
//!
//! One JSON object per line: first a header `{"journal":{"version":2}}`, then one
//! `{"entry":{..}}` per result, in the order they were committed, each sealed with its
//! checksum (`crc32`, see [`Sealed`]). A last line without its newline was cut by a crash
//! (the append that wrote it never returned): it is dropped on open and cut off the file,
//! so only whole, committed entries count. A whole line that is not an entry, or whose
//! checksum does not match, is refused naming the line. The file is locked (an advisory
//! lock, released when the process dies) while it is open, so a second writer is refused
//! instead of interleaving lines.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_op::journal::{Entry, EntryKind, JOURNAL_VERSION, Journal, JournalError, Key, Sealed};
use agent_op::{BoxFuture, Cause};
use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

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

#[derive(Serialize)]
struct Header {
    version: u32,
}

/// A line after the header, as read: the entry's request and result are kept as the text
/// the checksum covers.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line<'a> {
    /// A second header: refused.
    Journal(serde::de::IgnoredAny),
    #[serde(borrow)]
    Entry(StoredEntry<'a>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredEntry<'a> {
    key: Key,
    kind: EntryKind,
    fingerprint: String,
    #[serde(borrow)]
    request: &'a RawValue,
    #[serde(borrow)]
    result: &'a RawValue,
    crc32: u32,
}

impl StoredEntry<'_> {
    fn sealed(self) -> Sealed {
        Sealed {
            key: self.key,
            kind: self.kind,
            fingerprint: self.fingerprint,
            request: self.request.get().to_owned(),
            result: self.result.get().to_owned(),
            checksum: self.crc32,
        }
    }
}

/// Writes `entry` as one line: `{"entry":{"key":..,"kind":..,"fingerprint":..,
/// "request":..,"result":..,"crc32":..}}`, the request and result exactly as held (and
/// sealed).
fn write_entry(out: &mut Vec<u8>, entry: &Entry) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"entry\":{\"key\":");
    serde_json::to_writer(&mut *out, &entry.key)?;
    out.extend_from_slice(b",\"kind\":\"");
    out.extend_from_slice(entry.kind.as_str().as_bytes());
    out.extend_from_slice(b"\",\"fingerprint\":");
    serde_json::to_writer(&mut *out, &entry.fingerprint)?;
    out.extend_from_slice(b",\"request\":");
    out.extend_from_slice(entry.request.get().as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(entry.result.get().as_bytes());
    out.extend_from_slice(b",\"crc32\":");
    out.extend_from_slice(entry.checksum().to_string().as_bytes());
    out.extend_from_slice(b"}}\n");
    Ok(())
}

/// An append-only JSON Lines journal file: a header `{"journal":{"version":2}}`, then one
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
            None => {
                let mut header = serde_json::to_vec(&serde_json::json!({
                    "journal": Header { version: JOURNAL_VERSION }
                }))
                .map_err(|e| io(std::io::Error::other(e)))?;
                header.push(b'\n');
                inner.write(&name, &header)?;
            }
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
        let result = (|| {
            let name = self.describe();
            let mut bytes = Vec::new();
            for entry in &entries {
                write_entry(&mut bytes, entry).map_err(|e| JournalError::Io {
                    journal: name.clone(),
                    cause: Cause::new(std::io::Error::other(e)),
                })?;
            }
            let mut inner = self.lock();
            inner.write(&name, &bytes)?;
            inner.entries.extend(entries);
            Ok(())
        })();
        Box::pin(async move { result })
    }
}

impl Inner {
    fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), JournalError> {
        let io = |e: std::io::Error| JournalError::Io {
            journal: name.to_owned(),
            cause: Cause::new(e),
        };
        // One write per append: a crash leaves at most the last line torn.
        self.file.write_all(bytes).map_err(io)?;
        if self.fsync == Fsync::EveryEntry {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

/// The entries of `file` (`None` if it has no whole line) and the length of its whole lines.
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
        // A last line without its newline was cut by a crash mid-write: the append that
        // wrote it never returned, so it was never committed.
        if read == 0 || !line.ends_with(b"\n") {
            break;
        }
        number += 1;
        if number == 1 {
            let version = serde_json::from_slice::<Value>(&line)
                .ok()
                .and_then(|v| v.get("journal")?.get("version")?.as_u64())
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
            let entry = match serde_json::from_slice::<Line<'_>>(&line) {
                Ok(Line::Entry(stored)) => {
                    stored.sealed().open(name, format_args!("line {number}"))?
                }
                Ok(Line::Journal(_)) => {
                    return Err(malformed(
                        number,
                        Cause::new(std::io::Error::other("a second journal header")),
                    ));
                }
                Err(e) => return Err(malformed(number, Cause::new(e))),
            };
            entries.get_or_insert_with(Vec::new).push(entry);
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
            request: serde_json::value::to_raw_value(&json!({"model": "m"})).unwrap(),
            result: serde_json::value::to_raw_value(&result).unwrap(),
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
            text.starts_with("{\"journal\":{\"version\":2}}\n"),
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
        std::fs::write(&damaged, "{\"journal\":{\"version\":2}}\nnot json\n{}\n").unwrap();
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
                .contains("version 9; this library reads version 2"),
            "{err}"
        );

        // Version 1 had no checksums: refused, saying why.
        let older = tmp.path().join("older.jsonl");
        std::fs::write(&older, "{\"journal\":{\"version\":1}}\n").unwrap();
        let err = JsonlJournal::open(&older, Fsync::Never).unwrap_err();
        assert!(err.to_string().contains("carry no checksum"), "{err}");

        let foreign = tmp.path().join("trace.jsonl");
        std::fs::write(&foreign, "{\"v\":2}\n").unwrap();
        let err = JsonlJournal::open(&foreign, Fsync::Never).unwrap_err();
        assert!(err.to_string().contains("journal header"), "{err}");
        // Nothing was written over the foreign file.
        assert_eq!(std::fs::read_to_string(&foreign).unwrap(), "{\"v\":2}\n");
    }

    #[test]
    fn a_changed_entry_is_refused_by_its_checksum_naming_its_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("changed.jsonl");
        let journal = JsonlJournal::open(&path, Fsync::Never).unwrap();
        block_on(journal.append(vec![entry(0, json!({"n": 1})), entry(1, json!({"n": 2}))]))
            .unwrap();
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        // Valid JSON with a different value: only the checksum can tell.
        let changed = text.replace("{\"n\":2}", "{\"n\":3}");
        assert_ne!(changed, text);
        std::fs::write(&path, &changed).unwrap();
        let err = JsonlJournal::read(&path).unwrap_err();
        assert!(
            matches!(&err, JournalError::ChecksumMismatch { at, .. } if at == "line 3"),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 3: damaged"), "{err}");
        // Opening for writing refuses it too, and leaves the file as it is.
        JsonlJournal::open(&path, Fsync::Never).unwrap_err();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), changed);
    }

    #[test]
    fn a_last_line_without_its_newline_was_never_committed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("unterminated.jsonl");
        let journal = JsonlJournal::open(&path, Fsync::Never).unwrap();
        block_on(journal.append(vec![entry(0, json!("kept")), entry(1, json!("cut"))])).unwrap();
        drop(journal);
        // The whole second entry is there but its newline is not: the write that made it
        // never finished, so the append never returned.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.trim_end()).unwrap();
        assert_eq!(
            JsonlJournal::read(&path).unwrap(),
            [entry(0, json!("kept"))]
        );
        let journal = JsonlJournal::open(&path, Fsync::Never).unwrap();
        block_on(journal.append(vec![entry(1, json!("again"))])).unwrap();
        drop(journal);
        assert_eq!(
            JsonlJournal::read(&path).unwrap(),
            [entry(0, json!("kept")), entry(1, json!("again"))]
        );
    }
}
