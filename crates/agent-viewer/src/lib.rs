//! The HTML trace viewer: one self-contained page (no network) per trace.
//!
//! [`render`] writes an HTML document holding the trace as JSON and the script and styles
//! that draw it: totals, a timeline with one lane per run or branch, the events as a tree
//! grouped by branch with details on click, and search. Everything is derived in the browser
//! from the embedded JSON, so the file can be mailed or archived and still shows exactly the
//! trace it holds, and the trace can be read back out of it:
//!
//! - `<script type="application/json" id="trace-data" data-events="N">` holds the trace's
//!   serialization (`docs/TRACE_FORMAT.md`) without its `events`;
//! - the events follow, in order, as JSON arrays of entries in
//!   `<script type="application/json" class="trace-events">` elements (about 512 KiB each);
//!   concatenated, they are the trace's `events`.
//!
//! The page is built for large traces: the event list renders only the rows in view, lanes are
//! virtualized past a thousand, and search text is indexed while the page is idle.
//!
//! Its DOM is stable for tests and tools: `#totals` carries the figures as `data-*`
//! attributes (`data-events`, `data-calls`, `data-tools`, `data-cancelled`, ...), `#lanes`
//! holds one `.lane` per run or branch (`.lane.cancelled` for cancelled ones), and
//! `body[data-rendered="1"]` with `data-render-ms` marks the first complete render. The URL's
//! fragment holds the view's filters and selection (`#q=…&type=…&branch=…&event=…`).

use std::io::{self, Write};

use agent_op::Trace;

/// The page, with `{{name}}` markers where [`render`] puts its parts.
const TEMPLATE: &str = include_str!("viewer.html");
const STYLE: &str = include_str!("viewer.css");
const SCRIPT: &str = include_str!("viewer.js");

/// The viewer page for `trace`, titled `title`: one HTML document with its data, script
/// and styles inline.
///
/// ```
/// use agent_op::{Trace, TraceId};
/// let page = agent_viewer::render(&Trace::new(TraceId::from("calm-owl-0001")), "a run");
/// assert!(page.starts_with("<!DOCTYPE html>"));
/// assert!(page.contains(r#"<script type="application/json" id="trace-data" data-events="0">"#));
/// ```
pub fn render(trace: &Trace, title: &str) -> String {
    // The JSON dominates the page; a guess at its size saves most regrowth of the buffer.
    let estimate = TEMPLATE.len() + STYLE.len() + SCRIPT.len() + 256 + trace.events.len() * 480;
    let mut page: Vec<u8> = Vec::with_capacity(estimate);
    let mut rest = TEMPLATE;
    // Markers are found in the template only, never in what replaced them, so trace text
    // that happens to contain `{{title}}` stays as it is.
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        page.extend_from_slice(&rest.as_bytes()[..start]);
        match &rest[start + 2..start + len] {
            "title" => escape_html(&mut page, title),
            "style" => page.extend_from_slice(STYLE.as_bytes()),
            "script" => page.extend_from_slice(SCRIPT.as_bytes()),
            "data" => write_data(&mut page, trace),
            other => {
                page.extend_from_slice(b"{{");
                page.extend_from_slice(other.as_bytes());
                page.extend_from_slice(b"}}");
            }
        }
        rest = &rest[start + len + 2..];
    }
    page.extend_from_slice(rest.as_bytes());
    // Only UTF-8 went in (the template, escaped text, serde_json's output), so the lossy
    // branch is never taken; it just spares a panic path.
    String::from_utf8(page).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Events per `trace-events` element are cut at about this many bytes of JSON.
const CHUNK_BYTES: usize = 512 * 1024;

/// Writes the trace as JSON elements that no text in it can end: `#trace-data` with the trace
/// without its events, then the events in `.trace-events` arrays.
///
/// The events are split because Chromium appends each parsed piece of a long `<script>` to
/// one growing text node: a single 46 MB element (100,000 events) took 1.1 s to parse, the
/// same bytes in 512 KiB elements a third of that.
fn write_data(page: &mut Vec<u8>, trace: &Trace) {
    let mark = page.len();
    if let Err(error) = write_elements(page, trace) {
        // A trace that cannot be serialized still gets a page, which says why it is empty.
        page.truncate(mark);
        let message =
            serde_json::json!({ "error": format!("the trace could not be serialized: {error}") });
        page.extend_from_slice(DATA_OPEN.as_bytes());
        page.extend_from_slice(b" data-events=\"0\">");
        // Serializing a map holding one string cannot fail; were it to, the page shows
        // "no trace" instead.
        let _ = serde_json::to_writer(ScriptSafe(&mut *page), &message);
        page.extend_from_slice(b"</script>");
    }
}

const DATA_OPEN: &str = r#"<script type="application/json" id="trace-data""#;
const EVENTS_OPEN: &[u8] = br#"<script type="application/json" class="trace-events">["#;
const CONTENT_OPEN: &[u8] = br#"<script type="application/json" id="trace-content">["#;

/// The messages, tools and replies of a page, each once: events name them by their index
/// here, so a long conversation's page grows with the conversation, not with its square (each
/// model call resends everything before it).
#[derive(Default)]
struct Contents {
    index: std::collections::HashMap<String, usize>,
    texts: Vec<String>,
}

impl Contents {
    /// Replaces `value` by the index of its content.
    fn intern(&mut self, value: &mut serde_json::Value) {
        let text = value.to_string();
        let next = self.texts.len();
        let index = *self.index.entry(text.clone()).or_insert(next);
        if index == next {
            self.texts.push(text);
        }
        *value = serde_json::Value::from(index);
    }

    /// The entry's JSON with its prompt's messages and tools, and its reply, as indices.
    fn entry(&mut self, entry: &agent_op::TraceEntry) -> serde_json::Result<serde_json::Value> {
        let mut value = serde_json::to_value(entry)?;
        let data = &mut value["event"]["data"];
        for list in ["messages", "tools"] {
            if let Some(items) = data
                .get_mut("prompt")
                .and_then(|p| p.get_mut(list))
                .and_then(serde_json::Value::as_array_mut)
            {
                items.iter_mut().for_each(|item| self.intern(item));
            }
        }
        if let Some(reply) = data.get_mut("reply") {
            self.intern(reply);
        }
        Ok(value)
    }
}

fn write_elements(page: &mut Vec<u8>, trace: &Trace) -> serde_json::Result<()> {
    // Pages keep what trace files keep: an image's bytes only when it is small.
    agent_op::attachment::with_bytes_up_to(agent_op::attachment::TRACE_IMAGE_BYTES, || {
        write_parts(page, trace)
    })
}

fn write_parts(page: &mut Vec<u8>, trace: &Trace) -> serde_json::Result<()> {
    // The header is the trace's own serialization without `events`; building it field by
    // field means a field added to `Trace` fails to compile here instead of going missing.
    let header = Trace {
        id: trace.id.clone(),
        parent_id: trace.parent_id.clone(),
        start: trace.start,
        end: trace.end,
        events: Vec::new(),
    };
    let mut header = serde_json::to_value(&header)?;
    if let Some(fields) = header.as_object_mut() {
        fields.remove("events");
    }
    page.extend_from_slice(DATA_OPEN.as_bytes());
    page.extend_from_slice(format!(" data-events=\"{}\">", trace.events.len()).as_bytes());
    serde_json::to_writer(ScriptSafe(&mut *page), &header)?;
    page.extend_from_slice(b"</script>\n");
    let mut chunk_start = None;
    let mut contents = Contents::default();
    for entry in &trace.events {
        match chunk_start {
            Some(start) if page.len() - start < CHUNK_BYTES => page.push(b','),
            Some(_) => {
                page.extend_from_slice(b"]</script>\n");
                page.extend_from_slice(EVENTS_OPEN);
                chunk_start = Some(page.len());
            }
            None => {
                page.extend_from_slice(EVENTS_OPEN);
                chunk_start = Some(page.len());
            }
        }
        if entry.event.kind.has_shared_content() {
            serde_json::to_writer(ScriptSafe(&mut *page), &contents.entry(entry)?)?;
        } else {
            serde_json::to_writer(ScriptSafe(&mut *page), entry)?;
        }
    }
    if chunk_start.is_some() {
        page.extend_from_slice(b"]</script>\n");
    }
    if !contents.texts.is_empty() {
        page.extend_from_slice(CONTENT_OPEN);
        for (i, text) in contents.texts.iter().enumerate() {
            if i > 0 {
                page.push(b',');
            }
            // Each text is JSON this function wrote; only `<` and `>` need escaping.
            ScriptSafe(&mut *page)
                .write_all(text.as_bytes())
                .map_err(serde_json::Error::io)?;
        }
        page.extend_from_slice(b"]</script>\n");
    }
    Ok(())
}

/// Escapes `<` and `>` as `\u003c` and `\u003e`. Both can only occur inside JSON strings,
/// where the escapes mean the same, and without `<` the HTML parser can neither meet
/// `</script>` nor enter the comment-like states (`<!--`) that change where the element ends.
struct ScriptSafe<'a>(&'a mut Vec<u8>);

impl Write for ScriptSafe<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut start = 0;
        for (i, &b) in buf.iter().enumerate() {
            let escape: &[u8] = match b {
                b'<' => b"\\u003c",
                b'>' => b"\\u003e",
                _ => continue,
            };
            self.0.extend_from_slice(&buf[start..i]);
            self.0.extend_from_slice(escape);
            start = i + 1;
        }
        self.0.extend_from_slice(&buf[start..]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn escape_html(page: &mut Vec<u8>, text: &str) {
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        let escape: &[u8] = match b {
            b'&' => b"&amp;",
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'"' => b"&quot;",
            b'\'' => b"&#39;",
            _ => continue,
        };
        page.extend_from_slice(&text.as_bytes()[start..i]);
        page.extend_from_slice(escape);
        start = i + 1;
    }
    page.extend_from_slice(&text.as_bytes()[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_safe_escapes_only_angle_brackets() {
        let mut out = Vec::new();
        let mut w = ScriptSafe(&mut out);
        w.write_all(br#"{"a":"</script><!--x-->"}"#).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":"\u003c/script\u003e\u003c!--x--\u003e"}"#
        );
    }

    #[test]
    fn titles_are_escaped() {
        let mut out = Vec::new();
        escape_html(&mut out, r#"<b>"R&D's"</b>"#);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "&lt;b&gt;&quot;R&amp;D&#39;s&quot;&lt;/b&gt;"
        );
    }

    #[test]
    fn the_template_has_every_part_once_and_the_parts_cannot_end_their_elements() {
        for marker in ["{{style}}", "{{script}}", "{{data}}"] {
            assert_eq!(TEMPLATE.matches(marker).count(), 1, "{marker}");
        }
        let (style, script) = (STYLE.to_ascii_lowercase(), SCRIPT.to_ascii_lowercase());
        assert!(
            !style.contains("</style"),
            "the style would end its element"
        );
        assert!(
            !script.contains("</script"),
            "the script would end its element"
        );
        assert!(
            !script.contains("<!--"),
            "the script would change how it is parsed"
        );
    }
}
