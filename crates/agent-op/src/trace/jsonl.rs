//! Traces as JSON Lines: write, read back, and append one event at a time.
//!
//! Format version 3 (see `docs/TRACE_FORMAT.md`): every line is one JSON object with `"v": 3`.
//! Files of versions 1 and 2 (earlier subsets of version 3) still read.
//! An optional header line carries the trace's metadata, every other line one event:
//!
//! ```text
//! {"v":3,"trace":{"id":"brave-otter-3f2a","start":"2026-11-22T10:00:00Z","end":"2026-11-22T10:00:02Z"}}
//! {"v":3,"trace_id":"brave-otter-3f2a","event":{"at":"2026-11-22T10:00:00.1Z","type":"infer_start","data":{..}}}
//! {"v":3,"trace_id":"brave-otter-3f2a.0","cancelled":true,"event":{..}}
//! ```
//!
//! Readers never panic on bad input. A last line torn by a crash (no final newline and not
//! parseable) is reported in [`ReadTrace::torn`] while every complete event is returned; any
//! other malformed line is an error naming its line number.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::serde_util::is_false;
use crate::trace::content::{ContentStore, ContentWriter};
use crate::trace::{Event, Timestamp, Trace, TraceEntry, TraceId};

/// The trace format version this library writes (and the newest it reads).
pub const FORMAT_VERSION: u32 = 3;

/// The oldest trace format version this library reads: every version from this one to
/// [`FORMAT_VERSION`] reads (each adds to the one before).
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// Whether lines of version `v` read.
fn readable(v: u64) -> bool {
    (u64::from(OLDEST_READABLE_VERSION)..=u64::from(FORMAT_VERSION)).contains(&v)
}

/// Why a JSONL trace could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// Reading or writing the file failed.
    #[error("trace file I/O failed: {0}")]
    Io(#[from] io::Error),
    /// A line (other than a torn last line) is not a valid trace line.
    #[error("line {line}{}: {message}", column_text(*column))]
    Malformed {
        /// The 1-based line number in the file.
        line: usize,
        /// The 1-based column (byte) in that line where the problem was found, when known.
        column: Option<usize>,
        /// What is wrong with it.
        message: String,
        /// The JSON parser's error, when the line is not valid JSON or not a valid event
        /// (its own position counts from the start of the line's JSON).
        #[source]
        source: Option<serde_json::Error>,
    },
    /// A line was written by an incompatible version of the format.
    #[error(
        "line {line}: trace format version {version} is not supported (this library reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The 1-based line number.
        line: usize,
        /// The version found.
        version: u64,
    },
    /// The input holds neither a header nor any event, so there is no trace to return.
    #[error("the input holds no trace")]
    Empty,
}

/// `, column N` when there is one.
fn column_text(column: Option<usize>) -> String {
    column.map(|c| format!(", column {c}")).unwrap_or_default()
}

/// A last line cut short by a crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornLine {
    /// Its 1-based line number.
    pub line: usize,
    /// How many bytes of it were there.
    pub bytes: usize,
}

/// A trace read from JSONL.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadTrace {
    /// The trace, with every complete event.
    pub trace: Trace,
    /// The torn last line, if the writer crashed mid-line.
    pub torn: Option<TornLine>,
}

#[derive(Serialize)]
struct HeaderLine<'a> {
    v: u32,
    trace: HeaderRef<'a>,
}

#[derive(Serialize)]
struct HeaderRef<'a> {
    id: &'a TraceId,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<&'a TraceId>,
    start: &'a Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<&'a Timestamp>,
}

#[derive(Serialize)]
struct EntryLine<'a> {
    v: u32,
    trace_id: &'a TraceId,
    #[serde(skip_serializing_if = "is_false")]
    cancelled: bool,
    event: &'a Event,
}

#[derive(Deserialize)]
struct Header {
    id: TraceId,
    #[serde(default)]
    parent_id: Option<TraceId>,
    start: Timestamp,
    #[serde(default)]
    end: Option<Timestamp>,
}

#[derive(Deserialize)]
struct AnyLine<'a> {
    v: u64,
    #[serde(borrow, default)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(default)]
    cancelled: bool,
    #[serde(default)]
    event: Option<Event>,
    #[serde(default)]
    trace: Option<Header>,
    #[serde(borrow, default)]
    content: Option<ContentLine<'a>>,
}

/// A piece of content that events of the file name by hash (format version 3).
#[derive(Deserialize)]
struct ContentLine<'a> {
    #[serde(borrow)]
    hash: Cow<'a, str>,
    #[serde(borrow)]
    value: &'a serde_json::value::RawValue,
}

/// Just the version of a line, to name the version of a line that does not parse as this one.
#[derive(Deserialize)]
struct VersionOnly {
    v: u64,
}

/// Writes one event line, preceded by a content line for each piece of content it holds that
/// the file does not hold yet.
fn write_entry_line<W: Write>(
    w: &mut W,
    entry: &TraceEntry,
    content: &mut ContentWriter,
) -> io::Result<()> {
    let line = EntryLine {
        v: FORMAT_VERSION,
        trace_id: &entry.trace_id,
        cancelled: entry.cancelled,
        event: &entry.event,
    };
    if !entry.event.kind.has_shared_content() {
        serde_json::to_writer(&mut *w, &line)?;
        return w.write_all(b"\n");
    }
    let (text, fresh) = content.serialize(|| serde_json::to_vec(&line));
    let text = text?;
    for (hash, value) in fresh {
        // The hash is ASCII and the value JSON text: written as they are.
        write!(
            w,
            "{{\"v\":{FORMAT_VERSION},\"content\":{{\"hash\":\"{hash}\",\"value\":"
        )?;
        w.write_all(value.as_bytes())?;
        w.write_all(b"}}\n")?;
    }
    w.write_all(&text)?;
    w.write_all(b"\n")
}

/// Writes `trace` as JSONL: a header line, then one line per event.
pub fn write_jsonl<W: Write>(trace: &Trace, writer: W) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(64 * 1024, writer);
    let header = HeaderLine {
        v: FORMAT_VERSION,
        trace: HeaderRef {
            id: &trace.id,
            parent_id: trace.parent_id.as_ref(),
            start: &trace.start,
            end: trace.end.as_ref(),
        },
    };
    serde_json::to_writer(&mut w, &header)?;
    w.write_all(b"\n")?;
    let mut content = ContentWriter::default();
    for entry in &trace.events {
        write_entry_line(&mut w, entry, &mut content)?;
    }
    w.flush()
}

/// Writes `trace` to `path`, replacing it atomically: a crash leaves either the old file or
/// the complete new one.
pub fn write_trace_file(path: impl AsRef<Path>, trace: &Trace) -> io::Result<()> {
    let path = path.as_ref();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let file = File::create(&tmp)?;
    write_jsonl(trace, &file)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

enum Parsed {
    Header(Header),
    Entry(TraceEntry),
    /// A content line, added to the file's store.
    Content,
}

/// Parses one line. `last_id` lets consecutive lines of one branch share a single id
/// allocation.
fn parse_line(
    bytes: &[u8],
    last_id: &mut Option<TraceId>,
    store: &mut ContentStore,
) -> Result<Parsed, LineError> {
    let line = store.deserialize(|| serde_json::from_slice::<AnyLine<'_>>(bytes));
    let line: AnyLine<'_> = line.map_err(|e| {
        // A line of another version may not fit this version's shape (a new event type, say):
        // report the version, not the mismatch.
        match serde_json::from_slice::<VersionOnly>(bytes) {
            Ok(VersionOnly { v }) if !readable(v) => LineError::Version(v),
            _ => LineError::Json(e),
        }
    })?;
    if !readable(line.v) {
        return Err(LineError::Version(line.v));
    }
    if let Some(content) = line.content {
        if line.trace.is_some() || line.trace_id.is_some() || line.event.is_some() {
            return Err(LineError::Malformed(
                "a content line holds nothing but `content`".into(),
            ));
        }
        store
            .add(&content.hash, content.value.get())
            .map_err(LineError::Malformed)?;
        return Ok(Parsed::Content);
    }
    match (line.trace, line.trace_id, line.event) {
        (Some(header), None, None) => Ok(Parsed::Header(header)),
        (None, Some(id), Some(event)) => {
            let trace_id = match last_id {
                Some(last) if last.as_str() == id => last.clone(),
                _ => {
                    let fresh = TraceId::from(id.as_ref());
                    *last_id = Some(fresh.clone());
                    fresh
                }
            };
            Ok(Parsed::Entry(TraceEntry {
                trace_id,
                cancelled: line.cancelled,
                event,
            }))
        }
        _ => Err(LineError::Malformed(
            "a line must hold either `trace` (a header) or `trace_id` and `event`".into(),
        )),
    }
}

enum LineError {
    /// Not valid JSON, or not the shape of a trace line.
    Json(serde_json::Error),
    /// Valid, but not a header or an event line.
    Malformed(String),
    Version(u64),
}

impl LineError {
    /// The error for this line (`line` in the file, whose first `indent` bytes were
    /// whitespace the parser did not see).
    fn at(self, line: usize, indent: usize) -> JsonlError {
        match self {
            LineError::Json(e) => {
                // The parser counts from the start of what it was given, one line; say where
                // in the file instead, and keep its message without its own position.
                let column = (e.line() == 1 && e.column() > 0).then(|| e.column() + indent);
                let text = e.to_string();
                let own_position = format!(" at line {} column {}", e.line(), e.column());
                let message = text.strip_suffix(&own_position).unwrap_or(&text).to_owned();
                JsonlError::Malformed {
                    line,
                    column,
                    message,
                    source: Some(e),
                }
            }
            LineError::Malformed(message) => JsonlError::Malformed {
                line,
                column: None,
                message,
                source: None,
            },
            LineError::Version(version) => JsonlError::UnsupportedVersion { line, version },
        }
    }
}

/// Reads a JSONL trace. See the module docs for how torn and malformed lines are handled.
pub fn read_jsonl<R: BufRead>(reader: R) -> Result<ReadTrace, JsonlError> {
    match read_lines(reader, false)? {
        (read, None) => Ok(read),
        (_, Some(error)) => Err(error),
    }
}

/// Reads the readable prefix of a JSONL trace: every event before the first malformed line
/// (or line of an unreadable version), and that line's error. Fails only when not even a
/// prefix can be had (an I/O error, no event at all).
pub fn read_jsonl_prefix<R: BufRead>(
    reader: R,
) -> Result<(ReadTrace, Option<JsonlError>), JsonlError> {
    read_lines(reader, true)
}

fn read_lines<R: BufRead>(
    mut reader: R,
    lenient: bool,
) -> Result<(ReadTrace, Option<JsonlError>), JsonlError> {
    let mut stopped = None;
    let mut header: Option<Header> = None;
    let mut events = Vec::new();
    let mut torn = None;
    let mut buf = Vec::with_capacity(1024);
    let mut last_id = None;
    let mut store = ContentStore::default();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        let content = buf.trim_ascii();
        if content.is_empty() {
            continue;
        }
        match parse_line(content, &mut last_id, &mut store) {
            Ok(Parsed::Entry(entry)) => events.push(entry),
            Ok(Parsed::Content) => {}
            Ok(Parsed::Header(h)) => match &header {
                None => header = Some(h),
                Some(existing) if existing.id == h.id => {}
                Some(existing) => {
                    let error = JsonlError::Malformed {
                        line: line_no,
                        column: None,
                        message: format!(
                            "header for trace `{}` in a file of trace `{}`",
                            h.id, existing.id
                        ),
                        source: None,
                    };
                    if !lenient {
                        return Err(error);
                    }
                    stopped = Some(error);
                    break;
                }
            },
            // A complete line of another version is not torn, even without its newline.
            Err(LineError::Malformed(_) | LineError::Json(_)) if !complete => {
                torn = Some(TornLine {
                    line: line_no,
                    bytes: buf.len(),
                });
                break;
            }
            Err(e) => {
                let indent = buf.len() - buf.trim_ascii_start().len();
                let error = e.at(line_no, indent);
                if !lenient {
                    return Err(error);
                }
                stopped = Some(error);
                break;
            }
        }
    }
    let trace = match header {
        Some(h) => Trace {
            id: h.id,
            parent_id: h.parent_id,
            start: h.start,
            end: h.end,
            events,
        },
        None => {
            let Some(first) = events.first() else {
                // Nothing readable: the bad line, if any, is the news.
                return Err(stopped.unwrap_or(JsonlError::Empty));
            };
            let id = TraceId::from(first.trace_id.root());
            let start = events
                .iter()
                .map(|e| e.event.at)
                .min()
                .unwrap_or(first.event.at);
            Trace {
                id,
                parent_id: None,
                start,
                end: None,
                events,
            }
        }
    };
    Ok((ReadTrace { trace, torn }, stopped))
}

/// Reads the readable prefix of a JSONL trace file (see [`read_jsonl_prefix`]).
pub fn read_trace_file_prefix(
    path: impl AsRef<Path>,
) -> Result<(ReadTrace, Option<JsonlError>), JsonlError> {
    read_jsonl_prefix(BufReader::with_capacity(
        64 * 1024,
        File::open(path.as_ref())?,
    ))
}

/// Reads a JSONL trace file.
pub fn read_trace_file(path: impl AsRef<Path>) -> Result<ReadTrace, JsonlError> {
    read_jsonl(BufReader::with_capacity(
        64 * 1024,
        File::open(path.as_ref())?,
    ))
}

/// Appends events to a JSONL trace file as they happen, for streaming writes.
///
/// Opening repairs a file whose last line was torn by a crash: a complete last line that only
/// lacks its newline gets one; a fragment that holds no complete event is cut off (and
/// reported), so new lines never fuse with it.
#[derive(Debug)]
pub struct JsonlAppender {
    file: BufWriter<File>,
    /// Content this appender wrote (content an earlier writer wrote is written again: a
    /// repeated content line is harmless).
    content: ContentWriter,
}

impl JsonlAppender {
    /// Opens (or creates) `path` for appending. Returns the appender and the torn line that
    /// was cut off, if any. Fails with [`JsonlError::UnsupportedVersion`], leaving the file
    /// as it is, if its last line is a complete line of another format version.
    pub fn open(path: impl AsRef<Path>) -> Result<(JsonlAppender, Option<TornLine>), JsonlError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.as_ref())?;
        let torn = repair_tail(&mut file)?;
        file.seek(SeekFrom::End(0))?;
        Ok((
            JsonlAppender {
                file: BufWriter::new(file),
                content: ContentWriter::default(),
            },
            torn,
        ))
    }

    /// Writes a header line for `trace` (its id, parent, start and end).
    pub fn write_header(&mut self, trace: &Trace) -> Result<(), JsonlError> {
        let header = HeaderLine {
            v: FORMAT_VERSION,
            trace: HeaderRef {
                id: &trace.id,
                parent_id: trace.parent_id.as_ref(),
                start: &trace.start,
                end: trace.end.as_ref(),
            },
        };
        serde_json::to_writer(&mut self.file, &header).map_err(io::Error::from)?;
        self.file.write_all(b"\n")?;
        Ok(())
    }

    /// Appends one event line (buffered; see [`JsonlAppender::flush`]).
    pub fn append(&mut self, entry: &TraceEntry) -> Result<(), JsonlError> {
        write_entry_line(&mut self.file, entry, &mut self.content)?;
        Ok(())
    }

    /// Pushes buffered lines to the operating system.
    pub fn flush(&mut self) -> Result<(), JsonlError> {
        self.file.flush()?;
        Ok(())
    }

    /// Flushes, then asks the operating system to put the lines on the disk (`fsync` of the
    /// data), so they survive a power loss too.
    pub fn sync(&mut self) -> Result<(), JsonlError> {
        self.file.flush()?;
        self.file.get_ref().sync_data()?;
        Ok(())
    }
}

/// Appends one event of trace `trace_id` to the file at `path` (creating it), flushing it.
pub fn append_event(
    path: impl AsRef<Path>,
    trace_id: &TraceId,
    event: &Event,
) -> Result<(), JsonlError> {
    let (mut appender, _torn) = JsonlAppender::open(path)?;
    appender.append(&TraceEntry {
        trace_id: trace_id.clone(),
        cancelled: false,
        event: event.clone(),
    })?;
    appender.flush()
}

/// Makes sure the file ends with a newline after its last complete line; see
/// [`JsonlAppender::open`].
fn repair_tail(file: &mut File) -> Result<Option<TornLine>, JsonlError> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(None);
    }
    // Find the start of the last line by scanning backwards in chunks.
    let mut tail_start = 0u64;
    let mut pos = len;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut last_byte_checked = false;
    'scan: while pos > 0 {
        let n = chunk.len().min(pos as usize);
        pos -= n as u64;
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut chunk[..n])?;
        if !last_byte_checked {
            if chunk[n - 1] == b'\n' {
                return Ok(None);
            }
            last_byte_checked = true;
        }
        if let Some(i) = chunk[..n].iter().rposition(|&b| b == b'\n') {
            tail_start = pos + i as u64 + 1;
            break 'scan;
        }
    }
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(tail_start))?;
    file.read_to_end(&mut tail)?;
    let lines_before = count_lines(file, tail_start)?;
    let line = tail.trim_ascii();
    // An event line naming content of earlier lines does not parse on its own; it is
    // complete all the same (a torn fragment is never a whole JSON object).
    let whole = |line: &[u8]| {
        serde_json::from_slice::<VersionOnly>(line).is_ok_and(|VersionOnly { v }| readable(v))
    };
    match parse_line(line, &mut None, &mut ContentStore::default()) {
        Err(LineError::Malformed(_) | LineError::Json(_)) if whole(line) => {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
            Ok(None)
        }
        Ok(_) => {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
            Ok(None)
        }
        // A complete line of another version: appending to the file would mix versions, and
        // cutting the line would lose it.
        Err(LineError::Version(version)) => Err(JsonlError::UnsupportedVersion {
            line: lines_before + 1,
            version,
        }),
        Err(LineError::Malformed(_) | LineError::Json(_)) => {
            file.set_len(tail_start)?;
            Ok(Some(TornLine {
                line: lines_before + 1,
                bytes: tail.len(),
            }))
        }
    }
}

fn count_lines(file: &mut File, upto: u64) -> io::Result<usize> {
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::new(file.take(upto));
    let mut count = 0;
    let mut buf = Vec::new();
    while reader.read_until(b'\n', &mut buf)? > 0 {
        count += 1;
        buf.clear();
    }
    Ok(count)
}
