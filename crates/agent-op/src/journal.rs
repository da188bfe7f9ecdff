//! The journal of a run's nondeterministic results, and its JSON Lines file format.
//!
//! Every result an effect produces that could differ between two runs of the same program
//! (a model's reply, a tool's result, a recall, a steering answer, a clock reading, a random
//! value, which branch of a race won) is an [`Entry`], keyed by its deterministic position
//! ([`Key`]: the branch's [`TraceId`] and the effect's sequence number within the branch)
//! and carrying a [`fingerprint`] of the request that produced it, so a replay can tell
//! that the program asked the same question.
//!
//! This module holds the format and the file backend ([`JsonlJournal`]); the engine does not
//! write or read journals yet.
//!
//! # The file
//!
//! One JSON object per line: first a header `{"journal":{"version":1}}`, then one
//! `{"entry":{..}}` per result, in the order they were committed. A file whose last line
//! was cut by a crash (no newline at its end, and not valid JSON) opens with that line
//! dropped and cut off the file: only whole, committed entries count.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TraceId;

/// The journal format this library writes.
pub const JOURNAL_VERSION: u32 = 1;

/// Where in a run a result was produced: the branch, and the effect's sequence number
/// within it. Both interpreters derive the same keys for the same program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    /// The branch (the run's root id, or a fork branch's).
    pub branch: TraceId,
    /// The effect's sequence number within its branch.
    pub seq: u64,
}

/// What kind of effect produced an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// A model call's response (or its error).
    Model,
    /// A tool call's result (or its error).
    Tool,
    /// A memory recall's results.
    Recall,
    /// A steering message taken (or none).
    Steering,
    /// A clock reading.
    Clock,
    /// A random value.
    Random,
    /// Which branch of a race won, or that a timeout fired.
    Outcome,
}

/// One journaled result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Where it was produced.
    pub key: Key,
    /// What produced it.
    pub kind: EntryKind,
    /// The [`fingerprint`] of the request (model and prompt, tool and arguments, …).
    pub fingerprint: String,
    /// The result, as the effect returned it.
    pub result: Value,
}

/// The fingerprint of a request (`sha256:<hex>`): the SHA-256 of its canonical JSON, with
/// object keys sorted (by their UTF-8 bytes) and no whitespace, so key order does not
/// matter. Cassettes fingerprint their requests the same way.
pub fn fingerprint(request: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(request, &mut canonical);
    crate::memory::sha256_tagged(canonical.as_bytes())
}

/// JSON with object keys sorted (by their UTF-8 bytes) and no insignificant whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// When a [`JsonlJournal`] makes its appends durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fsync {
    /// After every entry, before [`append`](JsonlJournal::append) returns: an entry
    /// survives a crash of the machine once appended (write-ahead).
    #[default]
    EveryEntry,
    /// Never explicitly: entries survive a crash of the process (they are written to the
    /// operating system at once), not necessarily of the machine.
    Never,
}

/// Why a journal could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading or writing the file failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A whole line is not a journal line.
    #[error("journal {path}, line {line}: {source}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The file was written in a format version this library does not read.
    #[error(
        "journal {path} is format version {found}; this library reads version {JOURNAL_VERSION}"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version the file declares.
        found: u32,
    },
    /// The file does not start with a journal header.
    #[error("journal {path} does not start with a journal header")]
    NoHeader {
        /// The file.
        path: PathBuf,
    },
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Journal(Header),
    Entry(Entry),
}

/// An append-only JSON Lines journal file.
#[derive(Debug)]
pub struct JsonlJournal {
    path: PathBuf,
    file: File,
    fsync: Fsync,
    entries: Vec<Entry>,
}

impl JsonlJournal {
    /// Opens the journal at `path`, creating it (with its header) if missing, and reads its
    /// committed entries. A last line cut by a crash is dropped and cut off the file.
    pub fn open(path: impl AsRef<Path>, fsync: Fsync) -> Result<JsonlJournal, JournalError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| JournalError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let (entries, whole) = read(&path, &file)?;
        let length = file.metadata().map_err(io)?.len();
        if whole < length {
            // A torn last line: never committed, so never seen.
            file.set_len(whole).map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let mut journal = JsonlJournal {
            path,
            file,
            fsync,
            entries: Vec::new(),
        };
        match entries {
            Some(entries) => journal.entries = entries,
            None => journal.write_line(&Line::Journal(Header {
                version: JOURNAL_VERSION,
            }))?,
        }
        Ok(journal)
    }

    /// The committed entries, in the order they were appended.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry`; with [`Fsync::EveryEntry`] it is on disk when this returns.
    pub fn append(&mut self, entry: Entry) -> Result<(), JournalError> {
        self.write_line(&Line::Entry(entry.clone()))?;
        self.entries.push(entry);
        Ok(())
    }

    fn write_line(&mut self, line: &Line) -> Result<(), JournalError> {
        let mut bytes = serde_json::to_vec(line).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        // One write per line: a crash leaves at most the last line torn.
        self.file.write_all(&bytes).map_err(io)?;
        if self.fsync == Fsync::EveryEntry {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
    }
}

/// The entries of `file` (`None` if it is empty) and the length of its whole lines.
fn read(path: &Path, file: &File) -> Result<(Option<Vec<Entry>>, u64), JournalError> {
    let io = |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
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
        let parsed = serde_json::from_slice::<Value>(&line);
        let value = match parsed {
            Ok(value) => value,
            // Cut by a crash mid-write: it was never committed.
            Err(_) if !complete => break,
            Err(source) => {
                return Err(JournalError::Malformed {
                    path: path.to_path_buf(),
                    line: number,
                    source,
                });
            }
        };
        if number == 1 {
            let version = value
                .get("journal")
                .and_then(|h| h.get("version"))
                .and_then(Value::as_u64)
                .ok_or_else(|| JournalError::NoHeader {
                    path: path.to_path_buf(),
                })?;
            if version != u64::from(JOURNAL_VERSION) {
                return Err(JournalError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    found: u32::try_from(version).unwrap_or(u32::MAX),
                });
            }
            entries = Some(Vec::new());
        } else {
            match serde_json::from_value::<Line>(value) {
                Ok(Line::Entry(entry)) => entries.get_or_insert_with(Vec::new).push(entry),
                Ok(Line::Journal(_)) | Err(_) if !complete => break,
                Ok(Line::Journal(_)) => {
                    return Err(JournalError::Malformed {
                        path: path.to_path_buf(),
                        line: number,
                        source: serde::de::Error::custom("a second journal header"),
                    });
                }
                Err(source) => {
                    return Err(JournalError::Malformed {
                        path: path.to_path_buf(),
                        line: number,
                        source,
                    });
                }
            }
        }
        whole += read as u64;
    }
    Ok((entries, whole))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(seq: u64, result: Value) -> Entry {
        Entry {
            key: Key {
                branch: TraceId::from("run.0"),
                seq,
            },
            kind: EntryKind::Model,
            fingerprint: fingerprint(&json!({"model": "m", "prompt": seq})),
            result,
        }
    }

    /// A fresh directory, removed when the returned guard drops.
    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn fingerprints_ignore_key_order_but_not_content() {
        let a = fingerprint(&json!({"model": "m", "args": {"x": 1, "y": [1, 2]}}));
        let b = fingerprint(&json!({"args": {"y": [1, 2], "x": 1}, "model": "m"}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint(&json!({"model": "m", "args": {"x": 1, "y": [2, 1]}}))
        );
        assert_ne!(
            a,
            fingerprint(&json!({"model": "n", "args": {"x": 1, "y": [1, 2]}}))
        );
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64, "{a}");
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let mut out = String::new();
        write_canonical(&json!({"b": [{"z": 1, "a": "x\"y"}], "a": null}), &mut out);
        assert_eq!(out, r#"{"a":null,"b":[{"a":"x\"y","z":1}]}"#);
    }

    #[test]
    fn entries_survive_reopening_in_order() {
        let tmp = dir();
        let path = tmp.path().join("j.jsonl");
        let mut journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert!(journal.entries().is_empty());
        journal.append(entry(0, json!("hello"))).unwrap();
        journal.append(entry(1, json!({"n": 2}))).unwrap();
        drop(journal);
        let mut again = JsonlJournal::open(&path, Fsync::Never).unwrap();
        assert_eq!(
            again.entries(),
            [entry(0, json!("hello")), entry(1, json!({"n": 2}))]
        );
        again.append(entry(2, json!(null))).unwrap();
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
        let tmp = dir();
        let path = tmp.path().join("torn.jsonl");
        let mut journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        journal.append(entry(0, json!("kept"))).unwrap();
        drop(journal);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"entry\":{\"key\":{\"branch\":\"run.0\",\"se")
            .unwrap();
        drop(file);
        let mut journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert_eq!(journal.entries(), [entry(0, json!("kept"))]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        journal.append(entry(1, json!("after"))).unwrap();
        drop(journal);
        let journal = JsonlJournal::open(&path, Fsync::EveryEntry).unwrap();
        assert_eq!(journal.entries().len(), 2);
    }

    #[test]
    fn a_damaged_whole_line_is_an_error_naming_it() {
        let tmp = dir();
        let path = tmp.path().join("bad.jsonl");
        std::fs::write(
            &path,
            "{\"journal\":{\"version\":1}}\nnot json\n{\"entry\":{}}\n",
        )
        .unwrap();
        let err = JsonlJournal::open(&path, Fsync::Never).unwrap_err();
        assert!(
            matches!(err, JournalError::Malformed { line: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn other_versions_and_other_files_are_refused_clearly() {
        let tmp = dir();
        let path = tmp.path().join("v9.jsonl");
        std::fs::write(&path, "{\"journal\":{\"version\":9}}\n").unwrap();
        let err = JsonlJournal::open(&path, Fsync::Never).unwrap_err();
        assert!(matches!(
            err,
            JournalError::UnsupportedVersion { found: 9, .. }
        ));
        let message = err.to_string();
        assert!(
            message.contains("version 9") && message.contains("reads version 1"),
            "{message}"
        );

        let trace = tmp.path().join("trace.jsonl");
        std::fs::write(&trace, "{\"v\":2,\"trace\":{}}\n").unwrap();
        let err = JsonlJournal::open(&trace, Fsync::Never).unwrap_err();
        assert!(matches!(err, JournalError::NoHeader { .. }), "{err}");
        // Refused files are left as they were.
        assert_eq!(
            std::fs::read_to_string(&trace).unwrap(),
            "{\"v\":2,\"trace\":{}}\n"
        );
    }
}
