//! The journal of a run's nondeterministic results: what replay and durable resume read.
//!
//! Every result an effect produces that could differ between two runs of the same program
//! (a model's reply, a tool's result, a recall, a steering answer, a clock reading, a random
//! value, which branch of a race won) is an [`Entry`], keyed by its deterministic position
//! ([`Key`]: the branch's path below the run and the effect's sequence number within the
//! branch) and carrying a [`fingerprint`] of the request that produced it, so a replay can
//! tell that the program asked the same question, and a short summary of that request, so
//! it can say how the question changed when it did not ([`Divergence`]).
//!
//! Journals are stored behind the [`Journal`] trait; `agent-journal` holds the backends (a
//! JSON Lines file, SQLite, PostgreSQL) and the interpreters write and read them
//! (`replay`, `run_durable`, `resume`).

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::memory::TaggedHash;
use crate::{BoxFuture, Cause, Message, Prompt, preview};

/// The journal format this library writes (and the only one it reads). Version 2 seals every
/// entry with a checksum ([`Sealed`]); version 1 journals, which had none, are refused.
pub const JOURNAL_VERSION: u32 = 2;

/// Where in a run a result was produced: the branch, and the effect's sequence number
/// within it. Both interpreters derive the same keys for the same program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    /// The branch's path below the run: empty for the run itself, `0.2` for the third
    /// branch of the first branch's fork, and so on (a branch's trace id without the run's).
    pub branch: String,
    /// The effect's number within its branch: 0 for the branch's first journaled effect
    /// (model or tool call, memory operation, steering, clock, random value, race,
    /// checkpoint), 1 for the next, and so on.
    pub seq: u64,
}

impl Key {
    /// The key of the run's own metadata (its trace id): no effect has it.
    pub fn run() -> Key {
        Key {
            branch: RUN_BRANCH.to_owned(),
            seq: 0,
        }
    }
}

/// The branch of [`Key::run`]: not a path any fork produces.
const RUN_BRANCH: &str = "@run";

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.branch.is_empty() {
            write!(f, "run, effect {}", self.seq)
        } else {
            write!(f, "branch {}, effect {}", self.branch, self.seq)
        }
    }
}

/// What kind of effect produced an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// The run itself: its trace id (at [`Key::run`]).
    Run,
    /// A model call's response (or its error).
    Model,
    /// A tool call's result (or its error).
    Tool,
    /// A memory recall's results.
    Recall,
    /// A memory store's id or a delete's answer.
    Memory,
    /// A steering message taken (or none).
    Steering,
    /// A clock reading.
    Clock,
    /// A random value.
    Random,
    /// Which branch of a race won.
    Outcome,
    /// A checkpoint was taken here (a marker: `resume_from` replays what came before it).
    Checkpoint,
}

impl EntryKind {
    /// The kind's name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Run => "run",
            EntryKind::Model => "model",
            EntryKind::Tool => "tool",
            EntryKind::Recall => "recall",
            EntryKind::Memory => "memory",
            EntryKind::Steering => "steering",
            EntryKind::Clock => "clock",
            EntryKind::Random => "random",
            EntryKind::Outcome => "outcome",
            EntryKind::Checkpoint => "checkpoint",
        }
    }

    /// The kind named `name` (see [`as_str`](EntryKind::as_str)).
    pub fn parse(name: &str) -> Option<EntryKind> {
        Some(match name {
            "run" => EntryKind::Run,
            "model" => EntryKind::Model,
            "tool" => EntryKind::Tool,
            "recall" => EntryKind::Recall,
            "memory" => EntryKind::Memory,
            "steering" => EntryKind::Steering,
            "clock" => EntryKind::Clock,
            "random" => EntryKind::Random,
            "outcome" => EntryKind::Outcome,
            "checkpoint" => EntryKind::Checkpoint,
            _ => return None,
        })
    }
}

/// One journaled result.
///
/// The request summary and the result are kept as the JSON text a backend stores
/// ([`RawValue`]): serialized once when the result is produced, written as they are, and
/// parsed only into the type the effect returns when a replay needs them. Two entries are
/// equal when their keys, kinds and fingerprints are and their JSON texts are identical.
///
/// ```
/// use agent_op::journal::{Key, Request};
/// use serde_json::value::to_raw_value;
/// use serde_json::json;
///
/// let result = to_raw_value(&json!({"Ok": 3})).unwrap();
/// let entry = Request::tool("weather", &json!({"city": "Oslo"})).entry(Key::run(), result);
/// assert_eq!(entry.result.get(), r#"{"Ok":3}"#);
/// assert_eq!(entry.request.get(), r#"{"tool":"weather","args":{"city":"Oslo"}}"#);
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// Where it was produced.
    pub key: Key,
    /// What produced it.
    pub kind: EntryKind,
    /// The [`fingerprint`] of the whole request (model and prompt, tool and arguments, …).
    pub fingerprint: String,
    /// A short summary of the request, for the diff of a [`Divergence`] (a model call's
    /// messages as role, hash and preview; a tool call's name and arguments), as JSON text
    /// (`null`: none).
    #[serde(default)]
    pub request: Box<RawValue>,
    /// The result, as the effect returned it, as JSON text.
    pub result: Box<RawValue>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.key == other.key
            && self.kind == other.kind
            && self.fingerprint == other.fingerprint
            && self.request.get() == other.request.get()
            && self.result.get() == other.result.get()
    }
}

/// A request as the journal sees it: its fingerprint and its summary.
#[derive(Clone, Debug)]
pub struct Request {
    /// What produced it.
    pub kind: EntryKind,
    /// The [`fingerprint`] of the whole request.
    pub fingerprint: String,
    /// Its summary as JSON text (see [`Entry::request`]; `null`: not made yet, see
    /// [`Request::model_unsummarized`]).
    pub summary: Box<RawValue>,
}

impl PartialEq for Request {
    fn eq(&self, other: &Request) -> bool {
        self.kind == other.kind
            && self.fingerprint == other.fingerprint
            && self.summary.get() == other.summary.get()
    }
}

impl Request {
    /// A model call: `model` with `prompt`. The fingerprint covers the whole prompt (messages,
    /// tools, options: the SHA-256 of their JSON serialization); the summary lists each
    /// message's role, hash and first characters.
    pub fn model(model: &str, prompt: &Prompt) -> Request {
        Request {
            summary: Request::model_summary(model, prompt),
            ..Request::model_unsummarized(model, prompt)
        }
    }

    /// [`Request::model`] without its summary (`null`): what a replay needs to check a
    /// call, at a fraction of the cost. [`model_summary`](Request::model_summary) fills it
    /// in when a divergence or a new entry needs it.
    pub fn model_unsummarized(model: &str, prompt: &Prompt) -> Request {
        // Hashed as serialized, not canonicalized: the same program serializes its prompts
        // the same way, and a prompt is the largest request there is. Serialized into a
        // buffer, not into the hasher: serde_json writes token by token, and each write
        // costs the hasher more than a push costs a buffer.
        // Sized for the texts and what surrounds them, so it is not grown while written.
        let texts: usize = prompt.messages.iter().map(|m| m.content().len()).sum();
        let mut bytes = Vec::with_capacity(256 + texts + texts / 8);
        let digest = match serde_json::to_writer(&mut bytes, &(model, prompt)) {
            Ok(()) => Sha256::digest(&bytes),
            // Kept as it always was: a prompt that cannot be serialized hashes as nothing.
            Err(_) => Sha256::digest(b""),
        };
        Request {
            kind: EntryKind::Model,
            fingerprint: TaggedHash::of(&digest).as_str().to_owned(),
            summary: null(),
        }
    }

    /// The summary of [`Request::model`]: `{"model", "messages": [{"role", "hash",
    /// "text"}], "tools": [names]}`, the text of each message cut to its first 120
    /// characters.
    pub fn model_summary(model: &str, prompt: &Prompt) -> Box<RawValue> {
        #[derive(Serialize)]
        struct Summary<'a> {
            model: &'a str,
            #[serde(serialize_with = "messages")]
            messages: &'a crate::Messages,
            #[serde(serialize_with = "tool_names")]
            tools: &'a [crate::ToolDefinition],
        }
        fn messages<S: Serializer>(messages: &&crate::Messages, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(messages.iter().map(MessageSummary))
        }
        fn tool_names<S: Serializer>(
            tools: &&[crate::ToolDefinition],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(tools.iter().map(|t| t.name.as_str()))
        }
        raw(&Summary {
            model,
            messages: &prompt.messages,
            tools: &prompt.tools,
        })
    }

    /// A tool call: `name` with `args`.
    pub fn tool(name: &str, args: &Value) -> Request {
        #[derive(Serialize)]
        struct Summary<'a> {
            tool: &'a str,
            args: &'a Value,
        }
        // The canonical form of `{"tool": name, "args": args}`, written without copying
        // `args` into an object first: keys sorted, so `args` comes first.
        let mut canonical = Vec::with_capacity(64);
        canonical.extend_from_slice(b"{\"args\":");
        write_canonical(args, &mut canonical);
        canonical.extend_from_slice(b",\"tool\":");
        write_json(name, &mut canonical);
        canonical.push(b'}');
        Request {
            kind: EntryKind::Tool,
            fingerprint: TaggedHash::of(&Sha256::digest(&canonical))
                .as_str()
                .to_owned(),
            summary: raw(&Summary { tool: name, args }),
        }
    }

    /// Any other request, summarized by itself.
    pub fn plain(kind: EntryKind, request: Value) -> Request {
        Request {
            kind,
            fingerprint: fingerprint(&request),
            summary: raw(&request),
        }
    }

    /// The entry recording `result` (JSON text: see
    /// [`to_raw_value`](serde_json::value::to_raw_value)) as this request's answer at
    /// `key`.
    pub fn entry(self, key: Key, result: Box<RawValue>) -> Entry {
        Entry {
            key,
            kind: self.kind,
            fingerprint: self.fingerprint,
            request: self.summary,
            result,
        }
    }
}

/// A message as a model request's summary lists it: `{"role", "hash", "text"}`.
struct MessageSummary<'a>(&'a Message);

impl Serialize for MessageSummary<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let content = self.0.content();
        let mut message = s.serialize_struct("Message", 3)?;
        message.serialize_field("role", self.0.role())?;
        message.serialize_field("hash", TaggedHash::of(&Sha256::digest(content)).as_str())?;
        message.serialize_field("text", &Preview(content))?;
        message.end()
    }
}

/// A text's first [`SUMMARY_CHARS`] characters, `…` after them when there were more (what
/// [`preview`](crate::preview) makes), written without a copy of the text.
struct Preview<'a>(&'a str);

impl Serialize for Preview<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.char_indices().nth(SUMMARY_CHARS) {
            None => s.serialize_str(self.0),
            Some((cut, _)) => s.collect_str(&format_args!("{}…", &self.0[..cut])),
        }
    }
}

/// JSON `null` as raw JSON text: an entry's request when there is no summary.
fn null() -> Box<RawValue> {
    Box::<RawValue>::default()
}

/// `value` as raw JSON text, for a summary. What summaries hold (strings, numbers, JSON
/// values) always serializes; anything else would be summarized as `null`.
fn raw<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| null())
}

/// `value` parsed for a diff. Raw JSON text is valid JSON; should it still not parse (nested
/// too deep), it is compared as its text.
fn summary_value(summary: &RawValue) -> Value {
    serde_json::from_str(summary.get()).unwrap_or_else(|_| Value::String(summary.get().to_owned()))
}

/// An [`Entry`] as a backend stores it: its request summary and result as JSON text, sealed
/// with a checksum over everything it holds.
///
/// Backends write [`Entry::seal`]'s fields and, reading, rebuild the entry with
/// [`Sealed::open`], which refuses one whose checksum does not match
/// ([`JournalError::ChecksumMismatch`]): a journal damaged after it was written is refused,
/// never replayed as a different result. The checksum is a CRC-32 of the key, kind,
/// fingerprint, request and result, each length-prefixed, so no change to one field can be
/// offset by another.
///
/// ```
/// use agent_op::journal::{Key, Request};
/// use serde_json::json;
///
/// let result = serde_json::value::to_raw_value(&json!({"Ok": 3})).unwrap();
/// let entry = Request::tool("weather", &json!({"city": "Oslo"})).entry(Key::run(), result);
/// assert_eq!(entry.checksum(), entry.seal().checksum);
/// let mut sealed = entry.seal();
/// assert_eq!(sealed.clone().open("run.jsonl", "line 2").unwrap(), entry);
/// sealed.result = r#"{"Ok":4}"#.to_owned();
/// assert!(sealed.open("run.jsonl", "line 2").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// Where the result was produced.
    pub key: Key,
    /// What produced it.
    pub kind: EntryKind,
    /// The request's [`fingerprint`].
    pub fingerprint: String,
    /// The request's summary, as compact JSON.
    pub request: String,
    /// The result, as compact JSON.
    pub result: String,
    /// The [`checksum`](Sealed::checksum_of) of all of the above.
    pub checksum: u32,
}

impl Entry {
    /// The entry as stored, with its checksum: see [`Sealed`].
    pub fn seal(&self) -> Sealed {
        Sealed::new(
            self.key.clone(),
            self.kind,
            self.fingerprint.clone(),
            self.request.get().to_owned(),
            self.result.get().to_owned(),
        )
    }

    /// The checksum [`seal`](Entry::seal) would store, without copying what the entry
    /// holds: for backends that write the entry's fields as they are.
    pub fn checksum(&self) -> u32 {
        Sealed::checksum_of(
            &self.key,
            self.kind,
            &self.fingerprint,
            self.request.get(),
            self.result.get(),
        )
    }
}

impl Sealed {
    /// Seals an entry given as its parts (`request` and `result` as JSON text).
    pub fn new(
        key: Key,
        kind: EntryKind,
        fingerprint: String,
        request: String,
        result: String,
    ) -> Sealed {
        let checksum = Sealed::checksum_of(&key, kind, &fingerprint, &request, &result);
        Sealed {
            key,
            kind,
            fingerprint,
            request,
            result,
            checksum,
        }
    }

    /// The checksum of an entry's parts: a CRC-32 over each of them, length-prefixed.
    pub fn checksum_of(
        key: &Key,
        kind: EntryKind,
        fingerprint: &str,
        request: &str,
        result: &str,
    ) -> u32 {
        let parts = [
            key.branch.as_bytes(),
            &key.seq.to_le_bytes(),
            kind.as_str().as_bytes(),
            fingerprint.as_bytes(),
            request.as_bytes(),
            result.as_bytes(),
        ];
        // Gathered into one buffer when they fit, then summed in one pass: the CRC is the
        // same, and crc32fast sums pieces shorter than 64 bytes (every length prefix, the
        // key, the kind) a byte at a time.
        let mut gathered = [0u8; 1024];
        let mut len = 0;
        for part in parts {
            let end = len + 8 + part.len();
            let Some(room) = gathered.get_mut(len..end) else {
                return Sealed::checksum_in_pieces(parts);
            };
            room[..8].copy_from_slice(&(part.len() as u64).to_le_bytes());
            room[8..].copy_from_slice(part);
            len = end;
        }
        crc32fast::hash(&gathered[..len])
    }

    /// [`checksum_of`](Sealed::checksum_of) of parts too large to gather.
    fn checksum_in_pieces(parts: [&[u8]; 6]) -> u32 {
        let mut crc = crc32fast::Hasher::new();
        for part in parts {
            crc.update(&(part.len() as u64).to_le_bytes());
            crc.update(part);
        }
        crc.finalize()
    }

    /// The entry, if its checksum matches and its request and result parse; otherwise a
    /// [`JournalError`] naming `journal` and the position `at` (`line 7`, `row 12`).
    pub fn open(self, journal: &str, at: impl fmt::Display) -> Result<Entry, JournalError> {
        let computed = Sealed::checksum_of(
            &self.key,
            self.kind,
            &self.fingerprint,
            &self.request,
            &self.result,
        );
        if computed != self.checksum {
            return Err(JournalError::ChecksumMismatch {
                journal: journal.to_owned(),
                at: at.to_string(),
                stored: self.checksum,
                computed,
            });
        }
        // Checked to be JSON, and kept as its text (no copy when it has no surrounding
        // whitespace): a replay parses it into the effect's own type.
        let parse = |what: &str, text: String| {
            RawValue::from_string(text).map_err(|e| JournalError::Malformed {
                journal: journal.to_owned(),
                at: format!("{at}, its {what}"),
                cause: Cause::new(e),
            })
        };
        Ok(Entry {
            request: parse("request", self.request)?,
            result: parse("result", self.result)?,
            key: self.key,
            kind: self.kind,
            fingerprint: self.fingerprint,
        })
    }
}

/// How many characters of a message a request summary keeps.
const SUMMARY_CHARS: usize = 120;

/// The fingerprint of a request (`sha256:<hex>`): the SHA-256 of its canonical JSON, with
/// object keys sorted (by their UTF-8 bytes) and no whitespace, so key order does not
/// matter. Cassettes fingerprint their requests the same way.
pub fn fingerprint(request: &Value) -> String {
    let mut canonical = Vec::with_capacity(64);
    write_canonical(request, &mut canonical);
    TaggedHash::of(&Sha256::digest(&canonical))
        .as_str()
        .to_owned()
}

/// JSON with object keys sorted (by their UTF-8 bytes) and no insignificant whitespace.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(key, out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_json(scalar, out),
    }
}

/// Compact JSON of `value`, appended to `out`.
fn write_json<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing strings and JSON scalars into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Where journals are kept: a file, a database table. Implementations must make an
/// [`append`](Journal::append) durable (by their own durability setting) before it returns:
/// the engine lets the program see a result only once its entry is appended (write-ahead).
///
/// A journal is written by one run at a time: opening one that another process is writing
/// fails with [`JournalError::Locked`].
pub trait Journal: Send + Sync {
    /// What the journal is, for messages (a path, a database and journal name).
    fn describe(&self) -> String;

    /// Every committed entry, in the order they were appended.
    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>>;

    /// Appends `entries`, in order, durably. Concurrent calls may be committed together
    /// (group commit); each returns once its own entries are durable.
    fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>>;
}

/// Why a journal could not be read or written. The driver's or the file system's error,
/// when there is one, is the [`source`](std::error::Error::source).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum JournalError {
    /// Reading or writing the journal's file failed.
    Io {
        /// The journal.
        journal: String,
        /// The `std::io::Error`.
        cause: Cause,
    },
    /// Part of the journal is not a journal entry.
    Malformed {
        /// The journal.
        journal: String,
        /// Where (`line 7`, `row 12`).
        at: String,
        /// What is wrong with it.
        cause: Cause,
    },
    /// The journal was written in a format version this library does not read.
    UnsupportedVersion {
        /// The journal.
        journal: String,
        /// The version the journal declares.
        found: u32,
    },
    /// Another process (or another open handle) is writing the journal.
    Locked {
        /// The journal.
        journal: String,
        /// Who holds it, when known.
        holder: Option<String>,
    },
    /// The database holding the journal failed, or is not a journal database.
    Database {
        /// The journal.
        journal: String,
        /// The driver's error.
        cause: Cause,
    },
    /// An entry's checksum does not match what it holds: the journal was damaged after it
    /// was written (see [`Sealed`]).
    ChecksumMismatch {
        /// The journal.
        journal: String,
        /// Where (`line 7`, `row 12`).
        at: String,
        /// The checksum stored with the entry.
        stored: u32,
        /// The checksum of what the entry holds.
        computed: u32,
    },
    /// The journal already holds entries (resume it, or start a new one).
    NotEmpty {
        /// The journal.
        journal: String,
        /// How many.
        entries: usize,
    },
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Io { journal, cause } | JournalError::Database { journal, cause } => {
                write!(f, "journal {journal}: {cause}")
            }
            JournalError::Malformed { journal, at, cause } => {
                write!(f, "journal {journal}, {at}: {cause}")
            }
            JournalError::UnsupportedVersion { journal, found } => {
                write!(
                    f,
                    "journal {journal} is format version {found}; this library reads version \
                     {JOURNAL_VERSION}"
                )?;
                if *found == 1 {
                    // The one older version there is: say why it is refused.
                    f.write_str(
                        " (version 1 entries carry no checksum, so damage to them could not \
                         be told from a recorded result)",
                    )?;
                }
                Ok(())
            }
            JournalError::Locked { journal, holder } => {
                write!(f, "journal {journal} is in use by another writer")?;
                match holder {
                    Some(holder) => write!(f, " ({holder})"),
                    None => Ok(()),
                }
            }
            JournalError::ChecksumMismatch {
                journal,
                at,
                stored,
                computed,
            } => write!(
                f,
                "journal {journal}, {at}: damaged: the entry's checksum is {stored:#010x} but \
                 what it holds sums to {computed:#010x}"
            ),
            JournalError::NotEmpty { journal, entries } => write!(
                f,
                "journal {journal} already holds {entries} entries; resume it or start a new one"
            ),
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Io { cause, .. }
            | JournalError::Malformed { cause, .. }
            | JournalError::Database { cause, .. } => Some(cause.get_ref()),
            _ => None,
        }
    }
}

/// Why a replay stopped: the program asked something other than what the journal recorded
/// at that position, or asked at a position the journal lacks.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// Where.
    pub key: Key,
    /// What the program asked there.
    pub requested: Request,
    /// What the journal holds there (`None`: nothing; the journal ends before).
    pub recorded: Option<Recorded>,
}

/// The recorded side of a [`Divergence`]: the request the journal holds at that position,
/// as it was recorded (its kind, fingerprint and summary).
pub type Recorded = Request;

impl Divergence {
    /// A short, readable account of how the two requests differ (at most a few lines).
    pub fn diff(&self) -> String {
        match &self.recorded {
            None => format!(
                "the journal has nothing here; the program asked for a {} call",
                self.requested.kind.as_str()
            ),
            Some(recorded) if recorded.kind != self.requested.kind => format!(
                "the journal recorded a {} call here; the program asked for a {} call",
                recorded.kind.as_str(),
                self.requested.kind.as_str()
            ),
            Some(recorded) => diff_requests(
                &summary_value(&recorded.summary),
                &summary_value(&self.requested.summary),
            ),
        }
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replay diverged at {}: ", self.key)?;
        match &self.recorded {
            Some(recorded) => write!(
                f,
                "recorded {} {}, requested {} {}",
                recorded.kind.as_str(),
                recorded.fingerprint,
                self.requested.kind.as_str(),
                self.requested.fingerprint
            )?,
            None => write!(
                f,
                "the journal ends before it (requested {} {})",
                self.requested.kind.as_str(),
                self.requested.fingerprint
            )?,
        }
        write!(f, "\n{}", self.diff())
    }
}

impl std::error::Error for Divergence {}

/// Where two journals first differ: see [`compare`].
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The position.
    pub key: Key,
    /// What the first journal holds there (`None`: nothing).
    pub left: Option<Recorded>,
    /// What the second journal holds there (`None`: nothing).
    pub right: Option<Recorded>,
}

impl Difference {
    /// A short, readable account of how the two requests differ.
    pub fn diff(&self) -> String {
        match (&self.left, &self.right) {
            (Some(l), Some(r)) if l.kind != r.kind => format!(
                "a {} call on the left, a {} call on the right",
                l.kind.as_str(),
                r.kind.as_str()
            ),
            (Some(l), Some(r)) => {
                diff_requests(&summary_value(&l.summary), &summary_value(&r.summary))
            }
            (Some(l), None) => format!("only the left journal has a {} call here", l.kind.as_str()),
            (None, Some(r)) => {
                format!("only the right journal has a {} call here", r.kind.as_str())
            }
            (None, None) => "neither journal has anything here".to_owned(),
        }
    }
}

/// The first position (in the left journal's commit order, then the right's) where two
/// journals hold different requests, or where only one holds an entry; `None` when both
/// asked the same questions everywhere (their answers may still differ). The run entries
/// (ids) are left out.
pub fn compare(left: &[Entry], right: &[Entry]) -> Option<Difference> {
    use std::collections::HashMap;
    let index = |entries: &[Entry]| -> HashMap<Key, Recorded> {
        entries
            .iter()
            .filter(|e| e.kind != EntryKind::Run)
            .map(|e| {
                (
                    e.key.clone(),
                    Recorded {
                        kind: e.kind,
                        fingerprint: e.fingerprint.clone(),
                        summary: e.request.clone(),
                    },
                )
            })
            .collect()
    };
    let (l, r) = (index(left), index(right));
    let keys = left
        .iter()
        .chain(right)
        .filter(|e| e.kind != EntryKind::Run)
        .map(|e| &e.key);
    for key in keys {
        let (a, b) = (l.get(key), r.get(key));
        let same = match (a, b) {
            (Some(a), Some(b)) => a.kind == b.kind && a.fingerprint == b.fingerprint,
            _ => false,
        };
        if !same {
            return Some(Difference {
                key: key.clone(),
                left: a.cloned(),
                right: b.cloned(),
            });
        }
    }
    None
}

/// How many differing places [`diff_requests`] lists.
const DIFF_LINES: usize = 6;

/// The places where two request summaries differ, one per line (`path: recorded → requested`),
/// at most a few; equal summaries (the fingerprints differ in what summaries leave out, such
/// as tool schemas or sampling options) say so.
pub fn diff_requests(recorded: &Value, requested: &Value) -> String {
    let mut lines = Vec::new();
    let mut more = 0usize;
    walk_diff("", recorded, requested, &mut lines, &mut more);
    if lines.is_empty() {
        return "the summaries match: the requests differ in their tool definitions or options"
            .to_owned();
    }
    if more > 0 {
        lines.push(format!("… and {more} more"));
    }
    lines.join("\n")
}

fn walk_diff(path: &str, a: &Value, b: &Value, lines: &mut Vec<String>, more: &mut usize) {
    if a == b {
        return;
    }
    let child = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            // A changed message is told by its text, not by its hash as well.
            let changed_text = x.get("text") != y.get("text");
            for (key, va) in x {
                if key == "hash" && changed_text {
                    continue;
                }
                let vb = y.get(key).unwrap_or(&Value::Null);
                walk_diff(&child(key), va, vb, lines, more);
            }
            for (key, vb) in y {
                if !x.contains_key(key) {
                    walk_diff(&child(key), &Value::Null, vb, lines, more);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let path = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => walk_diff(&path, va, vb, lines, more),
                    (Some(va), None) => {
                        push_line(lines, more, format!("{path}: {} → (none)", show(va)))
                    }
                    (None, Some(vb)) => {
                        push_line(lines, more, format!("{path}: (none) → {}", show(vb)))
                    }
                    (None, None) => {}
                }
            }
        }
        _ => {
            let (shown_a, shown_b) = match (a, b) {
                // Long texts that differ late would show two equal beginnings.
                (Value::String(x), Value::String(y)) => {
                    let (x, y) = crate::difference_excerpts(x, y);
                    (format!("{x:?}"), format!("{y:?}"))
                }
                _ => (show(a), show(b)),
            };
            push_line(
                lines,
                more,
                format!(
                    "{}: {shown_a} → {shown_b}",
                    if path.is_empty() { "request" } else { path },
                ),
            )
        }
    }
}

fn push_line(lines: &mut Vec<String>, more: &mut usize, line: String) {
    if lines.len() < DIFF_LINES {
        lines.push(line);
    } else {
        *more += 1;
    }
}

fn show(value: &Value) -> String {
    preview(&value.to_string(), 80)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Entries small enough to be gathered and too large to be are summed alike, and as
    /// stored journals were: the checksum of a fixed entry is pinned.
    #[test]
    fn checksums_do_not_depend_on_how_the_parts_are_summed() {
        let key = Key {
            branch: "0.3".to_owned(),
            seq: 7,
        };
        let pinned = Sealed::checksum_of(&key, EntryKind::Tool, "sha256:ab", "{}", "null");
        assert_eq!(pinned, 0xe0d9_c488, "{pinned:#x}");
        for size in [0, 10, 400, 900, 1000, 5000] {
            let text = "x".repeat(size);
            let result = format!("\"{text}\"");
            let parts = [
                key.branch.as_bytes(),
                &key.seq.to_le_bytes(),
                EntryKind::Model.as_str().as_bytes(),
                b"sha256:ab",
                b"{}",
                result.as_bytes(),
            ];
            assert_eq!(
                Sealed::checksum_of(&key, EntryKind::Model, "sha256:ab", "{}", &result),
                Sealed::checksum_in_pieces(parts),
                "{size}"
            );
        }
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
        let mut out = Vec::new();
        write_canonical(&json!({"b": [{"z": 1, "a": "x\"y"}], "a": null}), &mut out);
        assert_eq!(out, br#"{"a":null,"b":[{"a":"x\"y","z":1}]}"#);
    }

    #[test]
    fn a_changed_prompt_diffs_by_message_text() {
        let recorded = Request::model("m", &Prompt::new().system("Be brief.").user("Plan Oslo"));
        let requested = Request::model("m", &Prompt::new().system("Be brief.").user("Plan Rome"));
        assert_ne!(recorded.fingerprint, requested.fingerprint);
        let (recorded, requested, longer) = (
            summary_value(&recorded.summary),
            summary_value(&requested.summary),
            summary_value(&Request::model("n", &Prompt::new().system("Be brief.")).summary),
        );
        let diff = diff_requests(&recorded, &requested);
        assert_eq!(diff, r#"messages[1].text: "Plan Oslo" → "Plan Rome""#);
        let diff = diff_requests(&recorded, &longer);
        assert!(diff.contains(r#"model: "m" → "n""#), "{diff}");
        assert!(diff.contains("messages[1]: "), "{diff}");
    }

    #[test]
    fn an_unsummarized_model_request_has_the_same_fingerprint() {
        let prompt = Prompt::new().user("hi");
        let full = Request::model("m", &prompt);
        let quick = Request::model_unsummarized("m", &prompt);
        assert_eq!(full.fingerprint, quick.fingerprint);
        assert_eq!(quick.summary.get(), "null");
        assert_eq!(
            full.summary.get(),
            Request::model_summary("m", &prompt).get()
        );
    }

    /// Fingerprints and summaries as journals already on disk hold them: a change to either
    /// would make every recorded run diverge (or diff noisily) on replay.
    #[test]
    fn requests_fingerprint_and_summarize_as_recorded_journals_do() {
        let long = format!("{}\"quoted\"\n\ttabbed ünïcode 🙂 end", "x".repeat(130));
        let prompt = Prompt::new()
            .system("Be brief.")
            .user(long)
            .tools(vec![crate::ToolDefinition {
                name: "weather".into(),
                description: "w".into(),
                parameters: json!({"type": "object"}),
            }])
            .temperature(0.5);
        let model = Request::model("gpt-4o", &prompt);
        assert_eq!(
            model.fingerprint,
            "sha256:ff98f8be3a7e1941be9ef78d6fd5831a89db9030732b97f29d66a0c015c4668a"
        );
        assert_eq!(
            model.summary.to_string(),
            format!(
                r#"{{"model":"gpt-4o","messages":[{{"role":"system","hash":"sha256:213c22ed7234eb11116e1e88f314c73cb3a019b5c87fe224b6ce5665bd9ec50e","text":"Be brief."}},{{"role":"user","hash":"sha256:6101045d9afb0c18c1e3e42bd3b0de4531973bd0f4946a50704d49fa92fd16a1","text":"{}…"}}],"tools":["weather"]}}"#,
                "x".repeat(120)
            )
        );
        let tool = Request::tool(
            "weather",
            &json!({"z": 1, "city": "Oslo", "nested": {"b": [1, 2.5, null], "a": "\u{1}é"}}),
        );
        assert_eq!(
            tool.fingerprint,
            "sha256:045caff5c1757727e59ac72fa4a520393a10b24ad2570ec99c8c6876c90063e9"
        );
        assert_eq!(
            tool.summary.to_string(),
            r#"{"tool":"weather","args":{"z":1,"city":"Oslo","nested":{"b":[1,2.5,null],"a":"\u0001é"}}}"#
        );
        assert_eq!(
            fingerprint(&json!({"b": [{"z": 1, "a": "x\"y"}], "a": null, "c": -3, "d": 1e300})),
            "sha256:207c9cdb367dee870ae4cad9af12ae6149c017ae371f57d342ef5f39b68b647f"
        );
    }

    #[test]
    fn summaries_cut_texts_as_previews_do() {
        for text in [
            String::new(),
            "é".repeat(SUMMARY_CHARS),
            "é".repeat(SUMMARY_CHARS + 1),
            format!("{}\"\n🙂", "a".repeat(SUMMARY_CHARS - 2)),
            format!("{}\u{7}", "\\".repeat(SUMMARY_CHARS + 5)),
        ] {
            let written = serde_json::to_string(&Preview(&text)).unwrap();
            assert_eq!(
                written,
                serde_json::to_string(&preview(&text, SUMMARY_CHARS)).unwrap()
            );
        }
    }

    #[test]
    fn a_changed_tool_call_diffs_by_argument() {
        let recorded = Request::tool("weather", &json!({"city": "Oslo", "days": 3}));
        let requested = Request::tool("weather", &json!({"city": "Rome", "days": 3}));
        let divergence = Divergence {
            key: Key {
                branch: "1".into(),
                seq: 4,
            },
            requested,
            recorded: Some(Recorded {
                kind: recorded.kind,
                fingerprint: recorded.fingerprint,
                summary: recorded.summary,
            }),
        };
        let text = divergence.to_string();
        assert!(text.starts_with("replay diverged at branch 1, effect 4: recorded tool sha256:"));
        assert!(text.ends_with(r#"args.city: "Oslo" → "Rome""#), "{text}");
    }

    #[test]
    fn journals_compare_at_their_first_different_request() {
        let at = |seq| Key {
            branch: String::new(),
            seq,
        };
        let a = vec![
            Request::tool("t", &json!({"n": 1})).entry(at(0), raw(&1)),
            Request::tool("t", &json!({"n": 2})).entry(at(1), raw(&2)),
        ];
        assert_eq!(compare(&a, &a), None);
        let mut b = a.clone();
        b[1] = Request::tool("t", &json!({"n": 3})).entry(at(1), raw(&2));
        let d = compare(&a, &b).unwrap();
        assert_eq!(d.key, at(1));
        assert_eq!(d.diff(), "args.n: 2 → 3");
        let d = compare(&a[..1], &a).unwrap();
        assert_eq!(d.diff(), "only the right journal has a tool call here");
    }

    #[test]
    fn many_differences_are_cut_short() {
        let a = json!((0..10).collect::<Vec<_>>());
        let b = json!((10..20).collect::<Vec<_>>());
        let diff = diff_requests(&a, &b);
        assert_eq!(diff.lines().count(), DIFF_LINES + 1);
        assert!(diff.ends_with("… and 4 more"), "{diff}");
    }

    #[test]
    fn entry_kinds_name_themselves() {
        for kind in [
            EntryKind::Run,
            EntryKind::Model,
            EntryKind::Tool,
            EntryKind::Recall,
            EntryKind::Memory,
            EntryKind::Steering,
            EntryKind::Clock,
            EntryKind::Random,
            EntryKind::Outcome,
            EntryKind::Checkpoint,
        ] {
            assert_eq!(EntryKind::parse(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                Value::String(kind.as_str().into())
            );
        }
    }
}
